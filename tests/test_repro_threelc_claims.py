"""The 3LC claims scale: framed byte counts, the traffic cells at another model size, padding and
the training subset, and the modelled communication/time quantities."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from gcbench.compressors.codecs.threelc.codec import ThreeLC
from gcbench.envs.network import load_profile, server_time
from gcbench.reproductions.threelc import workload
from gcbench.reproductions.threelc.train import MethodSpec, PreparedData, StageRecordingEF, StageSink, TrainConfig, train
from gcbench.reproductions.threelc.settings import traffic_preset
from gcbench.reproductions.threelc.workload import framed_quantities

from gcbench.commands.reproduce import EXIT_USAGE, reproduce_main


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_sink_counts_self_describing_bytes_per_receiver():
    """The sink counts each payload's self-describing size once per receiver (1 for a push, W for a
    pull), per step; the framed bytes are attached from the transport's log."""
    totals = {}
    for copies in (1, 3):
        g = torch.Generator().manual_seed(0)
        sink = StageSink(1.0, copies=copies)
        codecs = {k: StageRecordingEF(ThreeLC(sparsity=1.0), sink) for k in ("a", "b")}
        for _ in range(3):
            for key, codec in codecs.items():
                codec.encode(torch.randn(500, generator=g) * 1e-2, key=key)
            sink.verify()
        sink.attach_framed([30, 20, 10])
        d = sink.as_dict()
        assert len(d["payload_per_step"]) == 3 and sum(d["payload_per_step"]) == d["bytes"]["payload"]
        assert d["bytes"]["framed"] == 60 and d["framed_per_step"] == [30, 20, 10]
        totals[copies] = d["bytes"]["payload"]
    assert totals[3] == 3 * totals[1]  # same payloads (same seed), three receivers


@pytest.fixture(scope="module")
def tiny_run():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (96,), generator=g)
    data = PreparedData(x, y, x[:32], y[:32], {"name": "noise"})
    cfg = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=8, eval_every=4, stage_check_every=4)
    return cfg, train(data, cfg, MethodSpec("3lc-s1.00", "3LC", "3lc", {"sparsity": 1.0}, kind="3lc"))


def test_framed_quantities_follow_the_bytes(tiny_run):
    cfg, r = tiny_run
    st, s = r["stages"], r["summary"]
    framed = st["push"]["bytes"]["framed"] + st["pull"]["bytes"]["framed"]
    self_describing = st["push"]["bytes"]["payload"] + st["pull"]["bytes"]["payload"]
    assert framed == s["total_bytes"]  # what the transport sent, framed
    assert 0 < framed < self_describing  # the framing saves bytes even with its first full headers
    for side in ("push", "pull"):
        per = st[side]["framed_per_step"]
        assert len(per) == cfg.steps and per[0] > max(per[1:])  # the first step carries the headers
        assert all(f < p for f, p in zip(per[1:], st[side]["payload_per_step"][1:]))
    q = framed_quantities(r, "1.00", cfg.profiles)
    link = load_profile(cfg.profiles[0]).link
    fp32_phase = s["baseline_fp32_bytes"] / s["steps"] / 2
    comm = sum(server_time(a, link) + server_time(b, link)
               for a, b in zip(st["push"]["framed_per_step"], st["pull"]["framed_per_step"]))
    assert q[f"comm.reduction.{cfg.profiles[0]}.s1.00"] == pytest.approx(cfg.steps * 2 * server_time(fp32_phase, link) / comm)
    # the settle measure compares the last two quarters of the steps (2 steps each here)
    per = [a + b for a, b in zip(st["push"]["framed_per_step"], st["pull"]["framed_per_step"])]
    assert q["traffic.settle.s1.00"] == pytest.approx(abs(sum(per[4:6]) / sum(per[6:8]) - 1))
    # steady state: the steps from settled_from on (no settled_from: the whole run, = the total reduction)
    assert q["traffic.reduction_settled.s1.00"] == pytest.approx(s["traffic_reduction"])
    late = framed_quantities(r, "1.00", cfg.profiles, settled_from=4)
    assert late["traffic.reduction_settled.s1.00"] == pytest.approx(s["baseline_fp32_bytes"] / cfg.steps * 4 / sum(per[4:]))
    # a given compute time replaces the measured one: a huge compute makes the modelled speed-up -> 1
    slow = framed_quantities(r, "1.00", cfg.profiles, compute_s=1e6)
    assert slow[f"time.reduction_modelled.{cfg.profiles[0]}.s1.00"] == pytest.approx(1.0, abs=1e-3)
    assert all(len(r[k]) == cfg.steps for k in ("compute_step_s", "measured_step_s"))
    assert all(c <= m for c, m in zip(r["compute_step_s"], r["measured_step_s"]))


def test_claims_scale_plans_resnet110_traffic_cells():
    wl = workload()
    preset = wl.spec.scale("claims")
    tp = traffic_preset(preset)
    assert tp is not None and tp["depth"] == 110 and tp["image_size"] == 32 and traffic_preset(wl.spec.scale("smoke")) is None
    ctx = SimpleNamespace(options={"dataset": "fashion-mnist"}, preset=preset, tables=["traffic", "accuracy"], scale="claims")
    cells = wl.plan(ctx, {})
    names = [c.name for c in cells]
    assert [n for n in names if n.startswith("traffic-")] == [f"traffic-3lc-s{s}" for s in ("1.00", "1.50", "1.75", "1.90")]
    assert [n for n in names if n.startswith("train-")] == [f"train-{m}" for m in preset["methods"]]
    assert "train-local-2" not in names and len(preset["methods"]) == len(wl.order) - 1  # every method the issue names
    assert names[0] == "warmup" and all(next(c for c in cells if c.name == f"traffic-3lc-s{s}").config["start"]["name"] == "warmup"
                                        for s in ("1.00", "1.50", "1.75", "1.90"))
    t = next(c for c in cells if c.name == "traffic-3lc-s1.00").config
    a = next(c for c in cells if c.name == "train-3lc-s1.00").config
    assert t["train"]["depth"] == 110 and a["train"]["depth"] == 20 and t["eval_limit"] == 500
    assert a["train_subset"] == t["train_subset"] == 4096
    only = wl.plan(SimpleNamespace(**{**ctx.__dict__, "tables": ["traffic"]}), {})
    assert [c.name for c in only] == ["warmup"] + [f"traffic-3lc-s{s}" for s in ("1.00", "1.50", "1.75", "1.90")]


def test_padding_and_training_subset():
    wl = workload()
    ctx = SimpleNamespace(cache={})
    d = wl.data(ctx, "digits", 16, 50, False, 300)  # 8x8 digits zero-padded to 16x16
    assert d.x_train.shape[1:] == (1, 16, 16) and d.x_train.shape[0] == 300 and d.y_train.shape[0] == 300
    assert "zero padding" in d.summary["resized"] and d.summary["train_images"] == 300
    # the padded border holds the normalised value of a black pixel everywhere
    border = d.x_train[:, :, :4, :]
    assert torch.allclose(border, border.flatten()[0].expand_as(border))
    again = wl.data(SimpleNamespace(cache={}), "digits", 16, 50, False, 300)
    assert torch.equal(again.y_train, d.y_train)  # a fixed subset


def test_compute_seconds_per_step_is_validated(tmp_path):
    assert reproduce_main("3lc", scale="smoke", out_dir=tmp_path, compute_seconds_per_step=0.0, progress=False,
                          track=False) == EXIT_USAGE


def test_micro_claims_scale_end_to_end(tmp_path, monkeypatch):
    """The claims scale's report path with its traffic cells, shrunk: digits padded to 32x32, 2 steps,
    the traffic cells at ResNet-8 (ResNet-110 is the real scale's, too slow for CI)."""
    import json

    import importlib

    wl_mod = importlib.import_module("gcbench.reproductions.threelc.settings")

    real = wl_mod.traffic_preset

    def small(preset):
        tp = real(preset)
        return None if tp is None else {**tp, "depth": 8, "width": 4, "eval_samples": 32, "shared_warmup": 2}

    monkeypatch.setattr(wl_mod, "traffic_preset", small)
    monkeypatch.setattr(importlib.import_module("gcbench.reproductions.threelc.workload"), "traffic_preset", small)
    monkeypatch.setenv("WANDB_MODE", "offline")
    code = reproduce_main("3lc", scale="claims", table="traffic", out_dir=tmp_path, dataset="digits", epochs=3, workers=2,
                          progress=False, track=False, compute_seconds_per_step=0.5)
    run = tmp_path / "3lc" / "claims"
    res = json.loads((run / "results.json").read_text())
    assert code == 0
    cells = res["cells"]["results"]
    assert sorted(cells) == [f"traffic-3lc-s{s}" for s in ("1.00", "1.50", "1.75", "1.90")] + ["warmup"]  # no training cell
    m = res["measured"]
    for s in ("1.00", "1.50", "1.75", "1.90"):
        assert m[f"traffic.reduction.s{s}"] > m[f"traffic.reduction_self_describing.s{s}"] > 1
        assert m[f"comm.reduction.threelc-1gbps.s{s}"] > 1
    md = (run / "report.md").read_text()
    assert "Communication and modelled time" in md and "0.5 s per step, as given" in md and "zero padding" in md
    status = {c["id"]: c["status"] for c in res["claims"]}
    assert status["traffic-s1.00"] != "not run" and status["time-1gbps-framed"] != "not run"
    assert status["comm-1gbps"] != "not run"
    assert status["accuracy-s1.00"] == "not run"


def test_settled_at_finds_where_the_windows_stop_moving():
    from gcbench.reproductions.threelc.settle import settled_at, window_reductions

    fp32 = 1000.0
    # reductions per 2-step window: 100, 50, 21, 20, 20, 20 -> within 10% of the last from window 2 (step 4)
    sent = [10, 10, 20, 20, 47, 48, 50, 50, 50, 50, 50, 50]
    red = window_reductions(fp32, sent, 2)
    assert [round(x) for x in red] == [100, 50, 21, 20, 20, 20]
    assert settled_at(fp32, sent, window=2, tolerance=0.1) == 4
    assert settled_at(fp32, sent[:4], window=2) is None  # two windows: too short to tell
    assert settled_at(fp32, [10, 10, 20, 20, 40, 40], window=2) is None  # still moving at the end
