"""The L-GreCo reproduction's statements against what its code and the committed run give: the DDP buckets the
cap gives, the first decision's cost per codec, the modelled link times of the throughput orders, the ratio
window's forced start, the seed pairing of lgreco-over-cgx, the calibration's testable flag, the Table 1
analogue's sentence, the simulated-cluster check, and the docstrings that describe the cells, the LM, the
throughput and the paper's data set."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from gcbench.reproductions.lgreco import calibration, load, lm, metrics, resnet

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


def test_the_first_decisions_cost_is_given_per_codec():
    """Only TopK's first decision took several times the later ones' (its cost tables); PowerSGD's and QSGD's errors
    are measured again at every decision, so their first decision is about as long as the others."""
    notes = {c: _claim(f"overhead-below-1pct{s}").note for c, s in (("powersgd", ""), ("qsgd", "-qsgd"), ("topk", "-topk"))}
    assert all("several times longer" not in n for n in notes.values())
    assert "about 1.3x" in notes["powersgd"] and "0.96x to 1.12x" in notes["qsgd"] and "3.9x and 4.4x" in notes["topk"]


THROUGHPUT_ORDERS = ("tput-uniform-below-lgreco-powersgd-single", "tput-uniform-below-lgreco-powersgd-multi",
                     "tput-uniform-below-lgreco-qsgd-single", "tput-uniform-below-lgreco-topk-single")


@pytest.mark.parametrize("cid", THROUGHPUT_ORDERS)
def test_the_modelled_throughput_orders_bound_the_difference_of_link_times_not_the_link_time(cid):
    reason = _claim(cid).scale_reason
    assert "a few milliseconds" not in reason and "hidden behind it" not in reason
    assert "per-message latency adds the same to both" in reason and "21.6 ms" in reason
    assert "a few milliseconds at most" not in _spec_text()
    assert "a few milliseconds at most" not in (LGRECO / "README.md").read_text()


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


def test_lgreco_over_cgx_says_lgreco_is_the_seed_mean_against_cgxs_seed_0():
    assert "mean of seeds 0 and 1" in _claim("lgreco-over-cgx").note and "t4.lgreco.ratio.s0" in _claim("lgreco-over-cgx").note
    assert "seed 0's (these comparators run on the first seed only)" in _claim("adaptive-ordering").note


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
