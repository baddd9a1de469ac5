"""Count Sketch accumulate against the floor of a design built on ``index_add_`` (target: "accumulate <= 10x copy_").

At the reference shape of ``gcbench bench --stages`` (5 rows, ``d / 50`` columns, ``d`` float32),
times in interleaved rounds: ``copy_`` into a ready buffer, ``CountSketch.accumulate`` eager and
compiled (:mod:`compressors.kernels.countsketch`), and the floor: ``index_add_`` of precomputed codes
(held, ``4 r d`` bytes, so not rebuilt), the two halves on the same thread pool as ``accumulate``.
The floor is what torch's scatter-add costs when rebuilding codes is free: an accumulate built on
it cannot beat it (the additions in index order fix the table's bytes); the C pass that rebuilds the
codes and adds them in one loop (the compiled row, where C kernels build) runs below it. A second floor,
``index_add_`` of the same held codes folded into 2^16 bins (a 256 KiB accumulator that stays in
L2: no cache misses), is what torch's scatter-add costs per element even when a design (a
partition by bucket, per-thread tables) keeps every accumulator in cache, before paying for that
partition: any design that adds in index order with this primitive stays above it. Prints medians
and minima as multiples of the same-run ``copy_``; ``THREADS=1`` runs on one thread.

Run: ``python -m benchmarks.countsketch_floor [d] [rounds]`` (defaults 25,000,000 and 7; ~1 GB).
"""

from __future__ import annotations

import os
import sys
import time


def main(d: int = 25_000_000, rounds: int = 7) -> None:
    """Print the table described in the module docstring."""
    import torch

    if os.environ.get("THREADS") == "1":
        torch.set_num_threads(1)
    from gcbench.bench.peers import countsketch_floor
    from gcbench.bench.rounds import interleaved
    from gcbench.compressors.kernels import core as fused
    from gcbench.compressors.codecs.countsketch.codec import CountSketch

    r, c = 5, max(1, d // 50)
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    dst = torch.empty_like(x)
    sk = CountSketch(d, c, r, seed=0)
    ref = sk.accumulate(x).table.clone()

    def compiled() -> None:
        with fused.forced("compiled"):
            sk.zero().accumulate(x)

    t0 = time.perf_counter()
    compiled()
    print(f"first compiled accumulate (compilation included): {time.perf_counter() - t0:.1f} s")
    if not torch.equal(sk.table, ref):
        raise SystemExit("compiled and eager tables differ")
    floor = countsketch_floor(x, c, r, sk.coefficients)

    cached = countsketch_floor(x, c, r, sk.coefficients, bins=1 << 16)

    fns = {
        "copy_": lambda: dst.copy_(x),
        "accumulate eager": lambda: sk.zero().accumulate(x),
        "accumulate compiled": compiled,
        "floor: index_add_ of held codes": floor,
        "floor in cache: 2^16 bins": cached,
    }
    timings = interleaved(fns, repeat=rounds, warmup=1, device="cpu")
    cmed, cmin = timings["copy_"].median_s, timings["copy_"].min_s
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"d = {d}, {r} x {c}, {torch.get_num_threads()} torch threads, {rounds} rounds; load average {load}")
    for k, t in timings.items():
        med, lo = t.median_s, t.min_s
        print(f"{k:32s} median {med * 1e3:8.1f} ms {med / cmed:6.1f}x copy_ | min {lo * 1e3:8.1f} ms {lo / cmin:6.1f}x")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
