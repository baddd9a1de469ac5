"""One training run of the 3LC reproduction: ``W`` simulated workers and a parameter server.

Each run trains a CIFAR-style ResNet (:mod:`.model`) with momentum SGD on image data
(:mod:`gcbench.data.images`) through gcbench's execution layer:

* every-step methods (uncompressed, 3LC, the quantization and sparsification comparators): the
  usual parameter-server design, where the *server* holds the model and the optimizer (3LC's
  design notes do not say what 3LC's pull carries; this is our reading, stated in the report). Each worker computes its gradient on its own mini-batch at its replica and pushes the
  encoded payloads (:class:`gcbench.envs.simulated.SimulatedCluster`, ``topology=
  "parameter_server"``); the server decodes and averages them, takes a momentum-SGD step
  (:class:`_Server`, the simulator's ``server_step``), and sends every worker the *model change*,
  encoded by the method's codec with the server's own error-feedback memory where the method uses
  error feedback (the simulator's ``pull_codec``); each worker adds the decoded change to its replica. Both directions are
  compressed, as 3LC does. Uncompressed, the pull is the fp32 change and the replica equals the
  server's model. The server never runs a forward pass: at each evaluation it fetches a worker's
  batch-norm running statistics (every buffer, in its own dtype), a push counted as traffic (kind
  ``stats``) in every method's bytes and in the fp32 baseline. Accuracy is the server's model's.
* ``local_steps = H > 1`` ("2 local steps"): local SGD. Every worker keeps its own replica and
  optimizer and takes ``H`` SGD steps on its own batches; then it pushes its model change
  (fp32, :class:`gcbench.envs.aggregator.Aggregator` over a local collective, same traffic
  accounting), the server averages the changes and every worker pulls the new global model.
  Batch-norm running statistics are averaged across replicas at each synchronisation: every worker
  pushes its statistics and pulls the average, counted as traffic (kind ``stats``).

Traffic comes from the :class:`gcbench.envs.traffic.TrafficLog` the aggregation writes: the framed
messages (:mod:`gcbench.envs.framing`: header once per sender, receiver and tensor, then references)
pushed to the server and pulled by each of the ``W`` workers, their real lengths. For 3LC,
:class:`StageRecordingEF` (the registry's error feedback around
:class:`gcbench.compressors.codecs.threelc.codec.ThreeLC`, plus bookkeeping) adds the per-stage sizes of
every payload actually sent: 32-bit (``4 n``), 2-bit packing (``ceil(n/4)``), quartic
(``ceil(n/5)``), zero-run (the payload's data section) and the payload's self-describing size
(``Payload.to_bytes()``), next to the framed bytes per step. On sampled steps (``stage_check_every``)
the same error-corrected tensors (rebuilt exactly from each encode's new residual and decoded
payload, :meth:`StageRecordingEF.encoded_input`) are re-encoded stage by stage with the real encoders
(:func:`gcbench.compressors.codecs.threelc.codec.stage_sizes`: ``pack_bits``, ``quartic_encode``,
``zero_run_encode``, a fresh ``ThreeLC`` payload), and any difference from the bookkeeping is recorded
as a mismatch (there should be none). Serializing and checking run *after* the step's timing
(:meth:`StageSink.verify`): the timed encode does the codec's work only.

Times: *measured* on this machine per step = the slowest worker's forward/backward + encode, the
server's decode + average, optimizer step and encode of the model change, and the slowest worker's
decode (framing in no encode, each receiver's unframing in its decode:
:mod:`gcbench.envs.protocols.parameter_server`; local SGD: each worker's own optimizer steps, and the synchronisation); *modelled*
communication = the modelled time of each recorded push and pull under a profile (``α + Σ bytes / β``
per phase through the server's link), both by :func:`gcbench.envs.network.log_step_times`.
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from gcbench.compressors import Payload
from gcbench.compressors.error_feedback import ErrorFeedback
from gcbench.compressors.errors import StateError
from gcbench.compressors.codecs.threelc.codec import ThreeLC, quantize_3value, stage_sizes
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.network import Profile, load_profile, log_step_times
from gcbench.envs.simulated import SimulatedCluster
from gcbench.envs.traffic import TrafficLog
from gcbench.envs.workers import CodecSpec, WorkerCodecs

from .model import build_resnet, with_batch_statistics

PULL_MODES = ("same", "fp32")


@dataclass(frozen=True)
class MethodSpec:
    """One column of the evaluation: a codec in both directions, or local steps.

    Attributes:
        name: cell name part (``3lc-s1.00``, ``32bit``, ``topk-5``...).
        label: display name (``3LC s=1.00``, ``32-bit float``...).
        codec: registry name (``gcbench.compressors.get``).
        params: codec parameters.
        error_feedback: wrap the codec in error feedback (for entries that do not already).
        pull: ``"same"`` (the server re-encodes the average with the same codec) or ``"fp32"``.
        local_steps: ``H``: communicate every ``H``-th step (local SGD); 1 = every step.
        kind: ``"baseline"``, ``"3lc"`` or ``"comparator"`` (report grouping).
        note: what the paper's comparator is and how this one relates to it.
    """

    name: str
    label: str
    codec: str
    params: Mapping[str, Any] = field(default_factory=dict)
    error_feedback: bool = False
    pull: str = "same"
    local_steps: int = 1
    kind: str = "comparator"
    note: str = ""

    def __post_init__(self) -> None:
        if self.pull not in PULL_MODES:
            raise ValueError(f"method {self.name}: pull must be one of {PULL_MODES}, got {self.pull!r}")
        if not isinstance(self.local_steps, int) or self.local_steps < 1:
            raise ValueError(f"method {self.name}: local_steps must be an int >= 1, got {self.local_steps!r}")
        if self.local_steps > 1 and self.codec != "identity":
            raise ValueError(f"method {self.name}: local steps are modelled with uncompressed (identity) traffic only")

    @classmethod
    def from_mapping(cls, name: str, m: Mapping[str, Any]) -> MethodSpec:
        """From a spec's ``[workload.methods.<name>]`` table."""
        known = {"label", "codec", "params", "error_feedback", "pull", "local_steps", "kind", "note"}
        unknown = set(m) - known
        if unknown:
            raise ValueError(f"method {name}: unknown field(s) {sorted(unknown)}")
        return cls(name=name, label=str(m.get("label", name)), codec=str(m["codec"]), params=dict(m.get("params", {})),
                   error_feedback=bool(m.get("error_feedback", False)), pull=str(m.get("pull", "same")),
                   local_steps=int(m.get("local_steps", 1)), kind=str(m.get("kind", "comparator")), note=str(m.get("note", "")))

    def as_config(self) -> dict[str, Any]:
        """JSON-ready (part of a cell's config)."""
        d = asdict(self)
        d["params"] = dict(self.params)
        return d

    @property
    def is_3lc(self) -> bool:
        return self.codec == "3lc"


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on besides the data and the method."""

    depth: int = 8
    width: int = 8
    workers: int = 4
    batch_per_worker: int = 32
    steps: int = 100
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    warmup_steps: int = 0
    schedule: str = "cosine"  # "cosine" | "step" (x0.1 at 50% and 75% of the steps, He et al.) | "constant"
    eval_every: int = 10
    seed: int = 0
    stage_check_every: int = 25
    profiles: tuple[str, ...] = ("threelc-1gbps", "threelc-10gbps")
    horizon: int | None = None  # the schedule's length in steps (None: ``steps``); a run may stop before its end

    def __post_init__(self) -> None:
        if self.schedule not in ("cosine", "step", "constant"):
            raise ValueError(f"schedule must be cosine, step or constant, got {self.schedule!r}")
        for f in ("workers", "batch_per_worker", "steps", "eval_every", "stage_check_every"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if self.horizon is not None and int(self.horizon) < self.steps:
            raise ValueError(f"horizon ({self.horizon}) must be >= steps ({self.steps}): a run stops at or before its schedule's end")

    @property
    def schedule_steps(self) -> int:
        """The length of the learning-rate schedule (``horizon``, else ``steps``)."""
        return int(self.horizon) if self.horizon is not None else self.steps

    def lr_at(self, step: int) -> float:
        """The learning rate of ``step`` (0-based): linear warm-up, then the schedule."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        if self.schedule == "step":
            f = step / self.schedule_steps
            return self.lr * (0.01 if f >= 0.75 else 0.1 if f >= 0.5 else 1.0)
        span = max(self.schedule_steps - self.warmup_steps, 1)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * (step - self.warmup_steps) / span))


@dataclass
class PreparedData:
    """Float images ready for training (normalised, resized) and the test subset evaluated."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    summary: dict[str, Any]
    augment: bool = False  # random crop (4-pixel zero padding) + horizontal flip, He et al. §4.2

    @property
    def in_channels(self) -> int:
        return int(self.x_train.shape[1])


def augment_batch(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """He et al.'s CIFAR augmentation, vectorised: zero-pad by ``pad``, crop a random ``H x W``
    window per image, flip half of the images horizontally."""
    b, _, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    cols = ox[:, None] + torch.arange(w)[None, :]
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    rows = oy[:, None] + torch.arange(h)[None, :]
    bi = torch.arange(b)[:, None, None]
    out = xp.permute(0, 2, 3, 1)[bi, rows[:, :, None], cols[:, None, :]]  # (b, h, w, c)
    return out.permute(0, 3, 1, 2).contiguous()


# --- per-stage bookkeeping of 3LC payloads -----------------------------------------------------------


@dataclass
class StageSink:
    """Per-stage byte totals of every 3LC payload one side (workers' pushes or the server's pulls) sent.

    The recorder (:class:`StageRecordingEF`) reports from inside the timed encode only what the encode
    already knows (sizes of its sections); whatever costs work (each payload's serialized size, the
    checks) waits for :meth:`verify`, which the training loop calls after the step's timing.
    ``check_now`` (set by the loop on sampled steps) makes the recorder note how to rebuild each
    payload's error-corrected input; :meth:`verify` rebuilds those inputs and re-encodes them with the
    real stage encoders.
    """

    sparsity: float
    copies: int = 1  # how many receivers get each payload: 1 for a push, W for the server's pull
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    check_now: bool = False
    #: this step's payloads until :meth:`verify`: (their serialized size, the zero-run data bytes,
    #: the encoded input on a checked step)
    pending: list[tuple[Callable[[], int], int, Callable[[], torch.Tensor] | None]] = field(default_factory=list)
    checks: int = 0
    mismatches: list[str] = field(default_factory=list)
    zeros_checked: int = 0
    values_checked: int = 0
    # self-describing bytes (Payload.to_bytes(), one per receiver) per step; the framed bytes the
    # transport sent come from the TrafficLog (attach_framed)
    payload_per_step: list[int] = field(default_factory=list)
    framed_per_step: list[int] = field(default_factory=list)

    def attach_framed(self, per_step: Sequence[int]) -> None:
        """The bytes the transport sent for this side, per step (the TrafficLog's push or pull
        records: framed messages, :mod:`gcbench.envs.framing`, first full headers included)."""
        self.framed_per_step = [int(b) for b in per_step]

    def record(self, n: int, data_bytes: int, scale_bytes: int, payload_bytes: Callable[[], int],
               corrected: Callable[[], torch.Tensor] | None) -> None:
        """Add one payload: ``n`` values, its zero-run data section and its scale, counted now, and
        ``payload_bytes``, which returns its serialized size (``Payload.to_bytes()``'s length: the
        transport sends framed messages, so serializing the payload is bookkeeping that :meth:`verify`
        does). On a checked step ``corrected`` returns the tensor the payload quantized."""
        t = self.totals
        t["tensors"] += 1
        t["values"] += n
        t["fp32"] += 4 * n
        t["2bit"] += -(-n // 4)
        t["quartic"] += -(-n // 5)
        t["zero_run"] += data_bytes
        t["scale"] += scale_bytes
        self.pending.append((payload_bytes, data_bytes, corrected))

    def verify(self) -> None:
        """End of a step, after its timing: close the step's self-describing byte total; re-encode
        the checked payloads' inputs stage by stage with the real encoders and compare."""
        step = 0
        for size, data_bytes, corrected in self.pending:
            payload_bytes = size()
            self.totals["payload"] += payload_bytes
            step += payload_bytes * self.copies
            if corrected is None:
                continue
            x = corrected()
            n = x.numel()
            real = stage_sizes(x, self.sparsity)  # flattens: its "payload" has a 1-D header
            real["payload"] = ThreeLC(self.sparsity).encode(x).nbytes  # the tensor's own shape in the header
            expect = {"2bit": -(-n // 4), "quartic": -(-n // 5), "zero_run": data_bytes, "payload": payload_bytes}
            for k, v in expect.items():
                if real[k] != v:
                    self.mismatches.append(f"{k}: encoder {real[k]} B, bookkeeping {v} B (n={n})")
            trits, _ = quantize_3value(x, self.sparsity)
            self.zeros_checked += int((trits == 0).sum())
            self.values_checked += n
            self.checks += 1
        if step:
            self.payload_per_step.append(step)
        self.pending.clear()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready totals (bytes on the wire: each payload times its receivers), checks and the
        zero fraction seen on checked steps."""
        t = {k: v * self.copies for k, v in self.totals.items()}
        t["header"] = t.get("payload", 0) - t.get("zero_run", 0) - t.get("scale", 0)
        t["framed"] = sum(self.framed_per_step)  # the transport's messages, one per receiver
        return {"bytes": t, "framed_per_step": list(self.framed_per_step), "payload_per_step": list(self.payload_per_step),
                "copies": self.copies, "encoded_payloads": self.totals.get("tensors", 0), "checks": self.checks, "mismatches": self.mismatches[:20], "mismatch_count": len(self.mismatches),
                "zero_fraction": self.zeros_checked / self.values_checked if self.values_checked else None}


class StageRecordingEF(ErrorFeedback):
    """The registry's ``"3lc"`` (error feedback around :class:`ThreeLC`) that also tells a
    :class:`StageSink` what each payload it sends weighs, stage by stage. Encoding is unchanged, and
    the timed encode does no work for the bookkeeping: the sink receives ways to serialize the payload
    and, on a checked step, to rebuild the encoded input (:meth:`encoded_input`) after the step, not
    their results."""

    def __init__(self, codec: ThreeLC, sink: StageSink) -> None:
        super().__init__(codec)
        self.sink = sink

    def encode(self, tensor: torch.Tensor, *, key: str | None = None, generator: torch.Generator | None = None):
        payload = super().encode(tensor, key=key, generator=generator)
        scale, data = payload.sections
        corrected = None
        if self.sink.check_now:
            residual = self.residual("" if key is None else key)  # the buffer itself, not a copy
            corrected = lambda: self.encoded_input(residual, payload)  # noqa: E731
        self.sink.record(tensor.numel(), int(data.numel()), int(scale.numel() * scale.element_size()),
                         lambda: payload.nbytes, corrected)
        return payload

    def encoded_input(self, residual: torch.Tensor | None, payload: Payload) -> torch.Tensor:
        """The error-corrected tensor ``c = g + e`` that ``payload`` quantized, rebuilt from what its
        encode left: the new ``residual`` (the buffer the encode stored) plus the decoded payload.
        Valid until the key's next encode (the fused path updates the residual in place).

        Bit-exact for float32 and float64 inputs: where a value's trit is 0 the residual is the value
        itself (a -0 comes back +0, which quantizes the same); elsewhere ``M/2 < |c| <= max|c| <= M``
        with ``|decoded| = M`` (``M = max|c| * s`` rounded up or exact, ``s >= 1``), so ``c - decoded``
        is exact (Sterbenz) and adding ``decoded`` back gives ``c``.
        """
        if residual is None:
            raise StateError("no error-feedback residual: the payload's encode kept none")
        decoded = self.codec.decode(payload)
        if decoded.layout == torch.sparse_coo:
            decoded = decoded.to_dense()
        return residual + decoded.to(residual.dtype).reshape(residual.shape)


def codec_specs(method: MethodSpec, sinks: Mapping[str, StageSink] | None = None) -> tuple[CodecSpec, CodecSpec | None]:
    """``(push spec, pull spec or None for fp32)`` of an every-step method.

    3LC runs through :class:`StageRecordingEF` when ``sinks`` (``{"push": ..., "pull": ...}``) are given.
    """
    if method.is_3lc and sinks:
        def factory_for(sink: StageSink) -> Callable[..., Any]:
            def factory(**params: Any) -> StageRecordingEF:
                return StageRecordingEF(ThreeLC(**params), sink)
            factory.__name__ = "3lc"
            return factory

        push = CodecSpec(factory=factory_for(sinks["push"]), params=dict(method.params))
        pull = CodecSpec(factory=factory_for(sinks["pull"]), params=dict(method.params)) if method.pull == "same" else None
        return push, pull
    push = CodecSpec(name=method.codec, params=dict(method.params), error_feedback=method.error_feedback)
    pull = CodecSpec(name=method.codec, params=dict(method.params), error_feedback=method.error_feedback) if method.pull == "same" else None
    return push, pull


# --- data ----------------------------------------------------------------------------------------------


def batch_indices(step: int, worker: int, cfg: TrainConfig, n_train: int) -> torch.Tensor:
    """Worker ``worker``'s mini-batch at ``step``: its slice of the step's ``W * B`` samples of an
    epoch-wise permutation seeded by ``(seed, epoch)`` (the last partial global batch of an epoch is
    dropped). Depends only on ``(seed, step, worker)``: every method sees the same batches."""
    per_step = cfg.workers * cfg.batch_per_worker
    spe = n_train // per_step
    if spe < 1:
        raise ValueError(f"{n_train} training images are fewer than one global batch of {per_step}")
    epoch, k = divmod(step, spe)
    g = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)
    perm = torch.randperm(n_train, generator=g)
    start = k * per_step + worker * cfg.batch_per_worker
    return perm[start : start + cfg.batch_per_worker]


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on ``(x, y)`` in eval mode (running batch-norm statistics)."""
    was = model.training
    model.eval()
    loss = correct = 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            out = model(x[i : i + batch])
            loss += float(F.cross_entropy(out, y[i : i + batch], reduction="sum"))
            correct += float((out.argmax(1) == y[i : i + batch]).sum())
    model.train(was)
    return loss / x.shape[0], correct / x.shape[0]


# --- timing ---------------------------------------------------------------------------------------------


class _Server:
    """The server's step, run by the simulated parameter server between push and pull
    (``server_step``): apply the averaged gradient to the server's model with its optimizer and
    return the model change, which the pull sends to every worker - fp32, or encoded by the
    method's codec with the server's own error-feedback memory where the method has one
    (``pull_codec`` of :class:`~gcbench.envs.simulated.SimulatedCluster`)."""

    def __init__(self, server_model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        self.params = dict(server_model.named_parameters())
        self.opt = opt

    def __call__(self, avg: list[torch.Tensor], keys: Sequence[str]) -> list[torch.Tensor]:
        params = [self.params[k] for k in keys]
        before = [p.detach().clone() for p in params]
        for p, a in zip(params, avg):
            p.grad = a
        self.opt.step()
        with torch.no_grad():
            return [p.detach() - b for p, b in zip(params, before)]


def _apply_pull(step: int, server_model: torch.nn.Module, replica: torch.nn.Module, fp32: bool, log: TrafficLog,
                workers: int) -> None:
    """Each worker applies what it pulled (left in the replica's ``.grad`` by the simulator): the
    fp32 change makes the replica the server's model exactly; a decoded change is added."""
    t0 = time.perf_counter()
    with torch.no_grad():
        for ps, pr in zip(server_model.parameters(), replica.parameters()):
            if fp32:
                pr.copy_(ps)
            else:
                pr.add_(pr.grad)
            pr.grad = None
    seconds = time.perf_counter() - t0
    for w in range(workers):
        log.time(step, w, "step", seconds)  # every worker applies the same change to its replica


def stats_bytes(model: torch.nn.Module) -> int:
    """Bytes of one copy of ``model``'s buffers (batch-norm running statistics), each in its own dtype."""
    return sum(b.numel() * b.element_size() for b in model.buffers())


def _log_stats(log: TrafficLog, step: int, workers: Sequence[int], op: str, nbytes: int) -> None:
    """Count one message of ``nbytes`` of batch-norm statistics per worker in ``workers`` as one
    collective of ``op`` after the step's others."""
    seq = 1 + max((r.seq for r in log.wire_records if r.step == step), default=-1)
    for w in workers:
        log.wire(step, w, seq, op, "stats", nbytes)


def _fetch_stats(step: int, server_model: torch.nn.Module, replica: torch.nn.Module, log: TrafficLog) -> None:
    """The server fetches a worker's batch-norm running statistics before it evaluates its model
    (worker 0's push of every buffer, counted)."""
    with torch.no_grad():
        for bs, br in zip(server_model.buffers(), replica.buffers()):
            bs.copy_(br)
    _log_stats(log, step, [0], "push", stats_bytes(replica))


def step_times(log: TrafficLog, steps: int, profiles: Sequence[Profile]) -> dict[str, Any]:
    """Per-step measured seconds and modelled communication per profile
    (:func:`gcbench.envs.network.log_step_times`, see the module docstring)."""
    measured = [t.measured_s for t in log_step_times(log, None, steps=steps)]
    modelled = {p.name: [t.modelled_comm_s for t in log_step_times(log, p, steps=steps)] for p in profiles}
    return {"measured": measured, "modelled": modelled}


def compute_step_seconds(log: TrafficLog, steps: int, workers: int) -> list[float]:
    """Per step, the slowest worker's measured forward/backward alone (no codec, no optimizer)."""
    acc: dict[tuple[int, int], float] = defaultdict(float)
    for r in log.time_records:
        if r.phase == "compute":
            acc[(r.step, r.worker)] += r.seconds
    return [max(acc[(t, w)] for w in range(workers)) for t in range(steps)]


# --- the run ----------------------------------------------------------------------------------------------


def train(data: PreparedData, cfg: TrainConfig, method: MethodSpec, *,
          on_eval: Callable[[dict[str, Any]], None] | None = None,
          on_step: Callable[[int, TrafficLog], None] | None = None,
          on_start: Callable[[torch.nn.Module, SimulatedCluster], None] | None = None,
          device: str | torch.device | None = None) -> dict[str, Any]:
    """Train one method; returns evaluations, per-step losses and times, traffic and (3LC) stage totals.

    Args:
        data: the prepared images.
        cfg: the run's configuration.
        method: what travels on the wire.
        on_eval: called after each evaluation with its record (times are filled in afterwards).
        on_step: called after each every-step method's step with the step and the traffic log so far.
        on_start: called once before an every-step method's first step with the workers' replica and
            the simulated cluster (its codecs' error memories are still empty then).
        device: where the model, the data and the codecs' tensors live (``None`` or ``"cpu"``: the
            CPU; ``"cuda"``, ``"cuda:N"``: that GPU). The simulated workers and server share it and
            take turns in this process; evaluation runs there too. On the CPU nothing is moved.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type != "cpu":
        data = PreparedData(data.x_train.to(dev), data.y_train.to(dev), data.x_test.to(dev), data.y_test.to(dev),
                            data.summary, augment=data.augment)
    profiles = [load_profile(p) for p in cfg.profiles]
    model = build_resnet(cfg.depth, cfg.width, data.in_channels, seed=cfg.seed)  # built on the CPU: the same weights anywhere
    if dev.type != "cpu":
        model = model.to(dev)
    named = [(n, p) for n, p in model.named_parameters()]
    n_params = sum(p.numel() for _, p in named)
    log = TrafficLog()
    sparsity = float(method.params.get("sparsity", 1.0))
    # the server encodes the average once and sends that payload to each of the W workers
    sinks = {"push": StageSink(sparsity), "pull": StageSink(sparsity, copies=cfg.workers)} if method.is_3lc else {}
    push_spec, pull_spec = codec_specs(method, sinks)
    n_train = data.x_train.shape[0]
    losses: list[float] = []
    evals: list[dict[str, Any]] = []

    def record_eval(step: int, net: torch.nn.Module) -> None:
        tl, ta = evaluate(net, data.x_test, data.y_test)
        recent = losses[-cfg.eval_every:] if losses else []
        rec = {"step": step, "test_loss": tl, "test_acc": ta,
               "train_loss": sum(recent) / len(recent) if recent else None}
        evals.append(rec)
        if on_eval is not None:
            on_eval(rec)

    last: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}

    def batches(step: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # the last step's batches are kept: step 0's serve the first evaluation's statistics and then step 0
        if step not in last:
            idx = [batch_indices(step, w, cfg, n_train) for w in range(cfg.workers)]
            xs = [data.x_train[i] for i in idx]
            if data.augment:
                xs = [augment_batch(x, torch.Generator().manual_seed((cfg.seed * 1_000_003 + step) * 1024 + w))
                      for w, x in enumerate(xs)]
            last.clear()
            last[step] = (xs, [data.y_train[i] for i in idx])
        return last[step]

    t_start = time.perf_counter()
    record_eval(0, with_batch_statistics(model, batches(0)[0]))  # the initial weights, with their own statistics
    if method.local_steps == 1:
        server_model = copy.deepcopy(model)  # the server's model; `model` is the workers' (identical) replica
        opt = torch.optim.SGD(server_model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        sim = SimulatedCluster(model, cfg.workers, push_spec, topology="parameter_server", pull_codec=pull_spec,
                               server_step=_Server(server_model, opt), traffic=log, threads=None)
        if on_start is not None:
            on_start(model, sim)
        for t in range(cfg.steps):
            for g in opt.param_groups:
                g["lr"] = cfg.lr_at(t)
            check = t % cfg.stage_check_every == 0
            for s in sinks.values():
                s.check_now = check
            xs, ys = batches(t)
            model.train()
            step_losses = sim.backward(lambda w, xs=xs, ys=ys: F.cross_entropy(model(xs[w]), ys[w]))
            _apply_pull(t, server_model, model, pull_spec is None, log, cfg.workers)
            losses.append(sum(step_losses) / len(step_losses))
            for s in sinks.values():
                s.check_now = False
                s.verify()
            if on_step is not None:
                on_step(t, log)
            if (t + 1) % cfg.eval_every == 0 or t + 1 == cfg.steps:
                _fetch_stats(t, server_model, model, log)
                record_eval(t + 1, server_model)
    else:
        _train_local(model, data, cfg, method, log, losses, batches, record_eval)
    wall = time.perf_counter() - t_start

    times = step_times(log, cfg.steps, profiles)
    cum_m = 0.0
    cum_c = {p.name: 0.0 for p in profiles}
    cum_bytes = 0
    by_step_bytes: dict[int, int] = defaultdict(int)
    by_step_op: dict[tuple[int, str], int] = defaultdict(int)  # the method's payloads (no statistics)
    for r in log.wire_records:
        by_step_bytes[r.step] += r.nbytes
        if r.kind != "stats":
            by_step_op[(r.step, r.op)] += r.nbytes
    ei = 1
    for t in range(cfg.steps):
        cum_m += times["measured"][t]
        for p in profiles:
            cum_c[p.name] += times["modelled"][p.name][t]
        cum_bytes += by_step_bytes.get(t, 0)
        while ei < len(evals) and evals[ei]["step"] == t + 1:
            evals[ei].update({"measured_s": cum_m, "modelled_comm_s": dict(cum_c),
                              "time_s": {k: cum_m + v for k, v in cum_c.items()}, "bytes": cum_bytes})
            ei += 1
    evals[0].update({"measured_s": 0.0, "modelled_comm_s": {p.name: 0.0 for p in profiles},
                     "time_s": {p.name: 0.0 for p in profiles}, "bytes": 0})
    for side, sink in sinks.items():
        sink.attach_framed([by_step_op.get((t, side), 0) for t in range(cfg.steps)])
    push, pull = log.message_bytes(op="push"), log.message_bytes(op="pull")
    stats = log.message_bytes(kind="stats")
    baseline = 2 * 4 * n_params * cfg.workers * cfg.steps  # fp32 push + fp32 pull, every worker, every step
    # and the server's fetch of the batch-norm statistics before each evaluation after the first: what
    # the every-step 32-bit run sends beside its gradients and model changes
    baseline_stats = (len(evals) - 1) * stats_bytes(model)
    summary = {
        "params": n_params,
        "tensors": len(named),
        "steps": cfg.steps,
        "comm_steps": len({r.step for r in log.wire_records}),
        "final_test_acc": evals[-1]["test_acc"],
        "final_test_loss": evals[-1]["test_loss"],
        "best_test_acc": max(e["test_acc"] for e in evals),
        "push_bytes": push,
        "pull_bytes": pull,
        "total_bytes": push + pull,
        "stats_bytes": stats,
        "baseline_fp32_bytes": baseline,
        "baseline_stats_bytes": baseline_stats,
        "traffic_reduction": (baseline + baseline_stats) / (push + pull) if push + pull else math.inf,
        "measured_s": cum_m,
        "modelled_comm_s": dict(cum_c),
        "total_time_s": {k: cum_m + v for k, v in cum_c.items()},
        "wall_s": wall,
        "final_train_loss": sum(losses[-cfg.eval_every:]) / len(losses[-cfg.eval_every:]),
        "diverged": not all(math.isfinite(x) for x in losses),
    }
    return {
        "method": method.as_config(),
        "summary": summary,
        "evals": evals,
        "train_loss": losses,
        "measured_step_s": times["measured"],
        "compute_step_s": compute_step_seconds(log, cfg.steps, cfg.workers),
        "stages": {k: s.as_dict() for k, s in sinks.items()},
        "profiles": {p.name: p.as_dict() for p in profiles},
    }


def _train_local(model: torch.nn.Module, data: PreparedData, cfg: TrainConfig, method: MethodSpec, log: TrafficLog,
                 losses: list[float], batches: Callable[[int], tuple[list[torch.Tensor], list[torch.Tensor]]],
                 record_eval: Callable[[int, torch.nn.Module], None]) -> None:
    """Local SGD with ``H = method.local_steps`` (see the module docstring)."""
    H = method.local_steps
    if cfg.eval_every % H:
        raise ValueError(f"eval_every ({cfg.eval_every}) must be a multiple of local_steps ({H}): the global model exists at synchronisations only")
    spec = CodecSpec(name=method.codec, params=dict(method.params))
    agg = Aggregator([WorkerCodecs(spec, rank=r) for r in range(cfg.workers)], LocalCollective(cfg.workers), log)
    replicas = [copy.deepcopy(model) for _ in range(cfg.workers)]
    opts = [torch.optim.SGD(r.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay) for r in replicas]
    keys = [n for n, _ in model.named_parameters()]
    gparams = [p for _, p in model.named_parameters()]
    for t in range(cfg.steps):
        xs, ys = batches(t)
        step_losses = []
        for w, (rep, opt) in enumerate(zip(replicas, opts)):
            for g in opt.param_groups:
                g["lr"] = cfg.lr_at(t)
            t0 = time.perf_counter()
            rep.train()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(rep(xs[w]), ys[w])
            loss.backward()
            t1 = time.perf_counter()
            opt.step()
            log.time(t, w, "compute", t1 - t0)
            log.time(t, w, "step", time.perf_counter() - t1)
            step_losses.append(float(loss.detach()))
        losses.append(sum(step_losses) / len(step_losses))
        if (t + 1) % H == 0 or t + 1 == cfg.steps:
            with torch.no_grad():
                deltas = [[(pw - pg).detach() for pw, pg in zip(rep.parameters(), gparams)] for rep in replicas]
                avg = agg.parameter_server(deltas, keys, step=t, pull=None)
                for pg, a in zip(gparams, avg):
                    pg.add_(a)
                for name, buf in model.named_buffers():
                    reps = [dict(r.named_buffers())[name] for r in replicas]
                    if buf.is_floating_point():
                        buf.copy_(torch.stack(reps).mean(0))
                    else:
                        buf.copy_(reps[0])
                nbytes = stats_bytes(model)
                _log_stats(log, t, range(cfg.workers), "push", nbytes)
                _log_stats(log, t, range(cfg.workers), "pull", nbytes)
                state = model.state_dict()
                for rep in replicas:
                    rep.load_state_dict(state)
            if (t + 1) % cfg.eval_every == 0 or t + 1 == cfg.steps:
                record_eval(t + 1, model)
