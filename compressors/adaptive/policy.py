"""Per-layer policies: L-GreCo, Accordion, and their combination (no communication inside).

The interface a hook needs (:class:`LayerwisePolicy`)::

    policy = LGreCoPolicy(powersgd_ladder(32), every=steps_per_epoch, warmup=warmup_steps, rank=rank)
    # in the hook, once per step, on every rank (the same calls in the same order everywhere):
    new = policy.step(step, {name: local_grad for name, local_grad in ...}, broadcast=broadcast)
    if new is not None:                       # a decision was made at this step
        hook_state.spec.layer_params = new    # {name: {"rank": r, ...}}: CodecSpec's per-layer overrides
    # or per layer: policy.codec_for(name) -> the raw codec of the chosen parameter

Schedule (the public code's, Sec. 4 and Sec. 5.1 "frequency and warm-up"): with ``t = step -
warmup``, a decision happens at every ``t > 0`` with ``t % every == 0`` (e.g. once per epoch); the
gradients of the ``accumulate`` (10) steps before each decision are summed per layer (only on the
deciding rank, ``src``); before the first decision every layer uses the default. The deciding rank
builds the tables, runs the DP and hands the per-layer candidate indexes (one int64 array) to a
``broadcast`` function that every rank passes and that returns the deciding rank's array; every
rank then applies the same parameters. The broadcast is the execution layer's
(:func:`gcbench.envs.adaptive.choice_broadcast`, through its collectives, so its bytes are counted
like every other message); without one (a single process) the choice stays where it was made.

Pass local gradients *before* any error-feedback residual is added: L-GreCo measures the
compression error "without applying error feedback" (Sec. 4).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..base import Codec
from ..errors import InvalidParameterError
from .comparators import Accordion
from .dp import DEFAULT_D, LGreCoResult, lgreco
from .ladders import Ladder
from .tables import Tables, measure_tables
from .timing import Overhead, bucket_priority_costs, overhead, time_costs

#: Sends the deciding rank's per-layer choice (int64 array) to every rank; returns what arrived.
Broadcast = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class LayerwisePolicy(Protocol):
    """What the DDP hook calls. Keys are the hook's stable parameter names."""

    def step(
        self, step: int, grads: Mapping[str, torch.Tensor], *, broadcast: Broadcast | None = None
    ) -> dict[str, dict[str, Any]] | None:
        """Observe this step's local gradients; at a decision step decide and return ``layer_params``."""
        ...

    def layer_params(self) -> dict[str, dict[str, Any]]:
        """Current per-layer codec parameters ``{key: {param: value, ...}}``."""
        ...

    def codec_for(self, key: str) -> Codec:
        """A raw codec with the current parameters of layer ``key``."""
        ...


class ScheduledPolicy:
    """Shared schedule, accumulation buffer and per-layer choice of the policies below (subclasses
    fill :meth:`_choose`). ``rank`` None: rank 0 until :meth:`bind_rank` says otherwise."""

    def __init__(
        self,
        ladder: Ladder,
        *,
        every: int,
        warmup: int,
        accumulate: int,
        layers: Sequence[str] | None,
        src: int,
        rank: int | None,
        device: torch.device | str | None,
    ) -> None:
        if every < 1 or warmup < 0 or accumulate < 1:
            raise InvalidParameterError("every >= 1, warmup >= 0 and accumulate >= 1 are required")
        self.ladder = ladder
        self.every, self.warmup, self.accumulate = int(every), int(warmup), int(accumulate)
        self.src = int(src)
        self._rank = rank
        self.device = device
        self.keys: list[str] = list(layers) if layers is not None else []
        self.choice = np.full(len(self.keys), ladder.reference_index, dtype=np.int64)
        self.buffer: dict[str, torch.Tensor] = {}
        self.buffered_steps = 0
        self.accumulate_s = 0.0
        self.decisions: list[dict[str, Any]] = []
        self._codecs: dict[int, Codec] = {}

    # -- schedule --------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This rank (the deciding one is :attr:`src`)."""
        return 0 if self._rank is None else self._rank

    def bind_rank(self, rank: int) -> None:
        """Set this rank when the policy was built without one (the hook binds it to its process group)."""
        if self._rank is None:
            self._rank = int(rank)

    @property
    def leader(self) -> bool:
        return self.rank == self.src

    def accumulating(self, step: int) -> bool:
        """True when ``step``'s gradients go into the buffer (the ``accumulate`` steps before a decision)."""
        t = step - self.warmup
        return t >= 0 and t % self.every >= self.every - self.accumulate

    def due(self, step: int) -> bool:
        """True when a decision happens at ``step``."""
        t = step - self.warmup
        return t > 0 and t % self.every == 0

    def observe(self, step: int, grads: Mapping[str, torch.Tensor]) -> None:
        """Record layer names; on the deciding rank, add ``grads`` to the buffer when accumulating."""
        if not self.keys:
            self.keys = list(grads.keys())
            self.choice = np.full(len(self.keys), self.ladder.reference_index, dtype=np.int64)
        if not (self.leader and self.accumulating(step)):
            return
        t0 = time.perf_counter()
        with torch.no_grad():
            for k in self.keys:
                g = grads.get(k)
                if g is None:
                    continue
                buf = self.buffer.get(k)
                if buf is None:
                    self.buffer[k] = g.detach().clone()
                else:
                    buf.add_(g.detach())
        self.buffered_steps += 1
        self.accumulate_s += time.perf_counter() - t0

    def step(
        self, step: int, grads: Mapping[str, torch.Tensor], *, broadcast: Broadcast | None = None
    ) -> dict[str, dict[str, Any]] | None:
        """:meth:`decide` if ``step`` is a decision step, then :meth:`observe`; returns new ``layer_params`` or None."""
        if not self.keys:
            self.keys = list(grads.keys())
            self.choice = np.full(len(self.keys), self.ladder.reference_index, dtype=np.int64)
        out = self.decide(broadcast=broadcast) if self.due(step) else None
        self.observe(step, grads)
        return out

    # -- decision (subclasses fill _choose) -------------------------------------------------------

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        raise NotImplementedError

    def decide(self, *, broadcast: Broadcast | None = None) -> dict[str, dict[str, Any]]:
        """Choose on the deciding rank (from the buffer), broadcast, apply; returns ``layer_params``.

        Every rank must call it at the same step with a ``broadcast`` of the same transport (None:
        one process, the choice is kept as made). When any layer has no accumulated gradient (an
        empty buffer, or a layer whose gradient was None at every accumulated step, such as an
        unused or frozen parameter) the current choice of *every* layer is kept (and still
        broadcast, so ranks stay in step), and the deciding rank records why in the decision's
        ``info["skipped"]``. A choice over the other layers alone would not keep the DP's
        guarantee: the budget is the reference's error summed over all layers, and the error of a
        layer without a gradient is not measured.
        """
        info: dict[str, Any] = {"accumulate_s": self.accumulate_s, "buffered_steps": self.buffered_steps}
        choice = self.choice
        if self.leader:
            missing = [k for k in self.keys if k not in self.buffer]
            if not self.buffer:
                info["skipped"] = "nothing accumulated"
            elif missing:
                info["skipped"] = f"no accumulated gradient for {len(missing)} layer(s): {missing[:5]}"
            else:
                choice, more = self._choose({k: self.buffer[k] for k in self.keys})
                info.update(more)
        t0 = time.perf_counter()
        choice = np.asarray(choice, dtype=np.int64)
        choice = np.asarray(broadcast(choice), dtype=np.int64) if broadcast is not None else choice.copy()
        info["broadcast_s"] = time.perf_counter() - t0
        if choice.shape != (len(self.keys),) or choice.min(initial=0) < 0 or choice.max(initial=0) >= len(self.ladder):
            raise InvalidParameterError("received a per-layer choice that does not fit the ladder")
        self.choice = choice
        info["choice"] = choice.copy()
        self.decisions.append(info)
        self.buffer.clear()
        self.buffered_steps = 0
        self.accumulate_s = 0.0
        return self.layer_params()

    # -- checkpoints ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to decide as the uninterrupted one would: the layer keys, the
        current choice, the accumulation buffer (filled on the deciding rank only) and, with
        Accordion, its previous period's norms."""
        out: dict[str, Any] = {
            "keys": list(self.keys),
            "choice": [int(j) for j in self.choice],
            "buffer": {k: v.detach().clone() for k, v in self.buffer.items()},
            "buffered_steps": int(self.buffered_steps),
        }
        accordion = getattr(self, "accordion", None)
        if accordion is not None:
            out["accordion"] = accordion.state_dict()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (``buffer`` and ``accordion`` may be absent: empty)."""
        choice = np.asarray(state["choice"], dtype=np.int64)
        if choice.shape != (len(state["keys"]),) or choice.min(initial=0) < 0 or choice.max(initial=0) >= len(self.ladder):
            raise InvalidParameterError("the saved per-layer choice does not fit this policy's ladder")
        self.keys = list(state["keys"])
        self.choice = choice
        self.buffer = {k: v.detach().clone() for k, v in state.get("buffer", {}).items()}
        self.buffered_steps = int(state.get("buffered_steps", 0))
        accordion = getattr(self, "accordion", None)
        if accordion is not None:
            if "accordion" in state:
                accordion.load_state_dict(state["accordion"])
            else:
                accordion.reset()

    # -- what the hook reads -----------------------------------------------------------------------

    def layer_params(self) -> dict[str, dict[str, Any]]:
        """``{key: ladder.params(choice)}``: the hook's ``CodecSpec.layer_params``."""
        return {k: self.ladder.params(int(j)) for k, j in zip(self.keys, self.choice)}

    def values(self) -> list[Any]:
        """The chosen parameter value of each layer, in key order."""
        return [self.ladder.values[int(j)] for j in self.choice]

    def codec_for(self, key: str) -> Codec:
        """The raw codec (no error feedback) with layer ``key``'s current parameters."""
        try:
            j = int(self.choice[self.keys.index(key)])
        except ValueError:
            raise InvalidParameterError(f"unknown layer {key!r}") from None
        codec = self._codecs.get(j)
        if codec is None:
            codec = self._codecs[j] = self.ladder.build(j)
        return codec


class LGreCoPolicy(ScheduledPolicy):
    """L-GreCo (Algorithm 1) as a per-layer policy, optionally time-weighted or combined with Accordion.

    Args:
        ladder: candidate parameters; ``ladder.default`` is the uniform reference.
        every: steps between decisions (the paper: once per epoch).
        warmup: steps before the schedule starts (the paper: the learning-rate warm-up).
        accumulate: steps summed before a decision (10, public code).
        alpha, D, rounding, fallback_to_reference: see :func:`.dp.lgreco`.
        error_method: see :func:`.tables.measure_tables` (``"svd"``/``"power"``/``"auto"`` for PowerSGD).
        objective: ``"size"`` (bytes), ``"time"`` (bytes x ``bucket_coefficients[bucket]``, Sec. 4)
            or ``"priority"`` (bytes x (bucket + 1), Appendix A).
        bucket_coefficients: per-bucket seconds per byte (``timing.fit_bucket_coefficients``).
        accordion: an :class:`Accordion` whose ``low``/``high`` are ladder values: its per-layer
            choice becomes the reference that defines the budget (Sec. 5.3, L-GreCo + Accordion).
        layers: layer keys in order (learned from the first ``observe`` otherwise).
        src: the deciding rank; rank: this rank (None: 0 until :meth:`bind_rank`).
        device: where the broadcast tensor lives (CUDA for NCCL).
    """

    def __init__(
        self,
        ladder: Ladder,
        *,
        every: int = 100,
        warmup: int = 0,
        accumulate: int = 10,
        alpha: float = 1.0,
        D: int = DEFAULT_D,
        rounding: str = "ceil",
        fallback_to_reference: bool = True,
        error_method: str | None = None,
        objective: str = "size",
        bucket_coefficients: Sequence[float] | None = None,
        accordion: Accordion | None = None,
        layers: Sequence[str] | None = None,
        src: int = 0,
        rank: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            ladder, every=every, warmup=warmup, accumulate=accumulate, layers=layers, src=src, rank=rank, device=device
        )
        if objective not in ("size", "time", "priority"):
            raise InvalidParameterError(f"objective must be 'size', 'time' or 'priority', got {objective!r}")
        if objective == "time" and bucket_coefficients is None:
            raise InvalidParameterError("objective='time' needs bucket_coefficients")
        if accordion is not None:
            ladder.index_of(accordion.low), ladder.index_of(accordion.high)
        self.alpha, self.D, self.rounding = alpha, D, rounding
        self.fallback_to_reference = fallback_to_reference
        self.error_method, self.objective = error_method, objective
        self.bucket_coefficients = None if bucket_coefficients is None else list(bucket_coefficients)
        self.accordion = accordion
        self.layer_bucket: dict[str, int] = {}
        self.cost_cache: dict = {}  # bytes of fixed-size ladders, reused across decisions
        self.last_tables: Tables | None = None
        self.last_result: LGreCoResult | None = None

    def set_buckets(self, bucket_layout: Mapping[int, Sequence[str]]) -> None:
        """Which bucket each layer travels in (``{bucket index: [keys]}``, the hook's ``bucket_layout``)."""
        self.layer_bucket = {k: int(b) for b, ks in bucket_layout.items() for k in ks}

    def _objective(self, costs: np.ndarray) -> np.ndarray:
        if self.objective == "size":
            return costs.astype(np.float64)
        missing = [k for k in self.keys if k not in self.layer_bucket]
        if missing:
            raise InvalidParameterError(
                f"objective={self.objective!r} needs set_buckets(); no bucket for {missing[:3]}"
            )
        b = [self.layer_bucket[k] for k in self.keys]
        if self.objective == "time":
            return time_costs(costs, b, self.bucket_coefficients)  # type: ignore[arg-type]
        return bucket_priority_costs(costs, b)

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        tables = measure_tables(self.ladder, grads, error_method=self.error_method, cost_cache=self.cost_cache)
        reference: int | list[int] = self.ladder.reference_index
        if self.accordion is not None:
            norms = [float(torch.linalg.vector_norm(grads[k].float())) for k in self.keys]
            reference = [self.ladder.index_of(v) for v in self.accordion.update(norms)]
        result = lgreco(
            tables.errors,
            self._objective(tables.costs),
            reference,
            alpha=self.alpha,
            D=self.D,
            rounding=self.rounding,
            fallback_to_reference=self.fallback_to_reference,
        )
        self.last_tables, self.last_result = tables, result
        rows = np.arange(len(self.keys))
        info = {
            "tables_s": tables.seconds,
            "dp_s": result.seconds,
            "budget": result.budget,
            "error": result.error,
            "bytes": int(tables.costs[rows, result.choice].sum()),
            "reference_bytes": int(tables.costs[rows, result.reference].sum()),
            "raw_bytes": int(tables.raw_bytes.sum()),
            "fallback": result.fallback,
            "feasible": result.feasible,
        }
        return result.choice, info

    def overhead(self, step_time_s: float, decision: int = -1) -> Overhead:
        """Table 1's overhead of decision ``decision`` (default: the last) at ``step_time_s`` per step."""
        d = self.decisions[decision]
        if "tables_s" not in d:
            raise InvalidParameterError("that decision ran no DP on this rank")
        return overhead(d["tables_s"], d["dp_s"], step_time_s, self.every, d["accumulate_s"])


class AccordionPolicy(ScheduledPolicy):
    """Accordion alone as a per-layer policy: ``low`` in critical regimes, ``high`` elsewhere.

    ``low`` and ``high`` are values of ``ladder`` (e.g. PowerSGD ranks 64 and 16). The norms are
    those of the gradients accumulated over the ``accumulate`` steps before each decision (as in
    L-GreCo's Accordion hook); pass ``accumulate=every`` to use the whole period.
    """

    def __init__(
        self,
        ladder: Ladder,
        low: Any,
        high: Any,
        *,
        eta: float = 0.5,
        every: int = 100,
        warmup: int = 0,
        accumulate: int = 10,
        layers: Sequence[str] | None = None,
        src: int = 0,
        rank: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            ladder, every=every, warmup=warmup, accumulate=accumulate, layers=layers, src=src, rank=rank, device=device
        )
        ladder.index_of(low), ladder.index_of(high)
        self.accordion = Accordion(low, high, eta)

    def _choose(self, grads: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, Any]]:
        norms = [float(torch.linalg.vector_norm(grads[k].float())) for k in self.keys]
        values = self.accordion.update(norms)
        return np.array([self.ladder.index_of(v) for v in values], dtype=np.int64), {"norms": norms}
