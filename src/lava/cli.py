"""`lava serve`, and the operator's commands around it."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from . import __version__
from .errors import ConfigError
from .settings import Settings


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the agent server (MAGMA agent protocol 2.0)")
    serve.add_argument("--config", type=Path, help="TOML config file (also LAVA_CONFIG)")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8888)")
    serve.add_argument("--backend", choices=["local", "openai", "gemini", "scripted"], help="default: local")
    serve.add_argument("--policy", help="decision policy (default full_history)")
    serve.add_argument("--model", help="model name for remote backends")
    serve.add_argument("--model-path", type=Path, help="a GGUF file for the local backend")
    serve.add_argument("--base-url", help="OpenAI-compatible server URL")
    profiles = ["openai", "vllm", "llama-cpp", "ollama", "gemini-openai", "generic"]
    serve.add_argument("--server-profile", choices=profiles,
                       help="what the OpenAI-compatible server honours (guessed from --base-url)")
    serve.add_argument("--embedded-model", choices=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"],
                       help="embedded model of the local backend")
    serve.add_argument("--script", type=Path, help="JSON script for the scripted backend")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    settings = Settings.load(
        args.config,
        host=args.host,
        port=args.port,
        backend=args.backend,
        policy=args.policy,
        model=args.model,
        model_path=args.model_path,
        base_url=args.base_url,
        script=args.script,
        server_profile=args.server_profile,
        embedded_model=args.embedded_model,
        log_level=args.log_level,
    )
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lava", description="lava: an agent server for MAGMA")
    parser.add_argument("--version", action="version", version=f"lava {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
    except ConfigError as exc:
        print(f"lava: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
