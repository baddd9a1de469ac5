"""Reproduction specs: the real specs load, malformed ones fail with clear errors, numbers match the papers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcbench.reproductions import PAPERS, canonical_name
from gcbench.reproductions.framework.spec import SpecError, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[1]
SPECS = {name: REPO / "reproductions" / pkg / "spec.toml" for name, pkg in PAPERS.items()}

MINIMAL = """
schema = 2
[paper]
id = "demo"
title = "Demo paper"
citation = "Someone 2020"
source = "seeds/x.txt"
[scales.smoke]
[scales.full]
[tables.1]
title = "Table 1"
[[values]]
id = "a"
value = 1.5
table = "1"
source = { paper = "Demo", table = "Table 1", row = "r", column = "c" }
[[claims]]
id = "c1"
text = "a is about 1.5"
kind = "result"
check = "near"
quantities = ["a"]
paper = ["a"]
tolerance = 0.1
gate = true
scale_dependent = false
tables = ["1"]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_paper_spec_loads(name):
    spec = load_spec(SPECS[name])
    assert spec.paper_id == name
    assert {"smoke", "full"} <= set(spec.scales)
    assert spec.values and spec.claims
    for claim in spec.claims:
        assert not (claim.gate and claim.scale_dependent)
        for ref in claim.paper:
            spec.value(ref)


def test_sketchml_spec_has_the_headline_and_gated_claims():
    spec = load_spec(SPECS["sketchml"])
    gated = {c.id for c in spec.claims if c.gate}
    assert {"t2-minloss-lr", "t2-minloss-svm", "t2-minloss-linear"} <= gated
    # the compression rate is the wire format's arithmetic at the paper's density and message size: one consistency
    # check, on the synthetic generator's data only (tuned to both)
    fc = {c.id: c for c in spec.claims if c.id.startswith("fig8-compression")}
    assert set(fc) == {"fig8-compression-format"}
    assert fc["fig8-compression-format"].kind == "consistency" and fc["fig8-compression-format"].testable == "fig8.synthetic_data"
    assert next(c for c in spec.claims if c.id == "fig8-key-bytes").kind == "consistency"
    # Four of its five positions are fixed by the wire format (bytes per pair): a consistency check.
    comm = next(c for c in spec.claims if c.id == "t4-comm-order")
    assert comm.kind == "consistency" and not comm.gate
    assert not next(c for c in spec.claims if c.id == "t4-epoch-order").gate
    assert spec.value("t4.adam-double.epoch_time").value == 1041
    assert spec.value("fig8.key_bytes.range").value == (1.25, 1.27)
    assert spec.value("t2.svm.zipml.min_loss").source.cite() == "SketchML (SIGMOD'18), Table 2, row SVM, column ZipML (min loss)"


def test_sketchml_numbers_are_printed_in_the_paper(paper_text):
    """Every SketchML number in the spec appears, as printed, in the paper text it cites."""
    spec = load_spec(SPECS["sketchml"])
    text = paper_text("SketchML")
    if text is None:
        pytest.skip("the paper's text is not here: set $GCBENCH_PAPER_TEXTS to a folder holding it")
    tokens = set(re.findall(r"\d+(?:\.\d+)?", text))
    for v in spec.values:
        nums = v.value if isinstance(v.value, tuple) else (v.value,)
        for x in nums:
            if v.id.startswith("fig8.density"):
                x = x * 100  # printed as a percentage
            printed = f"{x:g}"
            assert printed in tokens, f"{v.id}: {printed} not found in the paper text"


def test_minimal_spec_parses(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.claims[0].tolerance_text() == "±10%"
    assert spec.value("a").display() == "1.5"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace('check = "near"', 'check = "roughly"'), "unknown check 'roughly'"),
        (lambda s: s.replace('kind = "result"', 'kind = "near"'), "unknown kind 'near'"),
        (lambda s: s.replace('kind = "result"', 'kind = "consistency"'), "a consistency claim cannot gate CI"),
        (lambda s: s.replace('kind = "result"', 'kind = "consistency"').replace("gate = true", "gate = false\nheadline = true"),
         "only a 'result' claim can be a headline"),
        (lambda s: s.replace('kind = "result"', 'kind = "guard"').replace("gate = true", "gate = true\nheadline = true"),
         "only a 'result' claim can be a headline"),
        (lambda s: s.replace('check = "near"', 'check = "ratio_near"'), "'ratio_near' check takes two quantities"),
        (lambda s: s.replace('scale_dependent = false', 'scale_dependent = true'), "cannot gate CI"),
        (lambda s: s.replace('[scales.smoke]\n', '[scales.smoke]\ntables = ["2"]\n').replace('[tables.1]', '[tables.2]\ntitle = "T2"\n[tables.1]'),
         "not among that preset's tables"),
        (lambda s: s.replace('paper = ["a"]', 'paper = ["zzz"]'), "paper value 'zzz' is not defined"),
        (lambda s: s.replace('[scales.full]\n', ''), "missing the 'full' preset"),
        (lambda s: s.replace('value = 1.5', 'value = [2.0, 1.0]'), "range value must be [low, high]"),
        (lambda s: s.replace('value = 1.5', 'value = "x"'), "field 'value' must be"),
        (lambda s: s.replace('row = "r", ', ''), "missing required field 'row'"),
        (lambda s: s.replace('tolerance = 0.1', 'tolerance = -1'), "tolerance must be >= 0"),
        (lambda s: s.replace('gate = true', 'gate = "yes"'), "field 'gate' must be bool"),
        (lambda s: s.replace('schema = 2', 'schema = 1'), "schema: must be 2"),
        (lambda s: s + '\n[[values]]\nid = "a"\nvalue = 2\ntable = "1"\nsource = { paper = "p", table = "t", row = "r", column = "c" }\n',
         "duplicate value id"),
        (lambda s: s.replace('tables = ["1"]', 'tables = ["9"]'), "table '9' is not declared"),
        (lambda s: s.replace('quantities = ["a"]', 'quantities = ["a", "b"]'), "exactly one quantity"),
        (lambda s: s + "\n[oops]\n", "unknown section"),
        (lambda s: s.replace('title = "Demo paper"', 'title = "Demo'), "not valid TOML"),
    ],
)
def test_malformed_spec_is_a_clear_error(tmp_path, edit, message):
    path = write(tmp_path, edit(MINIMAL))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_unknown_scale_is_a_spec_error(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    with pytest.raises(SpecError, match="no scale 'huge'"):
        spec.scale("huge")


def test_mutation_test_name():
    from gcbench.reproductions.framework.spec import mutation_test_name

    assert mutation_test_name("threelc", "zero-run-s1.00") == "test_gate_mutation_threelc_zero_run_s1_00"
    assert mutation_test_name("sketched_sgd", "local-topk-2x") == "test_gate_mutation_sketched_sgd_local_topk_2x"


def test_paper_names_and_aliases():
    assert canonical_name("SketchML") == "sketchml"
    assert canonical_name("threelc") == "3lc"
    assert canonical_name("l-greco") == "lgreco"
    with pytest.raises(KeyError):
        canonical_name("alexnet")


def test_parse_spec_rejects_non_table_claims(tmp_path):
    import tomllib

    raw = tomllib.loads(MINIMAL)
    raw["claims"] = ["not a table"]
    with pytest.raises(SpecError, match=r"claims\[0\]: must be a table"):
        parse_spec(raw, tmp_path / "x.toml")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_no_gated_claim_is_a_consistency_claim_and_headlines_are_results(name):
    spec = load_spec(SPECS[name])
    assert {c.kind for c in spec.claims} <= {"result", "guard", "consistency"}
    assert not [c.id for c in spec.claims if c.gate and c.kind == "consistency"]
    assert not [c.id for c in spec.claims if c.headline and not c.is_result]
    assert any(c.headline for c in spec.claims), f"{name}: the spec marks no headline result"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_gated_claim_can_fail(name):
    """Feed each gated claim a measurement outside its tolerance: its check must say 'differs'."""
    from gcbench.reproductions.framework.claims import DIFFERS, evaluate_claim, falsifying_measurement

    spec = load_spec(SPECS[name])
    for claim in (c for c in spec.claims if c.gate):
        scale = claim.scales[0] if claim.scales else "smoke"
        bad = falsifying_measurement(claim, spec)
        result = evaluate_claim(claim, bad, spec, scale)
        assert result.status == DIFFERS, (claim.id, bad, result.detail)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_gated_quantity_measured_as_nan_fails_the_gate(name):
    """A method broken into NaN (a diverged loss, an undefined share) turns each gated claim red, not grey:
    NaN in any one of its quantities, the others as the falsifying measurement's, says 'differs'. A
    quantity not measured at all (None) leaves the claim 'not run'."""
    from gcbench.reproductions.framework.claims import DIFFERS, NOT_RUN, evaluate_claim, falsifying_measurement, gate_verdict_of

    spec = load_spec(SPECS[name])
    for claim in (c for c in spec.claims if c.gate):
        scale = claim.scales[0] if claim.scales else "smoke"
        bad = falsifying_measurement(claim, spec)
        for q in claim.quantities:
            result = evaluate_claim(claim, {**bad, q: float("nan")}, spec, scale)
            assert result.status == DIFFERS and "NaN" in result.detail, (claim.id, q, result.detail)
            assert gate_verdict_of([result]).state == "FAILED", claim.id
            assert evaluate_claim(claim, {**bad, q: None}, spec, scale).status == NOT_RUN, (claim.id, q)
