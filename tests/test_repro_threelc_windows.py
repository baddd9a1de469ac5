"""The 3LC report's per-window traffic per direction and the learning rate of each window: push and
pull each against half the fp32 bytes, the rate from the run's schedule as configured."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from gcbench.reproductions.threelc.drift import direction_window_reductions, window_reductions
from gcbench.reproductions.threelc.report import direction_table

workload_mod = importlib.import_module("gcbench.reproductions.threelc.workload")  # the package exports a workload() function too

STEPS, PARAMS, WORKERS = 200, 1000, 4
FP32_ONE_WAY = 4 * PARAMS * WORKERS  # bytes per step and direction, uncompressed


def synthetic_cell(push_per_step, pull_per_step):
    return {"summary": {"steps": STEPS, "baseline_fp32_bytes": 2 * FP32_ONE_WAY * STEPS},
            "stages": {"push": {"framed_per_step": list(push_per_step)}, "pull": {"framed_per_step": list(pull_per_step)}}}


def test_direction_windows_split_the_total():
    """Push flat at 100x, pull 200x then falling to 25x in the last window: each direction's series is
    its own, and the total per window is their harmonic mean (the bytes add)."""
    push = [FP32_ONE_WAY // 100] * STEPS
    pull = [FP32_ONE_WAY // 200] * 150 + [FP32_ONE_WAY // 25] * 50
    d = direction_window_reductions(synthetic_cell(push, pull), 50)
    assert d["push"] == pytest.approx([100] * 4, rel=1e-3)
    assert d["pull"] == pytest.approx([200, 200, 200, 25], rel=1e-3)
    total = window_reductions(2 * FP32_ONE_WAY, [a + b for a, b in zip(push, pull)], 50)
    assert total == pytest.approx([2 / (1 / p + 1 / q) for p, q in zip(d["push"], d["pull"])])


def test_report_table_gives_each_windows_learning_rate_and_both_directions():
    wl = workload_mod.workload()
    ctx = SimpleNamespace(options={"dataset": "digits", "device": "cpu"}, preset=wl.spec.scale("claims"), scale="claims",
                          tables=["traffic"])
    cfg = wl.run_config(ctx)
    assert cfg.steps == STEPS and cfg.schedule == "cosine"  # the claims scale as configured
    push = [FP32_ONE_WAY // 100] * STEPS
    pull = [FP32_ONE_WAY // 200] * 150 + [FP32_ONE_WAY // 25] * 50
    text = direction_table(wl, ctx, {"3lc-s1.00": synthetic_cell(push, pull)}, 50)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "–" in line.split("|")[1]]
    assert [r.split("|")[1].strip() for r in rows] == ["0–49", "50–99", "100–149", "150–199"]
    last = rows[-1]
    assert f"{cfg.lr_at(150):.3g} → {cfg.lr_at(199):.3g}" in last and "100.0× / 25.0×" in last
    assert cfg.lr_at(150) == pytest.approx(0.0179, abs=1e-4) and cfg.lr_at(199) < 1e-4  # cosine to 0
    assert f"{cfg.lr_at(0):.3g} → {cfg.lr_at(49):.3g}" in rows[0] and "100.0× / 200.0×" in rows[0]
    assert "cosine schedule" in text and "paper` scale steps down" in text
