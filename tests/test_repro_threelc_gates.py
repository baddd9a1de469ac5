"""Mutation tests of the 3LC gates: each gated claim goes red when the method is broken and stays
green on the real method, at the smallest scale (smoke, a few steps per cell, as CI runs it)."""

from __future__ import annotations

import json

import pytest
from gcbench.compressors.codecs.threelc.codec import ThreeLC
from gcbench.reproductions.framework.spec import load_spec
from gcbench.reproductions.threelc import SPEC_PATH
from gcbench.reproductions.threelc import train as train_mod

from gcbench.commands.reproduce import EXIT_GATE_FAILED, reproduce_main


pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
# CI's gate run: the smoke traffic table (32-bit and every 3LC setting) at 30 steps a cell, 2 workers.
# The ordering in s shows from the first steps (smoke, 100 steps: 33, 46, 64, 101x); trains-s1.00 needs
# enough steps for 32-bit's held-out loss to fall clearly, so that a 3LC without error accumulation
# stands apart from a working one (on Fashion-MNIST and on the digits fallback alike).
STEPS = 30
SHORT_STEPS = 10  # mutations whose effect is total (s reversed or ignored, nothing decoded) show in any run


def run_smoke_traffic(out, steps: int = STEPS) -> tuple[int, dict[str, str], dict[str, float]]:
    code = reproduce_main("3lc", scale="smoke", table="traffic", out_dir=out, epochs=steps, workers=2, progress=False, track=False)
    res = json.loads((out / "3lc" / "smoke" / "results.json").read_text())
    return code, {c["id"]: c["status"] for c in res["claims"]}, res["measured"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """CI's gate run on the real method."""
    return run_smoke_traffic(tmp_path_factory.mktemp("real"))


def test_gated_claims_are_the_ones_mutated_here():
    assert {c.id for c in load_spec(SPEC_PATH).claims if c.gate} == {"traffic-order-s", "trains-s1.00"}


def test_real_method_passes_every_gate(real_run):
    code, status, m = real_run
    assert code == 0 and status["traffic-order-s"] == "reproduced" and status["trains-s1.00"] == "reproduced"
    assert 0 <= m["train.excess_loss.s1.00"] <= 0.5


def test_gate_mutation_threelc_traffic_order_s(real_run, tmp_path, monkeypatch):
    """The sparsity multiplier applied backwards (each setting quantizes with 2.9 - s: s = 1.00 runs
    at 1.90 and s = 1.90 at 1.00) reverses the ordering in s: the gate goes red. The real method is
    green (``real_run``)."""
    code, status, _ = real_run
    assert status["traffic-order-s"] == "reproduced" and code == 0

    def reversed_multiplier(sparsity: float = 1.0) -> ThreeLC:
        return ThreeLC(sparsity=round(2.9 - float(sparsity), 6))

    monkeypatch.setattr(train_mod, "ThreeLC", reversed_multiplier)
    code, status, _ = run_smoke_traffic(tmp_path / "broken", SHORT_STEPS)
    assert status["traffic-order-s"] == "differs" and code == EXIT_GATE_FAILED

    # The multiplier ignored (every setting quantizes at s = 1.00): every s sends the same bytes, a tie
    # that the strict order counts as differs.
    monkeypatch.setattr(train_mod, "ThreeLC", lambda sparsity=1.0: ThreeLC(sparsity=1.0))
    code, status, _ = run_smoke_traffic(tmp_path / "ignored", SHORT_STEPS)
    assert status["traffic-order-s"] == "differs" and code == EXIT_GATE_FAILED


def test_gate_mutation_threelc_trains_s1_00(real_run, tmp_path, monkeypatch):
    """3LC's decoder returning zeros (every worker and the server receive nothing): the model does not
    train, trains-s1.00 goes red, while the ordering in s still holds (a larger s zeroes more values
    whatever the gradients): the ordering alone cannot see it. Without error accumulation (the residual
    dropped before every encode, push and pull) the small gradient components are never sent and the
    server's model falls far behind 32-bit's: red too. The real method is green (``real_run``)."""
    code, status, m = real_run
    assert code == 0 and status["trains-s1.00"] == "reproduced"

    real_decode = ThreeLC.decode

    def zero_decode(self, payload, **kwargs):
        return real_decode(self, payload, **kwargs).zero_()

    with monkeypatch.context() as mp:
        mp.setattr(ThreeLC, "decode", zero_decode)
        code, status, m = run_smoke_traffic(tmp_path / "zero-decode", SHORT_STEPS)
    assert status["trains-s1.00"] == "differs" and code == EXIT_GATE_FAILED
    # no progress: near the initial weights' loss (weight decay shrinks the weights a little), beyond the bound
    assert m["train.excess_loss.s1.00"] > 0.75
    assert status["traffic-order-s"] == "reproduced"

    class WithoutErrorAccumulation(train_mod.StageRecordingEF):
        def encode(self, tensor, **kwargs):
            self.memory.clear()
            return super().encode(tensor, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(train_mod, "StageRecordingEF", WithoutErrorAccumulation)
        code, status, m = run_smoke_traffic(tmp_path / "no-error-accumulation")
    assert status["trains-s1.00"] == "differs" and code == EXIT_GATE_FAILED
