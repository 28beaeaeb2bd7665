"""`lava serve`, and the operator's commands around it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__, bench, conformance
from .errors import ConfigError
from .evaluation.local_benchmark import DEFAULT_MAX_TOOL_CALLS
from .settings import Settings

# Young-generation threshold of the serving process (see serve).
GC_YOUNG_THRESHOLD = 10_000


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the agent server (MAGMA agent protocol 2.0)")
    serve.add_argument("--config", type=Path, help="TOML config file (also LAVA_CONFIG)")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8888)")
    serve.add_argument("--backend", choices=["local", "openai", "gemini", "scripted"], help="default: local")
    serve.add_argument("--policy", help="decision policy: magma (default) or full_history")
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
    import gc

    import uvicorn

    from .app import create_app
    from .logs import configure_logging
    from .security import Redactor

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
    configure_logging(settings.log_level, settings.log_format, Redactor.from_settings(settings))
    app = create_app(settings)
    # Everything made so far (modules, pydantic validators, templates) lives as long as the process:
    # frozen out of the collector, so its full collections stop walking ~100,000 objects that can
    # never be garbage (measured: about 1 ms per request on average, on a GEN batch).
    gc.collect()
    gc.freeze()
    # A GEN batch keeps a few thousand containers alive at once (the parsed body, the candidates'
    # memory copies, steps, outputs), almost all freed by reference counting when it is answered.
    # At the default young-generation threshold (700) that peak alone sets off one or two
    # collections per request, each walking all of them (measured: ~0.15 ms per GEN batch); above
    # the peak, collections run only for what really accumulates.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    # log_config=None: uvicorn's records go to the root handler above: ids stamped, secrets masked.
    # On SIGTERM uvicorn stops accepting, lets in-flight requests finish (up to the grace), then exits.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False,
                log_config=None, timeout_graceful_shutdown=settings.shutdown_grace_s)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("eval", help="run the real MAGMA-BENCH on a suite of scenarios against lava")
    run.add_argument("suite", nargs="?", default="all",
                     help="a suite file, or a shipped suite: all, single-robot, smoke")
    run.add_argument("--agent", default="", metavar="ARGS",
                     help='`lava serve` arguments of the agent under test, e.g. "--policy full_history"')
    run.add_argument("--compare", metavar="ARGS", help="a second configuration, run on the same episodes")
    run.add_argument("--agent-url", help="evaluate an agent that is already running at this URL instead")
    run.add_argument("--out", type=Path, default=Path("runs") / "eval", help="where runs and reports go")
    run.add_argument("--magma-env", type=Path, help="MAGMA consumer env.sh (default /tmp/magma-e2e/env.sh)")
    run.add_argument("--max-tool-calls", type=_positive, default=DEFAULT_MAX_TOOL_CALLS, metavar="N",
                     help="the tool-call budget MAGMA-GEN's generator fills when it expands a definition: "
                          "the default 10 makes short episodes of one or two requests, 40 (MAGMA-GEN's own "
                          "default) longer ones that carry rules, cycles and removals across requests")
    run.add_argument("--episode-timeout", type=float,
                     help="seconds allowed per episode (default 90 per tool call of the budget, at least 900)")
    run.add_argument("--execution-errors", action="store_true",
                     help="MAGMA-BENCH's execution_error condition: the first call of each action stage that its "
                          "tools let fail fails once ('... temporary execution error. Please retry.')")


def evaluate(args: argparse.Namespace) -> int:
    import shlex
    import signal

    from .evaluation.consumer import MagmaEnvironment
    from .evaluation.runner import AgentConfig, render_table, run_eval, write_report
    from .evaluation.suite import load_suite

    entries = load_suite(args.suite)
    configs = [AgentConfig("a" if args.compare else "lava", tuple(shlex.split(args.agent)), args.agent_url)]
    if args.compare:
        configs.append(AgentConfig("b", tuple(shlex.split(args.compare))))
    magma = MagmaEnvironment.discover(args.magma_env)
    args.out.mkdir(parents=True, exist_ok=True)
    # SIGTERM's default ends the process on the spot, leaving the agent, planner and simulator it
    # started running; as an exit, it goes through the cleanup that stops each of them.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    episode_timeout = args.episode_timeout or max(900.0, 90.0 * args.max_tool_calls)
    reports = run_eval(entries, configs, args.out, magma, episode_timeout_s=episode_timeout,
                       execution_errors=args.execution_errors, max_tool_calls=args.max_tool_calls)
    condition = "execution_error" if args.execution_errors else "clean"
    print(f"condition: {condition}; definitions expanded to {args.max_tool_calls} tool calls\n")
    print(render_table(reports))
    write_report(reports, args.out / "report.json", condition, args.max_tool_calls)
    print(f"\nreport: {args.out / 'report.json'}")
    for report in reports:
        for scenario in report.scenarios:
            for failure in scenario.failures:
                print(f"  [{report.config.label}] {failure['episode']}: {failure['status']} -> {failure['trace']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lava", description="lava: an agent server for MAGMA")
    parser.add_argument("--version", action="version", version=f"lava {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _eval_parser(sub)
    bench.add_parser(sub)
    conformance.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "eval":
            return evaluate(args)
        if args.command == "bench":
            return bench.run(args)
        if args.command == "check":
            return conformance.run(args)
    except ConfigError as exc:
        print(f"lava: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
