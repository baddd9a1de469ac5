"""L-GreCo's execution-layer side: policies wired to the hook and the simulator.

The pure parts (ladders, error and cost tables, the DP, comparators, the policies' schedule and
choice) are :mod:`gcbench.compressors.adaptive`; here is what needs workers and a transport:

* :func:`make_policy` - a policy for a :class:`~gcbench.envs.workers.CodecSpec`'s codec, its
  ladder around the spec's own parameter;
* :func:`run_policy_decision` - at a decision step: decide on the deciding rank, broadcast the
  choice through the aggregator's collective (:func:`choice_broadcast`: recorded as
  ``broadcast``/``choice`` traffic in real and simulated runs alike), apply it;
* :func:`set_layer_params` - apply per-layer parameters to live workers (state moves with them);
* :class:`SyncTimeModel` - the time objective's per-bucket coefficients from measured sync times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..compressors.errors import InvalidParameterError
from ..compressors import ErrorFeedback
from ..compressors.adaptive import Accordion, AccordionPolicy, LGreCoPolicy, fit_bucket_coefficients
from ..compressors.adaptive.ladders import ladder_around
from .aggregator import Aggregator
from .workers import CodecSpec, WorkerCodecs, derive_seed, inner_codec

ADAPTIVE = ("lgreco", "accordion", "lgreco+accordion")
#: Accordion's two settings as multiples of the uniform setting D: (high compression, low compression)
#: = {D/2, 2D}, the paper's {16, 64} around PowerSGD rank 32 (L-GreCo Table 4)
ACCORDION_PAIR = (0.5, 2.0)


def set_layer_params(
    spec: CodecSpec, workers: Sequence[WorkerCodecs], layer_params: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Replace ``spec.layer_params`` on a live spec (an L-GreCo decision) and move per-key state.

    For every key whose parameters change: a warm start the old codec instance keeps for it
    (PowerSGD's ``Q``: its shape belongs to the old parameter) is dropped, so the next step draws
    a fresh one from the key's shared generator, the same on every worker; the error-feedback
    residual moves from the old codec instance to the new one (the residual has the gradient's
    shape, whatever the parameter). Other per-key state of stateful inner codecs stays with the
    old instance (a documented limitation). Returns the keys whose parameters changed, sorted
    (the same on every worker).
    """
    new = {str(k): dict(v) for k, v in layer_params.items()}
    keys = sorted(set(spec.layer_params) | set(new))
    before = {k: spec.params_for(k) for k in keys}
    old_codecs = [{k: w.built_codec(before[k]) for k in keys} for w in workers]
    spec.layer_params = new
    changed = [k for k in keys if spec.params_for(k) != before[k]]
    for w, olds in zip(workers, old_codecs):
        for k in changed:
            old = olds[k]
            if old is None:
                continue
            drop = getattr(inner_codec(old), "drop_warm_start", None)
            if drop is not None:
                drop(k)
            if isinstance(old, ErrorFeedback):
                residual = old.pop_residual(k)
                fresh = w.codec_for(k)
                if residual is not None and isinstance(fresh, ErrorFeedback):
                    fresh.set_residual(k, residual)
    return changed


def apply_layer_params(spec: CodecSpec, aggregator: Aggregator, layer_params: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """:func:`set_layer_params` on the aggregator's workers, then forget the changed keys' checked
    layouts (their payloads change). Returns the changed keys."""
    changed = set_layer_params(spec, aggregator.workers, layer_params)
    aggregator.invalidate(changed)
    return changed


def make_policy(
    kind: str,
    spec: CodecSpec,
    *,
    every: int,
    warmup: int = 0,
    accumulate: int | None = None,
    layers: Sequence[str] | None = None,
    default: Any = None,
    rank: int | None = None,
    span: Sequence[float] | None = None,
    **kwargs: Any,
) -> Any:
    """A per-layer policy for ``spec``'s codec: ``"lgreco"``, ``"accordion"`` or ``"lgreco+accordion"``.

    The ladder is :func:`gcbench.compressors.adaptive.ladders.ladder_around` the spec's own
    parameter (e.g. PowerSGD ``rank``; QSGD ``levels`` read as bits), the other spec parameters
    held fixed, so the ladder's codecs are the ones the hook builds. ``accumulate`` defaults to
    ``min(10, every)`` (the public code's 10). Accordion switches between ``2D`` (``low``
    compression, critical regimes) and ``D/2`` (``high``), the paper's {16, 64} for rank 32 (on a
    ladder where a larger value compresses more, the other way round); with
    ``"lgreco+accordion"`` Accordion's per-layer choice is the reference that sets the budget.
    ``span`` ``(gamma, beta)``: the ladder's range ``[gamma D, beta D]`` instead of Sec. 5.1's
    ``[D/2, 2D]`` (L-GreCo Table 4 runs PowerSGD over ``[8, 64]`` and, with Accordion, ``[8, 128]``
    around rank 32); Accordion's pair stays the ladder values nearest to ``D/2`` and ``2D`` (a
    ``span`` narrower than ``(0.5, 2)`` clips it to the ladder's ends). ``kwargs`` go to :class:`~gcbench.compressors.adaptive.LGreCoPolicy`.
    """
    if kind not in ADAPTIVE:
        raise InvalidParameterError(f"adaptive must be one of {ADAPTIVE}, got {kind!r}")
    if spec.name is None:
        raise InvalidParameterError("adaptive policies need a registry codec name (a ladder), not a factory")
    ladder = ladder_around(spec.name, spec.params, default, span=span)
    acc = min(10, every) if accumulate is None else accumulate
    common = {"every": every, "warmup": warmup, "accumulate": acc, "layers": layers, "rank": rank}
    # Accordion's pair is the paper's {D/2, 2D} around the uniform D (Table 4: {16, 64} for rank 32)
    axis = [float(ladder.label(j)) for j in range(len(ladder))]
    d = axis[ladder.reference_index]
    high, low = (ladder.values[min(range(len(axis)), key=lambda j: abs(axis[j] - times * d))] for times in ACCORDION_PAIR)
    if ladder.larger_compresses_more:
        low, high = high, low
    if kind == "accordion":
        return AccordionPolicy(ladder, low, high, **common)
    if kind == "lgreco+accordion":
        kwargs.setdefault("accordion", Accordion(low, high))
    return LGreCoPolicy(ladder, **common, **kwargs)


def choice_broadcast(aggregator: Aggregator, step: int, *, src: int = 0, device: Any = None) -> Callable[[np.ndarray], np.ndarray]:
    """A policy's ``broadcast``: rank ``src``'s int64 choice to every rank through the aggregator's
    collective, recorded as ``broadcast``/``choice`` traffic of ``step`` (8 bytes per layer)."""

    def broadcast(choice: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(np.asarray(choice, dtype=np.int64)).to(device if device is not None else "cpu")
        out = aggregator.broadcast([t] * len(aggregator.workers), src=src, step=step, kind="choice")
        return out[0].cpu().numpy()

    return broadcast


def run_policy_decision(
    policy: Any,
    step: int,
    spec: CodecSpec,
    aggregator: Aggregator,
    *,
    buckets: Mapping[int, Sequence[str]] | None = None,
) -> dict[str, dict[str, Any]] | None:
    """At a decision step: decide (deciding rank), broadcast (every rank), apply to ``spec``.

    Called by the hook before the first bucket of each step and by the simulator before its first
    aggregation, so both apply a decision from the same step on. A policy built without a rank is
    bound to the aggregator's first local rank. ``buckets`` (``{bucket index: keys}``, the layout
    of the previous step) goes to ``policy.set_buckets`` when the policy has one (the time and
    priority objectives need it). Returns the new ``layer_params`` or None.
    """
    if hasattr(policy, "bind_rank"):
        policy.bind_rank(aggregator.collective.local_ranks[0])
    if not policy.due(step):
        return None
    if buckets and hasattr(policy, "set_buckets"):
        policy.set_buckets(buckets)
    src = int(getattr(policy, "src", 0))
    new = policy.decide(broadcast=choice_broadcast(aggregator, step, src=src, device=getattr(policy, "device", None)))
    apply_layer_params(spec, aggregator, new)
    return new


class SyncTimeModel:
    """L-GreCo's time objective (Sec. 4) fed from the hook's own measurements.

    The paper measures the gradient synchronisation time for various per-bucket compression ratios
    and fits a linear regression of the time on the bytes sent in each bucket; the coefficients
    ``T(b)`` price each layer's bytes by the bucket it travels in (``objective="time"`` of
    :class:`gcbench.compressors.adaptive.LGreCoPolicy`). Here:

    * **calibration**: steps ``start .. start + calibrate - 1`` run with a probe setting: every
      layer gets a ladder index drawn from a generator seeded by ``(seed, step)`` - the same on
      every rank, so nothing is communicated - which makes the bytes of every bucket vary
      independently from step to step (a well-posed regression). Then the policy's own choice
      (the reference until its first decision) returns. Step 0 is never a sample: DDP rebuilds its
      buckets after it, so its bucket indices name other tensors.
    * **samples**: every step from ``start`` on (calibration and after) gives one sample: this
      rank's wire bytes of every bucket and the step's synchronisation seconds (the hook's time in
      all buckets: encode, collectives, decode); at most ``max_samples``, the newest kept.
    * **fit** (before each decision): :func:`gcbench.compressors.adaptive.fit_bucket_coefficients`
      (non-negative least squares with an intercept). A bucket whose coefficient comes out below
      ``floor`` x the largest is raised to it (a zero price would let the DP send that bucket
      uncompressed for free: a deviation from the paper, which does not say what it does then).
      With fewer than ``buckets + 1`` samples, or no positive coefficient, every bucket gets 1.0
      (the size objective) and the fit is marked ``fallback``.

    Args:
        ladder_size: candidates of the policy's ladder.
        calibrate: calibration steps (0: measure the policy's own settings only).
        start: first calibration/sample step (>= 1).
        seed: seed of the probe settings.
        floor: relative floor of the coefficients.
        max_samples: samples kept for the fit.
    """

    def __init__(self, ladder_size: int, *, calibrate: int = 10, start: int = 1, seed: int = 0, floor: float = 0.01,
                 max_samples: int = 1000) -> None:
        if ladder_size < 1 or calibrate < 0 or start < 1 or not 0 <= floor <= 1 or max_samples < 2:
            raise InvalidParameterError("need ladder_size >= 1, calibrate >= 0, start >= 1, 0 <= floor <= 1, max_samples >= 2")
        self.ladder_size, self.calibrate, self.start, self.seed = int(ladder_size), int(calibrate), int(start), int(seed)
        self.floor, self.max_samples = float(floor), int(max_samples)
        self.samples: list[tuple[int, dict[int, int], float]] = []  # (step, bytes per bucket, seconds)
        self.fits: list[dict[str, Any]] = []
        self._step: int | None = None
        self._bytes: dict[int, int] = {}
        self._seconds = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The samples and fits so far (a resumed run fits on the same samples)."""
        return {"samples": [(s, dict(b), sec) for s, b, sec in self.samples], "fits": [dict(f) for f in self.fits]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.samples = [(int(s), {int(k): int(v) for k, v in b.items()}, float(sec)) for s, b, sec in state["samples"]]
        self.fits = [dict(f) for f in state.get("fits", [])]
        self._step, self._bytes, self._seconds = None, {}, 0.0

    @property
    def end(self) -> int:
        """The first step after the calibration (the policy's setting is back from it on)."""
        return self.start + self.calibrate

    def calibrating(self, step: int) -> bool:
        """True when ``step`` runs a probe setting."""
        return self.start <= step < self.end

    def probe(self, step: int, layers: int) -> list[int]:
        """The ladder index of each of ``layers`` layers at calibration step ``step`` (same on every rank)."""
        g = torch.Generator().manual_seed(derive_seed("sync-time-probe", self.seed, step))
        return torch.randint(0, self.ladder_size, (layers,), generator=g).tolist()

    def record(self, step: int, bucket: int, nbytes: int, seconds: float) -> None:
        """One bucket of ``step``: its wire bytes (this rank) and the seconds the hook spent on it."""
        if self._step != step:
            self._step, self._bytes, self._seconds = step, {}, 0.0
        self._bytes[bucket] = self._bytes.get(bucket, 0) + int(nbytes)
        self._seconds += float(seconds)

    def drop_step(self, step: int) -> None:
        """Forget what was recorded of ``step`` (a step whose gradients were not finite on some rank:
        its buckets sent a flag, not payloads, so its time is no sample of the objective)."""
        if self._step == step:
            self._step, self._bytes, self._seconds = None, {}, 0.0

    def end_step(self, step: int) -> None:
        """Close ``step``: keep it as a sample when ``step >= start``."""
        if self._step == step and step >= self.start and self._bytes:
            self.samples.append((step, dict(self._bytes), self._seconds))
            del self.samples[: -self.max_samples]
        self._step, self._bytes, self._seconds = None, {}, 0.0

    def fit(self, step: int, buckets: int | None = None) -> dict[str, Any]:
        """Fit the per-bucket coefficients on the samples so far (see the class docstring).

        Returns ``{"step", "coefficients", "intercept", "r2", "samples", "fallback"}`` (also
        appended to :attr:`fits`).
        """
        n_b = buckets if buckets is not None else 1 + max((b for _, by, _ in self.samples for b in by), default=0)
        out: dict[str, Any] = {"step": int(step), "samples": len(self.samples), "intercept": 0.0, "r2": None,
                               "fallback": True, "coefficients": [1.0] * n_b}
        if len(self.samples) >= n_b + 1:
            X = [[by.get(b, 0) for b in range(n_b)] for _, by, _ in self.samples]
            y = [sec for _, _, sec in self.samples]
            try:
                T, intercept, r2 = fit_bucket_coefficients(X, y)
            except Exception:  # noqa: BLE001 - a singular or degenerate fit falls back to the size objective
                T = None
            if T is not None and float(T.max()) > 0:
                top = float(T.max())
                out.update(coefficients=[max(float(t), self.floor * top) for t in T], intercept=float(intercept),
                           r2=float(r2), fallback=False)
        self.fits.append(out)
        return out
