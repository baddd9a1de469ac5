"""What a reproduction writes: ``results.json``, ``report.md`` and PNG plots.

``results.json`` holds everything needed to audit a number: the measured quantities, every cell's
result, seeds, git commit (and whether the tree was dirty), package versions, machine, network
profile(s), data set description, claim outcomes. ``report.md`` opens with one line per headline
result (paper, ours, status, scale), then one row per measured result claim (paper value, ours,
tolerance, status), then the claims this run's scale cannot test (*not at this scale*, counted
apart, each with its reason and the numbers measured anyway), then the guards of the method in their
own section (properties a correct implementation holds, measured apart from it; never counted as
reproduced), then the consistency checks in theirs (true by construction, never counted as
reproduced), then every paper value beside ours
grouped by table, then the paper module's own sections (what does not reproduce and why), then the
plots.

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from gcbench.outputs import replacing
from gcbench.tables import md_table

from .cells import write_json_atomic
from .claims import NOT_AT_SCALE, STATUSES, ClaimResult, GateVerdict, fmt_num, gate_verdict_of
from .spec import Spec

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gcbench", "torch", "numpy", "scipy", "scikit-learn", "datasketches", "wandb", "matplotlib", "rich", "pyarrow")


def git_info(root: Path = REPO_ROOT) -> dict[str, Any]:
    """Commit hash and dirty flag of the checkout (read-only git commands; None outside a repo)."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages a result depends on (None = not installed)."""
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = None
    return out


VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_tile", "asimd", "sve")


def cpu_description() -> dict[str, Any]:
    """The CPU model and the vector ISA flags it reports (``/proc/cpuinfo``; None where unreadable)."""
    model, flags = None, None
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if model is None and key in ("model name", "cpu model", "hardware"):
            model = value.strip()
        elif flags is None and key in ("flags", "features"):
            have = set(value.split())
            flags = [f for f in VECTOR_FLAGS if f in have]
    return {"cpu_model": model or platform.processor() or None, "isa_flags": flags}


def machine_info() -> dict[str, Any]:
    """Platform, CPU model and vector ISA, CPU count, Python, torch threads and accelerator, for the results file."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        **cpu_description(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - torch is a hard dependency
        pass
    return info


def environment() -> dict[str, Any]:
    """git + packages + machine + timestamp."""
    return {
        "git": git_info(),
        "packages": package_versions(),
        "machine": machine_info(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
    }


def claims_table(results: Sequence[ClaimResult]) -> str:
    """The claims table: claim, paper, ours, tolerance, CI (gate or scale-dependent), status, detail."""
    rows = []
    for r in results:
        c = r.claim
        gate = "gate" if c.gate else ("scale-dependent" if c.scale_dependent else "—")
        rows.append([f"**{c.id}**: {c.text}", r.paper, r.ours, c.tolerance_text(), gate, f"**{r.status}**", r.detail])
    return md_table(["claim", "paper", "ours", "tolerance", "CI", "status", "detail"], rows)


def out_of_scale_table(results: Sequence[ClaimResult]) -> str:
    """Claims this run's scale cannot test: why, where they can be tested, what was measured anyway
    (the detail column says what the check would have said; the reason is not repeated there)."""
    rows = [[f"**{r.claim.id}**: {r.claim.text}", r.reason or "—",
             ", ".join(f"`{s}`" for s in r.claim.meaningful_at or ()) or "—", r.paper, r.ours, r.said or r.detail]
            for r in results]
    return md_table(["claim", "why not at this scale", "meaningful at", "paper", "ours (information)", "detail"], rows)


def values_tables(spec: Spec, measured: Mapping[str, Any], units_ours: Mapping[str, str] | None = None) -> str:
    """Every paper value beside ours, one Markdown table per paper table/figure."""
    units_ours = units_ours or {}
    parts = []
    order = list(spec.tables) or sorted({v.table for v in spec.values})
    for key in order:
        vals = [v for v in spec.values if v.table == key]
        if not vals:
            continue
        title = spec.tables[key].title if key in spec.tables else key
        rows = []
        for v in vals:
            ours = measured.get(v.measure)
            rows.append([v.source.row, v.source.column, f"{v.display()} {v.unit}".strip(),
                         f"{fmt_num(ours)} {units_ours.get(v.measure, v.unit)}".strip() if ours is not None else "not run",
                         v.note])
        parts.append(f"### {title}\n\n" + md_table(["row", "column", "paper", "ours", "note"], rows))
    return "\n\n".join(parts)


def headline_table(results: Sequence[ClaimResult], scale: str) -> str:
    """One row per headline result: claim, paper, ours, status (with the reason, when *not at this scale*) and the
    scale it ran at."""
    rows = [[f"**{r.claim.id}**: {r.claim.text}", r.paper, r.ours,
             f"**{r.status}**" + (f": {r.reason}" if r.status == NOT_AT_SCALE else ""), f"`{scale}`"]
            for r in results if r.claim.headline]
    return md_table(["headline result", "paper", "ours", "status", "scale"], rows)


def status_counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """How many claims have each status."""
    return {s: sum(1 for r in results if r.status == s) for s in STATUSES}


def headline_lines(results: Sequence[ClaimResult], scale: str) -> list[str]:
    """Plain-text lines, one per headline result (for a terminal summary)."""
    return [f"{r.claim.id}: paper {r.paper} | ours {r.ours} | {r.status} (scale {scale})"
            for r in results if r.claim.headline]


def write_results_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write the results file atomically (non-finite floats become strings)."""
    write_json_atomic(path, payload)


def gate_markdown(verdict: GateVerdict, implemented: bool = True) -> str:
    """The report's line on the CI gate."""
    if not implemented:
        return "**CI gate: nothing was run.**"
    if verdict.state == "FAILED":
        return f"**CI gate: FAILED** — {verdict.detail}"
    if verdict.state == "none":
        return "**CI gate: none** (no claim of this paper gates CI)."
    return f"**CI gate: {verdict.state}** ({verdict.detail})."


def render_markdown(
    spec: Spec,
    *,
    scale: str,
    results: Sequence[ClaimResult],
    measured: Mapping[str, Any],
    env: Mapping[str, Any],
    header_lines: Sequence[str] = (),
    sections: Sequence[tuple[str, str]] = (),
    plots: Sequence[tuple[str, str]] = (),
    units_ours: Mapping[str, str] | None = None,
    tables_run: Sequence[str] | None = None,
    implemented: bool = True,
) -> str:
    """The Markdown report.

    Args:
        header_lines: paper-specific lines under the title (data set, profiles, timing labels).
        sections: ``(title, markdown)`` appended after the value tables.
        plots: ``(caption, relative path)`` of PNG files.
    """
    measured_results = [r for r in results if r.claim.is_result]
    guards = [r for r in results if r.claim.is_guard]
    consistency = [r for r in results if not r.claim.is_result and not r.claim.is_guard]
    counts = status_counts(measured_results)
    git = env.get("git", {})
    pk = env.get("packages", {})
    mach = env.get("machine", {})
    lines = [
        f"# {spec.title} — reproduction at scale `{scale}`",
        "",
        f"Paper: {spec.citation}. Paper numbers copied from {spec.source_text} (each with table/row/column in "
        f"`{spec.path.name}`).",
        "",
        f"- Run: {env.get('timestamp')}, git `{git.get('commit')}`{' (uncommitted changes)' if git.get('dirty') else ''}; "
        f"gcbench {pk.get('gcbench')}, torch {pk.get('torch')}, numpy {pk.get('numpy')}, scipy {pk.get('scipy')}, "
        f"datasketches {pk.get('datasketches')}",
        f"- Machine: {mach.get('platform')}, {mach.get('cpu_model')} ({mach.get('cpu_count')} CPUs; "
        f"{' '.join(mach.get('isa_flags') or []) or 'ISA flags unknown'}), Python {mach.get('python')}"
        f"{', GPU ' + str(mach.get('cuda')) if mach.get('cuda') else ''}",
        f"- Tables run: {', '.join(tables_run) if tables_run else 'all'}",
    ]
    lines += [f"- {h}" for h in header_lines]
    lines += ["", "## Headline results", ""]
    if any(r.claim.headline for r in results):
        lines += [headline_table(results, scale)]
    else:
        lines += ["This spec marks no headline result."]
    testable = [r for r in measured_results if r.status != NOT_AT_SCALE]
    out_of_scale = [r for r in measured_results if r.status == NOT_AT_SCALE]
    lines += [
        "",
        "## Results (measured claims)",
        "",
        claims_table(testable) if testable else
        "No measured claim in this spec." if not measured_results else "No measured claim can be tested at this scale.",
        "",
        "Statuses of the measured claims: " + ", ".join(f"{k}: {v}" for k, v in counts.items() if k != NOT_AT_SCALE)
        + f"; {NOT_AT_SCALE} (counted apart): {counts[NOT_AT_SCALE]}.",
        "",
    ]
    if out_of_scale:
        lines += [
            f"### {NOT_AT_SCALE.capitalize()}",
            "",
            f"This run's scale (`{scale}`) cannot test these claims; the numbers measured are shown as "
            "information only, neither reproduced nor differing.",
            "",
            out_of_scale_table(out_of_scale),
            "",
        ]
    if guards:
        held = status_counts(guards)
        lines += [
            "## Guards of the method (not counted as reproduced results)",
            "",
            "Properties the paper states of its method without a number of its own (a bound its algorithm "
            "imposes or its definition gives), measured apart from the method's code. A correct "
            "implementation holds them and a broken one fails them (the gated ones have a mutation test), "
            "so they guard the implementation; they say nothing about whether the paper's results "
            "reproduce. Here *reproduced* means the property holds in this run.",
            "",
            claims_table(guards),
            "",
            "Statuses of the guards: " + ", ".join(f"{k}: {v}" for k, v in held.items()) + ".",
            "",
        ]
    if consistency:
        lines += [
            "## Consistency checks (true by construction; not counted as reproduced results)",
            "",
            "These hold because of how our code or wire format is built (bytes fixed by the format, a size "
            "set from a target). They guard the implementation and are asserted by the test suite; they "
            "say nothing about whether the paper's result reproduces.",
            "",
            claims_table(consistency),
            "",
        ]
    lines += [
        gate_markdown(gate_verdict_of(results), implemented),
        "",
        "## Paper values and ours",
        "",
        values_tables(spec, measured, units_ours),
    ]
    for title, body in sections:
        lines += ["", f"## {title}", "", body.strip()]
    if plots:
        lines += ["", "## Plots", ""]
        for caption, rel in plots:
            lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def savefig(fig: Any, path: Path) -> Path:
    """Save a matplotlib figure as PNG (Agg), whole or not at all (:func:`gcbench.outputs.replacing`), and close it."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def new_figure(*args: Any, **kwargs: Any) -> Any:
    """``plt.subplots`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
