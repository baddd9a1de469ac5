"""The 3LC reproduction's derived numbers and report text: the farthest setting of the accuracy claim
in either direction, the tie ratio and the logged compression ratio counting bytes alike on both
sides, and the accuracy reading's short-run caveat only at scales that do not test accuracy."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from gcbench.reproductions.framework.cells import Cell
from gcbench.reproductions.threelc import workload
from gcbench.reproductions.threelc.discussion import discussion
from gcbench.reproductions.threelc.train import MethodSpec, PreparedData, TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=8, eval_every=4, stage_check_every=4)


def tiny_data() -> PreparedData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (96,), generator=g)
    return PreparedData(x, y, x[:32], y[:32], {"name": "noise"})


@pytest.fixture(scope="module")
def tiny_cells():
    """A 32-bit cell and a 3LC s=1.00 cell of the same tiny run."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = tiny_data()
        base = train(data, TINY, MethodSpec("32bit", "32-bit", "identity", pull="fp32", kind="baseline"))
        three = train(data, TINY, MethodSpec("3lc-s1.00", "3LC", "3lc", {"sparsity": 1.0}, kind="3lc"))
        return base, three
    finally:
        torch.set_num_threads(old)


def with_accuracy(cell, acc):
    out = copy.deepcopy(cell)
    out["summary"]["final_test_acc"] = acc
    return out


def test_the_accuracy_claim_sees_the_setting_farthest_from_32bit_either_way(tiny_cells):
    """One setting 1.5 points *above* 32-bit, the others within half a point: the claim 'every setting
    within 1 point of 32-bit' must see the +1.5 (the signed largest |delta|), not the most negative delta."""
    base, three = tiny_cells
    wl = workload()
    ctx = SimpleNamespace(options={}, preset=wl.spec.scale("smoke"), tables=["traffic", "accuracy", "time"], scale="smoke")
    b = base["summary"]["final_test_acc"]
    results = {"train-32bit": base}
    for s, d in (("1.00", -0.5), ("1.50", 1.5), ("1.75", 0.2), ("1.90", 0.0)):
        results[f"train-3lc-s{s}"] = with_accuracy(three, b + d / 100)
    out = wl.derive(ctx, results)
    assert out["acc.delta_pp.s1.00"] == pytest.approx(-0.5)
    assert out["acc.delta_pp.worst3lc"] == pytest.approx(1.5)
    # and the most negative one where it is the farthest
    results["train-3lc-s1.50"] = with_accuracy(three, b - 2.0 / 100)
    assert wl.derive(ctx, results)["acc.delta_pp.worst3lc"] == pytest.approx(-2.0)


def test_the_tie_ratio_counts_both_models_bytes_alike(tiny_cells):
    """The same cell on both sides of the tie gives a ratio of exactly 1: both reductions are fp32 bytes
    of the same steps / framed push + pull of those steps (the batch-norm statistics on neither side)."""
    _, three = tiny_cells
    wl = workload()
    preset = wl.spec.scale("claims")
    ctx = SimpleNamespace(options={}, preset=preset, tables=["traffic"], scale="claims")
    m = preset["proxy_tie"]["method"]
    cell = copy.deepcopy(three)
    assert cell["summary"]["stats_bytes"] > 0  # the statistics the server fetched are in the cell's traffic
    out = wl.tie_quantities(ctx, {f"tie-{m}": cell, f"train-{m}": cell})
    assert out["tie.reduction.big"] == pytest.approx(out["tie.reduction.proxy"], rel=1e-12)
    assert out["tie.ratio"] == pytest.approx(1.0, rel=1e-12)


class _Run:
    def __init__(self):
        self.rows = []
        self.dir = None

    def log(self, row, step=None):
        self.rows.append((step, dict(row)))

    def summary(self, values):
        pass

    def finish(self):
        pass


class _Tracker:
    def __init__(self):
        self.runs = []

    def start(self, name, config, tags=None, group=None):
        run = _Run()
        self.runs.append(run)
        return run


@pytest.mark.parametrize("method", ["32bit", "local-2"])
def test_the_logged_compression_ratio_is_the_claims_traffic_reduction(method):
    """The W&B ``compression_ratio`` counts the fp32 side as the claims do (the 32-bit run's gradients,
    model changes and batch-norm statistics up to that evaluation), so at the last evaluation it equals
    the cell's ``traffic_reduction``."""
    wl = workload()
    cfg = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=4, eval_every=2, stage_check_every=2)
    config = {"dataset": "digits", "image_size": 8, "eval_samples": 64, "augment": False, "topology": "parameter_server",
              "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()},
              "kind": "train", "method": wl.method_config(method)}
    tracker = _Tracker()
    ctx = SimpleNamespace(cache={}, tracker=tracker, progress=SimpleNamespace(advance_epoch=lambda: None), scale="micro",
                          options={})
    result = wl.compute(Cell(f"train-{method}", config), ctx)
    s = result["summary"]
    assert s["stats_bytes"] > 0 and s["baseline_stats_bytes"] > 0
    rows = [r for _, r in tracker.runs[0].rows if "compression_ratio" in r]
    assert len(rows) == len(result["evals"]) - 1
    assert rows[-1]["compression_ratio"] == pytest.approx(s["traffic_reduction"], rel=1e-12)


def accuracy_text(scale: str, **extra: float | None) -> str:
    wl = workload()
    ctx = SimpleNamespace(scale=scale, options={}, preset=wl.spec.scale(scale))
    res = {"32bit": {"summary": {"steps": 4000}}}
    return discussion(wl, ctx, res, {"acc.delta_pp.s1.00": -0.3, "acc.delta_pp.worst3lc": -0.6, **extra}, {})


def test_the_short_run_caveat_is_printed_only_where_accuracy_is_not_tested():
    """At `full` and `paper` (the accuracy claims' meaningful_at) the reading says whether the schedule
    settled (the longer 32-bit run) and never excuses a gap as a short run's; below them it says the run
    is short and names the scales that test it."""
    for scale in ("full", "paper"):
        settled = accuracy_text(scale, **{"acc.length_gain_pp": 0.4, "acc.schedule_settled": 1.0})
        assert "overstates the gap" not in settled and "stretched to 2× the steps ends 0.4 points above" in settled
        assert "ends where longer training would" in settled
        unsettled = accuracy_text(scale, **{"acc.length_gain_pp": 1.6, "acc.schedule_settled": 0.0})
        assert "longer training still gains" in unsettled and "*not at this scale*" in unsettled
        assert "ends 0.7 points below" in accuracy_text(scale, **{"acc.length_gain_pp": -0.7, "acc.schedule_settled": 1.0})
        assert "diverged" in accuracy_text(scale, **{"acc.length_gain_pp": -80.0, "acc.schedule_settled": None})
        assert "not known" in accuracy_text(scale)
    for scale in ("claims", "smoke"):
        text = accuracy_text(scale)
        assert "overstates the gap" in text and "`full` and `paper` are the test" in text


def full_ctx(tables=("traffic", "accuracy", "time")):
    wl = workload()
    return wl, SimpleNamespace(options={"dataset": "fashion-mnist", "device": "cpu"}, preset=wl.spec.scale("full"),
                               tables=list(tables), scale="full")


def test_the_scales_that_test_accuracy_plan_the_32bit_run_over_a_longer_schedule():
    """`full` and `paper` (the accuracy claims' scales) add `long-32bit`: the 32-bit method over the run's
    schedule stretched to length_check times the steps, learning rate for learning rate at each fraction
    of the run; only where the accuracy table is selected; no other scale plans it."""
    wl, ctx = full_ctx()
    cells = {c.name: c.config for c in wl.plan(ctx, {})}
    assert wl.spec.scale("full")["length_check"] == wl.spec.scale("paper")["length_check"] == 2
    long, run = cells["long-32bit"], cells["train-32bit"]
    assert long["method"] == run["method"] and {k: v for k, v in long.items() if k != "train"} == {k: v for k, v in run.items() if k != "train"}
    lt, rt = (TrainConfig(**{**c["train"], "profiles": tuple(c["train"]["profiles"])}) for c in (long, run))
    assert lt.steps == 2 * rt.steps and lt.warmup_steps == 2 * rt.warmup_steps and lt.eval_every == 2 * rt.eval_every
    assert [lt.lr_at(2 * i + 1) for i in range(0, rt.steps, 37)] == pytest.approx([rt.lr_at(i) for i in range(0, rt.steps, 37)], abs=1e-3 * rt.lr)
    assert lt.lr_at(lt.steps - 1) < 1e-4 * lt.lr and lt.lr_at(lt.steps // 2) == pytest.approx(rt.lr_at(rt.steps // 2), rel=1e-3)
    assert "long-32bit" not in {c.name for c in wl.plan(full_ctx(["traffic"])[1], {})}
    for scale in ("smoke", "micro", "claims"):
        assert "length_check" not in wl.spec.scale(scale)
        ctx_s = SimpleNamespace(**{**ctx.__dict__, "preset": wl.spec.scale(scale), "scale": scale})
        assert "long-32bit" not in {c.name for c in wl.plan(ctx_s, {})}


def test_the_accuracy_claims_are_tested_only_where_the_longer_schedule_gains_at_most_their_tolerance(tiny_cells):
    """The flag reads the longer 32-bit run against the run's: a gain within the claims' 1 point gives 1
    and the claims their verdict, more gives 0 and *not at this scale*, a diverged longer run no flag
    (*not run*); a run without the longer cell has no flag either."""
    from gcbench.reproductions.framework.claims import NOT_AT_SCALE, NOT_RUN, evaluate_claims

    base, three = tiny_cells
    wl, ctx = full_ctx()
    b = base["summary"]["final_test_acc"]
    results = {"train-32bit": base}
    for s in ("1.00", "1.50", "1.75", "1.90"):
        results[f"train-3lc-s{s}"] = with_accuracy(three, b - 0.3 / 100)

    def judged(gain, diverged=False):
        long = with_accuracy(base, b + gain / 100)
        long["summary"]["diverged"] = diverged
        out = wl.derive(ctx, {**results, "long-32bit": long})
        by_id = {r.claim.id: r for r in evaluate_claims(wl.spec, out, "full")}
        return out, by_id["accuracy-all-s"], by_id["accuracy-s1.00"]

    out, all_s, one = judged(0.9)
    assert out["acc.length_gain_pp"] == pytest.approx(0.9) and out["acc.schedule_settled"] == 1.0
    assert all_s.status not in (NOT_AT_SCALE, NOT_RUN) and one.status not in (NOT_AT_SCALE, NOT_RUN)
    out, all_s, one = judged(-2.0)  # the longer run ends lower: no gain left, settled
    assert out["acc.schedule_settled"] == 1.0
    out, all_s, one = judged(1.2)
    assert out["acc.schedule_settled"] == 0.0 and all_s.status == one.status == NOT_AT_SCALE
    out, all_s, _ = judged(5.0, diverged=True)
    assert out["acc.schedule_settled"] is None and all_s.status == NOT_RUN
    out = wl.derive(ctx, results)
    assert "acc.schedule_settled" not in out
    assert {r.claim.id: r for r in evaluate_claims(wl.spec, out, "full")}["accuracy-all-s"].status == NOT_RUN
