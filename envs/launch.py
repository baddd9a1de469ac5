"""Launch a function on N ``torch.distributed`` ranks on this machine, and fail loudly and fast.

:func:`launch` starts ``nproc`` processes (``torch.multiprocessing``-style, start method
``forkserver`` by default so torch is imported once per launcher rather than once per rank), joins
them into a gloo (or NCCL) process group over ``tcp://127.0.0.1:<free port>`` with a collective
timeout, runs ``fn(ctx, *args)`` on each and returns every rank's return value.

A run never hangs silently. The launcher watches the processes and each rank's *progress counter*
(:meth:`WorkerContext.progress`, called before every collective by the DDP hook and once per step
by the training loop):

* a rank that exits abnormally (killed by a signal, ``os._exit``, an exception) ends the run
  at once with :class:`~.errors.WorkerFailedError` naming it (``reason="died"`` or ``"raised"``,
  the rank's traceback included). An exception whose type and message say a collective timed out
  or a connection broke (a ``TimeoutError`` or ``ConnectionError``, or a ``RuntimeError`` that says
  so, as gloo's do) is taken as the consequence of another rank, not as a root cause;
* a rank that stops making progress makes the others wait in a collective until gloo's timeout
  (``timeout_s``) fires; the error then names the rank(s) whose counter is behind
  (``reason="hung"``). If no rank progresses for ``timeout_s + watchdog_grace_s`` (a hang outside
  any collective), the launcher kills every rank and raises the same error itself.

Every other process is terminated before the error is raised.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..compressors.errors import InvalidParameterError
from .errors import WorkerFailedError

#: The largest collective timeout a launch accepts, in seconds: a day. A collective that waits longer
#: is a hang, and much larger values overflow ``datetime.timedelta`` or the collectives' milliseconds.
MAX_TIMEOUT_S = 86400.0

#: Modules the forkserver imports once, so that each rank starts in a fraction of a second
#: (DDP's constructor imports torch._dynamo: about 2.5 s of CPU per process otherwise; scikit-learn,
#: which the digits data comes from, 1.6 s). Missing ones are skipped by multiprocessing.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "torch.nn.parallel",
    "sklearn.datasets",
    "gcbench.envs.ddp_hook",
    "gcbench.commands.train",
)


@dataclass
class WorkerContext:
    """What a launched function receives: its rank, the world size, a progress callback and a step callback."""

    rank: int
    world_size: int
    timeout_s: float
    _progress: Any = None
    on_step: Callable[[int], None] | None = None

    def progress(self) -> None:
        """Tell the launcher this rank is alive and moving (cheap: one shared-memory increment)."""
        if self._progress is not None:
            self._progress[self.rank] += 1

    def step_done(self, steps: int) -> None:
        """This rank has completed ``steps`` steps of its run (under :func:`launch`: one shared-memory write,
        which the launcher hands to its ``on_steps`` for rank 0; nothing else reads it)."""
        if self.on_step is not None:
            self.on_step(steps)


def placement(device: str, nproc: int, backend: str | None = None, gpus: int | None = None) -> tuple[str, list[str]]:
    """``(backend, device of each rank)`` for ``nproc`` ranks on ``device``.

    ``backend`` None picks: gloo on the CPU; on plain ``cuda`` NCCL when every rank can have a GPU
    of its own (``nproc <= gpus``, the machine's count by default), else gloo with every rank on
    ``cuda:0``; on ``cuda:N`` NCCL for one rank, gloo for several (they share that GPU). An explicit
    ``backend`` is honoured where it can work: NCCL refuses two ranks on one GPU.

    Raises:
        InvalidParameterError: NCCL asked for on the CPU or for ranks that would share a GPU.
    """
    if device == "cpu":
        if backend not in (None, "gloo"):
            raise InvalidParameterError(f"backend {backend!r} needs a CUDA device; the CPU uses gloo")
        return "gloo", ["cpu"] * nproc
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise InvalidParameterError(f"device must be cpu, cuda or cuda:N, got {device!r}")
    gpus = torch.cuda.device_count() if gpus is None else gpus
    own = nproc == 1 or (not index and nproc <= gpus)  # every rank can have a GPU of its own
    if backend is None:
        backend = "nccl" if own else "gloo"
    if backend == "nccl":
        if not own:
            raise InvalidParameterError(f"NCCL needs one GPU per rank: {nproc} ranks on {device} ({gpus} GPU(s)); use gloo")
        return "nccl", [device] if index else [f"cuda:{r}" for r in range(nproc)]
    if backend != "gloo":
        raise InvalidParameterError(f"backend must be gloo or nccl, got {backend!r}")
    return "gloo", [f"cuda:{index or 0}"] * nproc


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int,
    nproc: int,
    port: int,
    backend: str,
    timeout_s: float,
    threads: int,
    progress: Any,
    steps: Any,
    outdir: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
) -> None:
    import torch.distributed as dist

    torch.set_num_threads(threads)
    out = Path(outdir)
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=nproc,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        ctx = WorkerContext(rank, nproc, timeout_s, progress, on_step=lambda n: steps.__setitem__(rank, n))
        result = fn(ctx, *args)
        torch.save(result, out / f"rank{rank}.tmp")
        os.replace(out / f"rank{rank}.tmp", out / f"rank{rank}.pt")
        dist.destroy_process_group()
    except BaseException as err:  # noqa: BLE001 - reported to the launcher, then exit non-zero
        if _is_timeout(err):
            (out / f"rank{rank}.timeout").touch()
        (out / f"rank{rank}.err").write_text(f"{type(err).__name__}: {err}\n\n{traceback.format_exc()}")
        os._exit(1)  # skip atexit/finalizers that could block on a broken process group


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _is_timeout(err: BaseException) -> bool:
    """Whether a rank's exception is the consequence of another rank not answering: a
    ``TimeoutError`` or ``ConnectionError``, or a ``RuntimeError`` (gloo's timeouts and broken
    connections; ``torch.distributed.DistError`` for NCCL) whose message says it timed out or its
    connection was closed or reset. Judged from the type and the message only, never from the
    traceback's source lines or paths."""
    if isinstance(err, (TimeoutError, ConnectionError)):
        return True
    if not isinstance(err, RuntimeError):
        return False
    low = str(err).lower()
    return (
        "timed out" in low or "timeout" in low or "connection closed" in low or "connection reset" in low
    )


def check_timeout(timeout_s: float, option: str = "timeout_s") -> float:
    """``timeout_s`` when it is a collective timeout a launch accepts: positive, finite and at most
    :data:`MAX_TIMEOUT_S`; else :class:`~gcbench.compressors.errors.InvalidParameterError` (a
    ``ValueError``) whose message starts with ``option``."""
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise InvalidParameterError(f"{option} must be a positive number of seconds up to {MAX_TIMEOUT_S:g}, got {timeout_s}")
    return timeout_s


def launch(
    fn: Callable[..., Any],
    nproc: int,
    args: Sequence[Any] = (),
    *,
    timeout_s: float = 60.0,
    backend: str = "gloo",
    start_method: str = "forkserver",
    threads: int = 1,
    watchdog_grace_s: float = 5.0,
    poll_s: float = 0.05,
    on_steps: Callable[[int], None] | None = None,
) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``nproc`` ranks; return the ranks' return values in rank order.

    Args:
        fn: a picklable (module-level) function ``fn(ctx: WorkerContext, *args)``; its return value
            must be picklable by ``torch.save``.
        nproc: number of ranks (processes).
        args: extra arguments for ``fn`` (picklable).
        timeout_s: the process group's collective timeout (at most :data:`MAX_TIMEOUT_S`); a hung
            rank is reported within about ``timeout_s + watchdog_grace_s`` seconds.
        backend: ``"gloo"`` (CPU) or ``"nccl"``.
        start_method: ``"forkserver"`` (default; torch imported once), ``"spawn"`` or ``"fork"``.
        threads: ``torch.set_num_threads`` in each rank.
        watchdog_grace_s: extra seconds without progress before the launcher itself kills the run.
        on_steps: called here, while the ranks run, with the steps rank 0 has completed each time that
            count (:meth:`WorkerContext.step_done`) changes (a progress bar's feed).

    Raises:
        InvalidParameterError: ``nproc`` below 1 or a timeout :func:`check_timeout` refuses.
        WorkerFailedError: a rank died, raised, or hung (see the module docstring).
    """
    if nproc < 1:
        raise InvalidParameterError(f"nproc must be >= 1, got {nproc}")
    check_timeout(timeout_s)
    mpctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        mpctx.set_forkserver_preload(list(PRELOAD))
    progress = mpctx.Array("q", nproc, lock=False)
    steps = mpctx.Array("q", nproc, lock=False)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gcbench-launch-") as outdir:
        procs = [
            mpctx.Process(
                target=_entry,
                args=(r, nproc, port, backend, timeout_s, threads, progress, steps, outdir, fn, tuple(args)),
                name=f"gcbench-rank{r}",
            )
            for r in range(nproc)
        ]
        for p in procs:
            p.start()
        try:
            _monitor(procs, progress, Path(outdir), timeout_s + watchdog_grace_s, poll_s,
                     None if on_steps is None else (steps, on_steps))
        finally:
            _stop(procs)
        # any picklable return value: written by this launch's own ranks into a private temporary folder
        # (mode 0700, removed on return), never a file a user hands over
        return [torch.load(Path(outdir) / f"rank{r}.pt", weights_only=False) for r in range(nproc)]


def _monitor(procs: list[Any], progress: Any, outdir: Path, stall_s: float, poll_s: float,
             steps: tuple[Any, Callable[[int], None]] | None = None) -> None:
    last = list(progress)
    shown = 0
    last_change = time.monotonic()
    while True:
        alive = [p for p in procs if p.exitcode is None]
        failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if failed:
            # give simultaneous failures a moment to surface, so the root cause can be told apart
            time.sleep(0.3)
            raise _failure(procs, list(progress), outdir)
        missing = [r for r, p in enumerate(procs) if p.exitcode == 0 and not (outdir / f"rank{r}.pt").exists()]
        if missing:
            raise WorkerFailedError(f"rank(s) {missing} exited without a result", ranks=tuple(missing), reason="died")
        if not alive:
            return
        multiprocessing.connection.wait([p.sentinel for p in alive], timeout=poll_s)
        if steps is not None and steps[0][0] != shown:
            shown = steps[0][0]
            steps[1](shown)
        now = time.monotonic()
        snap = list(progress)
        if snap != last:
            last, last_change = snap, now
        elif now - last_change > stall_s:
            behind = _laggards(snap, [p.exitcode is None for p in procs])
            raise WorkerFailedError(
                f"no rank made progress for {stall_s:.1f} s; rank(s) {behind} are behind (progress counters "
                f"{dict(enumerate(snap))}): hung. Every rank was stopped.",
                ranks=tuple(behind),
                reason="hung",
            )


def _laggards(counters: Sequence[int], alive: Sequence[bool]) -> list[int]:
    candidates = [r for r in range(len(counters)) if alive[r]] or list(range(len(counters)))
    low = min(counters[r] for r in candidates)
    behind = [r for r in candidates if counters[r] == low]
    return behind if len(behind) < len(counters) else list(range(len(counters)))


def _failure(procs: list[Any], counters: list[int], outdir: Path) -> WorkerFailedError:
    errors = {r: (outdir / f"rank{r}.err").read_text() for r in range(len(procs)) if (outdir / f"rank{r}.err").exists()}
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    dead = [r for r, c in codes.items() if c is not None and c != 0 and r not in errors]
    raised = sorted(errors)
    if dead:
        parts = []
        for r in dead:
            c = codes[r]
            how = f"killed by {_signal_name(c)}" if c < 0 else f"exited with code {c}"
            parts.append(f"rank {r} died ({how})")
        msg = "; ".join(parts)
        if raised:
            msg += "; then " + "; ".join(f"rank {r} failed: {_first_line(errors[r])}" for r in raised)
        return WorkerFailedError(msg, ranks=tuple(dead), reason="died")
    consequential = [r for r in raised if (outdir / f"rank{r}.timeout").exists()]
    root = [r for r in raised if r not in consequential]
    if raised and not root:
        # every error is a timeout or a broken connection: someone else stopped answering
        others = [r for r in range(len(procs)) if r not in raised]
        behind = _laggards(counters, [r in others for r in range(len(procs))]) if others else _laggards(counters, [True] * len(procs))
        msg = (
            f"rank(s) {behind} hung: rank(s) {raised} timed out waiting for them in a collective "
            f"(progress counters {dict(enumerate(counters))}): "
            + "; ".join(f"rank {r}: {_first_line(errors[r])}" for r in raised)
        )
        return WorkerFailedError(msg, ranks=tuple(behind), reason="hung")
    msg = "; ".join(f"rank {r} raised {_first_line(errors[r])}" for r in root)
    detail = "\n\n".join(f"--- rank {r} ---\n{errors[r]}" for r in raised)
    return WorkerFailedError(f"{msg}\n\n{detail}", ranks=tuple(root), reason="raised")


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.exitcode is None:
            p.terminate()
    deadline = time.monotonic() + 3.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join(1.0)
