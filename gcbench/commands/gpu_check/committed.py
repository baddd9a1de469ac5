"""The committed runs of ``gcbench gpu-check`` as a short block of README.md.

A run's files are committed under ``results/gpu/<device>/<run>/`` (``gpu-check.json`` and what the
parts wrote), runs of one device in the order of their folder names. For each part, the block quotes
the last run of that device that ran it (a run may choose parts with ``--part``), with that run's
folder, so every number in README.md comes from a committed file. ``gcbench results`` writes the
block between ``<!-- gpu:begin -->`` and ``<!-- gpu:end -->``, and with ``--asv-results`` copies the
runs' asv results into asv's results folder (:func:`copy_asv_results`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .asv_part import result_name

#: Where committed runs live, under the repository root.
GPU_RESULTS = Path("results") / "gpu"
#: The README block's tag (``<!-- gpu:begin -->`` ... ``<!-- gpu:end -->``).
TAG = "gpu"
#: The parts quoted, in the check's order, with their README names.
PART_NAMES = {"cuda_tests": "CUDA tests", "bench": "Bench", "hook": "DDP hook", "reproductions": "Reproductions",
              "asv": "asv"}


#: The reasons of a part that did not run because of the run, not of the part (:mod:`.run` writes
#: them; a part skipped for one of them is passed over when quoting each part's last run).
NOT_SELECTED = "not selected (--part)"
NO_CUDA = "no CUDA device is available on this machine"


class CommittedRunError(ValueError):
    """A committed ``gpu-check.json`` cannot be read."""


def committed_runs(root: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """``{device folder: [(run folder, gpu-check.json), ...]}``, devices and runs sorted by name.

    Raises:
        CommittedRunError: a ``gpu-check.json`` is unreadable or not a JSON object.
    """
    runs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for f in sorted((root / GPU_RESULTS).glob("*/*/gpu-check.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CommittedRunError(f"{f}: {error}") from error
        if not isinstance(doc, dict) or not isinstance(doc.get("parts"), dict):
            raise CommittedRunError(f"{f}: not a gpu-check result (no 'parts' object)")
        runs.setdefault(f.parent.parent.name, []).append((f.parent.name, doc))
    return runs


def _ran(result: dict[str, Any]) -> bool:
    """Whether a run ran this part (it was chosen and the machine had CUDA)."""
    return not (result.get("status") == "skipped" and result.get("reason") in (NOT_SELECTED, NO_CUDA))


def latest_parts(runs: list[tuple[str, dict[str, Any]]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{part: (run folder, its result)}``: each part's last run that ran it."""
    latest: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, doc in runs:
        for part, result in doc["parts"].items():
            if isinstance(result, dict) and _ran(result):
                latest[part] = (name, result)
    return latest


def slice_seconds(root: Path) -> dict[str, float]:
    """``{paper: seconds}``: the longest a paper's reproduction slice ran in any committed run (a
    time-boxed slice's time box counts: it needed at least that); empty when none is committed or
    a committed ``gpu-check.json`` cannot be read (the order it informs is only a schedule)."""
    try:
        runs = committed_runs(root)
    except CommittedRunError:
        return {}
    longest: dict[str, float] = {}
    for device_runs in runs.values():
        for _, doc in device_runs:
            part = doc["parts"].get("reproductions")
            for paper in (part.get("papers") or []) if isinstance(part, dict) else []:
                seconds = paper.get("seconds") if isinstance(paper, dict) else None
                if isinstance(seconds, (int, float)) and isinstance(paper.get("paper"), str):
                    longest[paper["paper"]] = max(longest.get(paper["paper"], 0.0), float(seconds))
    return longest


def _test_id(failed: str) -> str:
    """A failed test's id without its message (``path::test``, or JUnit's ``module::test: message``)."""
    return failed.split(": ", 1)[0]


def with_log_counts(folder: Path, part: str, result: dict[str, Any]) -> dict[str, Any]:
    """A stopped CUDA-test part's result with what its committed log says and the result lacks (the
    tests collected, those that started and did not end), for results written before it recorded them; a
    part that resumed its tests (``resumed``) recorded its own."""
    log = folder / str(result.get("log") or "")
    if part != "cuda_tests" or "not_ended" in result or "resumed" in result or not result.get("log") or not log.is_file():
        return result
    from .parts import verbose_counts

    counts = verbose_counts(log)
    return {**result, **{k: counts[k] for k in ("collected", "not_ended") if k in counts}}


def part_line(part: str, result: dict[str, Any]) -> str:
    """One part's result in words, every number from ``result``."""
    status = result.get("status", "?")
    if status == "skipped":
        return f"did not run: {result.get('reason')}"
    if part == "cuda_tests" and "tests" in result:
        text = f"{result['passed']} of {result['tests']} passed"
        if result.get("failed"):
            text += "; failed: " + ", ".join(f"`{_test_id(f)}`" for f in result["failed"])
        if "ran past" in str(result.get("reason") or ""):
            collected, not_ended = result.get("collected"), result.get("not_ended") or []
            text += " before its time limit stopped the run"
            if collected is not None:
                text += f" ({result['tests']} of {collected} collected ended)"
            if not_ended:
                text += "; not ended: " + ", ".join(f"`{t}`" for t in not_ended)
        return text
    if part == "bench" and "met" in result:
        text = (f"{len(result.get('codecs_done', []))} codecs, {result.get('rows', '?')} rows; "
                f"{result['met']} of {result['met'] + result['not_met']} CUDA targets met")
        if result.get("compiled_not_measured"):
            text += "; compiled mode not reached for " + ", ".join(result["compiled_not_measured"])
        return text
    if part == "hook" and result.get("runs"):
        runs = result["runs"]
        ok = [r for r in runs if r.get("status") == "ok"]
        same = [r for r in runs if r.get("replicas_identical")]
        ran = [r for r in runs if r.get("status") != "skipped"]
        backends = sorted({f"{r.get('ranks')} {r.get('backend')} rank(s)" for r in ran if r.get("backend")})
        text = (f"{len(ok)} of {len(runs)} runs ok ({', '.join(backends)}), ranks' parameters bit-identical in "
                f"{len(same)}; {len({r.get('codec') for r in ran})} codecs and methods")
        not_started = [f"{r.get('codec')} on {r.get('ranks')} rank(s)" for r in runs if r.get("status") == "skipped"]
        return text + ("; not started (budget): " + ", ".join(not_started) if not_started else "")
    if part == "reproductions" and result.get("papers"):
        return "; ".join(f"{p['paper']} `{p['scale']}` {p['status']}" for p in result["papers"])
    if part == "asv" and "benchmarks" in result:
        return f"{result.get('with_results', 0)} of {result['benchmarks']} benchmarks with results ({status})"
    return f"{status}" + (f": {result['reason']}" if result.get("reason") else "")


def render_readme_block(root: Path) -> str:
    """README.md's generated GPU block (markers included); a line saying so when nothing is committed.

    Raises:
        CommittedRunError: see :func:`committed_runs`.
    """
    from ...reproductions.framework.results_table import markers

    begin, end = markers(TAG)
    lines = [begin, f"<!-- Generated by `gcbench results` from {GPU_RESULTS}/*/*/gpu-check.json; do not edit by hand. -->",
             "## On a GPU", ""]
    runs = committed_runs(root)
    if not runs:
        lines += ["No run of `gcbench gpu-check` is committed yet.", ""]
    for device, device_runs in runs.items():
        devices = device_runs[-1][1].get("environment", {}).get("devices") or [{}]
        name = devices[0].get("name", device)
        lines += [f"`gcbench gpu-check` on one {name} ([{GPU_RESULTS}/{device}](results/gpu/{device}/README.md): "
                  "each run's files and what it measured). Each part's last run:", ""]
        for part, (run, result) in latest_parts(device_runs).items():
            result = with_log_counts(root / GPU_RESULTS / device / run, part, result)
            lines.append(f"- **{PART_NAMES.get(part, part)}** (`{run}`): {part_line(part, result)}")
        lines.append("")
    return "\n".join([*lines, end])


def full_commit(root: Path, commit: str) -> str:
    """``commit`` as git's full hash in ``root`` (asv finds a result's commit on a branch by its full hash).

    Raises:
        CommittedRunError: git cannot resolve it there.
    """
    if len(commit) == 40:
        return commit
    try:
        run = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=root,
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CommittedRunError(f"cannot resolve commit {commit!r}: {error}") from error
    if run.returncode != 0 or len(run.stdout.strip()) != 40:
        raise CommittedRunError(f"commit {commit!r} is not in the git history of {root}")
    return run.stdout.strip()


def copy_asv_results(root: Path, dest: Path) -> list[Path]:
    """Copy each committed run's asv results (``<device>/<run>/asv/results/<machine>/``: ``machine.json``
    and one result file per commit) into ``dest``, asv's ``results_dir`` (``.asv/results`` in
    ``asv.conf.json``), so ``asv publish`` shows the GPU machines beside this one. A result that names
    its commit by a short hash is written with the full one, under the name asv would give it.
    Returns the files written.

    Raises:
        CommittedRunError: a result file is unreadable or its commit is not in the history.
    """
    written: list[Path] = []
    for machine in sorted(p for p in (root / GPU_RESULTS).glob("*/*/asv/results/*") if p.is_dir()):
        target = dest / machine.name
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted(machine.glob("*.json")):
            if f.name == "machine.json":
                shutil.copyfile(f, target / f.name)
                written.append(target / f.name)
                continue
            try:
                doc = json.loads(f.read_text(encoding="utf-8"))
                commit = full_commit(root, str(doc["commit_hash"]))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
                raise CommittedRunError(f"{f}: not an asv result ({error})") from error
            doc["commit_hash"] = commit
            out = target / result_name(f.name, commit)
            out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            written.append(out)
    return written
