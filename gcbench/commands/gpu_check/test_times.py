"""A pytest plugin for gpu-check's CUDA tests: each test's outcome and seconds (setup, call and
teardown together), one JSON line per test written as it ends, to the file ``GCBENCH_TEST_TIMES``
names. A run its time box stopped keeps the lines of the tests that ended, which JUnit's file (written
at the end) would not; :func:`read_times` reads them back.

Loaded with ``-p gcbench.commands.gpu_check.test_times``; with pytest-xdist, only the controlling
process writes (it receives every worker's reports).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The environment variable that names the file; without it the plugin does nothing.
ENV = "GCBENCH_TEST_TIMES"

_open: dict[str, dict[str, Any]] = {}
#: Whether this process is a pytest-xdist worker (its reports reach the controller, which writes).
_worker = False


def pytest_configure(config: Any) -> None:
    """Note whether this process is an xdist worker: xdist gives a worker's config ``workerinput``.
    (Not the ``PYTEST_XDIST_WORKER`` variable: a pytest run started from inside a worker inherits it.)"""
    global _worker
    _worker = hasattr(config, "workerinput")


def pytest_runtest_logreport(report: Any) -> None:
    """Add up a test's phases; write its line when its teardown is reported."""
    path = os.environ.get(ENV)
    if not path or _worker:
        return
    entry = _open.setdefault(report.nodeid, {"test": report.nodeid, "outcome": "passed", "seconds": 0.0})
    entry["seconds"] += float(getattr(report, "duration", 0.0) or 0.0)
    if report.when == "call" or report.outcome != "passed":  # a failed setup or teardown is the test's outcome
        entry["outcome"] = "error" if report.when != "call" and report.outcome == "failed" else report.outcome
    if report.when == "teardown":
        del _open[report.nodeid]
        entry["seconds"] = round(entry["seconds"], 2)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def read_times(path: Path, top: int = 10) -> dict[str, Any]:
    """``{"timed": n, "test_seconds": total, "slowest": [{test, outcome, seconds}, ...]}`` from the plugin's
    file (the ``top`` slowest first); empty when there is no file. A cut last line is skipped."""
    if not path.is_file():
        return {}
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("seconds"), (int, float)):
            entries.append(entry)
    entries.sort(key=lambda e: -e["seconds"])
    return {"timed": len(entries), "test_seconds": round(sum(e["seconds"] for e in entries), 1), "slowest": entries[:top]}
