"""A child process in a time box: its output to a log, and, when the box closes, the whole process
group it started (ranks, workers, compile threads' processes) stopped, not only the child itself."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_boxed(cmd: Sequence[str], *, seconds: float, log: Path, cwd: Path | None = None,
              env: Mapping[str, str] | None = None) -> int | None:
    """Run ``cmd`` (stdout and stderr to ``log``) in a new session; return its exit status, or None
    when it was still running after ``seconds`` and its process group was stopped (TERM, then KILL)."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env) if env is not None else None, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            code = None
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # whatever the child left behind in its group
    return code
