"""The training runs price Spark's broadcast as the driver's critical path does: ``α + copies·bytes/β`` per
iteration with the spec's ``broadcast_copies`` (one concept, read in one place: ``SketchMLSettings``), from
the bytes each cell recorded; ``copies = W`` is the serial model, the modelled seconds the cells record.
Their driver's decode stays serial (a training cell records one driver time per iteration)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from gcbench.envs.network import load_profile
from gcbench.reproductions.sketchml.critical_path import SERIAL, DriverModel, epoch_comm_seconds
from gcbench.reproductions.sketchml.measures import cumulative_times, priced_run, priced_sweep_rows
from gcbench.reproductions.sketchml.netmodel import comm_seconds, profile_info
from gcbench.reproductions.sketchml.report import discussion
from gcbench.reproductions.sketchml.train import Split, TrainConfig, train
from gcbench.reproductions.sketchml.workload import workload

W = 3
PROFILE = "sketchml-cluster2-10"


@pytest.fixture(scope="module")
def run() -> dict:
    """A real (tiny) training cell: LR, Adam-double, 3 workers, 2 epochs of 10 iterations."""
    rng = np.random.default_rng(0)
    X = sp.random(400, 300, density=0.05, format="csr", random_state=1, data_rvs=lambda n: np.ones(n))
    y = np.where(rng.random(400) < 0.5, 1.0, -1.0)
    split = Split(X[:300], y[:300], X[300:], y[300:])
    cfg = TrainConfig(model="lr", method=workload().methods["adam-double"], workers=W, epochs=2, lr=0.01, profile=PROFILE)
    return train(split, cfg)


def test_the_training_runs_take_the_specs_broadcast_copies():
    wl = workload()
    copies = wl.spec.workload["broadcast_copies"]
    assert copies == 1 and wl.broadcast_copies == 1  # Spark's TorrentBroadcast: one copy on the driver's link
    assert wl.training_driver() == DriverModel(1, copies)  # the decode serial, the broadcast the critical path's
    assert all(d.broadcast_copies == wl.broadcast_copies for d in wl.driver_models().values())
    assert "copies·bytes/β" in profile_info(PROFILE)["model"] and "W·bytes" not in profile_info(PROFILE)["model"]


def test_a_training_runs_pull_is_alpha_plus_copies_bytes_over_beta(run):
    wl = workload()
    link = load_profile(wl.spec.workload["profile_tables"]).link
    a, b = link.latency_s, link.bandwidth_Bps
    priced = wl.priced({"train-lr-adam-double": run}, W)["train-lr-adam-double"]
    copies = wl.training_driver().copies(W)
    cum = 0.0
    for rec, e in zip(run["epochs"][1:], priced["epochs"][1:]):
        iters = rec["messages"] / W
        assert iters == 10 and rec["bytes_down"] > 0
        assert e["modelled_pull_s"] == pytest.approx(iters * a + copies * rec["bytes_down"] / b, rel=1e-12)
        assert e["modelled_push_s"] == pytest.approx(iters * a + rec["bytes_up"] / b, rel=1e-12)
        assert e["epoch_time_s"] == pytest.approx(rec["measured_s"] + e["modelled_push_s"] + e["modelled_pull_s"], rel=1e-12)
        cum += e["epoch_time_s"]
        assert e["cum_time_s"] == pytest.approx(cum, rel=1e-12)
        assert e["modelled_pull_s"] < rec["modelled_pull_s"]  # the cell's record is the serial model's, W copies
    s = priced["summary"]
    assert s["mean_epoch_time_s"] == pytest.approx(np.mean([e["epoch_time_s"] for e in priced["epochs"][1:]]))
    assert s["mean_modelled_comm_s"] == pytest.approx(np.mean([e["modelled_comm_s"] for e in priced["epochs"][1:]]))
    assert s["mean_measured_s"] == run["summary"]["mean_measured_s"]  # measured seconds are never re-priced


@pytest.mark.parametrize("serial", [SERIAL, DriverModel(1, W)])
def test_copies_equal_to_w_is_the_serial_model_the_cell_records(run, serial):
    link = load_profile(PROFILE).link
    priced = priced_run(run, link, W, serial)
    for rec, e in zip(run["epochs"], priced["epochs"]):
        for k in ("modelled_push_s", "modelled_pull_s", "modelled_comm_s", "epoch_time_s", "cum_time_s", "cum_modelled_s"):
            assert e[k] == pytest.approx(rec[k], rel=1e-9, abs=1e-15), k
    for k in ("mean_epoch_time_s", "median_epoch_time_s", "mean_modelled_comm_s", "mean_modelled_push_s"):
        assert priced["summary"][k] == pytest.approx(run["summary"][k], rel=1e-9), k
    assert cumulative_times(run["epochs"], load_profile(PROFILE), W, serial) == pytest.approx([e["cum_time_s"] for e in run["epochs"]])
    # per iteration, the same as the in-cell model (netmodel's default)
    assert comm_seconds(PROFILE, "parameter_server", [10, 20, 30], 40) == comm_seconds(
        PROFILE, "parameter_server", [10, 20, 30], 40, driver=serial)


def test_derive_reads_the_priced_runs(run, monkeypatch):
    """The measured quantities of the training runs come from the priced epochs; with broadcast_copies = W in
    the spec they would be the cell's own (serial) numbers."""
    wl = workload()
    ctx = SimpleNamespace(options={}, preset={**wl.spec.scale("smoke"), "workers": W}, tables=["2"], scale="smoke")
    results = {"train-lr-adam-double": run}
    out = wl.derive(ctx, results)
    priced = wl.priced(results, W)["train-lr-adam-double"]
    trained = priced["epochs"][1:]
    assert out["t2.lr.adam.epoch_time_s"] == priced["summary"]["mean_epoch_time_s"] < run["summary"]["mean_epoch_time_s"]
    share = sum(e["modelled_comm_s"] for e in trained) / sum(e["epoch_time_s"] for e in trained)
    assert out["t2.lr.adam.comm_share"] == pytest.approx(share)
    monkeypatch.setitem(wl.spec.workload, "broadcast_copies", W)
    serial = wl.derive(ctx, results)
    assert serial["t2.lr.adam.epoch_time_s"] == pytest.approx(run["summary"]["mean_epoch_time_s"], rel=1e-9)
    assert serial["t2.lr.adam.comm_share"] > out["t2.lr.adam.comm_share"]


def test_the_fig8_sweep_prices_its_bytes_per_iteration():
    link = load_profile("sketchml-cluster1").link
    a, b = link.latency_s, link.bandwidth_Bps
    row = {"ratio": 0.05, "measured_s_per_iteration": 0.02, "push_bytes_per_iteration": 3e5, "down_bytes_per_iteration": 2e5}
    (one,), (serial,) = priced_sweep_rows([row], link, W, DriverModel(1, 1)), priced_sweep_rows([row], link, W, SERIAL)
    assert one["modelled_s_per_iteration"] == pytest.approx(2 * a + (3e5 + 2e5) / b)
    assert serial["modelled_s_per_iteration"] == pytest.approx(2 * a + (3e5 + W * 2e5) / b)  # the cell's in-cell number
    assert one["epoch_time_s"] == pytest.approx(20 * (0.02 + one["modelled_s_per_iteration"]))
    assert one["epoch_modelled_s"] + one["epoch_measured_s"] == pytest.approx(one["epoch_time_s"])
    assert epoch_comm_seconds(1, 3e5, 2e5, W, link, SERIAL) == pytest.approx(comm_seconds(
        "sketchml-cluster1", "parameter_server", [1e5] * W, 2e5))


def test_the_sweep_cell_records_the_bytes_that_price_to_its_own_serial_seconds():
    """A real (tiny) fig8-sweep cell: its rows carry the bytes per iteration, and pricing them with W copies gives
    back the serial seconds the cell wrote; the spec's one copy prices them lower."""
    wl = workload()

    class Run:
        dir = None

        def log(self, *a, **k):
            pass

        def finish(self):
            pass

    preset = {**wl.spec.scale("smoke"), "tables": ["fig8"], "fig8_ratios": [0.05, 0.1], "fig8_warmup_epochs": 1,
              "dataset": {"name": "synthetic", "rows": 3000, "features": 4000, "nnz_per_row": 20.0, "exponent": 0.9,
                          "shuffle_ids": True, "signal": 2.0, "bias": 0.0, "seed": 0}}
    ctx = SimpleNamespace(options={}, preset=preset, tables=["fig8"], scale="smoke", cache={},
                          tracker=SimpleNamespace(start=lambda *a, **k: Run()),
                          progress=SimpleNamespace(advance_epoch=lambda: None))
    cell = next(c for c in wl.plan(ctx, {}) if c.name == "fig8-sweep")
    rows = wl.compute(cell, ctx)["rows"]
    workers, link = int(preset["workers"]), load_profile(wl.spec.workload["profile_fig8"]).link
    priced = wl.priced({"fig8-sweep": {"rows": rows}}, workers)["fig8-sweep"]["rows"]
    for r, s, p in zip(rows, priced_sweep_rows(rows, link, workers, SERIAL), priced):
        assert r["down_bytes_per_iteration"] > 0
        for k in ("modelled_s_per_iteration", "epoch_time_s", "epoch_modelled_s", "epoch_measured_s"):
            assert s[k] == pytest.approx(r[k], rel=1e-9), k
        assert p["epoch_time_s"] < r["epoch_time_s"] and p["epoch_measured_s"] == pytest.approx(r["epoch_measured_s"])


def test_a_sweep_cell_without_its_bytes_is_refused():
    wl = workload()
    with pytest.raises(ValueError, match="recompute"):
        wl.priced({"fig8-sweep": {"rows": [{"ratio": 0.1, "epoch_time_s": 1.0}]}}, W)


def test_the_break_even_bandwidth_counts_the_broadcasts_copies():
    """The report's break-even bandwidth: the bytes SketchML saves on the driver's link, push + copies x broadcast."""
    wl = workload()
    spec = wl.spec
    ctx = SimpleNamespace(spec=spec, scale="smoke", tables=["2"], options={}, preset={**spec.scale("smoke"), "workers": 10})

    def summary(measured, up, down):
        return {"summary": {"mean_measured_s": measured, "mean_modelled_comm_s": 0.1, "mean_epoch_time_s": measured + 0.1,
                            "mean_message_bytes": 1000.0, "bytes_up_per_epoch": up, "bytes_down_per_epoch": down}}

    results = {"train-lr-sketchml": summary(2.0, 1e8, 1e8), "train-lr-adam-double": summary(1.0, 5e8, 5e8)}

    def gbps(driver):
        text = discussion(ctx, results, {}, {}, driver=driver)
        return float(re.search(r"slower than about \*\*([0-9.]+) Gbps", text).group(1))

    assert gbps(None) == pytest.approx(8 * (4e8 + 1 * 4e8) / 1.0 / 1e9, rel=1e-2)  # the spec's one copy
    assert gbps(SERIAL) == pytest.approx(8 * (4e8 + 10 * 4e8) / 1.0 / 1e9, rel=1e-2)  # the serial model, W copies
