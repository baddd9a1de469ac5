"""The hashes of a Count Sketch: exact polynomial hashes mod 2^61 - 1, compact tables, their cache.

The hash family is the one documented in :mod:`~gcbench.compressors.codecs.countsketch.codec` (CSVec's, Ivkin et al. NeurIPS 2019):
row ``j`` maps coordinate ``i`` to the bucket ``h_j(i) = ((a_j i + b_j) mod p) mod c`` and the sign
``s_j(i) = +1`` if ``(((e3 i + e2) i + e1) i + e0) mod p`` is odd, else ``-1``. A sketch uses them
as int *codes* ``2 * bucket + (sign < 0)`` (indexes into the interleaved ``[t, -t]`` table).

Holding every code costs ``4 r d`` bytes (5x a float32 input for ``r = 5``), and recomputing the
degree-3 sign polynomial costs a dozen int64 passes per row and coordinate. :class:`HashTables`
holds instead what makes a code cheap to rebuild, exactly, for any coordinate range:

* the bucket hash is affine, so for ``i = hi * B + lo`` (``B = 2^16``),
  ``(a i + b) mod p = (u[hi] + v[lo]) mod p`` with ``u[hi] = a hi B mod p`` and
  ``v[lo] = (a lo + b) mod p``; the sum wraps (``>= p``) iff ``v[lo] >= p - u[hi]``, and then
  ``bucket = (u[hi] mod c + v[lo] mod c - wrap * (p mod c)) mod c``. Per row: a ``B``-entry table
  over ``lo`` and a ``ceil(d / B)``-entry table over ``hi``, a few kB to MB, whatever ``d``;
* the sign is not affine, so its bit is computed once and stored packed: ``ceil(r / 8)`` bytes per
  coordinate (0.25x a float32 input for ``r <= 8``).

Rebuilding a block of codes is then a compare, a select, two adds and a conditional subtraction
(int32 when ``4c < 2^31``) plus the unpacked sign bit: integer arithmetic, so the codes are equal
to :func:`compute_codes` (the direct evaluation, kept as the reference) bit for bit. On the CPU
the eager rebuild runs these passes in numpy (vectorised int32, the GIL released), one row and
block at a time; elsewhere, or for int64 codes, in torch.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ...kernels import countsketch as fused_sketch
from ...errors import InvalidParameterError
from ...kernels.core import use_compiled
from ...kernels.native import use_native
from .modp import PRIME, addmod, fold, mul_lazy, mulmod, mulmod_small

#: Coordinates per block of the bucket tables (``i = hi * BLOCK + lo``).
BLOCK_BITS = 16
BLOCK = 1 << BLOCK_BITS
#: Coordinates per block when hash polynomials are evaluated: r x this int64 temporaries, small
#: enough that torch runs each op on one core (intra-op threads do not pay off on such short ops).
HASH_BLOCK = 1 << 12
#: Coordinates per thread-pool task when the C kernel evaluates the sign hashes (a few ms each).
NEGBITS_C_BLOCK = 1 << 16
#: Default byte budget of a codec's cache of hash tables (:class:`HashCodeCache`).
HASH_CACHE_MAX_BYTES = 2 << 30


def hash_block(coef: torch.Tensor, tokens: torch.Tensor, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucket (int64) and sign polynomial value (int64 in [0, p)) of ``tokens`` for every row.

    ``tokens < 2^31``: Horner steps multiply by the token only, so the cheaper lazily reduced
    product is used and each polynomial is fully reduced once at the end (``fold``).
    """
    x = tokens.reshape(1, -1)
    bucket = torch.remainder(fold(mul_lazy(coef[:, 0:1], x) + coef[:, 1:2]), columns)
    return bucket, _sign_raw(coef, x)


def _sign_raw(coef: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The sign polynomial mod p of ``x`` (``(1, n)``, values ``< 2^31``) for every row."""
    e3, e2, e1, e0 = (coef[:, j : j + 1] for j in range(2, 6))
    acc = mul_lazy(e3, x) + e2  # < 2^62 + 2: Horner for the degree-3 sign polynomial
    acc = mul_lazy(acc, x) + e1
    return fold(mul_lazy(acc, x) + e0)


def hash_block_exact(coef: torch.Tensor, tokens: torch.Tensor, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`hash_block` for any token ``< p`` (general 61-bit products; slower)."""
    x = tokens.reshape(1, -1)
    bucket = torch.remainder(addmod(mulmod(coef[:, 0:1], x), coef[:, 1:2]), columns)
    return bucket, _sign_raw_exact(coef, x)


def _sign_raw_exact(coef: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    e3, e2, e1, e0 = (coef[:, j : j + 1] for j in range(2, 6))
    acc = addmod(mulmod(e3, x), e2)
    acc = addmod(mulmod(acc, x), e1)
    return addmod(mulmod(acc, x), e0)


_POOL: tuple[int, int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def thread_pool() -> ThreadPoolExecutor | None:
    """A process-wide pool of ``min(4, torch.get_num_threads())`` threads (None with one thread).

    bincount/index_add_ and the short hash ops run on one core; the rows and halves of a sketch are
    independent, so they run side by side. The pool is rebuilt after a fork (threads do not survive one).
    """
    global _POOL
    n = min(4, torch.get_num_threads())
    if n < 2:
        return None
    with _POOL_LOCK:
        if _POOL is None or _POOL[:2] != (os.getpid(), n):
            _POOL = (os.getpid(), n, ThreadPoolExecutor(max_workers=n, thread_name_prefix="countsketch"))
        return _POOL[2]


def _spans(n: int, step: int, device: torch.device, run: Callable[[tuple[int, int]], None]) -> None:
    """``run`` over ``[0, n)`` in contiguous spans, on the thread pool for long CPU ranges."""
    pool = thread_pool() if device.type == "cpu" and n >= 16 * step else None
    if pool is None:
        run((0, n))
        return
    k = _POOL[1] if _POOL is not None else 1
    cuts = [(i * n // k) // step * step for i in range(k)] + [n]
    list(pool.map(run, list(zip(cuts[:-1], cuts[1:]))))


def compute_codes(
    d: int, columns: int, coef: torch.Tensor, device: torch.device, first: int = 0, last: int | None = None
) -> torch.Tensor:
    """int32 ``(r, last - first)`` codes ``2 * bucket + (sign < 0)`` of coordinates ``first..last-1``
    (default: all ``d``), evaluated directly from the polynomials (the reference for :class:`HashTables`)."""
    r = coef.shape[0]
    last = d if last is None else last
    codes = torch.empty((r, last - first), dtype=torch.int32, device=device)
    coef_d = coef.to(device)
    block = hash_block if d <= (1 << 31) else hash_block_exact
    step = HASH_BLOCK if device.type == "cpu" else 1 << 22  # few large kernels on an accelerator

    def run(span: tuple[int, int]) -> None:
        for start in range(span[0], span[1], step):
            end = min(span[1], start + step)
            tokens = torch.arange(first + start, first + end, dtype=torch.int64, device=device)
            bucket, raw = block(coef_d, tokens, columns)
            # CSVec's sign convention: (h mod p) odd -> +1, even -> -1; the code stores "negative".
            codes[:, start:end] = (bucket * 2 + 1 - (raw & 1)).to(torch.int32)

    _spans(last - first, step, device, run)
    return codes


def negative_flags(
    d: int, coef: torch.Tensor, device: torch.device, first: int, last: int, *, threads: bool = True,
    packed: bool = False,
) -> torch.Tensor:
    """uint8 ``(r, last - first)``: 1 where the sign of coordinate ``first + t`` is -1, else 0.

    ``packed``: ``(ceil(r / 8), last - first)`` instead, row ``j``'s flag in bit ``j % 8`` of byte
    row ``j // 8`` (built block by block: no ``(r, d)`` temporary). ``threads=False`` from inside
    the thread pool's own tasks (waiting on it there could deadlock).
    """
    r = coef.shape[0]
    out = torch.zeros((-(-r // 8) if packed else r, last - first), dtype=torch.uint8, device=device)
    if device.type == "cpu" and use_native(fused_sketch.SIGNS_C):  # one exact pass of C per span
        coef_c = coef.to(device="cpu", dtype=torch.int64).contiguous()
        step = NEGBITS_C_BLOCK

        def run(span: tuple[int, int]) -> None:
            fused_sketch.negbits_c(coef_c, first + span[0], out[:, span[0] : span[1]], packed=packed)

    else:
        coef_d = coef.to(device)
        sign = _sign_raw if d <= (1 << 31) else _sign_raw_exact
        step = HASH_BLOCK if device.type == "cpu" else 1 << 22

        def run(span: tuple[int, int]) -> None:
            for start in range(span[0], span[1], step):
                end = min(span[1], start + step)
                x = torch.arange(first + start, first + end, dtype=torch.int64, device=device).reshape(1, -1)
                flags = torch.bitwise_xor(sign(coef_d, x) & 1, 1).to(torch.uint8)
                if not packed:
                    out[:, start:end] = flags
                    continue
                for j in range(r):  # r <= 64 rows, not elements
                    out[j // 8, start:end] |= flags[j] << (j % 8)

    if threads:
        _spans(last - first, step, device, run)
    else:
        run((0, last - first))
    return out


class HashTables:
    """Everything needed to rebuild the codes of a ``(d, c, r, seed)`` sketch exactly (module docstring).

    Args:
        d, c: vector length and columns.
        coef: the ``(r, 6)`` hash coefficients.
        device: where the tables live.
        signs: store the packed sign bits (``ceil(r/8) * d`` bytes); without them the sign
            polynomial is evaluated on every :meth:`codes` call (memory-bounded, slower).
        full: also hold every int32 code (:attr:`full`, ``4 r d`` bytes: 5x a float32 input at
            ``r = 5``), for callers that trade that memory for speed (``hold_codes``).
    """

    def __init__(
        self, d: int, c: int, coef: torch.Tensor, device: torch.device, *, signs: bool = True, full: bool = False
    ) -> None:
        self.d, self.c, self.r, self.device = d, c, coef.shape[0], device
        self.coef = coef
        #: int32 codes where every intermediate (< 4c) fits; int64 for the widest tables.
        self.dtype = torch.int32 if 4 * c < (1 << 31) else torch.int64
        coef_d = coef.to(device)
        a, b = coef_d[:, 0:1], coef_d[:, 1:2]
        lo = torch.arange(min(d, BLOCK), dtype=torch.int64, device=device).reshape(1, -1)
        v = addmod(mulmod_small(a, lo), b)  # (a lo + b) mod p, (r, B)
        hi = torch.arange(-(-d // BLOCK), dtype=torch.int64, device=device).reshape(1, -1) * BLOCK
        u = mulmod(a, hi)  # a hi B mod p, (r, blocks)
        # u + v wraps past p iff v >= p - u iff rank(v) >= #{v < p - u}: the 61-bit comparison
        # becomes one on ranks, in the codes' own (int32) type; ties (a = 0) rank consecutively.
        ordered, order = torch.sort(v, dim=1, stable=True)
        self.rank = torch.empty_like(order).scatter_(
            1, order, torch.arange(v.shape[1], device=device).expand_as(order).contiguous()
        ).to(self.dtype)
        self.km1 = (torch.searchsorted(ordered, PRIME - u) - 1).to(self.dtype)
        self.vc2 = (2 * torch.remainder(v, c)).to(self.dtype)
        uc = torch.remainder(u, c)
        self.base0 = (2 * uc).to(self.dtype)
        self.delta = (2 * torch.remainder(uc - PRIME % c, c)).to(self.dtype) - self.base0
        self._sign_shift = 8 * self.dtype.itemsize - 1
        del v, u, ordered, order, uc
        rows = torch.arange(self.r, device=device)
        self._byte = rows // 8
        self._shift = (rows % 8).to(torch.uint8).reshape(-1, 1)
        self.negbits: torch.Tensor | None = None
        self._numpy_tables: tuple | None = None  # numpy views of the tables (CPU eager rebuild)
        if signs:
            self.negbits = negative_flags(d, coef, device, 0, d, packed=True)
        #: ``(r, d)`` int32 codes when built with ``full=True``, else None.
        self.full = compute_codes(d, c, coef, device) if full else None

    @staticmethod
    def size_of(d: int, r: int, *, signs: bool = True, full: bool = False) -> int:
        """Bytes the tables of a ``d``-coordinate, ``r``-row sketch take (an upper bound)."""
        codes = 4 * r * d if full else 0
        return codes + (-(-r // 8) * d if signs else 0) + r * min(d, BLOCK) * 16 + r * (-(-d // BLOCK)) * 24

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        ts = [self.rank, self.vc2, self.km1, self.base0, self.delta]
        ts += [t for t in (self.negbits, self.full) if t is not None]
        return sum(t.numel() * t.element_size() for t in ts)

    def negatives(self, r0: int, r1: int, start: int, end: int) -> torch.Tensor:
        """uint8 ``(r1 - r0, end - start)`` sign flags (1 = negative) of rows ``r0..r1-1``."""
        if self.negbits is None:
            return negative_flags(self.d, self.coef[r0:r1], self.device, start, end, threads=False)
        if self.negbits.shape[0] == 1:  # r <= 8: one byte per coordinate, broadcast over the rows
            bits = torch.bitwise_right_shift(self.negbits[:, start:end], self._shift[r0:r1])
        else:
            bits = self.negbits[self._byte[r0:r1], start:end].bitwise_right_shift_(self._shift[r0:r1])
        return bits.bitwise_and_(1)

    def _finish(self, o: torch.Tensor, delta: torch.Tensor, base0: torch.Tensor, vc2: torch.Tensor) -> None:
        """``o`` (holding ``k - 1 - rank``) becomes ``2 * bucket``: branch-free integer ops (torch's
        compare/select kernels cost several times an add, so signs are read with shifts)."""
        o.bitwise_right_shift_(self._sign_shift)  # -1 where the bucket hash wraps past p, else 0
        o.bitwise_and_(delta)
        o += vc2
        o += base0  # 2 * bucket, or that + 2c: in [0, 4c)
        o -= 2 * self.c
        o += torch.bitwise_right_shift(o, self._sign_shift).bitwise_and_(2 * self.c)

    def compiled_codes(self, path: str | None = None) -> bool:
        """Whether :meth:`codes` runs the compiled kernel (:mod:`~gcbench.compressors.kernels.countsketch`) on whole blocks in
        the current mode (``GCBENCH_COMPILE``, decided on the vector length ``d``): int32 codes,
        packed sign bits in one byte (``r <= 8``), ``d`` at least one kernel span; the eager block
        loop is the reference (and still does the partial spans at a range's ends). ``path``: the
        caller's name for the per-machine choice of ``auto`` mode (``"sketch-accumulate"``,
        ``"sketch-decode"``: :mod:`~gcbench.compressors.kernels.choice`), on the CPU. Never off the
        CPU: there :meth:`codes` gathers a whole range at once (:meth:`codes_at`), where the kernel's
        calls, one per row and span of 2^18 coordinates, cost their Python overhead each (on an H200,
        Count Sketch's compiled decode of 64M coordinates took 1667x a ``copy_``)."""
        return (
            self.device.type == "cpu" and self.negbits is not None and self.negbits.shape[0] == 1
            and self.dtype == torch.int32 and self.d >= fused_sketch.SPAN and fused_sketch.BLOCK_BITS == BLOCK_BITS
            and use_compiled(self.d, path)
        )

    @property
    def bucket_tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rank, vc2, km1, delta, base0)``: what the kernels rebuild codes from."""
        return (self.rank, self.vc2, self.km1, self.delta, self.base0)

    def native_codes(self) -> bool:
        """Whether the C kernels (:func:`~gcbench.compressors.kernels.countsketch.accumulate_c`,
        :func:`~gcbench.compressors.kernels.countsketch.at_least_c`,
        :func:`~gcbench.compressors.kernels.countsketch.gather_c`) run on these tables in the
        current mode: on the CPU, int32 codes, the sign bits in one byte (``r <= 8``), no held
        codes, and :func:`~gcbench.compressors.kernels.native.use_native`. Ask from the thread that
        holds the mode (``fused.forced`` is per thread)."""
        return (self.device.type == "cpu" and self.negbits is not None and self.negbits.shape[0] == 1
                and self.dtype == torch.int32 and self.full is None and use_native(fused_sketch.SKETCH_C))

    def compiled_span(self, row: int, first: int, out: torch.Tensor) -> torch.Tensor:
        """Codes of row ``row`` at the ``fused_sketch.SPAN`` coordinates from ``first`` (a multiple
        of it, ``first + SPAN <= d``), by the compiled kernel, into ``out`` (``SPAN`` contiguous int32
        elements); for when :meth:`compiled_codes` is True. Returns ``out``."""
        assert self.negbits is not None
        return fused_sketch.run_sketch_codes(first, row, self.bucket_tables, self.negbits, 2 * self.c, out)

    def codes(
        self, r0: int, r1: int, start: int, end: int, out: torch.Tensor | None = None, *, compiled: bool | None = None
    ) -> torch.Tensor:
        """Codes ``(r1 - r0, end - start)`` of rows ``r0..r1-1``, coordinates ``start..end-1``
        (:attr:`dtype`), written into ``out`` when given; equal to :func:`compute_codes`, compiled
        or eager. ``compiled``: :meth:`compiled_codes` as decided by the caller (pass it from the
        thread that holds the mode: ``fused.forced`` is per thread, pool threads do not see it);
        None decides here."""
        if out is None:
            out = torch.empty((r1 - r0, end - start), dtype=self.dtype, device=self.device)
        if self.full is not None:
            return out.copy_(self.full[r0:r1, start:end])
        if self.compiled_codes() if compiled is None else compiled:
            span = fused_sketch.SPAN
            a, b = min(end, -(-start // span) * span), max(start, end // span * span)
            if b > a:  # whole spans [a, b) compiled, row by row, through a scratch; the ends eager
                for row in range(r0, r1):
                    for pos in range(a, b, span):  # straight into the row's slice (contiguous)
                        dst = out[row - r0, pos - start : pos - start + span]
                        if dst.is_contiguous():
                            self.compiled_span(row, pos, dst)
                        else:
                            dst.copy_(self.compiled_span(row, pos, torch.empty(span, dtype=self.dtype, device=self.device)))
                self.codes(r0, r1, start, a, out[:, : a - start], compiled=False)
                self.codes(r0, r1, b, end, out[:, b - start :], compiled=False)
                return out
        if self._numpy_ready():
            return self._codes_numpy(r0, r1, start, end, out)
        if self.device.type != "cpu":  # one gather pass per row for the whole range, not a loop of blocks
            return out.copy_(self.codes_at(torch.arange(start, end, device=self.device))[r0:r1])
        pos = start
        while pos < end:  # within one 2^16-coordinate block: the ``hi`` terms are scalars there
            blk = pos >> BLOCK_BITS
            stop = min(end, (blk + 1) << BLOCK_BITS)
            lo0 = pos - (blk << BLOCK_BITS)
            lo1 = lo0 + stop - pos
            o = out[:, pos - start : stop - start]
            col = slice(blk, blk + 1)
            torch.sub(self.km1[r0:r1, col], self.rank[r0:r1, lo0:lo1], out=o)
            self._finish(o, self.delta[r0:r1, col], self.base0[r0:r1, col], self.vc2[r0:r1, lo0:lo1])
            o += self.negatives(r0, r1, pos, stop)
            pos = stop
        return out

    def _numpy_ready(self) -> bool:
        """Whether the eager rebuild runs in numpy: CPU, int32 codes, sign bits in one byte."""
        return (
            self.device.type == "cpu" and self.dtype == torch.int32
            and self.negbits is not None and self.negbits.shape[0] == 1
        )

    def _codes_numpy(self, r0: int, r1: int, start: int, end: int, out: torch.Tensor) -> torch.Tensor:
        """The eager rebuild (:meth:`codes`'s steps) in numpy, one 2^16-coordinate block at a time:
        its int32 passes are vectorised (measured 2.3 against 3.7 ms for torch's eager ops, 5 rows x
        2^18 coordinates on one thread) and release the GIL. All rows in each call: a call per row
        and block was faster alone but slower in ``accumulate``, whose two threads then waited on
        the GIL for the many short calls. Integer ops: the same codes bit for bit."""
        km1, rank, delta, base0, vc2 = self._tables_numpy()
        bits = self.negbits.numpy()[0]  # type: ignore[union-attr]
        two_c = 2 * self.c
        dst = out.numpy()
        rows = r1 - r0
        width = min(end - start, BLOCK)
        tmp = np.empty((rows, width), dtype=np.int32)
        neg = np.empty((rows, width), dtype=np.uint8)
        shifts = np.arange(r0, r1, dtype=np.uint8).reshape(-1, 1)
        pos = start
        while pos < end:  # all rows at once (few calls: the caller's threads share the GIL)
            blk = pos >> BLOCK_BITS
            stop = min(end, (blk + 1) << BLOCK_BITS)
            lo0, w = pos - (blk << BLOCK_BITS), stop - pos
            o, t, nb = dst[:, pos - start : stop - start], tmp[:, :w], neg[:, :w]
            col = slice(blk, blk + 1)
            np.subtract(km1[r0:r1, col], rank[r0:r1, lo0 : lo0 + w], out=o)  # k - 1 - rank
            o >>= 31  # -1 where the bucket hash wraps past p, else 0
            o &= delta[r0:r1, col]
            o += vc2[r0:r1, lo0 : lo0 + w]
            o += base0[r0:r1, col] - two_c  # 2 * bucket - 2c, or that + 2c: in [-2c, 2c)
            np.right_shift(o, 31, out=t)
            t &= two_c
            o += t  # 2 * bucket
            np.right_shift(bits[pos:stop], shifts, out=nb)
            nb &= 1
            o += nb
            pos = stop
        return out

    def _tables_numpy(self) -> tuple[np.ndarray, ...]:
        """``(km1, rank, delta, base0, vc2)`` as numpy views (made once)."""
        if self._numpy_tables is None:
            self._numpy_tables = tuple(t.numpy() for t in (self.km1, self.rank, self.delta, self.base0, self.vc2))
        return self._numpy_tables

    def _codes_at_numpy(self, idx: torch.Tensor) -> torch.Tensor:
        """:meth:`codes_at` in numpy (its gathers along a table's columns are faster than torch's
        advanced indexing: 10-12 against 17-21 ms for 5 rows x 2^18 coordinates, two threads); the
        same integer steps as :meth:`_codes_numpy`, so the same codes. They are written out here, not
        shared with it: a shared function, which needs every gathered row before it starts, measured
        14 against 11 ms here."""
        km1, rank, delta, base0, vc2 = self._tables_numpy()
        i = idx.reshape(-1).numpy()
        blk, lo = i >> BLOCK_BITS, i & (BLOCK - 1)
        two_c = 2 * self.c
        o = np.take(km1, blk, axis=1)
        o -= np.take(rank, lo, axis=1)  # k - 1 - rank
        o >>= 31  # -1 where the bucket hash wraps past p, else 0
        o &= np.take(delta, blk, axis=1)
        o += np.take(vc2, lo, axis=1)
        o += np.take(base0, blk, axis=1)
        o -= two_c  # 2 * bucket - 2c, or that + 2c: in [-2c, 2c)
        t = o >> 31
        t &= two_c
        o += t  # 2 * bucket
        nb = np.right_shift(np.take(self.negbits.numpy()[0], i), np.arange(self.r, dtype=np.uint8).reshape(-1, 1))  # type: ignore[union-attr]
        nb &= 1
        o += nb
        return torch.from_numpy(o)

    def codes_at(self, idx: torch.Tensor) -> torch.Tensor:
        """Codes ``(r, n)`` of the int64 coordinates ``idx`` (any order; gathers instead of blocks)."""
        if self._numpy_ready():
            return self._codes_at_numpy(idx)
        blk, lo = idx >> BLOCK_BITS, idx & (BLOCK - 1)
        out = self.km1[:, blk] - self.rank[:, lo]
        self._finish(out, self.delta[:, blk], self.base0[:, blk], self.vc2[:, lo])
        if self.negbits is None:
            raw = (_sign_raw if self.d <= (1 << 31) else _sign_raw_exact)(self.coef.to(self.device), idx.reshape(1, -1))
            return out + (1 - (raw & 1)).to(self.dtype)
        bits = self.negbits[:, idx][self._byte]
        return out + bits.bitwise_right_shift_(self._shift).bitwise_and_(1)


class HashCodeCache:
    """Hash tables of Count Sketches keyed by ``(d, c, r, seed, device)``: an LRU bounded in bytes.

    Owned by whoever creates it (each ``CountSketchCodec`` has one, ``codec.hash_cache``), so the
    tables are freed with their owner; there is no process-wide cache. One vector length takes
    :meth:`HashTables.size_of` bytes: ``ceil(r / 8)`` bytes per coordinate (the packed sign bits:
    0.25x a float32 input for ``r <= 8``) plus a few MB of bucket tables. Tables that do not fit
    ``max_bytes`` are not cached: :meth:`get` returns tables without sign bits, built for the
    call, and the sign polynomial is evaluated block by block instead (the same bytes, several
    times the time). ``max_bytes = 0`` never caches. ``hold_codes=True`` also keeps every code
    where they fit (the speed of a precomputed table of codes, at ``4 r d`` bytes).
    """

    def __init__(self, max_bytes: int = HASH_CACHE_MAX_BYTES, *, hold_codes: bool = False) -> None:
        if not (isinstance(max_bytes, int) and max_bytes >= 0):
            raise InvalidParameterError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        #: Also hold every int32 code (``4 r d`` bytes) where they fit ``max_bytes``: encode and
        #: decode skip rebuilding codes (faster; encode peak ~5x the input instead of < 1x).
        self.hold_codes = hold_codes
        self._entries: OrderedDict[tuple, HashTables] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held now (always ``<= max_bytes``)."""
        with self._lock:
            return sum(v.nbytes for v in self._entries.values())

    def fits(self, d: int, rows: int, *, full: bool = False) -> bool:
        """Whether the tables of ``rows x d`` (with every code when ``full``) would be cached."""
        return HashTables.size_of(d, rows, full=full) <= self.max_bytes

    def get(self, d: int, columns: int, rows: int, seed: int, device: torch.device, coef: torch.Tensor) -> HashTables:
        """The tables (from the cache, or built and cached; without sign bits when they do not fit)."""
        if not self.fits(d, rows):
            return HashTables(d, columns, coef, device, signs=False)
        key = (d, columns, rows, seed, str(device))
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        tables = HashTables(d, columns, coef, device, full=self.hold_codes and self.fits(d, rows, full=True))
        with self._lock:
            self._entries[key] = tables
            self._entries.move_to_end(key)
            total = sum(v.nbytes for v in self._entries.values())
            while total > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                total -= old.nbytes
        return tables

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
