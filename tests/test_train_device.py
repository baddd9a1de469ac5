"""``gcbench train --device``: where the ranks run and with which backend; CPU runs unchanged.

CPU runs are checked here on every machine; the CUDA runs (``@pytest.mark.cuda``) need a GPU:
2 gloo ranks sharing one GPU with the overlap mode's per-bucket streams, and NCCL with one rank.
"""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.envs.launch import placement
from gcbench.commands.train import TrainConfig, train_main

QUIET = {"print_report": False}


@pytest.mark.parametrize(
    "device, nproc, backend, gpus, want",
    [
        ("cpu", 2, None, 0, ("gloo", ["cpu", "cpu"])),
        ("cuda", 1, None, 1, ("nccl", ["cuda:0"])),
        ("cuda", 2, None, 2, ("nccl", ["cuda:0", "cuda:1"])),
        ("cuda", 2, None, 1, ("gloo", ["cuda:0", "cuda:0"])),  # two ranks share the one GPU
        ("cuda:1", 2, None, 4, ("gloo", ["cuda:1", "cuda:1"])),  # a named GPU is shared
        ("cuda:1", 1, None, 4, ("nccl", ["cuda:1"])),
        ("cuda", 2, "gloo", 2, ("gloo", ["cuda:0", "cuda:0"])),
    ],
)
def test_placement_gives_one_rank_per_gpu_nccl_and_shared_gpus_gloo(device, nproc, backend, gpus, want):
    assert placement(device, nproc, backend, gpus=gpus) == want


@pytest.mark.parametrize(
    "device, nproc, backend, gpus, match",
    [("cpu", 2, "nccl", 0, "needs a CUDA device"), ("cuda", 2, "nccl", 1, "one GPU per rank"),
     ("cuda:0", 2, "nccl", 2, "one GPU per rank"), ("cuda", 1, "mpi", 1, "gloo or nccl"), ("tpu", 1, None, 0, "cpu, cuda")],
)
def test_placement_refuses_what_cannot_work(device, nproc, backend, gpus, match):
    with pytest.raises(ValueError, match=match):
        placement(device, nproc, backend, gpus=gpus)


def test_config_refuses_a_simulation_off_the_cpu_and_nccl_on_the_cpu():
    with pytest.raises(ValueError, match="simulated cluster runs on the CPU"):
        TrainConfig(simulate=True, device="cuda")
    with pytest.raises(ValueError, match="nccl backend needs a CUDA device"):
        TrainConfig(backend="nccl", device="cpu")
    with pytest.raises(ValueError, match="--overlap .* applies to real ranks"):  # refused, not ignored
        TrainConfig(simulate=True, overlap=True)


@pytest.mark.distributed
def test_cpu_device_and_automatic_backend_give_the_same_bits_as_the_api_defaults():
    kw = dict(codec_params={"ratio": 0.05}, error_feedback=True, **QUIET)
    defaults = train_main("topk", 2, 4, None, **kw)  # the API's defaults: cpu, gloo
    chosen = train_main("topk", 2, 4, None, device="cpu", backend=None, **kw)
    assert chosen["config"]["device"] == "cpu" and chosen["config"]["backend"] == "gloo"
    assert chosen["params_digest"] == defaults["params_digest"] and chosen["losses"] == defaults["losses"]
    assert "(cpu)" in chosen["measured"]["where"]
    sim = train_main("topk", 2, 4, None, simulate=True, device=None, **kw)  # a simulation stays on the CPU
    assert sim["params_digest"] == defaults["params_digest"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cli_cuda_without_a_gpu_is_a_usage_error():
    result = CliRunner().invoke(app, ["train", "--device", "cuda", "--steps", "1", "--profile", "none"])
    assert result.exit_code == 2
    assert "no CUDA device is available" in result.output


def test_cli_bad_device_is_a_usage_error():
    result = CliRunner().invoke(app, ["train", "--device", "gpu0", "--steps", "1", "--profile", "none"])
    assert result.exit_code == 2
    assert "cpu, cuda or cuda:N" in result.output


@pytest.mark.cuda
@pytest.mark.distributed
@pytest.mark.parametrize("codec, params", [("fp16", {}), ("topk", {"ratio": 0.05}), ("powersgd", {}), ("sketched-sgd", {})])
def test_two_gloo_ranks_share_one_gpu_with_overlap_and_stay_identical(codec, params):
    over = train_main(codec, 2, 3, None, codec_params=params, device="cuda:0", overlap=True, **QUIET)
    assert over["config"]["backend"] == "gloo" and "(cuda:0)" in over["measured"]["where"]
    assert over["replicas_identical"]
    sync = train_main(codec, 2, 3, None, codec_params=params, device="cuda:0", overlap=False, **QUIET)
    assert sync["params_digest"] == over["params_digest"]


@pytest.mark.cuda
@pytest.mark.distributed
def test_one_nccl_rank_trains_on_the_gpu():
    report = train_main("qsgd", 1, 3, None, device="cuda", backend=None, overlap=True, **QUIET)
    assert report["config"]["backend"] == "nccl" and "cuda" in report["measured"]["where"]
    assert all(torch.isfinite(torch.tensor(report["losses"])))


@pytest.mark.cuda
@pytest.mark.distributed
def test_mixed_precision_on_the_gpu_runs_a_loss_scaler():
    report = train_main("topk", 2, 3, None, codec_params={"ratio": 0.05}, device="cuda:0", overlap=True, amp=True, **QUIET)
    assert report["amp"]["autocast"] == "float16" and report["amp"]["loss_scaler"]
    assert report["replicas_identical"]
    assert all(torch.isfinite(torch.tensor(report["losses"])))
