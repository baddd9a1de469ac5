"""The L-GreCo claims scale: its configuration (a spec test), the calibrated throughput model
(recovers known parameters from synthetic rows), the Transformer LM's shapes and device handling,
and a micro run of the language-model path on 2 gloo ranks."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from gcbench.compressors.adaptive.ladders import ladder_around
from gcbench.reproductions.lgreco import LGreCoWorkload, load
from gcbench.reproductions.lgreco.calibration import PRICED_SHARE, BucketBytes, fit, modelled_step_s
from gcbench.reproductions.lgreco.lm import build_lm
from gcbench.reproductions.lgreco.lm_scale import cell_config, codec_params, methods_of, plan

from gcbench.commands.reproduce import EXIT_OK, reproduce_main


def _ctx(scale: str, **options):
    spec = load()
    return SimpleNamespace(spec=spec, scale=scale, preset=spec.scales[scale], options={"device": "cpu", **options}, cache={})


def test_claims_scale_is_the_papers_task_in_miniature():
    spec = load()
    p = spec.scales["claims"]
    wl = LGreCoWorkload(spec)
    ctx = _ctx("claims")
    # a Transformer LM with d_model 256 and a few million parameters, 2 gloo ranks
    assert p["model"] == "tlm" and p["tlm"]["d_model"] == 256 and p["workers"] == 2
    n = sum(q.numel() for q in build_lm(0, p["tlm"]["vocab"], **{k: v for k, v in p["tlm"].items() if k != "vocab"}).parameters())
    assert 1_000_000 < n < 10_000_000
    # PowerSGD rank 8 with L-GreCo's range [4, 16]; QSGD 4 bits in [2, 8]; TopK 1% in [0.1%, 10%]
    ladders = {name: ladder_around(wl.codecs[name]["codec"], codec_params(wl, ctx, name)) for name in p["codecs"]}
    assert ladders["powersgd"].default == 8 and (ladders["powersgd"].values[0], ladders["powersgd"].values[-1]) == (4, 16)
    assert ladders["qsgd"].axis_values[0] == 2 and ladders["qsgd"].axis_values[-1] == 8
    assert math.isclose(ladders["topk"].values[0], 0.001) and math.isclose(ladders["topk"].values[-1], 0.1)
    # uncompressed / uniform / L-GreCo x 2 seeds, comparators on PowerSGD seed 0 for the calibration
    assert p["seeds"] == [0, 1] and p["methods"] == ["uniform", "lgreco"]
    cells = {c.name: c for c in plan(wl, ctx)}
    assert set(cells) == {f"lm-{x}-s{s}" for x in ("uncompressed", "powersgd", "qsgd", "topk") for s in (0, 1)}
    assert cells["lm-powersgd-s0"].config["methods"] == ["uniform", "lgreco", "accordion", "cgx", "lgreco+accordion"]
    assert cells["lm-qsgd-s1"].config["methods"] == ["uniform", "lgreco"] == methods_of(ctx, "topk", 0)
    assert set(p["calibration"]["fit"]) == {"uniform", "accordion"}
    # every claim the claims scale measures is a result that can come out either way, none gated
    assert not [c.id for c in spec.claims if c.gate]


def test_device_is_in_the_cell_keys_only_off_the_cpu():
    wl = LGreCoWorkload(load())
    assert "device" not in cell_config(wl, _ctx("claims"))
    assert cell_config(wl, _ctx("claims", device="cuda:0"))["device"] == "cuda:0"
    assert "device" not in wl.lm_config(_ctx("smoke"), wl.run_config(_ctx("smoke")))
    assert wl.lm_config(_ctx("smoke", device="cuda"), wl.run_config(_ctx("smoke")))["device"] == "cuda"


def test_tiny_lm_default_is_the_one_layer_model_and_layers_stack():
    one = build_lm(0, 50)
    assert any(k.startswith("block.") for k in one.state_dict()) and not hasattr(one, "blocks")
    two = build_lm(0, 50, d_model=32, layers=2, heads=2, ff=64)
    assert {k.split(".")[1] for k in two.state_dict() if k.startswith("blocks.")} == {"0", "1"}
    x = torch.randint(0, 50, (2, 32))
    assert two(x).shape == (2, 32, 50)
    with pytest.raises(ValueError):
        build_lm(0, 50, d_model=30, heads=4)


def _rows() -> dict[str, BucketBytes]:
    raw = (4e6, 3e6, 2e6, 1e6)
    return {"uniform": BucketBytes(raw, (4e5, 3e5, 2e5, 1e5), 0.0),
            "accordion": BucketBytes(raw, (1e5, 1e5, 2e5, 1e5), 100.0),
            "lgreco": BucketBytes(raw, (2e5, 1e5, 5e4, 5e4), 100.0)}


def test_calibration_recovers_known_compute_and_bandwidth():
    rows = _rows()
    true_c, true_bw = 6e-6, 4e10  # communication partly exposed in both fitted rows
    target = {m: 1.0 / modelled_step_s(true_c, true_bw, b) for m, b in rows.items()}
    cal = fit(rows, target, ["uniform", "accordion"])
    assert cal.compute_s == pytest.approx(true_c, rel=1e-4) and cal.bandwidth == pytest.approx(true_bw, rel=1e-4)
    assert max(abs(r) for r in cal.residuals) < 1e-8
    assert cal.tokens_per_s(rows["lgreco"]) == pytest.approx(target["lgreco"], rel=1e-6)  # the predicted row
    # a third row over-determines the fit: least squares, still exact on consistent rows
    cal3 = fit(rows, target, ["uniform", "accordion", "lgreco"])
    assert cal3.compute_s == pytest.approx(true_c, rel=1e-4)
    with pytest.raises(ValueError):
        fit(rows, target, ["uniform"])
    with pytest.raises(ValueError):
        fit(rows, {**target, "accordion": 0.0}, ["uniform", "accordion"])


def test_a_fit_whose_rows_contradict_their_bytes_prices_communication_at_zero():
    rows = _rows()
    # consistent rows: accordion sends fewer bytes and is faster; the fit prices communication
    true_c, true_bw = 6e-6, 4e10
    target = {m: 1.0 / modelled_step_s(true_c, true_bw, b) for m, b in rows.items()}
    cal = fit(rows, target, ["uniform", "accordion"])
    assert cal.exposed_comm_share(rows["uniform"]) > 0.1 and cal.prices_communication(rows["uniform"])
    # contradicting rows: accordion sends fewer bytes in every bucket yet is slower in the "paper"; no
    # bandwidth helps, so least squares prices communication at zero
    raw = rows["uniform"].raw
    rows = {**rows, "accordion": BucketBytes(raw, (2e5, 2e5, 1e5, 5e4), 0.0)}
    contra = {**target, "accordion": target["uniform"] * 0.97}
    cal0 = fit(rows, contra, ["uniform", "accordion"])
    assert cal0.exposed_comm_share(rows["uniform"]) < PRICED_SHARE and not cal0.prices_communication(rows["uniform"])
    ratio = cal0.tokens_per_s(rows["lgreco"]) / cal0.tokens_per_s(rows["uniform"])
    assert ratio == pytest.approx(1.0, abs=PRICED_SHARE)  # a modelled ratio of 1 by construction


@pytest.mark.slow
def test_micro_run_of_the_language_model_path_on_two_gloo_ranks(tmp_path):
    code = reproduce_main("lgreco", scale="micro-lm", out_dir=tmp_path, resume=False, progress=False, track=False)
    out = tmp_path / "lgreco" / "micro-lm"
    report = (out / "report.md").read_text()
    assert code == EXIT_OK, report
    m = json.loads((out / "results.json").read_text())["measured"]
    for mid in ("uniform", "lgreco", "accordion", "cgx", "lgreco_accordion"):
        assert m[f"t4.{mid}.ratio"] > 1 and m[f"cal.single.{mid}"] > 0 and m[f"cal.multi.{mid}"] > 0
    assert m["cal.single.priced"] in (0.0, 1.0) and m["cal.multi.priced"] in (0.0, 1.0)
    assert m["ppl.powersgd.lgreco"] > 1 and m["ppl.uncompressed"] > 1 and m["dp.max_error_over_budget"] <= 1.0
    assert 0 < m["t1.powersgd.txl"] < 1 and m["dp.powersgd.s_per_decision"] >= 0
    assert "calibrated throughput model" in report and "*modelled*" in report
    assert (out / "plots" / "lm_ratio_and_bucket_bytes.png").is_file()
