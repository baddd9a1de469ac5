"""L-GreCo's error budget, measured apart from the DP: at every decision, the error of the plan the
DP chose and of the uniform setting, recomputed on the accumulated gradients the DP saw, with the
paper's error metric but without the DP's error tables.

The DP's guarantee (the chosen plan's summed error is at most the uniform setting's, Algorithm 1)
holds on the tables it is given. A fault in the tables (errors measured wrong, or not at all) or in
the DP (a choice that ignores the budget) can keep that guarantee on paper while the plan sends more
error than the uniform setting, and then "more compression at equal error" is compression at more
error. This module measures the plan itself. Per layer, the error of a candidate parameter is:

* PowerSGD: the exact rank-r error ``||M - U_r S_r V_r^T||`` of the layer's matrix from one float64
  SVD (Appendix B.1's optimum; no randomised power iteration, so the number is deterministic); 0
  where PowerSGD sends the tensor uncompressed (vectors; ``(n + m) r >= n m``), as the codec does;
* exact TopK: ``||x - top_k(x)||`` with the ``k`` kept entries found by ``torch.topk``;
* any other codec (QSGD): the codec's own error ``||decode(encode(x)) - x||`` with a fresh raw codec
  of that parameter, its random stream from the codec's seed (Sec. 4: compression simulated without
  error feedback). That is the computation the DP's tables make for such a codec
  (:func:`gcbench.compressors.adaptive.tables.measure_tables`), from the same seed: for it the check
  catches a DP that ignores the budget, wrong or missing tables and a plan applied other than chosen,
  not a fault in the codec's own error, which it shares with the tables.

:class:`CheckedLGreCoPolicy` is L-GreCo's policy that keeps each decision's accumulated gradients on
the deciding rank; :meth:`CheckedLGreCoPolicy.check` measures them after the training, so no step's
time includes the measurement. :func:`budget_excess` reads the decisions of one or more runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gcbench.compressors.adaptive import Ladder, LGreCoPolicy
from gcbench.compressors.codecs.powersgd import matrix_shape, should_compress
from gcbench.compressors.codecs.topk import num_selected

#: The decision row's fields this module fills.
CHOSEN, UNIFORM, POWER = "check_error", "check_uniform_error", "check_power_layers"
#: Report labels of the quantities of :func:`budget_excess` (per codec, and the image scales' extra LM).
BUDGET_LABELS = {f"budget.{c}.excess": f"{label}: re-measured chosen / uniform error - 1 (worst decision)"
                 for c, label in (("powersgd", "PowerSGD"), ("qsgd", "QSGD"), ("topk", "TopK"), ("lm", "LM, PowerSGD"))}


def _lowrank(ladder: Ladder) -> bool:
    return (ladder.codec, ladder.param) == ("powersgd", "rank")


def _exact_topk(ladder: Ladder, params: Mapping[str, Any]) -> bool:
    return (ladder.codec, ladder.param) == ("topk", "ratio") and params.get("method", "exact") == "exact"


def layer_errors(ladder: Ladder, grad: torch.Tensor, candidates: Sequence[int]) -> dict[int, float]:
    """The L2 error of each candidate index of ``ladder`` on one layer's accumulated gradient (see the
    module docstring for the metric of each codec)."""
    x = grad.detach()
    out: dict[int, float] = {}
    wanted = sorted(set(int(j) for j in candidates))
    if _lowrank(ladder):
        dims = matrix_shape(x.shape)
        svd = None
        for j in wanted:
            r = int(ladder.params(j)["rank"])
            if dims is None or not should_compress(dims[0], dims[1], r):
                out[j] = 0.0
                continue
            if svd is None:
                mat = x.reshape(dims).to(torch.float64)
                svd = (mat, *torch.linalg.svd(mat, full_matrices=False))
            mat, u, s, vh = svd
            k = min(r, s.numel())
            out[j] = float(torch.linalg.vector_norm(mat - (u[:, :k] * s[:k]) @ vh[:k]))
        return out
    flat = x.reshape(-1).to(torch.float64)
    for j in wanted:
        params = ladder.params(j)
        if _exact_topk(ladder, params):
            rest = flat.clone()
            rest[torch.topk(flat.abs(), num_selected(flat.numel(), float(params["ratio"])), sorted=False).indices] = 0.0
            out[j] = float(torch.linalg.vector_norm(rest))
            continue
        codec = ladder.build(j)
        codec.reset_state()
        dec = codec.decode(codec.encode(x))
        out[j] = float(torch.linalg.vector_norm(dec.to(torch.float64).reshape(-1) - flat))
    return out


def plan_errors(ladder: Ladder, grads: Mapping[str, torch.Tensor], plans: Sequence[Sequence[int]]) -> list[float]:
    """The summed error over the layers of ``grads`` (in order) of each per-layer plan of candidate indexes."""
    totals = [0.0] * len(plans)
    for li, g in enumerate(grads.values()):
        errs = layer_errors(ladder, g, [int(p[li]) for p in plans])
        for i, p in enumerate(plans):
            totals[i] += errs[int(p[li])]
    return totals


class CheckedLGreCoPolicy(LGreCoPolicy):
    """L-GreCo (:class:`gcbench.compressors.adaptive.LGreCoPolicy`, uniform reference) that keeps, on
    the deciding rank, the accumulated gradients of each decision and how many layers' errors its tables
    took by power iteration, for :meth:`check`. The choice is the parent's: training is unchanged."""

    def __init__(self, ladder: Ladder, **kwargs: Any) -> None:
        if kwargs.get("accordion") is not None:
            raise ValueError("the check compares with the uniform setting: L-GreCo + Accordion's budget is Accordion's")
        super().__init__(ladder, **kwargs)
        self.kept: list[tuple[dict[str, torch.Tensor], int]] = []

    @classmethod
    def like(cls, base: LGreCoPolicy, *, layers: Sequence[str], rank: int | None) -> "CheckedLGreCoPolicy":
        """A checked policy with ``base``'s ladder, schedule and DP settings."""
        return cls(base.ladder, every=base.every, warmup=base.warmup, accumulate=base.accumulate, alpha=base.alpha,
                   D=base.D, rounding=base.rounding, fallback_to_reference=base.fallback_to_reference,
                   error_method=base.error_method, objective=base.objective,
                   bucket_coefficients=base.bucket_coefficients, layers=layers, src=base.src, rank=rank,
                   device=base.device)

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        choice, info = super()._choose(grads)
        power = sum(1 for m in (self.last_tables.methods if self.last_tables is not None else []) if m == "power")
        self.kept.append((dict(grads), power))  # the buffer's tensors: decide() drops the dict, not them
        return choice, info

    def check(self) -> None:
        """Add to every decision this rank made :data:`CHOSEN` and :data:`UNIFORM` (the summed error of the
        applied plan and of the uniform setting, :func:`plan_errors`) and :data:`POWER`; then let the
        gradients go."""
        made = [d for d in self.decisions if "budget" in d]
        uniform = [self.ladder.reference_index] * len(self.keys)
        for d, (grads, power) in zip(made, self.kept):
            chosen, ref = plan_errors(self.ladder, grads, [list(d["choice"]), uniform])
            d.update({CHOSEN: chosen, UNIFORM: ref, POWER: power})
        self.kept.clear()


def budget_excess(runs: Iterable[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """``(excess, tables_exact)`` over the checked decisions of ``runs`` (decision rows of
    :func:`.ranks.decision_rows`): the largest re-measured chosen error / uniform error - 1 (0 where
    both are 0, infinite where only the uniform one is), and 1.0 where no decision's tables took a
    layer's error by power iteration, else 0.0. ``(None, None)`` without a checked decision."""
    worst, power, seen = -math.inf, 0, False
    for run in runs:
        for d in run.get("decisions", []):
            if CHOSEN not in d:
                continue
            seen = True
            c, u = float(d[CHOSEN]), float(d[UNIFORM])
            worst = max(worst, c / u - 1.0 if u > 0 else (0.0 if c == 0 else math.inf))
            power += int(d.get(POWER, 0))
    return (worst, float(power == 0)) if seen else (None, None)


def budget_quantities(name: str, runs: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """The measured quantities ``budget.<name>.excess`` and ``budget.<name>.tables_exact`` of the L-GreCo
    ``runs`` of codec (or model) ``name`` (:func:`budget_excess`), as the workloads derive them."""
    excess, exact = budget_excess(runs)
    return {f"budget.{name}.excess": excess, f"budget.{name}.tables_exact": exact}
