"""Does DataSketches' quantile-sketch ``update`` release the GIL? (SketchML encode speed.)

SketchML's encode (Jiang et al., SIGMOD 2018, Section 3.2) feeds every value of a sign to a
DataSketches quantile sketch; at 10% density of 25M that is ~1.25M values per sign, and the two
``update`` calls are the largest stage (``gcbench bench --stages``: ``sketchml quantile_sketch``).
Feeding per-thread sketches and merging them could only pay if ``update`` ran without the GIL.

Wall-clock speed-ups of two threads cannot show that where other processes may hold the second
core, so this probe measures what the GIL does, not speed: a pure-Python counter
thread runs while the main thread is inside one C call. A call that releases the GIL lets the
counter advance at roughly its free rate (``time.sleep``, ``numpy.sort`` as controls); a call that
holds it stops the counter for its whole duration (the counter only moves around the call's
edges). The printed ratio is the counter's rate inside the call over its rate inside
``time.sleep``: near 1 (or the share of a core the counter gets) = released, near 0 = held.

The classic sketch's ``update`` time is mostly its ``std::sort`` of each full 2k-item base buffer;
``sketch_feed.sketch_quantiles`` sorts those blocks first with numpy (the same sketch state for the
same coins), and the rows below show both. Since the binding holds the GIL, SketchML feeds the
negatives' sketch in a helper *process*
(``compressors/codecs/sketchml/feed.py``) while it feeds the positives' itself. :func:`helper_overlap`
times both sketches fed here, one after the other, against the helper's overlap (interleaved
rounds, medians, the load printed): the helper can only win where a second core is free, so the
ratio says how free the machine was as much as what the helper does.

Run: ``python -m benchmarks.sketchml_gil`` (a few seconds).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import numpy as np


def counter_rate(fn: Callable[[], object], rounds: int = 5) -> float:
    """Median increments per second of a pure-Python counter thread while ``fn()`` runs."""
    state = {"count": 0, "stop": False}

    def spin() -> None:
        while not state["stop"]:
            state["count"] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # a waiting thread asks for the GIL after 1 ms
    t = threading.Thread(target=spin, daemon=True)
    t.start()
    time.sleep(0.05)
    rates = []
    try:
        for _ in range(rounds):
            c0, t0 = state["count"], time.perf_counter()
            fn()
            rates.append((state["count"] - c0) / (time.perf_counter() - t0))
    finally:
        state["stop"] = True
        t.join()
        sys.setswitchinterval(old)
    return sorted(rates)[len(rates) // 2]


def helper_overlap(n: int = 1_250_000, rounds: int = 7) -> dict[str, float] | None:
    """Median seconds of two ``quantiles_floats_sketch(128)`` feeds of ``n`` values each: the
    library's ``update`` on the values as they come, ``sketch_feed.sketch_quantiles`` (2k-blocks
    sorted first) for both in this process, and for one in the sketch helper process (shared
    buffer, same items) while this process feeds the other; None where the helper is unavailable
    (see ``sketch_feed.helper``)."""
    from gcbench.bench.rounds import interleaved
    from gcbench.compressors.codecs.sketchml import feed as sketch_feed

    h = sketch_feed.helper()
    if h is None:
        return None
    rng = np.random.default_rng(1)
    a, b = (np.abs(rng.standard_normal(n)).astype(np.float32) for _ in range(2))

    def here() -> None:
        sketch_feed.sketch_quantiles(a, 128, "quantiles", 128)
        sketch_feed.sketch_quantiles(b, 128, "quantiles", 128)

    def overlapped() -> None:
        h.buffer(n, np.float32)[:] = a
        h.start(128, "quantiles", 128)
        sketch_feed.sketch_quantiles(b, 128, "quantiles", 128)
        h.result()

    def raw() -> None:  # the library alone, blocks in arrival order (its std::sort does the work)
        import datasketches

        datasketches.quantiles_floats_sketch(128).update(a)
        datasketches.quantiles_floats_sketch(128).update(b)

    fns = {"library, raw order": raw, "both here": here, "one in the helper": overlapped}
    timings = interleaved(fns, repeat=rounds, warmup=1, device="cpu")
    return {k: t.median_s for k, t in timings.items()}


def main() -> None:
    """Print the counter's relative rate inside each call (see the module docstring)."""
    import datasketches

    values = np.abs(np.random.default_rng(0).standard_normal(1_250_000)).astype(np.float32)
    free = counter_rate(lambda: time.sleep(0.05))
    calls: dict[str, Callable[[], object]] = {
        "numpy.sort (releases the GIL; control)": lambda: np.sort(values, kind="stable"),
        "quantiles_floats_sketch(128).update": lambda: datasketches.quantiles_floats_sketch(128).update(values),
        "kll_floats_sketch(200).update": lambda: datasketches.kll_floats_sketch(200).update(values),
    }
    print(f"counter inside time.sleep: {free / 1e6:.2f} M/s (= 1.00)")
    for name, fn in calls.items():
        print(f"{name:42s} {counter_rate(fn) / free:5.2f}")
    import os

    load = os.getloadavg()
    got = helper_overlap()
    if got is None:
        print("sketch helper unavailable here (one CPU, no memfd, or GCBENCH_SKETCH_HELPER=0)")
        return
    raw, both, over = got["library, raw order"], got["both here"], got["one in the helper"]
    print(f"two 1.25M-value classic sketches (k=128), load {load[0]:.2f} on {len(os.sched_getaffinity(0))} CPUs:")
    print(f"  library update, raw order        {raw * 1e3:7.1f} ms")
    print(f"  sketch_quantiles (blocks sorted) {both * 1e3:7.1f} ms ({raw / both:.2f}x)")
    print(f"  one of them in the helper        {over * 1e3:7.1f} ms ({both / over:.2f}x; needs a free core)")


if __name__ == "__main__":
    main()
