"""Count Sketch of a gradient vector, and the Count Sketch codec.

Charikar, Chen, Farach-Colton, "Finding Frequent Items in Data Streams" (ICALP 2002) for the data
structure; as used by Ivkin, Rothchild, Ullah, Braverman, Stoica, Arora, "Communication-efficient
Distributed SGD with Sketching" (NeurIPS 2019), whose slides ("Count Sketch", "Mergeability",
"Computational overhead") and CSVec code fix the conventions followed here:

* an ``r x c`` float32 table; row ``j`` has a bucket hash ``h_j(i) = ((a_j i + b_j) mod p) mod c``
  (2-wise independent) and a sign hash ``s_j(i) = +1 if (((e3 i + e2) i + e1) i + e0 mod p) is odd
  else -1`` (a degree-3 polynomial: 4-wise independent), over the Mersenne prime ``p = 2^61 - 1``;
  the six coefficients per row are drawn uniformly from ``[0, p)`` by a CPU ``torch.Generator``
  seeded with ``seed``, so every worker builds the same hashes;
* ``accumulate(x)``: ``table[j, h_j(i)] += s_j(i) x_i`` for every ``i`` and ``j``;
* the estimate of ``x_i`` is the median over rows of ``s_j(i) table[j, h_j(i)]`` (``torch.median``,
  i.e. the lower median for an even ``r``, as CSVec);
* ``unsketch(k)``: the ``k`` coordinates with the largest squared estimates, and their estimates;
* ``l2estimate()``: ``sqrt(median_j sum_b table[j, b]^2)`` (AMS'96, as CSVec);
* sketches are linear: ``sketch(a) + sketch(b) == sketch(a + b)``, so workers' tables can be summed
  by ``all_reduce`` ("Mergeability").

Differences from CSVec, all on the side of exactness or speed:

* CSVec computes ``(h1 * tokens + h2) % p`` in int64, which overflows (``h1 < 2^61``,
  ``tokens < 2^31``): its hashes are not the polynomial family it documents. Here the arithmetic
  modulo ``2^61 - 1`` is exact (31/30-bit limbs and the Mersenne fold ``2^61 = 1 mod p``), checked
  against Python integers in the tests.
* Each coordinate's row hash is used as one int *code* ``2 * bucket + (sign < 0)``. Accumulating
  is then a weighted count of the codes into ``2c`` bins (positive and negative halves
  interleaved), with no ``sign * x`` product; estimating gathers from the interleaved table
  ``[t, -t]``, with no product either. Codes are not held (``4 r d`` bytes, 5x the input): they
  are rebuilt block by block, exactly, from compact :class:`~gcbench.compressors.codecs.countsketch.hashes.HashTables`
  (packed sign bits, ``ceil(r/8)`` bytes per coordinate, and small bucket tables), built once per
  ``(d, c, r, seed, device)`` and held by their owner (a codec's :class:`HashCodeCache`, bounded
  in bytes, or the sketch itself): no process-wide cache.
* ``unsketch(k)`` does not form all ``d`` estimates: a threshold ``t`` is read off a strided sample
  of estimates, one uint8 flag per table cell (``>= t`` / ``<= -t``) is gathered and counted over
  the rows, which finds exactly the coordinates with ``|estimate| >= t`` (the median is ``>= t``
  iff enough rows are), and only those are estimated and ranked; an unrepresentative sample
  falls back to the full estimate. The result is the top-k of the squared estimates, as
  ``torch.topk`` would give (up to the order of ties). Full estimates (``estimate()``) use a
  median-of-5 min/max network for ``r = 5`` (``torch.median`` otherwise), in cache-sized blocks.
* ``accumulate`` runs the two halves of the vector on a small thread pool on CPU: torch's
  ``index_add_`` on a vector is single-threaded. The additions into the table happen in a fixed order, so the
  table's bytes do not depend on the number of threads.
* In compiled mode (``GCBENCH_COMPILE``, :mod:`~gcbench.compressors.kernels.countsketch`) the codes are rebuilt by one compiled
  pass per row and span, and each half is accumulated one row at a time (one ``2c`` accumulator in
  cache). Same additions in the same order per accumulator: the same bytes as eager. The scatter-add
  itself (``index_add_``, 2.5-2.7 ns per element and row into a 4 MB accumulator here) is the floor:
  at 25M elements and 5 rows it is ~40x a ``copy_`` on two cores, above the 10x target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...kernels import choice
from ...kernels import countsketch as fused_sketch
from ...kernels.workspace import fresh
from ...base import Codec, Stage, expect_sections
from .hashes import HASH_CACHE_MAX_BYTES  # noqa: F401 - re-exported (the cache's default)
from ...numerics import nonzero_positions
from .gathered import accumulate_gathered
from .hashes import BLOCK, HashCodeCache, HashTables, compute_codes, thread_pool
from ...errors import CorruptPayloadError, InvalidParameterError, NumericOverflowError
from .modp import PRIME, hash_coefficients  # noqa: F401 - PRIME re-exported (tests, docs)
from ...wire.payload import Payload, check_shape

#: Columns are limited so that ``2 * bucket + 1`` fits an int32 code.
MAX_COLUMNS = (1 << 30) - 1
#: Table sizes follow the tensor's (checked at encode): ``compression`` in [0.01, 65536], at most
#: ``max(numel, MAX_COLUMNS_FLOOR)`` columns (``columns=2**30-1`` for 2,048 elements would be 21 GB).
MIN_COMPRESSION, MAX_COMPRESSION, MAX_COLUMNS_FLOOR = 0.01, float(1 << 16), 1 << 20
#: Coordinates per block of the estimates (r float32 rows fit in L2) and of ``unsketch``'s scan on the CPU;
#: off it DEVICE_BLOCK (a block: ~20 launches and a synchronising ``nonzero``). Results do not depend on them.
CHUNK, SCAN_BLOCK, DEVICE_BLOCK = 1 << 18, 1 << 20, 1 << 22
#: Coordinates whose codes ``accumulate`` builds at once (all rows): ``4 r`` bytes each, per thread.
_SPAN = 1 << 20
#: Vectors at least this long are accumulated in two halves, on two threads where torch has them.
SPLIT_MIN = 1 << 20
#: ``unsketch`` scans for a threshold from this length on (below it, estimate everything).
FAST_MIN_D = 1 << 16
# --- the data structure ---------------------------------------------------------------------------


def median_rows(
    vals: torch.Tensor, out: torch.Tensor | None = None, spare: torch.Tensor | None = None
) -> torch.Tensor:
    """Median over dim 0 of ``vals`` (``(r, m)``), equal to ``vals.median(dim=0).values``.

    For ``r = 5`` a min/max network (10 elementwise ops, no sort) that overwrites ``vals``;
    ``spare`` is an ``(m,)`` scratch buffer. ``r = 1, 3`` likewise; other ``r`` use torch.median.
    """
    r = vals.shape[0]
    if out is None:
        out = torch.empty(vals.shape[1], dtype=vals.dtype, device=vals.device)
    if r == 1:
        return out.copy_(vals[0])
    if r == 3:
        a, b, c = vals[0], vals[1], vals[2]
        s = torch.empty_like(a) if spare is None else spare
        torch.minimum(a, b, out=s)
        torch.maximum(a, b, out=b)
        torch.minimum(b, c, out=b)
        return torch.maximum(s, b, out=out)
    if r == 5:
        a, b, c, d, e = (vals[j] for j in range(5))
        s = torch.empty_like(a) if spare is None else spare
        # Sort the pairs (a, b) and (c, d); the smaller of the two minima lies below three others and
        # the larger of the two maxima above three others, so neither is the median of the five, and
        # the median of five is the median of e and the two that remain.
        torch.minimum(a, b, out=s)  # s = lo1
        torch.maximum(a, b, out=b)  # b = hi1
        torch.minimum(c, d, out=a)  # a = lo2
        torch.maximum(c, d, out=d)  # d = hi2
        torch.maximum(s, a, out=c)  # c = f = max(lo1, lo2)
        torch.minimum(b, d, out=s)  # s = g = min(hi1, hi2)
        # median3(e, f, g) = max(min(f, g), min(max(f, g), e))
        torch.minimum(c, s, out=a)
        torch.maximum(c, s, out=d)
        torch.minimum(d, e, out=d)
        return torch.maximum(a, d, out=out)
    return torch.median(vals, dim=0, out=(out, torch.empty(vals.shape[1], dtype=torch.int64, device=vals.device)))[0]


class CountSketch:
    """An ``r x c`` Count Sketch of vectors of length ``d`` (see the module docstring).

    Args:
        d: length of the sketched vectors.
        c: columns (buckets per row).
        r: rows (independent hash pairs); the estimate is the median over rows.
        seed: seeds the hash coefficients; equal seeds give equal hashes in every process.
        device: where the table and the hash codes live.
        table: an existing ``(r, c)`` (or flat ``r * c``) table to wrap (not copied), e.g. a
            summed table received from ``all_reduce``.
        hashes: the owner's cache of hash tables (a codec's :class:`HashCodeCache`). Without one,
            the sketch builds its :class:`HashTables` once and holds them itself (shared with its
            copies, freed with them).
    """

    def __init__(
        self,
        d: int,
        c: int,
        r: int,
        *,
        seed: int = 0,
        device: torch.device | str = "cpu",
        table: torch.Tensor | None = None,
        hashes: HashCodeCache | None = None,
    ) -> None:
        if not (isinstance(d, int) and d >= 1):
            raise InvalidParameterError(f"CountSketch: d must be a positive int, got {d!r}")
        if not (isinstance(c, int) and 1 <= c <= MAX_COLUMNS):
            raise InvalidParameterError(f"CountSketch: c must be an int in [1, {MAX_COLUMNS}], got {c!r}")
        if not (isinstance(r, int) and r >= 1):
            raise InvalidParameterError(f"CountSketch: r must be a positive int, got {r!r}")
        if not (isinstance(seed, int) and 0 <= seed < 1 << 63):
            raise InvalidParameterError(f"CountSketch: seed must be an int in [0, 2^63), got {seed!r}")
        self.d, self.c, self.r, self.seed = d, c, r, seed
        if table is not None:
            if table.numel() != r * c or not table.is_floating_point():
                raise InvalidParameterError(
                    f"CountSketch: table must hold {r}x{c} floats, got {tuple(table.shape)} {table.dtype}"
                )
            self.table = table.reshape(r, c)
            if self.table.dtype != torch.float32:
                self.table = self.table.float()
            self.device = self.table.device
        else:
            self.device = torch.device(device)
            self.table = torch.zeros((r, c), dtype=torch.float32, device=self.device)
        self._coef: torch.Tensor | None = None
        self._hashes = hashes
        self._tables: HashTables | None = None

    # -- hashes ----------------------------------------------------------------------------------

    @property
    def coefficients(self) -> torch.Tensor:
        """``(r, 6)`` int64 coefficients (CPU): ``a, b, e3, e2, e1, e0`` per row (module docstring)."""
        if self._coef is None:
            self._coef = hash_coefficients(self.r, self.seed)
        return self._coef

    @property
    def tables(self) -> HashTables:
        """The :class:`HashTables` codes are rebuilt from: the owner's cache's (without sign bits when
        they do not fit its budget), else this sketch's own (built once, shared with its copies)."""
        if self._tables is not None:
            return self._tables
        if self._hashes is not None:
            return self._hashes.get(self.d, self.c, self.r, self.seed, self.device, self.coefficients)
        self._tables = HashTables(self.d, self.c, self.coefficients, self.device)
        return self._tables

    @property
    def codes(self) -> torch.Tensor:
        """``(r, d)`` int32 codes ``2 * bucket + (sign < 0)``, evaluated from the polynomials (not
        held: ``4 r d`` bytes; the sketch itself rebuilds codes block by block from :attr:`tables`)."""
        return compute_codes(self.d, self.c, self.coefficients, self.device)

    def buckets(self) -> torch.Tensor:
        """``(r, d)`` int64 bucket of every coordinate in every row."""
        return (self.codes >> 1).long()

    def signs(self) -> torch.Tensor:
        """``(r, d)`` float32 sign (+1/-1) of every coordinate in every row."""
        return 1.0 - 2.0 * (self.codes & 1).float()

    def _check_compatible(self, other: "CountSketch") -> None:
        if (self.d, self.c, self.r, self.seed) != (other.d, other.c, other.r, other.seed):
            raise InvalidParameterError(
                f"sketches differ: (d, c, r, seed) = {(self.d, self.c, self.r, self.seed)} "
                f"vs {(other.d, other.c, other.r, other.seed)}"
            )

    # -- updates ---------------------------------------------------------------------------------

    def zero(self) -> "CountSketch":
        """Clear the table (the hashes stay)."""
        self.table.zero_()
        return self

    def accumulate(self, vec: torch.Tensor) -> "CountSketch":
        """Add the sketch of ``vec`` (length ``d``, any float dtype) to the table.

        Per row (and half, for long vectors) a ``2c``-bin float32 accumulator: even bins collect
        the coordinates with sign +1, odd bins those with sign -1 (slides, "Computational
        overhead": ``table[row,:] += bincount(buckets[row], signs[row] * vec)``). The codes are
        rebuilt one span at a time, of all rows at once (up to 2^20 coordinates: ``d / (8 r)``
        rounded down to whole 2^16-coordinate blocks, at least one block), and added with
        ``index_add_``, which on the CPU adds in index order, exactly as one ``bincount`` of the
        whole row-half would: the same bytes, with no ``(r, d)`` array of codes (peak memory: the
        accumulators, ``0.2x`` the input at compression 20, plus one span's codes per thread,
        ``4 r`` bytes per coordinate). Where C kernels build (not in eager mode),
        one C pass per row-half rebuilds the codes and adds them in the same order
        (:func:`~gcbench.compressors.kernels.countsketch.accumulate_c`): the same bytes. Off the CPU
        the codes are gathered for long chunks and the sums made in int64 fixed point
        (:func:`~gcbench.compressors.codecs.countsketch.gathered.accumulate_gathered`): the same bits
        whatever the order of the device's atomics, equal to the CPU's up to float32 rounding.
        """
        if vec.dim() != 1 or vec.shape[0] != self.d:
            raise InvalidParameterError(f"CountSketch.accumulate takes a vector of length {self.d}, got {tuple(vec.shape)}")
        v = vec.detach().to(self.device, torch.float32).contiguous()
        parts = 2 if self.d >= SPLIT_MIN else 1
        bounds = [(h * self.d // parts, (h + 1) * self.d // parts) for h in range(parts)]
        two_c = 2 * self.c
        tables = self.tables
        if self.device.type == "cpu":
            tasks = [(row, s, e) for row in range(self.r) for s, e in bounds]
            results = [torch.zeros(two_c, dtype=torch.float32) for _ in tasks]

            # C where it builds (asked here: the mode is per thread): codes and additions in one pass
            in_c = tables.native_codes()
            compiled = not in_c and tables.compiled_codes("sketch-accumulate")
            # Eager: codes of all rows for a span, then one row at a time (the accumulator being
            # added into stays in cache; switching rows every block did not). Spans as long as
            # possible while the per-thread buffers (4 r bytes per coordinate) stay within 1/4 of
            # the float32 input.
            span = min(_SPAN, max(BLOCK, self.d // (8 * self.r) // BLOCK * BLOCK))

            def run(half: int) -> None:
                s, e = bounds[half]
                buf = torch.empty(self.r * span, dtype=tables.dtype)  # flat: every span's view contiguous
                for pos in range(s, e, span):
                    stop = min(e, pos + span)
                    codes = tables.codes(0, self.r, pos, stop, buf[: self.r * (stop - pos)].view(self.r, -1))
                    for row in range(self.r):
                        results[row * parts + half].index_add_(0, codes[row], v[pos:stop])

            if compiled:
                # Compiled (one pass per code): one row at a time over the whole half, so one 2c
                # accumulator stays in cache instead of r cycling through it every span; the codes
                # of one kernel span (1 MiB) stay in L2 for index_add_.
                step = fused_sketch.SPAN

                def run(half: int) -> None:  # noqa: F811 - the compiled variant of the loop above
                    s, e = bounds[half]
                    buf = torch.empty(step, dtype=tables.dtype)
                    for row in range(self.r):
                        acc = results[row * parts + half]
                        pos = s
                        while pos < e:  # spans that end at multiples of ``step`` (or at e)
                            stop = min(e, (pos // step + 1) * step)
                            if stop - pos == step:
                                codes = tables.compiled_span(row, pos, buf)
                            else:  # a partial span at either end of the half: eager
                                codes = tables.codes(row, row + 1, pos, stop, buf[: stop - pos].view(1, -1))[0]
                            acc.index_add_(0, codes, v[pos:stop])
                            pos = stop

            if in_c:

                def run(half: int) -> None:  # noqa: F811 - the C variant of the loops above
                    for row in range(self.r):
                        fused_sketch.accumulate_c(results[row * parts + half], v, *bounds[half], row,
                                                  tables.bucket_tables, tables.negbits, two_c)

            if tables.full is not None:  # every code held (``hold_codes``): one bincount per row-half

                def run(half: int) -> None:  # noqa: F811 - the held-codes variant of the loop above
                    s, e = bounds[half]
                    for row in range(self.r):
                        counts = torch.bincount(tables.full[row, s:e], weights=v[s:e], minlength=two_c)
                        results[row * parts + half] = counts

            pool = thread_pool() if parts > 1 else None
            if pool is not None:
                list(pool.map(run, range(parts)))
            else:
                for half in range(parts):
                    run(half)
        else:
            # Accelerators: all rows per chunk (gathers, few large kernels), summed in int64 fixed
            # point (float32 atomics gave other bytes from run to run on an H200).
            self.table += accumulate_gathered(tables, v, self.r, self.c)
            return self
        # The same additions in the same order whatever the threading: identical bytes everywhere.
        for (row, _, _), counts in zip(tasks, results):
            pairs = counts.view(self.c, 2)
            self.table[row] += pairs[:, 0]
            self.table[row] -= pairs[:, 1]
        return self

    def __iadd__(self, other: "CountSketch | torch.Tensor") -> "CountSketch":
        """Merge another sketch (same d, c, r, seed) or add an ``(r, c)`` table."""
        if isinstance(other, CountSketch):
            self._check_compatible(other)
            self.table += other.table.to(self.device)
        elif isinstance(other, torch.Tensor):
            if other.numel() != self.r * self.c:
                raise InvalidParameterError(
                    f"cannot add a table of {other.numel()} values to a {self.r}x{self.c} sketch"
                )
            self.table += other.reshape(self.r, self.c).to(self.device, torch.float32)
        else:
            return NotImplemented
        return self

    def __add__(self, other: "CountSketch") -> "CountSketch":
        """A new sketch whose table is the sum of both (sketches are linear)."""
        out = self.copy()
        out += other
        return out

    def copy(self) -> "CountSketch":
        """A sketch with a copy of the table and the same (shared) hashes."""
        out = CountSketch(self.d, self.c, self.r, seed=self.seed, table=self.table.clone(), hashes=self._hashes)
        out._coef = self._coef
        out._tables = self._tables
        return out

    # -- queries ---------------------------------------------------------------------------------

    def _signed_table(self) -> torch.Tensor:
        """``(r, 2c)`` with ``[2b] = table[b]`` and ``[2b + 1] = -table[b]`` (indexed by codes)."""
        return torch.stack([self.table, -self.table], dim=2).reshape(self.r, 2 * self.c)

    def query(self, indices: torch.Tensor, *, _signed: torch.Tensor | None = None) -> torch.Tensor:
        """Estimates (median over rows of ``sign * table[bucket]``) of the coordinates ``indices``."""
        idx = indices.reshape(-1).to(self.device, torch.int64)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.d):
            raise InvalidParameterError(f"indices must lie in [0, {self.d})")
        signed = self._signed_table() if _signed is None else _signed
        vals = torch.empty((self.r, idx.numel()), dtype=torch.float32, device=self.device)
        if self.tables.native_codes():  # codes and gathers in one C pass per row: the same values
            fused_sketch.gather_c(signed, idx.contiguous(), self.tables.bucket_tables, self.tables.negbits, vals)
        else:
            for j, codes in enumerate(self.tables.codes_at(idx)):
                torch.index_select(signed[j], 0, codes, out=vals[j])
        return median_rows(vals).reshape(indices.shape)

    def _estimate_blocks(self):
        """Yield ``(start, end, estimates)`` over blocks of coordinates (buffers reused)."""
        signed = self._signed_table()
        tables = self.tables
        compiled = tables.compiled_codes("sketch-decode")
        step = CHUNK if self.device.type == "cpu" else DEVICE_BLOCK
        n = min(step, self.d)
        codes = torch.empty(self.r * n, dtype=tables.dtype, device=self.device)  # flat: contiguous views
        vals = torch.empty((self.r, n), dtype=torch.float32, device=self.device)
        spare = torch.empty(n, dtype=torch.float32, device=self.device)
        est = torch.empty(n, dtype=torch.float32, device=self.device)
        for start in range(0, self.d, step):
            end = min(self.d, start + step)
            m = end - start
            cm = tables.codes(0, self.r, start, end, codes[: self.r * m].view(self.r, m), compiled=compiled)
            for j in range(self.r):
                torch.index_select(signed[j], 0, cm[j], out=vals[j, :m])
            yield start, end, median_rows(vals[:, :m], out=est[:m], spare=spare[:m])

    def estimate(self) -> torch.Tensor:
        """Estimates of all ``d`` coordinates (float32)."""
        out = fresh(self.d, torch.float32, self.device)
        for start, end, est in self._estimate_blocks():
            out[start:end] = est
        return out

    def unsketch(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` coordinates with the largest squared estimates, and their estimates.

        Returns ``(indices, values)``: int64 indices (in no particular order) and float32 values.
        ``k`` is clipped to ``[0, d]``. Equal to ``topk(estimate()**2, k)`` up to the order of ties.

        For large ``d`` the estimates are not all formed. A threshold ``t > 0`` is taken on a
        strided sample of the estimates (its ``j``-th largest magnitude, ``j`` = 1.25x the expected
        count of top-k members in the sample plus five standard deviations). The median over rows
        satisfies ``median >= t`` iff at least ``r - (r-1)//2`` rows are ``>= t``, and
        ``median <= -t`` iff at least ``(r-1)//2 + 1`` rows are ``<= -t``; so one uint8 flag per
        table cell (1 for ``>= t``, 16 for ``<= -t``), gathered and summed over rows, finds exactly
        the coordinates with ``|estimate| >= t`` (the per-row sums count up to 15 in each nibble).
        Only those are estimated (``query``) and the top-k taken among them; if fewer than ``k``
        pass (an unrepresentative sample) the full estimate is used instead.
        """
        k = max(0, min(int(k), self.d))
        if k == 0:
            return (torch.empty(0, dtype=torch.int64, device=self.device), torch.empty(0, device=self.device))
        m = min(self.d, 1 << 18)
        mean = m * k / self.d
        j = int(math.ceil(1.25 * mean + 5 * math.sqrt(mean) + 8))
        if self.r > 15 or self.d < FAST_MIN_D or j >= m // 4:
            return self._unsketch_full(k)
        stride = self.d // m
        signed = self._signed_table()
        sample = self.query(torch.arange(stride // 2, self.d, stride, device=self.device)[:m], _signed=signed).abs()
        thr = float(torch.topk(sample, j, sorted=False).values.min())
        if not thr > 0.0:
            return self._unsketch_full(k)
        cand = self._at_least(thr, _signed=signed)
        if cand.numel() < k:
            return self._unsketch_full(k)
        vals = self.query(cand, _signed=signed)
        top = torch.topk(vals.abs(), k, sorted=False).indices
        return cand[top], vals[top]

    def _unsketch_full(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        est = self.estimate()
        idx = torch.topk(est.abs(), k, sorted=False).indices
        return idx, est.index_select(0, idx)

    def _at_least(self, thr: float, *, _signed: torch.Tensor | None = None) -> torch.Tensor:
        """Sorted int64 indices of the coordinates whose estimate satisfies ``|estimate| >= thr > 0``
        (the flags' scan: torch gathers, or one C pass where C kernels build,
        :func:`~gcbench.compressors.kernels.countsketch.at_least_c`; the same indices)."""
        signed = self._signed_table() if _signed is None else _signed
        flags = (signed >= thr).to(torch.uint8) + (signed <= -thr).to(torch.uint8) * 16  # (r, 2c)
        need_pos = self.r - (self.r - 1) // 2
        need_neg = (self.r - 1) // 2 + 1
        tables = self.tables
        step = SCAN_BLOCK if self.device.type == "cpu" else DEVICE_BLOCK
        n = min(step, self.d)
        spans = [(s, min(self.d, s + step)) for s in range(0, self.d, step)]
        # On the CPU the spans are split between the pool's threads (contiguous runs, results in
        # order): rebuilding codes costs about what the gathers do.
        in_c = tables.native_codes()  # C: codes, flag gathers and selection in one pass (asked in this thread)
        compiled = not in_c and tables.compiled_codes("sketch-decode")
        pool = thread_pool() if self.device.type == "cpu" and len(spans) > 1 else None
        k = 1 if pool is None else min(len(spans), 2)
        runs = [spans[i * len(spans) // k : (i + 1) * len(spans) // k] for i in range(k)]

        def scan_c(run: list[tuple[int, int]]) -> list[torch.Tensor]:
            found, out = torch.empty(n, dtype=torch.int64), []
            for s, e in run:  # each span's hits copied out before the buffer is reused
                c = fused_sketch.at_least_c(flags, s, e, tables.bucket_tables, tables.negbits, need_pos, need_neg, found)
                out.append(found[:c].clone())
            return out

        def scan(run: list[tuple[int, int]]) -> list[torch.Tensor]:
            codes = torch.empty(self.r * n, dtype=tables.dtype, device=self.device)  # flat: contiguous views
            acc = torch.empty(n, dtype=torch.uint8, device=self.device)
            tmp = torch.empty(n, dtype=torch.uint8, device=self.device)
            hit = torch.empty(n, dtype=torch.bool, device=self.device)
            hit2 = torch.empty(n, dtype=torch.bool, device=self.device)
            out = []
            for start, end in run:
                w = end - start
                a, t, h, h2 = acc[:w], tmp[:w], hit[:w], hit2[:w]
                cw = tables.codes(0, self.r, start, end, codes[: self.r * w].view(self.r, w), compiled=compiled)
                torch.index_select(flags[0], 0, cw[0], out=a)
                for row in range(1, self.r):
                    torch.index_select(flags[row], 0, cw[row], out=t)
                    a += t
                torch.ge(a, 16 * need_neg, out=h)  # negatives count in the high nibble
                torch.bitwise_and(a, 15, out=t)
                torch.ge(t, need_pos, out=h2)
                h |= h2
                out.append(nonzero_positions(h) + start)
            return out

        work = scan_c if in_c else scan
        parts = list(pool.map(work, runs)) if pool is not None and k > 1 else [work(r) for r in runs]
        return torch.cat([t for part in parts for t in part])

    def l2estimate(self) -> float:
        """Estimate of ``||x||_2``: sqrt of the median over rows of the row's sum of squares."""
        return float(torch.median((self.table.double() ** 2).sum(dim=1)).sqrt())


# --- the codec ------------------------------------------------------------------------------------


def resolve_columns(numel: int, rows: int, columns: int, compression: float) -> int:
    """Columns for a tensor of ``numel`` elements: ``columns`` if set, else ``ceil(numel / (rows * compression))``."""
    if columns:
        return columns
    return max(1, min(MAX_COLUMNS, math.ceil(numel / (rows * compression))))


def resolve_k(numel: int, columns: int, k: int) -> int:
    """Coordinates kept by ``decode``: ``k`` if set, else ``ceil(columns / 10)`` (the ratio of CSVec's
    example, k = 50000 for c = 500000); at most ``numel``."""
    return max(1, min(numel, k if k else math.ceil(columns / 10)))


@dataclass(eq=False)
class CountSketchCodec(Codec):
    """Count Sketch of the flattened tensor; decode = the top-k of the estimates (Ivkin et al. 2019).

    Parameters:
        rows: sketch rows ``r`` (default 5, as the Sketched-SGD experiments and CSVec examples).
        columns: sketch columns ``c``; 0 (default) = ``ceil(n / (rows * compression))`` for a tensor
            of ``n`` elements, so the table holds ``n / compression`` floats. At encode, ``c`` must
            not exceed ``max(n, 2**20)`` and ``n / (rows * c)`` must not exceed 65,536
            (``InvalidParameterError``): the table's size follows the tensor's.
        compression: the dense-to-table size ratio when ``columns`` is 0 (default 20, the paper's
            "Sketched-SGD 20x" runs; a tiny tensor still gets at least one column per row), in
            ``[0.01, 65536]``.
        k: coordinates ``decode`` returns (estimated values at the top-k squared estimates);
            0 (default) = ``ceil(c / 10)``, the ratio of CSVec's example ``k = 50000, c = 500000``.
        seed: seeds the hashes; every worker must use the same seed (it travels in the header).

    The payload is the float32 ``r x c`` table (one section), so payloads of several workers sum
    (``combine`` / ``all_reduce``) into the sketch of the summed tensor. Decoding is *not* linear
    (median and top-k): ``decode(combine(p))`` is the top-k of the summed sketch, which is what the
    protocol wants, and differs from the sum of the workers' decoded top-k.
    """

    rows: int = 5
    columns: int = 0
    compression: float = 20.0
    k: int = 0
    seed: int = 0

    codec_id: ClassVar[int] = 41
    hash_cache: ClassVar[HashCodeCache]  # this codec's own hash tables (set in __post_init__)
    linear: ClassVar[bool] = True
    decodes_into: ClassVar[bool] = True
    stochastic: ClassVar[bool] = False
    stages: ClassVar[tuple[Stage, ...]] = (
        Stage("count sketch: r x c float32 table of signed bucket sums", lossless=False),
        Stage("unsketch: median over rows, top-k of squared estimates", lossless=False),
    )
    reference: ClassVar[str] = (
        "Charikar et al., Finding Frequent Items in Data Streams, ICALP 2002; "
        "Ivkin et al., Communication-efficient Distributed SGD with Sketching, NeurIPS 2019"
    )

    def __post_init__(self) -> None:
        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        self._require(is_int(self.rows) and 1 <= self.rows <= 64, f"rows must be an int in [1, 64], got {self.rows!r}")
        self._require(
            is_int(self.columns) and 0 <= self.columns <= MAX_COLUMNS,
            f"columns must be an int in [0, {MAX_COLUMNS}] (0 = auto), got {self.columns!r}",
        )
        self._require(
            isinstance(self.compression, (int, float)) and not isinstance(self.compression, bool)
            and math.isfinite(self.compression) and MIN_COMPRESSION <= self.compression <= MAX_COMPRESSION,
            f"compression must be a float in [{MIN_COMPRESSION}, {MAX_COMPRESSION:g}], got {self.compression!r}",
        )
        self.compression = float(self.compression)
        self._require(is_int(self.k) and self.k >= 0, f"k must be an int >= 0 (0 = auto), got {self.k!r}")
        self._require(
            is_int(self.seed) and 0 <= self.seed < 1 << 63, f"seed must be an int in [0, 2^63), got {self.seed!r}"
        )
        # Not a parameter (it does not travel); freed with the codec. max_bytes: HASH_CACHE_MAX_BYTES (2 GiB).
        self.hash_cache = HashCodeCache()

    # -- sizes and sketches ----------------------------------------------------------------------

    def columns_for(self, numel: int) -> int:
        """Sketch columns used for a tensor of ``numel`` elements.

        Raises:
            InvalidParameterError: an explicit ``columns`` wider than ``max(numel, 2**20)``.
        """
        c = resolve_columns(numel, self.rows, self.columns, self.compression)
        if c > max(numel, MAX_COLUMNS_FLOOR):
            raise InvalidParameterError(
                f"CountSketchCodec: columns={c} for a {numel}-element tensor; at most max(numel, {MAX_COLUMNS_FLOOR})"
            )
        # Decode work (rows x numel) is bounded by what a payload carries times MAX_COMPRESSION.
        if numel > MAX_COMPRESSION * self.rows * c:
            raise InvalidParameterError(
                f"CountSketchCodec: a {self.rows} x {c} table for {numel} elements compresses more than "
                f"{MAX_COMPRESSION:g}x"
            )
        return c

    def k_for(self, numel: int) -> int:
        """Coordinates ``decode`` keeps for a tensor of ``numel`` elements."""
        return resolve_k(numel, self.columns_for(numel), self.k)

    def new_sketch(
        self, numel: int, device: torch.device | str = "cpu", table: torch.Tensor | None = None
    ) -> CountSketch:
        """An empty sketch (or one wrapping ``table``) with this codec's sizes and hashes."""
        return CountSketch(
            numel, self.columns_for(numel), self.rows, seed=self.seed, device=device, table=table,
            hashes=self.hash_cache,
        )

    def sketch_of(self, payload: Payload) -> CountSketch:
        """The :class:`CountSketch` held by a payload of this codec (e.g. a combined one).

        Raises:
            PayloadMismatchError / CorruptPayloadError: as :meth:`decode`.
        """
        from ...errors import PayloadMismatchError

        if not isinstance(payload, Payload) or payload.codec_id != self.codec_id:
            raise PayloadMismatchError("not a CountSketchCodec payload")
        if dict(payload.params) != self.params:
            raise PayloadMismatchError(
                f"payload parameters {dict(payload.params)} differ from this codec's {self.params}"
            )
        return self._sketch(tuple(payload.sections), check_shape(payload.shape))

    def _sketch(self, sections: tuple[torch.Tensor, ...], numel: int) -> CountSketch:
        try:
            c = self.columns_for(numel)
        except InvalidParameterError as err:  # no encoder writes such a table
            raise CorruptPayloadError(str(err)) from None
        expect_sections(self, sections, [(torch.float32, self.rows * c)])
        table = sections[0]
        if not bool(torch.isfinite(table).all()):
            raise CorruptPayloadError("CountSketchCodec table holds NaN or Inf")
        return CountSketch(numel, c, self.rows, seed=self.seed, table=table, hashes=self.hash_cache)

    # -- the contract ----------------------------------------------------------------------------

    def _encode(self, x, *, key, generator):
        sketch = self.new_sketch(x.numel(), device=x.device).accumulate(x)
        if not bool(torch.isfinite(sketch.table).all()):
            raise NumericOverflowError("the Count Sketch table overflowed float32 (bucket sums beyond 3.4e38)")
        return (sketch.table.reshape(-1),)

    def _decode(self, sections, numel):
        sketch = self._sketch(sections, numel)
        out = torch.empty(numel, dtype=torch.float32, device=sketch.device)
        self._scatter_top(sketch, numel, out)
        return out

    def _decode_into(self, sections, numel, out):
        self._scatter_top(self._sketch(sections, numel), numel, out)

    def _scatter_top(self, sketch: CountSketch, numel: int, out: torch.Tensor) -> None:
        # the unsketched top-k scattered into a zeroed buffer: the caller's with decode(out=)
        idx, vals = sketch.unsketch(self.k_for(numel))
        out.zero_()
        out.index_copy_(0, idx, vals.to(out.dtype))


# -- the per-machine choice of ``auto`` mode (compressors/kernels/choice.py) -------------------------

#: Columns of the probes' sketch per coordinate (Sketched-SGD's proportions: compression 20 at 5 rows).
_PROBE_COLUMNS = 100


def _probe_sketch() -> tuple[CountSketch, torch.Tensor]:
    """The probes' fixed sketch and input (:func:`~gcbench.compressors.kernels.choice.probe_input`):
    ``PROBE_NUMEL`` normal values (seed 0), 5 rows of ``d / 100`` columns."""
    return choice.probe_input("countsketch", lambda n: (CountSketch(n, n // _PROBE_COLUMNS, 5, seed=0),
                                                        torch.randn(n, generator=torch.Generator().manual_seed(0))))


def _probe_accumulate(mode: str) -> None:
    """One accumulate of the probe input into the cleared probe sketch."""
    sketch, x = _probe_sketch()
    sketch.zero().accumulate(x)


def _probe_decode(mode: str) -> None:
    """One unsketch of the top 1% of the probe sketch (filled by its first accumulate)."""
    sketch, x = _probe_sketch()
    if not bool(sketch.table.any()):
        sketch.accumulate(x)
    sketch.unsketch(x.numel() // 100)


choice.register("sketch-accumulate", _probe_accumulate)
choice.register("sketch-decode", _probe_decode)
