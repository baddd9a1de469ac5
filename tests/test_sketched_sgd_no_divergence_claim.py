"""The no-divergence claim says what it counts: its quantity counts the transformer's Sketched-SGD runs
(both ratios, every seed), so its text and its paper value's note name the transformer; the LSTM's runs are
counted apart, in a quantity the claim does not read."""

from __future__ import annotations

from gcbench.reproductions.sketched_sgd import load
from gcbench.reproductions.sketched_sgd.workload import derive_translation


def _run(model: str, method: str, diverged_at: int | None = None) -> dict:
    kind = {"vanilla": "vanilla", "sketched20": "sketched", "sketched40": "sketched"}[method]
    return {"model": model, "method": {"name": method, "kind": kind}, "bleu": 1.0, "test_loss": 2.0,
            "parameters": 1000, "diverged_at": diverged_at, "traffic": {"last_step_bytes_per_worker": 4000.0}}


def test_no_divergence_counts_and_names_the_transformers_runs_only():
    spec = load()
    claim = next(c for c in spec.claims if c.id == "sketched-no-divergence")
    assert list(claim.quantities) == ["t1.transformer.sketched_diverged"]
    assert claim.text.startswith("Transformer:") and "no transformer run" in claim.text
    assert "no run's" not in claim.text
    note = spec.value("t1.sketched.diverged").note
    assert "transformer's Sketched-SGD runs" in note and "t1.lstm.sketched_diverged" in note
    # an LSTM divergence is counted in the LSTM's quantity, not in the one the claim reads
    out = derive_translation({"t1-transformer-sketched20": _run("transformer", "sketched20"),
                              "t1-transformer-sketched40": _run("transformer", "sketched40"),
                              "t1-lstm-sketched40": _run("lstm", "sketched40", diverged_at=5)})
    assert out["t1.transformer.sketched_diverged"] == 0.0 and out["t1.lstm.sketched_diverged"] == 1.0
