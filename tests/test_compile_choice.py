"""The per-machine choice between a path's eager and compiled implementations
(compressors/kernels/choice.py): measured once with the path's probe, kept in memory and in a JSON
file keyed by the machine, read back by a later process, and consulted only in ``auto`` mode.

The probes here are stand-ins whose slow mode advances a fake clock (the module's ``time``, replaced
by the ``fake_clock`` fixture): which mode wins is fixed by construction, whatever the machine's load, so these
tests check the bookkeeping, not any kernel's speed (the bench does that).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from gcbench.compressors.kernels import choice
from gcbench.compressors.kernels import core as fused


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(choice.CACHE_ENV, str(tmp_path))
    choice.forget()
    yield tmp_path / choice.CACHE_FILE
    choice.forget()


#: The clock ``choice`` reads in these tests: seconds that only the probes advance.
CLOCK = SimpleNamespace(now=0.0)


@pytest.fixture
def fake_clock(monkeypatch):
    CLOCK.now = 0.0
    monkeypatch.setattr(choice, "time", SimpleNamespace(perf_counter=lambda: CLOCK.now))


def _probe(slow: str, calls: list[str]):
    def run(mode: str) -> None:
        calls.append(mode)
        CLOCK.now += 0.003 if mode == slow else 0.001
    return run


@pytest.mark.usefixtures("fake_clock")
def test_choice_is_measured_once_and_cached_on_disk(cache):
    calls: list[str] = []
    choice.register("test-slow-compiled", _probe("compiled", calls))
    assert choice.prefers_compiled("test-slow-compiled", fused.forced) is False
    measured = len(calls)
    assert measured == 2 * (choice.PROBE_REPEATS + 1)
    data = json.loads(cache.read_text())
    record = data[choice.machine_key()]["test-slow-compiled"]
    assert record["compiled"] is False and record["compiled_s"] > record["eager_s"]
    # memory, then the file (another process): no second measurement
    assert choice.prefers_compiled("test-slow-compiled", fused.forced) is False
    choice.forget()
    assert choice.prefers_compiled("test-slow-compiled", fused.forced) is False
    assert len(calls) == measured


@pytest.mark.usefixtures("fake_clock")
def test_faster_compiled_path_is_chosen_and_the_key_names_threads_and_torch(cache):
    choice.register("test-slow-eager", _probe("eager", []))
    assert choice.prefers_compiled("test-slow-eager", fused.forced) is True
    key = choice.machine_key()
    assert "/threads-" in key and "/torch-" in key


@pytest.mark.usefixtures("fake_clock")
def test_unreadable_cache_is_measured_again(cache):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("{not json")
    calls: list[str] = []
    choice.register("test-corrupt", _probe("compiled", calls))
    assert choice.prefers_compiled("test-corrupt", fused.forced) is False
    assert calls and json.loads(cache.read_text())[choice.machine_key()]["test-corrupt"]["compiled"] is False


@pytest.mark.usefixtures("fake_clock")
def test_only_auto_mode_consults_the_choice(cache):
    calls: list[str] = []
    choice.register("test-mode", _probe("compiled", calls))
    big = fused.AUTO_MIN_NUMEL
    with fused.forced("compiled"):
        assert fused.use_compiled(big, "test-mode") is True
    with fused.forced("eager"):
        assert fused.use_compiled(big, "test-mode") is False
    assert not calls
    with fused.forced("auto"):
        assert fused.use_compiled(big - 1, "test-mode") is False  # below the size rule: no probe
        assert not calls
        assert fused.use_compiled(big, "test-mode") is False  # measured: eager is faster
        assert fused.use_compiled(big) is True  # a path without a name keeps the size rule
    assert calls


def test_quantizer_paths_have_probes():
    import gcbench.compressors.codecs.qsgd  # noqa: F401 - registers them
    import gcbench.compressors.codecs.sign  # noqa: F401

    assert {"dither", "dequantize", "sign", "sign-decode"} <= choice.registered()


def test_codec_probes_run_and_are_recorded(cache, monkeypatch):
    """The codecs' own probes run (here both "modes" eager, on a small input: no compilation) and
    their timings are recorded per path."""
    import gcbench.compressors.codecs.qsgd  # noqa: F401
    import gcbench.compressors.codecs.sign  # noqa: F401

    monkeypatch.setattr(choice, "PROBE_NUMEL", 1 << 12)
    monkeypatch.setattr(choice, "PROBE_REPEATS", 1)
    paths = ("dither", "dequantize", "sign", "sign-decode")
    runs: list[list[str]] = []  # the modes each measured probe was called in
    measured: list[dict] = []
    real_measure = choice.measure

    def measure(probe, *args, **kwargs):  # the registered probe, its calls counted
        modes: list[str] = []
        runs.append(modes)

        def counted(mode: str) -> None:
            modes.append(mode)
            probe(mode)

        measured.append(real_measure(counted, *args, **kwargs))
        return measured[-1]

    monkeypatch.setattr(choice, "measure", measure)
    eager_only = lambda mode: fused.forced("eager")  # noqa: E731
    answers = {}
    for path in paths:
        answers[path] = choice.prefers_compiled(path, eager_only)
        assert len(measured) == len(answers), f"{path}: not measured"
        # one untimed call and PROBE_REPEATS = 1 timed call per mode
        assert runs[-1] == ["eager", "compiled", "eager", "compiled"], path
    records = json.loads(cache.read_text())[choice.machine_key()]
    assert set(paths) <= set(records)
    for path, produced in zip(paths, measured):
        record = records[path]
        assert "error" not in produced, (path, produced)
        assert record == {**produced, "probe_numel": 1 << 12}, path
        assert 0 < record["eager_s"] < float("inf") and 0 < record["compiled_s"] < float("inf"), path
        assert record["compiled"] is (record["compiled_s"] < record["eager_s"]) is answers[path], path
    # a later process reads the same answers from the file, without measuring again
    choice.forget()
    assert {path: choice.prefers_compiled(path, eager_only) for path in paths} == answers
    assert len(measured) == len(paths)


@pytest.mark.usefixtures("fake_clock")
def test_a_new_thread_count_is_measured_apart(cache):
    import torch

    calls: list[str] = []
    choice.register("test-threads", _probe("compiled", calls))
    before = torch.get_num_threads()
    assert choice.prefers_compiled("test-threads", fused.forced) is False
    measured = len(calls)
    other = 1 if before != 1 else 2
    torch.set_num_threads(other)
    try:
        assert choice.prefers_compiled("test-threads", fused.forced) is False
        assert len(calls) == 2 * measured  # another key: measured again, not served from memory
        assert f"/threads-{other}/" in choice.machine_key()
    finally:
        torch.set_num_threads(before)
    assert choice.prefers_compiled("test-threads", fused.forced) is False
    assert len(calls) == 2 * measured


def test_count_sketch_paths_have_probes():
    from gcbench.compressors.codecs.countsketch import codec  # noqa: F401 - registers its probes

    assert {"sketch-accumulate", "sketch-decode", "dither", "dequantize", "sign", "sign-decode"} <= choice.registered()


def test_a_compiler_failure_makes_the_choice_eager_without_storing_it(cache):
    calls: list[str] = []

    def probe(mode: str) -> None:
        calls.append(mode)
        if mode == "compiled":
            raise RuntimeError("no C++ compiler found")

    choice.register("test-broken", probe)
    assert choice.prefers_compiled("test-broken", fused.forced) is False
    assert calls == ["eager", "compiled"]  # no timed rounds after the failure
    assert not cache.exists() or "test-broken" not in json.loads(cache.read_text()).get(choice.machine_key(), {})


def test_auto_mode_runs_eager_after_a_failed_compilation(monkeypatch):
    import torch

    monkeypatch.setattr(fused, "compile_failures", [])

    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("InductorError: no C++ compiler found")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    kernel = fused.Kernel(lambda x: x * 2.0 + 1.0, "test_broken_compiler")
    x = torch.arange(1 << 15, dtype=torch.float32).view(2, -1)
    with fused.forced("compiled"), pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        kernel(x)
    with fused.forced("auto"), pytest.warns(RuntimeWarning, match="runs eager code"):
        out = kernel(x)
    assert torch.equal(out, x * 2.0 + 1.0)
    assert "test_broken_compiler" in fused.compile_unavailable()
    with fused.forced("auto"):
        assert fused.use_compiled(fused.AUTO_MIN_NUMEL) is False  # every later call: eager
    with fused.forced("compiled"):
        assert fused.use_compiled(1) is True  # compiled stays the user's explicit choice


def test_inductor_cache_is_kept_beside_the_choices_unless_set(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv(choice.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(fused.INDUCTOR_CACHE_ENV, "placeholder")  # restored (or removed) after the test
    monkeypatch.delenv(fused.INDUCTOR_CACHE_ENV)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CPP_MARCH", raising=False)
    mine = tmp_path / "inductor" / choice.code_key()
    assert fused.keep_inductor_cache() == str(mine)
    assert os.environ[fused.INDUCTOR_CACHE_ENV] == str(mine) and mine.is_dir()
    assert choice.code_key().endswith(f"/torch-{torch.__version__}")
    # a process limited to another vector ISA (or another CPU, or torch) keeps its code apart
    monkeypatch.delenv(fused.INDUCTOR_CACHE_ENV)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    limited = fused.keep_inductor_cache()
    assert limited != str(mine) and limited == str(tmp_path / "inductor" / choice.code_key())
    monkeypatch.setenv(fused.INDUCTOR_CACHE_ENV, str(tmp_path / "mine"))
    assert fused.keep_inductor_cache() == str(tmp_path / "mine")  # the user's setting is kept


def test_kernels_compile_an_openmp_region_whatever_their_first_size(monkeypatch):
    """A kernel first compiled on a small input (a test's) must not leave a serial loop in Inductor's
    on-disk cache for later processes: every kernel that does not fix its threads asks for
    ``cpp.dynamic_threads``; one that fixes them (Count Sketch's, one thread by design) keeps that."""
    import torch

    seen: list[dict] = []

    def capture(fn, **kwargs):
        seen.append(kwargs.get("options") or {})
        return fn

    monkeypatch.setattr(torch, "compile", capture)
    x = torch.ones(4, 1 << 13)
    with fused.forced("compiled"):
        fused.Kernel(lambda t: t + 1.0, "test_free_threads")(x)
        fused.Kernel(lambda t: t + 1.0, "test_fixed_threads", {"cpp.threads": 1})(x)
    assert seen[0].get("cpp.dynamic_threads") is True and seen[0]["cpp.threads"] == torch.get_num_threads()
    assert "cpp.dynamic_threads" not in seen[1] and seen[1]["cpp.threads"] == 1


def test_isa_limits_are_part_of_the_key(cache, monkeypatch):
    """A run limited to AVX2 on an AVX-512 machine (torch's ATEN_CPU_CAPABILITY, Inductor's and the C
    kernels' TORCHINDUCTOR_CPP_MARCH) measures and keeps its own choices."""
    for name in choice.ISA_ENVS:
        monkeypatch.delenv(name, raising=False)
    plain = choice.machine_key()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    avx2 = choice.machine_key()
    monkeypatch.setenv("TORCHINDUCTOR_CPP_MARCH", "x86-64-v3")
    assert len({plain, avx2, choice.machine_key()}) == 3


def test_c_kernels_follow_inductors_march(tmp_path):
    """TORCHINDUCTOR_CPP_MARCH sets the C kernels' -march as it sets Inductor's (unset: native; empty:
    none); a compiler that always fails shows the flags it was given, in a fresh process with an
    empty cache."""
    import os
    import subprocess
    import sys

    script = (
        "from gcbench.compressors.kernels import native\n"
        "assert native.library('zero_run') is None\n"
        "print(native.failure('zero_run'))\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CPP_MARCH"}
    for march, want in (("x86-64-v3", "-march=x86-64-v3"), (None, "-march=native"), ("", None)):
        env = {**base, "CC": "false", "GCBENCH_CACHE_DIR": str(tmp_path)}
        if march is not None:
            env["TORCHINDUCTOR_CPP_MARCH"] = march
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert (want in run.stdout) if want else ("-march" not in run.stdout and "-O3" in run.stdout), run.stdout


def test_a_probe_input_is_built_for_the_current_probe_size(monkeypatch):
    """A probe's input follows PROBE_NUMEL: one kept from a smaller size (a test's) would be timed and
    recorded as PROBE_NUMEL values, and decide the user's mode on a few microseconds."""
    built: list[int] = []

    def build(n: int) -> torch.Tensor:
        built.append(n)
        return torch.zeros(n)

    monkeypatch.setattr(choice, "PROBE_NUMEL", 1 << 12)
    assert choice.probe_input("test-size", build).numel() == 1 << 12
    assert choice.probe_input("test-size", build).numel() == 1 << 12  # kept, not built again
    monkeypatch.setattr(choice, "PROBE_NUMEL", 1 << 13)
    assert choice.probe_input("test-size", build).numel() == 1 << 13
    assert built == [1 << 12, 1 << 13]


def test_every_codec_probe_times_an_input_of_the_current_probe_size(cache, monkeypatch):
    """Each registered codec probe takes its input from probe_input, at PROBE_NUMEL values."""
    import gcbench.compressors.codecs.countsketch.codec  # noqa: F401 - registers their probes
    import gcbench.compressors.codecs.qsgd  # noqa: F401
    import gcbench.compressors.codecs.sign  # noqa: F401

    sizes: dict[str, list[int]] = {}
    real = choice.probe_input

    def recording(owner, build):
        value = real(owner, build)
        sizes.setdefault(owner, []).append(choice.PROBE_NUMEL)
        return value

    monkeypatch.setattr(choice, "probe_input", recording)
    monkeypatch.setattr(choice, "PROBE_NUMEL", 1 << 12)
    monkeypatch.setattr(choice, "PROBE_REPEATS", 1)
    eager_only = lambda mode: fused.forced("eager")  # noqa: E731
    for path in ("dither", "dequantize", "sign", "sign-decode", "sketch-accumulate", "sketch-decode"):
        before = sum(map(len, sizes.values()))
        choice.prefers_compiled(path, eager_only)
        assert sum(map(len, sizes.values())) > before, f"{path}'s probe does not take its input from probe_input"
    assert set(sizes) == {"rounding", "sign", "countsketch"}
    assert all(n == 1 << 12 for ns in sizes.values() for n in ns)


def test_the_suite_records_no_choice_in_the_users_cache(monkeypatch):
    """tests/conftest.py: without GCBENCH_CACHE_DIR the choices go to the test run's temporary folder."""
    import os
    from pathlib import Path

    monkeypatch.delenv(choice.CACHE_ENV, raising=False)
    home_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    assert home_cache not in choice.cache_path().parents
