"""The simulated cluster's per-layer policy never observes a step whose gradients overflowed.

With ``non_finite="nan"`` (a loss scaler's training) a step where some worker's gradients hold NaN
or Inf is skipped: its buckets average to NaN and, as in the DDP hook, the policy does not see its
gradients, so a decision is never fed an overflowed step's errors.
"""

from __future__ import annotations

import torch

from gcbench.envs.simulated import SimulatedCluster

BAD_STEP = 2


class RecordingPolicy:
    """A policy that never decides and records the steps it observes, with their gradients' finiteness."""

    def __init__(self) -> None:
        self.observed: list[tuple[int, bool]] = []

    def due(self, step: int) -> bool:
        return False

    def observe(self, step: int, grads: dict[str, torch.Tensor]) -> None:
        self.observed.append((step, all(bool(torch.isfinite(g).all()) for g in grads.values())))


def test_the_policy_skips_the_overflowed_step_only() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    policy = RecordingPolicy()
    sim = SimulatedCluster(model, 2, "qsgd", {"levels": 15}, policy=policy, non_finite="nan")
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for step in range(5):
        def closure(w: int, step: int = step) -> torch.Tensor:
            loss = torch.nn.functional.cross_entropy(model(x[w * 8:(w + 1) * 8]), y[w * 8:(w + 1) * 8])
            if step == BAD_STEP and w == 1:
                loss = loss * float("inf")  # worker 1's gradients overflow on this step only
            return loss

        sim.backward(closure)
    assert sim.non_finite_steps == [BAD_STEP]
    assert [s for s, _ in policy.observed] == [0, 1, 3, 4]
    assert all(finite for _, finite in policy.observed)
