"""Reports built from committed runs: the trimmed note of a published copy, the README's rows, and the
re-check of a report's configuration against the spec."""

from __future__ import annotations

import json
import math
from pathlib import Path

from gcbench.reproductions.framework.cells import sanitize
from gcbench.reproductions.framework.published import SERIES_ITEMS, trim_series
from gcbench.reproductions.framework.results_table import (
    NO_COMMITTED_RUN,
    NOT_AT_SCALE,
    PaperReports,
    preset_changes,
    readme_rows,
    rows,
)
from gcbench.reproductions.framework.spec import parse_spec

SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "speed"}
LONG, SHORT = list(range(SERIES_ITEMS + 1)), list(range(SERIES_ITEMS))


def make_spec(scales=None, workload=None):
    claim = {"kind": "result", "check": "near", "tolerance": 0.1, "gate": False, "scale_dependent": True,
             "tables": ["1"], "quantities": ["q"], "paper": ["v"]}
    raw = {
        "schema": 2,
        "paper": {"id": "toy", "title": "Toy", "citation": "c", "source": "s"},
        "scales": scales or {"smoke": {}, "full": {}},
        "tables": {"1": {"title": "T1"}},
        "values": [{"id": "v", "value": 7.24, "unit": "x", "table": "1", "source": SOURCE}],
        "claims": [{**claim, "id": "h-one", "text": "speed is about 7.24x", "headline": True}],
        **({"workload": workload} if workload is not None else {}),
    }
    return parse_spec(raw, Path("toy.toml"))


def test_a_trimmed_note_names_the_list_left_out_of_a_flat_cell_and_stars_only_names():
    """A list directly under a cell is named by its key (``*.losses``), never starred away; in a cell of
    one object per method, the method's name is starred too (``*.*.traffic.wire``)."""
    data = {"cells": {"results": {
        "train-a": {"losses": LONG, "curve": SHORT, "method": {"name": "sgd"}, "runs": {"sgd": {"step_s": LONG}}},
        "train-b": {"losses": LONG, "method": {"name": "topk"}},
    }}}
    assert trim_series(data) == ["*.losses", "*.runs.sgd.step_s"]
    assert data["cells"]["results"] == {"train-a": {"curve": SHORT, "method": {"name": "sgd"}},
                                        "train-b": {"method": {"name": "topk"}}}
    assert "(*.losses, *.runs.sgd.step_s)" in data["cells"]["trimmed"]
    methods = {"cells": {"results": {"lm-s0": {"uniform": {"losses": LONG, "traffic": {"wire": LONG}, "eval": {"ppl": 9.5}},
                                               "lgreco": {"losses": LONG}}}}}
    assert trim_series(methods) == ["*.*.losses", "*.*.traffic.wire"]
    assert methods["cells"]["results"] == {"lm-s0": {"uniform": {"eval": {"ppl": 9.5}}}}


def test_readme_keeps_a_not_at_this_scale_row_where_no_scale_gave_a_verdict():
    """A row without a verdict (here *no committed run* at the main scale) tested nothing: the committed
    scale's *not at this scale* row stays in the README."""
    data = {"paper": "toy", "scale": "smoke", "claims": [
        {"id": "h-one", "status": NOT_AT_SCALE, "paper": "speed 7.24 x", "ours": "speed 7.1", "detail": "needs full"}]}
    papers = [PaperReports("toy", "toy", make_spec(), {"smoke": data})]
    assert [(r.scale, r.status) for r in rows(papers)] == [("full", NO_COMMITTED_RUN), ("smoke", NOT_AT_SCALE)]
    assert [(r.scale, r.status) for r in readme_rows(papers)] == [("full", NO_COMMITTED_RUN), ("smoke", NOT_AT_SCALE)]


def test_a_non_finite_setting_reads_as_unchanged_as_the_report_stored_it():
    spec = make_spec(scales={"smoke": {"lr_max": math.inf, "steps": 10}, "full": {}},
                     workload={"images": {"clip": math.inf}})
    stored = json.loads(json.dumps(sanitize({"scale": "smoke", "preset": dict(spec.scale("smoke")),
                                             "workload": dict(spec.workload)})))
    assert stored["preset"]["lr_max"] == "inf"  # strict JSON has no infinity
    assert preset_changes(spec, stored) == []
    assert preset_changes(spec, {**stored, "preset": {"lr_max": "nan", "steps": 10}}) == ["lr_max"]
    assert preset_changes(spec, {**stored, "workload": {"images": {"clip": 1.0}}}) == ["workload.images"]
