"""Sketched-SGD: the two-round protocol of Algorithm 2, with no networking inside.

Ivkin, Rothchild, Ullah, Braverman, Stoica, Arora, "Communication-efficient Distributed SGD with
Sketching", NeurIPS 2019, Algorithm 2 (SKETCHED-D-SGD; the authors' slides, "Algorithm and
theory"); the momentum and error-accumulation bookkeeping follow the authors' code
(``sketchedsgd/sketched_optimizer.py``, ``SketchedSum``). Line numbers below are Algorithm 2's.

Per step, for each tensor (``key``), with ``W`` workers:

==========  ======================================================================  ==============
line        what happens                                                            here
==========  ======================================================================  ==============
3           worker i computes its stochastic gradient ``g_i``                         caller
4           error correction ``v_i <- v_i + lr * u_i`` with ``u_i <- rho u_i + g_i``  ``round1``
            (the paper's ``g~ = eta g + a`` is ``rho = 0``; lr is folded into v)
5           sketch ``S_i = CountSketch(v_i)``                                        ``round1``
6-7         send and aggregate the sketches: ``S = sum_i S_i`` (linear; the paper   caller:
            averages, ``1/W``, which changes no selection; the update here is the    all_reduce or
            sum, divide by ``W`` for the mean)                                       ``combine``
8           unsketch: the ``P k`` coordinates with the largest estimates of ``S``   ``select_candidates``
9           fetch the exact values ``v_i[candidates]`` from every worker and sum;   ``round2`` +
            keep the top ``k`` of the summed exact values                           all_reduce +
                                                                                    ``select_topk``
10-12       the update ``g~`` (k coordinates) reaches every worker; ``w -= g~``     caller
13          error accumulation: every worker zeroes ``v_i`` (and ``u_i``,           ``apply``
            "momentum stopping") at the k applied coordinates
==========  ======================================================================  ==============

On line 13 the code of the authors is followed: every worker zeroes ``v_i`` at the applied
coordinates. The slides' literal line 13, ``a_i = g-_i - g~``, subtracts the update from each
worker's accumulator, and their update is a mean: line 7 averages the sketches (``S_t = 1/W sum_i
S_t^i``), so ``g~`` holds ``1/W sum_i g-_i`` at the applied coordinates, and the ``W`` workers together
remove ``sum_i g-_i`` there. Both conventions leave the same sum of the accumulators (zero at the
applied coordinates, unchanged elsewhere) and differ only in how it is split among the workers; every
later selection and update reads the accumulators through their sum alone (the sketch is linear, the
round-2 values are summed), so the two give the same updates. Because the applied value at a selected
coordinate is exactly ``sum_i v_i`` there, the books stay exact::

    sum_i v_i (after apply) + update  ==  sum_i v_i (before apply)

so nothing a worker computed is ever lost, only delayed.

Wire traffic per worker and step, both rounds as real :class:`Payload` bytes:

* round 1: a :class:`CountSketchCodec` payload (the ``r x c`` float32 table) - all_reduce-able;
* round 2: an :class:`Identity` payload of the ``P k`` candidate values (float32; float64, ``8 P k``
  bytes, for float64 gradients) - the candidate indices are *not* sent: every worker computes them
  from the same summed table (deterministic). Broadcasting rank 0's candidates instead (``8 P k``
  more bytes), for workers whose hardware could compute them differently, is not implemented.

With all_reduce for both rounds every worker ends the step with the same summed values and can
run :func:`select_topk` itself. :func:`sketched_rounds` is the one implementation of a step over
any transport: the DDP hook and the simulated cluster run it through :class:`SketchedSGD` (whose
``protocol = "rounds"`` tells the execution layer to hand it its all-reduce), and
:func:`run_sketched_sgd_step` runs it in one process with plain sums standing in for all_reduce.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch

from ..base import check_ratio, state_entries
from ..numerics import check_finite, ensure_finite, saturating_cast
from ..codecs.countsketch.codec import CountSketch, CountSketchCodec
from ..errors import (GCBenchError, InvalidParameterError, NonFiniteGradientError, NumericOverflowError, StateError,
                      UnsupportedInputError)
from ..codecs.identity import Identity
from ..wire.payload import Payload

_IDLE, _SKETCHED, _FETCHED = "idle", "sketched", "fetched"


@dataclass
class _KeyState:
    u: torch.Tensor  # momentum (flat)
    v: torch.Tensor  # error accumulation, lr folded in (flat)
    phase: str = _IDLE
    candidates: torch.Tensor | None = None
    undo: tuple[torch.Tensor, torch.Tensor] | None = None  # u and v before the step in progress (None: new key)


@dataclass
class SketchedSGDStep:
    """What one step of :func:`run_sketched_sgd_step` did.

    Attributes:
        update: dense tensor shaped like the gradients: the summed exact values at the ``k``
            selected coordinates, zero elsewhere (the caller applies ``w -= update``, or
            ``update / W`` for the mean).
        indices: the selected coordinates (int64, ascending, flat).
        values: ``update`` at ``indices``.
        candidates: the ``P k`` coordinates unsketched from the summed table (int64, ascending).
        round1_nbytes: per worker, wire bytes of its round-1 payload (the sketch).
        round2_nbytes: per worker, wire bytes of its round-2 payload (the candidates' values).
    """

    update: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    candidates: torch.Tensor
    round1_nbytes: list[int] = field(default_factory=list)
    round2_nbytes: list[int] = field(default_factory=list)


class SketchedSGDWorker:
    """One worker's side of Sketched-SGD: momentum ``u`` and error accumulation ``v`` per ``key``.

    Args:
        rows, columns, compression, seed: the :class:`CountSketchCodec` that writes round 1; every
            worker must use the same values (same hashes). ``columns = 0``: ``n / (rows * compression)``.
        momentum: ``rho`` in ``u <- rho u + g`` (0 = the paper's Algorithm 2).
        lr: learning rate folded into ``v <- v + lr u``, finite and > 0 (can be overridden per call).
        momentum_stopping: zero ``u`` too at applied coordinates (as the authors' code).

    A step is ``round1`` -> ``round2`` -> ``apply``, in that order, for each key; :meth:`abort`
    undoes a step that ``apply`` has not finished (until then the key holds the ``u`` and ``v`` of
    before the step beside the new ones).
    """

    def __init__(self, *, rows: int = 5, columns: int = 0, compression: float = 20.0, seed: int = 0, momentum: float = 0.0,
                 lr: float = 1.0, momentum_stopping: bool = True) -> None:
        self.momentum = _momentum(momentum)
        self.lr = _learning_rate(lr)
        self.codec = CountSketchCodec(rows=rows, columns=columns, compression=compression, seed=seed)
        self.values_codec = Identity()
        self.momentum_stopping = bool(momentum_stopping)
        self._state: dict[str, _KeyState] = {}

    # -- the three calls of a step ---------------------------------------------------------------

    def round1(self, grad: torch.Tensor, *, key: str = "", lr: float | None = None) -> Payload:
        """Lines 4-5: fold ``grad`` into ``u`` and ``v`` and return the sketch of ``v``.

        The payload's only section is the flat ``r x c`` table: all_reduce it (or ``combine`` the
        payloads) and hand the sum to :func:`select_candidates`. ``payload.nbytes`` is the wire size.

        Raises (no state touched):
            UnsupportedInputError: ``grad`` is not a non-empty dense floating-point tensor.
            InvalidParameterError: ``lr`` is not a finite number > 0.
            NonFiniteGradientError: NaN/Inf in ``grad``; NumericOverflowError: ``u``, ``v`` or the sketch overflows.
            StateError: the previous step of ``key`` was not finished with ``apply``, or ``grad``
                does not match the state's size/device.
        """
        g = _float_tensor(grad, "round1")
        if g.numel() == 0:
            raise UnsupportedInputError("round1: Sketched-SGD sketches a non-empty gradient, got 0 elements")
        check_finite(g)
        step_lr = self.lr if lr is None else _learning_rate(lr)
        work_dtype = torch.float64 if g.dtype == torch.float64 else torch.float32
        if step_lr > torch.finfo(work_dtype).max:
            raise NumericOverflowError(f"lr={step_lr!r} overflows the accumulation's working precision ({work_dtype})")
        flat = g.reshape(-1).to(work_dtype)
        st = self._state.get(key)
        if st is not None and st.phase != _IDLE:
            raise StateError(f"key {key!r}: round1 called again before apply() finished the previous step")
        if st is not None and (st.v.shape != flat.shape or st.v.device != flat.device or st.v.dtype != work_dtype):
            raise StateError(f"key {key!r}: state holds {st.v.numel()} {st.v.dtype} on {st.v.device}, "
                             f"got {flat.numel()} {work_dtype} on {flat.device}")
        # line 4 (u <- rho u + g, v <- v + lr u) beside the old u and v, which stay until the sketch is made
        u0, v0 = (torch.zeros_like(flat),) * 2 if st is None else (st.u, st.v)
        u = torch.mul(u0, self.momentum).add_(flat) if self.momentum else flat.clone(memory_format=torch.contiguous_format)
        v = torch.add(v0, u, alpha=step_lr)
        ensure_finite(v, what="Sketched-SGD's momentum or error accumulation")  # v is finite only where u is
        payload = self.codec.encode(v)  # line 5: the sketch of v (the codec's table)
        if st is None:
            st = self._state[key] = _KeyState(u, v)
        else:
            st.undo, st.u, st.v = (st.u, st.v), u, v
        st.phase = _SKETCHED
        return payload

    def round2(self, candidates: torch.Tensor, *, key: str = "") -> Payload:
        """Line 9 (worker side): the exact values ``v[candidates]`` as an Identity payload.

        ``candidates`` are the indices :func:`select_candidates` returned (known to every worker, so
        only the values travel). Sum the workers' payloads (all_reduce / ``combine``) and hand the
        sum to :func:`select_topk`.
        """
        st = self._require_phase(key, (_SKETCHED,), "round2")
        cand = _check_indices(candidates, st.v.numel(), "candidates")
        payload = self.values_codec.encode(st.v.index_select(0, cand.to(st.v.device)))
        st.candidates = cand
        st.phase = _FETCHED
        return payload

    def apply(self, selected: torch.Tensor, *, key: str = "") -> None:
        """Line 13: zero ``v`` (and ``u``, with momentum stopping) at the applied coordinates.

        ``selected`` must be a subset of the round-2 candidates (what :func:`select_topk` returns).
        """
        st = self._require_phase(key, (_FETCHED,), "apply")
        sel = _check_indices(selected, st.v.numel(), "selected").to(st.v.device)
        if not bool(torch.isin(sel, st.candidates.to(sel.device)).all()):
            raise InvalidParameterError("selected coordinates must be among the round-2 candidates")
        st.v.index_fill_(0, sel, 0.0)
        if self.momentum_stopping:
            st.u.index_fill_(0, sel, 0.0)
        st.candidates, st.undo = None, None
        st.phase = _IDLE

    def abort(self, key: str = "") -> None:
        """Undo the step of ``key`` in progress (after ``round1``, before ``apply`` finished it):
        ``u``, ``v`` and the phase become what they were before its ``round1`` (no-op between steps)."""
        st = self._state.get(key)
        if st is None or st.phase == _IDLE:
            return
        if st.undo is None:  # the step's round1 created the key
            del self._state[key]
        else:
            (st.u, st.v), st.undo, st.candidates, st.phase = st.undo, None, None, _IDLE

    # -- state -----------------------------------------------------------------------------------

    def accumulated(self, key: str = "") -> torch.Tensor:
        """A copy of the flat error accumulator ``v`` of ``key`` (zeros before the first step)."""
        st = self._state.get(key)
        if st is None:
            raise StateError(f"no state for key {key!r}")
        return st.v.clone()

    def reset_state(self) -> None:
        """Forget ``u`` and ``v`` of every key."""
        self._state.clear()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``{"u/<key>": u, "v/<key>": v}`` (between steps; a step in progress is refused)."""
        out: dict[str, torch.Tensor] = {}
        for k, st in self._state.items():
            if st.phase != _IDLE:
                raise StateError(f"key {k!r} is in the middle of a step ({st.phase})")
            out[f"u/{k}"] = st.u.clone()
            out[f"v/{k}"] = st.v.clone()
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned."""
        state = state_entries(state, "SketchedSGDWorker")
        us = {k[2:]: v for k, v in state.items() if k.startswith("u/")}
        vs = {k[2:]: v for k, v in state.items() if k.startswith("v/")}
        if us.keys() != vs.keys() or len(us) + len(vs) != len(state):
            raise StateError("state must hold matching 'u/<key>' and 'v/<key>' entries only")
        new = {}
        for k in us:
            if us[k].shape != vs[k].shape or us[k].dim() != 1 or us[k].dtype != vs[k].dtype or not us[k].is_floating_point():
                raise StateError(f"u and v of key {k!r} differ in shape or dtype, or are not flat floating tensors")
            new[k] = _KeyState(us[k].clone(), vs[k].clone())
        self._state = new

    def _require_phase(self, key: str, phases: tuple[str, ...], what: str) -> _KeyState:
        st = self._state.get(key)
        if st is None or st.phase not in phases:
            raise StateError(f"key {key!r}: {what} called out of order (state: {st.phase if st else 'none'})")
        return st


# --- the master's side (pure functions) -----------------------------------------------------------


def select_candidates(summed: Payload | CountSketch, num: int, *, codec: CountSketchCodec | None = None) -> torch.Tensor:
    """Line 8: the ``num`` (``= P k``) coordinates with the largest squared estimates of the summed sketch.

    Args:
        summed: the summed round-1 payload (``codec.combine`` of the workers' payloads, or one
            rebuilt around an all_reduced table with :func:`with_sections`), or a CountSketch.
        num: candidates to return (clipped to the vector's length).
        codec: the worker's round-1 codec, whose cache holds the hash tables of this vector's
            sketch (built at its first round 1); without it a payload is read by a new codec, which
            builds them again (seconds for ten million coordinates). Used when its parameters are
            the payload's.

    Returns:
        int64 indices in ascending order (the order round 2 sends values in).
    """
    if isinstance(summed, Payload):
        if codec is None or codec.params != summed.params:
            codec = CountSketchCodec(**summed.params)
        sketch = codec.sketch_of(summed)
    elif isinstance(summed, CountSketch):
        sketch = summed
    else:
        raise InvalidParameterError(f"select_candidates takes a Payload or CountSketch, not {type(summed).__name__}")
    idx, _ = sketch.unsketch(_count("num", num))
    return torch.sort(idx).values


def select_topk(summed_values: torch.Tensor | Payload, candidates: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Line 9 (master side): the ``k`` candidates with the largest summed exact values.

    Args:
        summed_values: the summed round-2 values (a tensor, or the combined Identity payload),
            in the order of ``candidates``.
        candidates: what :func:`select_candidates` returned.
        k: coordinates to apply (clipped to the number of candidates).

    Returns:
        ``(indices, values)``: int64 coordinates in ascending order and their summed values.

    Raises:
        NonFiniteGradientError: the values hold NaN/Inf.
    """
    vals = Identity().decode(summed_values) if isinstance(summed_values, Payload) else summed_values
    vals = _float_tensor(vals, "select_topk").reshape(-1)
    if not isinstance(candidates, torch.Tensor) or vals.shape != candidates.reshape(-1).shape:
        raise InvalidParameterError(f"{vals.numel()} values do not match the candidates (a tensor of as many indices)")
    k = min(_count("k", k), vals.numel())
    check_finite(vals)
    top = torch.topk(vals.abs(), k, sorted=False).indices
    idx = candidates.reshape(-1).to(vals.device)[top]
    order = torch.argsort(idx)
    return idx[order], vals[top][order]


def with_sections(like: Payload, sections: Sequence[torch.Tensor]) -> Payload:
    """``like`` with its sections replaced, e.g. by the all_reduced table or values."""
    return Payload(like.codec_id, like.dtype, like.shape, like.params, tuple(sections), like.sparse)


@dataclass
class RoundsResult:
    """One tensor's step of :func:`sketched_rounds`: the applied coordinates and what was sent."""

    indices: torch.Tensor
    values: torch.Tensor
    candidates: torch.Tensor
    round1: list[Payload]
    round2: list[Payload]


class _SumInProcess:
    """The transport of :func:`run_sketched_sgd_step`: sums in worker order stand in for all_reduce."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    start = staticmethod(time.perf_counter)

    @staticmethod
    def stop(t0: float, phase: str) -> None:
        pass

    def all_reduce(self, entries: Sequence[tuple[str, int, Any]]) -> dict[str, dict[int, torch.Tensor]]:
        out: dict[str, dict[int, torch.Tensor]] = {}
        for kind, j, fn in entries:
            total = fn(0).clone()
            for i in range(1, self.workers):
                total += fn(i)
            out.setdefault(kind, {})[j] = total
        return out


def sketched_rounds(ctx: Any, workers: Sequence[Sequence[SketchedSGDWorker]], grads: Sequence[Sequence[torch.Tensor]],
                    keys: Sequence[str], ks: Sequence[int], Ps: Sequence[int], *, lr: float | None = None) -> list[RoundsResult]:
    """Algorithm 2 for a bucket of tensors on any transport; every local worker's state advances.

    ``workers[i][j]`` and ``grads[i][j]`` are local worker ``i``'s worker object and gradient for
    ``keys[j]``; ``ks[j]`` coordinates are applied, ``Ps[j] * ks[j]`` candidates fetched. ``ctx``
    sums over all workers: ``ctx.all_reduce(entries)`` takes ``(kind, j, fn(i) -> 1-D tensor)``
    entries and returns ``{kind: {j: sum}}`` (``round1`` = the sketch tables, ``round2`` = the
    candidates' exact values); ``ctx.start()`` / ``ctx.stop(t0, phase)`` measure ``encode`` and
    ``decode`` seconds. Candidate indices never travel: every worker computes them from the same sums.

    A step that raises (a gradient refused, a sum beyond float32, the transport) leaves every worker as it was.
    """
    n_local, n = len(workers), len(keys)
    if len(grads) != n_local or any(len(row) != n for row in (*workers, *grads)) or len(ks) != n or len(Ps) != n:
        raise InvalidParameterError(f"need {n} workers, gradients, ks and Ps per local worker, one per key")
    counts = [_count("k", k) for k in ks]
    nums = [_count("P", P) * k for P, k in zip(Ps, counts)]
    started: list[tuple[SketchedSGDWorker, str]] = []
    refused: GCBenchError | None = None  # a local worker's refusal, raised after the first collective
    try:
        t0 = ctx.start()
        round1: list[list[Payload]] = [[] for _ in range(n_local)]
        for i, j in ((i, j) for i in range(n_local) for j in range(n)):  # lines 4-6
            try:
                round1[i].append(workers[i][j].round1(grads[i][j], key=keys[j], lr=lr))
            except GCBenchError as err:
                refused = refused or err
                round1[i].append(_refused_table(workers[i][j], grads[i][j], err))
                continue
            started.append((workers[i][j], keys[j]))
        ctx.stop(t0, "encode")
        if any(len(p.sections) != 1 for row in round1 for p in row):
            raise StateError("a Sketched-SGD round-1 payload must hold exactly one section (the table)")
        tables = ctx.all_reduce([("round1", j, lambda i, j=j: round1[i][j].sections[0]) for j in range(n)])  # line 7
        if refused is not None:
            raise refused
        if any(bool(t.isnan().any()) for t in tables.get("round1", {}).values()):
            raise NonFiniteGradientError("the sum of the workers' sketches holds NaN: another worker's round 1 was "
                                         "refused (its error names why); no worker's state changed")
        ensure_finite(*tables.get("round1", {}).values(), what="the sum of the workers' sketches")
        t0 = ctx.start()
        cands = [select_candidates(with_sections(round1[0][j], [tables["round1"][j]]), nums[j],
                                   codec=workers[0][j].codec) for j in range(n)]  # line 8
        round2 = [[workers[i][j].round2(cands[j], key=keys[j]) for j in range(n)] for i in range(n_local)]  # line 9: exact values
        ctx.stop(t0, "encode")
        sums = ctx.all_reduce([("round2", j, lambda i, j=j: round2[i][j].sections[0]) for j in range(n)])
        ensure_finite(*sums.get("round2", {}).values(), what="the sum of the workers' candidate values")
        t0 = ctx.start()
        selected = [select_topk(sums["round2"][j], cands[j], counts[j]) for j in range(n)]  # line 9: top k of the exact sums
    except BaseException:
        for worker, key in reversed(started):
            worker.abort(key)
        raise
    out = []
    for j, (idx, vals) in enumerate(selected):
        for i in range(n_local):  # line 13
            workers[i][j].apply(idx, key=keys[j])
        out.append(RoundsResult(idx, vals, cands[j], [row[j] for row in round1], [row[j] for row in round2]))
    ctx.stop(t0, "decode")
    return out


def _refused_table(worker: SketchedSGDWorker, grad: object, err: GCBenchError) -> Payload:
    """What a worker whose round 1 was refused sends in the first collective: a table of NaN, of the
    shape and dtype its sketch of ``grad`` would have, so that every worker's sum holds NaN and every
    worker raises after the same collective (raising before it would leave the others waiting in it).
    Where no such table can be made (``grad`` is not a tensor), ``err`` itself is raised."""
    if not isinstance(grad, torch.Tensor) or grad.numel() == 0:
        raise err
    dtype = torch.float64 if grad.dtype == torch.float64 else torch.float32
    like = worker.codec.encode(torch.zeros(grad.numel(), dtype=dtype, device=grad.device))
    return with_sections(like, [torch.full_like(like.sections[0], math.nan)])


def run_sketched_sgd_step(workers: Sequence[SketchedSGDWorker], grads: Sequence[torch.Tensor], k: int, P: int = 1, *,
                          key: str = "", lr: float | None = None) -> SketchedSGDStep:
    """One step of Algorithm 2 for one tensor, all workers in this process (the reference).

    :func:`sketched_rounds` with summation standing in for all_reduce (lines 6-7 and 9). Every
    worker ends in the state a real run leaves it in.
    """
    if not workers or len(workers) != len(grads):
        raise InvalidParameterError(f"need one gradient per worker, got {len(workers)} workers and {len(grads)} gradients")
    params = workers[0].codec.params
    if any(w.codec.params != params for w in workers):
        raise InvalidParameterError("workers must share sketch parameters (same rows, columns, seed)")
    k, P = _count("k", k), _count("P", P)
    grads = [_float_tensor(g, "run_sketched_sgd_step") for g in grads]
    shape = grads[0].shape
    if any(g.shape != shape for g in grads):
        raise InvalidParameterError("all workers' gradients must have the same shape")
    (r,) = sketched_rounds(_SumInProcess(len(workers)), [[w] for w in workers], [[g] for g in grads], [key], [k], [P], lr=lr)
    update = torch.zeros(grads[0].numel(), dtype=r.values.dtype, device=r.values.device)
    update[r.indices] = r.values
    return SketchedSGDStep(update=update.reshape(shape), indices=r.indices, values=r.values, candidates=r.candidates,
                           round1_nbytes=[p.nbytes for p in r.round1], round2_nbytes=[p.nbytes for p in r.round2])


@dataclass(eq=False)
class SketchedSGD:
    """One worker's Sketched-SGD (Algorithm 2) as a gradient-exchange method of the execution layer.

    Not a :class:`~.base.Codec`: its two rounds are a protocol (``protocol = "rounds"``:
    :meth:`run_rounds` runs :func:`sketched_rounds` with the environment's all-reduce). Built by
    name ``"sketched-sgd"`` (:func:`gcbench.compressors.families.build`). Inside a DDP hook the
    worker runs with ``lr = 1``: its accumulator ``v`` holds raw gradients and the user's optimizer
    applies the learning rate (the same update as Algorithm 2's ``g~ = eta g + a`` for a constant
    ``eta``). It keeps its own error accumulation, so it is never wrapped in error feedback.

    Args:
        ratio: ``k = ceil(ratio * numel)`` coordinates applied per tensor and step.
        P: the second round fetches the exact values of ``P k`` candidates (Algorithm 2, line 8).
            The default 2 is only a default: with ``|S| ~ P k`` the paper derives ``P`` from the
            compression budget (§5.3, :func:`~.sizing.paper_sizing`), and small ``P`` diverges.
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

    protocol: ClassVar[str] = "rounds"
    linear: ClassVar[bool] = False
    stateful: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_ratio(self)
        self._require(isinstance(self.P, int) and not isinstance(self.P, bool) and 1 <= self.P < 1 << 63,
                      f"P must be an int in [1, 2^63), got {self.P!r}")
        self.worker = SketchedSGDWorker(
            rows=self.rows, columns=self.columns, compression=self.compression, seed=self.seed,
            momentum=_momentum(self.momentum), lr=1.0, momentum_stopping=True,
        )

    def _require(self, ok: bool, message: str) -> None:
        """Raise :class:`InvalidParameterError` unless ``ok`` (as :meth:`Codec._require <.base.Codec._require>`)."""
        if not ok:
            raise InvalidParameterError(f"{type(self).__name__}: {message}")

    @property
    def params(self) -> dict[str, Any]:
        """The method's parameters (as a codec's)."""
        return {"ratio": self.ratio, "P": self.P, "rows": self.rows, "columns": self.columns,
                "compression": self.compression, "seed": self.seed, "momentum": self.momentum}

    def k_for(self, numel: int) -> int:
        """Coordinates applied for a tensor of ``numel`` elements."""
        return max(1, min(numel, math.ceil(self.ratio * numel)))

    def reset_state(self) -> None:
        """Forget every key's momentum and accumulation."""
        self.worker.reset_state()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The worker's per-key state (for checkpoints)."""
        return self.worker.state_dict()

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict` output."""
        self.worker.load_state_dict(state)

    @classmethod
    def run_rounds(cls, ctx: Any, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
        """The mean update of each tensor (``ctx`` as in :meth:`gcbench.compressors.codecs.powersgd.PowerSGD.run_rounds`)."""
        n_local = len(grads)
        sk = [[ctx.codec(i, k) for k in keys] for i in range(n_local)]
        ks = [sk[0][j].k_for(g.numel()) for j, g in enumerate(grads[0])]
        results = sketched_rounds(ctx, [[c.worker for c in row] for row in sk], grads, keys, ks, [c.P for c in sk[0]])
        t0 = ctx.start()
        out = []
        for r, g in zip(results, grads[0]):
            update = torch.zeros(g.numel(), dtype=r.values.dtype, device=g.device)
            update[r.indices.to(g.device)] = r.values.to(g.device)
            out.append(saturating_cast((update / ctx.world_size).reshape(g.shape), g.dtype))
        ctx.stop(t0, "decode")
        return out


def _float_tensor(x: object, who: str) -> torch.Tensor:
    """``x`` detached, or :class:`UnsupportedInputError` unless it is a dense floating-point tensor with values."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.layout != torch.strided or x.is_meta:
        got = f"{x.dtype} {x.layout} tensor on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise UnsupportedInputError(f"{who} takes a dense floating-point torch.Tensor, got {got}")
    return x.detach()


def _count(what: str, value: object) -> int:
    """``value`` (an int, or an integral float) as an int >= 1, or :class:`InvalidParameterError`."""
    try:
        n = None if isinstance(value, (bool, str)) else operator.index(value)
    except TypeError:
        n = int(value) if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer() else None
    if n is None or n < 1:
        raise InvalidParameterError(f"{what} must be an int >= 1, got {value!r}")
    return n


def _real(what: str, value: object, ok: Callable[[float], bool], rule: str) -> float:
    """``value`` as a float, or :class:`InvalidParameterError` unless it is a number (not a bool) that is ``ok``."""
    x = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not ok(x):
        raise InvalidParameterError(f"{what} must be {rule}, got {value!r}")
    return x


_momentum = functools.partial(_real, "momentum", ok=lambda m: 0.0 <= m < 1.0, rule="a number in [0, 1)")
_learning_rate = functools.partial(_real, "lr", ok=lambda lr: math.isfinite(lr) and lr > 0.0, rule="a finite number > 0")


def _check_indices(idx: torch.Tensor, n: int, what: str) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.dtype not in (torch.int64, torch.int32):
        raise InvalidParameterError(f"{what} must be a 1-D int64 tensor")
    idx = idx.to(torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise InvalidParameterError(f"{what} must lie in [0, {n})")
    return idx


# --- the authors' top-k baseline --------------------------------------------------------------------


class AccumulatedTopK:
    """The authors' "true top-k" baseline: Sketched-SGD's accumulation with the exact top-k.

    Per step, on the summed (or mean) gradient ``g`` of all workers: ``u <- rho u + g`` (momentum
    inside the accumulation), ``v <- v + u``, the update is ``v`` at the ``k`` coordinates of largest
    ``|v|``, and ``u`` and ``v`` are zeroed there (momentum stopping). The paper attributes top-k's
    drop at large ``k`` to that zeroing. The optimizer then applies the update without momentum.

    Args:
        k: coordinates applied per step.
        momentum: ``rho`` in ``[0, 1)``.
    """

    def __init__(self, k: int, momentum: float = 0.0) -> None:
        self.k = _count("k", k)
        self.momentum = _momentum(momentum)
        self.u: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def step(self, grad: torch.Tensor) -> torch.Tensor:
        """Fold ``grad`` in and return the sparse update (shaped like ``grad``), in ``grad``'s dtype.

        Raises (no state touched):
            UnsupportedInputError: ``grad`` is not a dense floating-point tensor.
            NonFiniteGradientError: NaN/Inf in ``grad``; NumericOverflowError: ``u`` or ``v`` overflows its dtype.
            StateError: ``grad``'s size, dtype or device is not the accumulation's (see :meth:`reset_state`).
        """
        flat = _float_tensor(grad, "AccumulatedTopK.step").reshape(-1)
        check_finite(flat)
        if self.v is not None and (self.v.shape != flat.shape or self.v.dtype != flat.dtype or self.v.device != flat.device):
            raise StateError(f"AccumulatedTopK holds {self.v.numel()} {self.v.dtype} on {self.v.device}, "
                             f"got {flat.numel()} {flat.dtype} on {flat.device}; reset_state() starts anew")
        u0, v0 = (torch.zeros_like(flat),) * 2 if self.u is None or self.v is None else (self.u, self.v)
        u = torch.mul(u0, self.momentum).add_(flat)
        v = torch.add(v0, u)
        ensure_finite(v, what="AccumulatedTopK's momentum or accumulation")  # v is finite only where u is
        idx = torch.topk(v.abs(), min(self.k, flat.numel()), sorted=False).indices
        update = torch.zeros_like(flat)
        update.index_copy_(0, idx, v.index_select(0, idx))
        v.index_fill_(0, idx, 0.0)
        u.index_fill_(0, idx, 0.0)
        self.u, self.v = u, v
        return update.reshape(grad.shape)

    def reset_state(self) -> None:
        """Forget ``u`` and ``v``."""
        self.u = self.v = None

    def accumulator_norm(self) -> float:
        """``||v||`` (0 before the first step)."""
        return 0.0 if self.v is None else float(self.v.norm())

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``{"u", "v"}`` (empty before the first step)."""
        return {} if self.u is None else {"u": self.u.clone(), "v": self.v.clone()}  # type: ignore[union-attr]
