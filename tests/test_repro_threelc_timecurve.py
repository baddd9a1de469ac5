"""The modelled time of 3LC prices every setting's step with one compute time (the median over all
training cells' measured steps of the one model): a cell measured while the machine was loaded
changes neither its own modelled time nor the best setting; each setting keeps its own codec time."""

from __future__ import annotations

import copy
import importlib
import statistics
from types import SimpleNamespace

import pytest
import torch
from gcbench.reproductions.threelc.report import time_section
from gcbench.reproductions.threelc.timecurve import beyond_compute_s, median_compute_s, model_compute_s, step_cost
from gcbench.reproductions.threelc.train import MethodSpec, PreparedData, TrainConfig, train

workload_mod = importlib.import_module("gcbench.reproductions.threelc.workload")  # the package exports a workload() function too
pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=8, eval_every=4, stage_check_every=4)
LOAD = 2.5  # a loaded cell: every forward/backward 2.5x as long, the codec's seconds unchanged


@pytest.fixture(scope="module")
def cell():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(96, 1, 8, 8, generator=g), torch.randint(0, 10, (96,), generator=g)
        data = PreparedData(x, y, x[:32], y[:32], {"name": "noise"})
        return train(data, TINY, MethodSpec("3lc-s1.00", "3LC", "3lc", {"sparsity": 1.0}, kind="3lc"))
    finally:
        torch.set_num_threads(old)


def loaded(r):
    """``r`` measured on a loaded machine: compute slower, the same codec seconds per step."""
    out = copy.deepcopy(r)
    out["compute_step_s"] = [c * LOAD for c in r["compute_step_s"]]
    out["measured_step_s"] = [m + c * (LOAD - 1) for m, c in zip(r["measured_step_s"], r["compute_step_s"])]
    return out


def results_of(cell):
    """The claims scale's training cells built from one run: the s = 1.50 cell is the loaded copy."""
    return {"train-32bit": cell, "train-3lc-s1.00": cell, "train-3lc-s1.50": loaded(cell),
            "train-3lc-s1.75": cell, "train-3lc-s1.90": cell}


def derive(results):
    wl = workload_mod.workload()
    ctx = SimpleNamespace(options={"dataset": "digits", "device": "cpu"}, preset=wl.spec.scale("claims"), scale="claims",
                          tables=["traffic", "accuracy", "time"])
    return wl, ctx, wl.derive(ctx, results)


def time_keys(out, key):
    return {k.replace(f".s{key}", ""): v for k, v in out.items() if k.startswith("time.") and k.endswith(f".s{key}")}


def test_loaded_cell_has_the_same_modelled_time(cell):
    """Identical codec seconds and bytes, a cell's own compute 2.5x (load): the same modelled time."""
    results = results_of(cell)
    slow = results["train-3lc-s1.50"]
    assert beyond_compute_s(slow) == pytest.approx(beyond_compute_s(cell))  # the codec's seconds: unchanged
    assert median_compute_s([slow]) == pytest.approx(LOAD * median_compute_s([cell]))
    _, _, out = derive(results)
    a, b = time_keys(out, "1.00"), time_keys(out, "1.50")
    assert a and set(a) == set(b) and any(k.startswith("time.reduction_modelled.") for k in a)
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=1e-9), k
    # the shared compute: the median over every step of every training cell
    steps = [c for r in results.values() for c in r["compute_step_s"]]
    shared = model_compute_s(results)
    assert shared == pytest.approx(statistics.median(steps))
    assert step_cost(slow, shared).compute_s == step_cost(cell, shared).compute_s == pytest.approx(shared)


def test_pricing_each_cell_with_its_own_compute_goes_red(cell, monkeypatch):
    """The mutation: each cell priced with its own compute (the shared time dropped) makes the loaded
    setting's modelled time differ, which the test above would flag."""
    monkeypatch.setattr(workload_mod, "model_compute_s", lambda results, given=None: given)
    _, _, out = derive(results_of(cell))
    a, b = time_keys(out, "1.00"), time_keys(out, "1.50")
    assert any(b[k] != pytest.approx(a[k], rel=1e-6) for k in a if k.startswith("time.reduction_modelled."))


def test_shared_compute_is_the_training_cells_median_or_the_given_time(cell):
    results = {**results_of(cell), "tie-3lc-s1.75": {"compute_step_s": [1e6] * 100}}  # another model: no part in it
    assert model_compute_s(results) == pytest.approx(model_compute_s(results_of(cell)))
    assert model_compute_s(results, 0.25) == 0.25
    assert model_compute_s({"tie-3lc-s1.75": results["tie-3lc-s1.75"]}) is None
    # a cell priced alone (no shared time) uses its own median
    assert step_cost(cell).compute_s == pytest.approx(statistics.median(cell["compute_step_s"]))


def test_report_names_the_shared_compute_and_shows_each_cells_as_information(cell):
    results = results_of(cell)
    wl, ctx, out = derive(results)
    tres = {m: results[f"train-{m}"] for m in wl.order if wl.methods[m].is_3lc and f"train-{m}" in results}
    text = time_section(wl, ctx, tres, out, list(wl.spec.workload["profiles"]), results["train-32bit"], results)
    assert "the median of all settings' steps" in text and "this cell's compute s/step (median; information)" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| 1.")}
    own = f"{median_compute_s([results['train-3lc-s1.50']]):.4g}"
    assert own in rows["1.50"] and own not in rows["1.00"]
