"""Every exception lava raises on purpose, in one place.

    LavaError
    ├── InvalidInput          -> HTTP 422; the request is malformed for lava (names the field)
    ├── Overloaded            -> HTTP 503; the server's queue is full
    ├── ConfigError           -> refused at start-up (bad settings, missing extra, bad model file)
    │   └── MissingExtra      (also an ImportError, so `except ImportError` keeps working)
    └── CandidateError        -> one error candidate; the rest of the request is unaffected
        ├── BackendError      the model could not be asked (code says why)
        │   ├── BackendUnavailable   connection refused, DNS, not loaded
        │   ├── BackendTimeout       no answer in time
        │   ├── BackendRateLimited   429 after retries
        │   └── BackendResponseError 4xx/5xx or a body we cannot read
        ├── InvalidOutput     the model answered, but no valid decision could be made of it
        ├── InvalidCoaching   an `extra_keys.coaching` payload lava cannot apply
        └── DeadlineExceeded  the request's deadline passed before this candidate finished

Candidate errors carry the protocol `code` and the `component` that failed, so mapping them to
an `AgentError` never needs string matching.
"""

from __future__ import annotations


class LavaError(Exception):
    """Base of every deliberate lava failure."""


class InvalidInput(LavaError):
    """Input that is valid protocol but unusable by lava; `loc` names the field like pydantic does."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message

    def at(self, *prefix: str | int) -> InvalidInput:
        return InvalidInput((*prefix, *self.loc), self.message)

    @property
    def field(self) -> str:
        return ".".join(str(part) for part in self.loc)


class Overloaded(LavaError):
    """Too many requests are queued; answering 503 is kinder than growing without bound."""


class ConfigError(LavaError):
    """Settings or installation that cannot work; raised before the server accepts requests."""


class MissingExtra(ConfigError, ImportError):
    def __init__(self, feature: str, extra: str, package: str) -> None:
        super().__init__(
            f"{feature} needs the optional package {package!r}: "
            f"install it with  pip install 'lava-agent[{extra}]'"
        )
        self.extra = extra


class CandidateError(LavaError):
    code = "internal_error"

    def __init__(self, message: str, *, component: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.component = component


class BackendError(CandidateError):
    code = "backend_error"

    def __init__(self, message: str, *, component: str | None = None, status: int | None = None) -> None:
        super().__init__(message, component=component)
        self.status = status  # the HTTP status a remote server answered, when there was one


class BackendUnavailable(BackendError):
    code = "backend_unavailable"


class BackendTimeout(BackendError):
    code = "backend_timeout"


class BackendRateLimited(BackendError):
    code = "backend_rate_limited"


class BackendResponseError(BackendError):
    code = "backend_error"


class InvalidOutput(CandidateError):
    code = "invalid_output"


class InvalidCoaching(CandidateError):
    code = "invalid_coaching"


class DeadlineExceeded(CandidateError):
    code = "deadline_exceeded"


__all__ = [
    "BackendError",
    "BackendRateLimited",
    "BackendResponseError",
    "BackendTimeout",
    "BackendUnavailable",
    "CandidateError",
    "ConfigError",
    "DeadlineExceeded",
    "InvalidCoaching",
    "InvalidInput",
    "InvalidOutput",
    "LavaError",
    "MissingExtra",
    "Overloaded",
]
