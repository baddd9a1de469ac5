"""The asv suite's same-process speed ratios (``benchmarks.common.over_copy``, ``interleaved_medians``):
every ``track_*_over_copy`` and ``track_gcbench_over_torch`` runs once on tiny inputs (CPU) and gives a
finite positive number. No timing assertion: what the ratios are is for the benchmarks to say.

``GCBENCH_BENCH_FULL=1`` lets a suite's ``setup`` take any size, so the cases here are a few thousand
elements (the asv parameters themselves are 1M and 25M); ``tests/test_bench.py`` runs every benchmark
once on its first quick case.
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = 4096
DENSITY = 0.1
#: ResNet-50's widths / 64: 39,701 parameters in the 161 tensors, 2 PowerSGD matrices.
TINY_WIDTH_DIV = 64


@pytest.fixture
def suite(monkeypatch):
    """The asv modules, any size allowed, every device requested, the tiny ResNet registered."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("GCBENCH_BENCH_FULL", "1")
    monkeypatch.delenv("GCBENCH_BENCH_DEVICES", raising=False)
    names = ("common", "bench_codecs", "bench_stages", "bench_peers")
    mods = types.SimpleNamespace(**{name: importlib.import_module(f"benchmarks.{name}") for name in names})
    monkeypatch.setattr(mods.bench_codecs, "PER_TENSOR_WIDTH_DIV", TINY_WIDTH_DIV)
    monkeypatch.setitem(mods.bench_peers.MODELS, "tiny", TINY_WIDTH_DIV)
    return mods


def ratio_methods(cls: type) -> list[str]:
    return sorted(m for m in dir(cls) if m.startswith("track_") and m.endswith(("_over_copy", "_over_torch")))


def run_ratios(cls: type, *args) -> dict[str, float]:
    """Every ratio track of ``cls`` once for ``args`` (skipped where the case cannot run here)."""
    obj = cls()
    try:
        obj.setup(*args)
    except NotImplementedError as why:
        pytest.skip(str(why))
    out = {}
    for m in ratio_methods(cls):
        value = getattr(obj, m)(*args)
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (cls.__name__, m, args, value)
        out[m] = value
    return out


# -- the helper ---------------------------------------------------------------------------------------


def test_interleaved_medians_runs_round_after_round_in_order(suite):
    calls: list[str] = []
    fns = {"copy": lambda: calls.append("copy"), "work": lambda: calls.append("work")}
    medians = suite.common.interleaved_medians(fns, "cpu", rounds=3, warmup=1)
    assert calls == ["copy", "work"] * 4  # one untimed round, then three timed ones, copy first in each
    assert set(medians) == {"copy", "work"} and all(v >= 0 for v in medians.values())


def test_over_copy_is_the_work_median_over_the_copy_median(suite, monkeypatch):
    seen = {}

    def fake(fns, device, rounds=suite.common.RATIO_ROUNDS, warmup=1):
        assert list(fns) == ["copy", "work"] and device == "cpu"
        seen["rounds"] = rounds
        return {"copy": 2.0, "work": 6.0}

    monkeypatch.setattr(suite.common, "interleaved_medians", fake)
    assert suite.common.over_copy(lambda: None, [torch.ones(3), torch.ones(5)], "cpu") == 3.0
    assert seen["rounds"] == suite.common.RATIO_ROUNDS
    value = suite.bench_codecs.over_copy(lambda: torch.ones(TINY).sum(), torch.ones(TINY), "cpu")
    assert value == 3.0  # the suites call the one helper


def test_every_ratio_track_is_in_copy_units(suite):
    classes = {
        suite.bench_codecs: ["CodecSuite", "SparseCodecSuite", "PerTensorSuite"],
        suite.bench_stages: ["SketchMLQuantile", "SketchMLBucketizeDtypes", "SketchMLMinMaxSketch",
                             "SketchMLDeltaBinary", "ThreeLCStages", "CountSketchStages", "QSGDWidths"],
        suite.bench_peers: ["PowerSGDPeers", "QuantileStepPeers", "HivemindPeers"],
    }
    for mod, names in classes.items():
        for name in names:
            cls = getattr(mod, name)
            timed = [m for m in dir(cls) if m.startswith("time_")]
            ratios = [m for m in ratio_methods(cls) if m.endswith("_over_copy")]
            assert timed and ratios, name
            assert all(getattr(cls, m).unit == "x copy_" for m in ratios), name
    assert suite.bench_peers.PowerSGDOverTorch.track_gcbench_over_torch.unit == "x torch powerSGD_hook math"


# -- every suite's ratios, once, tiny ----------------------------------------------------------------


def _dense_names():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.common import dense_codec_names, sparse_codec_names

        return dense_codec_names(), sparse_codec_names()
    finally:
        sys.path.remove(str(ROOT))


DENSE, SPARSE = _dense_names()


@pytest.mark.parametrize("name", DENSE)
def test_codec_suite_ratios(suite, name):
    assert set(run_ratios(suite.bench_codecs.CodecSuite, name, TINY, "cpu")) == {
        "track_encode_over_copy", "track_decode_over_copy"}


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_codec_suite_ratios(suite, name):
    assert set(run_ratios(suite.bench_codecs.SparseCodecSuite, name, TINY, DENSITY, "cpu")) == {
        "track_encode_over_copy", "track_decode_over_copy"}


@pytest.mark.parametrize("name", ["identity", "qsgd", "powersgd"])
def test_per_tensor_suite_ratios(suite, name):
    assert set(run_ratios(suite.bench_codecs.PerTensorSuite, name, "cpu")) == {
        "track_encode_over_copy", "track_decode_over_copy"}


def test_sketchml_stage_ratios(suite):
    s = suite.bench_stages
    assert set(run_ratios(s.SketchMLQuantile, TINY, DENSITY, "cpu")) == {
        "track_quantile_bucketize_over_copy", "track_quantile_sketch_over_copy", "track_bucketize_over_copy"}
    for dtype in ("float32", "float64"):
        assert set(run_ratios(s.SketchMLBucketizeDtypes, dtype, TINY, DENSITY, "cpu")) == {
            "track_bucketize_over_copy"}
    assert set(run_ratios(s.SketchMLMinMaxSketch, TINY, DENSITY, "cpu")) == {
        "track_insert_over_copy", "track_query_over_copy"}
    assert set(run_ratios(s.SketchMLDeltaBinary, TINY, DENSITY, "cpu")) == {
        "track_encode_over_copy", "track_decode_over_copy"}


def test_threelc_countsketch_qsgd_stage_ratios(suite):
    s = suite.bench_stages
    assert set(run_ratios(s.ThreeLCStages, TINY, "cpu")) == {
        "track_quantize_over_copy", "track_quartic_encode_over_copy", "track_quartic_decode_over_copy",
        "track_zero_run_encode_over_copy", "track_zero_run_decode_over_copy"}
    assert set(run_ratios(s.CountSketchStages, TINY, "cpu")) == {
        "track_accumulate_over_copy", "track_unsketch_over_copy"}
    for levels in (1, 127):
        assert set(run_ratios(s.QSGDWidths, levels, TINY, "cpu")) == {"track_encode_decode_over_copy"}


def test_powersgd_peer_ratios(suite):
    p = suite.bench_peers
    for impl in ("gcbench", "torch-hook"):
        assert set(run_ratios(p.PowerSGDPeers, impl, "tiny", "cpu")) == {
            "track_encode_over_copy", "track_decode_over_copy"}
    assert set(run_ratios(p.PowerSGDOverTorch, "tiny", "cpu")) == {"track_gcbench_over_torch"}


@pytest.mark.parametrize(
    "impl", ["gcbench-quantile_splits", "datasketches-quantiles_doubles", "datasketches-kll_floats", "torch-sort"]
)
def test_quantile_step_peer_ratios(suite, impl):
    assert set(run_ratios(suite.bench_peers.QuantileStepPeers, impl, TINY, DENSITY)) == {
        "track_quantile_step_over_copy"}


def test_hivemind_peer_ratios(suite, monkeypatch):
    """A stand-in for hivemind's compression module (an optional extra): the suite's calls only."""

    class Message:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

        def ByteSize(self) -> int:  # noqa: N802 - protobuf's name
            return self.t.numel() * self.t.element_size()

    class Float16Compression:
        def compress(self, x, info, allow_inplace=False):
            return Message(x.half())

        def extract(self, msg):
            return msg.t.float()

    class CompressionInfo:
        @classmethod
        def from_tensor(cls, x):
            return cls()

    fake = types.ModuleType("hivemind.compression")
    fake.Float16Compression, fake.CompressionInfo = Float16Compression, CompressionInfo
    parent = types.ModuleType("hivemind")
    parent.compression = fake
    monkeypatch.setitem(sys.modules, "hivemind", parent)
    monkeypatch.setitem(sys.modules, "hivemind.compression", fake)
    assert set(run_ratios(suite.bench_peers.HivemindPeers, "Float16Compression", TINY)) == {
        "track_compress_over_copy", "track_extract_over_copy"}
