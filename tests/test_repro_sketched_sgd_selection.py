"""Algorithm 2's selection steps (lines 4-13), the gated guard ``selection-follows-algorithm-2``.

The two sketch guards read the Count Sketch itself (its estimates, its hashes); what the method does
with the sketches is read by the selection check (:mod:`gcbench.reproductions.sketched_sgd.selectcheck`)
on every worker at each of a run's first steps. At the micro preset on a generated dictionary, each
breakage below leaves both sketch guards green and turns this one red (monkeypatched in the test, never
a production flag):

* every worker sketches with its own hash seed (the summed tables are no sketch of the summed
  accumulators: each worker's table differs from the run's sketch of its accumulator);
* the k *smallest* exact sums among the P k candidates are applied instead of the k largest;
* one worker's round-2 values are left out of the sum (the update and the top k are of the other
  workers' values);
* line 4's carry across steps broken: the accumulator not carried over (``v = lr u``, the momentum
  kept), or every worker's state reset before each step. Both leave each step's own lines 5-13
  intact, so only the check across steps (:func:`carry_deviation`) sees them, from the second step on.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import gcbench.compressors.methods.sketched_sgd as ssgd
from gcbench.compressors import families
from gcbench.compressors.codecs.identity import Identity
from gcbench.compressors.wire.payload import Payload
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, evaluate_claim, falsifying_measurement
from gcbench.reproductions.sketched_sgd.selectcheck import (COUNTS, DEVIATIONS, FLOAT_SLACK, carry_deviation, check_step,
                                                              derive_selection)
from gcbench.reproductions.sketched_sgd.workload import workload

from dictd_fixtures import sketched_sgd_context

SCALE = "micro"
CLAIM = "selection-follows-algorithm-2"
SKETCH_GUARDS = ("sketch-estimates-within-bound", "sketch-hashes-independent")


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The workload and a run context of its micro preset on a generated dictionary (tracking off)."""
    return sketched_sgd_context(tmp_path_factory, SCALE)


def _run(micro, model: str = "transformer", method: str = "sketched20") -> tuple[dict[str, str], dict]:
    """The three guards' statuses on the micro preset's training and selection cells of ``<model>-<method>``,
    computed and derived by the workload itself, and the measured quantities."""
    wl, ctx = micro
    cells = [c for c in wl.plan(ctx, {}) if c.name in (f"t1-{model}-{method}", f"selection-{model}-{method}")]
    assert len(cells) == 2
    measured = wl.derive(ctx, {c.name: wl.compute(c, ctx) for c in cells})
    out = {}
    for cid in (CLAIM, *SKETCH_GUARDS):
        claim = next(c for c in wl.spec.claims if c.id == cid)
        assert claim.gate
        out[cid] = evaluate_claim(claim, measured, wl.spec, SCALE).status
    return out, measured


def _per_worker_seeds(m: pytest.MonkeyPatch) -> None:
    real, count = families.build, itertools.count()

    def build(name, **params):
        if name != "sketched-sgd":
            return real(name, **params)
        return real(name, **{**params, "seed": int(params["seed"]) + next(count)})  # a new hash seed per worker

    m.setattr(families, "build", build)


def _k_smallest(m: pytest.MonkeyPatch) -> None:
    def smallest(summed_values, candidates, k):
        vals = Identity().decode(summed_values) if isinstance(summed_values, Payload) else summed_values
        vals = vals.reshape(-1)
        low = torch.topk(vals.abs(), min(int(k), vals.numel()), largest=False, sorted=False).indices
        idx = candidates.reshape(-1).to(vals.device)[low]
        order = torch.argsort(idx)
        return idx[order], vals[low][order]

    m.setattr(ssgd, "select_topk", smallest)


def _drop_last_worker_round2(m: pytest.MonkeyPatch) -> None:
    real = ssgd.sketched_rounds

    class Dropping:
        def __init__(self, ctx, last):
            self._ctx, self._last = ctx, last

        def __getattr__(self, name):
            return getattr(self._ctx, name)

        def all_reduce(self, entries):
            def drop(fn):
                return lambda i: torch.zeros_like(fn(i)) if i == self._last else fn(i)
            return self._ctx.all_reduce([(kind, j, drop(fn) if kind == "round2" else fn) for kind, j, fn in entries])

    def rounds(ctx, workers, grads, keys, ks, Ps, lr=None):
        return real(Dropping(ctx, len(workers) - 1), workers, grads, keys, ks, Ps, lr=lr)

    m.setattr(ssgd, "sketched_rounds", rounds)


def test_gate_mutation_sketched_sgd_selection_follows_algorithm_2(micro, monkeypatch):
    for model, method in (("transformer", "sketched20"), ("lstm", "sketched40")):
        statuses, measured = _run(micro, model, method)
        assert statuses == {CLAIM: REPRODUCED, **{g: REPRODUCED for g in SKETCH_GUARDS}}, (model, method)
        assert measured[f"t1.{model}.{method}.selection_steps"] == 2  # micro's two steps, both checked
        assert measured[f"t1.{model}.{method}.selection_replay_equal"] == 1.0  # the training cell's steps
    for breakage in (_per_worker_seeds, _k_smallest, _drop_last_worker_round2):
        with monkeypatch.context() as m:
            breakage(m)
            statuses, measured = _run(micro)
            # the sketch guards read the Count Sketch, which each breakage leaves as it is
            assert statuses == {CLAIM: DIFFERS, **{g: REPRODUCED for g in SKETCH_GUARDS}}, breakage.__name__
            assert measured["t1.transformer.sketched20.selection_violating_steps"] == 2, breakage.__name__
            replayed_otherwise = 1 - measured["t1.transformer.sketched20.selection_replay_equal"]  # one more violation
            assert measured["t1.selection_violations"] == 2 + replayed_otherwise, breakage.__name__
    assert _run(micro)[0][CLAIM] == REPRODUCED  # nothing of the breakages stays behind


def test_each_breakage_shows_in_the_line_it_breaks(micro, monkeypatch):
    """Which quantity each breakage moves: the sketches (lines 5-7), the top k (line 9), the update (lines 10-11)."""
    where = {_per_worker_seeds: "sketch_deviation", _k_smallest: "selected_outside", _drop_last_worker_round2: "update_deviation"}
    for breakage, name in where.items():
        with monkeypatch.context() as m:
            breakage(m)
            measured = _run(micro)[1]
        got = measured[f"t1.transformer.sketched20.selection_{name}"]
        assert got > (FLOAT_SLACK if name in DEVIATIONS else 0), (breakage.__name__, got)


def _step(d: int = 4000, W: int = 3, P: int = 4, k: int = 20, seed: int = 0, heavy: float | None = None):
    """One honest step of Algorithm 2 by the in-process reference, and what :func:`check_step` reads
    (``heavy``: one coordinate of every worker's gradient set to that value)."""
    codec = ssgd.SketchedSGDWorker(rows=5, columns=200, seed=3).codec
    workers = [ssgd.SketchedSGDWorker(rows=5, columns=200, seed=3) for _ in range(W)]
    gen = torch.Generator().manual_seed(seed)
    grads = [torch.randn(d, generator=gen) for _ in range(W)]
    if heavy is not None:
        for g in grads:
            g[7] = heavy
    tables, v, cands, sels = [], [], [], []
    for i, w in enumerate(workers):
        r1, r2, ap = w.round1, w.round2, w.apply

        def first(g, *, key="", lr=None, r1=r1, w=w):
            p = r1(g, key=key, lr=lr)
            v.append(w.accumulated(key))
            tables.append(p.sections[0].clone())
            return p

        w.round1 = first
        w.round2 = lambda c, *, key="", r2=r2: (cands.append(c.clone()), r2(c, key=key))[1]
        w.apply = lambda s, *, key="", ap=ap: (sels.append(s.clone()), ap(s, key=key))[1]
    step = ssgd.run_sketched_sgd_step(workers, grads, k, P)
    after = [w.accumulated("") for w in workers]
    return dict(v=v, tables=tables, candidates=cands, selected=sels, after=after, mean_update=step.update / W,
                codec=codec, num_candidates=P * k, k=k)


def test_an_honest_step_breaks_nothing_and_each_edit_breaks_its_line():
    args = _step()
    out = check_step(**args)
    assert out["violated"] == 0.0 and all(out[c] == 0 for c in COUNTS) and all(out[x] <= FLOAT_SLACK for x in DEVIATIONS)
    off = next(i for i in range(args["v"][0].numel()) if i not in set(args["selected"][0].tolist()))  # not applied
    edits = {
        "sketch_deviation": lambda a: {**a, "tables": [a["tables"][0], a["tables"][1] * 2, *a["tables"][2:]]},
        "candidate_mismatch": lambda a: {**a, "candidates": [a["candidates"][0], a["candidates"][1][1:], *a["candidates"][2:]]},
        "selected_mismatch": lambda a: {**a, "selected": [a["selected"][0], a["selected"][1][:-1], *a["selected"][2:]]},
        "update_outside": lambda a: {**a, "mean_update": a["mean_update"] + (torch.arange(a["mean_update"].numel()) == off)},
        "not_zeroed": lambda a: {**a, "after": [a["v"][0], *a["after"][1:]]},
        "changed_elsewhere": lambda a: {**a, "after": [torch.zeros_like(a["after"][0]), *a["after"][1:]]},
        "update_deviation": lambda a: {**a, "mean_update": a["mean_update"] * 1.01},
    }
    for name, edit in edits.items():
        out = check_step(**edit(args))
        assert out["violated"] == 1.0 and out[name] > (FLOAT_SLACK if name in DEVIATIONS else 0), name


def test_the_guard_needs_every_sketched_method_checked():
    step = {"violated": 0.0, **{c: 0.0 for c in COUNTS}, **{x: 0.0 for x in DEVIATIONS}}
    training = {"model": "transformer", "method": {"name": "sketched20", "kind": "sketched"}, "losses": [3.0, 2.9, 2.8]}
    check = {"model": "transformer", "method": {"name": "sketched20", "kind": "sketched"}, "steps": [step, step], "losses": [3.0, 2.9]}
    other = {**training, "method": {"name": "sketched40", "kind": "sketched"}}
    full = derive_selection({"t1-transformer-sketched20": training, "selection-transformer-sketched20": check})
    assert full["t1.selection_violations"] == 0.0 and full["t1.transformer.sketched20.selection_replay_equal"] == 1.0
    # a Sketched-SGD method without its check: the guard is not measured (not run), never a silent pass
    assert "t1.selection_violations" not in derive_selection({"t1-transformer-sketched20": training, "t1-transformer-sketched40": other,
                                                              "selection-transformer-sketched20": check})
    assert "t1.selection_violations" not in derive_selection({"t1-transformer-sketched20": training,
                                                              "selection-transformer-sketched20": {**check, "steps": []}})
    replayed_otherwise = derive_selection({"t1-transformer-sketched20": training,
                                           "selection-transformer-sketched20": {**check, "losses": [3.0, 2.8]}})
    assert replayed_otherwise["t1.transformer.sketched20.selection_replay_equal"] == 0.0
    assert replayed_otherwise["t1.selection_violations"] == 1.0  # checked steps that are not the run's: not a pass


def test_the_gate_fails_on_a_falsifying_measurement():
    spec = workload().spec
    claim = next(c for c in spec.claims if c.id == CLAIM)
    assert claim.kind == "guard" and claim.gate and not claim.scale_dependent and claim.scales is None
    assert evaluate_claim(claim, falsifying_measurement(claim, spec), spec, SCALE).status == DIFFERS
    assert evaluate_claim(claim, {"t1.selection_violations": 0.0}, spec, "parity").status == REPRODUCED


def _no_carry(m: pytest.MonkeyPatch) -> None:
    """Line 4 without the carry: each step's accumulator starts from zero (``v = lr u``), the momentum kept."""
    real = ssgd.SketchedSGDWorker.round1

    def round1(self, grad, *, key="", lr=None):
        state = self.state_dict()
        if f"v/{key}" in state:
            state[f"v/{key}"].zero_()
            self.load_state_dict(state)
        return real(self, grad, key=key, lr=lr)

    m.setattr(ssgd.SketchedSGDWorker, "round1", round1)


def _reset_each_step(m: pytest.MonkeyPatch) -> None:
    """Every worker's state (momentum and accumulator) forgotten before each step."""
    real = ssgd.SketchedSGDWorker.round1

    def round1(self, grad, *, key="", lr=None):
        self.reset_state()
        return real(self, grad, key=key, lr=lr)

    m.setattr(ssgd.SketchedSGDWorker, "round1", round1)


def test_selection_gate_goes_red_when_the_carry_across_steps_breaks(micro, monkeypatch):
    """A carry broken across steps leaves every check within a step, and both sketch guards, green: the
    gate goes red on the check across steps alone (micro's second step; its first starts from zero anyway)."""
    statuses, measured = _run(micro)
    assert statuses[CLAIM] == REPRODUCED
    assert measured["t1.transformer.sketched20.selection_carry_deviation"] <= FLOAT_SLACK
    for breakage in (_no_carry, _reset_each_step):
        with monkeypatch.context() as m:
            breakage(m)
            statuses, measured = _run(micro)
        assert statuses == {CLAIM: DIFFERS, **{g: REPRODUCED for g in SKETCH_GUARDS}}, breakage.__name__
        base = "t1.transformer.sketched20"
        assert measured[f"{base}.selection_violating_steps"] == 1 == measured["t1.selection_violations"], breakage.__name__
        assert measured[f"{base}.selection_carry_deviation"] > FLOAT_SLACK, breakage.__name__
        # the checks within a step see nothing
        assert all(measured[f"{base}.selection_{c}"] == 0 for c in COUNTS), breakage.__name__
        assert all(measured[f"{base}.selection_{x}"] <= FLOAT_SLACK for x in DEVIATIONS), breakage.__name__
    assert _run(micro)[0][CLAIM] == REPRODUCED


def test_the_carry_deviation_reads_line_4():
    gen = torch.Generator().manual_seed(1)
    u0, v0, g = (torch.randn(500, generator=gen) for _ in range(3))
    lr, rho = 0.3, 0.9
    u = u0 * rho + g
    assert carry_deviation(v0 + lr * u, (u0, v0), g, lr, rho) <= 1e-6  # float32 rounding only
    assert carry_deviation(lr * g, None, g, lr, rho) <= 1e-6  # a fresh worker starts from zero
    assert carry_deviation(lr * u, (u0, v0), g, lr, rho) > 0.1  # no carry: v = lr u
    assert carry_deviation(lr * g, (u0, v0), g, lr, rho) > 0.1  # state reset
    assert carry_deviation(v0 + lr * g, (u0, v0), g, lr, rho) > 0.1  # momentum not carried


@pytest.mark.parametrize("heavy", [1.0, 1e4, 1e6])
def test_one_heavy_coordinate_neither_hides_a_break_nor_flags_an_honest_step(heavy, monkeypatch):
    """The slack is per coordinate: a coordinate 10^6 times the others does not widen it for the rest."""
    assert check_step(**_step(heavy=heavy))["violated"] == 0.0
    _k_smallest(monkeypatch)
    broken = check_step(**_step(heavy=heavy))
    assert broken["violated"] == 1.0 and broken["selected_outside"] > 0
