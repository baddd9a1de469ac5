"""The Count Sketch guard of the Sketched-SGD reproduction (``reproductions/sketched_sgd/sketchcheck.py``):
the definition's bound on the share of estimates beyond ``2 ||x|| / sqrt(c)``, the share itself, and how
the workload turns each run's per-step shares into the guard's quantity."""

from __future__ import annotations

import math

import pytest
import torch
from gcbench.compressors import get
from gcbench.reproductions.sketched_sgd.sketchcheck import error_bound, error_share, row_error_probability
from gcbench.reproductions.sketched_sgd.workload import derive_translation, sketch_error_share


def test_the_bound_is_the_binomial_tail_of_a_quarter():
    assert row_error_probability() == 0.25
    assert error_bound(1) == 0.25
    assert error_bound(2) == pytest.approx(1 - 0.75**2)  # the lower of two rows: one row off is enough
    assert error_bound(3) == pytest.approx(3 * 0.25**2 * 0.75 + 0.25**3)
    assert error_bound(5) == pytest.approx(106 / 1024)  # 10 (1/4)^3 (3/4)^2 + 5 (1/4)^4 (3/4) + (1/4)^5
    assert all(error_bound(r + 2) < error_bound(r) for r in range(1, 12))  # more rows, a tighter median
    with pytest.raises(ValueError):
        error_bound(0)


def test_error_share_counts_the_estimates_beyond_the_width():
    x = torch.tensor([3.0, 4.0, 0.0, 0.0], dtype=torch.float64)  # ||x|| = 5; 4 columns: width 2 * 5 / 2 = 5
    est = torch.tensor([3.0, -1.5, 5.0, 0.0])  # errors 0, 5.5, 5, 0: one beyond the width (5 is not beyond)
    assert error_share(est, x, 4) == 0.25
    assert error_share(est, x, 1) == 0.0  # one column: width 10
    assert error_share(torch.zeros(0), torch.zeros(0), 4) == 0.0
    assert math.isnan(error_share(est, torch.tensor([1.0, float("inf"), 0.0, 0.0]), 4))
    with pytest.raises(ValueError):
        error_share(est, x[:3], 4)
    with pytest.raises(ValueError):
        error_share(est, x, 0)


@pytest.mark.parametrize("kind", ["gaussian", "heavy", "spiky"])
def test_a_real_count_sketch_stays_under_the_bound_and_a_narrower_table_does_not(kind):
    """The bound holds for any vector: over 20 hash seeds, gcbench's Count Sketch's mean share stays under it on
    Gaussian, heavy-tailed and few-spike vectors; a sketch of 4 columns judged at a configured 400 does not."""
    gen = torch.Generator().manual_seed(1)
    d = 20_000
    x = {"gaussian": torch.randn(d, generator=gen),
         "heavy": torch.randn(d, generator=gen) / torch.rand(d, generator=gen).clamp_min(1e-3),
         "spiky": torch.randn(d, generator=gen) * (torch.rand(d, generator=gen) < 0.01) * 100 + 0.01 * torch.randn(d, generator=gen)}[kind]
    shares = []
    for seed in range(20):
        codec = get("countsketch", rows=5, columns=400, seed=seed)
        shares.append(error_share(codec.sketch_of(codec.encode(x)).estimate(), x, 400))
    assert sum(shares) / len(shares) <= error_bound(5)
    narrow = get("countsketch", rows=5, columns=4, seed=0)
    assert error_share(narrow.sketch_of(narrow.encode(x)).estimate(), x, 400) > error_bound(5)


def _run(model: str, method: str, shares: list[float] | None, rows: int = 5) -> dict:
    run = {"model": model, "method": {"name": method, "kind": "sketched" if method.startswith("sketched") else "vanilla",
                                       "rows": rows},
           "bleu": 1.0, "test_loss": 1.0, "parameters": 10, "compressed_parameters": 10, "traffic": {"last_step_bytes_per_worker": 40.0}}
    if shares is not None:
        run["sketch_error_share"] = shares
    return run


def test_the_workload_averages_every_step_of_every_seed_and_takes_the_worst_run():
    assert sketch_error_share([{"sketch_error_share": [0.0, 0.2]}, {"sketch_error_share": [float("nan"), 0.1]}]) == pytest.approx(0.1)
    assert sketch_error_share([{"sketch_error_share": [0.1]}, {}]) is None  # a seed's cell without the list
    assert sketch_error_share([{"sketch_error_share": [float("nan")]}]) is None
    m = derive_translation({"t1-transformer-vanilla": _run("transformer", "vanilla", None),
                            "t1-transformer-sketched20": _run("transformer", "sketched20", [0.01, 0.03]),
                            "t1-lstm-sketched40": _run("lstm", "sketched40", [0.05])})
    assert m["t1.transformer.sketched20.sketch_error_share"] == pytest.approx(0.02)
    assert m["t1.lstm.sketched40.sketch_error_ratio"] == pytest.approx(0.05 / error_bound(5))
    assert m["t1.sketch_error_ratio"] == pytest.approx(0.05 / error_bound(5))
    partial = derive_translation({"t1-transformer-sketched20": _run("transformer", "sketched20", [0.01]),
                                  "t1-lstm-sketched40": _run("lstm", "sketched40", None)})
    assert "t1.sketch_error_ratio" not in partial  # the guard reads every Sketched-SGD run or none
