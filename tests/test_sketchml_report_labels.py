"""What the SketchML report says of its numbers: every time in "Paper values and ours" is labelled
*modelled* with its profile (and as a mean, the paper's "average run time per epoch"); the epochs-to-converge
paragraph states the claim's status as evaluated; the message-level bullets list every term of SketchML's
iteration; and the header names the selected tables a preset runs no cell for."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from gcbench.reproductions.framework.claims import fmt_num
from gcbench.reproductions.sketchml.critical_path import DriverModel
from gcbench.reproductions.sketchml.paperscale import METHODS, iteration_times
from gcbench.reproductions.sketchml.report import discussion, grid_sentence, paper_messages_section, tables_not_run, units_ours
from gcbench.reproductions.sketchml.report_msg import paper_words
from gcbench.reproductions.sketchml.workload import workload

PAPER = paper_words(workload().spec)


def test_every_paper_time_is_set_beside_a_number_labelled_modelled_with_its_profile():
    spec = workload().spec
    w = spec.workload
    units = units_ours(w["profile_tables"], w["profile_fig8"])
    times = [v for v in spec.values if v.unit in ("s", "h")]
    assert {v.table for v in times} == {"2", "fig9", "3", "4", "fig8"}
    for v in times:
        unit = units.get(v.measure, "")
        profile = w["profile_fig8"] if v.table == "fig8" else w["profile_tables"]
        assert unit.startswith("s, ") and "modelled" in unit and profile in unit, (v.id, unit)
        # epoch times are means over epochs, as the paper's ("average run time per epoch", §4.1), Table 3's too
        assert "median" not in unit and (v.table not in ("3", "4", "fig9") or "mean" in unit), (v.id, unit)


def _epochs_ctx(scale: str) -> SimpleNamespace:
    spec = workload().spec
    return SimpleNamespace(spec=spec, scale=scale, tables=["2"], options={}, preset=spec.scale(scale))


@pytest.mark.parametrize("scale", ["smoke", "claims", "real"])
def test_the_epochs_paragraph_states_the_claims_evaluated_status(scale):
    """t2-epochs-lr is *not at this scale* at every scale: the paragraph says so, with its reason, and does not
    read a tie as a verdict (a tie *differs* only where a run could test it)."""
    epochs = {"t2.lr.sketchml.converge_epoch": 6.0, "t2.lr.adam.converge_epoch": 6.0, "t2.lr.zipml.converge_epoch": 6.0,
              "t2.lr.rule_resolves": 1.0}
    text = discussion(_epochs_ctx(scale), {}, epochs, {})
    para = next(p for p in text.split("\n\n") if p.startswith("**Table 2 split"))
    assert "`t2-epochs-lr` is *not at this scale* at any scale of this package" in para
    assert "cannot come from §4.4's rule" in para
    assert "so a tie differs" not in para and "a tie would differ" in para


def _message_result() -> dict:
    """A message-level result written by hand: 2 executors, every method, 10 iterations per epoch."""
    def method(enc: float, dec: float, nbytes: int) -> dict:
        return {"encode_s": [enc, enc / 2], "decode_s": [dec, dec], "push_bytes": [nbytes, nbytes], "key_bytes": [1, 1],
                "keys": [10, 10], "agg_keys": 15, "agg_encode_s": enc, "agg_decode_s": dec, "update_s": 0.125,
                "down_bytes": 2 * nbytes}

    methods = {m: method(0.5 if m == "sketchml" else 0.01, 0.25 if m == "sketchml" else 0.01,
                         1_000_000 if m == "sketchml" else 8_000_000) for m in METHODS}
    params = {"features": 100, "workers": 2, "rows_per_worker": 50, "batch_ratio": 0.1, "nnz_per_row": 12.1,
              "exponent": 0.9, "signal": 2.0, "seed": 0, "model": "lr", "l2": 0.01}
    workers = [{"compute_s": 1.0, "keys": 10, "nnz": 12}, {"compute_s": 1.5, "keys": 10, "nnz": 12}]
    return {"params": params, "workers": workers, "methods": methods, "generate_s": 0.1}


def test_the_message_bullets_list_every_term_of_sketchmls_iteration():
    """The iteration = encode/decode + gradient + the executor's Adam step + modelled transfer: the bullet's
    parts add up to its total (to the four digits shown)."""
    msg = _message_result()
    profiles = {"c1": "sketchml-cluster1", "c2": "sketchml-cluster2-10"}
    drivers = {"c1": DriverModel(4, 1), "c2": DriverModel(24, 1)}
    text = paper_messages_section(msg, {"msg.density": 0.1, "msg.agg_density": 0.15}, profiles, drivers, PAPER)
    for tag, prof in profiles.items():
        t = iteration_times(msg, "sketchml", prof, driver=drivers[tag])
        line = next(x for x in text.splitlines() if x.startswith(f"- **{prof}, modelled (nominal)**"))
        head = line.split("; Adam-double's")[0]
        assert f"{fmt_num(0.125)} s Adam step" in head
        total, *parts = (float(x) for x in re.findall(r"([0-9.]+) s\b", head.split("iteration ", 1)[1]))
        assert total == pytest.approx(float(fmt_num(t["iteration_s"])))
        assert sum(parts) == pytest.approx(total, rel=2e-3), head


def test_every_time_column_of_the_message_table_that_holds_a_modelled_part_says_so():
    """The epoch columns (the critical path's and the serial model's) and the transfer columns hold modelled
    seconds, so each says *modelled (nominal)*; the bullets give the model's ceiling of the speed-up over
    Adam-double (msg.<tag>.ceiling.adam-double) beside it."""
    msg = _message_result()
    profiles = {"c1": "sketchml-cluster1", "c2": "sketchml-cluster2-10"}
    drivers = {"c1": DriverModel(4, 1), "c2": DriverModel(24, 1)}
    measured = {"msg.density": 0.1, "msg.agg_density": 0.15, "msg.c1.ceiling.adam-double": 7.0,
                "msg.c2.ceiling.adam-double": 7.5}
    text = paper_messages_section(msg, measured, profiles, drivers, PAPER)
    header = next(x for x in text.splitlines() if x.startswith("| method"))
    cols = [c.strip() for c in header.strip().strip("|").split("|")]
    timed = [c for c in cols if c.startswith(("epoch", "push"))]
    assert len(timed) == 5 and all(c.endswith("modelled (nominal)") for c in timed), timed
    for tag, prof in profiles.items():
        line = next(x for x in text.splitlines() if x.startswith(f"- **{prof}, modelled (nominal)**"))
        assert f"(`msg.{tag}.ceiling.adam-double`): {fmt_num(measured[f'msg.{tag}.ceiling.adam-double'])}x" in line


def test_the_header_names_a_selected_table_the_preset_runs_no_cell_for():
    spec = workload().spec
    real = SimpleNamespace(tables=["2", "fig9", "3", "4", "msg", "fig8"], preset=spec.scale("real"))
    assert "paper_messages" not in spec.scale("real")
    line = tables_not_run(real)
    assert line.startswith("**Selected but not run**") and "table `msg`" in line and "paper_messages" in line
    assert tables_not_run(SimpleNamespace(tables=["msg", "2"], preset=spec.scale("smoke"))) == ""
    claims = SimpleNamespace(tables=["msg", "3"], preset=spec.scale("claims"))
    assert "table `3` (outside this preset's tables)" in tables_not_run(claims)
    assert "table `msg`" not in tables_not_run(claims)


def test_the_calibrated_claims_reasons_name_no_preset_they_do_not_concern():
    """At the real scale (no message-level experiment) the calibrated claims' reason is the same as anywhere."""
    for c in workload().spec.claims:
        if c.id.startswith("cal-") or c.id.endswith("-cal"):
            assert "smoke" not in c.scale_reason and "100k" not in c.scale_reason, c.id


@pytest.mark.parametrize("chosen, end", [(0.01, "largest"), (0.003, "smallest")])
def test_a_rate_chosen_at_an_end_of_the_grid_is_said_not_bracketed(chosen, end):
    preset = {"lr_grid": [0.003, 0.01], "grid_epochs": 5, "epochs": 25}
    text = grid_sentence(preset, {"lr": chosen, "svm": None})
    assert text.startswith("grid [0.003, 0.01] with Adam-double, 5 epochs a point")
    assert f"lr: {fmt_num(chosen)}, the grid's {end} point" in text and "not bracket" in text


def test_models_that_chose_one_end_are_named_together():
    preset = {"lr_grid": [0.001, 0.003, 0.01, 0.03], "grid_epochs": 10, "epochs": 60}
    text = grid_sentence(preset, {"lr": 0.03, "svm": 0.03, "linear": 0.001})
    assert text.endswith("; lr and svm: 0.03, the grid's largest point, so the grid does not bracket it; "
                         "linear: 0.001, the grid's smallest point, so the grid does not bracket it")


def test_a_rate_inside_the_grid_is_not_flagged():
    preset = {"lr_grid": [0.001, 0.003, 0.01, 0.03], "grid_epochs": 10, "epochs": 60}
    assert "bracket" not in grid_sentence(preset, {"lr": 0.003, "svm": 0.01})
