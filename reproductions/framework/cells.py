"""A run is a list of cells; each finished cell is cached as JSON so an interrupted run resumes.

A :class:`Cell` is one independent unit of work (one training run, one encoding sweep) named by a
short ``name`` and fully described by its JSON-able ``config``. Its cache file is
``<root>/<name>-<sha256(config)[:12]>.json`` (of the config and the store's stamp, in a stamped store):
changing anything in the config (data set, epochs, codec parameters, the package's code version in it),
or in the stamp, gives a new file, so a stale result is never reused.

Files are written atomically (a temporary file in the same folder, flushed and fsync'ed, then
``os.replace``), so a run killed at any moment leaves every finished cell intact and no half-written
file; an unreadable or mismatched file is treated as absent and recomputed.

A store may carry a *stamp* of the code that computes its cells (the runner's is the codecs' digest,
:mod:`.codec_stamp`): it is mixed into every file's name and recorded in the file, so cells computed
under another stamp are not read back (another name, never a stale hit).

Beside its result a file records the seconds the cell took and the commit that computed it, so a run
that reuses cells can report the compute behind its numbers (:func:`provenance`).

Each file also carries the SHA-256 of its content (format, name, config — which holds the spec
section, code version and seeds that made it — and result). A file whose digest does not match, for
instance a result edited by hand into another valid JSON, is not trusted: it is recomputed, and
:attr:`CellStore.rejected` lists it so the report can say so (an unreadable file too). A file whose
name or config no longer matches the cell's is read as another cell's file: recomputed, not listed,
so of a hand edit only one to the result is reported. The digest detects changes, not a forger who
recomputes it; it is not a signature.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from gcbench.outputs import write_file

CELL_FORMAT = 2


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace (stable across runs, for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sanitize(obj: Any) -> Any:
    """Replace non-finite floats by the strings "inf", "-inf", "nan" (strict JSON has no such numbers)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def unsanitize_float(x: Any) -> Any:
    """Inverse of :func:`sanitize` for one value."""
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return x


@dataclass(frozen=True)
class Cell:
    """One unit of work: a name and the config that determines its result."""

    name: str
    config: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical config."""
        return self.digest_under(None)

    @property
    def key(self) -> str:
        """``name-digest``: the cache file's stem."""
        return f"{self.name}-{self.digest}"

    def digest_under(self, stamp: Mapping[str, Any] | None) -> str:
        """:attr:`digest`, or with a store's ``stamp`` the first 12 hex digits of the SHA-256 of the
        canonical config and stamp together."""
        body = self.config if stamp is None else {"config": sanitize(self.config), "stamp": stamp}
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()[:12]


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (:func:`gcbench.outputs.write_file`: temp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(sanitize(obj), indent=1, allow_nan=False))


def content_digest(name: str, config: Any, result: Any, stamp: Mapping[str, Any] | None = None) -> str:
    """SHA-256 (hex) of a cell file's content: format, name, config, the store's stamp (where it has one)
    and result, canonical JSON."""
    body = {"format": CELL_FORMAT, "name": name, "config": sanitize(config), "result": sanitize(result)}
    if stamp is not None:
        body["stamp"] = sanitize(stamp)
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


class CellStore:
    """Finished cells of one run, as JSON files under ``root`` (``results/<paper>/<scale>/cells``).

    Attributes:
        commit: the commit (with ``+dirty`` where the checkout had changes) that computes the cells this
            store saves; written in each file, None where unknown.
        stamp: what the code that computes the cells is, beyond their configs (JSON-able, e.g. the
            codecs' digest); mixed into each file's name and content digest and written in the file,
            so a store reads back only cells saved under the same stamp. None: names from the config alone.
        rejected: ``(cell name, reason)`` for every cached file of the cell's name and config that
            :meth:`load` refused because it was unreadable or failed its content digest (so the run
            recomputed it); a file whose name or config differs is another cell's, not listed.
    """

    def __init__(self, root: str | os.PathLike, *, commit: str | None = None, stamp: Mapping[str, Any] | None = None):
        self.root = Path(root)
        self.commit = commit
        self.stamp = None if stamp is None else sanitize(dict(stamp))
        self.rejected: list[tuple[str, str]] = []

    def path(self, cell: Cell) -> Path:
        """The cache file of ``cell``: ``<name>-<digest>.json``, the digest of its config (:attr:`Cell.key`)
        or, in a stamped store, of its config and the stamp."""
        return self.root / f"{cell.name}-{cell.digest_under(self.stamp)}.json"

    def load(self, cell: Cell) -> dict[str, Any] | None:
        """The cached result of ``cell``, or None if absent, unreadable, for another config or tampered with.

        A file that parses but fails its content digest is recorded in :attr:`rejected`.
        """
        entry = self.load_entry(cell)
        return None if entry is None else entry.result

    def load_entry(self, cell: Cell) -> CachedCell | None:
        """What :meth:`load` reads, with the seconds the cell took and the commit that computed it (when recorded).

        Those two are written beside the result, outside its digest: they say how the result was made, not
        what it is.
        """
        p = self.path(cell)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError, OSError):
            self.rejected.append((cell.name, "unreadable file"))
            return None
        if not isinstance(data, dict) or data.get("format") != CELL_FORMAT:
            return None  # another (older) cell format: stale, not suspicious
        if (
            data.get("name") != cell.name
            or canonical_json(data.get("config")) != canonical_json(sanitize(cell.config))
            or data.get("stamp") != self.stamp
            or not isinstance(data.get("result"), dict)
        ):
            return None
        if data.get("digest") != content_digest(cell.name, data["config"], data["result"], self.stamp):
            self.rejected.append((cell.name, "content does not match its digest"))
            return None
        elapsed, commit = data.get("elapsed_s"), data.get("commit")
        return CachedCell(
            data["result"],
            float(elapsed) if isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed >= 0 else None,
            commit if isinstance(commit, str) and commit else None,
        )

    def save(self, cell: Cell, result: Mapping[str, Any], *, elapsed_s: float) -> Path:
        """Store ``result`` for ``cell`` atomically and return the file's path."""
        p = self.path(cell)
        write_json_atomic(
            p,
            {
                "format": CELL_FORMAT,
                "name": cell.name,
                "config": cell.config,
                **({} if self.stamp is None else {"stamp": self.stamp}),
                "result": result,
                "digest": content_digest(cell.name, cell.config, result, self.stamp),
                "elapsed_s": elapsed_s,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "commit": self.commit,
            },
        )
        return p


@dataclass(frozen=True)
class CachedCell:
    """A cell file's result, and how it was made: seconds and commit (None where the file does not say)."""

    result: dict[str, Any]
    elapsed_s: float | None
    commit: str | None


@dataclass
class CellOutcome:
    """What :func:`run_cells` did for one cell.

    ``elapsed_s`` is this run's time on the cell (0 for a reused one); ``compute_s`` and ``commit`` say how its
    result was made: for a computed cell this run's seconds and commit, for a reused one what its file
    recorded (None where it recorded nothing).
    """

    cell: Cell
    result: dict[str, Any]
    cached: bool
    elapsed_s: float
    compute_s: float | None = None
    commit: str | None = None


def run_cells(
    cells: Iterable[Cell],
    compute: Callable[[Cell], Mapping[str, Any]],
    store: CellStore,
    *,
    resume: bool = True,
    on_start: Callable[[Cell, bool], None] | None = None,
    on_done: Callable[[CellOutcome], None] | None = None,
) -> dict[str, CellOutcome]:
    """Run every cell not already cached (when ``resume``), saving each as soon as it finishes.

    Args:
        cells: the cells, in the order to run them (names must be unique).
        compute: ``cell -> result`` (a JSON-able mapping).
        store: where results are cached.
        resume: reuse cached results (False recomputes and overwrites every cell).
        on_start: called before each cell with ``(cell, cached)``.
        on_done: called after each cell.

    Returns:
        ``{cell.name: CellOutcome}`` in the given order.

    Raises:
        ValueError: two cells share a name.
    """
    out: dict[str, CellOutcome] = {}
    for cell in cells:
        if cell.name in out:
            raise ValueError(f"two cells are named {cell.name!r}")
        cached = store.load_entry(cell) if resume else None
        if on_start:
            on_start(cell, cached is not None)
        if cached is not None:
            outcome = CellOutcome(cell, cached.result, True, 0.0, cached.elapsed_s, cached.commit)
        else:
            t0 = time.perf_counter()
            result = dict(compute(cell))
            elapsed = time.perf_counter() - t0
            store.save(cell, result, elapsed_s=elapsed)
            # what is kept is exactly what a resumed run would read back
            outcome = CellOutcome(cell, json.loads(json.dumps(sanitize(result))), False, elapsed, elapsed, store.commit)
        out[cell.name] = outcome
        if on_done:
            on_done(outcome)
    return out


def provenance(outcomes: Iterable[CellOutcome]) -> dict[str, Any]:
    """How a run's results were made: the cells' compute seconds and the commits that computed them.

    Returns ``{"compute_s": seconds over the cells that recorded them, "unrecorded": cells without a
    recorded time, "commits": {commit: cells}}`` (cells without a recorded commit are counted under
    ``"unrecorded"``, the key of that map).
    """
    total, unrecorded, commits = 0.0, 0, {}
    for o in outcomes:
        if o.compute_s is None:
            unrecorded += 1
        else:
            total += o.compute_s
        key = o.commit or "unrecorded"
        commits[key] = commits.get(key, 0) + 1
    return {"compute_s": total, "unrecorded": unrecorded, "commits": commits}


def commit_label(git: Mapping[str, Any] | None) -> str | None:
    """A checkout's commit as a cell file records it: the hash, with ``+dirty`` where it had uncommitted changes."""
    commit = (git or {}).get("commit")
    if not commit:
        return None
    return commit + ("+dirty" if (git or {}).get("dirty") else "")


def provenance_text(made: Mapping[str, Any]) -> str:
    """:func:`provenance` in words: ``cells' compute time 372.4 s, at `1876327abcd0```.

    Commits are shown as 12 digits (with the cells each computed where there are several); cells without a
    recorded time or commit are counted apart.
    """
    text = f"cells' compute time {float(made.get('compute_s') or 0.0):.1f} s"
    if made.get("unrecorded"):
        text += f" ({made['unrecorded']} cell(s) without a recorded time)"
    commits = dict(made.get("commits") or {})

    def short(c: str) -> str:
        return "no recorded commit" if c == "unrecorded" else f"`{c[:12]}`" + (" (uncommitted changes)" if c.endswith("+dirty") else "")

    if len(commits) == 1:
        return text + ", at " + short(next(iter(commits)))
    if commits:
        return text + ", at " + ", ".join(f"{short(c)} ({n} cell{'s' * (n != 1)})" for c, n in sorted(commits.items()))
    return text
