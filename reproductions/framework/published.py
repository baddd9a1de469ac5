"""Committed reports: where a finished run's report is kept in the repository, reading it, publishing it.

A run writes ``<out>/<paper id>/<scale>/`` (``report.md``, ``results.json``, ``plots/*.png``, the
``cells/`` cache, ``wandb/``), which is not committed. Publishing copies the report, the results file
and the PNG plots (never ``cells/`` nor ``wandb/``) into ``reproductions/<paper package>/results/<scale>/``,
which is committed, so a reader sees the report and its plots on the repository page; image links
inside ``report.md`` are relative, so they resolve there too. :mod:`.results_table` builds the
one-table summary of every paper from these folders.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cells import write_json_atomic

#: Files a finished run must hold to be published.
REPORT_FILE = "report.md"
RESULTS_FILE = "results.json"
#: Folders of a run that are never published (the resume cache, W&B's offline runs).
NOT_PUBLISHED = ("cells", "wandb")
#: A published report above this many bytes is reported as large (committed reports stay small).
LARGE_BYTES = 1_000_000
#: A published ``results.json`` above :data:`LARGE_BYTES` leaves out, under ``cells.results``, every list
#: of more than this many items (per-step logs: traffic, step times, losses); ``measured`` and the
#: claims already hold what was derived from them, and the run's ``cells/`` folder keeps them whole.
SERIES_ITEMS = 64
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
#: How a published ``results.json`` writes the run's ``--out`` folder (see :func:`portable_paths`).
OUT_MARK = "<out>"


class ResultsError(ValueError):
    """A run or a committed report is missing files or unreadable; the message names the file."""


class PublishError(ResultsError):
    """A run cannot be published (missing files, unreadable ``results.json``, another paper's run...)."""


def committed_root(repo_root: Path, paper_package: str) -> Path:
    """``<repo>/reproductions/<paper package>/results``: the committed reports of one paper, one folder per scale."""
    return Path(repo_root) / "reproductions" / paper_package / "results"


def committed_dir(repo_root: Path, paper_package: str, scale: str) -> Path:
    """The committed folder of one paper's report at one scale."""
    return committed_root(repo_root, paper_package) / scale


def read_results(path: Path, error: type[ResultsError] = ResultsError) -> dict[str, Any]:
    """A run's ``results.json``, checked for what the summary reads (``paper``, ``scale``, ``claims``, ``environment``).

    Raises:
        ResultsError (or ``error``): the file is missing, not JSON, or lacks those fields.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path}: unreadable ({err})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: not a JSON object")
    for key, kind in (("paper", str), ("scale", str), ("claims", list), ("environment", dict)):
        if not isinstance(data.get(key), kind):
            raise error(f"{path}: field {key!r} is missing or not a {kind.__name__}")
    for i, claim in enumerate(data["claims"]):
        if not isinstance(claim, dict) or not all(isinstance(claim.get(k), str) for k in ("id", "status", "paper", "ours")):
            raise error(f"{path}: claims[{i}] lacks one of 'id', 'status', 'paper', 'ours'")
        if not isinstance(claim.get("measured", {}), dict) or not isinstance(claim.get("detail", ""), str):
            raise error(f"{path}: claims[{i}]: 'measured' must be an object and 'detail' a string")
        if not isinstance(claim.get("fingerprint", ""), str):
            raise error(f"{path}: claims[{i}]: 'fingerprint' must be a string")
    # the optional fields the summary and the re-check read, where present
    for key in ("measured", "preset", "workload"):
        if not isinstance(data.get(key, {}), dict):
            raise error(f"{path}: field {key!r} is not an object")
    tables = data.get("tables")
    if tables is not None and not (isinstance(tables, list) and all(isinstance(t, str) for t in tables)):
        raise error(f"{path}: field 'tables' is not a list of table keys")
    env = data["environment"]
    if not isinstance(env.get("git", {}), (dict, type(None))) or not isinstance(env.get("timestamp", ""), (str, type(None))):
        raise error(f"{path}: field 'environment' holds a 'git' that is not an object or a 'timestamp' that is not a string")
    return data


def load_committed(repo_root: Path, paper_package: str) -> dict[str, dict[str, Any]]:
    """Every committed report of one paper: scale -> its ``results.json`` (sorted by scale; {} when none).

    Raises:
        ResultsError: a committed folder lacks ``report.md``, holds an unreadable ``results.json``, or
            one whose scale is not the folder's name.
    """
    root = committed_root(repo_root, paper_package)
    out: dict[str, dict[str, Any]] = {}
    if not root.is_dir():
        return out
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (folder / REPORT_FILE).is_file():
            raise ResultsError(f"{folder}: committed report folder without {REPORT_FILE}")
        data = read_results(folder / RESULTS_FILE)
        if data["scale"] != folder.name:
            raise ResultsError(f"{folder / RESULTS_FILE}: a run at scale {data['scale']!r} kept in folder {folder.name!r}")
        out[folder.name] = data
    return out


@dataclass(frozen=True)
class Published:
    """What :func:`publish` copied."""

    source: Path
    target: Path
    files: tuple[str, ...]  # relative to target
    total_bytes: int

    @property
    def large(self) -> bool:
        """True above :data:`LARGE_BYTES` (worth a look before committing)."""
        return self.total_bytes > LARGE_BYTES


def _image_links(report: str) -> list[str]:
    return [m.group(1) for m in _IMAGE_LINK.finditer(report) if "://" not in m.group(1)]


def _plots(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*.png")
                  if p.is_file() and p.relative_to(run_dir).parts[0] not in NOT_PUBLISHED)


def check_run(run_dir: Path, paper_id: str, scale: str) -> tuple[dict[str, Any], list[Path]]:
    """Check that ``run_dir`` holds a finished run of ``paper_id`` at ``scale``; its results and PNG plots.

    Raises:
        PublishError: the folder, ``report.md`` or ``results.json`` is missing; ``results.json`` is
            unreadable, belongs to another paper or scale, or is the placeholder of a paper not
            implemented; an image the report links is missing or outside the run folder.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PublishError(f"{run_dir}: no such run folder (run `gcbench reproduce {paper_id} --scale {scale}` first)")
    report_path = run_dir / REPORT_FILE
    if not report_path.is_file():
        raise PublishError(f"{report_path}: missing (the run did not finish)")
    data = read_results(run_dir / RESULTS_FILE, PublishError)
    if data["paper"] != paper_id or data["scale"] != scale:
        raise PublishError(f"{run_dir / RESULTS_FILE}: a run of {data['paper']!r} at scale {data['scale']!r}, "
                           f"not {paper_id!r} at {scale!r}")
    if data.get("implemented") is False:
        raise PublishError(f"{run_dir / RESULTS_FILE}: the placeholder report of a reproduction not implemented; nothing ran")
    try:
        report = report_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PublishError(f"{report_path}: unreadable ({err})") from None
    plots = _plots(run_dir)
    base = run_dir.resolve()
    for link in _image_links(report):
        target = (base / link).resolve()
        if not target.is_relative_to(base):
            raise PublishError(f"{report_path}: image {link!r} lies outside the run folder")
        rel = target.relative_to(base).parts
        if not rel or rel[0] in NOT_PUBLISHED or target.suffix.lower() != ".png":
            raise PublishError(f"{report_path}: image {link!r} is not a PNG plot that is published")
        if not target.is_file():
            raise PublishError(f"{report_path}: image {link!r} is missing")
    return data, plots


def trim_series(data: dict[str, Any]) -> list[str]:
    """Leave out of ``data["cells"]["results"]``, in place, every list of more than :data:`SERIES_ITEMS`
    items (and a dict left empty by that), and say so in ``data["cells"]["trimmed"]``; returns the
    paths left out, sorted (empty: nothing was long). A path stars the cell's name and, in a cell that
    holds one object per method (every value of the cell an object), the method's name: ``*.losses``,
    ``*.*.traffic.wire``; the key of the list left out is always named."""
    cells = data.get("cells")
    if not isinstance(cells, dict) or not isinstance(cells.get("results"), dict):
        return []
    left: set[str] = set()

    def walk(node: dict[str, Any], path: tuple[str, ...], methods: bool = False) -> None:
        for key in list(node):
            value = node[key]
            if isinstance(value, list) and len(value) > SERIES_ITEMS:
                del node[key]
                left.add(".".join((*path, key)))
            elif isinstance(value, dict) and value:
                walk(value, (*path, "*" if methods else key))
                if not value:  # emptied here: nothing left to keep
                    del node[key]

    for cell in cells["results"].values():
        if isinstance(cell, dict):
            walk(cell, ("*",), methods=bool(cell) and all(isinstance(v, dict) for v in cell.values()))
    if left:
        cells["trimmed"] = (f"published copy: lists of more than {SERIES_ITEMS} items under cells.results are left out "
                            f"({', '.join(sorted(left))}); the run's cells/ folder keeps them, and measured and the "
                            "claims hold what was derived from them")
    return sorted(left)


def portable_paths(data: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """``data`` with its machine paths made portable: in ``environment.argv`` and ``tracking.dir``, an
    absolute path inside the run's ``--out`` folder ``out_dir`` is written from :data:`OUT_MARK`
    (``<out>/wandb/...``) and the program (``argv[0]``) by its name only (these two in place); then,
    in every string of the returned copy, a path inside the user's home folder from ``~``
    (:func:`home_as_tilde`). Relative paths and every other value stay as they are."""
    roots = sorted({str(out_dir), str(Path(out_dir).resolve())}, key=len, reverse=True)

    def mark(text: Any) -> Any:
        if isinstance(text, str) and Path(text).is_absolute():
            for root in roots:
                if Path(text).is_relative_to(root):
                    rel = Path(text).relative_to(root).as_posix()
                    return OUT_MARK if rel == "." else f"{OUT_MARK}/{rel}"
        return text

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return home_as_tilde(node)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return [walk(v) for v in node] if isinstance(node, list) else node

    env, tracking = data.get("environment"), data.get("tracking")
    argv = env.get("argv") if isinstance(env, dict) else None
    if isinstance(argv, list) and argv:
        env["argv"] = [Path(argv[0]).name if isinstance(argv[0], str) else argv[0], *map(mark, argv[1:])]
    if isinstance(tracking, dict) and "dir" in tracking:
        tracking["dir"] = mark(tracking["dir"])
    return walk(data)


def home_as_tilde(text: str, home: str | None = None) -> str:
    """``text`` with each path inside the home folder (``home``, default the user's) written from
    ``~``: ``/home/me/.cache/x`` becomes ``~/.cache/x`` (a data set's source in its description,
    say); only at a path's start, so ``/mnt/home/me/x`` stays. A home of ``/`` or none changes nothing."""
    home = str(Path.home()) if home is None else home
    home = home.rstrip("/")
    if not home:
        return text
    return re.sub(r"(?<![\w.~/-])" + re.escape(home) + r"(?=/)", "~", text)


def publish(run_dir: Path, target: Path, paper_id: str, scale: str) -> Published:
    """Copy a finished run's ``report.md``, ``results.json`` and PNG plots to ``target``, replacing what was there.

    A ``results.json`` over :data:`LARGE_BYTES` is published without its long per-step lists
    (:func:`trim_series`), and with the run's folder written from :data:`OUT_MARK`
    (:func:`portable_paths`; ``run_dir`` is ``<out>/<paper>/<scale>``); in both files a path inside the
    user's home folder is written from ``~``. The copy is made in a sibling folder first, so a failure leaves ``target`` as it was.

    Raises:
        PublishError: see :func:`check_run`.
    """
    run_dir = Path(run_dir)
    data, plots = check_run(run_dir, paper_id, scale)
    target = Path(target)
    staging = target.with_name(f".{target.name}.publishing")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    files = [run_dir / REPORT_FILE, run_dir / RESULTS_FILE, *plots]
    names = []
    for src in files:
        rel = src.relative_to(run_dir)
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, staging / rel)
        names.append(rel.as_posix())
    report = staging / REPORT_FILE
    report.write_text(home_as_tilde(report.read_text(encoding="utf-8")), encoding="utf-8")
    if (staging / RESULTS_FILE).stat().st_size > LARGE_BYTES:
        trim_series(data)
    # written as the run writes it (write_json_atomic), so a file with nothing to change keeps its bytes
    write_json_atomic(staging / RESULTS_FILE, portable_paths(data, run_dir.parent.parent))
    (staging / RESULTS_FILE).chmod(0o644)  # as the copied files (the atomic write's temp file is private)
    if target.exists():
        shutil.rmtree(target)
    staging.replace(target)
    return Published(run_dir, target, tuple(names), sum((target / n).stat().st_size for n in names))

