"""``gcbench bench`` (gcbench/bench/harness.py) and the asv suite in benchmarks/: rows, bytes, labels and
parameter lists. No timing assertion anywhere: speed is measured by the benchmarks, never asserted
by a unit test; only the arithmetic that turns timings into ratios is checked."""

from __future__ import annotations

import importlib
import inspect
import io
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from gcbench import compressors
from gcbench.compressors import registry
from gcbench.bench.harness import bench_main
from gcbench.bench.inputs import make_dense_input, make_sparse_input, parse_size, powersgd_matrices, resnet50_shapes
from gcbench.bench.peers import TorchPowerSGDMath
from gcbench.bench.targets import NOT_JUDGED

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TINY = 4096


def quiet_console() -> Console:
    return Console(file=io.StringIO(), width=250)


def _rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((y.double() - x.double()).norm() / x.double().norm())


# --- gcbench bench ---------------------------------------------------------------------------------


def test_bench_main_rows_for_two_codecs():
    console = quiet_console()
    rows = bench_main(["fp16", "topk"], size=TINY, repeat=2, warmup=0, peers=False, stages=False, modes=("eager",),
                      console=console)
    by_name = {r.name: r for r in rows}
    assert [r.name for r in rows] == ["clone", "copy", "fp16 cast", "fp16", "topk"]
    assert {r.kind for r in rows[:3]} == {"baseline"}
    assert by_name["clone"].encode_x_clone == 1.0 and by_name["copy"].encode_x_copy == 1.0

    x = make_dense_input(TINY)
    for name in ("fp16", "topk"):
        row = by_name[name]
        assert row.status == "ok" and row.kind == "codec" and row.error is None
        for value in (row.encode_x_clone, row.decode_x_clone, row.total_x_clone, row.encode_x_copy, row.decode_x_copy):
            assert value is not None and math.isfinite(value) and value > 0
        # the ratios are the medians of this row's own interleaved rounds
        assert row.encode_x_clone == pytest.approx(row.encode["median_s"] / row.clone_s)
        assert row.decode_x_copy == pytest.approx(row.decode["median_s"] / row.copy_s)
        assert row.total_x_clone == pytest.approx(row.encode_x_clone + row.decode_x_clone)
        # decode = decode(payload, out=buf) into a ready buffer (the targets' footing); the
        # allocating decode is its own column, timed in the same rounds
        assert row.decode_into is True and "out=buf" in row.what
        assert row.decode_new["repeat"] == 2 and row.decode_new_x_copy == pytest.approx(row.decode_new["median_s"] / row.copy_s)
        assert row.total_new_x_copy == pytest.approx(row.encode_x_copy + row.decode_new_x_copy)
        assert row.total_x_copy == pytest.approx(row.encode_x_copy + row.decode_x_copy)
        assert row.encode["repeat"] == 2 and row.encode["kind"] == "measured"
        assert row.encode_rate == pytest.approx(TINY / row.encode["median_s"])
        assert row.rate_unit == "elements/s" and row.pairs is None
        # bytes are those of an independent encode of the same input
        codec = compressors.get(name)
        payload = codec.encode(x, key="bench")
        assert row.nbytes == payload.nbytes == len(payload.to_bytes())
        assert row.bits_per_element == pytest.approx(8.0 * payload.nbytes / TINY)
        assert row.rel_error == pytest.approx(_rel_error(x, codec.decode(payload)), rel=1e-9)
        assert row.input.startswith("dense float32")
    assert by_name["topk"].target == "encode <= 6x copy"
    assert by_name["topk"].verdict == NOT_JUDGED  # a tiny input: the targets are stated for 25M values
    assert by_name["fp16"].target is None and by_name["fp16"].verdict is None
    assert by_name["fp16"].nbytes < 4 * TINY < 2 * by_name["fp16"].nbytes + 4096  # 2 bytes/element + header
    out = console.file.getvalue()
    for text in ("fp16", "topk", "enc/copy", "dec new/copy", "out=buf", "load average", "clone"):
        assert text in out


def test_bench_main_sparse_codec_json_and_markdown(tmp_path):
    json_path, md_path = tmp_path / "b.json", tmp_path / "b.md"
    size, density = 20_000, 0.1
    rows = bench_main(
        ["sketchml"], size=size, density=density, repeat=1, warmup=0, peers=False,
        json_path=json_path, markdown_path=md_path, console=quiet_console(),
    )
    row = next(r for r in rows if r.name == "sketchml")
    assert row.status == "ok", row.error
    stages = {r.name: r for r in rows if r.kind == "stage"}  # SketchML's encode stages (profiler labels)
    assert {f"sketchml {s}" for s in ("quantile_sketch", "bucketize", "group", "minmax_insert",
                                      "delta_binary_encode")} <= set(stages)
    for st in stages.values():
        assert st.rate_unit == "pairs/s" and st.encode_rate == pytest.approx(st.pairs / st.encode["median_s"])
    nnz = int(make_sparse_input(size, density)._nnz())
    assert 0.05 * size < nnz < 0.15 * size
    assert row.pairs == nnz and row.rate_unit == "pairs/s"
    assert row.encode_rate == pytest.approx(nnz / row.encode["median_s"])
    assert row.bits_per_pair == pytest.approx(8.0 * row.nbytes / nnz)
    assert "sparse COO" in row.input
    # a sparse COO payload cannot decode into a dense buffer: its decode is the allocating one, alone
    assert row.decode_into is False and row.decode_new is None and row.decode_new_x_copy is None
    assert row.decode is not None and "fresh tensor" in row.what
    doc = json.loads(json_path.read_text())
    assert doc["size"] == size and doc["density"] == density
    assert "out=buf" in doc["decode"] and "dec new" in doc["decode"]
    assert [r["name"] for r in doc["rows"]] == [r.name for r in rows]
    assert doc["load_average_start"] is None or len(doc["load_average_start"]) == 3
    md = md_path.read_text()
    assert md.startswith("# gcbench bench") and "| sketchml | codec |" in md


def test_bench_main_extra_rows_are_labelled():
    rows = bench_main(["countsketch", "3lc"], size=TINY, repeat=1, warmup=0, peers=False, console=quiet_console())
    kinds = {r.name: r.kind for r in rows}
    assert kinds["countsketch.accumulate"] == kinds["countsketch.unsketch"] == "stage"
    assert kinds["3lc (no EF)"] == "raw" and kinds["3lc"] == "codec"
    assert "error feedback" in next(r for r in rows if r.name == "3lc").what
    assert all(r.status == "ok" for r in rows), [(r.name, r.error) for r in rows if r.status != "ok"]


def test_bench_main_rejects_bad_arguments():
    with pytest.raises(compressors.UnknownCodecError):
        bench_main(["no-such-codec"], size=TINY, console=quiet_console())
    with pytest.raises(ValueError):
        bench_main(["fp16"], size=TINY, repeat=0, console=quiet_console())


def test_bench_main_reports_codecs_that_do_not_import(monkeypatch):
    e = registry.Entry("ghost-codec", "no_such_module_yet:Ghost", "a codec nobody has written yet")
    monkeypatch.setattr(registry, "ENTRIES", [*registry.ENTRIES, e])
    rows = bench_main(["ghost-codec"], size=TINY, repeat=1, warmup=0, peers=False, console=quiet_console())
    assert rows[-1].name == "ghost-codec" and rows[-1].status == "skipped" and "ModuleNotFoundError" in rows[-1].error


@pytest.mark.parametrize(
    "text,value", [("25M", 25_000_000), ("1m", 1_000_000), ("500k", 500_000), ("1e6", 1_000_000), (4096, 4096), ("7", 7)]
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["abc", "0", "1.5", "-3", "2.5k5"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_resnet50_shapes_match_torchvision_count():
    # torchvision.models.resnet50(): 25,557,032 parameters (161 tensors)
    shapes = resnet50_shapes()
    assert len(shapes) == 161
    assert sum(math.prod(s) for _, s in shapes) == 25_557_032
    assert dict(shapes)["layer4.2.conv3.weight"] == (2048, 512, 1, 1)


def test_torch_powersgd_math_matches_a_naive_power_step():
    # rank 4 > 2: the hook orthogonalizes with QR, like gcbench; compare P Q^T with a naive numpy step
    mats = powersgd_matrices(rank=4, width_div=16)
    math_ = TorchPowerSGDMath(list(mats.values()), rank=4)
    q0 = [q.clone() for q in math_.qs]
    math_.encode()
    math_.decode()
    for t, q_prev, out in zip(mats.values(), q0, math_.outputs):
        m = t.reshape(t.shape[0], -1).double().numpy()
        q, _ = np.linalg.qr(q_prev[0].double().numpy())  # warm start: Q re-orthogonalized
        p, _ = np.linalg.qr(m @ q)
        expected = p @ (m.T @ p).T  # P P^T M: sign choices of QR cancel
        np.testing.assert_allclose(out[0].double().numpy(), expected, rtol=1e-3, atol=1e-3)


# --- the asv suite -----------------------------------------------------------------------------------


@pytest.fixture
def bench_pkg(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.bench_codecs")


def test_asv_params_cover_the_registry(bench_pkg):
    dense = bench_pkg.CodecSuite.params[0]
    sparse = bench_pkg.SparseCodecSuite.params[0]
    assert sorted(dense + sparse) == sorted(compressors.names())
    assert not set(dense) & set(sparse)
    assert "sketchml" in sparse
    assert all(getattr(compressors.entry(n).load(), "sparse_native", False) for n in sparse)
    assert bench_pkg.CodecMemory.params == bench_pkg.CodecSuite.params
    assert bench_pkg.PerTensorSuite.params == (dense, ["cpu", "cuda"])
    assert bench_pkg.SparseCodecSuite.params[2] == [0.01, 0.1]
    for suite in (bench_pkg.CodecSuite, bench_pkg.SparseCodecSuite):
        assert 1_000_000 in suite.params[1] and 25_000_000 in suite.params[1]
        assert suite.params[-1] == ["cpu", "cuda"]


def test_asv_params_are_generated_from_the_registry(bench_pkg, monkeypatch):
    e = registry.Entry("ghost-codec", "no_such_module_yet:Ghost", "a codec nobody has written yet")
    monkeypatch.setattr(registry, "ENTRIES", [*registry.ENTRIES, e])
    try:
        mod = importlib.reload(bench_pkg)
        assert "ghost-codec" in mod.CodecSuite.params[0]
        with pytest.raises(NotImplementedError, match="ghost-codec"):  # asv skips it
            mod.CodecSuite().setup("ghost-codec", 1_000_000, "cpu")
    finally:
        monkeypatch.undo()
        importlib.reload(bench_pkg)


def test_asv_skips_the_asv_way(bench_pkg, monkeypatch):
    monkeypatch.delenv("GCBENCH_BENCH_FULL", raising=False)
    with pytest.raises(NotImplementedError, match="GCBENCH_BENCH_FULL"):
        bench_pkg.CodecSuite().setup("identity", 25_000_000, "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(NotImplementedError, match="CUDA"):
            bench_pkg.CodecSuite().setup("identity", 1_000_000, "cuda")


def _benchmark_classes():
    modules = ["bench_codecs", "bench_baselines", "bench_stages", "bench_peers"]
    for name in modules:
        mod = importlib.import_module(f"benchmarks.{name}")
        for cls_name, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and hasattr(cls, "params"):
                yield cls


def test_every_asv_benchmark_runs_once_on_its_first_quick_case(monkeypatch):
    """Each suite's setup and every time_/track_/peakmem_ method run for the first parameter
    combination that is not skipped (1M elements, CPU), as ``asv run --quick`` does."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.delenv("GCBENCH_BENCH_FULL", raising=False)
    ran = []
    for cls in _benchmark_classes():
        methods = [m for m in dir(cls) if m.startswith(("time_", "track_", "peakmem_"))]
        assert methods, cls
        for combo in itertools.product(*cls.params):
            obj = cls()
            try:
                obj.setup(*combo)
            except NotImplementedError:
                continue
            for m in methods:
                value = getattr(obj, m)(*combo)
                if m.startswith("track_"):
                    assert isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, (cls, m, value)
            ran.append(cls.__name__)
            break
    expected = {
        "CodecSuite", "CodecMemory", "SparseCodecSuite", "SparseCodecMemory", "Baselines", "SketchMLQuantile",
        "SketchMLMinMaxSketch", "SketchMLDeltaBinary", "ThreeLCStages", "CountSketchStages", "PowerSGDPeers",
        "QuantileStepPeers", "QSGDWidths", "SketchMLBucketizeDtypes", "PerTensorSuite", "PowerSGDOverTorch",
    }
    assert expected <= set(ran), expected - set(ran)


def test_codec_track_values_are_real(bench_pkg):
    suite = bench_pkg.CodecSuite()
    suite.setup("identity", 1_000_000, "cpu")
    x = bench_pkg.make_input(1_000_000, "cpu")
    assert suite.track_bits_per_element("identity", 1_000_000, "cpu") == 8.0 * compressors.get("identity").encode(x).nbytes / 1e6
    assert suite.track_relative_error("identity", 1_000_000, "cpu") == 0.0


def test_quick_benchmarks_are_not_in_the_unit_test_run():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert conf["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    assert list((ROOT / "benchmarks").glob("test_quick_*.py"))


def test_bench_verdict_follows_the_measured_value():
    """met / not met is the target's comparison of the row's own measured value (both sides)."""
    from gcbench.bench.harness import BenchRow
    from gcbench.bench.targets import verdict

    row = BenchRow("qsgd", "codec", total_x_copy=3.9)
    assert verdict(row) == "met"
    row.total_x_copy = 4.1
    assert verdict(row) == "not met"
    sk = BenchRow("sketchml", "codec", encode_rate=19e6)
    assert verdict(sk) == "not met"
    sk.encode_rate = 21e6
    assert verdict(sk) == "met"
    sk.decode_rate = 39e6  # SketchML has two targets: each measured one must be met
    assert verdict(sk) == "not met"
    sk.decode_rate = 41e6
    assert verdict(sk) == "met"
    sk.encode_rate = 19e6
    assert verdict(sk) == "not met"
    assert verdict(BenchRow("qsgd", "codec", status="failed")) is None
    assert verdict(BenchRow("qsgd", "codec")) is None  # nothing measured


def test_bench_compiled_rows_only_for_codecs_with_kernels():
    rows = bench_main(["qsgd", "randomk"], size=TINY, repeat=1, warmup=0, peers=False, console=quiet_console())
    modes = [(r.name, r.mode) for r in rows if r.kind == "codec"]
    # QSGD's auto row: its rounding is a C pass at any size (no compilation to pay for)
    assert modes == [("qsgd", "eager"), ("qsgd", "compiled"), ("qsgd", "auto"), ("randomk", "eager")]
    comp = next(r for r in rows if r.mode == "compiled")
    assert comp.compile_s is not None and comp.compile_s >= 0 and comp.status == "ok"
    note = next(r for r in rows if r.name == "randomk").extra["compiled"]
    assert note.startswith("compiled: same as eager, no kernel because") and "gather" in note


def test_bench_countsketch_peer_row_is_labelled_independent():
    rows = bench_main(["countsketch"], size=TINY, repeat=1, warmup=0, peers=True, raw_ef=False, modes=("eager",),
                      console=quiet_console())
    peer = next(r for r in rows if r.name.startswith("CSVec-style"))
    assert peer.kind == "peer" and peer.status == "ok" and "independent" in peer.what, peer.error
    acc = next(r for r in rows if r.name == "countsketch.accumulate")
    assert acc.verdict == NOT_JUDGED and acc.target == "<= 10x copy"


def test_bench_table_keeps_every_cell_whole_at_80_columns():
    """Piped or in an 80-column terminal the 16-column table must not cut a number (rich would
    otherwise shrink the columns to nothing); every numeric cell of every row appears whole, on its
    row; the two free-text columns (target, status) wrap between words, each word whole."""
    from gcbench.bench.harness import row_cells

    out = io.StringIO()
    console = Console(width=80, file=out, force_terminal=False, color_system=None)
    rows = bench_main(["qsgd", "topk"], size=TINY, repeat=1, warmup=0, peers=False, stages=False, console=console)
    text = out.getvalue()
    assert "…" not in text
    lines = text.splitlines()
    tokens = set(re.split(r"[\s│┃|]+", text))
    for row in rows:
        cells = row_cells(row)
        line = next(ln for ln in lines if ln.lstrip(" │┃").startswith(cells[0] + " ") and all(c in ln for c in cells[:-2]))
        assert line  # the row's numbers on one line, each in full
        for text_cell in cells[-2:]:
            assert all(word in tokens for word in text_cell.split()), text_cell
