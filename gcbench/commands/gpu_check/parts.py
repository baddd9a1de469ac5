"""``gcbench gpu-check``'s parts besides the bench (:mod:`.bench_part`) and asv (:mod:`.asv_part`):
the CUDA-marked tests, the DDP hook on CUDA ranks, and a time-boxed slice of each reproduction.

Each function returns a dict with ``status`` (``ok``, ``failed``, ``partial``: stopped by the budget,
``skipped``) and ``reason`` where the status needs one, plus what it measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Sequence

from . import test_times
from .boxed import run_boxed

# --------------------------------------------------------------------------------------------------
# CUDA-marked tests
# --------------------------------------------------------------------------------------------------


#: CUDA test files that start processes (ranks that each compile their codec), slowest of all: they go
#: first, so a run stopped by its time limit has started them early rather than not ended them.
SLOW_TEST_FILES = ("test_train_device.py", "test_envs_overlap.py", "test_envs_ddp_amp.py")


def cuda_test_files(root: Path) -> list[Path]:
    """Test files that hold a CUDA-marked test (``pytest.mark.cuda``, or the conftest's ``devices()``),
    :data:`SLOW_TEST_FILES` first, then by name."""
    folder = root / "tests"
    if not folder.is_dir():
        return []
    files = [f for f in sorted(folder.glob("test_*.py"))
             if "mark.cuda" in (text := f.read_text(encoding="utf-8", errors="replace")) or "devices()" in text]
    return sorted(files, key=lambda f: (f.name not in SLOW_TEST_FILES, f.name))


def junit_counts(path: Path) -> dict[str, Any]:
    """Counts and failures of a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in root.iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            first = (bad.get("message") or "").strip().splitlines()
            failed.append(f"{case.get('classname')}::{case.get('name')}: {first[0][:300] if first else bad.tag}")
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed"] = failed
    return counts


def verbose_counts(log: Path) -> dict[str, Any]:
    """Counts from ``pytest -v`` lines (``path::test OUTCOME``): what a run stopped before its JUnit file holds."""
    import re

    outcomes: dict[str, str] = {}
    started: list[str] = []
    collected = None
    kinds = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"^(?:collected|\d+ workers \[) ?(\d+) items?\b", line)  # one process / pytest-xdist
        if m:
            collected = int(m.group(1))
            continue
        m = re.match(rf"^(\S+::\S+) ({kinds})\b", line)  # one process: ``path::test OUTCOME``
        if m:
            outcomes[m.group(1)] = m.group(2)
            continue
        m = re.match(rf"^\[gw\d+\](?: \[ *\d+%\])? ({kinds}) (\S+::\S+)", line)  # pytest-xdist's workers
        if m:
            outcomes[m.group(2)] = m.group(1)
            continue
        m = re.match(r"^(\S+::\S+)\s*$", line)  # a test that started (its outcome comes on a later line)
        if m:
            started.append(m.group(1))
    values = list(outcomes.values())
    return {"tests": len(values), "passed": values.count("PASSED") + values.count("XPASS") + values.count("XFAIL"),
            "failures": values.count("FAILED"), "errors": values.count("ERROR"), "skipped": values.count("SKIPPED"),
            "failed": [t for t, o in outcomes.items() if o in ("FAILED", "ERROR")], "ended": list(outcomes),
            **({"collected": collected} if collected is not None else {}),
            "not_ended": list(dict.fromkeys(t for t in started if t not in outcomes))}


def cuda_test_workers() -> int:
    """Processes that run the CUDA tests: most of their time is Inductor compiling on the CPU (one
    process: 146 s for 47 tests on an H200 machine's 16 cores), so one per two cores, at most 8, share
    the GPU through pytest-xdist; 1 without pytest-xdist."""
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return 1
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def xdist_options(workers: int) -> list[str]:
    """pytest-xdist's options for ``workers`` processes (none for one)."""
    return ["-n", str(workers)] if workers > 1 else []


def compile_env(workers: int, env: dict[str, str]) -> dict[str, str]:
    """``env`` with Inductor's compile processes per test process set so that all of them together are
    one per core: by default each process starts a pool of one per core, so 8 test processes on 16
    cores would start 128 (each importing torch) to compile in parallel what the test processes
    already compile in parallel. A value the caller set is kept."""
    if "TORCHINDUCTOR_COMPILE_THREADS" in env:
        return env
    return {**env, "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}


def run_cuda_tests(root: Path, out: Path, seconds: float, *, deselect: Sequence[str] = (),
                   name: str = "cuda-tests") -> dict[str, Any]:
    """``pytest -m cuda`` over the files that hold CUDA-marked tests, at most ``seconds``, but for the
    tests ``deselect`` names (pytest node ids); its files are named ``name`` (``.log``, ``.xml``,
    ``-times.jsonl``)."""
    files = cuda_test_files(root)
    if not files:
        return {"status": "skipped", "reason": f"no test files with CUDA-marked tests under {root / 'tests'}"}
    xml = out / f"{name}.xml"
    log = out / f"{name}.log"
    times = out / f"{name}-times.jsonl"
    times.unlink(missing_ok=True)
    workers = cuda_test_workers()
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-p", "no:cacheprovider", "-p", test_times.__name__,
           "-rfE", f"--junitxml={xml}", *xdist_options(workers), *[f"--deselect={t}" for t in deselect],
           *[str(f.relative_to(root)) for f in files]]
    t0 = time.monotonic()
    env = compile_env(workers, {**os.environ, test_times.ENV: str(times)})
    code = run_boxed(cmd, seconds=seconds, log=log, cwd=root, env=env)
    timed = {**test_times.read_times(times), **({"times": times.name} if times.is_file() else {}),
             "workers": workers, "compile_threads": env["TORCHINDUCTOR_COMPILE_THREADS"]}
    if code is None:
        done = verbose_counts(log)
        return {**done, "status": "failed" if done["failed"] else "partial",
                "reason": f"the CUDA tests ran past {seconds:.0f} s and were stopped; counts are of the tests that ended",
                "files": len(files), "seconds": round(time.monotonic() - t0, 1), "log": log.name, **timed}
    result: dict[str, Any] = {"files": len(files), "exit_status": code, "seconds": round(time.monotonic() - t0, 1),
                              "log": log.name, **timed}
    if xml.is_file():
        result.update(junit_counts(xml))
    ok = code == 0 or (code == 5 and not result.get("failed"))  # 5: none selected
    result["status"] = "ok" if ok else "failed"
    if not ok and not result.get("failed"):
        result["reason"] = f"pytest exit status {code} (see {log.name})"
    return result


COUNTS = ("tests", "passed", "failures", "errors", "skipped")


def resume_cuda_tests(root: Path, out: Path, seconds: float, first: dict[str, Any]) -> dict[str, Any]:
    """The CUDA tests that ``first``, a run stopped by its time limit, did not end (those it never
    started included), run again for at most ``seconds``; the result counts both runs
    (:func:`merge_test_runs`)."""
    second = run_cuda_tests(root, out, seconds, deselect=first.get("ended") or [], name="cuda-tests-resumed")
    return merge_test_runs(first, second)


def merge_test_runs(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """A stopped run's result (``first``) with the run of the tests it did not end (``second``): the
    counts added, ``ok`` where every test has now ended and none failed; the second run's own result
    under ``resumed``."""
    if second.get("status") == "skipped" or "tests" not in second:
        return {**first, "resumed": second}
    merged: dict[str, Any] = {**first, **{k: first.get(k, 0) + second.get(k, 0) for k in COUNTS},
                              "failed": [*first.get("failed", []), *second.get("failed", [])],
                              "ended": [*first.get("ended", []), *second.get("ended", [])],
                              "resumed": {k: v for k, v in second.items() if k not in ("ended", "slowest")}}
    if second["status"] == "partial":
        merged.update(status="failed" if merged["failed"] else "partial", not_ended=second.get("not_ended", []),
                      reason=f"{first.get('reason')}; the tests it had not ended ran again after the other parts and were "
                             f"stopped too, after {second.get('seconds')} s; counts are of the tests that ended")
        return merged
    merged.pop("not_ended", None)
    merged["status"] = "failed" if merged["failed"] or second["status"] == "failed" else "ok"
    merged["reason"] = (f"the first run was stopped after {first.get('seconds')} s; the {second['tests']} tests it had not "
                        f"ended ran after the other parts ({second.get('seconds')} s), so the counts are of every test")
    return merged


# --------------------------------------------------------------------------------------------------
# the DDP hook on CUDA ranks
# --------------------------------------------------------------------------------------------------

#: One codec of each protocol and family first, so a short budget still covers every kind of exchange.
HOOK_FIRST = ("fp16", "topk", "qsgd", "powersgd", "sketched-sgd", "countsketch", "sketchml", "3lc", "randomk")


def hook_codecs() -> list[str]:
    """Every name the hook can run (codecs and exchange methods), :data:`HOOK_FIRST` first."""
    from ...compressors import families

    names = families.names()
    return [n for n in HOOK_FIRST if n in names] + [n for n in names if n not in HOOK_FIRST]


def run_hook(device: str, seconds: float, *, steps: int = 3, codecs: list[str] | None = None,
             per_run_s: float = 12.0) -> dict[str, Any]:
    """``gcbench train`` on ``device``: 2 ranks sharing it (gloo with CUDA tensors on a GPU) with the
    overlap mode (per-bucket CUDA streams) for every codec, ranks' parameters compared bit for bit;
    then one NCCL rank (on a GPU), and 2 ranks with mixed precision (float16 autocast, a loss scaler:
    ``--amp``), placed after the leading :data:`HOOK_FIRST` codecs so that a short budget covers them
    before the other codecs. Stops starting runs when fewer seconds are left than a run may take:
    ``per_run_s`` until two runs have ended (the first pays for the processes' warm-up), then twice the
    longest run after the first, at most ``per_run_s``."""
    from ...envs.errors import WorkerFailedError
    from ...commands.train import train_main

    deadline = time.monotonic() + seconds
    runs: list[dict[str, Any]] = []
    plan = [(c, 2, None, False) for c in (codecs or hook_codecs())]
    if device.startswith("cuda"):  # other kinds of exchange: right after the first codec of each family
        lead = next((i for i, (c, *_) in enumerate(plan) if c not in HOOK_FIRST), len(plan))
        plan[lead:lead] = [("qsgd", 1, "nccl", False), ("powersgd", 1, "nccl", False), ("topk", 2, None, True)]
    for codec, nproc, backend, amp in plan:
        row: dict[str, Any] = {"codec": codec, "ranks": nproc, **({"amp": True} if amp else {})}
        later = [r["seconds"] for r in runs[1:] if "seconds" in r]
        guard = min(per_run_s, 2 * max(later)) if later else per_run_s
        if time.monotonic() + guard > deadline:
            runs.append({**row, "status": "skipped", "reason": "budget"})
            continue
        t0 = time.monotonic()
        try:
            rep = train_main(codec, nproc, steps, None, device=device, backend=backend or ("gloo" if nproc > 1 else None),
                             overlap=True, timeout_s=60, amp=amp, print_report=False)
        except (WorkerFailedError, ValueError, RuntimeError) as err:
            runs.append({**row, "status": "failed", "reason": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}",
                         "seconds": round(time.monotonic() - t0, 1)})
            continue
        same = bool(rep["replicas_identical"])
        runs.append({**row, "status": "ok" if same else "failed", "backend": rep["config"]["backend"],
                     "where": rep["measured"]["where"], "replicas_identical": same, "final_loss": rep["final"]["train_loss"],
                     "seconds": round(time.monotonic() - t0, 1),
                     **({} if same else {"reason": "the ranks' parameters differ"})})
    failed = [r for r in runs if r["status"] == "failed"]
    skipped = [r for r in runs if r["status"] == "skipped"]
    status = "failed" if failed else ("partial" if skipped else "ok")
    return {"status": status, "runs": runs, "steps": steps, "overlap": True,
            **({"reason": f"budget: {len(skipped)} run(s) not started"} if skipped and not failed else {})}


# --------------------------------------------------------------------------------------------------
# reproductions
# --------------------------------------------------------------------------------------------------


def smallest_scale(spec: Any) -> str:
    """``micro`` where the spec has it (seconds, for tests), else ``smoke``."""
    return "micro" if "micro" in spec.scales else "smoke"


def reads_device(package_dir: Path) -> bool:
    """Whether a paper's workload reads ``ctx.options["device"]`` (its source names that option)."""
    for f in package_dir.rglob("*.py"):
        text = f.read_text(encoding="utf-8", errors="replace")
        if 'options["device"]' in text or "options.get(\"device\"" in text or "options['device']" in text:
            return True
    return False


def claim_counts(results_json: Path) -> dict[str, int]:
    """Claims per status in a reproduction's ``results.json``."""
    doc = json.loads(results_json.read_text())
    counts: dict[str, int] = {}
    for c in doc.get("claims", []):
        counts[c.get("status", "?")] = counts.get(c.get("status", "?"), 0) + 1
    return counts


def run_reproductions(device: str, out: Path, seconds: float, *, papers: list[str] | None = None,
                      minimum_s: float = 15.0, expected_s: dict[str, float] | None = None) -> dict[str, Any]:
    """``gcbench reproduce PAPER --scale <smallest> --device DEVICE`` for each paper, each time-boxed to
    an equal share of what is left of ``seconds``; a paper whose workload does not read the device
    option, or that runs on the CPU by design (its package's ``CPU_ONLY`` says why), is reported, not
    run. Papers run in ascending order of ``expected_s`` (seconds a slice took before; papers without
    one first, in :data:`PAPERS`' order), so the time a short slice leaves goes to the longer ones."""
    import importlib

    from ...reproductions import PAPERS
    from ...reproductions.framework.spec import load_spec

    names = papers or list(dict.fromkeys(PAPERS))
    deadline = time.monotonic() + seconds
    rows: list[dict[str, Any]] = []
    todo = []
    for name in names:
        module = importlib.import_module(f"gcbench.reproductions.{PAPERS[name]}")
        scale = smallest_scale(load_spec(module.SPEC_PATH))
        if getattr(module, "CPU_ONLY", None):
            rows.append({"paper": name, "scale": scale, "status": "CPU by design", "reason": module.CPU_ONLY})
        elif not reads_device(Path(module.__file__).parent):
            rows.append({"paper": name, "scale": scale, "status": "not device-aware",
                         "reason": "its workload does not read ctx.options['device']: it would train on the CPU"})
        else:
            todo.append((name, scale))
    todo.sort(key=lambda t: (expected_s or {}).get(t[0], 0.0))  # stable: ties keep PAPERS' order
    for i, (name, scale) in enumerate(todo):
        share = (deadline - time.monotonic()) / (len(todo) - i)
        row: dict[str, Any] = {"paper": name, "scale": scale}
        if share < minimum_s:
            rows.append({**row, "status": "skipped", "reason": f"budget: {max(share, 0):.0f} s for it"})
            continue
        folder = out / name
        cmd = [sys.executable, "-m", "gcbench.cli", "reproduce", name, "--scale", scale, "--device", device,
               "--out", str(folder), "--no-wandb", "--no-resume"]
        log = out / f"{name}-{scale}.log"
        t0 = time.monotonic()
        code = run_boxed(cmd, seconds=share, log=log)
        row.update(seconds=round(time.monotonic() - t0, 1), log=log.name, exit_status=code)
        found = sorted(folder.glob(f"*/{scale}/results.json"))
        if found:
            row["claims"] = claim_counts(found[0])
            row["results"] = str(found[0].relative_to(out))
        if code is None:
            row.update(status="time-boxed", reason=f"stopped after {share:.0f} s (its share of the budget)")
        elif code in (0, 1):  # 1: a gated claim differs at this scale: a result, not a crash
            row["status"] = "ok"
        else:
            row.update(status="failed", reason=f"exit status {code} (see {log.name})")
        rows.append(row)
    failed = [r for r in rows if r["status"] == "failed"]
    partial = [r for r in rows if r["status"] not in ("ok", "CPU by design")]
    status = "failed" if failed else ("partial" if partial else "ok")
    reason = f"{len(partial)} of {len(rows)} paper(s) did not run to the end on {device}: " + ", ".join(
        f"{r['paper']} {r['status']}" for r in partial) if partial and not failed else None
    return {"status": status, "device": device, "papers": rows, **({"reason": reason} if reason else {})}
