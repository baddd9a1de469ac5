"""A per-rank communication thread: runs submitted jobs one at a time, in submission order.

:func:`gcbench.envs.ddp_hook.gcbench_hook` with ``overlap=True`` hands each DDP bucket's work
(encode, the protocol's collectives, decode) to a :class:`CommThread` and returns the job's
``torch.futures.Future`` at once, so autograd goes on with the next buckets' backward while this
thread communicates. One thread and a FIFO queue keep the property the synchronous hook had: every
rank issues the same collectives in the same order (DDP hands buckets over in the same order on
every rank), and no collective is ever issued from a gloo/NCCL completion callback (chaining
collectives in ``Future.then`` callbacks is how torch's ``powerSGD_hook`` deadlocks on gloo with
several buckets).

A job that raises completes its future with the exception; every later job then fails at once
with :class:`CommThreadError` (a rank whose exchange broke must not issue more collectives that
its peers would pair with the wrong ones). :meth:`CommThread.close` (also run at interpreter exit
and when the object is collected) stops and joins the thread.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .errors import EnvError

_STOP = object()
_counter = 0
_counter_lock = threading.Lock()


class CommThreadError(EnvError, RuntimeError):
    """A job was submitted after an earlier one failed, or after :meth:`CommThread.close`."""


def _serve(jobs: queue.SimpleQueue, state: dict[str, Any], threads: int) -> None:
    # OpenMP's thread count is per calling thread: without this a job's matrix products and QR
    # decompositions would use the library default and round differently from the same work on
    # the thread that built us (PowerSGD's factors then differ in the last bits)
    torch.set_num_threads(threads)
    while True:
        item = jobs.get()
        if item is _STOP:
            return
        fn, fut, done = item
        try:
            if state["error"] is not None:
                fut.set_exception(CommThreadError(f"an earlier communication job failed: {state['error']}"))
                continue
            try:
                result = fn()
            except BaseException as err:  # noqa: BLE001 - handed to the waiting DDP reducer
                state["error"] = f"{type(err).__name__}: {err}"
                fut.set_exception(err)
            else:
                fut.set_result(result)
        finally:
            done()


def _shutdown(jobs: queue.SimpleQueue, thread: threading.Thread, timeout: float) -> None:
    if thread.is_alive():
        jobs.put(_STOP)
        thread.join(timeout)


class CommThread:
    """One daemon thread serving jobs in order.

    Args:
        name: the thread's name prefix (``threading.enumerate()`` shows ``<name>-<n>``).
        join_timeout_s: how long :meth:`close` waits for a job that is still running (a job blocked
            in a collective whose peer died returns when the process group's timeout fires).
    """

    def __init__(self, name: str = "gcbench-comm", *, join_timeout_s: float = 60.0) -> None:
        global _counter
        with _counter_lock:
            _counter += 1
            n = _counter
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._state: dict[str, Any] = {"error": None}
        self._pending = 0
        self._idle = threading.Condition()
        # daemon: a job stuck in a dead peer's collective must not keep the process alive; close()
        # (and the finalizer at exit) still stop it cleanly in the normal case.
        self._thread = threading.Thread(target=_serve, args=(self._jobs, self._state, torch.get_num_threads()), name=f"{name}-{n}", daemon=True)
        self._thread.start()
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._jobs, self._thread, join_timeout_s)

    @property
    def name(self) -> str:
        """The thread's name."""
        return self._thread.name

    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread.is_alive()

    def submit(self, fn: Callable[[], Any], *, devices: list[torch.device] | None = None) -> torch.futures.Future:
        """Queue ``fn``; its result (or exception) completes the returned future."""
        if self._closed:
            raise CommThreadError("the communication thread is closed")
        fut: torch.futures.Future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        with self._idle:
            self._pending += 1

        self._jobs.put((fn, fut, self._done))
        return fut

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every submitted job has run."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout):
                raise CommThreadError(f"communication jobs still running after {timeout} s")

    def close(self) -> None:
        """Stop the thread after the queued jobs and join it (idempotent)."""
        self._closed = True
        self._finalizer()
