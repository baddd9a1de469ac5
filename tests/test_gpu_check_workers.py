"""gpu-check's CUDA-test part: how many test processes share the GPU, and how many processes each lets
Inductor compile in (all of them together, one per core)."""

from __future__ import annotations

import importlib.util
import os

from gcbench.commands.gpu_check import parts


def test_test_processes_and_their_compile_processes_are_one_per_core_in_all(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # pytest-xdist is there
    assert parts.cuda_test_workers() == 8 and parts.xdist_options(8) == ["-n", "8"]
    assert parts.compile_env(8, {"A": "1"}) == {"A": "1", "TORCHINDUCTOR_COMPILE_THREADS": "2"}
    assert parts.compile_env(1, {})["TORCHINDUCTOR_COMPILE_THREADS"] == "16"
    assert parts.compile_env(8, {"TORCHINDUCTOR_COMPILE_THREADS": "4"}) == {"TORCHINDUCTOR_COMPILE_THREADS": "4"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert parts.cuda_test_workers() == 1 and parts.xdist_options(1) == []


def test_the_cuda_test_run_gets_the_workers_and_their_compile_processes(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import pytest\n@pytest.mark.cuda\ndef test_a(): pass\n")
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(parts, "cuda_test_workers", lambda: 8)
    seen = {}

    def boxed(cmd, *, seconds, log, cwd, env):
        seen.update(cmd=cmd, env=env)
        log.write_text("")
        return 0

    monkeypatch.setattr(parts, "run_boxed", boxed)
    got = parts.run_cuda_tests(tmp_path, tmp_path, 60)
    assert seen["cmd"][seen["cmd"].index("-n") + 1] == "8"
    assert seen["env"]["TORCHINDUCTOR_COMPILE_THREADS"] == "2"
    assert got["workers"] == 8 and got["compile_threads"] == "2"
