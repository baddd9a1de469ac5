"""The Sketched-SGD spec says what each number is: the whole-model compression rows' modelled download and the
ratio of the bytes really sent beside them, the sketch's own 20x / 40x in the result claims, the inferred
no-divergence value, and the byte checks that hold by construction (and fail when the bytes break)."""

from __future__ import annotations

from claim_verdicts import verdicts
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED
from gcbench.reproductions.sketched_sgd import load
from gcbench.reproductions.sketched_sgd.workload import derive_translation


def _claims():
    return {c.id: c for c in load().claims}


def test_the_papers_count_names_its_modelled_download_and_the_bytes_really_sent_stand_beside_it():
    spec = load()
    claims = _claims()
    for ref in ("t1.compression.sketched20", "t1.compression.sketched40", "t1.compression.lstm.sketched40"):
        note = spec.value(ref).note
        assert note.startswith("information: the whole model's ratio shown here is compared by no claim"), ref
        assert "modelled download" in note and "allreduce_compression" in note, ref
        assert not any(ref in c.paper for c in claims.values() if not c.id.startswith("sketch-ratio-")), ref
    assert "never sends" in spec.value("t1.compression.sketched20").note


def test_the_report_labels_the_papers_count_as_partly_modelled():
    from gcbench.reproductions.sketched_sgd.report import quantity_labels

    labels = quantity_labels()
    for m in ("sketched20", "sketched40"):
        label = labels[f"t1.transformer.{m}.compression"]
        assert "modelled" in label and "§5.3" in label and "measured compression" not in label
        assert "really sent" in labels[f"t1.transformer.{m}.allreduce_compression"]


def test_the_result_claims_say_whose_ratio_20x_and_40x_are():
    claims = _claims()
    for cid in ("heldout-parity-sketched20", "heldout-parity-sketched40", "heldout-parity-sketched20-vs-topk",
                "heldout-parity-sketched40-vs-topk", "sketched-no-divergence"):
        assert "sketch's own ratio" in claims[cid].text, cid


def test_no_divergence_is_worded_as_what_it_tests_and_its_paper_value_is_inferred():
    spec = load()
    c = _claims()["sketched-no-divergence"]
    assert "stays finite" in c.text and "NaN/Inf" in c.text and "inferred" in c.text
    v = spec.value("t1.sketched.diverged")
    assert v.value == 0 and "inferred" in v.note and "inferred" in v.source.column


def test_sketched_keeps_ratio_holds_by_construction_and_fails_when_messages_grow_with_workers():
    spec = load()
    c = _claims()["sketched-keeps-ratio"]
    assert c.kind == "consistency" and not c.gate and "by construction" in c.note
    q = c.quantities
    # the committed sweep: 11.17x at every W; a sketch that grew with W (half the ratio at W = 128) fails
    assert verdicts(spec, c.id, {q[0]: 11.17, q[1]: 11.17}, {q[0]: 5.6}) == [REPRODUCED, DIFFERS]


def test_local_topk_ceiling_is_the_upload_ratio_arithmetic_and_fails_without_the_dense_reply():
    spec = load()
    c = _claims()["local-topk-2x"]
    assert c.kind == "consistency" and not c.gate and "by construction" in c.note
    u = 11.07  # local top-k's upload-only ratio
    dense_reply = 2 / (1 + 1 / u)  # download = vanilla's dense payload
    no_reply = 2 * u  # a reply left uncounted
    q = c.quantities[0]
    assert verdicts(spec, c.id, {q: dense_reply, c.testable: 1.0}, {q: no_reply}) == [REPRODUCED, DIFFERS]


def test_the_papers_count_adds_a_download_of_k_values_the_bytes_really_sent_do_not():
    """compression: 2 x vanilla's d_c bytes over (sent less 1-D + 4 k); allreduce_compression: vanilla's bytes
    over what is sent (an all_reduce receives what it sends): no typed-in download."""
    van = {"model": "transformer", "method": {"name": "vanilla", "kind": "vanilla"}, "bleu": 1.0, "test_loss": 2.0,
           "parameters": 1000, "compressed_parameters": 1000, "dense_parameters": 0, "k": None,
           "traffic": {"last_step_bytes_per_worker": 4000.0}, "losses": [3.0]}
    sk = {**van, "method": {"name": "sketched20", "kind": "sketched"}, "compressed_parameters": 900, "dense_parameters": 100,
          "k": 10, "traffic": {"last_step_bytes_per_worker": 800.0},
          "calibration": {"P": 1, "columns": 10, "sketch_size": 50, "k": 10, "paper_compression": 20.0, "upload_compression": 10.0}}
    out = derive_translation({"t1-transformer-vanilla": van, "t1-transformer-sketched20": sk})
    assert out["t1.transformer.sketched20.allreduce_compression"] == 4000.0 / 800.0
    assert out["t1.transformer.sketched20.compression"] == 2 * 3600.0 / (800.0 - 400.0 + 40.0)


def test_bleu_noise_comes_from_every_seed_the_compared_mean_comes_from():
    """The BLEU claims compare the seed mean; their noise is that mean's spread: the mean of the seeds'
    half-widths, centred on the mean. Mutation: the first seed's interval alone (the rule before) gives
    a different spread when the seeds' intervals differ."""
    import math

    import pytest

    def cell(method, seed_bleus):
        kind = {"vanilla": "vanilla", "topk": "true_topk"}.get(method, "sketched")
        sparse = kind != "vanilla"
        return {f"t1-transformer-{method}{'-s1' * i}": {
            "model": "transformer", "method": {"name": method, "kind": kind}, "bleu": b, "bleu_ci": [b - h, b + h],
            "test_loss": 2.0, "parameters": 1000, "compressed_parameters": 900 if sparse else 1000,
            "dense_parameters": 100 if sparse else 0, "k": 1 if sparse else None,
            "traffic": {"last_step_bytes_per_worker": 4000.0}, "diverged_at": None, "losses": [3.0]}
            for i, (b, h) in enumerate(seed_bleus)}

    results = {**cell("vanilla", [(20.0, 0.2), (22.0, 1.0)]), **cell("topk", [(21.0, 0.4), (21.0, 0.4)])}
    out = derive_translation(results)
    assert out["t1.transformer.vanilla.bleu_mean"] == 21.0
    assert out["t1.transformer.vanilla.bleu_mean_half_width"] == pytest.approx(0.6)
    assert out["t1.transformer.bleu_noise"] == pytest.approx(math.hypot(0.6, 0.4) / 21.0)
    assert out["t1.transformer.topk.bleu_ratio_noise"] == pytest.approx(math.hypot(0.4, 0.6) / 21.0)
    first_seed_only = math.hypot(0.2, 0.4) / 21.0
    assert out["t1.transformer.bleu_noise"] != pytest.approx(first_seed_only)
    # a seed without its interval: no noise (the claims say not run)
    results["t1-transformer-topk-s1"]["bleu_ci"] = None
    assert "t1.transformer.bleu_noise" not in derive_translation(results)


def test_what_the_slides_do_not_hold_is_marked_as_from_the_papers_full_text():
    """§5.1 / §5.3 and the quotation on small P come from the paper's full text, not from the slides the
    package quotes: the spec says so where it cites them, and no test checks them against the slides."""
    from gcbench.reproductions.sketched_sgd import SPEC_PATH

    spec = load()
    assert "From the paper's full text (arXiv:1903.04488), not in the slides" in spec.source_text
    text = SPEC_PATH.read_text(encoding="utf-8")
    quote = text.index("tended to diverge")
    assert "not from the slides" in text[quote: quote + 200] and "full text" in text[quote - 400: quote]
