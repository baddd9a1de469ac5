"""A DDP communication hook that runs any gcbench codec in real ``torch.distributed`` training.

Usage (in anyone's script, after ``init_process_group``)::

    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = GCBenchHookState("qsgd", {"levels": 15}, error_feedback=False, model=model)
    ddp.register_comm_hook(state, gcbench_hook)
    ...train...
    print(state.traffic.summary())

DDP hands the hook each bucket of *local, not pre-divided* gradients; the hook returns a completed
``torch.futures.Future`` holding a tensor shaped like ``bucket.buffer()``: the average over all
ranks of the decoded gradients. The aggregation itself (protocol per codec: all_reduce for linear
codecs, all_gather of serialized payloads otherwise, PowerSGD's two factor all-reduces, Sketched-SGD's
two rounds) is :class:`gcbench.envs.aggregator.Aggregator`, the code the simulated cluster runs too.

Two modes, the same collectives in the same order on every rank, bit-identical parameters:

* ``overlap=False`` (the reference, and the debugging mode): the hook runs the bucket's whole
  protocol (``dist.all_reduce``/``all_gather`` without ``async_op``) before it returns a completed
  future, so buckets are reduced one after another in DDP's bucket order and no bucket's
  communication overlaps the backward computation of the next.
* ``overlap=True``: the hook only snapshots what the bucket needs (keys, layout, the policy's
  local gradients) on DDP's thread and hands the aggregation to this rank's communication thread
  (:class:`gcbench.envs.comm_thread.CommThread`), returning that job's pending future; autograd
  goes on with the next buckets meanwhile. The thread takes buckets from a FIFO queue in the order
  DDP handed them over (the same on every rank) and runs each bucket's protocol to the end -
  size exchange then payloads, PowerSGD's P then Q, Sketched-SGD's two rounds - in a process
  group of its own, created when the state is built (or bound) on every rank, so its collectives
  never interleave with DDP's on the default group (buffer broadcasts). No collective is issued
  from a gloo/NCCL completion callback: chaining collectives in ``Future.then`` callbacks is how
  torch's own ``powerSGD_hook`` hangs on gloo when DDP has more than one bucket (seen with torch
  2.13). Everything that touches codec state, the traffic log and the time model runs on that
  one thread; a policy decision (L-GreCo's broadcast before a step's first bucket) first drains
  the thread, then runs on DDP's thread while the group is idle. On CUDA each bucket index has a
  stream of its own that waits for the gradients' producer; the job synchronises it before
  completing the future. A failed job completes its future with the error (DDP raises it in
  ``backward``) and fails every later one. :meth:`GCBenchHookState.close` stops the thread (it is
  also stopped at interpreter exit).

For buckets whose tensors share one ``elementwise`` codec (identity, fp16, bf16 without error
feedback or a policy) both modes encode, all_reduce (in place, like torch's ``allreduce_hook``)
and decode the bucket's flat buffer once
(:func:`gcbench.envs.protocols.all_reduce.run_fused`) instead of each tensor.

Like torch's own hooks, the hook writes the averages into DDP's bucket buffer (the ``all_gather``
and per-tensor ``all_reduce`` protocols decode straight into each gradient's place) and returns it: no
new memory of a bucket's size per step. A policy that observes the step's local gradients (they are
views of the buffer) gets a new result buffer instead. When an aggregation raises, the bucket may
hold partial results; the error fails the step in ``backward``.

Per-tensor state (error-feedback residuals, PowerSGD warm starts, L-GreCo per-layer parameters,
random generators) is keyed by a stable name for each parameter: its name in ``model`` when the
state is given the model (recommended), else ``p<i>`` in the order parameters are first seen.
Not by ``(bucket.index(), position)``: DDP (torch 2.13) puts every parameter in one bucket in the
first iteration and *rebuilds* the buckets after it (reverse order, size-capped), so
``bucket.index()`` and positions name different tensors in step 0 and step 1.
"""

# No ``from __future__ import annotations`` here: DDP's ``register_comm_hook`` inspects the hook's
# annotations and accepts only the real objects ``dist.GradBucket`` / ``Future[torch.Tensor]``.
import datetime
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from ..compressors.errors import InvalidParameterError
from ..compressors import Codec, ErrorFeedback
from ..compressors.kernels.warmup import WarmUp, warm_up
from .adaptive import SyncTimeModel, apply_layer_params, make_policy, run_policy_decision
from .aggregator import NON_FINITE_MODES, VERIFY_MODES, Aggregator
from .collectives import TorchCollective
from .comm_thread import CommThread
from .traffic import TrafficLog
from .workers import CodecSpec, WorkerCodecs


class GCBenchHookState:
    """State of :func:`gcbench_hook` for one rank.

    Args:
        codec: a registry name (``"topk"``), a :class:`CodecSpec`, or a factory ``f(**params) -> Codec``.
            A CodecSpec carries its own params, error feedback and layer params: giving any of the
            three beside it raises InvalidParameterError.
        params: codec parameters.
        error_feedback: wrap the codec in error feedback (per-tensor residual on this rank).
        layer_params: per-parameter-name overrides of ``params`` (L-GreCo's per-layer choices).
        process_group: the group to communicate in (None = the default group).
        traffic: a :class:`TrafficLog` to append to (one is created when None).
        model: the module wrapped by DDP; its parameter names key per-tensor state.
        verify_shared: check linear codecs' shared sections across ranks (``"first"`` time each
            tensor is seen, ``"always"``, ``"never"``).
        progress: called before every collective (the gcbench launcher's hang detector).
        policy: a per-layer policy (L-GreCo, Accordion: an object with ``due``/``decide``/
            ``observe``/``keys``, ``decide(broadcast=)`` taking the hook's broadcast, such as
            :class:`gcbench.compressors.adaptive.LGreCoPolicy`) or one
            of ``"lgreco"``, ``"accordion"``, ``"lgreco+accordion"`` (built by
            :func:`gcbench.envs.adaptive.make_policy` for the codec's ladder, keyed by
            ``model``'s parameter names). Inside the hook, on every rank: before the first bucket
            of step ``s`` a due decision is made on the deciding rank, broadcast as an int64
            tensor and applied to ``spec.layer_params`` (PowerSGD warm starts of changed layers
            dropped, error-feedback residuals kept); each bucket's local gradients (before error
            feedback) are collected per layer and handed to ``policy.observe`` after the last
            bucket. Buckets may come in any number and order.
        adaptive_every, adaptive_warmup: the decision period and warm-up (string ``policy`` only).
        adaptive_objective: the L-GreCo objective of a string ``policy``: ``"size"`` (bytes),
            ``"priority"`` (bytes x (bucket + 1), Appendix A) or ``"time"`` (Sec. 4: bytes x a
            per-bucket coefficient fitted from this hook's measured synchronisation times, see
            :class:`gcbench.envs.adaptive.SyncTimeModel`; the first ``time_calibration`` steps
            after step 0 run probe settings and must end before the first decision).
        time_calibration: calibration steps of the time objective.
        time_model: a :class:`SyncTimeModel` for a policy object built with ``objective="time"``
            (its ``bucket_coefficients`` are replaced by the fit before every decision).
        overlap: run each bucket's aggregation on this rank's communication thread, in its own
            process group, and return a pending future (see the module docstring); False is the
            synchronous reference. Call :meth:`close` when done (also run at exit).
        timeout_s: the collective timeout of the overlap mode's process group (default: the
            timeout of ``process_group``, else torch's default).
        compile_ahead: with ``model``, compile the codec's kernels now, for the sizes of the
            model's parameters (:func:`gcbench.compressors.kernels.warmup.warm_up`, on fresh codecs:
            no state is touched), so that the first step does not compile; nothing in eager mode
            (``GCBENCH_COMPILE=0``).
        non_finite: what a step whose gradients hold NaN or Inf on some rank does: ``"raise"`` (the
            finite-input policy: :class:`~gcbench.compressors.errors.NonFiniteGradientError` on every
            rank, from DDP's ``backward``) or ``"nan"`` (mixed precision with a loss scaler such as
            ``torch.amp.GradScaler``, which expects such steps and skips them): every bucket first
            sums a 4-byte finiteness flag over the ranks; where a rank's bucket is not finite, every
            rank's result is NaN, no payload is sent and no codec state (error feedback, warm
            starts, random draws, framing, a policy's observations) changes, as if the step had not
            reached the codec. The flag costs a pass over the bucket and a small all-reduce per bucket.

    Attributes:
        step: number of steps whose last bucket the hook has received (with ``overlap`` its
            aggregation may still run until DDP's backward returns).
        traffic: the :class:`TrafficLog` (this rank's records).
        bucket_layout: parameter names of each bucket index as last seen.
        time_model: the :class:`SyncTimeModel` of the time objective (None otherwise); its
            ``fits`` hold the coefficients used by each decision.
        warmed: the :class:`~gcbench.compressors.kernels.warmup.WarmUp` reports of ``compile_ahead``
            (one per parameter dtype and device; empty when nothing was warmed).
        non_finite_steps: the steps whose gradients held NaN or Inf on some rank, with
            ``non_finite="nan"`` (their buckets' results were NaN).
    """

    def __init__(
        self,
        codec: str | CodecSpec | Callable[..., Any],
        params: Mapping[str, Any] | None = None,
        *,
        error_feedback: bool = False,
        layer_params: Mapping[str, Mapping[str, Any]] | None = None,
        process_group: Any = None,
        traffic: TrafficLog | None = None,
        model: torch.nn.Module | None = None,
        verify_shared: str = "first",
        progress: Callable[[], None] | None = None,
        policy: Any = None,
        adaptive_every: int = 10,
        adaptive_warmup: int = 0,
        adaptive_objective: str = "size",
        time_calibration: int = 10,
        time_model: SyncTimeModel | None = None,
        overlap: bool = False,
        timeout_s: float | None = None,
        compile_ahead: bool = True,
        non_finite: str = "raise",
    ) -> None:
        self.spec = CodecSpec.of(codec, params, error_feedback=error_feedback, layer_params=layer_params)
        if verify_shared not in VERIFY_MODES:
            raise InvalidParameterError(f"verify_shared must be one of {VERIFY_MODES}, got {verify_shared!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise InvalidParameterError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.process_group = process_group
        self.traffic = traffic if traffic is not None else TrafficLog()
        self.verify_shared = verify_shared
        self.progress = progress
        self.step = 0
        self.bucket_layout: dict[int, list[str]] = {}
        self._model = model
        self._names: dict[int, str] | None = None
        self._aggregator: Aggregator | None = None
        self._codecs: WorkerCodecs | None = None
        self._pending_state: Mapping[str, Any] | None = None
        self._fusable: dict[tuple[str, ...], bool] = {}
        if non_finite not in NON_FINITE_MODES:
            raise InvalidParameterError(f"non_finite must be one of {NON_FINITE_MODES}, got {non_finite!r}")
        self.non_finite = non_finite
        self.non_finite_steps: list[int] = []
        if adaptive_objective not in ("size", "time", "priority"):
            raise InvalidParameterError(f"adaptive_objective must be 'size', 'time' or 'priority', got {adaptive_objective!r}")
        if isinstance(policy, str):
            layers = [n for n, p in model.named_parameters() if p.requires_grad] if model is not None else None
            extra: dict[str, Any] = {}
            if adaptive_objective != "size":
                if policy not in ("lgreco", "lgreco+accordion"):
                    raise InvalidParameterError(f"adaptive_objective={adaptive_objective!r} needs an L-GreCo policy, not {policy!r}")
                extra["objective"] = adaptive_objective
                if adaptive_objective == "time":
                    extra["bucket_coefficients"] = [1.0]  # replaced by the fit before every decision
            policy = make_policy(policy, self.spec, every=adaptive_every, warmup=adaptive_warmup, layers=layers, **extra)
            if adaptive_objective == "time" and time_model is None:
                time_model = SyncTimeModel(len(policy.ladder), calibrate=time_calibration)
        if time_model is not None:
            if policy is None or getattr(policy, "objective", None) != "time":
                raise InvalidParameterError("time_model needs an L-GreCo policy with objective='time'")
            first = policy.warmup + policy.every
            if time_model.end > first:
                raise InvalidParameterError(f"the time objective's calibration (steps {time_model.start}..{time_model.end - 1}) must end "
                                 f"before the first decision (step {first}): lower time_calibration or raise the warm-up")
        self.time_model = time_model
        self.policy = policy
        #: ``{"step": s, "layer_params": {...}}`` for every decision applied on this rank.
        self.decisions: list[dict[str, Any]] = []
        self._step_open = False
        self._step_grads: dict[str, torch.Tensor] = {}
        self.overlap = bool(overlap)
        self.timeout_s = timeout_s
        self._comm: CommThread | None = None
        self._comm_group: Any = None
        self._device_streams: dict[int, Any] = {}
        if self.overlap and dist.is_available() and dist.is_initialized():
            self._bind_comm()  # a collective on every rank: best done here, in the same order everywhere
        self.warmed: list[WarmUp] = self._compile_ahead(model) if compile_ahead and model is not None else []
        #: buckets of the current step held by :func:`gcbench_global_hook` until the last one
        self._held: list[tuple[torch.Tensor, list[str], list[torch.Tensor], torch.futures.Future]] = []

    # -- lazily bound to the process group (init_process_group may come after construction) -------

    @property
    def aggregator(self) -> Aggregator:
        """The aggregator of this rank (created on first use)."""
        if self._aggregator is None:
            group = self.process_group
            if self.overlap:
                self._bind_comm()
                group = self._comm_group
            collective = TorchCollective(group, progress=self.progress)
            self._codecs = WorkerCodecs(self.spec, rank=collective.local_ranks[0])
            if self._pending_state is not None:
                self._codecs.load_state_dict(self._pending_state["codecs"])
            self._aggregator = Aggregator([self._codecs], collective, self.traffic, verify_shared=self.verify_shared)
            if self._pending_state is not None:
                self._aggregator.set_verified(self._pending_state.get("verified", []))
                self._aggregator.links.load_state_dict(self._pending_state.get("framing", {"senders": {}, "receivers": {}}))
                self._pending_state = None
        return self._aggregator

    def fusable(self, keys: list[str]) -> bool:
        """:meth:`Aggregator.fusable <gcbench.envs.aggregator.Aggregator.fusable>` of a bucket's keys,
        asked once per bucket layout: without a policy every key's codec is fixed for the run (a
        policy changes per-layer parameters, and the hook asks it nothing then)."""
        layout = tuple(keys)
        got = self._fusable.get(layout)
        if got is None:
            got = self._fusable[layout] = self.aggregator.fusable(keys)
        return got

    def _compile_ahead(self, model: torch.nn.Module) -> list[WarmUp]:
        """:func:`warm_up` fresh codecs on the sizes of ``model``'s trainable parameters, per dtype and
        device, each size with the parameters of its first tensor (``layer_params``)."""
        groups: dict[tuple[torch.dtype, torch.device], dict[int, str]] = {}
        for name, p in model.named_parameters():
            if p.requires_grad:
                groups.setdefault((p.dtype, p.device), {}).setdefault(p.numel(), name)
        reports = []
        for (dtype, device), first in groups.items():
            def fresh(n: int, first: dict[int, str] = first) -> Any:
                codec = self.spec.build(first[n])
                return codec if isinstance(codec, (Codec, ErrorFeedback)) else None

            report = warm_up(fresh, first, dtype=dtype, device=device, on_size=self.progress)
            if report.sizes:
                reports.append(report)
        return reports

    def _bind_comm(self) -> None:
        """Create the overlap mode's process group and thread (once)."""
        if self._comm is not None:
            return
        self._comm_group = _new_comm_group(self.process_group, self.timeout_s)
        self._comm = CommThread()

    @property
    def comm_thread(self) -> CommThread | None:
        """The communication thread of the overlap mode (None before binding or when synchronous)."""
        return self._comm

    def wait(self) -> None:
        """Block until every bucket handed to the communication thread has been aggregated."""
        if self._comm is not None:
            self._comm.drain()

    def close(self) -> None:
        """Stop the communication thread and release its process group (idempotent; the hook
        must not be called afterwards). Also run at interpreter exit for the thread."""
        if self._comm is not None:
            self._comm.close()
        if self._comm_group is not None and dist.is_initialized():
            try:
                dist.destroy_process_group(self._comm_group)
            except (RuntimeError, ValueError):  # already gone with the default group
                pass
        self._comm_group = None

    def __enter__(self) -> "GCBenchHookState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def codecs(self) -> WorkerCodecs:
        """This rank's codecs and per-tensor state."""
        self.aggregator  # noqa: B018 - binds on first use
        assert self._codecs is not None
        return self._codecs

    def key_of(self, param: torch.Tensor) -> str:
        """The stable name of ``param`` (its model name, else ``p<i>`` by first appearance)."""
        if self._names is None:
            self._names = {}
            if self._model is not None:
                for name, p in self._model.named_parameters():
                    self._names[p.data_ptr()] = name
        ptr = param.data_ptr()
        name = self._names.get(ptr)
        if name is None:
            name = f"p{len(self._names)}"
            self._names[ptr] = name
        return name

    # -- checkpoints ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Step counter and per-tensor codec state of this rank (residuals, warm starts, RNGs)."""
        self.wait()  # overlap: the communication thread must be done with the codecs
        out = {
            "step": self.step,
            "codecs": self.codecs.state_dict(),
            "verified": self.aggregator.verified_keys(),
            "framing": self.aggregator.links.state_dict(),  # header registries (envs/framing.py)
            "layer_params": {k: dict(v) for k, v in self.spec.layer_params.items()},
            "non_finite_steps": list(self.non_finite_steps),
        }
        if self.policy is not None and hasattr(self.policy, "state_dict"):
            # current choice, accumulation buffer (deciding rank), Accordion's previous norms
            out["policy"] = self.policy.state_dict()
            out["decisions"] = [dict(d) for d in self.decisions]
            out["bucket_layout"] = {int(b): list(ks) for b, ks in self.bucket_layout.items()}
        if self.time_model is not None:
            out["time_model"] = self.time_model.state_dict()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (may be called before the first step)."""
        self.wait()
        self.step = int(state["step"])
        self.non_finite_steps = [int(s) for s in state.get("non_finite_steps", [])]
        if "layer_params" in state:
            self.spec.layer_params = {k: dict(v) for k, v in state["layer_params"].items()}
            self._fusable.clear()  # the keys' codecs may differ now
        if self.policy is not None and "policy" in state:
            self.policy.load_state_dict(state["policy"])
            self.decisions = [dict(d) for d in state.get("decisions", [])]
            self.bucket_layout = {int(b): list(ks) for b, ks in state.get("bucket_layout", {}).items()}
        if self.time_model is not None and "time_model" in state:
            self.time_model.load_state_dict(state["time_model"])
        if self._aggregator is None:
            self._pending_state = state
        else:
            self.codecs.load_state_dict(state["codecs"])
            self._aggregator.set_verified(state.get("verified", []))
            self._aggregator.links.load_state_dict(state.get("framing", {"senders": {}, "receivers": {}}))


def _new_comm_group(base: Any, timeout_s: float | None) -> Any:
    """A new process group over ``base``'s ranks (same backend and timeout) for the communication
    thread, so its collectives never interleave with DDP's own on ``base`` (buffer broadcasts)."""
    backend = dist.get_backend(base)
    ranks = dist.get_process_group_ranks(base if base is not None else dist.group.WORLD)
    if timeout_s is None:
        pg = base if base is not None else dist.group.WORLD
        try:  # torch keeps the group's timeout in its backend's options (2.13, 2.14)
            timeout = pg._get_backend(torch.device("cuda" if backend == "nccl" else "cpu")).options._timeout
        except (AttributeError, RuntimeError):
            timeout = None
    else:
        timeout = datetime.timedelta(seconds=timeout_s)
    return dist.new_group(ranks, backend=backend, timeout=timeout)


def _same_place(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory."""
    return a.data_ptr() == b.data_ptr() and a.numel() == b.numel() and a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous()


def _write_into(out: torch.Tensor, results: list[torch.Tensor]) -> None:
    """Lay ``results`` out in ``out`` the way DDP lays the bucket's gradients out in its buffer:
    flattened, one after another, in ``bucket.gradients()`` order (checked on torch 2.13); a result
    already in its place is left there."""
    offset = 0
    for r in results:
        n = r.numel()
        dest = out[offset : offset + n]
        if not _same_place(dest, r):
            dest.copy_(r.reshape(-1))
        offset += n
    if offset != out.numel():
        raise RuntimeError(f"bucket holds {out.numel()} elements but its gradients {offset}")


def _time_objective_step(state: GCBenchHookState) -> None:
    """Before the first bucket of a step with the time objective: apply the calibration probe (or,
    right after the calibration, the policy's own choice again); before a decision, fit the
    per-bucket coefficients and hand them to the policy."""
    tm, policy, step = state.time_model, state.policy, state.step
    assert tm is not None
    new: dict[str, dict[str, Any]] | None = None
    if tm.calibrating(step) and policy.keys:
        choice = tm.probe(step, len(policy.keys))
        new = {k: policy.ladder.params(j) for k, j in zip(policy.keys, choice)}
    elif step == tm.end and tm.calibrate > 0:
        new = policy.layer_params()
    if new is not None:
        apply_layer_params(state.spec, state.aggregator, new)
    if policy.due(step):
        fit = tm.fit(step, buckets=len(state.bucket_layout) or None)
        policy.bucket_coefficients = list(fit["coefficients"])


def gcbench_hook(state: GCBenchHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average the bucket's gradients through ``state``'s codec.

    Register with ``ddp_model.register_comm_hook(state, gcbench_hook)``. Returns a future holding a
    tensor shaped like ``bucket.buffer()``: completed when ``state.overlap`` is False, completed by
    the communication thread later otherwise.
    """
    buffer = bucket.buffer()
    keys = [state.key_of(p) for p in bucket.parameters()]
    policy = state.policy
    # one flat aggregation of the bucket (no policy, one elementwise codec): the per-tensor views of
    # the gradients are not needed, and DDP builds them anew on every call
    fused = policy is None and state.fusable(keys)
    grads = [] if fused else list(bucket.gradients())
    observed: dict[str, torch.Tensor] | None = None
    if policy is not None:
        if not state._step_open:  # first bucket of this step: decide (if due) before any aggregation
            # the previous step's buckets are done (DDP waited for their futures); its last job's
            # bookkeeping too once drained, so the decision's broadcast has the group to itself
            state.wait()
            state._step_open = True
            state._step_grads = {}
            if state.progress is not None:
                state.progress()
            if getattr(policy, "device", "") is None and dist.is_initialized() and dist.get_backend(state.process_group) == "nccl":
                policy.device = torch.device("cuda", torch.cuda.current_device())  # NCCL broadcasts CUDA tensors
            if state.time_model is not None:
                _time_objective_step(state)
            new = run_policy_decision(policy, state.step, state.spec, state.aggregator, buckets=state.bucket_layout)
            if new is not None:
                state.decisions.append({"step": state.step, "layer_params": new})
        # local gradients, before error feedback; copied when overlapping: DDP overwrites a bucket's
        # views with the average once its future completes, before the last bucket is observed
        state._step_grads.update(zip(keys, [g.clone() for g in grads] if state.overlap else grads))
        if bucket.is_last():
            observed, state._step_grads, state._step_open = state._step_grads, {}, False
    state.bucket_layout[bucket.index()] = keys  # after the decision: it saw the previous step's layout
    step, last = state.step, bucket.is_last()
    if last:
        state.step += 1
    work = functools.partial(_reduce_bucket, state, buffer, grads, keys, step, bucket.index(), last, observed, fused)
    if not state.overlap:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(work())
        return fut
    state.aggregator  # noqa: B018 - binds the thread and its group on first use
    assert state._comm is not None
    if buffer.is_cuda:
        return state._comm.submit(_on_bucket_stream(state, bucket.index(), buffer.device, work), devices=[buffer.device])
    return state._comm.submit(work)


def _on_bucket_stream(state: GCBenchHookState, index: int, device: torch.device, work: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """CUDA: ``work`` on a stream of its own per bucket index, after the gradients' producer (the
    current stream when DDP hands the bucket over), synchronised before the future completes."""
    consumer = torch.cuda.current_stream(device)
    ready = torch.cuda.Event()
    ready.record(consumer)
    stream = state._device_streams.get(index)
    if stream is None:
        stream = state._device_streams[index] = torch.cuda.Stream(device)

    def run() -> torch.Tensor:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            stream.wait_event(ready)
            out = work()
        stream.synchronize()
        # allocated on the bucket's stream, used on DDP's: keep the caching allocator from handing
        # its memory to this stream again before DDP's stream is done with it
        out.record_stream(consumer)
        return out

    return run


def _reduce_bucket(
    state: GCBenchHookState,
    buffer: torch.Tensor,
    grads: list[torch.Tensor],
    keys: list[str],
    step: int,
    index: int,
    last: bool,
    observed: dict[str, torch.Tensor] | None,
    fused: bool,
) -> torch.Tensor:
    """One bucket's aggregation and the step's closing bookkeeping (on the communication thread
    when overlapping: the only thread touching the codecs, the traffic log and the time model);
    ``fused``: the bucket is aggregated as one flat tensor (``grads`` is then empty)."""
    timed = state.time_model is not None
    if timed:
        n_wire = len(state.traffic.wire_records)
        t0 = time.perf_counter()
    aggregator = state.aggregator
    if state.non_finite == "nan" and _skips_non_finite(state, buffer, step, index):
        if last and timed:
            state.time_model.drop_step(step)
        return buffer
    if fused:
        # one encode, one all_reduce, one decode for the bucket (DDP's buffer is ours to overwrite,
        # as in torch's allreduce_hook); bit-identical to the per-tensor path for elementwise codecs
        out = aggregator.aggregate_fused([buffer], keys, step=step, bucket=index, checked=True)
    else:
        # Into DDP's buffer, as torch's own hooks write (new memory of a bucket's size pays its page
        # faults on every step), unless a policy still reads this step's gradients (views of the
        # buffer, observed after the last bucket): results decoded into their own gradient's place
        # stay there, the others are copied in, unless one is a view of another place of the buffer.
        into = state.policy is None
        averaged = aggregator.aggregate([grads], keys, step=step, bucket=index, into_grads=into)
        buffer_ptr = buffer.untyped_storage().data_ptr()
        into = into and all(r.untyped_storage().data_ptr() != buffer_ptr or _same_place(r, g) for r, g in zip(averaged, grads))
        out = buffer if into else torch.empty_like(buffer)
        _write_into(out, averaged)
    if timed:
        seconds = time.perf_counter() - t0
        nbytes = sum(r.nbytes for r in state.traffic.wire_records[n_wire:])
        state.time_model.record(step, index, nbytes, seconds)
    if last:
        if observed is not None:
            state.policy.observe(step, observed)
        if timed:
            state.time_model.end_step(step)
    return out


def _skips_non_finite(state: GCBenchHookState, grads: torch.Tensor, step: int, index: int) -> bool:
    """``non_finite="nan"``: whether this bucket's result is NaN, which it is where some rank's
    gradients ``grads`` hold NaN or Inf (the flag's all-reduce: the same answer on every rank) or an
    earlier bucket of the step was not finite (every rank knows it: no flag then); ``grads`` is then
    filled with NaN and the step noted in ``state.non_finite_steps``."""
    if not state.aggregator.skips_step([grads], state.non_finite_steps, step=step, bucket=index):
        return False
    grads.fill_(float("nan"))
    return True


#: Per-tensor state key of the whole-model gradient in :func:`gcbench_global_hook`.
GLOBAL_KEY = "<model>"


def gcbench_global_hook(state: GCBenchHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook compressing the *whole model's* gradient at once (e.g. global TopK).

    L-GreCo's comparator (Sec. 5.3, Fig. 10a): the codec sees one flat vector, every parameter's
    gradient concatenated in a fixed order (the model's parameter order when the state has the
    model, else first appearance), so TopK selects the largest entries across all layers (one
    threshold for the model) instead of per layer. The order does not follow DDP's buckets, which
    DDP rebuilds after the first step: error feedback (keyed by :data:`GLOBAL_KEY`) needs element
    ``i`` to be the same parameter entry at every step. Buckets before the last are held: their
    futures stay pending until the last bucket arrives, then one aggregation (the codec's protocol
    through :class:`gcbench.envs.aggregator.Aggregator`) runs and every held future is completed.
    This is the paper's point against global selection: nothing can be communicated before the
    whole backward pass ends. Per-layer policies (``state.policy``) are refused: there is one
    tensor, not layers.

    Register with ``ddp_model.register_comm_hook(state, gcbench_global_hook)``.
    """
    if state.policy is not None:
        raise InvalidParameterError("gcbench_global_hook compresses the model as one tensor: a per-layer policy does not apply")
    keys = [state.key_of(p) for p in bucket.parameters()]
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    state._held.append((bucket.buffer(), keys, list(bucket.gradients()), fut))
    state.bucket_layout[bucket.index()] = keys
    if not bucket.is_last():
        return fut
    held, state._held = state._held, []
    step = state.step
    state.step += 1
    work = functools.partial(_reduce_global, state, held, step)
    if state.overlap:
        state.aggregator  # noqa: B018 - binds the thread and its group on first use
        assert state._comm is not None
        # the thread refuses jobs after a failed one without running them: its error then completes
        # the held futures, which DDP waits on (a job that ran has completed them itself)
        state._comm.submit(work).add_done_callback(functools.partial(_fail_held, held))
    else:
        work()
    return fut


def _fail_held(held: list[tuple[torch.Tensor, list[str], list[torch.Tensor], torch.futures.Future]], job: torch.futures.Future) -> None:
    """Complete every held future that is still pending with the error of ``job`` (the thread's
    future of the aggregation); nothing when the job succeeded."""
    try:
        job.wait()
    except BaseException as err:  # noqa: BLE001 - handed to the futures DDP waits on
        for *_, f in held:
            if not f.done():
                f.set_exception(err)


def _reduce_global(state: GCBenchHookState, held: list[tuple[torch.Tensor, list[str], list[torch.Tensor], torch.futures.Future]], step: int) -> None:
    """The whole model's aggregation in :func:`gcbench_global_hook`; completes every held future
    (with the error, if it fails: DDP waits on each of them)."""
    try:
        grads = {k: g for _, ks, gs, _ in held for k, g in zip(ks, gs)}
        rank = {name: i for i, name in enumerate((state._names or {}).values())}
        order = sorted(grads, key=lambda k: rank[k])
        flat = torch.cat([grads[k].reshape(-1) for k in order])
        if state.non_finite == "nan" and _skips_non_finite(state, flat, step, 0):
            averaged = flat  # NaN, on every rank
        else:
            (averaged,) = state.aggregator.aggregate([[flat]], [GLOBAL_KEY], step=step, bucket=0)
        parts: dict[str, torch.Tensor] = {}
        offset = 0
        for k in order:
            n = grads[k].numel()
            parts[k] = averaged[offset : offset + n]
            offset += n
        outs = []
        for buffer, ks, _, _ in held:
            out = torch.empty_like(buffer)
            _write_into(out, [parts[k] for k in ks])
            outs.append(out)
    except BaseException as err:
        for *_, f in held:
            f.set_exception(err)
        raise
    for (*_, f), out in zip(held, outs):
        f.set_result(out)
