"""Policies: how the agent thinks. Looked up by name; each module is imported only when chosen."""

from __future__ import annotations

from importlib import import_module

from ..backends.base import Backend
from ..errors import ConfigError
from ..settings import Settings
from .base import CandidateResult, Policy

POLICIES: dict[str, tuple[str, str]] = {
    "full_history": ("lava.policies.full_history", "FullHistoryPolicy"),
    "magma": ("lava.policies.magma", "MagmaPolicy"),
}


def create_policy(settings: Settings, backend: Backend) -> Policy:
    """The named policy, wrapped so MAGMA-GEN's coaching corrections (`extra_keys.coaching`) apply to it."""
    try:
        module, cls = POLICIES[settings.policy]
    except KeyError:
        raise ConfigError(f"unknown policy {settings.policy!r}; choose one of {', '.join(POLICIES)}") from None
    policy_cls: type[Policy] = getattr(import_module(module), cls)
    # Here, not at the top: the wrapper builds on this package's modules, and is imported first at times.
    from ..coaching.reinjection import CoachingReinjection

    return CoachingReinjection(policy_cls(backend, settings))


__all__ = ["POLICIES", "CandidateResult", "Policy", "create_policy"]
