"""The 3LC trainer's first evaluation: the initial weights scored with batch-norm statistics of their
own activations (compressors aside, the start the training check trains-s1.00 measures progress from),
not batch norm's defaults, which make a deep ResNet's initial loss absurd and the check unfailable."""

from __future__ import annotations

import math

import torch

from gcbench.reproductions.threelc.model import build_resnet, with_batch_statistics
from gcbench.reproductions.threelc.train import MethodSpec, TrainConfig, batch_indices, evaluate, train
from gcbench.reproductions.threelc.workload import excess_loss


def noise(n: int, side: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 1, side, side, generator=torch.Generator().manual_seed(seed))


def test_the_copy_holds_the_batches_statistics_and_the_model_is_unchanged():
    model = build_resnet(8, 4, 1, seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    xs = [noise(16, 8, 1), noise(16, 8, 2)]
    net = with_batch_statistics(model, xs)
    assert not net.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # untouched
    # the stem's batch norm: the mean and unbiased variance of its convolution's output, each batch's
    # averaged over the batches (a cumulative average)
    with torch.no_grad():
        acts = [model.conv(x) for x in xs]
    means = torch.stack([a.mean((0, 2, 3)) for a in acts]).mean(0)
    variances = torch.stack([a.var((0, 2, 3), unbiased=True) for a in acts]).mean(0)
    assert torch.allclose(net.bn.running_mean, means, atol=1e-5)
    assert torch.allclose(net.bn.running_var, variances, rtol=1e-4)
    assert torch.equal(model.bn.running_var, torch.ones_like(model.bn.running_var))


def test_a_deep_resnets_start_is_its_own_and_the_training_check_can_fail_there():
    """ResNet-110 (width 4, 8x8 noise): with batch norm's defaults the initial held-out loss is in the
    thousands, and a run stuck at its initial weights would be a share near 0 of 32-bit's fall (the
    0.5 bound passed); from the start with its own statistics, it is 1 (the bound goes red)."""
    model = build_resnet(110, 4, 1, seed=0)
    x, y = noise(200, 8, 5), torch.randint(0, 10, (200,), generator=torch.Generator().manual_seed(6))
    default = evaluate(model, x, y)[0]
    own = evaluate(with_batch_statistics(model, [noise(32, 8, k) for k in range(4)]), x, y)[0]
    assert default > 100 and own < 3 * math.log(10)
    trained = 1.2  # a 32-bit run's final held-out loss

    def run(first: float, last: float) -> dict:
        return {"evals": [{"test_loss": first}, {"test_loss": last}]}

    assert excess_loss(run(default, own), run(default, trained)) < 0.5  # the defaults: a stuck run passes
    assert excess_loss(run(own, own), run(own, trained)) == 1.0  # its own statistics: it fails


def test_the_trainer_records_the_initial_weights_with_their_own_statistics(tiny_data):
    cfg = TrainConfig(depth=8, width=2, workers=2, batch_per_worker=8, steps=2, eval_every=2, stage_check_every=2)
    r = train(tiny_data, cfg, MethodSpec("32bit", "32-bit", "identity", pull="fp32", kind="baseline"))
    model = build_resnet(8, 2, 1, seed=cfg.seed)
    n = tiny_data.x_train.shape[0]
    first = [tiny_data.x_train[batch_indices(0, w, cfg, n)] for w in range(cfg.workers)]
    want = evaluate(with_batch_statistics(model, first), tiny_data.x_test, tiny_data.y_test)
    assert (r["evals"][0]["test_loss"], r["evals"][0]["test_acc"]) == want
    assert want[0] != evaluate(model, tiny_data.x_test, tiny_data.y_test)[0]  # the defaults score otherwise
