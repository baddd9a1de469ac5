"""Independent blocks of torch ops run on a few CPU threads at once (SketchML's per-group stages).

Why: a codec stage made of many medium-size ops (SketchML's MinMaxSketch insert per group, its
delta-binary keys per group, its grouping per chunk; Jiang et al., SIGMOD 2018, Sections 3.3-3.4)
runs best on one intra-op thread per op (:mod:`~gcbench.compressors.parallel.threads`: an OpenMP region per op waits for the
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
#: The pool threads' name prefix.
_PREFIX = "gcbench-cpu"


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] != workers:  # a forked child has no threads
            _POOL = (os.getpid(), workers, ThreadPoolExecutor(workers, thread_name_prefix=_PREFIX))
        return _POOL[2]


def caller_workers(workers: int | None = None) -> int:
    """``workers``, or the calling thread's torch thread count when None: the default worker count
    of the stages that use :func:`map_blocks` (read it before :func:`~gcbench.compressors.parallel.threads.single_thread` sets
    the count to 1)."""
    return torch.get_num_threads() if workers is None else workers


def on_pool_thread() -> bool:
    """Whether this thread is one of :func:`map_blocks`' pool threads (a block of a stage already
    split over threads: work it runs stays on it)."""
    return threading.current_thread().name.startswith(_PREFIX)


def map_blocks(fn: Callable[[T], R], blocks: Sequence[T], device: torch.device, workers: int) -> list[R]:
    """``[fn(b) for b in blocks]``, shared between this thread and up to ``workers - 1`` pool threads
    when ``device`` is the CPU.

    Run it inside :func:`~gcbench.compressors.parallel.threads.single_thread` so that each op stays on its calling thread.
    ``workers`` is the caller's thread count (e.g. ``torch.get_num_threads()`` read before entering
    ``single_thread``); 1, a single block or another device run the blocks here, in order. This
    thread takes blocks too, so a pool thread that a busy machine does not schedule delays at most
    the block it took. An exception of any block is raised here.
    """
    blocks = list(blocks)
    if workers <= 1 or len(blocks) <= 1 or device.type != "cpu" or on_pool_thread():
        return [fn(b) for b in blocks]
    results: list = [None] * len(blocks)
    taken = iter(range(len(blocks)))
    take = threading.Lock()

    def work() -> None:
        while True:
            with take:
                i = next(taken, None)
            if i is None:
                return
            results[i] = fn(blocks[i])

    helpers = [_pool(workers - 1).submit(_one_thread, work) for _ in range(min(workers, len(blocks)) - 1)]
    try:
        work()
    finally:
        errors = [f.exception() for f in helpers]  # waits for every helper
    for err in errors:
        if err is not None:
            raise err
    return results


def _one_thread(work: Callable[[], None]) -> None:
    # OpenMP's thread count is per calling thread: a pool thread's ops stay on it (setting it here
    # leaves the caller's own count alone)
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    work()
