"""``gcbench gpu-check``: one command that proves the CUDA paths on a GPU machine within a time budget.

Parts, in this order, each granted a share of the budget (the last part chosen: what is left;
:class:`.budget.Budget`; a part that cannot have its minimum is skipped and the report says so):

1. ``environment`` - devices, driver, torch, Triton, NCCL, the CPU and its vector ISA, packages;
2. ``cuda_tests`` - the CUDA-marked tests (``pytest -m cuda``): counts and failures;
3. ``bench`` - ``gcbench bench`` in every mode (eager, compiled, auto) for every codec at 64M elements on the GPU
   (:mod:`.bench_part`): multiples of a same-run CUDA ``copy_``, effective GB/s, % of that copy's
   bandwidth, the CUDA targets met or not;
4. ``hook`` - ``gcbench train`` on CUDA ranks: 2 gloo ranks sharing the GPU with the overlap mode
   (per-bucket streams) for every codec, the ranks' parameters compared bit for bit; one NCCL rank;
5. ``reproductions`` - ``gcbench reproduce PAPER --scale <smallest> --device cuda`` for each paper,
   time-boxed, the shortest slices of the committed runs first; a paper whose workload does not
   read the device option is reported as such;
6. ``asv`` - the CUDA cases of ``benchmarks/`` in asv's own result format (:mod:`.asv_part`).

A CUDA-test part stopped by its share of the budget runs again at the end, for the tests it did not
end, with whatever time the other parts left. Without CUDA only the environment is recorded, every
other part is skipped with that reason, and the exit status is 0. With CUDA the exit status is 1
when a part failed, else 0. Everything is written under ``--out``: ``gpu-check.json``,
``gpu-check.md`` and each part's own files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ...bench.targets import STATED_NUMEL
from .budget import Budget
from .committed import NO_CUDA, NOT_SELECTED, slice_seconds

#: Part -> (share of the budget it asks for when every part runs, the least it can do anything useful
#: with, seconds). The shares sum to 1; with ``--part`` each chosen part asks for its share of the chosen
#: parts' sum (:func:`part_shares`), and the last part chosen has whatever the others left.
SHARES: dict[str, tuple[float, float]] = {
    "cuda_tests": (0.24, 20.0),
    "bench": (0.36, 30.0),
    "hook": (0.10, 15.0),
    "reproductions": (0.20, 20.0),
    "asv": (0.10, 20.0),
}
PARTS = tuple(SHARES)
#: Elements of the bench part's input (64M float32 = 256 MiB: long enough for a GPU's copy_ to dwarf launches).
BENCH_SIZE = STATED_NUMEL["cuda"]


def part_shares(chosen: list[str]) -> dict[str, float]:
    """The share of the budget each part of ``chosen`` asks for: its :data:`SHARES` share over the sum of
    the chosen parts' shares, so that a check of some parts spends the whole budget on them in the same
    proportions as a check of all of them."""
    total = sum(SHARES[p][0] for p in chosen)
    return {p: SHARES[p][0] / total for p in chosen}


def repo_root() -> Path:
    """The checkout gcbench runs from (tests/ and benchmarks/ are found there; an installed package has none)."""
    return Path(__file__).resolve().parents[3]


def gpu_check_main(out: Path | str, budget_s: float = 480.0, *, device: str = "cuda", parts: list[str] | None = None,
                   root: Path | None = None, console: Any = None) -> int:
    """Run the check and write ``gpu-check.json`` and ``gpu-check.md`` under ``out``; return the exit status.

    Args:
        out: results folder (created).
        budget_s: seconds for the whole check (the report's writing included).
        device: the CUDA device to check (``cuda`` or ``cuda:N``).
        parts: a subset of :data:`PARTS` (default: all).
        root: the checkout holding ``tests/`` and ``benchmarks/`` (default: this package's).
        console: a ``rich`` console for progress lines (default: none printed).

    Raises:
        ValueError: an unknown part, a bad budget or a device that is not CUDA.
    """
    import torch

    from . import asv_part, bench_part
    from .environment import environment
    from .parts import resume_cuda_tests, run_cuda_tests, run_hook, run_reproductions
    from .report import render

    budget = Budget(budget_s, reserve_s=min(5.0, budget_s * 0.1))
    chosen = list(dict.fromkeys(parts or PARTS))
    unknown = [p for p in chosen if p not in SHARES]
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    last = [p for p in PARTS if p in chosen][-1]  # the last part chosen has whatever is left
    shares = part_shares(chosen)
    if not device.startswith("cuda"):
        raise ValueError(f"gpu-check checks a CUDA device (cuda or cuda:N), got {device!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root = root or repo_root()
    say = (lambda msg: console.log(msg)) if console is not None else (lambda msg: None)
    env = environment()
    cuda = env["cuda_available"]
    dev = device if ":" in device else "cuda:0"
    if not dev.split(":")[1].isdigit() or (cuda and int(dev.split(":")[1]) >= len(env["devices"])):
        raise ValueError(f"--device {device}: this machine has {len(env['devices'])} CUDA device(s)")
    gpu = env["devices"][int(dev.split(":")[1])]["name"] if cuda and env["devices"] else "no GPU"
    say(f"gpu-check: {gpu}, torch {env['torch']}, budget {budget_s:.0f} s")
    results: dict[str, dict[str, Any]] = {}
    bench_doc: dict[str, Any] = {}
    for part in PARTS:
        if part not in chosen:
            results[part] = {"status": "skipped", "reason": NOT_SELECTED}
            continue
        if not cuda:
            results[part] = {"status": "skipped", "reason": NO_CUDA}
            continue
        minimum = SHARES[part][1]
        granted = budget.grant(part, budget_s if part == last else shares[part] * budget_s, minimum)
        if granted is None:
            results[part] = {"status": "skipped", "reason": budget.skip_reason(minimum)}
            say(f"gpu-check: {part} skipped ({results[part]['reason']})")
            continue
        say(f"gpu-check: {part} ({granted:.0f} s granted)")
        t0 = time.monotonic()
        try:
            if part == "cuda_tests":
                results[part] = run_cuda_tests(root, out, granted)
            elif part == "bench":
                results[part] = bench_part.run(out / "bench.json", device=dev, size=BENCH_SIZE, seconds=max(granted - 20, 10))
                bench_doc = json.loads((out / "bench.json").read_text())
            elif part == "hook":
                results[part] = run_hook(dev, granted)
            elif part == "reproductions":
                (out / "repro").mkdir(exist_ok=True)
                results[part] = run_reproductions(dev, out / "repro", granted, expected_s=slice_seconds(root))
            else:
                results[part] = asv_part.run_asv(root, out / "asv", granted, gpu=gpu, commit=env["commit"]["commit"],
                                                 full=granted >= 150)
        except Exception as err:  # noqa: BLE001 - one part's crash is reported; the others still run
            results[part] = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
        results[part].setdefault("seconds", round(time.monotonic() - t0, 1))
        say(f"gpu-check: {part} {results[part]['status']}")
    if results.get("cuda_tests", {}).get("status") == "partial":
        # the tests that the part's share left running or unstarted get whatever the other parts left
        granted = budget.grant("cuda_tests (resumed)", budget.left(), SHARES["cuda_tests"][1])
        if granted is not None:
            say(f"gpu-check: cuda_tests resumed ({granted:.0f} s granted)")
            try:
                results["cuda_tests"] = resume_cuda_tests(root, out, granted, results["cuda_tests"])
            except Exception as err:  # noqa: BLE001 - reported; the first run's counts stay
                results["cuda_tests"]["resumed"] = {"status": "failed", "reason": f"{type(err).__name__}: {err}"}
                results["cuda_tests"]["status"] = "failed"  # the part could not finish: the exit status says so
    failed = [p for p, r in results.items() if r["status"] == "failed"]
    doc = {"environment": env, "device": dev if cuda else None, "budget_s": budget_s, "wall_s": round(budget.elapsed(), 1),
           "exit_status": 1 if failed else 0, "failed_parts": failed, "parts": results, "budget_log": budget.log}
    (out / "gpu-check.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "gpu-check.md").write_text(render(doc, bench_doc.get("rows"), bench_doc.get("meta"), bench_doc.get("profiles")))
    say(f"gpu-check: wrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'}")
    return doc["exit_status"]
