"""Gradient aggregation shared by the real DDP hook and the simulated cluster.

The same code averages compressed gradients whether the workers are processes talking through
``torch.distributed`` (:class:`TorchCollective`, used by :mod:`gcbench.envs.ddp_hook`) or logical
workers inside one process (:class:`LocalCollective`, used by :mod:`gcbench.envs.simulated`). The
code is written SPMD-style over the *local workers* of a :class:`Collective`: one (this rank) in a
real run, all ``W`` in a simulation. Every collective is called with one tensor per local worker
and returns what each local worker receives; since every worker receives the same thing, the steps
after a collective run once and their result is every worker's average.

Protocols (chosen from the codec's declarations, never from its name, except the two families whose
collectives are their own):

``all_reduce`` (``codec.linear``)
    encode each gradient; all_reduce the payloads' summed sections (``codec.summed_sections``),
    batched into one flat tensor per section dtype; decode the summed payload; divide by ``W``.
    Sections that are not summed (e.g. RandomK's per-call seed) must be identical on every worker:
    they are not sent. With ``verify_shared="first"`` (default) a 64-bit digest of every payload's
    layout and shared sections is all_gathered the first time a tensor key is aggregated (8 bytes
    per worker, counted as ``check`` traffic) and a mismatch raises
    :class:`~.errors.CollectiveMismatchError`; ``"always"`` checks every step, ``"never"`` trusts
    the seeds (a mismatch then silently corrupts the sum, or fails in the collective).
``all_gather`` (every other codec)
    encode each gradient and serialize it (``payload.to_bytes()``); all_gather the byte sizes
    (int64 per tensor), then all_gather the concatenated payload bytes padded to the largest
    worker's total; trim each worker's bytes, parse them (``Payload.from_bytes``: checksummed,
    bounds-checked), decode, sum in rank order, divide by ``W``.
``powersgd`` (:class:`gcbench.compressors.powersgd.PowerSGD`)
    Vogels et al. 2019, Algorithm 1 distributed: ``P_i = M_i Q`` (warm-start ``Q``, identical on
    every worker); all_reduce the ``P``s of the bucket's matrices in one flat tensor together with
    the tensors PowerSGD leaves uncompressed; orthogonalize each ``P``; ``Q_i = M_i^T P``;
    all_reduce the ``Q``s; the update is ``P Q^T / W``; ``Q / W`` is the next step's warm start.
    With error feedback the residual is ``M_i - P Q^T / W`` (torch's ``powerSGD_hook`` and the
    authors' code use the aggregated approximation the same way); uncompressed tensors travel
    exactly and keep no residual (torch's hook keeps ``M_i - mean`` for them, a difference).
``sketched`` (Sketched-SGD, two rounds): see :meth:`Aggregator._sketched` (enabled when
    ``gcbench.compressors.sketched_sgd`` exists).

Randomness: every tensor key gets its own ``torch.Generator`` (per worker and device), passed to
``encode(..., generator=)``, so results do not depend on how DDP groups tensors into buckets or in
which order buckets arrive. For codecs whose workers must draw the *same* numbers (linear codecs:
RandomK's coordinates, sketch hashes; PowerSGD's initial ``Q``) the generator is seeded from
``(codec seed, key)`` on every worker; for the others from ``(codec seed, rank, key)``, so workers'
stochastic rounding is independent (as with one RNG per process). The codec's own ``seed``
parameter is the same on every worker, so every worker can decode every payload.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..compressors import ErrorFeedback, Payload
from ..compressors import registry as _registry
from ..compressors.base import Codec
from ..timing import synchronize
from .errors import CollectiveMismatchError, UnsupportedTopologyError
from .traffic import TrafficLog

PROTOCOLS = ("all_reduce", "all_gather", "powersgd", "sketched")


# ---------------------------------------------------------------------------------------------------
# collectives
# ---------------------------------------------------------------------------------------------------


class Collective(ABC):
    """What the aggregation needs from a transport, for the local workers it serves.

    ``local_ranks[i]`` is the global rank of local worker ``i``; methods take one tensor per local
    worker (same shape and dtype on every worker) and return what each local worker receives.
    """

    world_size: int
    local_ranks: tuple[int, ...]

    @abstractmethod
    def all_reduce(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Element-wise sum over all ``world_size`` workers; one result per local worker."""

    @abstractmethod
    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        """Every worker's tensor, in rank order; one list per local worker."""


class LocalCollective(Collective):
    """All ``world_size`` workers live in this process (the simulated cluster).

    Sums run in rank order (``((t0 + t1) + t2) + ...``), which is what a 2-rank gloo all_reduce
    computes (``t0 + t1`` is commutative in IEEE arithmetic); with more ranks gloo's ring adds in
    another order, so float results may differ in the last bits from a real run with ``W > 2``.
    """

    def __init__(self, world_size: int) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.local_ranks = tuple(range(world_size))

    def _check(self, tensors: Sequence[torch.Tensor]) -> None:
        if len(tensors) != self.world_size:
            raise ValueError(f"expected {self.world_size} tensors (one per worker), got {len(tensors)}")
        first = tensors[0]
        for t in tensors[1:]:
            if t.shape != first.shape or t.dtype != first.dtype:
                raise CollectiveMismatchError(
                    f"workers' tensors differ: {tuple(first.shape)} {first.dtype} vs {tuple(t.shape)} {t.dtype}"
                )

    def all_reduce(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self._check(tensors)
        total = tensors[0].clone()
        for t in tensors[1:]:
            total += t
        return [total] * self.world_size

    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        self._check(tensors)
        gathered = [t.clone() for t in tensors]
        return [gathered] * self.world_size


class TorchCollective(Collective):
    """This process's rank in a ``torch.distributed`` process group (gloo, NCCL...).

    Collectives are issued synchronously (they return when the data is there), so every rank
    issues the same collectives in the same order whatever DDP's bucketing is. ``progress`` is
    called before each collective (the launcher's hang detector counts these calls).
    """

    def __init__(self, group: Any = None, progress: Callable[[], None] | None = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.local_ranks = (dist.get_rank(group),)
        self.progress = progress

    def all_reduce(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        (t,) = tensors
        out = t.clone()
        if self.progress is not None:
            self.progress()
        self._dist.all_reduce(out, group=self.group)
        return [out]

    def all_gather(self, tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
        (t,) = tensors
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        if self.progress is not None:
            self.progress()
        self._dist.all_gather(out, t.contiguous(), group=self.group)
        return [out]


# ---------------------------------------------------------------------------------------------------
# codecs of one worker
# ---------------------------------------------------------------------------------------------------


@dataclass
class CodecSpec:
    """How to build a worker's codecs: a registry name (or a factory) plus parameters.

    Attributes:
        name: registry name (``gcbench.compressors.get``); ignored when ``factory`` is given.
        params: codec parameters (override the registry entry's defaults).
        factory: ``factory(**params) -> Codec``, instead of the registry.
        error_feedback: wrap the codec in :class:`~gcbench.compressors.ErrorFeedback` (a registry
            entry that already applies error feedback is not wrapped twice).
        layer_params: per-tensor-key parameter overrides (L-GreCo's per-layer ranks/ratios).
    """

    name: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    factory: Callable[..., Any] | None = None
    error_feedback: bool = False
    layer_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is None and self.factory is None:
            raise ValueError("CodecSpec needs a registry name or a factory")

    def params_for(self, key: str | None) -> dict[str, Any]:
        """The parameters used for tensor ``key`` (``params`` updated by ``layer_params[key]``)."""
        return {**self.params, **(self.layer_params.get(key, {}) if key is not None else {})}

    def build(self, key: str | None = None) -> Any:
        """A new codec for tensor ``key`` (an ErrorFeedback wrapper when ``error_feedback``)."""
        params = self.params_for(key)
        if self.factory is not None:
            codec = self.factory(**params)
        elif self.name in PROTOCOL_FAMILIES:
            codec = PROTOCOL_FAMILIES[self.name](**params)
        else:
            codec = _registry.get(self.name, **params)
        if isinstance(codec, SketchedSGD):
            if self.error_feedback:
                raise UnsupportedTopologyError("Sketched-SGD keeps its own error accumulation; error_feedback must be False")
            return codec
        if self.error_feedback and not isinstance(codec, ErrorFeedback):
            codec = ErrorFeedback(codec)
        return codec

    @property
    def label(self) -> str:
        """Short human-readable description (for reports)."""
        base = self.name if self.factory is None else getattr(self.factory, "__name__", "factory")
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{base}({extra})" + ("+ef" if self.error_feedback else "")


@dataclass(eq=False)
class SketchedSGD:
    """One worker's Sketched-SGD (Ivkin et al., NeurIPS 2019, Algorithm 2) as a gradient aggregator.

    Not a :class:`Codec`: its two rounds are a protocol
    (:class:`gcbench.compressors.sketched_sgd.SketchedSGDWorker`). Built by :class:`CodecSpec`
    for the name ``"sketched-sgd"``. Inside a DDP hook the worker runs with ``lr = 1``: its
    accumulator ``v`` holds raw gradients and the user's optimizer applies the learning rate (the
    same update as Algorithm 2's ``g~ = eta g + a`` for a constant ``eta``).

    Args:
        ratio: ``k = ceil(ratio * numel)`` coordinates applied per tensor and step.
        P: the second round fetches the exact values of ``P k`` candidates (Algorithm 2, line 8;
            the paper leaves ``P`` a parameter: 2 here is gcbench's choice).
        rows, columns, compression, seed: the Count Sketch (``columns = 0``: ``numel / (rows *
            compression)``); identical on every worker.
        momentum: ``rho`` of the authors' code, applied *inside* the error accumulation
            (``u <- rho u + g``, ``v <- v + u``, both zeroed at the applied coordinates: momentum
            stopping); use it instead of the optimizer's momentum, which would act after the
            accumulation (0 = Algorithm 2 as printed).
    """

    ratio: float = 0.01
    P: int = 2
    rows: int = 5
    columns: int = 0
    compression: float = 20.0
    seed: int = 0
    momentum: float = 0.0

    linear = False
    stateful = True

    def __post_init__(self) -> None:
        from ..compressors.errors import InvalidParameterError
        from ..compressors.sketched_sgd import SketchedSGDWorker

        if not (isinstance(self.ratio, (int, float)) and 0 < float(self.ratio) <= 1):
            raise InvalidParameterError(f"SketchedSGD: ratio must be in (0, 1], got {self.ratio!r}")
        if not (isinstance(self.P, int) and self.P >= 1):
            raise InvalidParameterError(f"SketchedSGD: P must be an int >= 1, got {self.P!r}")
        self.worker = SketchedSGDWorker(
            rows=self.rows, columns=self.columns, compression=self.compression, seed=self.seed,
            momentum=float(self.momentum), lr=1.0, momentum_stopping=True,
        )

    @property
    def params(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "P": self.P, "rows": self.rows, "columns": self.columns,
                "compression": self.compression, "seed": self.seed, "momentum": self.momentum}

    def k_for(self, numel: int) -> int:
        """Coordinates applied for a tensor of ``numel`` elements."""
        return max(1, min(numel, math.ceil(self.ratio * numel)))

    def reset_state(self) -> None:
        self.worker.reset_state()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.worker.state_dict()

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.worker.load_state_dict(state)


#: Families that are not registry codecs because their collectives are their own.
PROTOCOL_FAMILIES: dict[str, Callable[..., Any]] = {"sketched-sgd": SketchedSGD}


def inner_codec(codec: Any) -> Codec:
    """The codec under an error-feedback wrapper (or ``codec`` itself)."""
    return codec.codec if isinstance(codec, ErrorFeedback) else codec


def _family(codec: Codec, module: str, attr: str) -> bool:
    import importlib

    try:
        cls = getattr(importlib.import_module(f"gcbench.compressors.{module}"), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(codec, cls)


def protocol_of(codec: Any) -> str:
    """How gradients encoded by ``codec`` are aggregated: one of :data:`PROTOCOLS`."""
    inner = inner_codec(codec)
    if _family(inner, "powersgd", "PowerSGD"):
        return "powersgd"
    if isinstance(inner, SketchedSGD):
        return "sketched"
    return "all_reduce" if inner.linear else "all_gather"


def _shares_randomness(codec: Any) -> bool:
    """Whether every worker must draw the same random numbers for this codec."""
    return protocol_of(codec) in ("all_reduce", "powersgd", "sketched")


def _derive_seed(*parts: Any) -> int:
    digest = hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


class WorkerCodecs:
    """One worker's codecs, per-tensor generators and protocol state (PowerSGD warm starts).

    Codecs are built lazily per distinct parameter set (tensors sharing parameters share one codec
    instance; stateful codecs keep their state per ``key``).
    """

    def __init__(self, spec: CodecSpec, rank: int = 0) -> None:
        self.spec = spec
        self.rank = rank
        self._codecs: dict[str, Any] = {}
        self._generators: dict[tuple[str, str], torch.Generator] = {}
        #: PowerSGD warm-start ``Q`` per key (the all-reduced mean of the previous step).
        self.warm_q: dict[str, torch.Tensor] = {}
        self._pending_codec_state: dict[str, dict[str, torch.Tensor]] = {}
        self._pending_generators: dict[tuple[str, str], torch.Tensor] = {}

    @staticmethod
    def _label(params: Mapping[str, Any]) -> str:
        return json.dumps(params, sort_keys=True, default=str)

    def codec_for(self, key: str) -> Any:
        """The codec that encodes tensor ``key`` (built on first use)."""
        label = self._label(self.spec.params_for(key))
        codec = self._codecs.get(label)
        if codec is None:
            codec = self.spec.build(key)
            pending = self._pending_codec_state.pop(label, None)
            if pending is not None:
                codec.load_state_dict(pending)
            self._codecs[label] = codec
        return codec

    def generator_for(self, key: str, device: torch.device, codec: Any) -> torch.Generator:
        """The generator for tensor ``key`` on ``device`` (see the module docstring for seeding)."""
        gk = (key, str(device))
        gen = self._generators.get(gk)
        if gen is None:
            gen = torch.Generator(device=device)
            base = int(getattr(inner_codec(codec), "seed", 0))
            parts = (base, key) if _shares_randomness(codec) else (base, self.rank, key)
            gen.manual_seed(_derive_seed(*parts))
            pending = self._pending_generators.pop(gk, None)
            if pending is not None:
                gen.set_state(pending)
            self._generators[gk] = gen
        return gen

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume bit-exactly: codec states, generator states, warm starts."""
        generators = {f"{k}@{d}": st for (k, d), st in self._pending_generators.items()}
        generators.update({f"{k}@{d}": g.get_state() for (k, d), g in self._generators.items()})
        return {
            # state loaded but not yet claimed by a codec/generator is kept, not dropped
            "codecs": {**self._pending_codec_state, **{label: c.state_dict() for label, c in self._codecs.items()}},
            "generators": generators,
            "warm_q": {k: v.clone() for k, v in self.warm_q.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (applied lazily as codecs and generators are built)."""
        self._codecs.clear()
        self._generators.clear()
        self._pending_codec_state = {k: dict(v) for k, v in state.get("codecs", {}).items()}
        self._pending_generators = {}
        for name, st in state.get("generators", {}).items():
            key, _, dev = name.rpartition("@")
            self._pending_generators[(key, dev)] = st
        self.warm_q = {k: v.clone() for k, v in state.get("warm_q", {}).items()}


def set_layer_params(
    spec: CodecSpec, workers: Sequence[WorkerCodecs], layer_params: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Replace ``spec.layer_params`` on a live spec (an L-GreCo decision) and move per-key state.

    For every key whose parameters change: the PowerSGD warm-start ``Q`` is dropped (its shape
    belongs to the old rank; the next step draws a fresh one from the key's shared generator, the
    same on every worker), and the error-feedback residual moves from the old codec instance to the
    new one (the residual has the gradient's shape, whatever the parameter). Other per-key state of
    stateful inner codecs stays with the old instance (a documented limitation). Returns the keys
    whose parameters changed, sorted (the same on every worker).
    """
    new = {str(k): dict(v) for k, v in layer_params.items()}
    keys = sorted(set(spec.layer_params) | set(new))
    before = {k: spec.params_for(k) for k in keys}
    old_codecs = [{k: w._codecs.get(w._label(before[k])) for k in keys} for w in workers]
    spec.layer_params = new
    changed = [k for k in keys if spec.params_for(k) != before[k]]
    for w, olds in zip(workers, old_codecs):
        for k in changed:
            w.warm_q.pop(k, None)
            old = olds[k]
            if isinstance(old, ErrorFeedback) and k in old.memory:
                fresh = w.codec_for(k)
                residual = old.memory.pop(k)
                if isinstance(fresh, ErrorFeedback):
                    fresh.memory[k] = residual
    return changed


def _axis_default(codec: str, params: Mapping[str, Any]) -> Any:
    """The ladder default (paper axis) implied by a spec's params (None: the ladder's own default)."""
    if codec == "powersgd" and "rank" in params:
        return int(params["rank"])
    if codec == "qsgd" and "levels" in params:
        return int(params["levels"]).bit_length() + 1  # levels = 2^(b-1) - 1
    if codec == "topk" and "ratio" in params:
        return float(params["ratio"])
    if codec == "sketchml" and "buckets" in params:
        return int(params["buckets"])
    if codec == "3lc" and "sparsity" in params:
        return float(params["sparsity"])
    return None


ADAPTIVE = ("lgreco", "accordion", "lgreco+accordion")


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
    **kwargs: Any,
) -> Any:
    """A per-layer policy for ``spec``'s codec: ``"lgreco"``, ``"accordion"`` or ``"lgreco+accordion"``.

    The ladder is :func:`gcbench.compressors.adaptive.ladder_for` around the spec's own parameter
    (e.g. PowerSGD ``rank``; QSGD ``levels`` read as bits), the other spec parameters held fixed,
    so the ladder's codecs are the ones the hook builds. ``accumulate`` defaults to
    ``min(10, every)`` (the public code's 10). Accordion switches between ``2D`` (``low``
    compression, critical regimes) and ``D/2`` (``high``), the paper's {16, 64} for rank 32; with
    ``"lgreco+accordion"`` Accordion's per-layer choice is the reference that sets the budget.
    ``kwargs`` go to :class:`~gcbench.compressors.adaptive.LGreCoPolicy`.
    """
    from ..compressors.adaptive import Accordion, AccordionPolicy, LGreCoPolicy, ladder_for

    if kind not in ADAPTIVE:
        raise ValueError(f"adaptive must be one of {ADAPTIVE}, got {kind!r}")
    if spec.name is None:
        raise ValueError("adaptive policies need a registry codec name (a ladder), not a factory")
    probe = ladder_for(spec.name)
    base = {k: v for k, v in spec.params.items() if k != probe.param}
    if default is None:
        default = _axis_default(spec.name, spec.params)
    ladder = ladder_for(spec.name, default, **base)
    if ladder.param in spec.params and spec.params[ladder.param] != ladder.default:
        raise ValueError(f"{spec.name}.{ladder.param}={spec.params[ladder.param]!r} is not the ladder default {ladder.default!r}")
    acc = min(10, every) if accumulate is None else accumulate
    common = {"every": every, "warmup": warmup, "accumulate": acc, "layers": layers, "rank": rank}
    # Accordion's pair is the paper's {D/2, 2D} around the uniform D (Table 4: {16, 64} for rank 32)
    axis = [float(ladder.label(j)) for j in range(len(ladder))]
    d = axis[ladder.reference_index]
    low = ladder.values[min(range(len(axis)), key=lambda j: abs(axis[j] - 2 * d))]
    high = ladder.values[min(range(len(axis)), key=lambda j: abs(axis[j] - d / 2))]
    if spec.name == "3lc":  # 3LC's sparsity multiplier: a larger value compresses more
        low, high = high, low
    if kind == "accordion":
        return AccordionPolicy(ladder, low, high, **common)
    if kind == "lgreco+accordion":
        kwargs.setdefault("accordion", Accordion(low, high))
    return LGreCoPolicy(ladder, **common, **kwargs)


def run_policy_decision(
    policy: Any,
    step: int,
    spec: CodecSpec,
    aggregator: Aggregator,
    *,
    group: Any = None,
    buckets: Mapping[int, Sequence[str]] | None = None,
) -> dict[str, dict[str, Any]] | None:
    """At a decision step: decide (deciding rank), broadcast (every rank), apply to ``spec``.

    Called by the hook before the first bucket of each step and by the simulator before its first
    aggregation, so both apply a decision from the same step on. The broadcast (int64 per layer)
    is recorded as ``broadcast``/``choice`` traffic. ``buckets`` (``{bucket index: keys}``, the
    layout of the previous step) goes to ``policy.set_buckets`` when the policy has one (the time
    and priority objectives need it). Returns the new ``layer_params`` or None.
    """
    if not policy.due(step):
        return None
    if buckets and hasattr(policy, "set_buckets"):
        policy.set_buckets(buckets)
    new = policy.decide(group=group)
    n_local = len(aggregator.workers)
    aggregator._record(step, -1, "broadcast", [("choice", [8 * len(policy.keys)] * n_local, None)])
    changed = set_layer_params(spec, aggregator.workers, new)
    aggregator._verified.difference_update(changed)
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
            raise ValueError("need ladder_size >= 1, calibrate >= 0, start >= 1, 0 <= floor <= 1, max_samples >= 2")
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
        g = torch.Generator().manual_seed(_derive_seed("sync-time-probe", self.seed, step))
        return torch.randint(0, self.ladder_size, (layers,), generator=g).tolist()

    def record(self, step: int, bucket: int, nbytes: int, seconds: float) -> None:
        """One bucket of ``step``: its wire bytes (this rank) and the seconds the hook spent on it."""
        if self._step != step:
            self._step, self._bytes, self._seconds = step, {}, 0.0
        self._bytes[bucket] = self._bytes.get(bucket, 0) + int(nbytes)
        self._seconds += float(seconds)

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
        from ..compressors.adaptive import fit_bucket_coefficients

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


# ---------------------------------------------------------------------------------------------------
# the aggregator
# ---------------------------------------------------------------------------------------------------


class _Clock:
    """Accumulates measured seconds per (local worker, phase) for one aggregate call."""

    def __init__(self, device: torch.device, n_local: int) -> None:
        self.device = device
        self.seconds = [dict.fromkeys(("encode", "decode", "comm"), 0.0) for _ in range(n_local)]

    def start(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def stop(self, t0: float, phase: str, worker: int | None = None) -> None:
        synchronize(self.device)
        dt = time.perf_counter() - t0
        targets = range(len(self.seconds)) if worker is None else [worker]
        for w in targets:  # work every worker would do itself (decoding what all received, comm)
            self.seconds[w][phase] += dt


class Aggregator:
    """Averages one bucket of gradients across all workers through ``collective``.

    Args:
        workers: one :class:`WorkerCodecs` per local worker of ``collective``.
        collective: the transport.
        traffic: where wire, raw and time records go (one is created when None).
        verify_shared: ``"first"``, ``"always"`` or ``"never"`` (see the module docstring).
    """

    def __init__(
        self,
        workers: Sequence[WorkerCodecs],
        collective: Collective,
        traffic: TrafficLog | None = None,
        *,
        verify_shared: str = "first",
    ) -> None:
        if len(workers) != len(collective.local_ranks):
            raise ValueError(f"{len(workers)} WorkerCodecs for {len(collective.local_ranks)} local workers")
        if verify_shared not in ("first", "always", "never"):
            raise ValueError(f"verify_shared must be 'first', 'always' or 'never', got {verify_shared!r}")
        self.workers = list(workers)
        self.collective = collective
        self.traffic = traffic if traffic is not None else TrafficLog()
        self.verify_shared = verify_shared
        self._verified: set[str] = set()
        self._seq_step: int | None = None
        self._seq = 0

    @property
    def world_size(self) -> int:
        return self.collective.world_size

    # -- bookkeeping ------------------------------------------------------------------------------

    def _next_seq(self, step: int) -> int:
        if self._seq_step != step:
            self._seq_step, self._seq = step, 0
        seq = self._seq
        self._seq += 1
        return seq

    def _record(self, step: int, bucket: int, op: str, parts: Sequence[tuple[str, Sequence[int], Sequence[int] | None]]) -> int:
        """Record one collective: ``parts`` = (kind, bytes per local worker, padding per local worker)."""
        seq = self._next_seq(step)
        for kind, nbytes, padding in parts:
            for i, rank in enumerate(self.collective.local_ranks):
                pad = padding[i] if padding is not None else 0
                self.traffic.wire(step, rank, seq, op, kind, nbytes[i], padding=pad, bucket=bucket)
        return seq

    # -- entry point ------------------------------------------------------------------------------

    def aggregate(
        self, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str], *, step: int, bucket: int = -1
    ) -> list[torch.Tensor]:
        """Average ``grads[local_worker][j]`` (tensor ``keys[j]``) over all workers.

        Returns one averaged tensor per key (every worker's result is the same), shaped and typed
        like the gradients. Tensors are grouped by protocol (in order of first appearance, the same
        on every worker because codec parameters are), one batch of collectives per group.
        """
        n_local = len(self.collective.local_ranks)
        if len(grads) != n_local or any(len(g) != len(keys) for g in grads):
            raise ValueError(f"grads must hold {len(keys)} tensors for each of {n_local} local workers")
        if not keys:
            return []
        device = grads[0][0].device
        for i, rank in enumerate(self.collective.local_ranks):
            self.traffic.raw(
                step, rank, sum(g.numel() * g.element_size() for g in grads[i]), sum(g.numel() for g in grads[i]), bucket=bucket
            )
        groups: dict[str, list[int]] = {}
        for j, key in enumerate(keys):
            groups.setdefault(protocol_of(self.workers[0].codec_for(key)), []).append(j)
        out: list[torch.Tensor | None] = [None] * len(keys)
        clock = _Clock(device, n_local)
        handlers = {
            "all_reduce": self._all_reduce,
            "all_gather": self._all_gather,
            "powersgd": self._powersgd,
            "sketched": self._sketched,
        }
        for proto, idx in groups.items():
            sub_grads = [[g[j] for j in idx] for g in grads]
            results = handlers[proto](sub_grads, [keys[j] for j in idx], step, bucket, clock)
            for j, r in zip(idx, results):
                out[j] = r
        for i, rank in enumerate(self.collective.local_ranks):
            for phase, s in clock.seconds[i].items():
                self.traffic.time(step, rank, phase, s)
        return out  # type: ignore[return-value]

    # -- encode -----------------------------------------------------------------------------------

    def _encode_all(
        self, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str], clock: _Clock
    ) -> list[list[Payload]]:
        payloads = []
        for i, w in enumerate(self.workers):
            t0 = clock.start()
            row = []
            for g, key in zip(grads[i], keys):
                codec = w.codec_for(key)
                row.append(codec.encode(g, key=key, generator=w.generator_for(key, g.device, codec)))
            clock.stop(t0, "encode", i)
            payloads.append(row)
        return payloads

    # -- all_reduce (linear codecs) ---------------------------------------------------------------

    @staticmethod
    def _summed(codec: Any, payload: Payload) -> list[int]:
        s = inner_codec(codec).summed_sections
        return list(range(len(payload.sections))) if s is None else [i for i in s if i < len(payload.sections)]

    def _digest(self, codecs: Sequence[Any], payloads: Sequence[Payload]) -> int:
        h = hashlib.blake2b(digest_size=8)
        for codec, p in zip(codecs, payloads):
            summed = set(self._summed(codec, p))
            h.update(repr((p.codec_id, p.shape, str(p.dtype), sorted(p.params.items()))).encode())
            for i, s in enumerate(p.sections):
                h.update(repr((i, str(s.dtype), s.numel())).encode())
                if i not in summed:
                    h.update(s.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return int.from_bytes(h.digest(), "little", signed=True)

    def _all_reduce(self, grads, keys, step, bucket, clock) -> list[torch.Tensor]:
        payloads = self._encode_all(grads, keys, clock)
        device = grads[0][0].device
        codecs = [self.workers[0].codec_for(k) for k in keys]
        if self.verify_shared == "always" or (self.verify_shared == "first" and not set(keys) <= self._verified):
            digests = [
                torch.tensor([self._digest(codecs, payloads[i])], dtype=torch.int64, device=device)
                for i in range(len(self.workers))
            ]
            t0 = clock.start()
            gathered = self.collective.all_gather(digests)[0]
            clock.stop(t0, "comm")
            self._record(step, bucket, "all_gather", [("check", [8] * len(self.workers), None)])
            values = [int(t.item()) for t in gathered]
            bad = [r for r, v in enumerate(values) if v != values[0]]
            if bad:
                raise CollectiveMismatchError(
                    f"shared payload sections or section lengths of ranks {bad} differ from rank 0's for tensors "
                    f"{list(keys)[:4]}...: workers must build the codec with the same seed and parameters"
                )
            self._verified.update(keys)
        # one flat tensor per section dtype, sections in (tensor, section) order
        layout = [(j, s) for j, p in enumerate(payloads[0]) for s in self._summed(codecs[j], p)]
        dtypes = sorted({str(payloads[0][j].sections[s].dtype) for j, s in layout})
        summed: dict[tuple[int, int], torch.Tensor] = {}
        for dt in dtypes:
            members = [(j, s) for j, s in layout if str(payloads[0][j].sections[s].dtype) == dt]
            flats = [torch.cat([payloads[i][j].sections[s].reshape(-1) for j, s in members]) for i in range(len(self.workers))]
            t0 = clock.start()
            reduced = self.collective.all_reduce(flats)[0]
            clock.stop(t0, "comm")
            self._record(step, bucket, "all_reduce", [("payload", [f.numel() * f.element_size() for f in flats], None)])
            offset = 0
            for j, s in members:
                n = payloads[0][j].sections[s].numel()
                summed[(j, s)] = reduced[offset : offset + n]
                offset += n
        t0 = clock.start()
        out = []
        for j, p in enumerate(payloads[0]):
            sections = tuple(summed.get((j, s), sec) for s, sec in enumerate(p.sections))
            total = Payload(p.codec_id, p.dtype, p.shape, p.params, sections, p.sparse)
            out.append(self._to_grad(codecs[j].decode(total, device=device), grads[0][j]) / self.world_size)
        clock.stop(t0, "decode")
        return out

    @staticmethod
    def _to_grad(decoded: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        if decoded.layout == torch.sparse_coo:
            decoded = decoded.to_dense()
        if decoded.shape != like.shape:
            raise CollectiveMismatchError(f"decoded shape {tuple(decoded.shape)} differs from the gradient's {tuple(like.shape)}")
        return decoded.to(like.dtype)

    # -- all_gather (other codecs) ----------------------------------------------------------------

    def _all_gather(self, grads, keys, step, bucket, clock) -> list[torch.Tensor]:
        payloads = self._encode_all(grads, keys, clock)
        device = grads[0][0].device
        n_local = len(self.workers)
        blobs = [[p.to_bytes() for p in row] for row in payloads]
        sizes = [torch.tensor([len(b) for b in row], dtype=torch.int64, device=device) for row in blobs]
        t0 = clock.start()
        all_sizes = self.collective.all_gather(sizes)[0]
        clock.stop(t0, "comm")
        self._record(step, bucket, "all_gather", [("sizes", [8 * len(keys)] * n_local, None)])
        sizes_cpu = [s.cpu() for s in all_sizes]
        totals = [int(s.sum()) for s in sizes_cpu]
        if any(bool((s < 0).any()) for s in sizes_cpu):
            raise CollectiveMismatchError("a worker announced a negative payload size")
        longest = max(totals)
        bufs = []
        for row in blobs:
            data = b"".join(row)
            buf = torch.zeros(longest, dtype=torch.uint8)
            if data:
                buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            bufs.append(buf.to(device))
        own = [sum(len(b) for b in row) for row in blobs]
        t0 = clock.start()
        gathered = self.collective.all_gather(bufs)[0]
        clock.stop(t0, "comm")
        self._record(step, bucket, "all_gather", [("payload", [longest] * n_local, [longest - o for o in own])])
        t0 = clock.start()
        codecs = [self.workers[0].codec_for(k) for k in keys]
        acc: list[torch.Tensor | None] = [None] * len(keys)
        for rank, (buf, sz) in enumerate(zip(gathered, sizes_cpu)):
            raw = buf[: totals[rank]].cpu().numpy().tobytes()
            offset = 0
            for j, n in enumerate(sz.tolist()):
                payload = Payload.from_bytes(raw[offset : offset + n])
                offset += n
                dec = self._to_grad(codecs[j].decode(payload, device=device), grads[0][j])
                acc[j] = dec if acc[j] is None else acc[j] + dec
        clock.stop(t0, "decode")
        return [a / self.world_size for a in acc]  # type: ignore[operator]

    # -- PowerSGD ---------------------------------------------------------------------------------

    def _powersgd(self, grads, keys, step, bucket, clock) -> list[torch.Tensor]:
        from ..compressors import powersgd as psgd

        n_local = len(self.workers)
        W = self.world_size
        codecs = [self.workers[0].codec_for(k) for k in keys]
        device = grads[0][0].device
        # split into compressed matrices and tensors sent as they are
        plan = []  # (j, (n, m, r) or None)
        for j, (key, g) in enumerate(zip(keys, grads[0])):
            rank = int(inner_codec(codecs[j]).rank)
            dims = psgd.matrix_shape(tuple(g.shape))
            if dims is not None and psgd.should_compress(dims[0], dims[1], rank):
                plan.append((j, (dims[0], dims[1], min(rank, dims[0], dims[1]))))
            else:
                plan.append((j, None))
        mats = [j for j, d in plan if d is not None]
        dense = [j for j, d in plan if d is None]
        dims = {j: d for j, d in plan if d is not None}
        t0 = clock.start()
        # M_i = g_i (+ residual)
        matrices: list[dict[int, torch.Tensor]] = []
        for i, w in enumerate(self.workers):
            row = {}
            for j in mats:
                n, m, r = dims[j]
                wd = torch.float64 if grads[i][j].dtype == torch.float64 else torch.float32
                mat = grads[i][j].detach().reshape(n, m).to(wd)
                codec = w.codec_for(keys[j])
                if isinstance(codec, ErrorFeedback) and keys[j] in codec.memory:
                    mat = mat + codec.memory[keys[j]].reshape(n, m).to(wd)
                row[j] = mat
            matrices.append(row)
        # warm-start Q: identical on every worker (shared-seed generator, same history)
        qs: list[dict[int, torch.Tensor]] = []
        for i, w in enumerate(self.workers):
            row = {}
            for j in mats:
                n, m, r = dims[j]
                mat = matrices[i][j]
                warm = bool(getattr(inner_codec(codecs[j]), "warm_start", True))
                q = w.warm_q.get(keys[j]) if warm else None
                if q is None or q.shape != (m, r) or q.dtype != mat.dtype or q.device != mat.device:
                    q = torch.randn(m, r, generator=w.generator_for(keys[j], device, codecs[j]), device=device, dtype=mat.dtype)
                row[j] = q
            qs.append(row)
        ps = [{j: psgd.compute_p(matrices[i][j], qs[i][j]) for j in mats} for i in range(n_local)]
        clock.stop(t0, "encode")
        # round 1: P factors and the uncompressed tensors, one flat tensor per dtype
        reduced_p: dict[int, torch.Tensor] = {}
        reduced_dense: dict[int, torch.Tensor] = {}
        entries = [("dense", j, lambda i, j=j: grads[i][j].reshape(-1)) for j in dense] + [
            ("factor_p", j, lambda i, j=j: ps[i][j].reshape(-1)) for j in mats
        ]
        self._reduce_entries(entries, step, bucket, clock, {"dense": reduced_dense, "factor_p": reduced_p})
        t0 = clock.start()
        p_hat = {}
        for j in mats:
            n, m, r = dims[j]
            p_hat[j] = psgd.orthogonalize_(reduced_p[j].reshape(n, r).clone())
        q_local = [{j: psgd.compute_q(matrices[i][j], p_hat[j]) for j in mats} for i in range(n_local)]
        clock.stop(t0, "encode")
        reduced_q: dict[int, torch.Tensor] = {}
        if mats:
            self._reduce_entries(
                [("factor_q", j, lambda i, j=j: q_local[i][j].reshape(-1)) for j in mats],
                step, bucket, clock, {"factor_q": reduced_q},
            )
        t0 = clock.start()
        out: list[torch.Tensor | None] = [None] * len(keys)
        for j in dense:
            out[j] = (reduced_dense[j] / W).reshape(grads[0][j].shape).to(grads[0][j].dtype)
        for j in mats:
            n, m, r = dims[j]
            q_mean = reduced_q[j].reshape(m, r) / W
            approx = psgd.decompress(p_hat[j], q_mean)
            out[j] = approx.reshape(grads[0][j].shape).to(grads[0][j].dtype)
            for i, w in enumerate(self.workers):
                if bool(getattr(inner_codec(codecs[j]), "warm_start", True)):
                    w.warm_q[keys[j]] = q_mean.clone()
                codec = w.codec_for(keys[j])
                if isinstance(codec, ErrorFeedback):
                    codec.memory[keys[j]] = (matrices[i][j] - approx).reshape(grads[i][j].shape)
        clock.stop(t0, "decode")
        return out  # type: ignore[return-value]

    def _reduce_entries(self, entries, step, bucket, clock, sinks) -> None:
        """All-reduce ``(kind, j, tensor_of_worker)`` entries: one flat tensor per dtype.

        The flat tensor's bytes are recorded per kind (all in one collective); results land in
        ``sinks[kind][j]`` as 1-D sums.
        """
        n_local = len(self.workers)
        by_dtype: dict[str, list[tuple[str, int, Callable[[int], torch.Tensor]]]] = {}
        for e in entries:
            by_dtype.setdefault(str(e[2](0).dtype), []).append(e)
        for dt in sorted(by_dtype):
            members = by_dtype[dt]
            per_worker = [[fn(i) for _, _, fn in members] for i in range(n_local)]
            flats = [torch.cat(row) for row in per_worker]
            t0 = clock.start()
            reduced = self.collective.all_reduce(flats)[0]
            clock.stop(t0, "comm")
            kinds: dict[str, int] = {}
            for (kind, _, _), t in zip(members, per_worker[0]):
                kinds[kind] = kinds.get(kind, 0) + t.numel() * t.element_size()
            self._record(step, bucket, "all_reduce", [(k, [b] * n_local, None) for k, b in kinds.items()])
            offset = 0
            for (kind, j, _), t in zip(members, per_worker[0]):
                sinks[kind][j] = reduced[offset : offset + t.numel()]
                offset += t.numel()

    # -- Sketched-SGD ------------------------------------------------------------------------------

    def _sketched(self, grads, keys, step, bucket, clock) -> list[torch.Tensor]:
        """Sketched-SGD, Algorithm 2: round 1 all_reduces the workers' Count Sketches (one flat
        tensor for the bucket); every worker unsketches the same ``P k`` candidates from the summed
        tables; round 2 all_reduces the exact values at the candidates; the top ``k`` of the exact
        sums is the update (divided by ``W``: the mean), and every worker zeroes its accumulator
        there. Candidate indices never travel: every worker computes them from the same sums."""
        from ..compressors import sketched_sgd as ssgd

        n_local = len(self.workers)
        sk = [[self.workers[i].codec_for(k) for k in keys] for i in range(n_local)]
        t0 = clock.start()
        round1 = [[sk[i][j].worker.round1(grads[i][j], key=keys[j]) for j in range(len(keys))] for i in range(n_local)]
        clock.stop(t0, "encode")
        if any(len(p.sections) != 1 for row in round1 for p in row):
            raise CollectiveMismatchError("a Sketched-SGD round-1 payload must hold exactly one section (the table)")
        tables: dict[int, torch.Tensor] = {}
        self._reduce_entries(
            [("round1", j, lambda i, j=j: round1[i][j].sections[0]) for j in range(len(keys))],
            step, bucket, clock, {"round1": tables},
        )
        t0 = clock.start()
        cands, ks = [], []
        for j, key in enumerate(keys):
            summed = ssgd.with_sections(round1[0][j], [tables[j]])
            k = sk[0][j].k_for(grads[0][j].numel())
            ks.append(k)
            cands.append(ssgd.select_candidates(summed, sk[0][j].P * k))
        values = [[sk[i][j].worker.round2(cands[j], key=keys[j]) for j in range(len(keys))] for i in range(n_local)]
        clock.stop(t0, "encode")
        sums: dict[int, torch.Tensor] = {}
        self._reduce_entries(
            [("round2", j, lambda i, j=j: values[i][j].sections[0]) for j in range(len(keys))],
            step, bucket, clock, {"round2": sums},
        )
        t0 = clock.start()
        out = []
        for j, key in enumerate(keys):
            idx, vals = ssgd.select_topk(sums[j], cands[j], ks[j])
            for i in range(n_local):
                sk[i][j].worker.apply(idx, key=key)
            g = grads[0][j]
            update = torch.zeros(g.numel(), dtype=vals.dtype, device=g.device)
            update[idx.to(g.device)] = vals.to(g.device)
            out.append((update / self.world_size).reshape(g.shape).to(g.dtype))
        clock.stop(t0, "decode")
        return out

    # -- parameter server (simulated topology) ----------------------------------------------------

    def parameter_server(
        self,
        grads: Sequence[Sequence[torch.Tensor]],
        keys: Sequence[str],
        *,
        step: int,
        bucket: int = -1,
        pull: WorkerCodecs | None = None,
    ) -> list[torch.Tensor]:
        """Push payloads to one server that decodes, averages and sends the average back.

        Linear codecs: the server sums the payloads (:meth:`Codec.combine`, in rank order) and
        decodes the sum; the others: it decodes each payload and sums in rank order; both divided
        by ``W``. The pull is the average as fp32 bytes, or, with ``pull`` (the server's own
        codecs, e.g. 3LC with error feedback as in 3LC's design), re-encoded and decoded by every
        worker. Traffic: one ``push`` per worker (its serialized payloads) and one ``pull`` per
        worker (what the server sends it). Needs every worker local (the simulator).
        """
        if len(self.collective.local_ranks) != self.world_size:
            raise UnsupportedTopologyError("the parameter-server topology is simulated in one process only")
        n_local = len(self.workers)
        device = grads[0][0].device
        for i in range(n_local):
            self.traffic.raw(step, i, sum(g.numel() * g.element_size() for g in grads[i]), sum(g.numel() for g in grads[i]), bucket=bucket)
        clock = _Clock(device, n_local)
        for j, key in enumerate(keys):
            if protocol_of(self.workers[0].codec_for(key)) not in ("all_reduce", "all_gather"):
                raise UnsupportedTopologyError(f"{protocol_of(self.workers[0].codec_for(key))} runs its own collectives, not a parameter server")
        payloads = self._encode_all(grads, keys, clock)
        self._record(step, bucket, "push", [("payload", [sum(p.nbytes for p in row) for row in payloads], None)])
        t0 = clock.start()
        avg = []
        for j, key in enumerate(keys):
            codec = self.workers[0].codec_for(key)
            column = [payloads[i][j] for i in range(n_local)]
            if inner_codec(codec).linear:
                total = self._to_grad(codec.decode(inner_codec(codec).combine(column), device=device), grads[0][j])
            else:
                total = None
                for p in column:
                    dec = self._to_grad(codec.decode(p, device=device), grads[0][j])
                    total = dec if total is None else total + dec
            avg.append(total / self.world_size)
        server_s = time.perf_counter() - t0
        if pull is None:
            self._record(step, bucket, "pull", [("payload", [sum(a.numel() * a.element_size() for a in avg)] * n_local, None)])
            out = avg
        else:
            t1 = time.perf_counter()
            pulled = []
            for a, key in zip(avg, keys):
                codec = pull.codec_for(key)
                pulled.append(codec.encode(a, key=key, generator=pull.generator_for(key, device, codec)))
            server_s += time.perf_counter() - t1
            self._record(step, bucket, "pull", [("payload", [sum(p.nbytes for p in pulled)] * n_local, None)])
            t2 = clock.start()
            out = [self._to_grad(pull.codec_for(k).decode(p, device=device), g) for p, k, g in zip(pulled, keys, grads[0])]
            clock.stop(t2, "decode")
        for i in range(n_local):
            for phase, s in clock.seconds[i].items():
                self.traffic.time(step, i, phase, s)
        # the server's decode/average/re-encode time is its own (worker -1)
        self.traffic.time(step, -1, "decode", server_s)
        return out
