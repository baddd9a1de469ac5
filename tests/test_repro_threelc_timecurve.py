"""The modelled time of 3LC prices every setting's step with one compute time (the median over all
training cells' measured steps of the one model) and each setting's codec time as its share of its
own steps' compute times that one time: a cell measured while the machine was loaded (its whole step
slower) changes neither its own modelled time nor the best setting."""

from __future__ import annotations

import copy
import importlib
import statistics
from types import SimpleNamespace

import pytest
import torch
from gcbench.envs.network import load_profile
from gcbench.reproductions.threelc.report import time_section
from gcbench.reproductions.threelc import timecurve as timecurve_mod
from gcbench.reproductions.threelc.timecurve import (beyond_compute_s, codec_share, machine_compute_s, median_compute_s, model_compute_s,
                                                     step_cost)
from gcbench.reproductions.threelc.train import MethodSpec, PreparedData, TrainConfig, train

workload_mod = importlib.import_module("gcbench.reproductions.threelc.workload")  # the package exports a workload() function too
pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=8, eval_every=4, stage_check_every=4)
LOAD = 2.5  # a loaded cell: every step 2.5x as long, its forward/backward and its codec work alike


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
    """``r`` measured on a loaded machine: every step's forward/backward and codec work slower alike."""
    out = copy.deepcopy(r)
    out["compute_step_s"] = [c * LOAD for c in r["compute_step_s"]]
    out["measured_step_s"] = [m * LOAD for m in r["measured_step_s"]]
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
    """Identical bytes, a cell's whole step 2.5x (load): the same modelled time."""
    results = results_of(cell)
    slow = results["train-3lc-s1.50"]
    assert beyond_compute_s(slow) == pytest.approx(LOAD * beyond_compute_s(cell))  # its own codec seconds moved with load
    assert codec_share(slow) == pytest.approx(codec_share(cell))  # its share did not
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
    a_cost, b_cost = step_cost(cell, shared, cell, shared), step_cost(slow, shared, cell, shared)
    assert a_cost.codec_s == pytest.approx(b_cost.codec_s) == pytest.approx(codec_share(cell) * shared)
    assert a_cost.baseline_other_s == pytest.approx(codec_share(cell) * shared)  # the 32-bit side: the same rule


def test_pricing_each_cell_with_its_own_compute_goes_red(cell, monkeypatch):
    """The mutation: each cell priced with its own compute (the shared time dropped) makes the loaded
    setting's modelled time differ, which the test above would flag."""
    monkeypatch.setattr(workload_mod, "model_compute_s", lambda results, given=None: given)
    _, _, out = derive(results_of(cell))
    a, b = time_keys(out, "1.00"), time_keys(out, "1.50")
    assert any(b[k] != pytest.approx(a[k], rel=1e-6) for k in a if k.startswith("time.reduction_modelled."))


def test_pricing_codec_by_each_cells_own_seconds_goes_red(cell, monkeypatch):
    """The mutation: each setting's codec time its own mean seconds beyond compute (the share dropped):
    the loaded setting's codec time rises with the load, its modelled time falls, and it can no
    longer be the best setting whatever its bytes."""
    shared = model_compute_s(results_of(cell))
    monkeypatch.setattr(timecurve_mod, "codec_share", lambda r: None if r is None else beyond_compute_s(r) / shared)
    _, _, out = derive(results_of(cell))
    a, b = time_keys(out, "1.00"), time_keys(out, "1.50")
    reds = [k for k in a if k.startswith("time.reduction_modelled.")]
    assert reds and all(b[k] < a[k] * (1 - 1e-6) for k in reds)


def test_codec_is_priced_at_this_machines_compute_when_compute_is_given(cell):
    """--compute-seconds-per-step prices another accelerator's forward/backward; the codec still runs
    here, so its time is its share times this machine's measured compute, not times the given one."""
    results = results_of(cell)
    wl = workload_mod.workload()
    ctx = SimpleNamespace(options={"dataset": "digits", "device": "cpu", "compute_seconds_per_step": 0.01},
                          preset=wl.spec.scale("claims"), scale="claims", tables=["traffic", "accuracy", "time"])
    out = wl.derive(ctx, results)
    machine = machine_compute_s(results)
    cost = step_cost(cell, 0.01, cell, machine)
    assert cost.compute_s == 0.01 and cost.codec_s == pytest.approx(codec_share(cell) * machine)
    p = list(wl.spec.workload["profiles"])[0]
    link = load_profile(p).link
    expect = timecurve_mod.reduction_at(cost, link.bandwidth_Bps * 8, link.latency_s)
    assert out[f"time.reduction_modelled.{p}.s1.00"] == pytest.approx(expect)


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
    assert "codec share of compute (median over steps)" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| 1.")}
    own = f"{median_compute_s([results['train-3lc-s1.50']]):.4g}"
    assert own in rows["1.50"] and own not in rows["1.00"]
