"""Every gated claim has a mutation test, and every mutation test names a gated claim.

A gate that a broken method cannot turn red tests nothing. The convention
(:func:`gcbench.reproductions.framework.spec.mutation_test_name`): for each ``gate = true`` claim of a
paper, a test function ``test_gate_mutation_<paper package>_<claim id, non-alphanumerics as _>`` in
``tests/*.py`` runs the smallest scale with the method deliberately broken and asserts that the gate
goes red, and that the unbroken run is green. This file checks, by reading the test files with ``ast``:

* a gated claim without its test fails, unless it is listed in :data:`KNOWN_MISSING`;
* a mutation test whose name matches no gated claim (a claim not gated, or not existing) fails;
* an entry of :data:`KNOWN_MISSING` that has a test now, or is not a gated claim any more, fails, so
  the set only shrinks;
* two gated claims of a paper that map to one test name, or one test name defined twice, fail.

Names alone cannot show that a test breaks the method: ``conftest.py`` also fails each
``test_gate_mutation_*`` whose own call never evaluated its claim as *differs*, or whose test run never
evaluated it green (:mod:`gate_evidence`; its checker is tested at the end of this file).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from gcbench.reproductions import PAPERS
from gcbench.reproductions.framework.spec import load_spec, mutation_test_name, parse_spec

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
PREFIX = "test_gate_mutation_"

#: Gated claims (``"<paper package>/<claim id>"``) whose mutation test is not written yet. Remove an
#: entry when its test lands; the check below fails on an entry that has a test or is not gated.
KNOWN_MISSING: set[str] = set()


@dataclass(frozen=True)
class ClaimRef:
    """A claim of a paper, and whether it gates CI."""

    package: str
    claim: str
    gate: bool

    @property
    def key(self) -> str:
        return f"{self.package}/{self.claim}"


def claims_by_test_name(specs: Mapping[str, object]) -> tuple[dict[str, list[ClaimRef]], list[str]]:
    """Mutation-test name -> the claims it stands for (one, unless two ids share a name), and those collisions."""
    out: dict[str, list[ClaimRef]] = {}
    for package, spec in specs.items():
        for claim in spec.claims:  # type: ignore[attr-defined]
            out.setdefault(mutation_test_name(package, claim.id), []).append(ClaimRef(package, claim.id, claim.gate))
    collisions = [f"{name}: one mutation-test name for the gated claims {', '.join(r.key for r in refs)}"
                  for name, refs in sorted(out.items()) if len(refs) > 1 and any(r.gate for r in refs)]
    return out, collisions


def mutation_tests(files: Iterable[Path]) -> dict[str, list[str]]:
    """Every function named ``test_gate_mutation_*`` in ``files`` (module level or in a class) -> ``file:line`` places."""
    found: dict[str, list[str]] = {}
    for path in sorted(files):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(PREFIX):
                found.setdefault(node.name, []).append(f"{path.name}:{node.lineno}")
    return found


def problems(specs: Mapping[str, object], test_files: Iterable[Path], known_missing: set[str]) -> list[str]:
    """What breaks the convention (see the module docstring); empty when all is well."""
    by_name, out = claims_by_test_name(specs)
    tests = mutation_tests(test_files)
    gated = {r.key: name for name, refs in by_name.items() for r in refs if r.gate}
    for key, name in sorted(gated.items()):
        if name not in tests and key not in known_missing:
            out.append(f"{key}: gated claim without its mutation test {name}() in tests/*.py")
    for name, places in sorted(tests.items()):
        if len(places) > 1:
            out.append(f"{name}: defined more than once ({', '.join(places)})")
        refs = by_name.get(name, [])
        if not refs:
            out.append(f"{name} ({places[0]}): names no claim of any paper spec")
        elif not any(r.gate for r in refs):
            out.append(f"{name} ({places[0]}): names {refs[0].key}, which is not gated (gate = false)")
    for key in sorted(known_missing):
        if key not in gated:
            out.append(f"KNOWN_MISSING holds {key}, which is not a gated claim (any more): remove it")
        elif gated[key] in tests:
            out.append(f"KNOWN_MISSING holds {key}, whose mutation test {gated[key]}() exists now: remove it")
    return out


def test_every_gated_claim_has_a_mutation_test_and_every_mutation_test_a_gated_claim():
    specs = {pkg: load_spec(ROOT / "reproductions" / pkg / "spec.toml") for pkg in PAPERS.values()}
    assert problems(specs, TESTS.glob("*.py"), KNOWN_MISSING) == []


# --- the checker itself, on synthetic specs and test files ------------------------------------------


def toy_spec(claims: dict[str, bool]):
    raw = {
        "schema": 2,
        "paper": {"id": "toy", "title": "T", "citation": "c", "source": "s"},
        "scales": {"smoke": {}, "full": {}},
        "values": [],
        "claims": [{"id": cid, "text": cid, "kind": "result", "check": "order", "quantities": ["a", "b"],
                    "tolerance": 0.0, "gate": gate, "scale_dependent": False, "tables": ["1"]}
                   for cid, gate in claims.items()],
    }
    return parse_spec(raw, Path("toy.toml"))


def write_tests(tmp_path: Path, *names: str, extra: str = "") -> list[Path]:
    body = "".join(f"def {n}():\n    pass\n\n\n" for n in names) + extra
    path = tmp_path / "test_toy.py"
    path.write_text(body)
    return [path]


SPECS = {"toy": toy_spec({"gate-a1.0": True, "plain": False})}


def test_checker_passes_a_gated_claim_with_its_test(tmp_path):
    assert problems(SPECS, write_tests(tmp_path, "test_gate_mutation_toy_gate_a1_0"), set()) == []
    in_a_class = "class TestGates:\n    def test_gate_mutation_toy_gate_a1_0(self):\n        pass\n"
    assert problems(SPECS, write_tests(tmp_path, extra=in_a_class), set()) == []


@pytest.mark.parametrize("tests, known, msg", [
    ((), set(), "toy/gate-a1.0: gated claim without its mutation test test_gate_mutation_toy_gate_a1_0()"),
    (("test_gate_mutation_toy_gate_a1_0", "test_gate_mutation_toy_plain"), set(), "names toy/plain, which is not gated"),
    (("test_gate_mutation_toy_gate_a1_0", "test_gate_mutation_toy_nothing"), set(), "names no claim"),
    (("test_gate_mutation_toy_gate_a1_0",), {"toy/gate-a1.0"}, "whose mutation test test_gate_mutation_toy_gate_a1_0() exists now"),
    ((), {"toy/gate-a1.0", "toy/plain"}, "KNOWN_MISSING holds toy/plain, which is not a gated claim"),
    ((), {"toy/gate-a1.0", "toy/gone"}, "KNOWN_MISSING holds toy/gone"),
])
def test_checker_reports_each_broken_rule(tmp_path, tests, known, msg):
    found = problems(SPECS, write_tests(tmp_path, *tests), known)
    assert any(msg in p for p in found), found


def test_checker_accepts_a_missing_test_listed_in_known_missing(tmp_path):
    assert problems(SPECS, write_tests(tmp_path), {"toy/gate-a1.0"}) == []


def test_checker_reports_name_collisions_and_duplicates(tmp_path):
    specs = {"toy": toy_spec({"gate-a1.0": True, "gate-a1_0": True})}
    found = problems(specs, write_tests(tmp_path, "test_gate_mutation_toy_gate_a1_0"), set())
    assert any("one mutation-test name for the gated claims toy/gate-a1.0, toy/gate-a1_0" in p for p in found), found
    other = tmp_path / "test_other.py"
    other.write_text("def test_gate_mutation_toy_gate_a1_0():\n    pass\n")
    found = problems(SPECS, write_tests(tmp_path, "test_gate_mutation_toy_gate_a1_0") + [other], set())
    assert any("defined more than once" in p for p in found), found


# --- the run-time evidence (gate_evidence, wired in conftest.py) --------------------------------------


def test_evidence_asks_for_red_in_the_test_and_green_in_the_run():
    from gate_evidence import missing_evidence

    name, cid = "test_gate_mutation_toy_gate_a1_0", "gate-a1.0"
    red, green = (cid, "differs"), (cid, "reproduced")
    assert missing_evidence(name, cid, [red], [green, red]) is None
    assert missing_evidence(name, cid, [green, red], [green, red]) is None
    assert missing_evidence(name, cid, [red], [(cid, "within tolerance"), red]) is None
    assert "never evaluated 'gate-a1.0' as 'differs'" in missing_evidence(name, cid, [], [green])
    assert "never evaluated" in missing_evidence(name, cid, [("other", "differs")], [green, ("other", "differs")])
    assert "never evaluated" in missing_evidence(name, cid, [], [green, red])  # red outside the test's own call
    assert "(the real method)" in missing_evidence(name, cid, [red], [red])
    assert "(the real method)" in missing_evidence(name, cid, [red], [(cid, "not run"), red])
    assert missing_evidence("test_gate_mutation_toy_nothing", None, [], []) is None  # the naming check reports it


def test_the_log_records_every_claim_result_and_restores_the_class():
    from gate_evidence import ClaimLog

    from gcbench.reproductions.framework.claims import ClaimResult, evaluate_claim, falsifying_measurement

    spec = SPECS["toy"]
    claim = next(c for c in spec.claims if c.id == "gate-a1.0")
    before = ClaimResult.__init__
    log = ClaimLog()
    log.install()
    try:
        evaluate_claim(claim, falsifying_measurement(claim, spec), spec, "smoke")
        evaluate_claim(claim, {"a": 1.0, "b": 2.0}, spec, "smoke")
    finally:
        log.uninstall()
    assert log.events == [("gate-a1.0", "differs"), ("gate-a1.0", "reproduced")]
    assert ClaimResult.__init__ is before


def test_every_mutation_test_name_maps_to_its_gated_claim():
    from gate_evidence import gated_claim_by_test_name, load_specs

    by_name = gated_claim_by_test_name(load_specs())
    assert by_name["test_gate_mutation_threelc_trains_s1_00"] == "trains-s1.00"
    assert len(by_name) == sum(c.gate for spec in load_specs().values() for c in spec.claims)
