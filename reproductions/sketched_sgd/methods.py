"""The methods the paper compares, on gcbench's aggregation path, and the calibration of sketch sizes.

Every method runs W workers through :class:`gcbench.envs.simulated.SimulatedCluster` (the code the
DDP hook runs, see :mod:`gcbench.envs.aggregator`) on a :class:`~.models.FlatParams` model (one
tensor of ``d`` elements), and every byte is counted by the cluster's :class:`TrafficLog`:

``vanilla``
    ``identity`` codec: the gradients are all_reduced as they are (fp32).
``true_topk``
    The paper's "Top-k SGD" (slides, "Empirical Results": "Top-100,000 SGD") as the authors' code
    runs it: the top-k of the *summed* gradient with Sketched-SGD's accumulation
    (:class:`~gcbench.compressors.methods.sketched_sgd.AccumulatedTopK`: momentum inside, ``u <- rho u + g``,
    ``v += u``, ``u`` and ``v`` zeroed at the ``k`` applied coordinates; the optimizer applies no
    momentum to them). Gradients are all_reduced in full (``identity``: it compresses nothing, it
    is a quality reference).
``sketched``
    Sketched-SGD (Algorithm 2) as the ``sketched-sgd`` aggregation family runs it: round 1
    all_reduces every worker's Count Sketch of its accumulated gradient, every worker unsketches
    the same ``P k`` candidates, round 2 all_reduces their exact values, the top ``k`` of the exact
    sums is applied and zeroed in every worker's accumulator.
``local_topk``
    Each worker sends its own top-k with error feedback (``topk`` + ``ErrorFeedback`` per worker)
    to a parameter server, which sums them and sends the sum back (Sketched-SGD's CIFAR comparison).

Sketch sizes follow the paper's rule (§5.3, :func:`gcbench.compressors.methods.sizing.paper_sizing`):
``ratio`` is the paper's count ``2 d / (|S| + P k + k)`` with ``|S| ~ P k``, taken over the
*compressed* parameters only; ``P`` and the columns are derived from it (:meth:`MethodConfig.size_for`).
With ``k = d // d_per_k`` this gives, for any compressed size above a small threshold, the geometry the
rule gives at the paper's d and k (5 rows; the source prints no P or column count): for the transformer
(``d_per_k`` = 90M / 100,000 = 900), ``P = 44`` and ``columns / k = 9.0`` at 20x, ``P = 22`` and ``4.4``
at 40x, for ``d`` above ~82,000; for the LSTM (``d_per_k`` = 700), ``P = 34`` and ``7.0`` at 20x, ``P = 17``
and ``3.4`` at 40x, for ``d`` above ~49,000. Smaller tensors round ``k`` down by more and get a larger
``P`` (the micro scale's transformer: 46-47 / 23). The uncompressed 1-D parameters are sent beside the sketch, outside its
budget; :func:`overall_compression` is the paper's count with them included. :func:`calibrate_columns` (sizing from measured
upload bytes at a fixed ``P``) is kept for comparison.

Biases (``dense_1d``, off by default; the translation methods turn it on for ``true_topk`` and
``sketched`` through the workload's ``uncompressed_biases``, :meth:`.settings.SketchedSGDSettings.method`):
the 1-D parameters travel uncompressed (``identity`` all_reduce) beside the compressed tensor, with the
optimizer's momentum (the authors' code: ``v`` zeroed, ``u`` kept, which is heavy-ball momentum), as §5.1
describes. The image runs (the CIFAR-10 sweep, the accuracy runs and the real-DDP check) leave it off and
compress every parameter, the SmallResNet's GroupNorm gains and biases and the classifier's bias included.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from gcbench.compressors import families, get
from gcbench.compressors.errors import StateError
from gcbench.compressors.methods.sizing import SketchSizing, paper_sizing
from gcbench.compressors.methods.sketched_sgd import AccumulatedTopK, select_candidates, select_topk
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.simulated import SimulatedCluster
from gcbench.envs.traffic import TrafficLog
from gcbench.envs.workers import CodecSpec, WorkerCodecs

from .sketchcheck import estimate_misses, hash_statistics, sketch_code_blocks

KINDS = ("vanilla", "true_topk", "sketched", "local_topk")


def k_for(d: int, fraction: float) -> int:
    """``k = ceil(fraction * d)``, at least 1 (the sketched family's rule, used for every method)."""
    return max(1, min(d, math.ceil(fraction * d)))


def codec_ratio(k: int, d: int) -> float:
    """The ``sketched-sgd`` family's ``ratio`` whose ``ceil(ratio * d)`` is exactly ``k``.

    ``(k - 1/2) / d``: half a coordinate below ``k``, so float rounding of ``ratio * d`` cannot
    cross an integer either way (``k / d`` can: ``(k / d) * d`` may round to just above ``k``).
    """
    if not 1 <= int(k) <= int(d):
        raise ValueError(f"need 1 <= k <= d, got k={k}, d={d}")
    ratio = (int(k) - 0.5) / int(d)
    assert k_for(int(d), ratio) == int(k)
    return ratio


def overall_compression(sizing: SketchSizing, dense: int) -> float:
    """The paper's count of the overall ratio when ``dense`` floats travel uncompressed each way beside a sketch
    sized on the compressed parameters alone: ``2 (d + dense) / (|S| + P k + k + 2 dense)``
    (vanilla's upload and download of every parameter over Sketched-SGD's, the paper's count)."""
    s = sizing
    return 2.0 * (s.d + int(dense)) / (s.sketch_size + s.P * s.k + s.k + 2 * int(dense))


@dataclass
class MethodConfig:
    """One method of a run (JSON-able through :meth:`as_config`).

    Attributes:
        name: label in reports (``vanilla``, ``topk``, ``sketched20``...).
        kind: one of :data:`KINDS`.
        k_fraction: coordinates applied per step as a fraction of ``d`` (top-k and sketched), when
            ``d_per_k`` is 0.
        d_per_k: when > 0, ``k = d // d_per_k`` exactly (the paper's parameters per applied
            coordinate: 90M / 100,000 = 900 for the transformer), for top-k and sketched.
        P: Sketched-SGD's candidates factor (round 2 fetches ``P k`` exact values).
        rows: Count Sketch rows.
        columns: Count Sketch columns (0 = not calibrated yet).
        ratio: the target compression (the §5.3 count on the compressed tensor ``d``) that
            :meth:`size_for` sizes ``P`` and the columns for.
        seed: hash seed of the sketch.
        dense_1d: send the 1-D parameters (biases, norm gains) uncompressed (``true_topk`` and
            ``sketched``; needs a :class:`~.models.FlatParams` built with ``dense_1d``). Off by
            default: the translation methods set it, the image methods do not.
    """

    name: str
    kind: str
    k_fraction: float = 0.0
    P: int = 2
    rows: int = 5
    columns: int = 0
    ratio: float = 0.0
    seed: int = 0
    dense_1d: bool = False
    d_per_k: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown method kind {self.kind!r}; known: {', '.join(KINDS)}")

    def as_config(self) -> dict[str, Any]:
        """JSON-able description (cell configs, W&B)."""
        return {"name": self.name, "kind": self.kind, "k_fraction": self.k_fraction, "P": self.P, "rows": self.rows,
                "columns": self.columns, "ratio": self.ratio, "seed": self.seed, "dense_1d": self.dense_1d,
                **({"d_per_k": self.d_per_k} if self.d_per_k else {}), **self.extra}

    @classmethod
    def from_config(cls, c: Mapping[str, Any]) -> MethodConfig:
        """Inverse of :meth:`as_config`."""
        known = {"name", "kind", "k_fraction", "P", "rows", "columns", "ratio", "seed", "dense_1d", "d_per_k"}
        return cls(**{k: c[k] for k in known if k in c}, extra={k: v for k, v in c.items() if k not in known})

    def k(self, d: int) -> int:
        """Coordinates applied per step for a compressed tensor of ``d`` elements."""
        return max(1, min(int(d), int(d) // self.d_per_k)) if self.d_per_k > 0 else k_for(int(d), self.k_fraction)

    def sketched_params(self, momentum: float = 0.0, d: int | None = None) -> dict[str, Any]:
        """Parameters of the ``sketched-sgd`` aggregation family (``momentum``: inside its error
        accumulation, as the authors' code) for a compressed tensor of ``d`` elements (needed with
        ``d_per_k``)."""
        if self.d_per_k > 0 and d is None:
            raise ValueError(f"{self.name}: k = d // {self.d_per_k} needs the tensor's size d")
        ratio = codec_ratio(self.k(d), d) if self.d_per_k > 0 and d is not None else float(self.k_fraction)
        return {"ratio": ratio, "P": int(self.P), "rows": int(self.rows), "columns": int(self.columns),
                "seed": int(self.seed), "momentum": float(momentum)}

    def optimizer_momentum(self, momentum: float) -> float:
        """The momentum the optimizer applies to the compressed tensor: none for Sketched-SGD and the
        authors' top-k, which apply it inside the error accumulation; ``momentum`` otherwise."""
        return 0.0 if self.kind in ("sketched", "true_topk") else float(momentum)

    def size_for(self, d: int) -> SketchSizing | None:
        """Set ``P`` and ``columns`` by the paper's rule for a compressed tensor of ``d`` elements
        (``ratio`` = the paper's count over the compressed parameters; uncompressed 1-D parameters
        are outside the sketch's budget, see :func:`overall_compression`); None for other kinds."""
        if self.kind != "sketched":
            return None
        sz = paper_sizing(d, self.k(d), self.ratio, self.rows, 0)
        self.P, self.columns = sz.P, sz.columns
        return sz


def _codec_or_dense(family: str = "sketched-sgd", **params: Any) -> Any:
    """CodecSpec factory: ``family``'s codec, or the uncompressed ``identity`` for the dense tensor."""
    if family == "identity":
        return get("identity")
    return families.build(family, **params)


class MethodRun:
    """A method bound to a model and a worker count: the cluster and any post-aggregation step.

    Usage per step: ``run.backward(closure)`` (every worker's gradient, aggregated into
    ``model.flat.grad``), then the optimizer's (:meth:`optimizer`) ``step()``.
    """

    def __init__(self, method: MethodConfig, model: torch.nn.Module, workers: int, *, threads: int | None = 1,
                 momentum: float = 0.0, measure: bool = True) -> None:
        self.method = method
        #: Sketched-SGD: take the per-step measurements below (:meth:`topk_recovery`, :meth:`other_hash_recovery`);
        #: off where a run records none of them. Nothing of them reaches training.
        self.measure = measure
        #: seconds spent in those measurements (not training: a run's training time leaves them out)
        self.measure_s = 0.0
        self.traffic = TrafficLog()
        self.workers = workers
        self.accumulated_topk: AccumulatedTopK | None = None
        #: Sketched-SGD: per step, the share of the true top-k's mass the update applied (:meth:`topk_recovery`)
        self.recovery: list[float] = []
        #: ... and the share lines 8-9 would apply with a sketch whose hashes the run does not use (:meth:`other_hash_recovery`)
        self.recovery_other_hash: list[float] = []
        #: ... and the share of that sketch's estimates of the accumulation beyond the Count Sketch's error width (:func:`.sketchcheck.error_share`)
        self.error_share_other_hash: list[float] = []
        #: ... and, among the accumulation's large coordinates (beyond that width), how many it estimates beyond it:
        #: ``[beyond, large]`` per step (:func:`.sketchcheck.large_errors`; None for a diverged accumulation)
        self.large_errors_other_hash: list[list[int] | None] = []
        #: ... and how far the hashes of the run's sketch (``run``) and of that one (``measuring``) lie from the
        #: properties that bound assumes (:func:`.sketchcheck.hash_statistics`)
        self.hash_statistics: dict[str, dict[str, float]] | None = None
        self._acc_sum: torch.Tensor | None = None
        self._before: tuple[torch.Tensor, float] | None = None  # this step's sum_i v_i and its true top-k's mass
        self._other_codec: Any = None
        kind = method.kind
        flat = getattr(model, "flat", None)
        d = flat.numel() if flat is not None else sum(p.numel() for p in model.parameters())
        if getattr(model, "dense", None) is not None and kind not in ("vanilla", "true_topk", "sketched"):
            raise ValueError(f"{method.name}: a model with a separate dense tensor runs vanilla, true_topk or sketched only")
        if kind in ("vanilla", "true_topk"):
            self.cluster = SimulatedCluster(model, workers, "identity", traffic=self.traffic, threads=threads)
            if kind == "true_topk":
                self.accumulated_topk = AccumulatedTopK(method.k(d), momentum)
        elif kind == "sketched":
            if method.columns < 1:
                raise ValueError(f"{method.name}: the sketch is not sized (columns = 0)")
            spec = CodecSpec(factory=_codec_or_dense, params=method.sketched_params(momentum, d),
                             layer_params={"dense": {"family": "identity"}})
            self.cluster = SimulatedCluster(model, workers, spec, traffic=self.traffic, threads=threads)
        else:  # local_topk: each worker's top-k with error feedback, pushed to a parameter server
            self.cluster = SimulatedCluster(model, workers, "topk", {"ratio": method.k(d) / d},
                                            error_feedback=True, topology="parameter_server", traffic=self.traffic,
                                            threads=threads)
        self.model = model

    def optimizer(self, lr: float, momentum: float) -> torch.optim.SGD:
        """SGD for the model: the compressed tensor with :meth:`MethodConfig.optimizer_momentum`, the
        dense (uncompressed 1-D) tensor with ``momentum`` (heavy-ball, as the authors keep ``u``)."""
        dense = getattr(self.model, "dense", None)
        main = [p for n, p in self.model.named_parameters() if n != "dense"]
        groups: list[dict[str, Any]] = [{"params": main, "momentum": self.method.optimizer_momentum(momentum)}]
        if dense is not None:
            groups.append({"params": [dense], "momentum": float(momentum)})
        return torch.optim.SGD(groups, lr=lr)

    def backward(self, closure: Any) -> list[float]:
        """Run one step's gradients through the method; the update lands in the parameters' ``.grad``."""
        losses = self.cluster.backward(closure)
        self._acc_sum = None
        if self.accumulated_topk is not None:
            p = self.model.flat if hasattr(self.model, "flat") else next(self.model.parameters())
            p.grad = self.accumulated_topk.step(p.grad).to(p.dtype)
        if self.method.kind == "sketched" and self.measure:
            dev = self.model.flat.device
            if dev.type == "cuda":  # the step's queued kernels are training's, not the measurements'
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            self.recovery.append(self.topk_recovery())
            self.recovery_other_hash.append(self.other_hash_recovery())
            self.measure_s += time.perf_counter() - t0
        return losses

    def _sketched_sum(self) -> torch.Tensor | None:
        """``sum_i v_i`` (float64) over the workers' Sketched-SGD accumulators, None before a step."""
        total: torch.Tensor | None = None
        for w in self.cluster.workers:
            try:
                v = w.codec_for("flat").worker.accumulated("flat")
            except StateError:  # no step yet
                return None
            total = v.clone().reshape(-1).double() if total is None else total + v.reshape(-1).double()
        return total

    def topk_recovery(self) -> float:
        """The share of the true top-k's squared mass that this step's Sketched-SGD update applied.

        The summed accumulation the step selected from is rebuilt exactly from what it left behind:
        every worker zeroes its ``v`` at the applied coordinates, where the update holds their sum,
        so ``sum_i v_i (before) = sum_i v_i (after) + W * update``. With ``T`` the ``k`` coordinates
        of largest ``|sum_i v_i (before)|`` and ``A`` the applied ones, the recovery is
        ``||before[A]||^2 / ||before[T]||^2`` (1 when the sketch found the true top-k; the paper's
        premise: the sketch and its ``P k`` candidates find the heavy coordinates, §3-4).
        """
        after = self._sketched_sum()
        self._acc_sum = after
        self._before = None
        flat = self.model.flat
        if after is None or flat.grad is None:
            return float("nan")
        update = flat.grad.detach().reshape(-1).double() * self.workers
        before = after + update
        k = self.method.k(flat.numel())
        true_mass = float(torch.topk(before.abs(), k, sorted=False).values.square().sum())
        self._before = (before, true_mass)
        applied = update != 0
        got = float(before[applied].square().sum())
        return got / true_mass if true_mass > 0 else 1.0

    def other_hash_recovery(self) -> float:
        """:meth:`topk_recovery`'s share for the same summed accumulation, selected by a copy of the run's
        own Count Sketch codec (its rows and columns as built) whose hashes the run does not use (its hash
        seed + 1): Algorithm 2's lines 8-9 on it (the ``P k`` largest squared estimates, then the ``k``
        largest exact values among them).

        The run keeps one sketch's hashes for all its steps, so the coordinates it leaves in the
        accumulation are those its own hashes underestimate; a sketch independent of the run sees them
        as any Count Sketch of that size would. A share here well above :meth:`topk_recovery`'s says the
        accumulation has grown where the run's hashes do not look. Measured only: nothing of it reaches
        training. Call after :meth:`topk_recovery` of the same step (NaN before the first step).

        The same sketch's estimates of the whole accumulation are judged too: the share of coordinates
        they miss by more than the Count Sketch's definition allows (:func:`.sketchcheck.error_share`
        at the columns the paper's rule configured, so a run whose codec was built narrower shows),
        appended to :attr:`error_share_other_hash` (nothing before the first step), and the same among the
        coordinates larger than that width (:func:`.sketchcheck.large_errors`, :attr:`large_errors_other_hash`). At the first step the
        hashes of both sketches, the run's and the measuring one, are checked against the properties that
        bound assumes, on the hash tables they accumulate with (:func:`.sketchcheck.hash_statistics`, held in
        :attr:`hash_statistics`).
        """
        if self._before is None:
            return float("nan")
        before, true_mass = self._before
        m = self.method
        if self._other_codec is None:  # the run's own codec (its rows, columns and class), another hash seed
            own = self.cluster.workers[0].codec_for("flat").worker.codec
            self._other_codec = dataclasses.replace(own, seed=int(own.seed) + 1)
            n, dev = before.numel(), before.device  # the hashes of both, fixed for the whole run, checked once
            self.hash_statistics = {
                name: hash_statistics(sketch_code_blocks(codec.new_sketch(n, device=dev)), codec.columns_for(n))
                for name, codec in (("run", own), ("measuring", self._other_codec))}
        codec = self._other_codec
        k = m.k(before.numel())
        sketch = codec.sketch_of(codec.encode(before.float()))
        share, large = estimate_misses(sketch.estimate(), before, int(m.columns))
        self.error_share_other_hash.append(share)
        self.large_errors_other_hash.append(None if large is None else list(large))
        cand = select_candidates(sketch, min(before.numel(), m.P * k))
        _, vals = select_topk(before[cand.to(before.device)], cand, k)
        return float(vals.square().sum()) / true_mass if true_mass > 0 else 1.0

    def accumulator_norm(self) -> float | None:
        """``||sum_i v_i|| / W``: the norm of the error accumulation behind the last update (the
        workers' mean), for the error-accumulating methods; None for vanilla. Sketched-SGD's
        health metric (a bounded accumulator trains, a growing one diverges)."""
        kind = self.method.kind
        if kind == "true_topk":
            return self.accumulated_topk.accumulator_norm() if self.accumulated_topk is not None else None
        if kind == "vanilla":
            return None
        if kind == "sketched":
            total = self._acc_sum if self._acc_sum is not None else self._sketched_sum()
            return 0.0 if total is None else float(total.norm()) / self.workers
        total = None
        for w in self.cluster.workers:
            codec = w.codec_for("flat")
            v = codec.memory.get("flat") if hasattr(codec, "memory") else None
            if v is None:
                return 0.0
            total = v.clone().reshape(-1).double() if total is None else total + v.reshape(-1).double()
        return float(total.norm()) / self.workers if total is not None else None

    def state_dict(self) -> dict[str, Any]:
        """Cluster (per-worker codec state) and the true top-k's accumulator."""
        return {"cluster": self.cluster.state_dict(), "acc": self.accumulated_topk.state_dict() if self.accumulated_topk is not None else None}


# ---------------------------------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------------------------------


def measured_step_bytes(d: int, spec: CodecSpec, *, steps: int = 2, seed: int = 0) -> int:
    """Message bytes one worker sends in the last of ``steps`` aggregations of a ``d``-element
    gradient (one worker; later steps exclude first-step extras such as the shared-section check)."""
    traffic = TrafficLog()
    agg = Aggregator([WorkerCodecs(spec, rank=0)], LocalCollective(1), traffic)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        g = torch.randn(d, generator=gen)
        agg.aggregate([[g]], ["flat"], step=step)
    return traffic.message_bytes(step=steps - 1)


def calibrate_columns(d: int, ratio: float, *, k_fraction: float, P: int, rows: int, seed: int = 0) -> dict[str, Any]:
    """The largest number of sketch columns whose measured bytes per step (round 1 + round 2) are at
    most vanilla's measured bytes / ``ratio``.

    Bytes are affine in the columns (``r c`` table floats + ``P k`` values), so two measurements
    give the line; the candidate it predicts is then checked (and moved by one column at a time)
    against fresh measurements until it is the largest that fits.

    Returns:
        ``{"columns", "bytes", "vanilla_bytes", "ratio" (measured), "target_ratio", "k", "P", "rows"}``.

    Raises:
        ValueError: no number of columns reaches ``ratio`` (round 2 alone is too big).
    """
    vanilla = measured_step_bytes(d, CodecSpec(name="identity"))
    budget = vanilla / float(ratio)
    base = {"ratio": float(k_fraction), "P": int(P), "rows": int(rows), "seed": int(seed)}

    def measure(c: int) -> int:
        return measured_step_bytes(d, CodecSpec(name="sketched-sgd", params={**base, "columns": int(c)}))

    b1, b2 = measure(1), measure(101)
    slope = (b2 - b1) / 100.0
    if b1 > budget:
        raise ValueError(f"ratio {ratio}: even one column sends {b1} bytes against a budget of {budget:.0f} "
                         f"(vanilla {vanilla}); lower k_fraction or P")
    c = max(1, int((budget - b1) // slope) + 1)
    b = measure(c)
    while b > budget and c > 1:
        c -= 1
        b = measure(c)
    while True:
        nb = measure(c + 1)
        if nb > budget:
            break
        c, b = c + 1, nb
    k = k_for(d, k_fraction)
    return {"columns": c, "bytes": b, "vanilla_bytes": vanilla, "ratio": vanilla / b, "target_ratio": float(ratio),
            "k": k, "P": int(P), "rows": int(rows), "d": d}
