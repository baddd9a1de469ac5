"""Regenerate the generated parts of the documentation from the code and the specs.

    .venv/bin/python docs/gen_docs.py          # rewrite them
    .venv/bin/python docs/gen_docs.py --check  # exit 1 if a generated part is out of date

What it writes:

* ``docs/cli.md`` between its ``<!-- cli:begin -->`` and ``<!-- cli:end -->`` markers: the options of
  ``gcbench`` itself (``--version``), then every command of ``gcbench --help`` with its summary, arguments
  and options (a required one says so), and the text after its options (``reproduce``'s scale presets),
  read from the CLI itself;
* each ``reproductions/<paper_pkg>/README.md`` between ``<!-- scales:begin -->`` and
  ``<!-- scales:end -->``: one row per ``[scales.*]`` preset of the paper's ``spec.toml`` with its
  ``description`` and the command that runs it.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from gcbench.reproductions.framework.results_table import BlockError, markers, replace_block

ROOT = Path(__file__).resolve().parents[1]
PAPER_PACKAGES = ("sketchml", "sketched_sgd", "threelc", "lgreco")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _param_row(param) -> str:
    help_text = _cell(getattr(param, "help", "") or "")
    if param.param_type_name == "argument":
        name = param.name.upper() + ("..." if param.nargs != 1 else "")
        return f"| `{name}` | {'required' if param.required else ''} | {help_text} |"
    names = " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    default = param.default
    if param.is_flag and not param.secondary_opts:
        shown = ""
    elif param.secondary_opts:
        shown = f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    elif param.required:
        shown = "required"
    else:
        shown = "" if default in (None, (), []) or callable(default) else f"`{default}`"
    return f"| {names} | {shown} | {help_text} |"


def cli_markdown() -> str:
    import typer.main

    from gcbench.cli import app

    group = typer.main.get_command(app)
    lines = ["## gcbench", "", " ".join((group.help or "").split()), ""]
    top = [p for p in group.params if p.name != "help" and not p.hidden]  # options before any command
    if top:
        lines += ["| option | default | meaning |", "|---|---|---|", *(_param_row(p) for p in top), ""]
    for name, command in group.commands.items():
        if command.hidden:
            continue
        lines += [f"## gcbench {name}", ""]
        lines += [" ".join((command.help or "").split()), ""]
        rows = [p for p in command.params if p.name != "help"]
        if rows:
            lines += ["| option | default | meaning |", "|---|---|---|"]
            lines += [_param_row(p) for p in rows]
            lines.append("")
        if command.epilog:  # e.g. reproduce's scale presets, which its --scale help says are "listed below"
            first, *items = [" ".join(p.split()) for p in command.epilog.split("\n\n")]
            lines += [first, "", *(f"- {item}" for item in items), ""]
    return "\n".join(lines).rstrip() + "\n"


def commands() -> list[str]:
    """The commands ``gcbench --help`` lists."""
    import typer.main

    from gcbench.cli import app

    group = typer.main.get_command(app)
    return [n for n, c in group.commands.items() if not c.hidden]


def scales_markdown(package: str) -> str:
    spec = tomllib.loads((ROOT / "reproductions" / package / "spec.toml").read_text(encoding="utf-8"))
    paper = spec["paper"]["id"]
    lines = ["| scale | command | what it runs (the spec's description) |", "|---|---|---|"]
    for scale, preset in spec.get("scales", {}).items():
        command = f"`gcbench reproduce {paper} --scale {scale}`"
        lines.append(f"| `{scale}` | {command} | {_cell(preset.get('description', ''))} |")
    return "\n".join(lines) + "\n"


def _replace(text: str, tag: str, body: str, where: Path) -> str:
    begin, end = markers(tag)
    try:
        return replace_block(text, f"{begin}\n{body}{end}", where=str(where), tag=tag)
    except BlockError as err:
        raise SystemExit(str(err)) from None


def targets() -> dict[Path, tuple[str, str]]:
    out = {ROOT / "docs" / "cli.md": ("cli", cli_markdown())}
    for package in PAPER_PACKAGES:
        out[ROOT / "reproductions" / package / "README.md"] = ("scales", scales_markdown(package))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated part is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, (tag, body) in targets().items():
        old = path.read_text(encoding="utf-8")
        new = _replace(old, tag, body, path)
        if new != old:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("out of date (run docs/gen_docs.py): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
