"""The claims scale's shared warm-up: branches continue the warm-up's run exactly, start from identical
weights, are recomputed bit-exactly after an interruption, and the settle verdict can say "not settled"."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from gcbench.commands.reproduce import reproduce_main
from gcbench.reproductions.threelc.branch import file_sha256, load_state, save_state, settle_verdict
from gcbench.reproductions.threelc.train import MethodSpec, TrainConfig, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

S = ("1.00", "1.50", "1.75", "1.90")


def _cfg(steps: int) -> TrainConfig:
    return TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=steps, lr=0.05, schedule="constant",
                       eval_every=steps, stage_check_every=2)


THREE = MethodSpec("3lc-s1.00", "3LC", "3lc", {"sparsity": 1.0}, kind="3lc")
FP32 = MethodSpec("32bit", "32-bit", "identity", pull="fp32", kind="baseline")


def test_a_branch_continues_the_warmup_run_exactly(tiny_data, tmp_path):
    """4 warm-up steps + a 4-step branch = one 8-step run (uncompressed: nothing but the models and the
    optimizer carries over), through the checkpoint file."""
    whole = train(tiny_data, _cfg(8), FP32)
    warm = train(tiny_data, _cfg(4), FP32, keep_state=True)
    path = tmp_path / "warm.pt"
    sha = save_state(warm["state"], path)
    assert sha == file_sha256(path) and load_state(path, "0" * 64) is None and load_state(tmp_path / "none.pt", sha) is None
    state = load_state(path, sha)
    assert state is not None and state.step == 4
    branch = train(tiny_data, _cfg(4), FP32, start=state)
    assert warm["train_loss"] + branch["train_loss"] == whole["train_loss"]
    assert branch["evals"][-1]["test_loss"] == whole["evals"][-1]["test_loss"]
    with pytest.raises(ValueError, match="every-step"):
        train(tiny_data, _cfg(4), MethodSpec("local-2", "2 local", "identity", pull="fp32", local_steps=2), keep_state=True)


def test_warm_memories_make_a_3lc_branch_continue_the_3lc_warmup_exactly(tiny_data, tmp_path):
    """With the error-accumulation memories carried over (through the checkpoint file), a 3LC warm-up +
    a 3LC branch at the same s trains exactly like one run; with empty memories it does not."""
    whole = train(tiny_data, _cfg(8), THREE)
    warm = train(tiny_data, _cfg(4), THREE, keep_state=True)
    assert len(warm["state"].memories["workers"]) == 2 and warm["state"].memories["server"]
    path = tmp_path / "warm.pt"
    state = load_state(path, save_state(warm["state"], path))
    warmed = train(tiny_data, _cfg(4), THREE, start=state, warm_memories=True)
    assert warm["train_loss"] + warmed["train_loss"] == whole["train_loss"]
    empty = train(tiny_data, _cfg(4), THREE, start=state)
    assert empty["train_loss"][0] == warmed["train_loss"][0] and empty["train_loss"][1:] != warmed["train_loss"][1:]


def test_branches_start_from_identical_weights_and_repeat_bit_exactly(tiny_data):
    warm = train(tiny_data, _cfg(4), THREE, keep_state=True)
    state = warm["state"]
    runs = {s: train(tiny_data, _cfg(4), MethodSpec(f"3lc-s{s}", "3LC", "3lc", {"sparsity": float(s)}, kind="3lc"), start=state)
            for s in ("1.00", "1.90")}
    # both branches evaluate the same weights before their first step
    assert runs["1.00"]["evals"][0]["test_loss"] == runs["1.90"]["evals"][0]["test_loss"]
    assert runs["1.00"]["stages"]["push"]["framed_per_step"] != runs["1.90"]["stages"]["push"]["framed_per_step"]
    again = train(tiny_data, _cfg(4), THREE, start=state)  # the branch recomputed after an interruption
    for k in ("train_loss",):
        assert again[k] == runs["1.00"][k]
    for side in ("push", "pull"):
        assert again["stages"][side]["framed_per_step"] == runs["1.00"]["stages"][side]["framed_per_step"]
    # the state is not consumed by a branch (each branch gets the same start)
    assert torch.equal(next(iter(state.server.values())), next(iter(warm["state"].server.values())))


def test_settle_verdict_says_not_settled_for_a_drifting_series():
    fp32 = 1000.0
    flat = [10] * 40  # 100x in every window
    v = settle_verdict(fp32, flat, window=10, settled_from=20, tolerance=0.15)
    assert v["settled"] and v["settled_at"] == 0 and [round(x) for x in v["windows"]] == [100, 100, 100, 100]
    drifting = [10] * 10 + [12] * 10 + [15] * 10 + [20] * 10  # 100, 83, 67, 50x: still falling
    v = settle_verdict(fp32, drifting, window=10, settled_from=20, tolerance=0.15)
    assert not v["settled"] and v["settled_at"] is None
    late = [30] * 20 + [11] * 10 + [10] * 10  # settles only from step 20: settled when the steady state starts there
    assert settle_verdict(fp32, late, window=10, settled_from=20, tolerance=0.15)["settled"]
    assert not settle_verdict(fp32, late, window=10, settled_from=10, tolerance=0.15)["settled"]
    assert not settle_verdict(fp32, flat[:20], window=10, settled_from=10, tolerance=0.15)["settled"]  # too short to tell


def test_micro_claims_traffic_warmup_once_and_resume(tmp_path, monkeypatch):
    """The claims scale's traffic table, shrunk (ResNet-8, digits, 2-step warm-up, 3-step branches): the
    warm-up cell is computed once and every branch starts from its checkpoint; a lost branch is
    recomputed bit-exactly; a lost checkpoint makes the warm-up run again."""
    settings = importlib.import_module("gcbench.reproductions.threelc.settings")
    real = settings.traffic_preset

    def small(preset):
        tp = real(preset)
        return None if tp is None else {**tp, "depth": 8, "width": 4, "eval_samples": 32, "shared_warmup": 2,
                                        "settled_from": 1, "settle_window": 1, "branch_memories": "warm"}

    for mod in ("settings", "workload", "report"):
        monkeypatch.setattr(importlib.import_module(f"gcbench.reproductions.threelc.{mod}"), "traffic_preset", small)
    kw = {"scale": "claims", "table": "traffic", "out_dir": tmp_path, "dataset": "digits", "epochs": 3, "workers": 2,
          "progress": False, "track": False}
    assert reproduce_main("3lc", **kw) == 0
    run = tmp_path / "3lc" / "claims"
    res = json.loads((run / "results.json").read_text())
    cells = res["cells"]["results"]
    assert sorted(cells) == sorted(["warmup"] + [f"traffic-3lc-s{s}" for s in S]) and res["cells"]["computed"] == 5
    warm = cells["warmup"]
    assert warm["checkpoint"]["step"] == 2 and file_sha256(run / warm["checkpoint"]["file"]) == warm["checkpoint"]["sha256"]
    first_loss = {cells[f"traffic-3lc-s{s}"]["evals"][0]["test_loss"] for s in S}
    assert len(first_loss) == 1  # identical weights at every branch's start
    assert all(cells[f"traffic-3lc-s{s}"]["branched_from"] == {"cell": "warmup", "step": 2, "memories": "warm"} for s in S)
    for s in S:
        assert res["measured"][f"traffic.settled.s{s}"] in (0.0, 1.0)
    md = (run / "report.md").read_text()
    assert "shared 2-step warm-up" in md and "settle verdict" in md

    # a branch lost mid-run: only it is recomputed, bit-exactly; the warm-up comes from the cache
    next((run / "cells").glob("traffic-3lc-s1.50-*.json")).unlink()
    assert reproduce_main("3lc", **kw) == 0
    res2 = json.loads((run / "results.json").read_text())
    assert res2["cells"]["computed"] == 1 and res2["cells"]["cached"] == 4
    b1, b2 = cells["traffic-3lc-s1.50"], res2["cells"]["results"]["traffic-3lc-s1.50"]
    assert b1["train_loss"] == b2["train_loss"] and b1["stages"]["push"]["framed_per_step"] == b2["stages"]["push"]["framed_per_step"]

    # the checkpoint file lost (or altered): the warm-up is computed again and the branch still matches
    (run / warm["checkpoint"]["file"]).write_bytes(b"not a checkpoint")
    next((run / "cells").glob("traffic-3lc-s1.90-*.json")).unlink()
    assert reproduce_main("3lc", **kw) == 0
    res3 = json.loads((run / "results.json").read_text())
    assert file_sha256(run / warm["checkpoint"]["file"]) == warm["checkpoint"]["sha256"]  # rewritten, same bytes
    assert res3["cells"]["results"]["traffic-3lc-s1.90"]["train_loss"] == cells["traffic-3lc-s1.90"]["train_loss"]
