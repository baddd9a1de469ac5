"""``gcbench gpu-check``'s asv part: the CUDA cases of ``benchmarks/`` run by asv itself, so its
results are in asv's own format under ``<out>/asv/results/<machine>/`` and the asv page gains a
GPU machine once they are copied into the project's asv results folder.

asv records results against a commit of a git repository. A GPU machine may get a copy of the tree
without its history, so the run uses a throw-away repository with one empty commit and then writes
the real commit (git's, or ``$GCBENCH_COMMIT``) into the result file; its date is the run's. The
cases of other devices are skipped the asv way (``GCBENCH_BENCH_DEVICES=cuda``, see
``benchmarks/common.py``), keeping every benchmark's parameter lists as they are elsewhere.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .boxed import run_boxed


def machine_name(gpu: str) -> str:
    """asv's machine name for a GPU: ``cuda-`` + the device name in lower case, words joined by ``-``."""
    return "cuda-" + (re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "unknown")


def _git(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "gcbench", "GIT_AUTHOR_EMAIL": "gcbench@localhost",
           "GIT_COMMITTER_NAME": "gcbench", "GIT_COMMITTER_EMAIL": "gcbench@localhost"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def asv_config(repo: Path, root: Path, out: Path) -> dict[str, Any]:
    """An asv configuration for this run (the project's benchmarks, results under ``out``)."""
    return {
        "version": 1, "project": "gcbench", "repo": str(repo), "branches": ["main"], "environment_type": "existing",
        "launch_method": "forkserver", "benchmark_dir": str(root / "benchmarks"), "results_dir": str(out / "results"),
        "html_dir": str(out / "html"), "env_dir": str(out / "env"),
    }


def result_name(name: str, commit: str) -> str:
    """asv's name for a machine's result file ``name`` (``<commit[:8]>-<environment>.json``) once it
    records ``commit``."""
    return commit[:8] + "-" + name.split("-", 1)[1]


def set_commit(results_dir: Path, machine: str, placeholder: str, commit: str) -> list[str]:
    """Write ``commit`` over ``placeholder`` in the machine's result files (and their names)."""
    renamed = []
    for f in sorted((results_dir / machine).glob(f"{placeholder[:8]}-*.json")):
        doc = json.loads(f.read_text())
        doc["commit_hash"] = commit
        target = f.with_name(result_name(f.name, commit))
        target.write_text(json.dumps(doc, indent=1) + "\n")
        if target != f:
            f.unlink()
        renamed.append(target.name)
    return renamed


def count_results(results_dir: Path, machine: str) -> dict[str, int]:
    """Benchmarks with at least one measured (non-null) result in the machine's result files."""
    measured = total = 0
    for f in (results_dir / machine).glob("*.json"):
        if f.name == "machine.json":
            continue
        doc = json.loads(f.read_text())
        for row in doc.get("results", {}).values():
            total += 1
            values = row[0] if isinstance(row, list) and row else None
            flat = values if isinstance(values, list) else [values]
            measured += any(v is not None for v in flat)
    return {"benchmarks": total, "with_results": measured}


def run_asv(root: Path, out: Path, seconds: float, *, gpu: str, commit: str | None, full: bool = False,
            device_types: str = "cuda", bench: str | None = None) -> dict[str, Any]:
    """``asv run --quick`` of the CUDA cases (benchmarks matching the regular expression ``bench``
    only, when given) for at most ``seconds``. asv saves a run's results when it ends, so with
    ``full`` the small sizes run first and all sizes second, with the time left: a second run cut
    short loses only its own cases (asv merges a commit's runs into one result file)."""
    try:
        import asv  # noqa: F401
    except ImportError as e:  # asv itself, or one of its dependencies (it imports them all at once)
        return {"status": "skipped",
                "reason": f"asv cannot be imported ({e}); envs/device-wheels.txt carries it and its dependencies"}
    if shutil.which("git") is None:
        return {"status": "skipped", "reason": "git is not installed (asv records results against a commit)"}
    if not (root / "benchmarks").is_dir():
        return {"status": "skipped", "reason": f"no benchmarks/ folder under {root}"}
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_name(gpu)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gcbench-asv-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        _git(["init", "-q"], repo)
        _git(["symbolic-ref", "HEAD", "refs/heads/main"], repo)  # the configuration's branch, whatever git's default
        _git(["commit", "-q", "--allow-empty", "-m", "placeholder for a tree without history"], repo)
        placeholder = _git(["rev-parse", "HEAD"], repo)
        conf = Path(tmp) / "asv.conf.json"
        conf.write_text(json.dumps(asv_config(repo, root, out)))
        env = {**os.environ, "HOME": tmp, "GCBENCH_BENCH_DEVICES": device_types}
        asv_cmd = [sys.executable, "-m", "asv"]
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        subprocess.run([*asv_cmd, "machine", "--config", str(conf), "--yes", "--machine", machine, "--os", platform.platform(),
                        "--arch", platform.machine(), "--cpu", f"{gpu}; host CPU {platform.processor() or platform.machine()}",
                        "--num_cpu", str(os.cpu_count()), "--ram", str(mem)],
                       env=env, capture_output=True, text=True, timeout=60, check=False)
        log = out / "asv.log"
        status, reason = "ok", None
        run_cmd = [*asv_cmd, "run", "--config", str(conf), "-E", f"existing:{sys.executable}", "--set-commit-hash",
                   placeholder, "--machine", machine, "--quick", "--no-pull", "--show-stderr",
                   *(["--bench", bench] if bench else [])]
        for sizes in ("0", "1") if full else ("0",):  # small sizes, then (full) all of them
            left = seconds - (time.monotonic() - t0)
            if left < 5:
                status, reason = "partial", "no time left for the runs of all sizes"
                break
            run_log = log if sizes == "0" else log.with_name("asv-full.log")
            code = run_boxed(run_cmd, seconds=left, log=run_log, env={**env, "GCBENCH_BENCH_FULL": sizes})
            if code is None:
                status, reason = "partial", (f"asv ran past {seconds:.0f} s and was stopped before it saved results"
                                             if sizes == "0" else f"the run of all sizes ran past {seconds:.0f} s and "
                                             "was stopped; the small sizes' results are kept")
                break
            if code not in (0, 2):  # 2: some benchmark failed; the rest are recorded
                status, reason = "failed", f"asv exit status {code} (see {run_log.name})"
                break
    results = out / "results"
    files = set_commit(results, machine, placeholder, commit) if commit else []
    counts = count_results(results, machine) if (results / machine).is_dir() else {"benchmarks": 0, "with_results": 0}
    if counts["with_results"] == 0 and status == "ok":
        status, reason = "failed", f"asv saved no result (see {log.name})"
    return {"status": status, "machine": machine, "commit": commit or f"unknown (placeholder {placeholder[:8]} kept)",
            "files": files, "full": full, "seconds": round(time.monotonic() - t0, 1), "log": log.name,
            **counts, **({"reason": reason} if reason else {})}
