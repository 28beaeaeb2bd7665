"""All configuration, in one pydantic-settings object. Nothing else in lava reads the environment.

Precedence, highest first: CLI flags (passed as keyword arguments), `LAVA_*` environment
variables, the TOML config file (`--config FILE` or `LAVA_CONFIG`), then the defaults below.
API keys also come from the providers' usual variables (`OPENAI_API_KEY`, `GEMINI_API_KEY`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

BackendName = Literal["local", "openai", "gemini", "scripted"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAVA_", extra="forbid", populate_by_name=True)

    # -- server
    host: str = Field("127.0.0.1", description="Interface to listen on; loopback unless told otherwise.")
    port: int = Field(8888, ge=0, le=65535, description="Port; MAGMA's default agent address uses 8888.")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0, description="Larger request bodies get 413.")
    max_candidates: int = Field(1024, gt=0, description="Cap on sum of num_outputs per request (422 above).")
    max_concurrency: int = Field(
        16, gt=0, description="Inputs decided at the same time (across requests); a GEN batch has up to 10."
    )
    request_deadline_s: float = Field(
        300.0, gt=0, description="Every candidate is answered within this; below the consumers' 360 s."
    )
    max_pending_requests: int = Field(
        512, gt=0, description="Requests answered or waiting at once; more get 503 instead of a growing queue."
    )
    max_history_entries: int = Field(
        20_000, gt=0, description="Cap on memory.history entries per input (422 above)."
    )
    auth_token: SecretStr | None = Field(
        None, description="When set, every route but /health needs 'Authorization: Bearer <token>'. "
        "MAGMA's consumers send none: set it only behind a proxy that adds it."
    )
    shutdown_grace_s: float = Field(
        330.0, ge=0, description="On SIGTERM, how long in-flight requests may still finish."
    )

    # -- observability
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as text for people or as JSON objects (one a line) for log pipelines."
    )
    trace_buffer_size: int = Field(
        200, ge=0, description="Recent requests kept in memory for the /ui trace page; 0 records none."
    )
    trace_buffer_bytes: int = Field(
        64 * 1024 * 1024, gt=0,
        description="Request and answer bytes the /ui buffer may hold; the oldest requests go first.",
    )
    ui_allow_remote: bool = Field(
        False, description="Serve /ui beyond loopback (it shows prompts and memories: mind who can reach it)."
    )
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        "none", description="OpenTelemetry traces: off, printed, or sent over OTLP/HTTP (OTEL_EXPORTER_OTLP_* env)."
    )

    # -- decision making
    backend: BackendName = Field("local", description="Which model decides: local, openai, gemini, scripted.")
    policy: str = Field("magma", description="How the agent thinks (see lava.policies; README, Policies).")
    model: str | None = Field(None, description="Model name for remote backends.")
    model_path: Path | None = Field(None, description="A GGUF file for the local backend instead of the default.")
    embedded_model: Literal["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"] = Field(
        "qwen2.5-coder-0.5b", description="Which embedded model the local backend loads."
    )
    cache_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "lava", description="Where joined model files live."
    )
    context_tokens: int = Field(16384, gt=0, description="KV cache of the local model, shared by its sequences.")
    threads: int | None = Field(None, gt=0, description="CPU threads for the local model (default: all).")
    base_url: str | None = Field(None, description="OpenAI-compatible server URL (vLLM, llama.cpp, Ollama, ...).")
    server_profile: Literal["openai", "vllm", "llama-cpp", "ollama", "gemini-openai", "generic"] | None = Field(
        None, description="What the OpenAI-compatible server honours; guessed from base_url when unset."
    )
    openai_api: Literal["chat", "responses"] = Field("chat", description="OpenAI API: Chat Completions or Responses.")
    backend_timeout_s: float = Field(120.0, gt=0, description="Longest single call to a remote model.")
    backend_attempts: int = Field(4, ge=1, description="Attempts per remote call (transient failures only).")
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("LAVA_OPENAI_API_KEY", "OPENAI_API_KEY", "openai_api_key")
    )
    gemini_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("LAVA_GEMINI_API_KEY", "GEMINI_API_KEY", "gemini_api_key")
    )
    temperature: float = Field(0.7, ge=0, description="Sampling temperature when not in inference mode.")
    max_tokens: int = Field(256, gt=0, description="Most tokens one model answer may have.")
    seed: int = Field(0, description="Base seed; candidates derive their own from it.")
    repair_attempts: int = Field(1, ge=0, description="Model retries with the validator's message.")

    # -- scripted backend
    script: Path | None = Field(None, description="JSON script for --backend scripted (else its rule).")
    scripted_delay_s: float = Field(0.0, ge=0, description="Simulated latency of the scripted backend.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> Settings:
        """Settings from every source; `overrides` (CLI flags) win. None values are ignored."""
        overrides = {key: value for key, value in overrides.items() if value is not None}
        if config_file is None and os.environ.get("LAVA_CONFIG"):
            config_file = Path(os.environ["LAVA_CONFIG"])
        if config_file is None:
            return cls(**overrides)
        if not config_file.is_file():
            from .errors import ConfigError

            raise ConfigError(f"config file {config_file} does not exist")

        class FileSettings(cls):  # type: ignore[valid-type,misc]
            model_config = SettingsConfigDict(toml_file=config_file)

        return FileSettings(**overrides)


__all__ = ["BackendName", "Settings"]
