"""The arithmetic and judging of ``gcbench bench`` and ``bench-train``, on synthetic numbers.

Every check here feeds made-up timings (a replaced timer, replaced timed rounds, a replaced profiler)
or made-up rows to the code that turns timings into ratios, rates, verdicts and table cells: no
speed is measured or asserted. Covered: the targets' limits and boundaries, which target set and
which stated size a row is judged by, the same-run baselines and the ratios and rates derived from
the medians, the order of interleaved rounds, per-stage profiler times, the table's cells, the option
bounds, the DDP step-time summary and the timer itself.
"""

from __future__ import annotations

import re
import statistics
from types import SimpleNamespace

import pytest
import torch

import gcbench.bench.harness as harness
import gcbench.bench.rounds as rounds
import gcbench.bench.targets as targets
import gcbench.measure.timing as timing
from gcbench.bench.harness import BenchRow, bench_codec, run_bench
from gcbench.bench.limits import (
    BENCH_BYTES_PER_ELEMENT,
    MAX_BENCH_SIZE,
    bench_train_rank_bytes,
    check_bench_size,
    check_bench_train,
)
from gcbench.bench.table import COLUMNS, row_cells
from gcbench.bench.targets import GPU_TARGETS, NOT_JUDGED, STATED_NUMEL, TARGETS, verdict
from gcbench.bench.train import NOT_JUDGED as TRAIN_NOT_JUDGED
from gcbench.bench.train import met_text, run_bench_train, summarize, to_markdown
from gcbench.measure.timing import Timing, measure, synchronize

CPU_N = STATED_NUMEL["cpu"]
GPU_N = STATED_NUMEL["cuda"]


def _cell(row: BenchRow, column: str) -> str:
    return row_cells(row)[COLUMNS.index(column)]


# --- targets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu-set", "gpu-set"])  # the sets: no device needed
def test_a_value_exactly_at_the_limit_meets_the_target(device):
    """``<=`` and ``>=`` targets include their limit: a row measured exactly at it is met, on either set."""
    n = STATED_NUMEL[device]
    for name, t in targets.targets_for(device).items():
        for target in t if isinstance(t, tuple) else (t,):
            assert target.met(BenchRow(name, "codec", numel=n, **_values(target, target.limit))) is True, target
    elementwise = targets.targets_of("qsgd", device)[0].limit
    assert verdict(BenchRow("qsgd", "codec", numel=n, total_x_copy=elementwise), device) == "met"
    sk = BenchRow("sketchml", "codec", numel=n, encode_rate=200e6 if device == "cuda" else 20e6, decode_rate=40e6)
    assert verdict(sk, device) == "met"


def _values(target: targets.Target, value: float) -> dict:
    if target.metric.startswith("extra:"):
        return {"extra": {target.metric[len("extra:"):]: value}}
    return {target.metric: value}


def _stated_limit(text: str) -> tuple[str, float]:
    """(comparison, limit) as a target's text states them: ``<= 4x copy``, ``>= 20M pairs/s``, ``<= torch's``."""
    m = re.search(r"(<=|>=) (\d+(?:\.\d+)?)(M?)(?:x| pairs/s)", text)
    if m is None:
        assert "<= torch's" in text, text
        return "<=", 1.0
    return m.group(1), float(m.group(2)) * (1e6 if m.group(3) else 1.0)


def test_every_target_judges_by_the_limit_and_direction_its_text_states():
    """The text shown in the ``target`` column is what is checked: same limit, same comparison."""
    for table in (TARGETS, GPU_TARGETS):
        for t in table.values():
            for target in t if isinstance(t, tuple) else (t,):
                op, limit = _stated_limit(target.text)
                assert target.limit == limit, target
                assert target.upper == (op == "<="), target


def test_the_stated_sizes_are_those_the_targets_module_documents():
    """The CPU set is stated for 25M float32 elements and the CUDA set for 64M (64 * 2**20)."""
    assert STATED_NUMEL == {"cpu": 25_000_000, "cuda": 64 * 2**20}
    assert "25M float32 elements" in targets.__doc__ and "64M float32 elements" in targets.__doc__
    assert verdict(BenchRow("qsgd", "codec", numel=GPU_N - 1, total_x_copy=1.0), "cuda") == NOT_JUDGED


def test_the_cuda_set_covers_every_cpu_row_but_the_error_feedback_entries():
    """Each row with a CPU target has a CUDA one measuring the same quantity in the same direction, except
    3LC and EF-signSGD with their error accumulation (their inner codecs, ``(no EF)``, do have one)."""
    assert set(GPU_TARGETS) == set(TARGETS) - {"3lc", "ef-signsgd"}
    for name in GPU_TARGETS:
        cpu = {(t.metric, t.upper) for t in targets.targets_of(name, "cpu")}
        gpu = {(t.metric, t.upper) for t in targets.targets_of(name, "cuda")}
        assert gpu <= cpu, name


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu-set", "gpu-set"])
def test_powersgd_is_judged_by_its_time_against_torchs(device):
    """The ResNet-50 PowerSGD row's target reads ``time_vs_torch`` from the row's extra values."""
    row = BenchRow("powersgd [resnet50]", "peer", numel=STATED_NUMEL[device], extra={"time_vs_torch": 0.9})
    assert verdict(row, device) == "met"
    row.extra["time_vs_torch"] = 1.1
    assert verdict(row, device) == "not met"


@pytest.mark.parametrize("status", ["failed", "skipped"])
def test_a_row_that_did_not_run_gets_no_verdict_whatever_it_holds(status):
    """A failed or skipped row has no verdict, even with values that would meet or miss the target."""
    for value in (1.0, 9.0):
        assert verdict(BenchRow("qsgd", "codec", status=status, numel=CPU_N, total_x_copy=value)) is None


def test_a_cuda_row_is_judged_by_the_cuda_limit_of_its_own_quantity():
    """Count Sketch's accumulate is an encode-only stage: its CUDA target reads ``encode_x_copy``."""
    row = BenchRow("countsketch.accumulate", "stage", numel=GPU_N, encode_x_copy=11.0)
    assert verdict(row, "cuda") == "not met"
    row.encode_x_copy = 9.0
    assert verdict(row, "cuda") == "met"


# --- the harness: same-run baselines, ratios and rates --------------------------------------------


@pytest.fixture
def fake_rounds(monkeypatch):
    """Timed rounds replaced: every function still runs (``repeat`` rounds, in order), and its samples are
    the ones set in the returned dict (default: 1 ms each); the separately timed first call takes 1 ms."""
    samples: dict[str, tuple[float, ...]] = {}
    seen: list[dict] = []

    def interleaved(fns, *, repeat, warmup, device):
        seen.append(dict(fns))
        for _ in range(repeat):
            for fn in fns.values():
                fn()
        return {k: Timing(samples.get(k, (1e-3,) * repeat), warmup, str(device)) for k in fns}

    def measure_(fn, *, repeat=5, warmup=1, device="cpu"):
        for _ in range(warmup + repeat):
            fn()
        return Timing((1e-3,) * repeat, warmup, str(device))

    monkeypatch.setattr(harness, "interleaved", interleaved)
    monkeypatch.setattr(harness, "measure", measure_)
    return SimpleNamespace(samples=samples, seen=seen)


def _baseline(x: torch.Tensor):
    return harness.Baseline(x)


def test_ratios_and_rates_are_medians_over_the_rows_own_baselines(fake_rounds):
    """enc/dec over copy_ and clone, (e+d), the allocating decode and the rates all use medians (not the
    fastest or the mean), decode rates the decode's own median."""
    fake_rounds.samples.update({
        "clone": (4.0, 2.0, 100.0), "copy": (1.0, 0.5, 90.0), "encode": (3.0, 1.0, 50.0),
        "decode": (6.0, 5.0, 70.0), "decode new": (8.0, 7.0, 80.0),
    })
    x = torch.randn(8, 16)
    row = bench_codec(harness.compressors.get("fp16"), "fp16", x, _baseline(x), repeat=3, warmup=0)
    assert row.status == "ok", row.error
    clone, copy, enc, dec, new = 4.0, 1.0, 3.0, 6.0, 8.0  # the medians
    assert (row.clone_s, row.copy_s) == (clone, copy)
    assert row.encode_x_copy == enc / copy and row.encode_x_clone == enc / clone
    assert row.decode_x_copy == dec / copy and row.decode_x_clone == dec / clone
    assert row.decode_new_x_copy == new / copy and row.decode_new_x_clone == new / clone
    assert row.total_x_copy == (enc + dec) / copy and row.total_x_clone == (enc + dec) / clone
    assert row.total_new_x_copy == (enc + new) / copy
    assert row.encode_rate == 128 / enc and row.decode_rate == 128 / dec
    assert row.encode["median_s"] == enc and row.encode["min_s"] == 1.0 and row.encode["max_s"] == 50.0


def test_a_call_too_fast_for_the_clock_has_no_rate(fake_rounds):
    """A median of 0 s (a coarse clock) gives no rate instead of a division by zero."""
    fake_rounds.samples.update({"encode": (0.0, 0.0), "decode": (0.0, 0.0)})
    x = torch.randn(4, 4)
    row = bench_codec(harness.compressors.get("fp16"), "fp16", x, _baseline(x), repeat=2, warmup=0)
    assert row.status == "ok", row.error
    assert row.encode_rate is None and row.decode_rate is None and row.encode_x_copy == 0.0


class _CountingCodec:
    """A codec whose every encode returns a new payload; its decodes record which payload they got."""

    def __init__(self) -> None:
        self.encoded: list[object] = []
        self.decoded: list[object] = []

    def encode(self, x, key=None):  # noqa: ANN001, ANN201
        p = SimpleNamespace(nbytes=4 * x.numel(), x=x.clone(), sparse=False)
        self.encoded.append(p)
        return p

    def decode(self, payload, out=None):  # noqa: ANN001, ANN201
        self.decoded.append(payload)
        if out is None:
            return payload.x.clone()
        return out.copy_(payload.x)


def test_each_timed_decode_decodes_the_payload_of_its_rounds_encode(fake_rounds):
    """A stateful codec's steady-state payloads are what the timed decodes read: each decode (into the
    ready buffer, then into a fresh tensor) gets the payload the same round's encode returned."""
    codec = _CountingCodec()
    x = torch.randn(4, 8)
    row = bench_codec(codec, "counting", x, _baseline(x), repeat=3, warmup=0)
    assert row.status == "ok" and row.decode_into is True, row.error
    timed = codec.encoded[-3:]  # the rounds' encodes, after the first (untimed) one
    assert codec.decoded[-6:] == [p for p in timed for _ in range(2)]


def test_run_bench_baselines_and_bandwidth_come_from_the_same_run(fake_rounds):
    """The copy_ baseline writes into one preallocated buffer (clone allocates anew); the baseline rows are
    clone, copy_ and the fp16 cast each over both baselines; copy_GBps counts one read and one write."""
    fake_rounds.samples.update({"clone": (3e-3,), "copy": (2e-3,), "fp16 cast": (5e-3,)})
    size = 24
    meta, rows = run_bench(["identity"], size=size, repeat=1, warmup=0, peers=False, stages=False, raw_ef=False,
                           modes=("eager",))
    fns = fake_rounds.seen[0]
    a, b = fns["copy"](), fns["copy"]()
    assert a.data_ptr() == b.data_ptr() and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    by = {r.name: r for r in rows if r.kind == "baseline"}
    assert [r.name for r in rows if r.kind == "baseline"] == ["clone", "copy", "fp16 cast"]
    assert by["clone"].encode["median_s"] == 3e-3 and by["copy"].encode["median_s"] == 2e-3
    assert by["fp16 cast"].encode["median_s"] == 5e-3 and by["fp16 cast"].encode_x_copy == 5e-3 / 2e-3
    assert by["copy"].encode_x_copy == 1.0 and by["clone"].encode_x_clone == 1.0
    assert meta["copy_GBps"] == pytest.approx(2 * size * 4 / 2e-3 / 1e9)


def test_the_copy_baseline_is_a_copy_into_a_preallocated_buffer():
    """``copy`` is ``dst.copy_(x)``: it returns the same preallocated tensor every call, holding x's values."""
    x = torch.randn(3, 5)
    fns = _baseline(x).fns()
    dst = fns["copy"]()
    assert dst is fns["copy"]() and dst is not x and torch.equal(dst, x)
    assert fns["clone"]() is not fns["clone"]()


def test_rows_of_a_cuda_run_are_judged_by_the_cuda_set(fake_rounds, monkeypatch):
    """A run on a CUDA device judges its rows against the CUDA targets (simulated: the device calls and
    timings are replaced, the tensors stay on the CPU): 3LC with error feedback has no CUDA target, so
    no verdict; a row with a target on a small input is shown unjudged."""
    monkeypatch.setattr(harness, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(harness, "make_dense_input", lambda size, dev: torch.randn(4, size // 4))
    monkeypatch.setattr(harness.torch.cuda, "get_device_name", lambda dev: "a simulated GPU")
    _, rows = run_bench(["3lc", "qsgd"], size=64, device="cuda", repeat=1, warmup=0, peers=False, stages=False,
                        raw_ef=False, modes=("eager",))
    by = {r.name: r for r in rows}
    assert by["3lc"].status == by["qsgd"].status == "ok", [(r.name, r.error) for r in rows]
    assert by["3lc"].target is None and by["3lc"].verdict is None
    assert by["qsgd"].target == GPU_TARGETS["qsgd"].text and by["qsgd"].verdict == NOT_JUDGED
    assert all(r.verdict is None for r in rows if r.target is None)


# --- interleaved rounds and stage times ------------------------------------------------------------


def test_interleaved_runs_each_function_once_per_round_after_the_warmup_rounds():
    """Warm-up rounds first (untimed), then round after round of every function in order."""
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "c": lambda: calls.append("c")}
    t = rounds.interleaved(fns, repeat=3, warmup=2, device="cpu")
    assert calls == ["a", "b", "c"] * 5
    assert set(t) == {"a", "b", "c"}
    for timed in t.values():
        assert len(timed.samples) == 3 and timed.warmup == 2 and timed.device == "cpu"


class _FakeProfile:
    """Stands in for ``torch.profiler.profile``: each use yields the next round's events."""

    def __init__(self, per_round: list[list[tuple[str, float]]]) -> None:
        self.per_round = per_round
        self.used = 0

    def __call__(self, **kwargs):  # noqa: ANN003, ANN204
        return self

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.used += 1

    def events(self):  # noqa: ANN201
        return [SimpleNamespace(name=n, cpu_time_total=us) for n, us in self.per_round[self.used - 1]]


def test_stage_times_are_seconds_summed_per_label_and_zero_in_rounds_without_the_label(monkeypatch):
    """Profiler times (microseconds) become seconds; a label seen twice in one encode is summed; a stage
    absent from a round counts 0 there, so every stage has one sample per round; other labels are ignored."""
    prof = _FakeProfile([
        [("p/a", 1000.0), ("p/a", 500.0), ("p/c", 7000.0), ("other", 9e9)],
        [("p/a", 2000.0), ("p/b", 3000.0)],
        [("p/b", 4000.0), ("p/a", 250.0)],
    ])
    monkeypatch.setattr(rounds, "profile", prof)
    encodes: list[int] = []
    out = rounds.stage_timings(lambda: encodes.append(1), {"clone": lambda: None, "copy": lambda: None},
                               prefix="p/", repeat=3, warmup=1, device="cpu")
    assert len(encodes) == 4 and prof.used == 3
    assert set(out) == {"a", "b", "c"}
    assert out["a"]["encode"].samples == pytest.approx((1.5e-3, 2e-3, 0.25e-3))
    assert out["b"]["encode"].samples == pytest.approx((0.0, 3e-3, 4e-3))
    assert out["c"]["encode"].samples == pytest.approx((7e-3, 0.0, 0.0))
    for stage in out.values():
        assert len(stage["clone"].samples) == len(stage["copy"].samples) == 3


# --- the table --------------------------------------------------------------------------------------


def test_row_cells_show_each_quantity_whole_in_its_own_column():
    """Every number lands in its column, ratios with two decimals, rates in millions per second of the row's
    unit, bytes as the full integer, the error with three significant digits, the verdict as the status."""
    row = BenchRow(
        "sketchml", "codec", encode_x_copy=1.234, decode_x_copy=2.346, decode_new_x_copy=3.456, total_x_copy=4.567,
        total_x_clone=5.678, encode_rate=123.456e6, decode_rate=78.9e6, rate_unit="pairs/s", nbytes=123456789,
        bits_per_element=1.23456, rel_error=0.0123456, target="t", verdict="not met", first_encode_s=0.5,
    )
    cells = dict(zip(COLUMNS, row_cells(row)))
    assert cells["enc/copy"] == "1.23" and cells["dec/copy"] == "2.35" and cells["dec new/copy"] == "3.46"
    assert cells["(e+d)/copy"] == "4.57" and cells["(e+d)/clone"] == "5.68"
    assert cells["enc rate"] == "123.5M pairs/s" and cells["dec rate"] == "78.9M pairs/s"
    assert cells["bytes"] == "123456789" and cells["bits/el"] == "1.235" and cells["rel.err"] == "0.0123"
    assert cells["status"] == "not met" and cells["target"] == "t"
    dense = BenchRow("qsgd", "codec", encode_rate=2.5e9, verdict=None)
    assert _cell(dense, "enc rate") == "2500.0M el/s" and _cell(dense, "dec rate") == "-"
    assert _cell(dense, "status") == "ok"


def test_the_powersgd_row_status_states_its_time_against_torchs():
    """The ResNet-50 PowerSGD row's status carries the ratio its target judges."""
    row = BenchRow("powersgd [resnet50]", "peer", verdict="met", extra={"time_vs_torch": 0.876})
    assert _cell(row, "status") == "met (0.88x torch's time)"


# --- option bounds ----------------------------------------------------------------------------------


def test_bench_size_bounds_are_inclusive():
    """The largest size is allowed, and buffers that fill the memory exactly fit."""
    assert check_bench_size(MAX_BENCH_SIZE, "cpu", memory_bytes=1 << 62) == MAX_BENCH_SIZE
    with pytest.raises(ValueError, match="--size"):
        check_bench_size(MAX_BENCH_SIZE + 1, "cpu", memory_bytes=1 << 62)
    assert check_bench_size(1000, "cpu", memory_bytes=1000 * BENCH_BYTES_PER_ELEMENT) == 1000
    with pytest.raises(ValueError, match="--size"):
        check_bench_size(1000, "cpu", memory_bytes=1000 * BENCH_BYTES_PER_ELEMENT - 1)


_TRAIN_OK = {"models": ["mlp"], "batch": 4, "quick": True, "nproc": 1, "cap_mb": 25.0, "psgd_cap_mb": 1024.0,
             "timeout": 300.0, "memory_bytes": 1 << 62}


@pytest.mark.parametrize(
    "option, flag, bad, smallest",
    [("cap_mb", "--cap-mb", 0.0, 1e-3), ("psgd_cap_mb", "--psgd-cap-mb", 0.0, 1e-3), ("cap_mb", "--cap-mb", -1.0, 1e-3),
     ("batch", "--batch-size", 0, 1)],
)
def test_bench_train_refuses_empty_buckets_and_batches(option, flag, bad, smallest):
    """Bucket caps must be positive and a batch at least one sample."""
    with pytest.raises(ValueError, match=flag):
        check_bench_train(**{**_TRAIN_OK, option: bad})
    check_bench_train(**{**_TRAIN_OK, option: smallest})


def test_bench_train_memory_check_counts_every_rank():
    """The memory needed is one rank's estimate times the number of ranks."""
    one = bench_train_rank_bytes("mlp", 4, True)
    check_bench_train(**{**_TRAIN_OK, "nproc": 2, "memory_bytes": 2 * one})
    with pytest.raises(ValueError, match="--batch-size 4 with --nproc 2 needs about"):
        check_bench_train(**{**_TRAIN_OK, "nproc": 2, "memory_bytes": 2 * one - 1})


def test_run_bench_train_refuses_bad_arguments_before_launching(monkeypatch):
    """An unknown model or fewer than two warm-up steps (torch's PowerSGD compresses from step 2) fail
    at once, before any rank starts."""
    import gcbench.envs.launch as launch

    def never(*args, **kwargs):
        raise AssertionError("ranks were launched")

    monkeypatch.setattr(launch, "launch", never)
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        run_bench_train(models=["vgg"], progress=False)
    with pytest.raises(ValueError, match="warmup >= 2"):
        run_bench_train(models=["mlp"], warmup=1, progress=False)


# --- bench-train's summary --------------------------------------------------------------------------


def _summary(times: dict[str, float], *, quick: bool = False, models: tuple[str, ...] = ("mlp",)) -> dict:
    plan = {"models": list(models), "batch": {m: 4 for m in models}, "quick": quick}
    return summarize([{k: [v] for k, v in times.items()}], plan)


def test_a_step_time_ratio_exactly_at_its_bound_is_met():
    """The targets are ``<=`` bounds: a ratio equal to the bound is met."""
    s = _summary({"mlp|ddp (no hook)": 1.0, "mlp|gcbench topk": 1.5, "mlp|gcbench sketched-sgd": 3.0})
    (t,) = s["targets"]
    assert t["ratio"] == t["target"] == 2.0 and t["met"] is True and met_text(t, "yes", "no") == "yes"


def test_a_quick_run_shows_its_ratios_unjudged():
    """``--quick`` targets are not judged: ``met`` is None and the report says so in words."""
    times = {"mlp|ddp (no hook)": 1.0, "mlp|gcbench identity": 9.0}
    s = _summary(times, quick=True)
    assert s["targets_judged"] is False and [t["met"] for t in s["targets"]] == [None]
    assert met_text(s["targets"][0], "yes", "no") == TRAIN_NOT_JUDGED
    judged = _summary(times)
    assert judged["targets_judged"] is True and met_text(judged["targets"][0], "yes", "no") == "no"



def test_each_models_ratios_divide_by_that_models_ddp_step():
    """With two models, each row's ``x_ddp`` is over DDP without a hook *of the same model*."""
    s = _summary({"mlp|ddp (no hook)": 2.0, "mlp|gcbench fp16": 3.0, "resnet18|ddp (no hook)": 4.0,
                  "resnet18|gcbench fp16": 6.0}, models=("mlp", "resnet18"))
    x = {(r["model"], r["label"]): r["x_ddp"] for r in s["rows"]}
    assert x[("mlp", "gcbench fp16")] == 1.5 and x[("resnet18", "gcbench fp16")] == 1.5
    assert x[("resnet18", "ddp (no hook)")] == 1.0


def test_the_markdown_report_states_each_bound_as_the_summary_holds_it():
    """The targets table shows the ratio and the bound with two decimals (1.05, not 1.1) and yes / no."""
    s = _summary({"mlp|ddp (no hook)": 1.0, "mlp|gcbench identity": 1.06})
    report = {"ranks": 1, "torch": "x", "rounds": 1, "steps": 1, "warmup": 2, "loadavg_after": None, "cap_mb": 25.0,
              "psgd_cap_mb": 1024.0, "models": ["mlp"], "batch_per_rank": {"mlp": 4}, **s}
    md = to_markdown(report)
    assert "| mlp | gcbench identity | ddp (no hook) | 1.06 | <= 1.05 | no |" in md


# --- the timer --------------------------------------------------------------------------------------


def test_measure_brackets_each_timed_call_with_synchronisation(monkeypatch):
    """Each sample is the clock read after the call's closing synchronisation minus the one after its opening
    synchronisation; warm-up calls are untimed; the samples' median is the reported time."""
    log: list[str] = []
    clock = iter([0.0, 1.0, 10.0, 12.0, 20.0, 27.0])

    def perf_counter() -> float:
        log.append("clock")
        return next(clock)

    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(timing, "synchronize", lambda device: log.append(f"sync {device}"))
    t = measure(lambda: log.append("fn"), repeat=3, warmup=2, device="cuda:1")
    assert log == ["fn", "fn"] + ["sync cuda:1", "clock", "fn", "sync cuda:1", "clock"] * 3
    assert t.samples == (1.0, 2.0, 7.0) and t.median_s == 2.0 and t.warmup == 2 and t.device == "cuda:1"
    assert t.as_dict() == {"kind": "measured", "median_s": 2.0, "min_s": 1.0, "max_s": 7.0, "repeat": 3, "warmup": 2,
                           "device": "cuda:1"}


def test_timing_reports_the_median_not_the_mean():
    """An outlier round moves the mean, not the median that every ratio uses."""
    t = Timing((1.0, 2.0, 30.0, 3.0), 0, "cpu")
    assert t.median_s == statistics.median(t.samples) == 2.5 and t.min_s == 1.0 and t.max_s == 30.0


def test_measure_refuses_a_negative_warmup():
    """``warmup`` below 0 is an error, as ``repeat`` below 1 is."""
    with pytest.raises(ValueError, match="warmup"):
        measure(lambda: None, repeat=1, warmup=-1)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1)],
                         ids=["by-type", "by-index", "device-object"])  # no device needed: the wait is recorded
def test_synchronize_waits_for_every_spelling_of_a_cuda_device(monkeypatch, device):
    """``cuda``, ``cuda:N`` and ``torch.device`` objects all synchronise that device; CPU does not."""
    waited: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: waited.append(dev))
    synchronize(device)
    assert waited == [torch.device(device)]
    synchronize("cpu")
    synchronize(torch.device("cpu"))
    synchronize(None)
    assert len(waited) == 1
