"""PowerSGD: rank-r compression by one step of power iteration with warm start.

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019 (Algorithm 1 "rank-r PowerSGD compression"; Sec. 3 warm start;
Algorithm 2 adds error feedback, which gcbench applies with
:class:`~.error_feedback.ErrorFeedback` or in the training loop, not inside this codec).

Matrix view (as in the paper and torch's ``powerSGD_hook``): a tensor of shape ``(n, *rest)`` is the
``n x m`` matrix ``M``, ``m = prod(rest)``. The effective rank is ``r = min(rank, n, m)``. Tensors
with fewer than two dimensions (biases, norms, scalars), and matrices where the factors would not
be smaller (``(n + m) r >= n m``), are sent uncompressed in their own dtype (the paper aggregates
vector-shaped parameters uncompressed, Algorithm 1's preamble).

Single-worker encode (what :meth:`PowerSGD.encode` does; float32 arithmetic, float64 for float64)::

    Q = state[key] if warm_start and present else N(0, 1)^{m x r} from the codec generator
    P = M Q                  # compute_p
    P = orthogonalize(P)     # orthogonalize_: orthonormal columns (QR, R's diagonal made >= 0)
    Q = M^T P                # compute_q
    state[key] = Q           # warm start: next call starts from this Q
    payload = [dims (n, m, r) int64, P (n r), Q (m r)];  decode = P Q^T

``decode(P, Q) = P P^T M``, the orthogonal projection of ``M``'s columns onto ``span(P)``, so the
codec is contractive; with warm start, repeated calls on a fixed ``M`` are subspace iteration and
converge to the best rank-r approximation (error -> the SVD tail ``sqrt(sum_{i>r} sigma_i^2)``
when ``sigma_r > sigma_{r+1}``). Unlike torch's hook, Q is not re-orthogonalized before ``P = M Q``
(Algorithm 1 does not; it changes nothing in exact arithmetic as ``span(M Q)`` is unchanged).

Payload sections: compressed ``[int64 (n, m, r), P float32 (n r), Q float32 (m r)]`` (float64 for
float64 input); uncompressed ``[int64 (numel, 1, 0), raw values in the input dtype]``: ``r = 0`` is
the flag. ``decode`` checks ``n m == numel``, ``r == min(n, m, rank)``, that the encoder would
have compressed (``(n + m) r < n m``), section dtypes and lengths, and finiteness.

Distributed protocol (for the execution layer; the codec itself is single-worker, so
``linear = False``). ``P`` and ``Q`` are each linear in ``M`` given the other, so two all-reduces
replace the payload exchange, exactly as torch's ``powerSGD_hook``::

    Q = warm-start Q (identical on every worker: same seed and same history)
    P_i = compute_p(M_i, Q);       P = all_reduce_mean(P_i)
    orthogonalize_(P)              # same P on every worker -> same orthonormal P
    Q_i = compute_q(M_i, P);       Q = all_reduce_mean(Q_i)   # = (mean_i M_i)^T P
    update = decompress(P, Q);     keep Q for the next step's warm start
    (error feedback: e_i = M_i - update, added to the next step's M_i)

The codec declares ``protocol = "rounds"``: :meth:`PowerSGD.run_rounds` is that protocol for a
bucket of tensors (the DDP hook and the simulated cluster call it with their collectives); it
splits the bucket into compressed and dense tensors (:func:`matrix_shape`, :func:`should_compress`),
all-reduces the dense ones with the ``P`` factors, and stores the all-reduced ``Q`` back as each
worker's warm start (:meth:`PowerSGD.set_warm_start`) so that workers stay in lockstep.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import torch

from ..base import FLOAT_DTYPES, Codec, Stage, check_seed, expect_sections, state_entries
from ..numerics import all_finite, all_finite_many, overflow_error, raise_if_non_finite, saturating_cast
from ..error_feedback import ErrorFeedback
from ..errors import CorruptPayloadError, NonFiniteGradientError, StateError
from ..wire.payload import Payload
from ..parallel.threads import single_thread


#: Tensors of at most this many elements are encoded and decoded on one intra-op thread when the
#: machine is busy (see :func:`single_thread_limit`). Why: each op on a matrix of a few MB takes
#: microseconds to a millisecond, but an OpenMP parallel region first wakes the pool's other
#: threads, and on shared cores the wake-up waits for a scheduler slice. Measured on the 2-core bench
#: machine at load 4.5-6 (ResNet-50 layer shapes, rank 4, encode + decode, median of interleaved
#: rounds, time / torch's hook math in the same run): widths / 8: 10.8x with every thread, 0.72x
#: with this rule at 2**18; full widths (25M): 0.86x at 2**18, 0.30x at 2**20.
SINGLE_THREAD_NUMEL_BUSY = 1 << 20
#: The same limit on a machine that is not busy. On the idle 2-core machine (load 1.2, the same
#: rows of ``gcbench bench -c powersgd``, two runs each) the busy rule cost a third more time:
#: 1.53-1.65x torch's time with every matrix up to 2**20 on one thread, 1.38-1.43x at 2**18,
#: 1.26-1.27x at 2**16 and 1.26-1.28x never. 2**16 keeps the smallest matrices (where the wake-up
#: outweighs the work whatever the load) on one thread.
SINGLE_THREAD_NUMEL_IDLE = 1 << 16
#: Busy: the 1-minute load average at least this many times the CPU count (at 1.3x, load 2.6 on
#: 2 cores, the busy rule changed nothing measurable).
BUSY_LOAD_PER_CPU = 2.0
_limit = os.environ.get("GCBENCH_POWERSGD_1T", "").strip()
#: ``GCBENCH_POWERSGD_1T`` sets the limit whatever the load (0: never single-thread); None where unset.
SINGLE_THREAD_NUMEL_FIXED: int | None = int(_limit) if _limit.isdigit() else None
#: Seconds a load reading is reused (one ``os.getloadavg`` per encode would be a system call per tensor).
_LOAD_TTL = 1.0
#: The last load reading, ``[when (time.monotonic), the limit then]``; a time more than
#: ``_LOAD_TTL`` back makes the next call read the load again.
load_reading: list[float] = [-_LOAD_TTL, 0.0]


def single_thread_limit() -> int:
    """The size up to which a tensor runs on one intra-op thread: ``GCBENCH_POWERSGD_1T`` when set,
    else :data:`SINGLE_THREAD_NUMEL_BUSY` while the 1-minute load average is at least
    :data:`BUSY_LOAD_PER_CPU` times the CPU count (read at most once a second), else
    :data:`SINGLE_THREAD_NUMEL_IDLE` (also where the load average cannot be read)."""
    if SINGLE_THREAD_NUMEL_FIXED is not None:
        return SINGLE_THREAD_NUMEL_FIXED
    now = time.monotonic()
    if now - load_reading[0] >= _LOAD_TTL:
        try:
            busy = os.getloadavg()[0] >= BUSY_LOAD_PER_CPU * (os.cpu_count() or 1)
        except OSError:
            busy = False
        load_reading[:] = [now, SINGLE_THREAD_NUMEL_BUSY if busy else SINGLE_THREAD_NUMEL_IDLE]
    return int(load_reading[1])


def threads_for(numel: int, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """One intra-op thread (:func:`~gcbench.compressors.parallel.threads.single_thread`) when ``numel``
    is at most :func:`single_thread_limit` on the CPU, else the configured threads (CUDA is not affected)."""
    return single_thread(device, device.type == "cpu" and numel <= single_thread_limit())


def matrix_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """``(shape[0], prod(shape[1:]))`` for tensors of two or more dimensions, else None."""
    if len(shape) < 2:
        return None
    return int(shape[0]), math.prod(int(d) for d in shape[1:])


def should_compress(n: int, m: int, rank: int) -> bool:
    """True when the rank-``min(rank, n, m)`` factors hold fewer numbers than the ``n x m`` matrix."""
    r = min(rank, n, m)
    return r >= 1 and (n + m) * r < n * m


def compute_p(matrix: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``P = M Q`` (``n x m`` times ``m x r``; batched ``(..., n, m)`` works too).

    Computed as ``(Q^T M^T)^T`` with ``Q^T`` made contiguous (``r m`` values; a no-op for the
    warm start :func:`compute_q` returns): the same sums, but the GEMM's skinny operand is the
    contiguous ``r x m`` one, up to 3x faster on the CPU (MKL) than ``M Q`` with a tall ``m x r``
    ``Q`` (ResNet-50's 256 x 2304 layers at rank 4, 2 threads: about 160 against 60 us; one encode
    of every layer of ResNet-50: 36.5 against 32 ms). The GEMM's rounding depends on the operands'
    layouts, so ``Q^T`` is always contiguous here: one layout, whatever layout ``Q`` arrives in.
    The result is an ``(n, r)`` view of an ``(r, n)`` contiguous tensor, the column-major layout
    LAPACK's QR (:func:`orthogonalize_`) works in.
    """
    return (q.transpose(-2, -1).contiguous() @ matrix.transpose(-2, -1)).transpose(-2, -1)


def compute_q(matrix: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``Q = M^T P`` (``m x n`` times ``n x r``) with ``P`` already orthonormal.

    Computed as ``(P^T M)^T``: the same sums, but the GEMM streams the row-major ``M`` row by row,
    about 2x faster on CPU (MKL) than ``M^T P``. The result is an ``(m, r)`` view of an ``(r, m)``
    contiguous tensor (``P = M Q`` with it as ``Q`` costs the same as with a contiguous one).
    """
    return (p.transpose(-2, -1) @ matrix).transpose(-2, -1)


def decompress(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``P Q^T``: the rank-r approximation (``n x m``)."""
    return p @ q.transpose(-2, -1)


def orthogonalize_(p: torch.Tensor) -> torch.Tensor:
    """Replace the columns of ``p`` (``(..., n, r)``, ``r <= n``) by an orthonormal basis, in place.

    Householder QR (LAPACK ``geqrf`` + ``orgqr``: what ``torch.linalg.qr``, reduced, runs) with
    column signs chosen so that ``R`` has a
    non-negative diagonal: for a full-column-rank ``p`` this is exactly classical Gram-Schmidt's
    result (what torch's ``_orthogonalize`` computes for ``r <= 2``). Rank-deficient or zero
    columns still come out orthonormal (QR completes the basis), so ``P P^T M`` stays a projection
    and no epsilon is needed. fp16/bf16 inputs are orthogonalized in float32. Returns ``p``.
    """
    if p.shape[-1] > p.shape[-2]:
        raise ValueError(f"cannot orthogonalize {p.shape[-1]} columns of length {p.shape[-2]}")
    work = p if p.dtype in (torch.float32, torch.float64) else p.float()
    # torch.linalg.qr(mode="reduced") is exactly geqrf + householder_product (orgqr), plus a triu
    # for R that we do not need: R's diagonal is the diagonal geqrf leaves in place. Calling the
    # two LAPACK steps directly gives bit-identical Q and skips triu, whose CPU kernel opens an
    # OpenMP parallel region even for a 4 x 4 R (a whole scheduler slice when the cores are busy).
    a, tau = torch.geqrf(work)
    q = torch.linalg.householder_product(a, tau)
    # -1 where R's diagonal is negative, else +1 (a zero diagonal keeps its column), written into p
    # by one multiplication (exact: each value times +-1)
    sign = torch.where(torch.diagonal(a, dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(q.dtype)
    torch.mul(q, sign.unsqueeze(-2), out=p)
    return p


def _require_finite(codec: Codec, values: torch.Tensor) -> None:
    """Raise the decode's error for NaN or Inf in ``values``."""
    if not all_finite(values):
        raise _non_finite(codec)


def _non_finite(codec: Codec) -> CorruptPayloadError:
    """The decode's error for a payload whose values, or whose factors, are not all finite."""
    return CorruptPayloadError(f"{type(codec).__name__} payload decodes to non-finite values (no encoder writes them)")


def _factors_bounded(codec: Codec, p: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether ``P Q^T`` (``r`` columns each) cannot overflow float32: P and Q finite (else the
    decode's error; ``amax`` propagates NaN) and ``r max|P| max|Q|`` below half the float32 maximum."""
    mp, mq = torch.stack((p.abs().amax(), q.abs().amax())).tolist()  # one read back (one sync on a GPU)
    if not (math.isfinite(mp) and math.isfinite(mq)):
        raise _non_finite(codec)
    return p.shape[-1] * mp * mq < _HALF_F32_MAX


#: Half the largest float32: a bound on ``|P Q^T|`` below it leaves room for the GEMM's rounding.
_HALF_F32_MAX = torch.finfo(torch.float32).max / 2


#: What :func:`overflow_error` names for an overflow of PowerSGD's products.
_ITERATION = "PowerSGD's power iteration"


def _products_bounded(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[bool]:
    """For each finite ``(P, Q)``, whether ``P Q^T`` cannot overflow ``P``'s dtype: ``r max|P| max|Q|``
    below half its largest value (room for the GEMM's rounding); one read-back for all pairs."""
    if not pairs:
        return []
    maxes = torch.stack([t.abs().amax().double() for pair in pairs for t in pair]).tolist()
    return [
        p.shape[-1] * maxes[2 * k] * maxes[2 * k + 1] < torch.finfo(p.dtype).max / 2 for k, (p, _) in enumerate(pairs)
    ]


def _rounds_failure(
    grads: Sequence[Sequence[torch.Tensor]],
    matrices: Sequence[Mapping[int, torch.Tensor]],
    factors: Sequence[Mapping[int, torch.Tensor]],
    dense: Sequence[int],
    mats: Sequence[int],
) -> NonFiniteGradientError:
    """The error of a :meth:`PowerSGD.run_rounds` call whose all-reduced sums hold NaN or Inf: a local
    worker's own (the input's :class:`NonFiniteGradientError`, as ``encode`` raises it, or the
    :class:`NumericOverflowError` of its error-feedback correction or of its factor ``factors[i][j]``),
    else one naming the sum (another worker's gradients, or the sum itself beyond its dtype's range)."""
    for i, row in enumerate(grads):
        for j in [*dense, *mats]:
            try:
                raise_if_non_finite(row[j])
            except NonFiniteGradientError as err:
                return err
        for j in mats:
            if not all_finite(matrices[i][j]):
                return overflow_error("the error-feedback correction (gradient + residual)", matrices[i][j].dtype)
            if not all_finite(factors[i][j]):
                return overflow_error(_ITERATION, factors[i][j].dtype)
    return NonFiniteGradientError(
        "PowerSGD's all-reduced factors or dense tensors hold non-finite values (NaN/Inf): a worker's "
        "gradients held NaN or Inf, or their sum exceeds its dtype's range; nothing was aggregated "
        "and no state was changed"
    )


@dataclass(eq=False)
class PowerSGD(Codec):
    """Rank-``rank`` PowerSGD compression of the ``shape[0] x rest`` matrix view, with warm start.

    ``rank``: target rank (clipped to ``min(n, m)``); ``warm_start``: reuse the previous call's Q
    per ``key`` (Sec. 3 of the paper; otherwise a fresh Gaussian Q each call); ``seed``: the
    generator for initial Qs.
    """

    rank: int = 4
    seed: int = 0
    warm_start: bool = True

    codec_id: ClassVar[int] = 30
    protocol: ClassVar[str] = "rounds"
    stochastic: ClassVar[bool] = True
    stateful: ClassVar[bool] = True
    contractive: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    decodes_finite: ClassVar[bool] = True
    #: P and Q are proved finite by :meth:`_encode`'s check of Q (a NaN or Inf in P reaches Q); an
    #: uncompressed tensor's section is the input, which :meth:`encode` checked.
    encodes_finite: ClassVar[bool] = True
    no_kernel_reason: ClassVar[str] = (
        "its work is two matrix products and an orthogonalisation per tensor, each already one library "
        "call (BLAS/LAPACK); there is no chain of elementwise passes to fuse"
    )
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("rank-r power iteration (P = orth(M Q), Q = M^T P)", lossless=False),
        Stage("P and Q as float32", lossless=True),
    )
    reference: ClassVar[str] = (
        "Vogels, Karimireddy & Jaggi, PowerSGD: Practical Low-Rank Gradient Compression, NeurIPS 2019 (Algorithm 1)"
    )

    _q: dict = field(default_factory=dict, init=False, repr=False)
    _shape: tuple | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        r = self.rank
        self._require(isinstance(r, int) and not isinstance(r, bool), f"rank must be an int, got {r!r}")
        self._require(1 <= r <= 1 << 20, f"rank must be in 1..2**20, got {r}")
        check_seed(self)
        self._require(isinstance(self.warm_start, bool), f"warm_start must be a bool, got {self.warm_start!r}")

    # The matrix view needs the tensor's shape, which Codec._encode does not receive.
    def encode(self, tensor: torch.Tensor, *, key: str | None = None, generator: torch.Generator | None = None):
        """Encode ``tensor`` (see :meth:`Codec.encode`); its shape decides the matrix view."""
        self._shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else None
        try:
            if not isinstance(tensor, torch.Tensor):
                return super().encode(tensor, key=key, generator=generator)
            # The contract's own passes (finiteness checks) are small ops too: same thread rule.
            with threads_for(tensor.numel(), tensor.device):
                return super().encode(tensor, key=key, generator=generator)
        finally:
            self._shape = None

    def decode(
        self,
        payload: Payload,
        *,
        device: torch.device | str | None = None,
        max_numel: int | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decode ``payload`` (see :meth:`Codec.decode`), small matrices on one thread (:func:`threads_for`)."""
        if not (isinstance(payload, Payload) and payload.sections and all(isinstance(d, int) for d in payload.shape)):
            return super().decode(payload, device=device, max_numel=max_numel, out=out)  # it raises the typed error
        try:
            dev = torch.device(device) if device is not None else payload.device
        except (RuntimeError, TypeError):
            return super().decode(payload, device=device, max_numel=max_numel, out=out)
        with threads_for(payload.numel, dev):
            return super().decode(payload, device=device, max_numel=max_numel, out=out)

    def checks_finite(self, x: torch.Tensor) -> bool:
        """A matrix it compresses: its Q is the finiteness check (see :meth:`_encode`), which spares
        :meth:`encode` a pass over the whole matrix (a fifth of the encode's time over ResNet-50's
        layers). Other tensors travel as they are, and :meth:`encode` checks them."""
        dims = matrix_shape(self._shape) if self._shape is not None else None
        return dims is not None and should_compress(dims[0], dims[1], self.rank)

    def _encode(self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None) -> Sequence[torch.Tensor]:
        n_el = x.numel()
        dims = matrix_shape(self._shape) if self._shape is not None else None
        if dims is None or not should_compress(dims[0], dims[1], self.rank):
            return torch.tensor([n_el, 1, 0], dtype=torch.int64, device=x.device), x
        n, m = dims
        r = min(self.rank, n, m)
        wd = torch.float64 if x.dtype == torch.float64 else torch.float32
        mat = x.view(n, m).to(wd)
        name = "" if key is None else key
        q = self._q.get(name) if self.warm_start else None
        if q is None:
            gen = generator if generator is not None else self.generator(x.device)
            q = torch.randn(m, r, generator=gen, device=x.device, dtype=wd)
        elif q.shape != (m, r) or q.device != x.device or q.dtype != wd:
            raise StateError(
                f"PowerSGD warm-start Q for {name!r} is {tuple(q.shape)} {q.dtype} on {q.device}; "
                f"this tensor needs ({m}, {r}) {wd} on {x.device}"
            )
        p = orthogonalize_(compute_p(mat, q))
        q = compute_q(mat, p)
        # Before the warm start is stored. Q alone suffices, and it is also the input's finiteness
        # check (checks_finite): a NaN or Inf in P (m >= 1) reaches every entry of its column of
        # Q = M^T P, and one in M every entry of its row of Q, whatever P holds (NaN * x and Inf * 0
        # are NaN, Inf * x is Inf; the GEMM multiplies by M's entries, it never skips them). Only then
        # is the input scanned, to name the error: the input's NaN/Inf, or the iteration's overflow.
        if not all_finite(q):
            raise_if_non_finite(x)
            raise overflow_error("PowerSGD's power iteration", wd)
        if self.warm_start:
            self._q[name] = q
        header = torch.tensor([n, m, r], dtype=torch.int64, device=x.device)
        return header, p.reshape(-1), q.reshape(-1)  # q is a transposed view: reshape copies (m r)

    def _checked(self, sections: tuple[torch.Tensor, ...], numel: int) -> tuple[int, int, int]:
        """``(n, m, r)`` of a payload's sections, checked against ``numel`` and this codec's rank."""
        if not sections or sections[0].dtype != torch.int64 or sections[0].numel() != 3:
            raise CorruptPayloadError("PowerSGD payload must start with an int64 (n, m, r) section")
        n, m, r = (int(v) for v in sections[0].tolist())
        if r == 0:  # the uncompressed flag
            if (n, m) != (numel, 1):
                raise CorruptPayloadError(f"PowerSGD uncompressed header ({n}, {m}, 0) does not match {numel} elements")
            vd = sections[1].dtype if len(sections) == 2 and sections[1].dtype in FLOAT_DTYPES else torch.float32
            expect_sections(self, sections, [(torch.int64, 3), (vd, numel)])
        else:
            if not (n >= 1 and m >= 1 and n * m == numel):
                raise CorruptPayloadError(f"PowerSGD matrix {n} x {m} does not hold {numel} elements")
            if not (r == min(n, m, self.rank) and should_compress(n, m, r)):
                raise CorruptPayloadError(f"PowerSGD rank {r} is impossible for a {n} x {m} matrix at rank={self.rank}")
            ok = len(sections) == 3 and sections[1].dtype in (torch.float32, torch.float64)
            vd = sections[1].dtype if ok else torch.float32
            expect_sections(self, sections, [(torch.int64, 3), (vd, n * r), (vd, m * r)])
        return n, m, r

    # The decodes are finite (``decodes_finite``) by a check of the factors, not of the n x m result:
    # for finite P and Q, every entry of P Q^T is at most r max|P| max|Q| in magnitude, and the
    # float32 GEMM's rounding adds at most a factor 1 + r 2^-24 to its partial sums; below half the
    # float32 maximum no entry can overflow. Only factors beyond that bound (no encoder writes them:
    # P is orthonormal) have the result checked.
    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        n, m, r = self._checked(sections, numel)
        if r == 0:
            _require_finite(self, sections[1])
            return sections[1]
        p, q = sections[1].view(n, r), sections[2].view(m, r)
        safe = _factors_bounded(self, p, q)
        result = decompress(p, q).reshape(-1)
        if not safe:
            _require_finite(self, result)
        return result

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        """:meth:`_decode` written into ``out``: float32 ``P Q^T`` by one GEMM straight into the
        caller's buffer (the product :func:`decompress` computes, the same call and layout), not a new
        matrix copied in afterwards (that copy cost twice the GEMM over ResNet-50's layers)."""
        n, m, r = self._checked(sections, numel)
        if r == 0:
            _require_finite(self, sections[1])
            out.copy_(sections[1])
            return
        p, q = sections[1].view(n, r), sections[2].view(m, r)
        safe = _factors_bounded(self, p, q)
        if p.dtype == torch.float32:
            torch.mm(p, q.t(), out=out.view(n, m))
        else:
            out.copy_(decompress(p, q).reshape(-1))
        if not safe:
            _require_finite(self, out)

    # -- state -------------------------------------------------------------------------------------

    def set_warm_start(self, key: str | None, q: torch.Tensor) -> None:
        """Store ``q`` (``m x r``) as the warm start for ``key`` (e.g. the all-reduced Q of a DDP step)."""
        self._q["" if key is None else key] = q.detach().clone()

    def get_warm_start(self, key: str | None) -> torch.Tensor | None:
        """The warm-start ``Q`` kept for ``key`` (None when there is none)."""
        return self._q.get("" if key is None else key)

    def drop_warm_start(self, key: str | None) -> None:
        """Forget ``key``'s warm start (its next call draws a fresh ``Q``)."""
        self._q.pop("" if key is None else key, None)

    def reset_state(self) -> None:
        """Forget every warm-start Q and restart the random sequence."""
        super().reset_state()
        self._q.clear()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``q/<key>`` warm-start matrices and ``rng/<device>`` generator states (copies)."""
        out = {f"q/{k}": t.clone() for k, t in self._q.items()}
        out.update(super().state_dict())  # the generators
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the state with one saved by :meth:`state_dict` (tensors are copied)."""
        state = state_entries(state, "PowerSGD")
        unknown = [k for k in state if not k.startswith(("q/", "rng/"))]
        bad = [k for k, t in state.items() if k.startswith("q/") and (t.dim() != 2 or not t.is_floating_point())]
        if unknown or bad:
            raise StateError(f"not a PowerSGD state dict (unknown keys {unknown[:3]}, non-matrix Q {bad[:3]})")
        super().load_state_dict(state)  # its rng/ entries: the generators, or StateError
        self._q = {k[2:]: t.clone() for k, t in state.items() if k.startswith("q/")}

    # -- the distributed protocol --------------------------------------------------------------------

    @classmethod
    def run_rounds(cls, ctx: Any, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
        """Algorithm 1 distributed over a bucket (see the module docstring): the mean update per key.

        ``grads[i][j]`` is local worker ``i``'s gradient of tensor ``keys[j]``. ``ctx`` is the
        execution layer's side: ``ctx.codec(i, key)`` (worker ``i``'s codec, maybe wrapped in
        error feedback), ``ctx.generator(i, key, device)`` (seeded from the codec seed and the
        key: the same on every worker), ``ctx.all_reduce(entries)`` (``(kind, j, fn(i) -> 1-D
        tensor)`` entries summed over all workers, one flat tensor per dtype; returns
        ``{kind: {j: sum}}``), ``ctx.world_size`` and ``ctx.start()`` / ``ctx.stop(t0, phase)``
        (measured seconds). The first round all-reduces the ``P`` factors with the tensors sent as
        they are (``factor_p`` and ``dense`` traffic), the second the ``Q`` factors (``factor_q``).
        With error feedback the residual is ``M_i - P Q^T / W`` (torch's ``powerSGD_hook`` and the
        authors' code use the aggregated approximation the same way); uncompressed tensors travel
        exactly and keep no residual (torch's hook keeps ``M_i - mean`` for them, a difference).

        Bad input follows the finite-input policy of :meth:`Codec.encode`, on every worker alike: the
        sums each round receives, the orthogonalized ``P``, the mean ``Q``, the update and every new
        residual are checked before any warm start or residual is stored, and a failed call leaves the
        generators it drew from as they were.

        Raises:
            NonFiniteGradientError: a worker's gradients hold NaN or Inf (a local worker's input: the
                error ``encode`` raises for it), or the all-reduced sums do.
            NumericOverflowError: finite gradients whose error-feedback correction, factors, update or
                new residual overflow the working precision. Every check but the last reads values
                all workers share (the sums), so every worker raises alike; the new residual is each
                worker's own and is checked after the second collective, so on real ranks a worker
                whose residual overflows raises while the others store their step.
        """
        n_local = len(grads)
        W = ctx.world_size
        codecs = [[ctx.codec(i, k) for k in keys] for i in range(n_local)]
        inner = [[c.codec if isinstance(c, ErrorFeedback) else c for c in row] for row in codecs]
        device = grads[0][0].device
        dims: dict[int, tuple[int, int, int]] = {}
        dense = []
        for j, g in enumerate(grads[0]):
            rank = int(inner[0][j].rank)
            shape = matrix_shape(tuple(g.shape))
            if shape is not None and should_compress(shape[0], shape[1], rank):
                dims[j] = (shape[0], shape[1], min(rank, shape[0], shape[1]))
            else:
                dense.append(j)
        mats = sorted(dims)
        t0 = ctx.start()
        # M_i = g_i (+ residual). With a residual, M_i is written into the buffer of the residual it
        # replaced last step (ErrorFeedback.take_spare), and the new residual into M_i's own buffer
        # below: no new full-size memory per step, whose page faults cost more than the additions.
        matrices: list[dict[int, torch.Tensor]] = []
        owned: set[tuple[int, int]] = set()  # (i, j) whose M_i is a buffer of this protocol's, not g_i
        taken: list[tuple[ErrorFeedback, str, torch.Tensor]] = []  # spares given back if the call fails
        drawn: dict[int, tuple[torch.Generator, torch.Tensor]] = {}  # generators drawn from: their states before
        try:
            for i in range(n_local):
                row = {}
                for j in mats:
                    n, m, _ = dims[j]
                    wd = torch.float64 if grads[i][j].dtype == torch.float64 else torch.float32
                    mat = grads[i][j].detach().reshape(n, m).to(wd)
                    ef = codecs[i][j] if isinstance(codecs[i][j], ErrorFeedback) else None
                    res = ef.residual(keys[j]) if ef is not None else None
                    if res is None:
                        row[j] = mat
                    else:
                        buf = ef.take_spare(keys[j], n * m, wd, mat.device)
                        if buf is not None:
                            taken.append((ef, keys[j], buf))
                        row[j] = torch.add(mat, res.reshape(n, m).to(wd), out=None if buf is None else buf.view(n, m))
                        owned.add((i, j))
                matrices.append(row)
            qs: list[dict[int, torch.Tensor]] = []  # warm-start Q: identical on every worker
            for i in range(n_local):
                row = {}
                for j in mats:
                    _, m, r = dims[j]
                    mat = matrices[i][j]
                    q = inner[i][j].get_warm_start(keys[j]) if inner[i][j].warm_start else None
                    if q is None or q.shape != (m, r) or q.dtype != mat.dtype or q.device != mat.device:
                        gen = ctx.generator(i, keys[j], device)
                        if id(gen) not in drawn:
                            drawn[id(gen)] = (gen, gen.get_state())
                        q = torch.randn(m, r, generator=gen, device=device, dtype=mat.dtype)
                    row[j] = q
                qs.append(row)
            ps = [{j: compute_p(matrices[i][j], qs[i][j]) for j in mats} for i in range(n_local)]
            ctx.stop(t0, "encode")
            entries = [("dense", j, lambda i, j=j: grads[i][j].reshape(-1)) for j in dense] + [
                ("factor_p", j, lambda i, j=j: ps[i][j].reshape(-1)) for j in mats
            ]
            # A worker whose gradients hold NaN or Inf still takes part in the first collective (raising
            # before it would leave the others waiting): its P (every row of P = M Q that meets a
            # NaN or Inf of M) or its dense tensor carries the value into the sums, which every worker
            # receives alike, so every worker raises at the same point, before any state is stored.
            first = ctx.all_reduce(entries)
            if not all_finite_many([*first.get("dense", {}).values(), *first.get("factor_p", {}).values()]):
                raise _rounds_failure(grads, matrices, ps, dense, mats)
            t0 = ctx.start()
            p_hat = {j: orthogonalize_(first["factor_p"][j].reshape(dims[j][0], dims[j][2]).clone()) for j in mats}
            if not all_finite_many(list(p_hat.values())):
                raise overflow_error(_ITERATION, next(iter(p_hat.values())).dtype)
            q_local = [{j: compute_q(matrices[i][j], p_hat[j]) for j in mats} for i in range(n_local)]
            ctx.stop(t0, "encode")
            second = ctx.all_reduce([("factor_q", j, lambda i, j=j: q_local[i][j].reshape(-1)) for j in mats]) if mats else {}
            t0 = ctx.start()
            out: list[torch.Tensor | None] = [None] * len(keys)
            for j in dense:
                out[j] = (first["dense"][j] / W).reshape(grads[0][j].shape).to(grads[0][j].dtype)
            q_means = {j: second["factor_q"][j].reshape(dims[j][1], dims[j][2]) / W for j in mats}
            if not all_finite_many(list(q_means.values())):
                raise _rounds_failure(grads, matrices, q_local, [], mats)
            approxes: dict[int, torch.Tensor] = {}
            for j, bounded in zip(mats, _products_bounded([(p_hat[j], q_means[j]) for j in mats])):
                approx = decompress(p_hat[j], q_means[j])
                if not bounded and not all_finite(approx):
                    raise overflow_error(_ITERATION, approx.dtype)
                approxes[j] = approx
                # a float16/bfloat16 gradient's update saturates at its dtype's largest value
                out[j] = saturating_cast(approx.reshape(grads[0][j].shape), grads[0][j].dtype)
            # every worker's new residual is known to be finite before any state is stored
            residuals: list[tuple[ErrorFeedback, str, torch.Tensor]] = []
            for j in mats:
                for i in range(n_local):
                    ef = codecs[i][j]
                    if isinstance(ef, ErrorFeedback):
                        mat = matrices[i][j]
                        new_res = torch.sub(mat, approxes[j], out=mat if (i, j) in owned else None)
                        residuals.append((ef, keys[j], new_res.reshape(grads[i][j].shape)))
            if not all_finite_many([r for _, _, r in residuals]):
                raise overflow_error("the new error-feedback residual", residuals[0][2].dtype)
        except BaseException:  # a typed refusal, or a failed collective: the random draws and spares as they were
            for gen, state in drawn.values():
                gen.set_state(state)
            for ef, key, buf in taken:
                ef.spares.setdefault(key, buf)
            raise
        for j in mats:
            for i in range(n_local):
                if inner[i][j].warm_start:
                    inner[i][j].set_warm_start(keys[j], q_means[j])
        for ef, key, new_res in residuals:
            ef.set_residual(key, new_res, keep_old=True)
        ctx.stop(t0, "decode")
        return out  # type: ignore[return-value]
