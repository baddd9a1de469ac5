"""``train_main``: real runs over the launcher, failures, checkpoints and resume, torchrun, the report.

Every real run is 2 gloo ranks on localhost training the digits MLP for a few steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from gcbench.commands.train_checkpoints import CheckpointError
from gcbench.envs.errors import WorkerFailedError
from gcbench.envs.network import comm_time, load_profile
from gcbench.envs.traffic import TrafficLog

from gcbench.commands.train import train_main
from gcbench.commands.train_report import format_report
from gcbench.workloads.training import batch_indices

pytestmark = pytest.mark.distributed

QUIET = {"print_report": False}


def test_killed_rank_gives_a_clear_error_quickly():
    t0 = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        train_main("fp16", 2, 6, None, fault="kill:1:2", timeout_s=60, **QUIET)
    elapsed = time.monotonic() - t0
    err = info.value
    assert err.reason == "died" and err.ranks == (1,)
    assert "rank 1 died (killed by SIGKILL)" in str(err)
    # detected from the process exit, not from the collective timeout (60 s); the margin absorbs
    # rank start-up on a loaded 2-core machine
    assert elapsed < 30


def test_hung_rank_is_named_within_the_timeout():
    timeout = 3.0
    t0 = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        train_main("topk", 2, 6, None, codec_params={"ratio": 0.1}, fault="hang:1:2", timeout_s=timeout, **QUIET)
    elapsed = time.monotonic() - t0
    err = info.value
    assert err.reason == "hung" and err.ranks == (1,), str(err)
    assert "rank(s) [1] hung" in str(err)
    assert elapsed < timeout + 8  # gloo's timeout, plus start-up and teardown


def test_raising_rank_is_reported_with_its_error():
    with pytest.raises(WorkerFailedError) as info:
        train_main("identity", 2, 4, None, fault="raise:0:1", timeout_s=10, **QUIET)
    assert info.value.reason == "raised" and info.value.ranks == (0,)
    assert "fault injected on rank 0 at step 1" in str(info.value)


@pytest.mark.parametrize("codec,params", [("powersgd", {"rank": 2}), ("qsgd", {})])
def test_resume_from_checkpoint_is_bit_exact(tmp_path, codec, params):
    # error feedback + momentum + (PowerSGD warm start | QSGD's per-tensor random generators): all
    # of it must be restored for the resumed run to equal the uninterrupted one
    kw = dict(codec_params=params, error_feedback=True, bucket_cap_mb=0.001, **QUIET)
    straight = train_main(codec, 2, 6, None, **kw)
    ck = tmp_path / "ck"
    first = train_main(codec, 2, 3, None, checkpoint_dir=str(ck), checkpoint_every=3, **kw)
    assert (ck / "latest").read_text() == "step00000003"
    assert first["params_digest"] != straight["params_digest"]
    resumed = train_main(codec, 2, 6, None, checkpoint_dir=str(ck), resume=True, **kw)
    assert resumed["resumed_from"] == 3
    assert resumed["params_digest"] == straight["params_digest"]
    assert resumed["losses"] == straight["losses"]
    # traffic of the steps before the checkpoint travels with it
    assert resumed["bytes"]["steps"] == 6 and resumed["bytes"]["message_bytes"] == straight["bytes"]["message_bytes"]


@pytest.mark.parametrize("adaptive", ["lgreco", "lgreco+accordion"])
def test_adaptive_resume_inside_an_accumulation_window_is_bit_exact(tmp_path, adaptive):
    # decisions at steps 4 and 7; the checkpoint after step 4 holds step 4's gradients in rank 0's
    # accumulation buffer (and, with Accordion, the norms of the period before): without them the
    # resumed run's decision at step 7 would see other gradients
    # TopK's fine density ladder (100 settings) makes the choice sensitive to the buffered gradients
    kw = dict(codec_params={"ratio": 0.05}, error_feedback=True, bucket_cap_mb=0.001, adaptive=adaptive,
              adaptive_every=3, adaptive_warmup=1, **QUIET)
    straight = train_main("topk", 2, 9, None, **kw)
    ck = tmp_path / "ck"
    train_main("topk", 2, 5, None, checkpoint_dir=str(ck), checkpoint_every=5, **kw)
    saved = torch.load(ck / "step00000005" / "rank0.pt", weights_only=False)["hook"]
    assert saved["policy"]["buffer"] and saved["policy"]["buffered_steps"] == 1
    assert [d["step"] for d in saved["decisions"]] == [4]
    resumed = train_main("topk", 2, 9, None, checkpoint_dir=str(ck), resume=True, **kw)
    assert resumed["resumed_from"] == 5
    assert [d["step"] for d in straight["adaptive"]["decisions"]] == [4, 7]
    assert resumed["adaptive"]["decisions"] == straight["adaptive"]["decisions"]
    assert resumed["params_digest"] == straight["params_digest"] and resumed["losses"] == straight["losses"]
    text = format_report(resumed)
    assert "resumed from the checkpoint of step 5" in text and "decisions at steps 4, 7" in text
    with pytest.raises(CheckpointError, match="other settings"):  # another decision period
        train_main("topk", 2, 9, None, checkpoint_dir=str(ck), resume=True, **{**kw, "adaptive_every": 4})


def test_resume_refuses_other_settings(tmp_path):
    ck = tmp_path / "ck"
    train_main("fp16", 2, 2, None, checkpoint_dir=str(ck), checkpoint_every=2, **QUIET)
    with pytest.raises(CheckpointError, match="other settings"):
        train_main("bf16", 2, 4, None, checkpoint_dir=str(ck), resume=True, **QUIET)


def test_mixed_precision_on_the_cpu_trains_reports_and_resumes_bit_exactly(tmp_path):
    # bfloat16 autocast on the CPU (no loss scaler there: bfloat16 has float32's range)
    kw = dict(codec_params={"ratio": 0.05}, error_feedback=True, bucket_cap_mb=0.001, amp=True, **QUIET)
    straight = train_main("topk", 2, 6, None, **kw)
    assert straight["amp"] == {"autocast": "bfloat16", "loss_scaler": False, "skipped_steps": [], "final_scale": None}
    assert straight["replicas_identical"]
    assert straight["params_digest"] != train_main("topk", 2, 6, None, **{**kw, "amp": False})["params_digest"]
    assert "mixed precision: bfloat16 autocast, no loss scaler" in format_report(straight)
    ck = tmp_path / "ck"
    train_main("topk", 2, 3, None, checkpoint_dir=str(ck), checkpoint_every=3, **kw)
    resumed = train_main("topk", 2, 6, None, checkpoint_dir=str(ck), resume=True, **kw)
    assert resumed["params_digest"] == straight["params_digest"] and resumed["losses"] == straight["losses"]
    with pytest.raises(CheckpointError, match="other settings"):  # a full-precision run does not resume it
        train_main("topk", 2, 6, None, checkpoint_dir=str(ck), resume=True, **{**kw, "amp": False})


def test_mixed_precision_is_for_real_ranks():
    with pytest.raises(ValueError, match="real ranks"):
        train_main("topk", 2, 2, None, amp=True, simulate=True, **QUIET)


def test_simulated_run_equals_real_run_and_report_is_labelled(tmp_path):
    kw = dict(codec_params={"ratio": 0.05}, error_feedback=True, **QUIET)
    out = tmp_path / "report.json"
    real = train_main("topk", 2, 5, "sketchml-cluster1", out_json=str(out), **kw)
    sim = train_main("topk", 2, 5, "sketchml-cluster1", simulate=True, **kw)
    assert real["replicas_identical"]
    assert sim["params_digest"] == real["params_digest"]
    assert sim["losses"] == real["losses"]
    assert sim["bytes"]["message_bytes"] == real["bytes"]["message_bytes"]
    report = json.loads(out.read_text())
    # bytes counted, seconds measured, communication modelled: labelled and apart
    assert report["measured"]["kind"] == "measured" and report["modelled"]["kind"] == "modelled"
    assert report["modelled"]["profile"]["name"] == "sketchml-cluster1"
    assert report["measured"]["encode_s_per_worker_step"] > 0 and report["measured"]["comm_s_per_worker_step"] > 0
    assert sim["measured"]["comm_s_per_worker_step"] is None  # nothing crossed a wire in the simulation
    # the modelled time is the alpha-beta model of the counted bytes (recomputed here)
    log = TrafficLog.from_dict(report["traffic"])
    assert report["modelled"]["comm"]["total_s"] == pytest.approx(comm_time(log, load_profile("sketchml-cluster1")).total_s)
    assert report["bytes"]["compression_ratio"] > 5  # top-5% of 17k values, plus sizes and headers
    text = format_report(report)
    assert "modelled communication [sketchml-cluster1" in text and "measured seconds" in text


def test_batches_partition_each_global_batch():
    # the ranks' slices of one step are disjoint and together one global batch of the permutation
    idx = [batch_indices(5, r, 3, 16, seed=1) for r in range(3)]
    flat = sorted(int(i) for t in idx for i in t)
    assert len(set(flat)) == 48 and all(len(t) == 16 for t in idx)
    assert [int(i) for i in batch_indices(5, 0, 3, 16, seed=1)] == [int(i) for i in idx[0]]


def test_a_finished_torchrun_rank_ends_without_finalization_and_nothing_else_does():
    """A torchrun rank that finished exits at once with 0 after flushing its output (Gloo's threads can
    otherwise abort the process at finalization, see ``end_torchrun_rank``); outside torchrun, or simulated,
    the call returns."""
    code = ("import sys; from gcbench.commands.train import end_torchrun_rank; print('report', end=''); "
            "sys.stderr.write('note'); end_torchrun_rank(simulate=len(sys.argv) > 1); print(' returned'); sys.exit(3)")
    torchrun = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    plain = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    ended = subprocess.run([sys.executable, "-c", code], env=torchrun, capture_output=True, text=True, timeout=60)
    assert (ended.returncode, ended.stdout, ended.stderr) == (0, "report", "note")  # flushed, then nothing more ran
    for env, argv in ((plain, []), (torchrun, ["simulate"])):
        went_on = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=60)
        assert (went_on.returncode, went_on.stdout) == (3, "report returned\n")


@pytest.mark.slow
def test_torchrun_two_gloo_ranks_match_the_launcher(tmp_path):
    out = tmp_path / "torchrun.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gcbench.commands.train",
           "--codec", "qsgd", "--steps", "3", "--profile", "lgreco-multi-node", "--out-json", str(out)]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "real" and report["world_size"] == 2 and report["replicas_identical"]
    launched = train_main("qsgd", 2, 3, None, **QUIET)
    assert report["params_digest"] == launched["params_digest"]
