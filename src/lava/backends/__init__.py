"""Model backends, looked up by name and imported lazily: choosing `openai` never imports llama.cpp."""

from __future__ import annotations

from ..errors import ConfigError
from ..settings import Settings
from .base import Backend, Capabilities, Completion, GenerationRequest, Message, Usage


def create_backend(settings: Settings) -> Backend:
    """The backend `settings.backend` names, configured but not started."""
    if settings.backend == "scripted":
        from .scripted import ScriptedBackend

        return ScriptedBackend.from_file(settings.script, delay_s=settings.scripted_delay_s)
    raise ConfigError(f"backend {settings.backend!r} is not available in this build")


__all__ = ["Backend", "Capabilities", "Completion", "GenerationRequest", "Message", "Usage", "create_backend"]
