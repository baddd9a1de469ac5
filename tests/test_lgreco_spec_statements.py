"""The L-GreCo reproduction's statements against what its code and runs give: the DDP buckets the cap gives, the
first decision's cost per codec and the modelled link times of the throughput orders (quantities derived from the
cells, cited by id, never typed into the spec), the ratio window's forced start, the seed pairing of
lgreco-over-cgx, what leaves the forced-share claims untested (the decision period), the warm-up's departure from
the paper's, the summed unsquared error, the calibration's testable flag, the Table 1 analogue's sentence, the
simulated-cluster check, and the docstrings that describe the cells, the LM, the throughput and the paper's data
set."""

from __future__ import annotations

import importlib
import json
import re
import statistics
from pathlib import Path

from types import SimpleNamespace

import pytest
from gcbench.commands.reproduce import EXIT_OK, reproduce_main
from gcbench.compressors.adaptive import dp
from gcbench.reproductions.framework.claims import fmt_num
from gcbench.reproductions.framework.runner import cell_store
from gcbench.reproductions.lgreco import LGreCoWorkload, calibration, load, lm, metrics, resnet
from gcbench.reproductions.lgreco.lm_scale import plan
from gcbench.reproductions.lgreco.settings import METHOD_IDS, LGreCoSettings

LGRECO = Path(__file__).resolve().parents[1] / "reproductions" / "lgreco"


def _spec_text() -> str:
    return (LGRECO / "spec.toml").read_text()


def _claim(cid: str):
    return next(c for c in load().claims if c.id == cid)


def test_bucket_text_reads_the_buckets_the_cap_gave():
    """The committed claims run's 1 MB cap gave 7 buckets, the first 2.08 MB (a bucket closes once it reaches the
    cap): the report says what the run's bytes give, not "at most" the cap."""
    from gcbench.reproductions.lgreco.lm_scale import bucket_text

    raw = [2.08e6, 1.05e6, 1.05e6, 1.05e6, 1.05e6, 1.05e6, 1.06e6]
    text = bucket_text(1.0, raw)
    assert "7 buckets of 1.05-2.08 MB" in text and "cap 1.0 MB" in text and "at most" not in text
    assert "1 bucket of 0.50 MB" in bucket_text(1.0, [5e5])
    assert bucket_text(1.0, []) == "DDP bucket cap 1.0 MB"


def test_the_spec_gives_the_buckets_the_cap_gives():
    text = _spec_text()
    assert "DDP buckets of at most 1 MB" not in text and "~9 buckets for this model" not in text
    assert "7 buckets, not 9" in text and "2.08 MB" in text
    assert "buckets of at most" not in (LGRECO / "lm_scale.py").read_text()


#: A measured number typed into prose: a decimal with a unit of time or a factor ("2.4 ms", "0.15 s", "1.3x").
TYPED = re.compile(r"\b\d+\.\d+(?:-\d+\.\d+)? ?(?:ms|s|x)\b")


def test_the_first_decisions_cost_is_cited_by_its_quantity_not_typed():
    notes = {c: _claim(f"overhead-below-1pct{s}").note for c, s in (("powersgd", ""), ("qsgd", "-qsgd"), ("topk", "-topk"))}
    for codec, note in notes.items():
        assert f"t1.{codec}.first_over_later.s0" in note and "committed run's cells" not in note
        assert not TYPED.findall(note.split("the paper's")[0].replace("0.56%", "")), note


def test_first_over_later_is_the_first_decisions_seconds_over_the_mean_of_the_later_ones():
    run = {"step_s": [0.1] * 10, "decisions": [{"tables_s": 0.9, "accumulate_s": 0.1, "dp_s": 0.15, "broadcast_s": 0.05},
                                                 {"tables_s": 0.2, "dp_s": 0.1}, {"tables_s": 0.3, "dp_s": 0.1}]}
    assert metrics.overhead(run)["first_over_later"] == pytest.approx(1.2 / 0.35)
    assert "first_over_later" not in metrics.overhead({**run, "decisions": run["decisions"][:1]})


THROUGHPUT_ORDERS = ("tput-uniform-below-lgreco-powersgd-single", "tput-uniform-below-lgreco-powersgd-multi",
                     "tput-uniform-below-lgreco-qsgd-single", "tput-uniform-below-lgreco-topk-single")


@pytest.mark.parametrize("cid", THROUGHPUT_ORDERS)
def test_the_modelled_throughput_orders_cite_the_derived_link_times_not_typed_ones(cid):
    reason = _claim(cid).scale_reason
    assert "a few milliseconds" not in reason and "hidden behind it" not in reason
    assert "per-message latency adds the same to both" in reason
    for qid in ("<prefix>.uniform.link_ms_single", "lm.<codec>.link_saved_ms_single", "lm.<codec>.compute_diff_ms",
                "<prefix>.uniform.overlap_ms_single"):
        assert qid in reason
    assert not re.findall(r"\d ms\b", reason), reason
    block = _spec_text().split("# Table 4's throughput ordering", 1)[1].split("[[claims]]", 1)[0]
    assert not re.findall(r"\d ms\b", block) and "a few milliseconds at most" not in _spec_text()
    assert "a few milliseconds at most" not in (LGRECO / "README.md").read_text()


def test_the_link_quantities_are_the_cells_medians_and_the_report_shows_them(tmp_path):
    """On a micro-lm run: each derived link time, compute and overlapped step is the seed mean of the median step
    after the warm-up of the metric's per-step values, the saved link time is uniform's minus L-GreCo's, and the
    report's table shows them."""
    assert reproduce_main("lgreco", scale="micro-lm", out_dir=tmp_path, resume=False, progress=False, track=False) == EXIT_OK
    out = tmp_path / "lgreco" / "micro-lm"
    m = json.loads((out / "results.json").read_text())["measured"]
    spec = load()
    ctx = SimpleNamespace(spec=spec, scale="micro-lm", preset=spec.scales["micro-lm"], options={"device": "cpu"}, cache={})
    wl = LGreCoWorkload(ctx.spec)
    store = cell_store(out, wl)
    cells = {c.name: store.load(c) for c in plan(wl, ctx)}
    warm = ctx.preset["warmup"]
    for method in ("uniform", "lgreco"):
        runs = [cells[f"lm-powersgd-s{s}"][method] for s in ctx.preset["seeds"]]
        want = {"link_ms_single": [metrics.link_steps(r, "lgreco-single-node") for r in runs],
                "link_ms_multi": [metrics.link_steps(r, "lgreco-multi-node") for r in runs],
                "compute_ms": [metrics.compute_steps(r) for r in runs],
                "overlap_ms_single": [metrics.overlapped_steps(r, "lgreco-single-node") for r in runs]}
        for key, per in want.items():
            value = statistics.fmean(1e3 * statistics.median(x[warm + 1:]) for x in per)
            assert m[f"t4.{METHOD_IDS[method]}.{key}"] == pytest.approx(value, rel=1e-12)
            assert value > 0
    for cluster in ("single", "multi"):
        assert m[f"lm.powersgd.link_saved_ms_{cluster}"] == pytest.approx(
            m[f"t4.uniform.link_ms_{cluster}"] - m[f"t4.lgreco.link_ms_{cluster}"])
    assert m["lm.powersgd.compute_diff_ms"] == pytest.approx(m["t4.lgreco.compute_ms"] - m["t4.uniform.compute_ms"])
    assert m["t1.powersgd.first_over_later.s0"] is None  # one decision in 8 steps (step 5): no later one to compare
    report = (out / "report.md").read_text()
    assert "Throughput orders: modelled link time beside measured compute (information)" in report
    assert fmt_num(m["t4.uniform.link_ms_single"]) in report


def test_the_ratio_window_is_not_said_to_hold_only_the_methods_choices():
    text = _spec_text()
    assert "(the settings the methods chose)" not in text
    assert "the first 50 steps are the\n# schedule's uniform start" in text


def test_final_metric_mlperf_says_it_is_evaluated_at_the_micro_scales():
    claim = _claim("final-metric-mlperf")
    assert {"micro", "micro-resnet"} <= set(claim.scales)
    text = _spec_text()
    assert "nor at the micro scales" not in text and "Evaluated at the micro scales" in text


def test_sim_check_is_described_as_the_image_scales_parameter_digest():
    text = _spec_text()
    assert "every run's sim.equals_real" not in text and "decisions\n# included" not in text
    assert "each image scale's sim.equals_real" in text
    report = (LGRECO / "report.py").read_text()
    assert "identical parameters and choices" not in report and "identical final parameters (digests)" in report
    doc = importlib.import_module("gcbench.reproductions.lgreco.workload").__doc__ or ""
    assert "(W = 2)" not in doc and "the scale's first codec" in doc and "digits model once per method" not in doc


def test_last_choice_statement_is_limited_to_the_lm_tables():
    text = _spec_text()
    assert "the reports' last-choice\n# columns give" not in text
    assert "LM tables'\n# last-choice columns (lm_scale.last_choice)" in text


def test_lgreco_over_cgx_compares_the_runs_of_one_seed():
    claim = _claim("lgreco-over-cgx")
    assert list(claim.quantities) == ["t4.cgx.ratio", "t4.lgreco.ratio.s0"]
    assert "compares the runs of one seed" in claim.note
    assert "seed 0's (these comparators run on the first seed only)" in _claim("adaptive-ordering").note


@pytest.mark.parametrize("cid", ["adaptive-ordering", "tput-calibrated-single", "tput-calibrated-multi"])
def test_the_forced_share_claims_name_the_decision_period_as_what_leaves_them_untested(cid):
    reason = _claim(cid).testable_reason
    assert "about a thousand steps" not in reason
    assert "decision period of 8 steps or less" in reason and "1,117 steps or more" in reason
    assert "not a proportion from the paper" in reason or "not proportions from the paper" in reason


def test_the_forced_share_conditions_the_reasons_give_hold():
    """The reasons' numbers follow from the configuration: 8 steps is the longest period within the paper's share in
    200 steps, 1,117 the fewest steps at a period of 50."""
    bound = LGreCoSettings(load()).paper_critical_share()
    share = metrics.accordion_forced_share
    assert share(200, 5, 8, 5) <= bound < share(200, 5, 9, 5)
    assert share(1117, 5, 50, 5) <= bound < share(1116, 5, 50, 5)


def test_the_warm_up_is_described_as_delaying_the_decisions_not_compression():
    text = _spec_text()
    assert "our 5 steps, already outside the window" not in text and "Sec. 5.1: the\n#   warm-up equals it" not in text
    assert "compresses from step 0" in text and "no start step" in text
    readme = (LGRECO / "README.md").read_text()
    limits = readme.split("## Limitations", 1)[1]
    assert "compresses from step 0" in limits and "learning-rate warm-up" in limits
    assert "smoke decides every 25 steps after a 25-step warm-up" in text
    assert "resnet every 25 after 25 in 200" in text and "full every 50 after 50 in 600" in text
    assert "this package's choices" in text and "Table 6, ResNet-50/ImageNet" in text and "Table 5" in text


def test_the_summed_error_is_the_layers_unsquared_norms():
    assert "not their squares" in (dp.__doc__ or "") and "Appendix B.1" in dp.__doc__
    assert "sum of its layers' L2 norms, not of their squares" in _spec_text()


def test_the_overhead_claims_name_the_image_analogue_of_table_1():
    for cid in ("overhead-below-1pct", "overhead-below-1pct-qsgd", "overhead-below-1pct-topk"):
        reason = _claim(cid).scale_reason
        assert "every few dozen steps" not in reason and "ResNet-50/ImageNet column" in reason


def test_calibration_docstring_says_the_fits_pricing_decides_testability():
    doc = calibration.__doc__ or ""
    assert "does not decide whether a claim" not in doc and "calibrated_testable" in doc
    assert ":func:`predict`" not in doc and "Calibration.tokens_per_s" in doc
    assert not hasattr(calibration, "predict")


def test_table_1_sentence_reads_the_measured_shares():
    """The sentence states each codec's measured share beside Transformer-XL's and says above or below as the numbers
    do, never "far larger" whatever they are."""
    from gcbench.reproductions.lgreco.report import epoch_share_text, paper_value

    text = epoch_share_text(17_000, "digits MLP", 150, {"powersgd": 0.031, "qsgd": 0.001, "topk": None},
                            {"powersgd": 0.0056, "qsgd": 0.0014, "topk": 0.0038})
    assert "trains for 150 steps" in text
    assert "powersgd 3.10%, above Transformer-XL's 0.56%" in text
    assert "qsgd 0.10%, below Transformer-XL's 0.14%" in text and "topk not measured" in text
    assert "far larger" not in text and "far larger" not in (LGRECO / "report.py").read_text()
    spec = load()
    assert paper_value(spec, "t1.qsgd.txl") == 0.0014 and paper_value(spec, "t1.nothing.txl") is None


def test_docstrings_describe_the_throughput_the_lm_and_the_papers_data_set():
    assert (metrics.throughput.__doc__ or "").startswith("Samples/s") and "median step" in metrics.throughput.__doc__
    doc = lm.__doc__ or ""
    assert "This is the\nsmallest honest stand-in" not in doc and "``tlm``" in doc and "WikiText-103 where it is given or found" in doc
    rdoc = resnet.__doc__ or ""
    assert "CIFAR-100 images" in rdoc and "CIFAR-10 images" not in rdoc
