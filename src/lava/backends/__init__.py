"""Model backends, looked up by name and imported lazily: choosing `openai` never imports llama.cpp."""

from __future__ import annotations

from ..errors import ConfigError
from ..settings import Settings
from .base import Backend, Capabilities, Completion, GenerationRequest, Message, Usage


def create_backend(settings: Settings) -> Backend:
    """The backend `settings.backend` names, configured but not started."""
    if settings.backend == "scripted":
        from .scripted import ScriptedBackend

        # A server keeps none of its requests: nothing reads them there, and each holds a whole
        # parsed input alive for the garbage collector to walk again and again.
        return ScriptedBackend.from_file(settings.script, delay_s=settings.scripted_delay_s, keep_requests=0)
    if settings.backend == "local":
        from .local import LocalBackend

        return LocalBackend(
            settings.model_path,
            embedded_model=settings.embedded_model,
            cache_dir=settings.cache_dir,
            context_tokens=settings.context_tokens,
            threads=settings.threads,
        )
    if settings.backend in ("openai", "gemini"):
        from .retry import RetryPolicy

        retry = RetryPolicy(attempts=settings.backend_attempts, call_timeout_s=settings.backend_timeout_s)
        if settings.backend == "openai":
            from .openai_compat import OpenAICompatBackend

            key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
            return OpenAICompatBackend(model=settings.model, base_url=settings.base_url, api_key=key,
                                       profile=settings.server_profile, api=settings.openai_api, retry=retry)
        from .gemini import GeminiBackend

        key = settings.gemini_api_key.get_secret_value() if settings.gemini_api_key else None
        return GeminiBackend(model=settings.model, api_key=key, base_url=settings.base_url, retry=retry)
    raise ConfigError(f"backend {settings.backend!r} is not available in this build")


__all__ = ["Backend", "Capabilities", "Completion", "GenerationRequest", "Message", "Usage", "create_backend"]
