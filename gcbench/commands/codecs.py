"""``gcbench codecs``: every registry entry with its parameters, declared properties, stages and paper.

A registry entry whose module cannot be imported yet is listed with the reason, never a crash
(:func:`load_entry`), so a codec being written does not break the commands that list codecs.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.segment import Segment, Segments
from rich.table import Table

from .. import compressors
from ..compressors import Codec, ErrorFeedback


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
            return None, f"module {module} does not exist"
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


def print_unpadded(console: Console, renderable: Any) -> None:
    """Print ``renderable`` (markup text or a rich renderable) laid out as ``console.print`` lays it out,
    without the spaces rich pads lines with on the right (a block's lines to its widest one, a title to
    its table's width): no line ends in whitespace."""
    if isinstance(renderable, str):
        renderable = console.render_str(renderable)
    segments: list[Segment] = []
    for line in console.render_lines(renderable, console.options, pad=False):
        while line and not line[-1].control and not line[-1].text.strip():
            line.pop()
        if line and not line[-1].control:
            line[-1] = Segment(line[-1].text.rstrip(), line[-1].style)
        segments += [*line, Segment.line()]
    console.print(Segments(segments), end="")


#: Console columns from which the registry is one table; a narrower console gets one block per codec
#: (six columns of text in 80 columns would fold words letter by letter).
TABLE_MIN_COLUMNS = 120


def codecs_main(console: Console) -> None:
    """Print the registry of ``gcbench codecs`` on ``console``: a table, or on a console narrower than
    :data:`TABLE_MIN_COLUMNS` one block per codec (the same fields)."""
    names = compressors.names()
    infos = [codec_info(name) for name in names]
    missing = [name for name, info in zip(names, infos) if info.note and not info.flags]
    fields = []
    for info in infos:
        params = "\n".join(f"{k}={v}" for k, v in info.params.items()) or "-"
        flags = ", ".join(k for k, v in info.flags.items() if v) or ("-" if info.flags else "?")
        stages = "\n".join(f"{s}{' (L)' if lossless else ''}" for s, lossless in info.stages) or "-"
        summary = escape(info.summary) + (f"\n[yellow]{escape(info.note)}[/yellow]" if info.note else "")
        fields.append((summary, *(escape(t) for t in (params, flags, stages, info.reference or "-"))))
    if console.width < TABLE_MIN_COLUMNS:
        print_unpadded(console, "[bold]gcbench codec registry[/bold]\n")
        for name, (summary, params, flags, stages, reference) in zip(names, fields):
            print_unpadded(console, f"[bold]{name}[/bold]: {summary}")
            block = (f"parameters (defaults): {params.replace(chr(10), ', ')}\ndeclares: {flags}\n"
                     f"stages (L = lossless): {stages.replace(chr(10), '; ')}\nreference: {reference}")
            print_unpadded(console, Padding(block, (0, 0, 1, 4), expand=False))
    else:
        table = Table(title="gcbench codec registry", show_lines=True)
        table.add_column("name", no_wrap=True, style="bold", min_width=max(map(len, names), default=4))
        table.add_column("summary")
        # a parameter and its default on one line
        table.add_column("parameters (defaults)", no_wrap=True,
                         min_width=max((len(line) for f in fields for line in f[1].split("\n")), default=1))
        for header in ("declares", "stages (L = lossless)", "reference"):
            table.add_column(header, overflow="fold")  # a word longer than its column folds, never "..."
        for name, row in zip(names, fields):
            table.add_row(name, *row)
        print_unpadded(console, table)
    console.print(f"{len(names)} registered, {len(names) - len(missing)} importable")
    if missing:
        console.print(f"[yellow]note:[/yellow] not importable, see the summaries: {', '.join(missing)}")
