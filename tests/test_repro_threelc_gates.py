"""Mutation tests of the 3LC gates: each gated claim goes red when the method is broken and stays
green on the real method, at the smallest scale (smoke, a few steps per cell)."""

from __future__ import annotations

import json

import pytest
from gcbench.compressors.codecs.threelc.codec import ThreeLC
from gcbench.reproductions.framework.spec import load_spec
from gcbench.reproductions.threelc import SPEC_PATH
from gcbench.reproductions.threelc import train as train_mod

from gcbench.commands.reproduce import EXIT_GATE_FAILED, reproduce_main


pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
STEPS = 10  # per cell, 2 workers: the ordering is clear from the first steps (smoke, 100 steps: 33, 46, 64, 101x)


def run_smoke_traffic(out) -> tuple[int, dict[str, str]]:
    code = reproduce_main("3lc", scale="smoke", table="traffic", out_dir=out, epochs=STEPS, workers=2, progress=False, track=False)
    res = json.loads((out / "3lc" / "smoke" / "results.json").read_text())
    return code, {c["id"]: c["status"] for c in res["claims"]}


def test_gated_claims_are_the_ones_mutated_here():
    assert {c.id for c in load_spec(SPEC_PATH).claims if c.gate} == {"traffic-order-s"}


def test_gate_mutation_threelc_traffic_order_s(tmp_path, monkeypatch):
    """The sparsity multiplier applied backwards (each setting quantizes with 2.9 - s: s = 1.00 runs
    at 1.90 and s = 1.90 at 1.00) reverses the ordering in s: the gate goes red. The real method is green."""
    code, status = run_smoke_traffic(tmp_path / "real")
    assert status["traffic-order-s"] == "reproduced" and code == 0

    def reversed_multiplier(sparsity: float = 1.0) -> ThreeLC:
        return ThreeLC(sparsity=round(2.9 - float(sparsity), 6))

    monkeypatch.setattr(train_mod, "ThreeLC", reversed_multiplier)
    code, status = run_smoke_traffic(tmp_path / "broken")
    assert status["traffic-order-s"] == "differs" and code == EXIT_GATE_FAILED

    # The multiplier ignored (every setting quantizes at s = 1.00): every s sends the same bytes, a tie
    # that the strict order counts as differs.
    monkeypatch.setattr(train_mod, "ThreeLC", lambda sparsity=1.0: ThreeLC(sparsity=1.0))
    code, status = run_smoke_traffic(tmp_path / "ignored")
    assert status["traffic-order-s"] == "differs" and code == EXIT_GATE_FAILED
