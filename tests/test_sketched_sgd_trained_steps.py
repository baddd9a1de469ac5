"""The end-of-training flags count the steps the runs trained, not the scale's preset: a run whose
``--epochs`` overrides the preset's steps is flagged by the steps it ran (the cells' record), so an
override cannot give a run a verdict its steps do not support, nor take one from a run that has it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gcbench.reproductions.framework.claims import DIFFERS, NOT_AT_SCALE, REPRODUCED, evaluate_claim
from gcbench.reproductions.sketched_sgd import load
from gcbench.reproductions.sketched_sgd.parity import sparse_steps
from gcbench.reproductions.sketched_sgd.workload import SketchedSGDWorkload

KINDS = {"vanilla": "vanilla", "topk": "true_topk", "sketched20": "sketched", "sketched40": "sketched"}


def _cell(method: str, trained: int, diverged_at: int | None = None) -> dict:
    """A transformer cell's record (d = 1,000 parameters, d_c = 900 compressed, k = 1 for the sparse
    methods: steps / 900 updates per coordinate), one training loss per step it trained."""
    sparse = method != "vanilla"
    return {"model": "transformer", "method": {"name": method, "kind": KINDS[method]}, "bleu": 1.0,
            "test_loss": 2.0, "parameters": 1000, "compressed_parameters": 900 if sparse else 1000,
            "dense_parameters": 100 if sparse else 0, "k": 1 if sparse else None,
            "traffic": {"last_step_bytes_per_worker": 4000.0}, "diverged_at": diverged_at,
            "losses": [3.0] * (trained if diverged_at is None else diverged_at)}


def _derive(preset_steps: int, trained: int, options: dict | None = None, diverged: dict[str, int] | None = None) -> dict:
    """The workload's derived quantities for cells that trained ``trained`` steps, under a scale whose
    preset says ``preset_steps`` and the run's ``options``."""
    spec = load()
    diverged = diverged or {}
    results = {f"t1-transformer-{m}": _cell(m, trained, diverged.get(m)) for m in KINDS}
    ctx = SimpleNamespace(preset={"translation": {"steps": preset_steps}}, spec=spec, options=dict(options or {}))
    return SketchedSGDWorkload.derive(SimpleNamespace(), ctx, results)


def _status(measured: dict, cid: str) -> str:
    spec = load()
    claim = next(c for c in spec.claims if c.id == cid)
    return evaluate_claim(claim, measured, spec, "parity").status


def test_a_short_override_of_a_long_preset_is_not_caught_up():
    """``--scale parity --epochs 300``: the cells trained 300 steps, 0.33 updates per coordinate; the
    preset's 9,100 (10.1) must not flag them caught up, and no end-of-training claim is judged."""
    out = _derive(9100, 300, options={"epochs": 300})
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(300 / 900)
    assert out["t1.transformer.sparse_caught_up"] == 0.0
    assert out["t1.transformer.divergence_testable"] == 0.0
    assert out["t1.transformer.sketched20_vs_vanilla.parity_testable"] == 0.0
    assert _status(out, "sketched-no-divergence") == NOT_AT_SCALE
    assert _status(out, "heldout-parity-sketched20") == NOT_AT_SCALE


def test_the_cells_record_decides_even_without_the_option():
    """Cells whose record shows 300 steps under a 9,100-step preset (re-derived without the option): the
    record, not the preset, gives the count."""
    out = _derive(9100, 300)
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(300 / 900)
    assert _status(out, "sketched-no-divergence") == NOT_AT_SCALE


def test_a_long_override_of_a_short_preset_is_caught_up():
    """``--scale claims --epochs 9100``: the cells trained 9,100 steps (10.1 updates per coordinate)."""
    out = _derive(300, 9100, options={"epochs": 9100})
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(9100 / 900)
    assert out["t1.transformer.sparse_caught_up"] == 1.0
    assert _status(out, "sketched-no-divergence") == REPRODUCED


def test_a_diverged_run_counts_the_steps_it_was_configured_for():
    """A run that stopped at a non-finite gradient has trained fewer steps than configured; it counts its
    configured steps, the preset with the run's overrides (the same configuration diverges at the same
    step at any length): the others' 9,100 steps decide, and the divergence refutes the claim."""
    out = _derive(300, 9100, options={"epochs": 9100}, diverged={"sketched40": 50})
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(9100 / 900)
    assert out["t1.transformer.sparse_caught_up"] == 1.0
    assert _status(out, "sketched-no-divergence") == DIFFERS
    # every sparse run diverged: the configured steps with the override, not the preset's
    every = {m: 50 for m in KINDS if m != "vanilla"}
    out = _derive(300, 9100, options={"epochs": 9100}, diverged=every)
    assert out["t1.transformer.updates_per_coordinate"] == pytest.approx(9100 / 900)


def test_sparse_steps_is_the_fewest_over_the_sparse_runs_and_ignores_vanilla():
    runs = {"vanilla": [_cell("vanilla", 20000)], "topk": [_cell("topk", 9100), _cell("topk", 9000)],
            "sketched20": [_cell("sketched20", 9100, diverged_at=7)]}
    assert sparse_steps(runs, 9100) == 9000
    assert sparse_steps({"vanilla": [_cell("vanilla", 300)]}, 300) is None
    assert sparse_steps({"sketched20": [_cell("sketched20", 300, diverged_at=7)]}, None) is None
