"""The parity claims' flags and the held-out paths beside them (:meth:`.workload.SketchedSGDWorkload.derive`).

A parity claim compares two methods' final held-out loss; its ``testable`` flag
(``t1.<model>.<a>_vs_<b>.parity_testable``) is 1 only where the sparse methods have caught up and both
methods compared have settled (:func:`parity_flags`). :func:`heldout_paths` adds, as information no
claim reads, each compared pair's held-out loss ratio halfway through the run and at its end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..framework.settling import claims_bound, settled
from ..framework.spec import Spec


def parity_claim_methods(spec: Spec, model: str) -> dict[str, list[str]]:
    """Per parity flag of ``model`` (a claim's ``testable`` ``t1.<model>.<pair>.parity_testable``), the
    methods its claims compare: the ``<method>`` of their quantities ``t1.<model>.<method>.<measure>``."""
    out: dict[str, list[str]] = {}
    prefix = f"t1.{model}."
    for c in spec.claims:
        if c.testable.startswith(prefix) and c.testable.endswith(".parity_testable"):
            for q in c.quantities:
                meth = q.split(".")[2]
                if meth not in out.setdefault(c.testable, []):
                    out[c.testable].append(meth)
    return out


def method_settled(rs: list[Mapping[str, Any]], fall: float | None, bound: float | None) -> float | None:
    """1.0 where a method's training cross entropy (its seeds' mean) falls by at most ``bound`` over the run's
    last tenth (:func:`..framework.settling.settled`), 0.0 where by more. A method any of whose runs
    diverged counts as settled: the run stops at the non-finite gradient, and the same configuration run
    longer (constant learning rate) diverges at the same step, so its final metric is the one any length
    gives."""
    if any(r.get("diverged_at") is not None for r in rs):
        return 1.0
    return settled(fall, bound)


def parity_flags(spec: Spec, model: str, runs: Mapping[str, list[Mapping[str, Any]]],
                 out: Mapping[str, float | None]) -> dict[str, float | None]:
    """The parity claims' ``testable`` flags of ``model``, one per pair of methods compared: 1 where the
    sparse methods have caught up (``t1.<model>.sparse_caught_up``) and every method the flag's claims
    compare has settled at those claims' tolerance (:func:`method_settled`, on
    ``t1.<model>.<method>.loss_fall``); None where a method compared has no run or no measured fall."""
    flags: dict[str, float | None] = {}
    for flag, methods in parity_claim_methods(spec, model).items():
        bound = claims_bound(spec, flag)
        each = [method_settled(runs[m], out.get(f"t1.{model}.{m}.loss_fall"), bound) if m in runs else None
                for m in methods]
        caught_up = out.get(f"t1.{model}.sparse_caught_up")
        flags[flag] = None if caught_up is None or any(x is None for x in each) else min([caught_up, *each])  # type: ignore[list-item]
    return flags


def sparse_steps(runs: Mapping[str, list[Mapping[str, Any]]], configured: int | None) -> int | None:
    """The steps a model's sparse runs (true top-k and Sketched-SGD, every seed) trained, the fewest of
    them: a finished run's own record (its per-step losses), a diverged run's ``configured`` steps (the
    preset with the run's overrides, as its cell was configured: it stopped at the non-finite gradient,
    and the same configuration run to that length diverges at the same step). None where the model has
    no sparse run, or only diverged ones and no ``configured``."""
    steps = [len(r["losses"]) if r.get("diverged_at") is None else configured
             for rs in runs.values() for r in rs if r["method"].get("kind") in ("true_topk", "sketched")]
    known = [int(s) for s in steps if s is not None]
    return min(known) if known else None


def heldout_paths(spec: Spec, model: str, runs: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, float | None]:
    """Information beside the parity claims of ``model`` (no claim reads it): per pair ``<a>_vs_<b>`` a flag
    compares, the held-out loss of ``a`` over ``b``'s (each the mean over its seeds' runs) at the evaluation
    halfway through the run (the first at or past half the last evaluation's step), ``.heldout_rel_half``, and at
    the last evaluation, ``.heldout_rel_end``, with ``.heldout_half_step``: whether the gap a claim judges at the
    end was still closing or widening. Nothing where a pair's runs do not share their evaluation steps (a run
    that diverged stops early), a loss is not finite or a reference's is not positive."""
    out: dict[str, float | None] = {}
    for flag, methods in parity_claim_methods(spec, model).items():
        pair = flag[: -len(".parity_testable")]
        a, b = pair.split(".")[-1].split("_vs_")
        if a not in runs or b not in runs or {a, b} - set(methods):
            continue
        na = len(runs[a])  # curves[:na] are a's runs, curves[na:] b's
        curves = [[(int(c["step"]), float(c["test_loss"])) for c in r.get("curve") or []] for r in [*runs[a], *runs[b]]]
        steps = [st for st, _ in curves[0]]
        if not steps or any([st for st, _ in c] != steps for c in curves):
            continue
        if not all(math.isfinite(x) for c in curves for _, x in c):
            continue
        if not all(x > 0 for c in curves[na:] for _, x in c):  # the reference's losses divide
            continue
        i = next(j for j, st in enumerate(steps) if 2 * st >= steps[-1])

        def rel(j: int) -> float:
            return mean_or_nan([c[j][1] for c in curves[:na]]) / mean_or_nan([c[j][1] for c in curves[na:]])

        out[f"{pair}.heldout_half_step"] = float(steps[i])
        out[f"{pair}.heldout_rel_half"] = rel(i)
        out[f"{pair}.heldout_rel_end"] = rel(len(steps) - 1)
    return out


def mean_or_nan(xs: list[float]) -> float:
    """The mean of ``xs``, NaN for none (a method without runs)."""
    return sum(xs) / len(xs) if xs else math.nan
