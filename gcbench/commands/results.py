"""``gcbench results``: one table of every paper's headline claims, from the committed reports.

:func:`results_main` reads ``reproductions/<paper>/results/<scale>/results.json`` of the four papers,
writes ``RESULTS.md`` at the repository root and rewrites the block between ``<!-- results:begin -->``
and ``<!-- results:end -->`` in ``README.md`` (:mod:`gcbench.reproductions.framework.results_table`),
and, where README.md has it, the block of committed GPU runs between ``<!-- gpu:begin -->`` and
``<!-- gpu:end -->`` (:mod:`gcbench.commands.gpu_check.committed`);
with ``check=True`` it writes nothing and says whether they are up to date, and whether every committed
report still agrees with its spec (a claim whose definition changed since the run is listed with the
command that runs it again; :func:`~gcbench.reproductions.framework.results_table.outdated_reports`). :func:`publish_main`
copies a finished run's report, results and plots into the committed folder
(:mod:`gcbench.reproductions.framework.published`), then regenerates the tables.

Exit status: ``0`` done (or up to date), ``1`` (:data:`EXIT_STALE`) ``check`` found a stale file or a
committed report with claims changed since its run,
``2`` (:data:`EXIT_USAGE`) unknown paper or scale, a run that cannot be published, an unreadable
committed report, README markers missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ..outputs import OutputWriteError, write_file

EXIT_OK = 0
EXIT_STALE = 1
EXIT_USAGE = 2
RESULTS_MD = "RESULTS.md"
README_MD = "README.md"
DEFAULT_FROM = "results"


def default_root() -> Path:
    """The repository holding this installation (the checkout, for an editable install)."""
    from gcbench.reproductions.framework.report import REPO_ROOT

    return REPO_ROOT


def spec_path(paper_package: str) -> Path:
    """A paper's ``spec.toml`` in the installed package (read without importing the paper's code)."""
    import gcbench.reproductions as reproductions

    return Path(reproductions.__file__).parent / paper_package / "spec.toml"


def paper_reports(root: Path) -> list[Any]:
    """Every paper's spec and committed reports under ``root`` (a list of ``PaperReports``, in ``PAPERS`` order).

    Raises:
        SpecError: a spec is malformed. ResultsError: a committed report is unreadable.
    """
    from gcbench.reproductions import PAPERS
    from gcbench.reproductions.framework.published import load_committed
    from gcbench.reproductions.framework.results_table import PaperReports
    from gcbench.reproductions.framework.spec import load_spec

    return [PaperReports(name, pkg, load_spec(spec_path(pkg)), load_committed(root, pkg)) for name, pkg in PAPERS.items()]


def generated(root: Path, *, readme: bool = True, papers: list[Any] | None = None) -> dict[Path, str]:
    """The files ``gcbench results`` writes under ``root`` and their new text (``papers``: :func:`paper_reports`'s,
    read here when not given).

    Raises:
        SpecError, ResultsError, BlockError (README markers), OSError (README unreadable),
        CommittedRunError (a committed ``gpu-check.json`` unreadable).
    """
    from gcbench.commands.gpu_check import committed
    from gcbench.reproductions.framework.results_table import markers, render_readme_block, render_results_md, replace_block

    papers = papers if papers is not None else paper_reports(root)
    out = {root / RESULTS_MD: render_results_md(papers)}
    if readme:
        path = root / README_MD
        text = replace_block(path.read_text(encoding="utf-8"), render_readme_block(papers), where=str(path))
        if markers(committed.TAG)[0] in text:  # the committed GPU runs, where README.md has their block
            text = replace_block(text, committed.render_readme_block(root), where=str(path), tag=committed.TAG)
        out[path] = text
    return out


def _err(message: str, stream: TextIO) -> int:
    print(f"gcbench results: {message}", file=stream)
    return EXIT_USAGE


def results_main(
    root: Path | None = None,
    *,
    json_path: Path | None = None,
    check: bool = False,
    readme: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Write ``RESULTS.md`` (and README.md's block, and ``json_path``), or with ``check`` compare only.

    Returns the exit status (see the module docstring). ``out``/``err``: where messages go (default the
    process's stdout and stderr at the time of the call).
    """
    out, err = out or sys.stdout, err or sys.stderr
    from gcbench.commands.gpu_check.committed import CommittedRunError
    from gcbench.reproductions.framework.published import ResultsError
    from gcbench.reproductions.framework.results_table import BlockError, outdated_reports, summary
    from gcbench.reproductions.framework.spec import SpecError

    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        return _err(f"--root {root} is not a folder", err)
    try:
        papers = paper_reports(root)
        files = generated(root, readme=readme, papers=papers)
    except (SpecError, ResultsError, BlockError, CommittedRunError, OSError) as error:
        return _err(str(error), err)
    changed = outdated_reports(papers)
    for line in changed:
        print(f"outdated: {line}", file=err)
    if check:
        stale = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for p in stale:
            print(f"stale: {p} (run `gcbench results`)", file=err)
        if not stale:
            print("up to date: " + ", ".join(str(p) for p in files), file=out)
        return EXIT_STALE if stale or changed else EXIT_OK
    if json_path is not None:
        files[Path(json_path)] = json.dumps(summary(papers), indent=2, sort_keys=True) + "\n"
    for p, text in files.items():
        try:
            write_file(p, text)
        except OutputWriteError as error:
            return _err(str(error), err)
        print(f"wrote {p}", file=out)
    return EXIT_OK


def publish_main(
    paper: str,
    scale: str | None = None,
    from_dir: Path | None = None,
    root: Path | None = None,
    *,
    readme: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Copy ``<from>/<paper>/<scale>/`` into ``reproductions/<package>/results/<scale>/``, then regenerate the tables.

    ``scale`` defaults to the paper's main scale (``claims``, else ``full``). Returns the exit status.
    """
    out, err = out or sys.stdout, err or sys.stderr
    from gcbench.commands.gpu_check.committed import CommittedRunError
    from gcbench.reproductions import PAPERS, canonical_name
    from gcbench.reproductions.framework.published import PublishError, ResultsError, committed_dir, publish
    from gcbench.reproductions.framework.results_table import BlockError, main_scale
    from gcbench.reproductions.framework.runner import run_dir_for
    from gcbench.reproductions.framework.spec import SpecError, load_spec

    root = Path(root) if root is not None else default_root()
    try:
        name = canonical_name(paper)
    except KeyError as error:
        return _err(error.args[0], err)
    try:
        spec = load_spec(spec_path(PAPERS[name]))
        scale = scale or main_scale(spec)
        spec.scale(scale)
    except SpecError as error:
        return _err(str(error), err)
    source = run_dir_for(Path(from_dir if from_dir is not None else DEFAULT_FROM), spec.paper_id, scale)
    try:  # the tables must be writable before anything is copied: README's markers, the other committed reports
        generated(root, readme=readme)
    except (SpecError, ResultsError, BlockError, CommittedRunError, OSError) as error:
        return _err(f"cannot publish: {error}; nothing was copied", err)
    try:
        done = publish(source, committed_dir(root, PAPERS[name], scale), spec.paper_id, scale)
    except PublishError as error:
        return _err(f"cannot publish: {error}", err)
    except OSError as error:
        return _err(f"cannot publish {source}: {error}", err)
    print(f"published {source} -> {done.target}: {', '.join(done.files)} ({done.total_bytes:,} bytes)", file=out)
    if done.large:
        print(f"note: {done.target} holds {done.total_bytes:,} bytes; committed reports are meant to stay near 1 MB",
              file=err)
    return results_main(root, readme=readme, out=out, err=err)


def asv_results_main(root: Path | None, dest: Path, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Copy the committed GPU runs' asv results into ``dest`` (asv's results folder). Returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    from gcbench.commands.gpu_check.committed import CommittedRunError, copy_asv_results

    root = Path(root) if root is not None else default_root()
    if Path(dest).exists() and not Path(dest).is_dir():
        return _err(f"--asv-results {dest} is a file; give asv's results folder (e.g. .asv/results)", err)
    try:
        written = copy_asv_results(root, Path(dest))
    except (CommittedRunError, OSError) as error:
        return _err(str(error), err)
    machines = sorted({p.parent.name for p in written})
    print(f"copied {len(written)} file(s) of {len(machines)} GPU machine(s) ({', '.join(machines) or 'none committed'}) "
          f"into {dest}; `asv publish` shows them", file=out)
    return EXIT_OK
