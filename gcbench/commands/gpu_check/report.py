"""The Markdown page of ``gcbench gpu-check`` (from the same dict as its JSON)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...tables import md_table
from .environment import summary_line


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a Markdown table, ``-`` where a value is missing."""
    return md_table(header, (["-" if c is None else c for c in r] for r in rows)).split("\n")


def _f(v: Any, fmt: str) -> str | None:
    return None if v is None else format(v, fmt)


def _part_line(name: str, part: dict[str, Any]) -> str:
    extra = f" ({part['reason']})" if part.get("reason") else ""
    secs = f", {part['seconds']} s" if part.get("seconds") is not None else ""
    return f"- **{name}**: {part['status']}{extra}{secs}"


def bench_lines(bench: dict[str, Any], rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The bench table: every measured row with its ratios, effective GB/s and target verdict."""
    out = [f"Input: {meta.get('size')} float32 elements on {meta.get('device')} ({meta.get('gpu')}); same-run copy_ "
           f"{_f(meta.get('copy_GBps'), '.0f')} GB/s (read + write); {bench.get('met', 0)} target(s) met, "
           f"{bench.get('not_met', 0)} not met. Effective GB/s counts the bytes each call reads and writes "
           "(input, payload, output); % of copy_ compares it with the row's own same-run copy_.", ""]
    body = []
    for r in rows:
        if r.get("kind") == "baseline":
            continue
        bw = r.get("bandwidth") or {}
        body.append([r["name"], r.get("kind"), r.get("mode"), _f(r.get("encode_x_copy"), ".2f"), _f(r.get("decode_x_copy"), ".2f"),
                     _f(r.get("total_x_copy"), ".2f"), _f(bw.get("total_GBps") or bw.get("enc_GBps"), ".0f"),
                     _f(bw.get("pct_of_copy"), ".0f"), _f(r.get("encode_rate"), ".3g"), r.get("target"),
                     r.get("verdict") or (f"{r['status']}: {r.get('error')}" if r.get("status") != "ok" else "")])
    out += _table(["row", "kind", "mode", "enc/copy", "dec/copy", "(e+d)/copy", "eff. GB/s", "% of copy_", "enc rate /s",
                   "target", "verdict"], body)
    return out


def profile_lines(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """One row per profiled codec: what ran, how many, their summed and the wall time, the top one."""
    body = []
    for name, p in profiles.items():
        if p.get("error"):
            body.append([name, None, None, None, None, None, None, None, f"failed: {p['error']}"])
            continue
        first = (p.get("top") or [{}])[0]
        top = f"{first.get('name')} ({_f(first.get('share'), '.0%')})" if first else None
        body.append([name, p.get("what"), p.get("count"), p.get("busy_ms"), p.get("wall_ms"), p.get("launches"),
                     p.get("syncs"), p.get("copies_to_host"), top])
    return _table(["codec", "what", "count", "busy ms", "wall ms", "launches", "host waits", "copies to host",
                   "largest (share of busy)"], body)


def render(doc: dict[str, Any], bench_rows: list[dict[str, Any]] | None = None, bench_meta: dict[str, Any] | None = None,
           profiles: dict[str, dict[str, Any]] | None = None) -> str:
    """The whole page."""
    parts = doc["parts"]
    lines = ["# gcbench gpu-check", "", f"- machine: {summary_line(doc['environment'])}",
             f"- commit: {doc['environment']['commit'].get('commit') or 'unknown'}",
             f"- budget {doc['budget_s']:.0f} s, used {doc['wall_s']:.0f} s; exit status {doc['exit_status']}", ""]
    if not doc["environment"]["cuda_available"]:
        lines += ["**No CUDA device is available: only the CPU parts ran; every CUDA part is skipped.**", ""]
    lines += ["## Parts", "", *(_part_line(k, v) for k, v in parts.items()), ""]
    t = parts.get("cuda_tests", {})
    if "tests" in t:
        how = (f" in {t['workers']} process(es), Inductor compiling in {t['compile_threads']} process(es) each"
               if "workers" in t else "")
        lines += ["## CUDA-marked tests", "", f"{t['tests']} run in {t['files']} file(s){how}: {t['passed']} passed, "
                  f"{t['failures'] + t['errors']} failed, {t['skipped']} skipped.", ""]
        lines += [f"- {f}" for f in t.get("failed", [])] + [""]
        if t.get("slowest"):
            lines += [f"The slowest of the {t['timed']} tests timed (setup, call and teardown; {t['test_seconds']} s in "
                      "all, across the parallel processes; every test: `" + str(t.get("times")) + "`):", "",
                      *_table(["test", "outcome", "s"], [[e["test"], e["outcome"], e["seconds"]] for e in t["slowest"]]), ""]
    b = parts.get("bench", {})
    if bench_rows:
        lines += ["## gcbench bench, every mode", "", *bench_lines(b, bench_rows, bench_meta or {}), ""]
        if b.get("codecs_skipped"):
            lines += [f"Not measured (budget): {', '.join(b['codecs_skipped'])}", ""]
        if b.get("compiled_not_measured"):
            lines += [f"Eager rows only, compiled mode not reached (budget): {', '.join(b['compiled_not_measured'])}", ""]
    if profiles:
        lines += ["## One encode + decode under the profiler (default mode)", "",
                  "Busy time is the kernels' (or operators') summed time; far below the wall time, the codec is "
                  "bound by launches and Python, not by memory traffic. Every kernel: `bench.json`, `profiles`.", "",
                  *profile_lines(profiles), ""]
    h = parts.get("hook", {})
    if h.get("runs"):
        lines += ["## DDP hook on CUDA ranks (overlap mode, per-bucket streams)", ""]
        lines += _table(["codec", "ranks", "backend", "where", "ranks identical", "final loss", "s", "status"],
                        [[r["codec"] + (" (--amp)" if r.get("amp") else ""), r["ranks"], r.get("backend"), r.get("where"), r.get("replicas_identical"),
                          _f(r.get("final_loss"), ".4f"), r.get("seconds"), r["status"] + (f": {r['reason']}" if r.get("reason") else "")]
                         for r in h["runs"]]) + [""]
    rp = parts.get("reproductions", {})
    if rp.get("papers"):
        lines += ["## Reproductions on CUDA (time-boxed slices)", ""]
        lines += _table(["paper", "scale", "status", "claims", "s", "note"],
                        [[r["paper"], r["scale"], r["status"], ", ".join(f"{k}: {v}" for k, v in r.get("claims", {}).items()) or None,
                          r.get("seconds"), r.get("reason")] for r in rp["papers"]]) + [""]
    a = parts.get("asv", {})
    if a.get("machine"):
        lines += ["## asv", "", f"Machine `{a['machine']}`, commit {a.get('commit')}: {a.get('with_results', 0)} of "
                  f"{a.get('benchmarks', 0)} benchmarks have CUDA results (asv's format, under `asv/results/`).", ""]
    lines += ["## Budget decisions", "", *_table(["part", "wanted s", "minimum s", "left s", "granted s"],
                                                  [[d["part"], d["want_s"], d["minimum_s"], d["left_s"], d["granted_s"] or "skipped"]
                                                   for d in doc["budget_log"]]), ""]
    return "\n".join(lines)
