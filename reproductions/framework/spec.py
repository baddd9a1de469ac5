"""Reproduction specs: a paper's numbers, its workload, scale presets and the claims we check.

A spec is a TOML file (``reproductions/<paper>/spec.toml``) read with :mod:`tomllib` and validated
here, so a typo is a clear :class:`SpecError` naming the file and the field rather than a KeyError
halfway through a run. Layout::

    schema = 2
    [paper]            id, title, citation, source (the text we copied numbers from), implemented
    [workload]         free-form, read by the paper's own module
    [scales.smoke]     free-form preset (must exist); [scales.full] likewise; each preset's
                       ``description`` is the one line ``gcbench reproduce --help`` shows for it,
                       and its optional ``tables`` (keys of [tables]) the tables it runs
    [tables.<key>]     title; the keys are what ``--table`` selects ("2", "3", "4", "fig8")
    [[values]]         one per paper number: id, value (number or [low, high]), table,
                       source = {paper, table, row, column}, optional unit, measure (the measured
                       quantity shown beside it; default: the id) and note
    [[claims]]         id, text, kind, check, quantities, paper (ids of [[values]] it rests on),
                       tolerance, tolerance_kind ("relative" | "absolute"), gate, scale_dependent,
                       tables, optional headline, scales (where it is evaluated), meaningful_at
                       with scale_reason (where its verdict means something), noise (the measured
                       spread of an order's or a relative ratio_within's quantities, with
                       scale_reason), testable (a measured flag, with testable_reason or
                       scale_reason), requires (guard claims its statement includes), strict
                       (an ``order`` whose ties differ) and note

Every number is finite, and a field not listed here is an error (a misspelt ``mesure`` would
otherwise fall back silently to its default).

What a claim *is* (``kind``):

* ``result``: a quantity the paper reports and that we measure; it can come out either way, so it
  counts as a reproduced (or not reproduced) result;
* ``guard``: a property the paper states of its method without a number of its own (a plan within
  the error budget the algorithm imposes, decoded values within the bound the method's definition
  gives, a setting that trains), measured apart from the method's code so that a broken method
  fails it. A correct implementation holds it, so it says nothing about whether the paper's results
  reproduce: it may gate CI, is shown in its own section of the report, and is never counted as a
  reproduced result;
* ``consistency``: true by construction of our code or wire format (bytes fixed by the format, a size
  set from a target ratio). Still evaluated, shown in its own section of the report, asserted by the
  test suite, but never counted as a reproduced result and never gated.

A paper marks its headline results with ``headline = true`` (``result`` claims only); the report opens
with one line per headline result.

How a claim is checked (``check``, evaluated in :mod:`.claims`):

* ``near``: one measured quantity against one paper value (or range) within the tolerance;
* ``ratio_within``: ``|q0 / q1 - 1| <= tolerance`` (e.g. SketchML's minimal loss within 1% of Adam's);
  with ``tolerance_kind = "absolute"``, ``|q0 - q1| <= tolerance``;
* ``ratio_near``: the measured ratio ``q0 / q1`` against the paper's ratio ``p0 / p1`` within the
  tolerance (e.g. a speed-up of 10.4x);
* ``order``: the quantities are ascending (ties within the tolerance count as "within tolerance");
* ``at_most``: a one-sided bound, one measured quantity ``<= tolerance`` (``tolerance_kind =
  "absolute"``), e.g. an excess loss as a fraction of a baseline's drop; the paper values are shown.

Where a run is too small to test a claim (a final accuracy after a few hundred steps, a wall-clock
speed-up that needs the paper's cluster), the claim lists the scales that can test it in
``meaningful_at`` and says why in ``scale_reason``; at any other scale its status is *not at this
scale*, with the reason, never *differs*. An ``order`` of measured times may name in ``noise`` a
measured quantity holding the run's own relative spread of the same measurement (e.g. between two
seeds of one setting); where two adjacent quantities differ by no more than that, the run cannot tell
their order, and the status is *not at this scale* with ``scale_reason``, unless two quantities stand
in the reverse of the claimed order by more than the spread, which refutes it (*differs*); a spread of
0 means the measurement is exact, and the values decide as they stand; a gated claim has no noise.
A ``ratio_within`` with a relative tolerance may name a ``noise`` too: where the measured ``|q0 / q1 - 1|``
lies no farther from the tolerance than that spread, the run cannot tell whether the two are within
it, and the status is *not at this scale*.
A claim may name in ``testable`` a flag: 1 where the run can test the claim, 0 where it cannot (e.g.
a calibrated time model whose ceiling stays below the paper's speed-up, or too few sparse updates per
coordinate for an end-of-training claim). The flag is decided by the configuration or by a measurement
other than the claim's own quantities, and is in the spec before the run it judges; at 0 the status is *not at this scale* with ``testable_reason``
(``scale_reason`` where the claim gives none), and a run without the flag gives *not run* (a gated
claim has no flag: a gate must always give a verdict). A claim with both ``meaningful_at`` and
``testable`` gives the two reasons apart: ``scale_reason`` is shown at the scales outside
``meaningful_at``, ``testable_reason`` at those inside, where the flag decides.

A claim whose statement includes a property of the method that another claim checks ("at equal error
budget L-GreCo compresses more") names that claim in ``requires``: a ``guard`` of the same spec,
itself without ``requires``, evaluated at every scale the claim is (its ``scales``; their tables are
not compared: a run that selects only a table of the claim's that the guard lacks leaves the guard, and
so the claim, *not run*). The claim's own
verdict stands only where every guard it requires holds (*reproduced* or *within tolerance*); where one
*differs*, so does the claim (the part of its statement that guard checks does not hold); where one was
not run, the claim is *not run*; where one is *not at this scale*, the claim is too, with that guard's
reason. A claim that is itself *not run* or *not at this scale* keeps its own status and reason, and one
whose own check differs differs whatever its guards say. A gated claim requires only gated guards (a
gate must always give a verdict).

A claim may not be both ``gate = true`` and ``scale_dependent = true`` (CI only gates on claims whose
truth does not depend on how big our run is), nor ``gate = true`` and ``kind = "consistency"`` (a gate
that cannot fail tests nothing). A gated claim must also be evaluated and meaningful at the scale CI
runs (``smoke``): when it declares ``meaningful_at`` or ``scales``, ``smoke`` is among them, and one
of its tables is among the ``smoke`` preset's ``tables`` when that preset lists some. Each gated claim has a
mutation test, named by :func:`mutation_test_name`, that breaks the method and shows the gate going red.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_VERSION = 2
CLAIM_KINDS = ("result", "guard", "consistency")
CLAIM_CHECKS = ("near", "ratio_within", "ratio_near", "order", "at_most")
TOLERANCE_KINDS = ("relative", "absolute")
SOURCE_FIELDS = ("paper", "table", "row", "column")
PAPER_FIELDS = ("id", "title", "citation", "source", "implemented")
VALUE_FIELDS = ("id", "value", "unit", "table", "source", "measure", "note")
TABLE_FIELDS = ("title",)
#: The scale CI runs (``gcbench reproduce PAPER --scale smoke`` inside the test suite): every gated claim is
#: evaluated, and meaningful, there.
CI_SCALE = "smoke"


class SpecError(ValueError):
    """A reproduction spec is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Source:
    """Where a paper number was copied from."""

    paper: str
    table: str
    row: str
    column: str

    def cite(self) -> str:
        """``"SketchML (SIGMOD'18), Table 2, row LR, column SketchML"``."""
        return f"{self.paper}, {self.table}, row {self.row}, column {self.column}"


@dataclass(frozen=True)
class PaperValue:
    """One number printed in the paper (a scalar, or a ``(low, high)`` range)."""

    id: str
    value: float | tuple[float, float]
    unit: str
    table: str
    source: Source
    measure: str
    note: str = ""

    def display(self) -> str:
        """The value as the paper states it."""
        if isinstance(self.value, tuple):
            return f"{_fmt(self.value[0])}–{_fmt(self.value[1])}"
        return _fmt(self.value)


@dataclass(frozen=True)
class Claim:
    """A statement of the paper that a run can confirm or not."""

    id: str
    text: str
    kind: str
    check: str
    quantities: tuple[str, ...]
    paper: tuple[str, ...]
    tolerance: float
    tolerance_kind: str
    gate: bool
    scale_dependent: bool
    tables: tuple[str, ...]
    scales: tuple[str, ...] | None = None
    note: str = ""
    headline: bool = False
    meaningful_at: tuple[str, ...] | None = None
    scale_reason: str = ""
    strict: bool = False
    noise: str = ""
    testable: str = ""
    testable_reason: str = ""
    requires: tuple[str, ...] = ()

    @property
    def untestable_reason(self) -> str:
        """Why a run whose ``testable`` flag is 0 cannot test the claim."""
        return self.testable_reason or self.scale_reason

    @property
    def is_result(self) -> bool:
        """True for a measured result of the paper (``kind = "result"``), False for a guard or a
        consistency check."""
        return self.kind == "result"

    @property
    def is_guard(self) -> bool:
        """True for a guard of the method (``kind = "guard"``): gated or not, never a reproduced result."""
        return self.kind == "guard"

    def allowed(self, ref: float) -> float:
        """The largest ``|ours - paper|`` the claim allows around the paper's ``ref``: ``tolerance`` times
        ``|ref|`` for a relative tolerance, ``tolerance`` itself for an absolute one."""
        return self.tolerance * abs(ref) if self.tolerance_kind == "relative" else self.tolerance

    def tolerance_text(self) -> str:
        """``"±1%"``, ``"±0.05"``..."""
        if self.tolerance_kind == "relative":
            return f"±{self.tolerance * 100:g}%"
        return f"±{self.tolerance:g}"


@dataclass(frozen=True)
class TableInfo:
    """A table or figure of the paper that ``--table`` can select."""

    key: str
    title: str


@dataclass(frozen=True)
class Spec:
    """A validated reproduction spec."""

    path: Path
    paper_id: str
    title: str
    citation: str
    source_text: str
    implemented: bool
    workload: Mapping[str, Any]
    scales: Mapping[str, Mapping[str, Any]]
    tables: Mapping[str, TableInfo]
    values: tuple[PaperValue, ...]
    claims: tuple[Claim, ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    def value(self, value_id: str) -> PaperValue:
        """The paper value with this id."""
        for v in self.values:
            if v.id == value_id:
                return v
        raise KeyError(value_id)

    def scale(self, name: str) -> Mapping[str, Any]:
        """The preset for scale ``name``.

        Raises:
            SpecError: no such scale.
        """
        if name not in self.scales:
            raise SpecError(f"{self.path}: no scale {name!r}; this spec defines {', '.join(self.scales)}")
        return self.scales[name]


def _fmt(x: float) -> str:
    return f"{x:g}"


def _err(path: Path, where: str, msg: str) -> SpecError:
    return SpecError(f"{path}: {where}: {msg}")


def _identified(raw: Mapping[str, Any], key: str, what: str, path: Path) -> Iterator[tuple[str, str, dict]]:
    """``(id, where, table)`` of each table of the spec's array ``[[key]]`` (``what``: one entry's name in
    messages), checked to be a table with a string ``id`` unique in the array.

    Raises:
        SpecError: ``key`` is not an array of tables, an entry is not a table, has no string ``id`` or
            repeats one.
    """
    entries = raw.get(key, [])
    if not isinstance(entries, list):
        raise _err(path, key, f"must be an array of tables ([[{key}]])")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict):
            raise _err(path, where, "must be a table")
        eid = _req(entry, "id", str, path, where)
        where = f"{key}[{i}] (id {eid!r})"
        if eid in seen:
            raise _err(path, where, f"duplicate {what} id")
        seen.add(eid)
        yield eid, where, entry


def _req(table: Mapping[str, Any], key: str, types: type | tuple[type, ...], path: Path, where: str) -> Any:
    if key not in table:
        raise _err(path, where, f"missing required field {key!r}")
    val = table[key]
    if isinstance(val, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise _err(path, where, f"field {key!r} must be {_tname(types)}, got a boolean")
    if not isinstance(val, types):
        raise _err(path, where, f"field {key!r} must be {_tname(types)}, got {type(val).__name__} {val!r}")
    return val


def _no_unknown(table: Mapping[str, Any], known: tuple[str, ...], path: Path, where: str) -> None:
    unknown = set(table) - set(known)
    if unknown:
        raise _err(path, where, f"unknown field(s) {sorted(unknown)}; known: {', '.join(known)}")


def _opt_str(table: Mapping[str, Any], key: str, default: str, path: Path, where: str) -> str:
    val = table.get(key, default)
    if not isinstance(val, str):
        raise _err(path, where, f"field {key!r} must be a string, got {val!r}")
    return val


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _tname(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in ts)


def _str_list(val: Any, path: Path, where: str, key: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
        raise _err(path, where, f"field {key!r} must be a list of strings, got {val!r}")
    if not val and not allow_empty:
        raise _err(path, where, f"field {key!r} must not be empty")
    return tuple(val)


def mutation_test_name(paper_package: str, claim_id: str) -> str:
    """The name of the test that breaks the method and shows a gated claim going red.

    ``test_gate_mutation_<paper package>_<claim id>``, every character of the claim id that is not
    a letter or a digit replaced by ``_`` (``("threelc", "zero-run-s1.00")`` ->
    ``test_gate_mutation_threelc_zero_run_s1_00``).
    """
    slug = "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in claim_id)
    return f"test_gate_mutation_{paper_package}_{slug}"


def _check_gate_runs_in_ci(
    path: Path,
    where: str,
    scales: Mapping[str, Any],
    tables: tuple[str, ...],
    only_at: tuple[str, ...] | None,
    meaningful_at: tuple[str, ...] | None,
) -> None:
    """A gated claim must be tested, and meaningful, at the scale CI runs (:data:`CI_SCALE`)."""
    if meaningful_at is not None and CI_SCALE not in meaningful_at:
        raise _err(path, where, f"a gated claim must be meaningful at the {CI_SCALE!r} scale CI runs; its "
                                f"meaningful_at is {list(meaningful_at)} (set gate = false, or add {CI_SCALE!r})")
    if only_at is not None and CI_SCALE not in only_at:
        raise _err(path, where, f"a gated claim must be evaluated at the {CI_SCALE!r} scale CI runs; its "
                                f"scales are {list(only_at)} (set gate = false, or add {CI_SCALE!r})")
    ci_tables = scales[CI_SCALE].get("tables")
    if isinstance(ci_tables, list) and not set(map(str, ci_tables)).intersection(tables):
        raise _err(path, where, f"a gated claim must be evaluated at the {CI_SCALE!r} scale CI runs; its "
                                f"table(s) {list(tables)} are not among that preset's tables {ci_tables}")


def _check_requires(path: Path, claims: Sequence[Claim]) -> None:
    """Each claim's ``requires``: guards of the same spec, without ``requires`` of their own, evaluated
    at every scale the claim is (their tables are not compared); a gated claim's are gated."""
    by_id = {c.id: c for c in claims}
    for c in claims:
        where = f"claim {c.id!r}"
        for rid in c.requires:
            r = by_id.get(rid)
            if r is None:
                raise _err(path, where, f"requires {rid!r}, which is not a claim of this spec")
            if r.kind != "guard":
                raise _err(path, where, f"requires {rid!r}, a {r.kind!r} claim: only a 'guard' (a property of the "
                                        "method measured apart from it) can be a claim's precondition")
            if r.requires:
                raise _err(path, where, f"requires {rid!r}, which has 'requires' of its own (one level only)")
            if r.scales is not None and (c.scales is None or not set(c.scales) <= set(r.scales)):
                raise _err(path, where, f"requires {rid!r}, evaluated only at scale(s) {list(r.scales)}: it must be "
                                        "evaluated wherever the claim is")
            if c.gate and not r.gate:
                raise _err(path, where, f"a gated claim requires only gated guards; {rid!r} is not gated")


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file.

    Raises:
        SpecError: unreadable TOML or any field missing, mistyped or inconsistent.
    """
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{p}: spec file does not exist") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"{p}: not UTF-8 text ({err})") from None
    except OSError as err:  # a folder, a permission denied
        raise SpecError(f"{p}: cannot be read ({err.strerror or err})") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{p}: not valid TOML: {err}") from None
    return parse_spec(raw, p)


def parse_spec(raw: Mapping[str, Any], path: Path) -> Spec:
    """Validate an already-parsed spec mapping (see :func:`load_spec`).

    Raises:
        SpecError: ``raw`` is not a mapping, or any field is missing, mistyped, unknown or inconsistent.
    """
    if not isinstance(raw, Mapping):
        raise _err(path, "top level", f"a spec is a table of sections, got {type(raw).__name__}")
    schema = raw.get("schema")
    if schema != SCHEMA_VERSION:
        raise _err(path, "schema", f"must be {SCHEMA_VERSION}, got {schema!r}")
    known_top = {"schema", "paper", "workload", "scales", "tables", "values", "claims"}
    unknown = set(raw) - known_top
    if unknown:
        raise _err(path, "top level", f"unknown section(s) {sorted(unknown)}; known: {sorted(known_top)}")

    paper = _req(raw, "paper", dict, path, "top level")
    paper_id = _req(paper, "id", str, path, "[paper]")
    title = _req(paper, "title", str, path, "[paper]")
    citation = _req(paper, "citation", str, path, "[paper]")
    source_text = _req(paper, "source", str, path, "[paper]")
    implemented = paper.get("implemented", True)
    if not isinstance(implemented, bool):
        raise _err(path, "[paper]", f"field 'implemented' must be true or false, got {implemented!r}")
    _no_unknown(paper, PAPER_FIELDS, path, "[paper]")

    workload = raw.get("workload", {})
    if not isinstance(workload, dict):
        raise _err(path, "[workload]", "must be a table")
    scales = _req(raw, "scales", dict, path, "top level")
    for required in ("smoke", "full"):
        if required not in scales:
            raise _err(path, "[scales]", f"missing the {required!r} preset")
    for name, preset in scales.items():
        if not isinstance(preset, dict):
            raise _err(path, f"[scales.{name}]", "must be a table")
        summary = preset.get("description")
        if summary is not None and (not isinstance(summary, str) or "\n" in summary or not summary.strip()):
            raise _err(path, f"[scales.{name}]", f"'description' must be one non-empty line, got {summary!r}")

    tables_raw = raw.get("tables", {})
    if not isinstance(tables_raw, dict):
        raise _err(path, "[tables]", "must be a table of tables")
    tables: dict[str, TableInfo] = {}
    for key, t in tables_raw.items():
        if not isinstance(t, dict):
            raise _err(path, f"[tables.{key}]", "must be a table")
        tables[str(key)] = TableInfo(str(key), _req(t, "title", str, path, f"[tables.{key}]"))
        _no_unknown(t, TABLE_FIELDS, path, f"[tables.{key}]")
    for name, preset in scales.items():
        if "tables" in preset:
            run = _str_list(preset["tables"], path, f"[scales.{name}]", "tables")
            undeclared = [t for t in run if t not in tables]
            if undeclared:
                raise _err(path, f"[scales.{name}]", f"tables {undeclared} are not declared in [tables]")

    values: list[PaperValue] = []
    for vid, where, v in _identified(raw, "values", "value", path):
        _no_unknown(v, VALUE_FIELDS, path, where)
        val = _req(v, "value", (int, float, list), path, where)
        if isinstance(val, list):
            if len(val) != 2 or not all(_finite(x) for x in val) or val[0] > val[1]:
                raise _err(path, where, f"a range value must be [low, high] finite numbers, got {val!r}")
            value: float | tuple[float, float] = (float(val[0]), float(val[1]))
        elif not _finite(val):
            raise _err(path, where, f"field 'value' must be a finite number, got {val!r}")
        else:
            value = float(val)
        table = str(_req(v, "table", str, path, where))
        if tables and table not in tables:
            raise _err(path, where, f"table {table!r} is not declared in [tables] ({', '.join(tables)})")
        src = _req(v, "source", dict, path, where)
        for f in SOURCE_FIELDS:
            _req(src, f, str, path, where + ".source")
        _no_unknown(src, SOURCE_FIELDS, path, where + ".source")
        values.append(
            PaperValue(
                id=vid,
                value=value,
                unit=_opt_str(v, "unit", "", path, where),
                table=table,
                source=Source(*(src[f] for f in SOURCE_FIELDS)),
                measure=_opt_str(v, "measure", vid, path, where),
                note=_opt_str(v, "note", "", path, where),
            )
        )

    claims: list[Claim] = []
    seen = {v.id for v in values}
    for cid, where, c in _identified(raw, "claims", "claim", path):
        kind = _req(c, "kind", str, path, where)
        if kind not in CLAIM_KINDS:
            raise _err(path, where, f"unknown kind {kind!r}; known: {', '.join(CLAIM_KINDS)} "
                                    "(the comparison is the field 'check')")
        check = _req(c, "check", str, path, where)
        if check not in CLAIM_CHECKS:
            raise _err(path, where, f"unknown check {check!r}; known: {', '.join(CLAIM_CHECKS)}")
        quantities = _str_list(_req(c, "quantities", list, path, where), path, where, "quantities")
        paper_refs = _str_list(c.get("paper", []), path, where, "paper", allow_empty=True)
        for ref in paper_refs:
            if ref not in seen:
                raise _err(path, where, f"paper value {ref!r} is not defined in [[values]]")
        if check == "near":
            if len(quantities) != 1 or len(paper_refs) != 1:
                raise _err(path, where, "a 'near' check compares exactly one quantity with exactly one paper value")
        elif check == "ratio_within" and len(quantities) != 2:
            raise _err(path, where, "a 'ratio_within' check takes exactly two quantities [numerator, denominator]")
        elif check == "ratio_near":
            if len(quantities) != 2 or len(paper_refs) != 2:
                raise _err(path, where, "a 'ratio_near' check takes two quantities [numerator, denominator] and the "
                                        "two paper values of the same ratio")
            for ref in paper_refs:
                pv = next(v for v in values if v.id == ref)
                if isinstance(pv.value, tuple):
                    raise _err(path, where, f"a 'ratio_near' check needs scalar paper values; {ref!r} is a range")
            if next(v for v in values if v.id == paper_refs[1]).value == 0:
                raise _err(path, where, "a 'ratio_near' check's paper denominator must not be 0")
        elif check == "order" and len(quantities) < 2:
            raise _err(path, where, "an 'order' check needs at least two quantities")
        elif check == "at_most":
            if len(quantities) != 1:
                raise _err(path, where, "an 'at_most' check bounds exactly one quantity")
            if str(c.get("tolerance_kind", "relative")) != "absolute":
                raise _err(path, where, "an 'at_most' check's bound is its tolerance: set tolerance_kind = \"absolute\"")
        tol = _req(c, "tolerance", (int, float), path, where)
        if not (math.isfinite(tol) and tol >= 0):
            raise _err(path, where, f"tolerance must be >= 0 and finite, got {tol}")
        tol_kind = str(c.get("tolerance_kind", "relative"))
        if tol_kind not in TOLERANCE_KINDS:
            raise _err(path, where, f"tolerance_kind must be one of {TOLERANCE_KINDS}, got {tol_kind!r}")
        gate = _req(c, "gate", bool, path, where)
        scale_dep = _req(c, "scale_dependent", bool, path, where)
        if gate and scale_dep:
            raise _err(path, where, "a scale-dependent claim cannot gate CI (set gate = false)")
        if gate and kind == "consistency":
            raise _err(path, where, "a consistency claim cannot gate CI: it holds by construction (set gate = false; "
                                    "the test suite asserts it; a property a broken method fails is kind = \"guard\")")
        headline = c.get("headline", False)
        if not isinstance(headline, bool):
            raise _err(path, where, f"field 'headline' must be a boolean, got {headline!r}")
        if headline and kind != "result":
            raise _err(path, where, "only a 'result' claim can be a headline result")
        ctables = _str_list(_req(c, "tables", list, path, where), path, where, "tables")
        for t in ctables:
            if tables and t not in tables:
                raise _err(path, where, f"table {t!r} is not declared in [tables]")
        cscales = c.get("scales")
        if cscales is not None:
            cscales = _str_list(cscales, path, where, "scales")
            for s in cscales:
                if s not in scales:
                    raise _err(path, where, f"scale {s!r} is not declared in [scales]")
        meaningful = c.get("meaningful_at")
        scale_reason = c.get("scale_reason", "")
        if not isinstance(scale_reason, str):
            raise _err(path, where, f"field 'scale_reason' must be a string, got {scale_reason!r}")
        if meaningful is not None:
            # empty: no scale of this package can test the claim (e.g. an "up to" over the paper's grid)
            meaningful = _str_list(meaningful, path, where, "meaningful_at", allow_empty=True)
            for s in meaningful:
                if s not in scales:
                    raise _err(path, where, f"meaningful_at scale {s!r} is not declared in [scales]")
            if not scale_reason.strip():
                raise _err(path, where, "a claim with 'meaningful_at' must say why in 'scale_reason'")
        noise = c.get("noise", "")
        if not isinstance(noise, str):
            raise _err(path, where, f"field 'noise' must be a quantity name, got {noise!r}")
        if noise and check not in ("order", "ratio_within"):
            raise _err(path, where, "'noise' applies to an 'order' or a 'ratio_within' check only")
        if noise and check == "ratio_within" and c.get("tolerance_kind", "relative") != "relative":
            raise _err(path, where, "'noise' is a relative spread: a 'ratio_within' with it needs a relative tolerance")
        if noise and gate:
            raise _err(path, where, "a gated claim cannot have 'noise' (a gate must always give a verdict)")
        if noise and not scale_reason.strip():
            raise _err(path, where, "a claim with 'noise' must say in 'scale_reason' why its measurement can be within noise")
        testable = c.get("testable", "")
        if not isinstance(testable, str):
            raise _err(path, where, f"field 'testable' must be a quantity name, got {testable!r}")
        if testable and gate:
            raise _err(path, where, "a gated claim cannot have 'testable' (a gate must always give a verdict)")
        testable_reason = c.get("testable_reason", "")
        if not isinstance(testable_reason, str):
            raise _err(path, where, f"field 'testable_reason' must be a string, got {testable_reason!r}")
        if testable_reason and not testable:
            raise _err(path, where, "'testable_reason' needs 'testable' (the measured flag it explains)")
        if testable and meaningful is not None and not testable_reason.strip():
            raise _err(path, where, "a claim with 'meaningful_at' and 'testable' must say in 'testable_reason' what makes "
                                    "a run at those scales unable to test it ('scale_reason' says why the other scales cannot)")
        if testable and not (testable_reason or scale_reason).strip():
            raise _err(path, where, "a claim with 'testable' must say in 'testable_reason' what makes a run unable to test it")
        if scale_reason and meaningful is None and not noise and not testable:
            raise _err(path, where, "'scale_reason' needs 'meaningful_at' (the scales that can test the claim), 'noise' "
                                    "or 'testable'")
        if gate:
            _check_gate_runs_in_ci(path, where, scales, ctables, cscales, meaningful)
        strict = c.get("strict", False)
        if not isinstance(strict, bool):
            raise _err(path, where, f"field 'strict' must be a boolean, got {strict!r}")
        if strict and check != "order":
            raise _err(path, where, "'strict' applies to an 'order' check only")
        requires = _str_list(c.get("requires", []), path, where, "requires", allow_empty=True)
        if cid in requires:
            raise _err(path, where, "a claim cannot require itself")
        unknown_c = set(c) - {"id", "text", "kind", "check", "headline", "quantities", "paper", "tolerance", "tolerance_kind", "gate", "strict",
                              "scale_dependent", "tables", "scales", "note", "meaningful_at", "scale_reason",
                              "noise", "testable", "testable_reason", "requires"}
        if unknown_c:
            raise _err(path, where, f"unknown field(s) {sorted(unknown_c)}")
        claims.append(
            Claim(
                id=cid,
                text=_req(c, "text", str, path, where),
                kind=kind,
                check=check,
                quantities=quantities,
                paper=paper_refs,
                tolerance=float(tol),
                tolerance_kind=tol_kind,
                gate=gate,
                scale_dependent=scale_dep,
                tables=ctables,
                scales=cscales,
                note=_opt_str(c, "note", "", path, where),
                headline=headline,
                meaningful_at=meaningful,
                scale_reason=scale_reason,
                strict=strict,
                noise=noise,
                testable=testable,
                testable_reason=testable_reason,
                requires=requires,
            )
        )
    _check_requires(path, claims)

    return Spec(
        path=path,
        paper_id=paper_id,
        title=title,
        citation=citation,
        source_text=source_text,
        implemented=implemented,
        workload=workload,
        scales=scales,
        tables=tables,
        values=tuple(values),
        claims=tuple(claims),
        raw=raw,
    )
