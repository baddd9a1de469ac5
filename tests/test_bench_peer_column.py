"""The ``vs fastest peer`` column of ``gcbench bench``: fake rows for the arithmetic, one tiny run
for the peers that need only torch (torch's PowerSGD hook math, the CSVec-style Count Sketch)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from gcbench.bench.harness import BenchRow, bench_main
from gcbench.bench.peers import PEERS_OF, compare_with_peers, peer_cell


def _row(name: str, kind: str = "codec", status: str = "ok", **kw) -> BenchRow:
    return BenchRow(name, kind, status=status, **kw)


def test_ratio_is_against_the_fastest_measured_peer():
    rows = [
        _row("qsgd", total_x_copy=3.0),
        _row("qsgd", total_x_copy=1.5, mode="compiled"),
        _row("hivemind Uniform8BitQuantization", "peer", total_x_copy=6.0),
        _row("hivemind BlockwiseQuantization", "peer", total_x_copy=2.0),
        _row("hivemind Quantile8BitQuantization", "peer", status="failed"),  # not measured: ignored
        _row("topk", total_x_copy=1.0),  # no peer implements TopK
    ]
    compare_with_peers(rows)
    eager, compiled = rows[0].extra, rows[1].extra
    assert eager["vs_fastest_peer"] == pytest.approx(1.5) and eager["fastest_peer"] == "hivemind BlockwiseQuantization"
    assert eager["at_least_as_fast_as_peers"] is False
    assert compiled["vs_fastest_peer"] == pytest.approx(0.75) and compiled["at_least_as_fast_as_peers"] is True
    assert "vs_fastest_peer" not in rows[5].extra and "vs_fastest_peer" not in rows[2].extra
    assert peer_cell(rows[0]) == "1.50x BlockwiseQuantization: slower"
    assert peer_cell(rows[1]) == "0.75x BlockwiseQuantization: as fast"
    assert peer_cell(rows[5]) == "-"


def test_equal_time_is_at_least_as_fast_and_missing_peers_give_no_verdict():
    rows = [_row("fp16", total_x_copy=2.0), _row("hivemind Float16Compression", "peer", total_x_copy=2.0)]
    compare_with_peers(rows)
    assert rows[0].extra["at_least_as_fast_as_peers"] is True
    alone = [_row("fp16", total_x_copy=2.0), _row("powersgd [resnet50]", "peer", total_x_copy=1.0)]
    compare_with_peers(alone)  # hivemind absent, torch row failed or absent: no comparison at all
    assert all("vs_fastest_peer" not in r.extra for r in alone)


def test_accumulate_rows_compare_encode_only_and_never_mix_metrics():
    rows = [
        _row("countsketch.accumulate", "stage", encode_x_copy=12.0),
        _row("CSVec-style countsketch.accumulate", "peer", encode_x_copy=30.0),
    ]
    compare_with_peers(rows)
    assert rows[0].extra["peer_metric"] == "enc" and rows[0].extra["vs_fastest_peer"] == pytest.approx(0.4)
    mixed = [_row("fp16", total_x_copy=2.0), _row("hivemind Float16Compression", "peer", encode_x_copy=1.0)]
    compare_with_peers(mixed)  # an encode-only peer is not compared with an encode+decode row
    assert "vs_fastest_peer" not in mixed[0].extra


def test_every_peer_named_is_a_row_bench_can_produce():
    peers = {p for names in PEERS_OF.values() for p in names}
    assert peers >= {"torch powerSGD_hook math [resnet50]", "CSVec-style countsketch.accumulate", "hivemind Float16Compression"}


def test_torch_only_peers_run_without_hivemind_and_fill_the_column(tmp_path):
    """PowerSGD vs torch's hook math and Count Sketch vs the CSVec-style peer need only torch:
    they run in the plain venv (hivemind absent or not) and their rows get the column and JSON keys."""
    out = io.StringIO()
    rows = bench_main(["powersgd", "countsketch"], size=4096, repeat=1, warmup=0, peers=True, raw_ef=False,
                      modes=("eager",), json_path=tmp_path / "b.json",
                      console=Console(width=400, file=out, force_terminal=False, color_system=None))
    by = {r.name: r for r in rows}
    for name in ("powersgd [resnet50]", "countsketch.accumulate"):
        assert by[name].status == "ok", by[name].error
        assert by[name].extra["fastest_peer"] == PEERS_OF[name][0]
        assert by[name].extra["vs_fastest_peer"] > 0
    data = json.loads((tmp_path / "b.json").read_text())
    assert any("vs_fastest_peer" in r["extra"] for r in data["rows"])
    assert "vs fastest peer" in out.getvalue()
