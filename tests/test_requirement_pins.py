"""The pinned environments in envs/: the CUDA file is the CPU file's set (its header says so), and
every direct dependency of pyproject.toml is pinned in both (gcbench installs with ``--no-deps``, so a
missing pin is a missing package: e.g. ISA-L's CRC-32 would quietly fall back to zlib's)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "envs" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            package, version = line.split("==")
            pins[package.lower().replace("_", "-")] = version
    return pins


def test_the_cuda_file_pins_the_cpu_set():
    assert _pins("requirements-cuda.txt") == _pins("requirements-cpu.txt")


@pytest.mark.parametrize("name", ["requirements-cpu.txt", "requirements-cuda.txt"])
def test_every_direct_dependency_is_pinned(name):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set()
    for dependency in map(Requirement, project["dependencies"]):
        if dependency.marker is None or dependency.marker.evaluate():  # the Python the pins are for
            wanted.add(dependency.name.lower().replace("_", "-"))
    assert sorted(wanted - set(_pins(name))) == []
