"""Reproduction specs: every unreadable file, non-finite number, unknown or mistyped field is a SpecError."""

from __future__ import annotations

import tomllib

import pytest
from test_repro_spec import MINIMAL, write

from gcbench.reproductions.framework import spec as spec_module
from gcbench.reproductions.framework.spec import SCHEMA_VERSION, SpecError, load_spec, parse_spec

SOURCE = 'source = { paper = "Demo", table = "Table 1", row = "r", column = "c" }'


@pytest.mark.parametrize(
    "edit, message",
    [
        # numbers must be finite (TOML spells nan and inf)
        (lambda s: s.replace("value = 1.5", "value = nan"), "field 'value' must be a finite number"),
        (lambda s: s.replace("value = 1.5", "value = inf"), "field 'value' must be a finite number"),
        (lambda s: s.replace("value = 1.5", "value = -inf"), "field 'value' must be a finite number"),
        (lambda s: s.replace("value = 1.5", "value = [0.0, inf]"), "range value must be [low, high] finite numbers"),
        (lambda s: s.replace("value = 1.5", "value = [nan, 1.0]"), "range value must be [low, high] finite numbers"),
        (lambda s: s.replace("tolerance = 0.1", "tolerance = nan"), "tolerance must be >= 0 and finite"),
        (lambda s: s.replace("tolerance = 0.1", "tolerance = inf"), "tolerance must be >= 0 and finite"),
        # unknown fields, as claims already refuse them
        (lambda s: s.replace('table = "1"\n', 'table = "1"\nmesure = "b"\n', 1), "unknown field(s) ['mesure']"),
        (lambda s: s.replace('column = "c" }', 'column = "c", colum = "d" }'), "unknown field(s) ['colum']"),
        (lambda s: s.replace('source = "seeds/x.txt"', 'source = "seeds/x.txt"\nissue = 5'), "unknown field(s) ['issue']"),
        (lambda s: s.replace('title = "Table 1"', 'title = "Table 1"\ntitel = "x"'), "unknown field(s) ['titel']"),
        # mistyped fields
        (lambda s: s.replace('source = "seeds/x.txt"', 'source = "seeds/x.txt"\nimplemented = "no"'),
         "field 'implemented' must be true or false"),
        (lambda s: s.replace('source = "seeds/x.txt"', 'source = "seeds/x.txt"\nimplemented = 0'),
         "field 'implemented' must be true or false"),
        (lambda s: s.replace('table = "1"\n', 'table = "1"\nunit = 5\n', 1), "field 'unit' must be a string"),
        (lambda s: s.replace('table = "1"\n', 'table = "1"\nmeasure = ["b"]\n', 1), "field 'measure' must be a string"),
        (lambda s: s.replace('table = "1"\n', 'table = "1"\nnote = 1\n', 1), "field 'note' must be a string"),
        (lambda s: s.replace('tables = ["1"]\n', 'tables = ["1"]\nnote = 5\n'), "field 'note' must be a string"),  # a claim's
        (lambda s: s.replace("[scales.smoke]\n", "[scales.smoke]\ntables = 5\n"), "field 'tables' must be a list of strings"),
        (lambda s: s.replace("[scales.smoke]\n", "[scales.smoke]\ntables = [1]\n"), "field 'tables' must be a list of strings"),
        (lambda s: s.replace("[scales.full]\n", '[scales.full]\ntables = ["9"]\n'), "tables ['9'] are not declared"),
    ],
)
def test_each_bad_field_is_a_spec_error(tmp_path, edit, message):
    text = edit(MINIMAL)
    assert text != MINIMAL
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_the_fields_the_errors_name_are_accepted_when_well_formed(tmp_path):
    text = (MINIMAL.replace('source = "seeds/x.txt"', 'source = "seeds/x.txt"\nimplemented = false')
            .replace('table = "1"\n', 'table = "1"\nunit = "%"\nmeasure = "b"\nnote = "n"\n', 1)
            .replace("[scales.smoke]\n", '[scales.smoke]\ntables = ["1"]\n')
            .replace("value = 1.5", "value = [1.0, 2.0]"))
    spec = load_spec(write(tmp_path, text))
    v = spec.value("a")
    assert not spec.implemented and (v.unit, v.measure, v.note, v.value) == ("%", "b", "n", (1.0, 2.0))
    assert not hasattr(spec, "issue")


def test_a_file_that_is_not_utf8_is_a_spec_error(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_bytes(MINIMAL.replace("Demo paper", "Demo \xe9").encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(path)


def test_a_folder_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot be read"):
        load_spec(tmp_path)


@pytest.mark.parametrize("raw", [[], "schema = 2", None, 2])
def test_parse_spec_of_a_non_table_is_a_spec_error(tmp_path, raw):
    with pytest.raises(SpecError, match="a spec is a table of sections"):
        parse_spec(raw, tmp_path / "x.toml")


def test_parse_spec_takes_a_parsed_minimal_spec(tmp_path):
    assert parse_spec(tomllib.loads(MINIMAL), tmp_path / "x.toml").paper_id == "demo"


def test_the_module_documents_the_schema_it_checks():
    assert f"schema = {SCHEMA_VERSION}\n" in spec_module.__doc__


def test_a_paper_not_implemented_is_reported_without_development_words(tmp_path):
    import json

    from gcbench.reproductions.framework.runner import write_not_implemented

    text = MINIMAL.replace('source = "seeds/x.txt"', 'source = "seeds/x.txt"\nimplemented = false')
    spec = load_spec(write(tmp_path, text))
    report = write_not_implemented(spec, scale="smoke", out_dir=tmp_path / "out")
    assert "**This spec declares no reproduction to run**" in report.read_text()
    assert "issue" not in report.read_text().lower()
    data = json.loads((report.parent / "results.json").read_text())
    assert data["implemented"] is False and "issue" not in data
