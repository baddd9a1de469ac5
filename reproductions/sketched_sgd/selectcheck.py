"""Algorithm 2's selection steps and error accumulation, checked on every worker at each of a run's first steps.

The two sketch guards (:mod:`.sketchcheck`) read the Count Sketch itself: its estimates and its hashes.
What the method does with the sketches is Algorithm 2's lines 4-13 (the slides' "Algorithm and
theory"; :mod:`gcbench.compressors.methods.sketched_sgd` lays them out), and this module checks that
part on the run's own steps, from what every worker holds and sends, against a reference computed
here from the workers' accumulators alone:

* lines 5-7, the sketches: each worker's round-1 table is the run's Count Sketch (worker 0's codec:
  its hashes, rows and columns) of that worker's own accumulator ``v_i``, so the summed table is the
  sketch of ``sum_i v_i`` (the Count Sketch is linear only where every worker shares the hashes);
  ``sketch_deviation``, the largest ``|T_i - S(v_i)|`` over the largest ``|S(v_i)|``;
* line 8, the candidates: every worker fetches the same ``min(d, P k)`` coordinates
  (``candidate_mismatch`` counts what is not so), and each has one of the ``P k`` largest estimates
  of the summed table (``candidates_outside``: those whose estimate lies below the ``P k``-th largest);
* line 9, the top k: every worker applies the same ``min(k, P k)`` coordinates, all of them among the
  candidates (``selected_mismatch``), each with one of the ``k`` largest exact sums ``|sum_i v_i|`` of
  the candidates (``selected_outside``);
* lines 10-11, the update: the step's update (``W`` times the mean the optimizer applies) is
  ``sum_i v_i`` at the applied coordinates (``update_deviation``, each coordinate's over its own
  ``sum_i |v_i|``) and zero elsewhere (``update_outside``);
* line 13, the error accumulation: every worker zeroes ``v_i`` at the applied coordinates
  (``not_zeroed``) and nowhere else (``changed_elsewhere``);
* line 4 with line 13's carry, across steps: each worker's accumulator after line 4 is what it held
  after its previous step plus ``lr (rho u + g)``, ``g`` its new gradient and ``u`` its momentum after
  the previous step (zero for a fresh worker; ``rho = 0`` is the slides' ``eta g + a``):
  :func:`carry_deviation`, each coordinate's over its own ``|v| + lr (rho |u| + |g|)``, the largest over
  the workers per step in :attr:`SelectionRecorder.carry`. An accumulator not carried over
  (``v = lr u``) or a worker's state reset between steps moves it by the size of the carried values;
  the checks within a step above cannot see either.

A step breaks Algorithm 2 (``violated``) where a count is above 0 or a deviation, the carry's
included, above :data:`FLOAT_SLACK`. The comparisons of floats allow for float32 rounding only: a sum of ``W`` float32
tables or values taken in another order differs from the reference by a few units in the last place
of the summed magnitudes (``~1e-7`` of them), and :data:`FLOAT_SLACK` is a thousand times that, taken
per coordinate (each exact sum against its own ``sum_i |v_i|``) and, for the estimates, against the
threshold or a bucket's mean magnitude, so that one heavy coordinate elsewhere cannot widen it; a
selection by another rule, a sketch with other hashes or a worker's values left out of a sum move
these quantities by the size of the values themselves. Ties are decided by the slack too: a candidate
whose estimate equals the ``P k``-th largest within it is one of the largest.

The check wraps the run's own workers (:class:`SelectionRecorder`, on their ``round1``, ``round2``
and ``apply``): it reads what they hold and send and changes none of it, so the checked steps are the
run's (the cell compares its losses with the training cell's, ``selection_replay_equal``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .methods import MethodRun

#: How many of a run's first steps the check follows (fewer where the run is shorter).
SELECTION_CHECK_STEPS = 8
#: The float32 rounding a deviation may show, as a share of the summed magnitudes it rounds against
#: (per coordinate; module docstring).
FLOAT_SLACK = 1e-4
#: The cells of the check: ``selection-<model>-<method>``.
CELL_PREFIX = "selection-"
#: Counts (each must be 0) and deviations (each at most :data:`FLOAT_SLACK`) of a checked step.
COUNTS = ("candidate_mismatch", "candidates_outside", "selected_mismatch", "selected_outside", "update_outside",
          "not_zeroed", "changed_elsewhere")
DEVIATIONS = ("sketch_deviation", "update_deviation")


class SelectionRecorder:
    """Records, on a Sketched-SGD :class:`~.methods.MethodRun`'s own workers, what each one holds and
    sends in a step (its accumulator after line 4, its round-1 table, the candidates it fetches, the
    coordinates it zeroes), and checks the step once the run's backward has finished
    (:meth:`after_backward`, results in :attr:`steps`; line 4's carry from the worker's previous step,
    the largest :func:`carry_deviation` over the workers, in :attr:`carry`, one per step)."""

    def __init__(self, run: MethodRun, key: str = "flat") -> None:
        if run.method.kind != "sketched":
            raise ValueError(f"{run.method.name}: the selection check reads Sketched-SGD runs only")
        self.run, self.key = run, key
        self.methods = [w.codec_for(key) for w in run.cluster.workers]  # built here, used by the run
        self.steps: list[dict[str, float]] = []
        self.carry: list[float] = []
        self._step: dict[str, dict[int, Any]] = {}
        # each worker's (u, v) after its previous step, as recorded here (None: a fresh worker, zeros)
        self._held = [self._state(m.worker) for m in self.methods]
        for i, m in enumerate(self.methods):
            self._wrap(i, m.worker)

    def _state(self, worker: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        state = worker.state_dict()
        u, v = state.get(f"u/{self.key}"), state.get(f"v/{self.key}")
        return None if u is None or v is None else (u, v)

    def _wrap(self, i: int, worker: Any) -> None:
        round1, round2, apply = worker.round1, worker.round2, worker.apply
        rec = self._step

        def first(grad: torch.Tensor, *, key: str = "", lr: float | None = None) -> Any:
            payload = round1(grad, key=key, lr=lr)
            if key == self.key:
                rec.setdefault("v", {})[i] = worker.accumulated(key)
                rec.setdefault("carry", {})[i] = carry_deviation(rec["v"][i], self._held[i], grad,
                                                                 worker.lr if lr is None else float(lr), worker.momentum)
                rec.setdefault("table", {})[i] = payload.sections[0].detach().clone()
            return payload

        def second(candidates: torch.Tensor, *, key: str = "") -> Any:
            if key == self.key:
                rec.setdefault("candidates", {})[i] = candidates.detach().clone()
            return round2(candidates, key=key)

        def last(selected: torch.Tensor, *, key: str = "") -> None:
            if key == self.key:
                rec.setdefault("selected", {})[i] = selected.detach().clone()
            apply(selected, key=key)

        worker.round1, worker.round2, worker.apply = first, second, last

    def after_backward(self, step: int) -> None:
        """Check the step the run's backward has just taken (its update in the compressed tensor's ``.grad``)."""
        rec = {k: dict(v) for k, v in self._step.items()}
        self._step.clear()
        W = len(self.methods)
        if any(len(rec.get(part, {})) != W for part in ("v", "carry", "table", "candidates", "selected")):
            raise RuntimeError(f"step {step}: not every worker ran round 1, round 2 and apply on {self.key!r}")
        flat = self.run.model.flat
        after = [m.worker.accumulated(self.key) for m in self.methods]
        m = self.run.method
        k = m.k(flat.numel())
        out = check_step([rec["v"][i] for i in range(W)], [rec["table"][i] for i in range(W)],
                         [rec["candidates"][i] for i in range(W)], [rec["selected"][i] for i in range(W)],
                         after, flat.grad.detach().reshape(-1), self.methods[0].worker.codec, int(m.P) * k, k)
        carry = max(rec["carry"].values())
        if not carry <= FLOAT_SLACK:  # line 4's carry broken (NaN included)
            out["violated"] = 1.0
        self.steps.append({"step": float(step), **out})
        self.carry.append(carry)
        self._held = [self._state(m.worker) for m in self.methods]


def carry_deviation(v: torch.Tensor, held: tuple[torch.Tensor, torch.Tensor] | None, grad: torch.Tensor, lr: float,
                    momentum: float) -> float:
    """Line 4 with line 13's carry, for one worker: the largest ``|v - (v0 + lr (rho u0 + g))|`` over the
    coordinate's own ``|v0| + lr (rho |u0| + |g|)``.

    Args:
        v: the worker's accumulator after line 4 of this step.
        held: its ``(u0, v0)`` after its previous step (None: a fresh worker, zeros).
        grad: the gradient it received this step; lr, momentum: the step's ``lr`` and ``rho``.
    """
    g = grad.detach().reshape(-1).double()
    got = v.detach().reshape(-1).to(g.device, torch.float64)
    u0, v0 = ((torch.zeros_like(g),) * 2 if held is None
              else tuple(t.detach().reshape(-1).to(g.device, torch.float64) for t in held))
    if not (got.shape == g.shape == u0.shape == v0.shape):
        return float("inf")
    if not g.numel():
        return 0.0
    want = v0 + lr * (momentum * u0 + g)
    mag = v0.abs() + lr * (momentum * u0.abs() + g.abs())
    return float(((got - want).abs() / mag.clamp_min(1e-300)).max())


def check_step(v: Sequence[torch.Tensor], tables: Sequence[torch.Tensor], candidates: Sequence[torch.Tensor],
               selected: Sequence[torch.Tensor], after: Sequence[torch.Tensor], mean_update: torch.Tensor,
               codec: Any, num_candidates: int, k: int) -> dict[str, float]:
    """One step of Algorithm 2's lines 5-13, per worker ``i`` (module docstring).

    Args:
        v: each worker's accumulator after line 4 (what it sketches and fetches from).
        tables: each worker's round-1 table as sent.
        candidates, selected: the coordinates each worker fetched (round 2) and zeroed (line 13).
        after: each worker's accumulator after the step.
        mean_update: the step's update as the optimizer applies it (the sum over ``W``).
        codec: the run's Count Sketch codec (worker 0's).
        num_candidates: ``P k``; k: the coordinates applied.

    Returns:
        the counts :data:`COUNTS`, the deviations :data:`DEVIATIONS`, and ``violated`` (1.0 where any
        count is above 0 or any deviation above :data:`FLOAT_SLACK`, else 0.0).
    """
    W = len(v)
    xs = [x.detach().reshape(-1).double() for x in v]
    d = xs[0].numel()
    dev = xs[0].device
    out: dict[str, float] = {}
    # lines 5-7: each worker's table is the run's sketch of its own accumulator
    own = [codec.new_sketch(d, device=dev).accumulate(x.float()).table.reshape(-1).double() for x in xs]
    sent = [t.detach().reshape(-1).to(dev, torch.float64) for t in tables]
    scale = max(float(o.abs().max()) for o in own) if d else 0.0
    out["sketch_deviation"] = (max(float((s - o).abs().max()) for s, o in zip(sent, own)) / scale if scale > 0
                               else float(any(bool(s.abs().max() > 0) for s in sent)))
    # line 8: the P k largest estimates of the summed table, the same on every worker
    summed = torch.stack(sent).sum(0)
    # rounding scale of an estimate near the threshold: the threshold itself, or a bucket's typical
    # magnitude where collisions make it larger (a mean, which one heavy coordinate cannot inflate)
    bucket_mag = float(torch.stack(sent).abs().sum(0).mean()) if summed.numel() else 0.0
    est = codec.new_sketch(d, device=dev, table=summed.float()).estimate().double().abs()
    cand = candidates[0].reshape(-1).to(dev, torch.int64)
    want = min(d, int(num_candidates))
    out["candidate_mismatch"] = float(sum(not torch.equal(c.reshape(-1).to(dev, torch.int64), cand) for c in candidates[1:])
                                      + abs(cand.numel() - want) + (cand.numel() - int(torch.unique(cand).numel())))
    thr = float(torch.topk(est, want).values.min()) if want else 0.0
    out["candidates_outside"] = float(torch.count_nonzero(est[cand] < thr - FLOAT_SLACK * max(abs(thr), bucket_mag)))
    # line 9: the k largest exact sums of the workers' values among the candidates
    exact = torch.stack(xs).sum(0)
    mag = torch.stack(xs).abs().sum(0)  # per coordinate: what a float32 sum of the W values rounds against
    sel = selected[0].reshape(-1).to(dev, torch.int64)
    take = min(int(k), cand.numel())
    out["selected_mismatch"] = float(sum(not torch.equal(s.reshape(-1).to(dev, torch.int64), sel) for s in selected[1:])
                                     + abs(sel.numel() - take) + int(torch.count_nonzero(~torch.isin(sel, cand)))
                                     + (sel.numel() - int(torch.unique(sel).numel())))
    if take:
        kth = torch.topk(exact[cand].abs(), take)
        thr_k, mag_k = float(kth.values.min()), float(mag[cand[kth.indices[-1]]])
    else:
        thr_k = mag_k = 0.0
    out["selected_outside"] = float(torch.count_nonzero(exact[sel].abs() < thr_k - FLOAT_SLACK * (mag[sel] + mag_k)))
    # lines 10-11: the update is the sum at the applied coordinates and nothing else
    update = mean_update.detach().reshape(-1).to(dev, torch.float64) * W
    at = torch.zeros(d, dtype=torch.bool, device=dev)
    at[sel] = True
    out["update_deviation"] = (float(((update[sel] - exact[sel]).abs() / mag[sel].clamp_min(1e-300)).max())
                               if sel.numel() else 0.0)
    out["update_outside"] = float(torch.count_nonzero(update[~at]))
    # line 13: every worker zeroes its accumulator at the applied coordinates, and nowhere else
    ys = [y.detach().reshape(-1).double() for y in after]
    out["not_zeroed"] = float(sum(int(torch.count_nonzero(y[at])) for y in ys))
    out["changed_elsewhere"] = float(sum(int(torch.count_nonzero(y[~at] != x[~at])) for x, y in zip(xs, ys)))
    broken = any(out[c] > 0 for c in COUNTS) or any(not out[x] <= FLOAT_SLACK for x in DEVIATIONS)
    out["violated"] = 1.0 if broken else 0.0
    return out


def derive_selection(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Per checked Sketched-SGD method ``t1.<model>.<method>``: ``.selection_steps`` (checked),
    ``.selection_violating_steps``, the largest of each count and deviation over the steps
    (``.selection_<name>``; line 4's carry ``.selection_carry_deviation``, where the cell recorded it), and ``.selection_replay_equal`` (1 where the checked steps' training losses
    are the training cell's first ones, bit for bit); ``t1.selection_violations``: the violating steps
    over every method, and one more for each method whose replay is not its training run (the guard's
    quantity), where every Sketched-SGD method of the run was checked on
    at least one step (else absent: not run)."""
    out: dict[str, float | None] = {}
    checked: dict[tuple[str, str], Mapping[str, Any]] = {}
    for name, r in sorted(results.items()):
        if name.startswith(CELL_PREFIX):
            checked[(r["model"], r["method"]["name"])] = r
    if not checked:
        return out
    total = 0.0
    for (model, meth), r in checked.items():
        base = f"t1.{model}.{meth}"
        steps = r.get("steps") or []
        out[f"{base}.selection_steps"] = float(len(steps))
        out[f"{base}.selection_violating_steps"] = float(sum(s["violated"] for s in steps))
        total += out[f"{base}.selection_violating_steps"]  # type: ignore[operator]
        for name in (*COUNTS, *DEVIATIONS):
            out[f"{base}.selection_{name}"] = max((float(s[name]) for s in steps), default=None)
        if r.get("carry") is not None:
            out[f"{base}.selection_carry_deviation"] = max((float(x) for x in r["carry"]), default=None)
        training = results.get(f"t1-{model}-{meth}")
        if training is not None and training.get("losses") is not None:
            n = len(r.get("losses") or [])
            out[f"{base}.selection_replay_equal"] = float(n > 0 and list(training["losses"][:n]) == list(r["losses"]))
            if not out[f"{base}.selection_replay_equal"]:  # the steps checked are not the training run's:
                total += 1  # the check does not speak for it, and counts as one violation
    sketched = {(r["model"], r["method"]["name"]) for n, r in results.items()
                if n.startswith("t1-") and r["method"].get("kind") == "sketched"}
    if sketched <= set(checked) and all(out[f"t1.{mo}.{me}.selection_steps"] for mo, me in checked):
        out["t1.selection_violations"] = total
    return out


def selection_text(measured: Mapping[str, float | None], labels: Mapping[str, str] | None = None) -> str:
    """The report's paragraph on the check ("" where the run made none); ``labels`` names the methods
    (``t1.<model>.<method>`` -> a display name)."""
    rows = []
    for key, steps in measured.items():
        if key.startswith("t1.") and key.endswith(".selection_steps") and steps:
            base = key[: -len(".selection_steps")]
            bad = measured.get(f"{base}.selection_violating_steps")
            same = measured.get(f"{base}.selection_replay_equal")
            rows.append(f"{(labels or {}).get(base, base[3:])}: {int(steps)} steps, {int(bad or 0)} breaking a line"
                        + ("" if same is None else "; the same losses as the training run's first steps" if same
                           else "; losses NOT those of the training run's first steps"))
    if not rows:
        return ""
    return ("**Algorithm 2's selection steps.** At each of the first steps of every Sketched-SGD run (the first "
            "seed's configuration), every worker's round-1 sketch, the P k candidates, the k applied coordinates, "
            "the update, each worker's zeroed accumulator and what it carries into its next step's accumulator are "
            "checked against Algorithm 2's lines 4-13, recomputed from the workers' accumulators and gradients (the guard "
            "`selection-follows-algorithm-2`): "
            + "; ".join(rows) + ".")

