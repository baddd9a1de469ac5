"""``gcbench compare``: every codec on one real gradient, with real bytes, error and measured time.

The gradient comes from a small model trained a few steps on scikit-learn's bundled digits data
(no download; :mod:`gcbench.workloads.gradients`). Each codec's payloads go through ``to_bytes`` and are
decoded from those bytes, so sizes and errors are those of what crosses the wire; encode and decode
times are measured (:func:`gcbench.measure.timing.measure`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__, compressors
from ..progress import ProgressBar
from .codecs import load_entry
from ..workloads.devices import resolve_device
from ..bench.limits import MAX_COMPARE_STEPS, check_count, check_rounds
from .options import COMPARE_SEED_LIMIT, check_seed
from ..compressors import Payload, UnknownCodecError
from ..compressors.registry import check_names
from ..compressors.codecs.identity import Identity
from ..workloads.gradients import describe_dense, describe_sparse, digits_gradients, digits_sparse_gradient
from ..tables import md_table, number_cell, print_whole, whole_table
from ..outputs import write_file
from ..measure.size import bits_per_element
from ..measure.timing import measure

TIMING_WHAT = (
    "measured wall clock (time.perf_counter, CUDA synchronised), median over repeats after 1 warm-up call; "
    "encode = Codec.encode of every tensor (key = parameter name), without to_bytes; "
    "decode = Codec.decode of every payload"
)


@dataclass
class CompareRow:
    """One codec's result in ``gcbench compare``."""

    codec: str
    status: str  # "ok", "failed" or "skipped"
    nbytes: int | None = None
    bits_per_element: float | None = None
    bits_per_nonzero: float | None = None
    ratio: float | None = None
    rel_l2_error: float | None = None
    encode_ms: float | None = None
    decode_ms: float | None = None
    encode_timing: dict | None = None
    decode_timing: dict | None = None
    error: str | None = None
    tensors: list[dict] = field(default_factory=list)


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.to_dense() if t.layout == torch.sparse_coo else t


def _nnz(t: torch.Tensor) -> int:
    return int(t._nnz()) if t.layout == torch.sparse_coo else int(torch.count_nonzero(t))


def baseline_nbytes(grads: Mapping[str, torch.Tensor]) -> int:
    """Real payload bytes of the uncompressed baseline (:class:`Identity`, fp32, headers included)."""
    ident = Identity()
    return sum(ident.encode(g, key=k).nbytes for k, g in grads.items())


def compare_codec(
    name: str,
    grads: Mapping[str, torch.Tensor],
    *,
    repeat: int = 5,
    device: torch.device | str = "cpu",
    baseline: int | None = None,
) -> CompareRow:
    """Measure one registered codec on ``grads`` (a model's gradients keyed by parameter name).

    A fresh codec encodes every tensor once (key = parameter name); each payload goes through
    ``to_bytes`` / ``Payload.from_bytes`` and is decoded from those bytes, so size and error are
    those of what crosses the wire. Then encode and decode of the whole model are timed
    (:func:`gcbench.measure.timing.measure`). Any exception becomes a ``failed`` row naming the error type.
    """
    target, note = load_entry(name)
    if target is None:
        return CompareRow(name, "skipped", error=note)
    try:
        codec = compressors.get(name)
    except Exception as err:  # noqa: BLE001
        return CompareRow(name, "failed", error=f"{type(err).__name__} building the codec: {err}")
    numel = sum(g.numel() for g in grads.values())
    nnz = sum(_nnz(g) for g in grads.values())
    if baseline is None:
        baseline = baseline_nbytes(grads)
    row = CompareRow(name, "ok")
    total_bytes = 0
    err2 = 0.0
    ref2 = 0.0
    payloads: dict[str, Payload] = {}
    current = ""
    try:
        for key, g in grads.items():
            current = key
            payload = codec.encode(g, key=key)
            wire = payload.to_bytes()
            decoded = codec.decode(Payload.from_bytes(wire), device=g.device)
            if tuple(decoded.shape) != tuple(g.shape):
                raise ValueError(f"decoded shape {tuple(decoded.shape)} != {tuple(g.shape)}")
            diff2 = float((_dense(decoded).double() - _dense(g).double()).pow(2).sum())
            norm2 = float(_dense(g).double().pow(2).sum())
            if not math.isfinite(diff2):
                raise ValueError("decoded tensor holds non-finite values")
            err2 += diff2
            ref2 += norm2
            total_bytes += len(wire)
            payloads[key] = payload
            row.tensors.append(
                {
                    "name": key,
                    "shape": list(g.shape),
                    "nbytes": len(wire),
                    "rel_l2_error": math.sqrt(diff2 / norm2) if norm2 > 0 else (0.0 if diff2 == 0 else None),
                }
            )
        current = ""
        enc = measure(lambda: [codec.encode(g, key=k) for k, g in grads.items()], repeat=repeat, device=device)
        dec = measure(lambda: [codec.decode(p) for p in payloads.values()], repeat=repeat, device=device)
    except Exception as err:  # noqa: BLE001 - the table reports it
        where = f" on tensor {current!r}" if current else ""
        return CompareRow(name, "failed", error=f"{type(err).__name__}{where}: {err}")
    row.nbytes = total_bytes
    row.bits_per_element = bits_per_element(total_bytes, numel)
    row.bits_per_nonzero = bits_per_element(total_bytes, nnz) if nnz else None
    row.ratio = baseline / total_bytes
    row.rel_l2_error = math.sqrt(err2 / ref2) if ref2 > 0 else (0.0 if err2 == 0 else None)
    row.encode_ms = enc.median_s * 1e3
    row.decode_ms = dec.median_s * 1e3
    row.encode_timing = enc.as_dict()
    row.decode_timing = dec.as_dict()
    return row


def load_gradients(sparse: bool, seed: int, steps: int) -> tuple[dict[str, torch.Tensor], str]:
    """The real gradient ``compare`` measures on, and one line saying exactly what it is."""
    if sparse:
        return digits_sparse_gradient(seed=seed, steps=steps), describe_sparse(seed, steps)
    return digits_gradients(seed=seed, steps=steps), describe_dense(seed, steps)


def run_compare(
    names: list[str],
    grads: Mapping[str, torch.Tensor],
    *,
    repeat: int = 5,
    device: torch.device | str = "cpu",
    on_codec: Callable[[str], None] | None = None,
) -> list[CompareRow]:
    """:func:`compare_codec` for each name, in order (``on_codec`` is called before each)."""
    baseline = baseline_nbytes(grads)
    rows = []
    for name in names:
        if on_codec is not None:
            on_codec(name)
        rows.append(compare_codec(name, grads, repeat=repeat, device=device, baseline=baseline))
    return rows


def _columns(sparse: bool) -> list[str]:
    cols = ["codec", "bits/element"]
    if sparse:
        cols.append("bits/non-zero")
    return cols + ["ratio vs fp32", "rel. L2 error", "encode ms", "decode ms", "status"]


def _cells(row: CompareRow, sparse: bool) -> list[str]:
    cells = [row.codec, number_cell(row.bits_per_element, ".3f")]
    if sparse:
        cells.append(number_cell(row.bits_per_nonzero, ".2f"))
    status = row.status if row.error is None else f"{row.status}: {row.error}"
    return cells + [
        number_cell(row.ratio, ".2f"),
        number_cell(row.rel_l2_error, ".3e"),
        number_cell(row.encode_ms, ".3f"),
        number_cell(row.decode_ms, ".3f"),
        status,
    ]


#: Column headers folded onto two lines, so the numbers, not the labels, set the table's width.
_HEADERS = {
    "codec": "codec",
    "bits/element": "bits/\nelement",
    "bits/non-zero": "bits/\nnon-zero",
    "ratio vs fp32": "ratio\nvs fp32",
    "rel. L2 error": "rel. L2\nerror",
    "encode ms": "encode\nms",
    "decode ms": "decode\nms",
    "status": "status",
}


def _table(rows: list[CompareRow], sparse: bool, compact: bool) -> Table:
    """The results table: every column but ``status`` is no-wrap with room for its widest cell and
    header line, so rich can only narrow (wrap) the status text; ``compact`` drops the box lines."""
    cols = _columns(sparse)
    return whole_table(
        [_HEADERS[c] for c in cols], [_cells(r, sparse) for r in rows],
        title="gcbench compare", caption=f"times: {TIMING_WHAT}", left=(0, len(cols) - 1),
        styles=[None if r.status == "ok" else ("red" if r.status == "failed" else "yellow") for r in rows],
        wrap_last=True, compact=compact,
    )


def print_table(console: Console, rows: list[CompareRow], sparse: bool) -> None:
    """Print the results table on ``console`` without ever truncating a number or a header
    (:func:`gcbench.tables.print_whole`)."""
    print_whole(console, lambda compact: _table(rows, sparse, compact))


def to_markdown(meta: Mapping[str, Any], rows: list[CompareRow]) -> str:
    """The comparison as a Markdown document (header lines, then a pipe table)."""
    sparse = bool(meta["gradient"]["sparse"])
    lines = [
        "# gcbench compare",
        "",
        f"- gradient: {meta['gradient']['source']}",
        f"- elements: {meta['gradient']['numel']} in {len(meta['gradient']['tensors'])} tensor(s), "
        f"{meta['gradient']['nnz']} non-zero",
        f"- baseline: {meta['baseline']['what']}: {meta['baseline']['nbytes']} bytes",
        f"- bytes: {meta['bytes']}",
        f"- timing: {meta['timing']['what']}; repeat {meta['timing']['repeat']}",
        f"- device: {meta['device']}, torch {meta['torch']}, {meta['threads']} thread(s), gcbench {meta['gcbench']}",
        "",
    ]
    lines.append(md_table(_columns(sparse), (_cells(r, sparse) for r in rows)))
    return "\n".join(lines) + "\n"


def compare_main(
    codec: list[str] | None,
    *,
    repeat: int,
    sparse: bool,
    seed: int,
    steps: int,
    device: str,
    json_path: Path | None,
    markdown_path: Path | None,
    strict: bool,
    console: Console,
    err_console: Console,
) -> int:
    """Run ``gcbench compare`` (options as in the command) and return its exit status.

    Returns:
        2 for an unknown codec, a device other than cpu/cuda/cuda:N of this machine, a seed outside
        ``0 <= seed < 2**63``, a ``repeat`` outside 1 to :data:`~gcbench.bench.limits.MAX_REPEAT` or
        ``steps`` outside 0 to :data:`~gcbench.bench.limits.MAX_COMPARE_STEPS`, 1 when ``strict`` and any codec failed or was
        skipped, else 0.
    """
    names = list(codec) if codec else compressors.names()
    try:
        check_names(names)
    except UnknownCodecError as err:  # labelled with its type, as train, bench and bench-train say it
        err_console.print(f"[red]{type(err).__name__}:[/red] {escape(str(err))}")
        return 2
    try:
        dev = torch.device(resolve_device(device))  # cpu, cuda or cuda:N of this machine
        check_seed(seed, COMPARE_SEED_LIMIT)
        check_rounds(repeat)
        check_count(steps, "--steps", 0, MAX_COMPARE_STEPS)
    except ValueError as err:
        err_console.print(f"[red]usage:[/red] {escape(str(err))}")
        return 2

    grads_cpu, source = load_gradients(sparse, seed, steps)
    grads = {k: v.to(dev) for k, v in grads_cpu.items()}
    numel = sum(g.numel() for g in grads.values())
    nnz = sum(_nnz(g) for g in grads.values())

    with ProgressBar("compare", len(names), console=err_console) as bar:

        def on_codec(name: str) -> None:
            bar.update(names.index(name), description=f"compare: {name}")

        rows = run_compare(names, grads, repeat=repeat, device=dev, on_codec=on_codec)
        bar.update(len(names))

    meta: dict[str, Any] = {
        "gcbench": __version__,
        "torch": torch.__version__,
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "gradient": {
            "source": source,
            "sparse": sparse,
            "seed": seed,
            "steps": steps,
            "numel": numel,
            "nnz": nnz,
            "tensors": [{"name": k, "shape": list(g.shape), "numel": g.numel(), "nnz": _nnz(g)} for k, g in grads.items()],
        },
        "baseline": {"what": "identity codec (raw fp32 payloads, headers included)", "nbytes": baseline_nbytes(grads)},
        "bytes": "len(Payload.to_bytes()) summed over tensors: real wire bytes incl. header and CRC",
        "timing": {"kind": "measured", "statistic": "median", "repeat": repeat, "warmup": 1, "what": TIMING_WHAT},
    }

    console.print(f"gradient: {source}")
    console.print(f"elements: {numel} in {len(grads)} tensor(s), {nnz} non-zero; device {dev}, torch {torch.__version__}")
    print_table(console, rows, sparse)
    n_ok = sum(r.status == "ok" for r in rows)
    n_failed = sum(r.status == "failed" for r in rows)
    n_skipped = sum(r.status == "skipped" for r in rows)
    console.print(f"{n_ok} ok, {n_failed} failed, {n_skipped} skipped")
    if n_skipped:
        skipped = ", ".join(r.codec for r in rows if r.status == "skipped")
        console.print(f"[yellow]note:[/yellow] skipped (module missing or not importable, see status): {skipped}")

    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {**meta, "results": [dataclasses.asdict(r) for r in rows]}
        write_file(json_path, json.dumps(doc, indent=2) + "\n")
        console.print(f"wrote {json_path}")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        write_file(markdown_path, to_markdown(meta, rows))
        console.print(f"wrote {markdown_path}")
    return 1 if strict and (n_failed or n_skipped) else 0
