"""The table of ``gcbench bench`` (:mod:`gcbench.bench.harness`): its columns, the cells of a row, the
header lines and the Markdown document. Rows are :class:`gcbench.bench.harness.BenchRow` objects.

Two decodes are shown: ``dec/copy`` is ``decode(payload, out=buf)`` into a buffer
allocated once outside the timed rounds, the same footing as the ``copy_`` baseline (a DDP hook
decodes into its bucket), and the one the targets count; ``dec new/copy`` is ``decode(payload)``
into a fresh tensor, which also pays the page faults of new memory (like ``clone``). Rows whose
decode cannot write into a dense buffer (sparse COO payloads, peers) time the allocating decode
in ``dec/copy`` and show ``-`` under ``dec new/copy``; their ``what`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..tables import md_table, number_cell
from .peers import peer_cell

COLUMNS = [
    "name", "kind", "mode", "enc/copy", "dec/copy", "dec new/copy", "(e+d)/copy", "(e+d)/clone", "enc rate",
    "dec rate", "first call", "compile", "bytes", "bits/el", "rel.err", "vs fastest peer", "target", "status",
]
#: What each decode column is (the table's caption, the JSON's ``decode`` key).
DECODE_WHAT = (
    "dec = decode(payload, out=buf) into a buffer allocated once outside the timed rounds (the footing of "
    "copy_; what the targets count), or the allocating decode where a row cannot decode into a dense buffer "
    "(sparse COO payloads, peers: their `what` says so); dec new = decode(payload) into a fresh tensor "
    "(page faults of new memory included, like clone)"
)
_UNIT_SHORT = {"elements/s": "el/s", "pairs/s": "pairs/s"}


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.1f}M {_UNIT_SHORT.get(unit, unit)}"


def row_cells(row: Any) -> list[str]:
    """The table cells of ``row`` (same order as :data:`COLUMNS`). The status is the verdict
    against the target (``met`` / ``not met``) when the row was measured and has one."""
    if row.error is not None:
        status = f"{row.status}: {row.error}"
    else:
        status = row.verdict or row.status
    if "time_vs_torch" in row.extra:
        status += f" ({row.extra['time_vs_torch']:.2f}x torch's time)"
    for note in ("compiled", "auto"):
        if note in row.extra:
            status += f" ({row.extra[note]})"
    return [
        row.name,
        row.kind,
        row.mode if row.kind in ("codec", "raw", "stage") else "-",
        number_cell(row.encode_x_copy, ".2f"),
        number_cell(row.decode_x_copy, ".2f"),
        number_cell(row.decode_new_x_copy, ".2f"),
        number_cell(row.total_x_copy, ".2f"),
        number_cell(row.total_x_clone, ".2f"),
        _rate(row.encode_rate, row.rate_unit),
        _rate(row.decode_rate, row.rate_unit),
        "-" if row.first_encode_s is None else f"{row.first_encode_s:.3g} s",
        "-" if row.compile_s is None else f"{row.compile_s:.3g} s",
        "-" if row.nbytes is None else str(row.nbytes),
        number_cell(row.bits_per_element, ".3f"),
        number_cell(row.rel_error, ".3g"),
        peer_cell(row),
        row.target or "",
        status,
    ]


def header_lines(meta: Mapping[str, Any]) -> list[str]:
    """What was measured, where and under what load (printed above the table and in Markdown)."""

    def fmt(v: Sequence[float] | None) -> str:
        return "n/a" if not v else "/".join(f"{a:.2f}" for a in v)

    la = meta.get("load_average_start")
    le = meta.get("load_average_end")
    return [
        (
            f"size {meta['size']} elements (float32), sparse-native codecs at density {meta['density']}; "
            f"device {meta['device']}, {meta['threads']} torch thread(s) of {meta['cpu_count']} CPUs, "
            f"torch {meta['torch']}, gcbench {meta['gcbench']}"
        ),
        (
            f"CPU {meta.get('cpu') or 'unknown'}, vector ISA {' '.join(meta.get('isa_flags') or []) or 'unknown'} "
            f"(torch CPU capability {meta.get('torch_cpu_capability') or 'unknown'})"
            + (f"; limited by {' '.join(f'{k}={v}' for k, v in meta['isa_limits'].items())}" if meta.get("isa_limits") else "")
            + (f"; GPU {meta['gpu']}" if meta.get("gpu") else "")
        ),
        f"load average (1/5/15 min) at start {fmt(la)}, at end {fmt(le)}",
        f"baselines: {meta['baselines']}",
        f"timing: {meta['timing']}; repeat {meta['repeat']}, warmup {meta['warmup']}",
        f"decode: {meta.get('decode', DECODE_WHAT)}",
        f"modes: {', '.join(meta.get('modes', ['eager']))}; {meta.get('compile', '')}",
        f"bytes: {meta['bytes']}; input: {meta['input']}",
    ]


def to_markdown(meta: Mapping[str, Any], rows: Sequence[Any]) -> str:
    """The results as a Markdown document (header bullets, then a pipe table)."""
    lines = ["# gcbench bench", ""] + [f"- {h}" for h in header_lines(meta)] + [""]
    lines.append(md_table(COLUMNS, (row_cells(r) for r in rows)))
    return "\n".join(lines) + "\n"
