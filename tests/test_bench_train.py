"""``gcbench bench-train``: the configurations it times, its report and files (a tiny run on 2 gloo ranks).

Step times are not asserted (no timed tests): only that every row was measured, that the ratios
are what the medians say, and that the files and the CLI's errors are right.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gcbench.bench.train import TARGETS, build_configs, run_bench_train, summarize, to_markdown
from gcbench.cli import app


def test_configs_pair_every_gcbench_codec_with_overlap_on_and_off():
    rows = build_configs(("topk",), cap_mb=25.0, psgd_cap_mb=512.0)
    labels = [r.label for r in rows]
    assert labels[0] == "ddp (no hook)" and len(set(labels)) == len(labels)
    for anchor in ("torch allreduce_hook", "torch fp16_compress_hook", "torch bf16_compress_hook",
                   "torch powerSGD_hook r1", "torch powerSGD_hook r4"):
        assert anchor in labels
    gc = [r for r in rows if r.kind == "gcbench"]
    assert {r.label.removesuffix(" overlap") for r in gc} == {
        "gcbench identity", "gcbench fp16", "gcbench bf16", "gcbench powersgd r1", "gcbench powersgd r4", "gcbench topk"}
    assert sum(r.overlap for r in gc) == sum(not r.overlap for r in gc)
    # the PowerSGD rows, torch's and gcbench's, share the one-bucket cap; the others DDP's
    assert {r.cap_mb for r in rows if "owerSGD" in r.label or "powersgd" in r.label} == {512.0}
    assert {r.cap_mb for r in rows if "owerSGD" not in r.label and "powersgd" not in r.label} == {25.0}
    assert all(r.error_feedback for r in gc if r.name == "powersgd")


def test_summary_ratios_come_from_the_medians():
    plan = {"models": ["mlp"], "batch": {"mlp": 4}}
    ranks = [{"mlp|ddp (no hook)": [1.0, 2.0, 3.0], "mlp|gcbench fp16": [4.0, 4.0, 4.0],
              "mlp|gcbench fp16 overlap": [2.0, 1.0, 2.0], "mlp|torch fp16_compress_hook": [2.0, 2.0, 2.0]},
             {"mlp|ddp (no hook)": [1.5, 1.0, 1.0], "mlp|gcbench fp16": [1.0, 1.0, 5.0],
              "mlp|gcbench fp16 overlap": [1.0, 1.0, 1.0], "mlp|torch fp16_compress_hook": [2.0, 2.0, 2.0]}]
    s = summarize(ranks, plan)
    rows = {r["label"]: r for r in s["rows"]}
    assert rows["ddp (no hook)"]["median_s"] == 2.0  # median of the slowest rank per step: 1.5, 2, 3
    assert rows["gcbench fp16"]["x_ddp"] == 2.0 and rows["gcbench fp16"]["overlap_gain"] == 2.0
    assert rows["ddp (no hook)"]["samples_per_s"] == 2 * 4 / 2.0
    t = {(x["row"], x["peer"]): x for x in s["targets"]}
    assert t[("gcbench fp16", "torch fp16_compress_hook")]["ratio"] == 2.0
    assert not t[("gcbench fp16", "torch fp16_compress_hook")]["met"]
    assert t[("gcbench fp16 overlap", "torch fp16_compress_hook")]["met"]  # 2.0 / 2.0 <= 1.05
    assert {m for m, _, _ in TARGETS} >= {"gcbench identity", "gcbench fp16"}


def test_sketched_sgd_is_judged_against_topk_in_the_same_overlap_mode():
    plan = {"models": ["resnet18"], "batch": {"resnet18": 8}}
    times = {"ddp (no hook)": 1.0, "gcbench topk": 2.0, "gcbench topk overlap": 1.0,
             "gcbench sketched-sgd": 3.9, "gcbench sketched-sgd overlap": 2.5}
    s = summarize([{f"resnet18|{k}": [v] for k, v in times.items()}], plan)
    t = {(x["row"], x["peer"]): x for x in s["targets"]}
    assert t[("gcbench sketched-sgd", "gcbench topk")]["ratio"] == 1.95 and t[("gcbench sketched-sgd", "gcbench topk")]["met"]
    over = t[("gcbench sketched-sgd overlap", "gcbench topk overlap")]
    assert over["ratio"] == 2.5 and not over["met"]


@pytest.mark.distributed
def test_a_tiny_run_measures_every_row_and_writes_its_files(tmp_path):
    report = run_bench_train(models=["mlp"], codecs=(), psgd_ranks=(1,), steps=1, warmup=2, rounds=1, quick=True,
                             progress=False, timeout_s=60)
    rows = report["rows"]
    assert len(rows) == len(build_configs((), psgd_ranks=(1,)))
    assert all(r["median_s"] > 0 and math.isfinite(r["x_ddp"]) for r in rows)
    assert [r["x_ddp"] for r in rows if r["label"] == "ddp (no hook)"] == [1.0]
    md = to_markdown(report)
    assert "gcbench identity overlap" in md and "torch powerSGD_hook r1" in md
    json.dumps(report)


def test_the_printed_table_keeps_every_number_whole_on_a_narrow_console(monkeypatch):
    import io

    from rich.console import Console

    from gcbench.bench import train

    report = {"models": ["mlp"], "batch_per_rank": {"mlp": 32}, "ranks": 2, "loadavg_after": "1.0",
              "rows": [{"model": "mlp", "label": "gcbench qsgd overlap (a long configuration name)", "median_s": 0.123456,
                        "x_ddp": 1234.5678, "samples_per_s": 98765.4321, "overlap_gain": 1.2345}],
              "targets": []}
    monkeypatch.setattr(train, "run_bench_train", lambda **kw: report)
    out = io.StringIO()
    train.bench_train_main(console=Console(file=out, width=40))
    text = out.getvalue()
    assert "\u2026" not in text
    for number in ("123.5", "1234.57", "98765.4", "1.23x"):
        assert number in text, number


def test_cli_refuses_bad_options_with_a_message(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["bench-train", "--model", "vgg"])
    assert res.exit_code == 2 and "unknown --model" in res.output
    res = runner.invoke(app, ["bench-train", "--codec", "nope"])
    assert res.exit_code == 2 and "UnknownCodecError: unknown codec 'nope'" in res.output
    res = runner.invoke(app, ["bench-train", "--json", str(tmp_path)])
    assert res.exit_code == 2 and "is a folder" in res.output
    res = runner.invoke(app, ["bench-train", "--help"])
    assert res.exit_code == 0 and "--overlap" not in res.output and "--quick" in res.output


@pytest.mark.parametrize("name", ["mlp", "resnet18"])
def test_every_model_builds_and_runs_a_step(name):
    import torch

    from gcbench.bench.train import MODELS, build_model

    assert name in MODELS
    model, shape = build_model(name, quick=True, seed=0)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 10)
    out.sum().backward()
