"""DataSketches quantile sketches, in this process or fed in a helper process (SketchML's Step 1).

SketchML (Jiang et al., SIGMOD 2018, Section 3.2) feeds every value of a sign to a quantile sketch;
with the signs separated (Section 3.3, Solution 1) that is two independent sketches per encode. The
DataSketches binding holds the GIL for the whole ``update`` call (``benchmarks/sketchml_gil.py``), so
two Python threads cannot feed the two sketches at once, and per-thread sketches merged would not
run in parallel either. A second *process* can: :class:`SketchHelper` is one long-lived helper
process that runs one sketch while the caller runs the other.

* *Same sketch.* The helper feeds the same items, in the same order, in one ``update`` call of the
  same sketch type and ``k``, and reads the same quantiles: the result is the in-process one for the
  same compaction coins (the coins themselves are DataSketches' own, unseedable from Python, in
  both processes).
* *Transport.* The values go through a shared anonymous memory file (``os.memfd_create``) the
  caller writes into directly (:meth:`SketchHelper.buffer`); a request (sizes, sketch, ``k``,
  parts) and the reply (quantiles, min, max as float64) travel over the helper's stdin/stdout.
* *Failure.* Any failure of the helper (it died, replied with an error, the pipe broke, or it did
  not reply within :func:`reply_timeout` seconds: stopped, swapped out, hung) falls back to running
  that sketch in this process on the same buffer: the same values, the same result type and, for bad
  input, the same exception as without the helper. A broken or hung helper is killed and not
  restarted.
* *When.* Only where it can pay: Linux (``memfd_create``), at least two CPUs in this process's
  affinity set (``taskset -c 1`` turns it off), a caller with more than one torch thread (SketchML
  asks only then: a one-thread caller keeps its whole encode on its thread, where a CPU-time clock
  counts it), and not switched off by ``GCBENCH_SKETCH_HELPER=0``. The helper starts on first use (one Python start with numpy and datasketches, no torch: reported
  as part of the first encode) and exits when this process closes its pipe (at exit, or when it dies).
  A process forked from the owner gets its own helper (a forked child also holds the owner's pipe
  ends, so the owner's helper exits when both have closed them). One request at a time: a caller
  that finds the helper busy (another thread) runs its sketch in process.

This module imports nothing from the project and no torch: the helper process loads it by path.
"""

from __future__ import annotations

import atexit
import mmap
import os
import select
import struct
import subprocess
import sys
import threading
from typing import IO

import numpy as np

SKETCHES = ("quantiles", "kll")
#: Request: item size (4 or 8), sketch (0 quantiles, 1 kll), k, parts, n items, buffer bytes.
_REQUEST = struct.Struct("<BBIIqq")
_STATUS = struct.Struct("<B")
#: Shared buffer growth step (bytes): a request never maps less than this.
_MIN_BUFFER = 1 << 20
#: The helper's reply is awaited at most ``REPLY_TIMEOUT_S + n * REPLY_TIMEOUT_PER_ITEM_S`` seconds for
#: ``n`` values. The sketch takes about 12 ns per value on one core of a 2-core x86 machine
#: (1.25M values in 15.6 ms); the bound leaves two orders of magnitude for a loaded machine, and a
#: helper past it is treated as hung (killed, the sketch redone here).
REPLY_TIMEOUT_S = 30.0
REPLY_TIMEOUT_PER_ITEM_S = 1e-6


def reply_timeout(n: int) -> float:
    """Seconds to wait for the helper's reply to a request of ``n`` values (see :data:`REPLY_TIMEOUT_S`)."""
    return REPLY_TIMEOUT_S + n * REPLY_TIMEOUT_PER_ITEM_S


def sketch_quantiles(
    arr: np.ndarray, parts: int, sketch: str, k: int, *, scratch: bool = False
) -> tuple[list[float], float, float]:
    """Interior quantiles ``Q(i / parts)`` (``i = 1 .. parts-1``), min and max of ``arr`` from one
    DataSketches sketch (``"quantiles"``: the classic sketch the paper used; ``"kll"``).

    The whole array goes to the sketch in one ``update`` call. float32 data use the library's float
    sketch, float64 data its double sketch: the same algorithm over the same items (every float32
    is a double exactly, with the same order), so the same splits, without a float64 copy.
    The outer edges are the sketch's exact minimum and maximum item.

    Classic sketch: every consecutive block of ``2k`` items is sorted here first (numpy's
    vectorised sort), since the sketch keeps the items of a block in its base buffer and, when
    ``2k`` have arrived, sorts the buffer (``std::sort``) before its random compaction: that sort
    is most of its ``update`` time (measured: 51.6 ms for 1.25M random float32 values, 14.0 ms for
    the same values block-sorted, + 1.6 ms for the block sort). The base buffer after that sort,
    hence every later state and the result for the same compaction coins, is the same as feeding
    the block in its original order (up to the order of items that compare equal: +0.0 and -0.0).
    ``scratch``: ``arr`` may be sorted in place (else a copy is).
    """
    import datasketches

    f32 = arr.dtype == np.float32
    if sketch == "quantiles":
        make = datasketches.quantiles_floats_sketch if f32 else datasketches.quantiles_doubles_sketch
    elif sketch == "kll":
        make = datasketches.kll_floats_sketch if f32 else datasketches.kll_doubles_sketch
    else:
        raise ValueError(f"sketch must be one of {SKETCHES}, got {sketch!r}")
    sk = make(k)  # bad k raises here, before any work
    block = 2 * k
    if sketch == "quantiles" and arr.size >= block:
        if not scratch:
            arr = arr.copy()
        whole = arr.size - arr.size % block  # the tail stays in the base buffer, sorted when read
        arr[:whole].reshape(-1, block).sort(axis=1)
    sk.update(arr)
    return (
        [float(q) for q in sk.get_quantiles([i / parts for i in range(1, parts)])],
        float(sk.get_min_value()),
        float(sk.get_max_value()),
    )


class SketchHelper:
    """One helper process that runs :func:`sketch_quantiles` on values written to a shared buffer.

    Use: ``buf = h.buffer(n, dtype)``; fill ``buf``; ``h.start(parts, sketch, k)``; run the other
    sketch here; ``h.result()``. Hold :attr:`lock` (non-blocking) around the whole sequence.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.broken = False
        self.requests = 0  # requests sent (for tests and benchmarks)
        self._fd = os.memfd_create("gcbench-sketch", getattr(os, "MFD_CLOEXEC", 1))
        self._size = 0
        self._mem: mmap.mmap | None = None
        self._arr: np.ndarray | None = None
        self._pending: tuple[int, str, int] | None = None
        code = (
            "import importlib.util as u, sys\n"
            "s = u.spec_from_file_location('gcbench_sketch_feed', sys.argv[1])\n"
            "m = u.module_from_spec(s)\n"
            "s.loader.exec_module(m)\n"
            "m.serve(int(sys.argv[2]))\n"
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, os.path.abspath(__file__), str(self._fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(self._fd,),
            close_fds=True,
        )

    def buffer(self, n: int, dtype: np.dtype) -> np.ndarray:
        """A writable shared array of ``n`` items of ``dtype`` (float32/float64) for the next request;
        it stays valid until the next call of :meth:`buffer`."""
        need = max(n * np.dtype(dtype).itemsize, 1)
        if need > self._size:
            size = max(need, 2 * self._size, _MIN_BUFFER)
            os.ftruncate(self._fd, size)
            self._mem = mmap.mmap(self._fd, size)
            self._size = size
        arr = np.frombuffer(self._mem, dtype=dtype, count=n)
        self._arr = arr
        return arr

    def start(self, parts: int, sketch: str, k: int) -> None:
        """Ask the helper for :func:`sketch_quantiles` of the array last given by :meth:`buffer`
        (filled by now); a failure to send is kept for :meth:`result` to handle."""
        arr = self._arr
        assert arr is not None, "buffer() first"
        self._pending = (parts, sketch, k)
        self.requests += 1
        try:
            req = _REQUEST.pack(arr.dtype.itemsize, SKETCHES.index(sketch), k, parts, arr.size, self._size)
            self._proc.stdin.write(req)
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self.broken = True

    def result(self) -> tuple[list[float], float, float]:
        """The reply to :meth:`start`; on any helper failure, the sketch computed in this process."""
        assert self._pending is not None and self._arr is not None, "start() first"
        (parts, sketch, k), arr = self._pending, self._arr
        self._pending = None
        if not self.broken:
            try:
                # bounded wait: a stopped or hung helper must not hang the encode (the reply is the
                # only data on this pipe, so nothing sits in the reader's buffer before it)
                ready, _, _ = select.select([self._proc.stdout], [], [], reply_timeout(arr.size))
                if not ready:
                    raise TimeoutError("sketch helper did not reply in time")
                got = _read_reply(self._proc.stdout, parts)
            except (OSError, ValueError, struct.error):  # gone or hung (TimeoutError is an OSError)
                self.broken = True
                self.close()
                self._proc.kill()  # a hung helper does not exit on the closed pipe
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered in 5 s
                    pass
            else:
                if got is not None:
                    return got
        # the sketch failed in the helper, or the helper is gone: run it here (same values), so
        # that a failure raises the in-process exception
        return sketch_quantiles(arr, parts, sketch, k, scratch=True)

    def close(self) -> None:
        """End the helper (it exits on the closed pipe)."""
        for f in (self._proc.stdin, self._proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def _read_exact(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise OSError("sketch helper closed its pipe")
    return data


def _read_reply(f: IO[bytes], parts: int) -> tuple[list[float], float, float] | None:
    """The helper's reply: status 0 and ``parts + 1`` float64 (quantiles, min, max); None on error."""
    (status,) = _STATUS.unpack(_read_exact(f, _STATUS.size))
    if status != 0:
        return None
    vals = np.frombuffer(_read_exact(f, 8 * (parts + 1)), dtype="<f8").tolist()
    return vals[: parts - 1], vals[parts - 1], vals[parts]


_HELPER: SketchHelper | None = None
_UNAVAILABLE_IN: int | None = None  # pid of a process where the helper could not start
_HELPER_LOCK = threading.Lock()


def helper() -> SketchHelper | None:
    """This process's helper (started on first use), or None where it cannot pay, is switched off,
    or could not start (see the module docstring)."""
    global _HELPER, _UNAVAILABLE_IN
    if os.environ.get("GCBENCH_SKETCH_HELPER", "1") == "0" or not hasattr(os, "memfd_create"):
        return None
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return None
    except AttributeError:
        return None
    with _HELPER_LOCK:
        h, pid = _HELPER, os.getpid()
        if h is not None and h.pid == pid:
            return None if h.broken else h
        if _UNAVAILABLE_IN == pid:
            return None
        try:
            _HELPER = h = SketchHelper()
        except (OSError, ValueError):  # no interpreter to start (embedded), no fds, ...
            _UNAVAILABLE_IN = pid
            return None
        return h


@atexit.register
def _close_helper() -> None:
    h = _HELPER
    if h is not None and h.pid == os.getpid():
        h.close()
        try:
            h._proc.wait(timeout=5)  # it exits on the closed pipe; reaped here, not left a zombie
        except subprocess.TimeoutExpired:
            h._proc.kill()


def serve(fd: int) -> None:
    """The helper's loop: read a request from stdin, sketch the shared buffer, reply on stdout;
    exit at end of input."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    mem, size = None, 0
    while True:
        req = inp.read(_REQUEST.size)
        if not req or len(req) != _REQUEST.size:
            return
        itemsize, kind, k, parts, n, buf_size = _REQUEST.unpack(req)
        try:
            if buf_size != size:
                mem, size = mmap.mmap(fd, buf_size), buf_size
            arr = np.frombuffer(mem, dtype=np.float32 if itemsize == 4 else np.float64, count=n)
            qs, lo, hi = sketch_quantiles(arr, parts, SKETCHES[kind], k, scratch=True)
            del arr
            reply = _STATUS.pack(0) + np.asarray([*qs, lo, hi], dtype="<f8").tobytes()
        except Exception:  # noqa: BLE001 - reported as a status; the caller redoes the sketch in process
            reply = _STATUS.pack(1)
        out.write(reply)
        out.flush()
