"""SketchML's Table 3 default time and the Fig. 8 flags, through the workload's own derivation.

* Table 3: the default trains twice in a run; its time is the median over the epochs of both runs
  (§4.1's average run time per epoch over every epoch the setting ran), never the first run alone.
* Fig. 8(d) near zero density: testable only on a data set the spec declares to keep its source's id
  order (``fig8.source_ids``), whatever else is real about the data.
* Fig. 8(b): the compression rate is one consistency check on any data whose gradient density lets a
  MinMaxSketch group's mean key gap fit one byte (``fig8.format_keys``).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest

from gcbench.reproductions.framework.claims import DIFFERS, NOT_AT_SCALE, REPRODUCED, WITHIN, evaluate_claim
from gcbench.reproductions.sketchml.settings import T3_REPEAT
from gcbench.reproductions.sketchml.workload import format_keys, source_ordered_ids, table3_epoch_time

sketchml_workload = importlib.import_module("gcbench.reproductions.sketchml.workload")
EPOCHS = 10


def _run(seconds: float, *, dataset: str = "widedeep-reviews", density: float = 0.076, key_bytes: float = 1.34,
         sent: float = 14000.0, raw: float = 80000.0) -> dict:
    """A training run's cell: ``EPOCHS`` trained epochs of ``seconds`` each after the untrained epoch 0."""
    epochs = [{"epoch": e, "epoch_time_s": seconds if e else 0.0, "measured_s": 0.9 * seconds if e else 0.0,
               "modelled_comm_s": 0.1 * seconds if e else 0.0, "test_loss": 0.7 - 0.01 * e, "cum_time_s": e * seconds,
               "messages": 100 if e else 0, "bytes_up": 1e5 if e else 0, "bytes_down": 1e4 if e else 0}
              for e in range(EPOCHS + 1)]
    summary = {"median_epoch_time_s": seconds, "mean_epoch_time_s": seconds, "mean_message_bytes": sent,
               "mean_raw_message_bytes": raw, "key_bytes_per_key": key_bytes, "mean_density": density}
    return {"epochs": epochs, "summary": summary, "dataset": {"name": dataset}}


def _measured(results: dict) -> dict:
    wl = sketchml_workload.workload()
    ctx = SimpleNamespace(options={}, preset={"workers": 10}, tables=["3", "fig8"], scale="real")
    return wl.derive(ctx, results)


def _status(claim_id: str, measured: dict) -> str:
    wl = sketchml_workload.workload()
    claim = next(c for c in wl.spec.claims if c.id == claim_id)
    return evaluate_claim(claim, measured, wl.spec, "real").status


def _table3(first: float, repeat: float, col_half: float, row_4: float = 1.20) -> dict:
    return {"train-linear-sketchml": _run(first), T3_REPEAT: _run(repeat), "train-linear-col_half": _run(col_half),
            "train-linear-row_4": _run(row_4), "train-linear-quan_256": _run(first)}


def test_table3_epoch_time_is_the_median_over_every_epoch_of_every_run():
    assert table3_epoch_time([_run(1.0)]) == 1.0
    assert table3_epoch_time([_run(1.0), _run(1.03)]) == pytest.approx(1.015)
    assert table3_epoch_time([_run(1.0), {"epochs": [{"epoch": 0, "epoch_time_s": 0.0}]}]) == 1.0  # epoch 0 left out
    assert table3_epoch_time([]) is None


@pytest.mark.parametrize("first, repeat", [(1.00, 1.03), (1.03, 1.00)])
def test_the_default_is_judged_on_both_its_runs_whichever_ran_faster(first, repeat):
    """col_d/2 lies 3.4% above the faster run of the default, farther than the two runs' 2.9% gap, but only
    1.9% above the default's pooled median: the order is within the run's noise, *not at this scale*. The
    first run alone would read *reproduced* when it is the faster one, so the rule must not depend on it."""
    m = _measured(_table3(first, repeat, col_half=1.035))
    assert m["t3.default.epoch_time_s"] == pytest.approx(1.015)
    assert (m["t3.default.first_epoch_time_s"], m["t3.default.repeat_epoch_time_s"]) == (first, repeat)
    assert m["t3.epoch_time_spread"] == pytest.approx(0.03 / 1.03)
    assert _status("t3-rows-cols-cost", m) == NOT_AT_SCALE


def test_the_default_order_holds_where_both_runs_agree():
    m = _measured(_table3(1.00, 1.01, col_half=1.05))
    assert m["t3.default.epoch_time_s"] == pytest.approx(1.005)
    assert _status("t3-rows-cols-cost", m) == REPRODUCED
    assert _status("t3-rows-cols-cost", _measured(_table3(1.10, 1.11, col_half=1.00))) == DIFFERS


def test_mutation_first_run_only_would_pass_the_order_the_run_cannot_tell(monkeypatch):
    """The rule broken (the default's time from its first run alone): the order reads *reproduced* on the
    measurement above, so the test of the rule goes red."""
    monkeypatch.setattr(sketchml_workload, "table3_epoch_time", lambda runs: runs[0]["summary"]["median_epoch_time_s"])
    assert _status("t3-rows-cols-cost", _measured(_table3(1.00, 1.03, col_half=1.035))) == REPRODUCED


def _fig8(dataset: str, density: float, key_bytes_sparse: float = 1.27, key_bytes: float = 1.25,
          sent: float = 14000.0) -> dict:
    rows = [{"ratio": 0.01, "density": density / 6, "key_bytes_per_key": key_bytes_sparse, "epoch_time_s": 3.0},
            {"ratio": 0.1, "density": density, "key_bytes_per_key": key_bytes, "epoch_time_s": 0.4}]
    return {"train-lr-sketchml": _run(0.3, dataset=dataset, density=density, key_bytes=key_bytes, sent=sent),
            "fig8-sweep": {"rows": rows, "dataset": {"name": dataset}}}


@pytest.mark.parametrize("dataset, flag", [("synthetic", 0.0), ("widedeep-reviews", 0.0), ("my-data.svm", 0.0),
                                           ("kddb.bz2", 1.0), ("kdd12", 1.0)])
def test_bytes_per_key_near_zero_density_need_ids_the_source_ordered(dataset, flag):
    m = _measured(_fig8(dataset, 0.076, key_bytes_sparse=1.87))
    assert m["fig8.source_ids"] == flag
    assert _status("fig8-key-bytes-sparse", m) == (DIFFERS if flag else NOT_AT_SCALE)
    assert _status("fig8-key-bytes-sparse", {**m, "fig8.key_bytes.sparse": 1.27}) == (REPRODUCED if flag else NOT_AT_SCALE)


def test_source_ids_are_the_specs_declaration_not_a_measurement():
    assert source_ordered_ids({"name": "kddb"}, ["kddb"]) == 1.0
    assert source_ordered_ids({"name": "widedeep-reviews"}, ["kddb"]) == 0.0
    assert source_ordered_ids(None, ["kddb"]) is None
    declared = sketchml_workload.workload().spec.workload["source_ordered_ids"]
    assert not {"synthetic", "widedeep-reviews", "widedeep-bio"} & set(declared)


def test_format_keys_is_the_density_where_a_groups_mean_gap_fits_a_byte():
    groups = sketchml_workload.workload().sketchml_groups()
    assert groups == 8
    assert format_keys(8 / 256, groups) == 1.0 and format_keys(0.03, groups) == 0.0 and format_keys(None, groups) is None


def test_the_compression_rate_is_one_consistency_check_on_any_data_at_the_papers_density():
    wl = sketchml_workload.workload()
    claims = {c.id: c for c in wl.spec.claims}
    assert "fig8-compression" not in claims  # no result claim repeats the format's arithmetic
    assert claims["fig8-compression-format"].kind == "consistency"
    for dataset in ("synthetic", "widedeep-reviews", "kddb.bz2"):
        # 12 B per pair over 1.25 B per key + 0.4 B per key of sketch cells, plus a small fixed table
        ok = _measured(_fig8(dataset, 0.1, sent=80000.0 / 7.0))
        assert ok["fig8.format_keys"] == 1.0 and _status("fig8-compression-format", ok) in (REPRODUCED, WITHIN)
        # raw 4-byte keys: 12 / (4 + 0.4) = 2.7x, out of the band
        assert _status("fig8-compression-format", _measured(_fig8(dataset, 0.1, sent=80000.0 / 2.7))) == DIFFERS
        # sparser than 8 / 256: the key bytes follow the data's ids, another regime than the paper's 10%
        assert _status("fig8-compression-format", _measured(_fig8(dataset, 0.02, sent=80000.0 / 2.7))) == NOT_AT_SCALE


def test_a_run_without_the_repeat_uses_its_one_run():
    results = _table3(1.0, 1.0, col_half=1.1)
    del results[T3_REPEAT]
    m = _measured(results)
    assert m["t3.default.epoch_time_s"] == 1.0 and "t3.default.repeat_epoch_time_s" not in m
    assert np.isfinite(m["t3.epoch_time_spread"])
