"""Independent blocks of torch ops run on a few CPU threads at once (SketchML's per-group stages).

Why: a codec stage made of many medium-size ops (SketchML's MinMaxSketch insert per group, its
delta-binary keys per group, its grouping per chunk; Jiang et al., SIGMOD 2018, Sections 3.3-3.4)
runs best on one intra-op thread per op (:mod:`.threads`: an OpenMP region per op waits for the
pool's other threads on shared cores). Independent blocks can still use every core: torch releases
the GIL inside an op, so Python threads that each run one block's ops on their own overlap. Each
block must write only its own outputs (disjoint slices), so the result does not depend on which
thread ran it or when: the bytes are those of the blocks run one after the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)
_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] != workers:  # a forked child has no threads
            _POOL = (os.getpid(), workers, ThreadPoolExecutor(workers, thread_name_prefix="gcbench-cpu"))
        return _POOL[2]


def map_blocks(fn: Callable[[T], R], blocks: Sequence[T], device: torch.device, workers: int) -> list[R]:
    """``[fn(b) for b in blocks]``, run on up to ``workers`` threads when ``device`` is the CPU.

    Run it inside :func:`.threads.single_thread` so that each op stays on its calling thread.
    ``workers`` is the caller's thread count (e.g. ``torch.get_num_threads()`` read before entering
    ``single_thread``); 1, a single block or another device run the blocks here, in order. An
    exception of any block is raised here (the first block's first).
    """
    if workers <= 1 or len(blocks) <= 1 or device.type != "cpu" or threading.current_thread().name.startswith(
        "gcbench-cpu"
    ):
        return [fn(b) for b in blocks]
    futures = [_pool(min(workers, len(blocks))).submit(_one_thread, fn, b) for b in blocks]
    return [f.result() for f in futures]


def _one_thread(fn: Callable[[T], R], block: T) -> R:
    # OpenMP's thread count is per calling thread: a pool thread's ops stay on it (setting it here
    # leaves the caller's own count alone)
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    return fn(block)
