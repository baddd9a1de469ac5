"""The Count Sketch guard of the Sketched-SGD reproduction (``reproductions/sketched_sgd/sketchcheck.py``):
the definition's bound on the share of estimates beyond ``2 ||x|| / sqrt(c)``, the share itself, and how
the workload turns each run's per-step shares into the guard's quantity."""

from __future__ import annotations

import math

import pytest
import torch
from gcbench.compressors import get
from gcbench.reproductions.sketched_sgd.sketchcheck import (HASH_WIDTHS, error_bound, error_share, hash_false_alarm,
                                                            hash_statistics, large_errors, row_error_probability,
                                                            sketch_code_blocks)
from gcbench.reproductions.sketched_sgd.workload import derive_translation, sketch_error_share, sketch_large_error_share


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


def test_a_nan_estimate_is_beyond_any_width():
    x = torch.tensor([3.0, 4.0, 0.0, 0.0], dtype=torch.float64)
    assert error_share(torch.tensor([3.0, float("nan"), 0.0, 0.0]), x, 4) == 0.25
    assert large_errors(torch.full((4,), float("nan")), x, 100) == (2, 2)


def test_large_errors_count_the_misses_among_the_coordinates_beyond_the_width():
    x = torch.tensor([3.0, 4.0, 0.1, 0.0], dtype=torch.float64)  # ||x|| ~ 5; 100 columns: width ~ 1
    assert large_errors(x.float(), x, 100) == (0, 2)  # exact estimates: none of the two large ones missed
    assert large_errors(torch.zeros(4), x, 100) == (2, 2)  # an estimate of nothing misses every large one
    assert error_share(torch.zeros(4), x, 100) == 0.5  # ... which over all coordinates is only their share
    assert large_errors(torch.zeros(4), x, 1) == (0, 0)  # one column: width 10, nothing is large
    assert large_errors(torch.zeros(4), torch.tensor([1.0, float("nan"), 0.0, 0.0]), 4) is None
    assert large_errors(torch.zeros(0), torch.zeros(0), 4) == (0, 0)
    with pytest.raises(ValueError):
        large_errors(torch.zeros(3), x, 4)
    with pytest.raises(ValueError):
        large_errors(torch.zeros(4), x, 0)


@pytest.mark.parametrize("kind", ["gaussian", "heavy", "spiky"])
def test_a_real_count_sketch_stays_under_the_bound_over_the_large_coordinates_and_an_empty_one_does_not(kind):
    """Over the large coordinates too, gcbench's Count Sketch's pooled share stays under the bound over 20 hash
    seeds; a sketch that estimates 0 everywhere misses all of them, while its share over all coordinates is small."""
    gen = torch.Generator().manual_seed(2)
    d = 20_000
    x = {"gaussian": torch.randn(d, generator=gen),
         "heavy": torch.randn(d, generator=gen) / torch.rand(d, generator=gen).clamp_min(1e-3),
         "spiky": torch.randn(d, generator=gen) * (torch.rand(d, generator=gen) < 0.01) * 100 + 0.01 * torch.randn(d, generator=gen)}[kind]
    beyond = large = 0
    for seed in range(20):
        codec = get("countsketch", rows=5, columns=400, seed=seed)
        b, n = large_errors(codec.sketch_of(codec.encode(x)).estimate(), x, 400)
        beyond, large = beyond + b, large + n
    if large:
        assert beyond / large <= error_bound(5)
        assert large_errors(torch.zeros(d), x, 400)[0] == large // 20
    assert error_share(torch.zeros(d), x, 400) <= 400 / (4 * d)


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


def test_hash_statistics_count_deviations_from_independent_hashes():
    """Hand-made codes with known counts: ``2 * bucket + (sign < 0)``."""
    d, c = 1000, 10
    gen = torch.Generator().manual_seed(0)
    row = 2 * torch.randint(0, c, (d,), generator=gen) + torch.randint(0, 2, (d,), generator=gen)
    same = hash_statistics([torch.stack([row, row])], c)  # two rows sharing one hash: every coordinate agrees
    assert same["bucket_agreement"] == pytest.approx(math.sqrt(d * (c - 1)))  # (d - d/c) / sqrt(d (1/c) (1 - 1/c))
    assert same["sign_agreement"] == pytest.approx(math.sqrt(d))  # (d - d/2) / sqrt(d / 4)
    positive = hash_statistics([(2 * torch.arange(d) % (2 * c)).reshape(1, d)], c)  # every sign +1: the sum is d
    assert positive["sign_balance"] == pytest.approx(math.sqrt(d))
    assert positive["bucket_agreement"] == positive["sign_agreement"] == 0.0  # one row: no pair
    half = torch.tensor([[0, 1, 2, 3]])  # signs +1, -1, +1, -1: balanced
    assert hash_statistics([half], 2)["sign_balance"] == 0.0
    one = hash_statistics([torch.tensor([[0, 1], [1, 0]])], 1)  # one column: buckets always agree, not measured
    assert one["bucket_agreement"] == 0.0 and one["sign_agreement"] == pytest.approx(math.sqrt(2))  # |0 - 1| / sqrt(2 / 4)
    assert same["largest"] == max(same["bucket_agreement"], same["sign_agreement"], same["sign_balance"])
    for bad in ([torch.zeros(4, dtype=torch.int32)], [torch.zeros((2, 3))], [torch.zeros((2, 0), dtype=torch.int32)],
                [torch.zeros((0, 3), dtype=torch.int32)], [], [torch.zeros((2, 3), dtype=torch.int32), torch.zeros((3, 3), dtype=torch.int32)]):
        with pytest.raises(ValueError):
            hash_statistics(bad, c)
    with pytest.raises(ValueError):
        hash_statistics([torch.stack([row, row])], 0)


def test_statistics_counted_block_by_block_from_the_hash_tables_equal_those_of_all_codes():
    """The guard counts on the codes its sketch rebuilds from its hash tables (what accumulate uses), a block
    at a time; the counts are those of the codes evaluated from the polynomials all at once."""
    codec = get("countsketch", rows=5, columns=37, seed=3)
    sketch = codec.new_sketch(70_001)
    whole = hash_statistics([sketch.codes], 37)
    for block in (1 << 20, 4096, 999):
        assert hash_statistics(sketch_code_blocks(sketch, block), 37) == whole
    assert sum(b.shape[1] for b in sketch_code_blocks(sketch, 4096)) == 70_001


def test_real_hashes_stay_inside_the_width_and_the_false_alarm_is_chebyshevs():
    """gcbench's Count Sketch hashes, over 20 seeds at two widths, lie far inside ``HASH_WIDTHS``."""
    assert hash_false_alarm(5) == pytest.approx(25 / HASH_WIDTHS**2) == pytest.approx(0.01)
    assert hash_false_alarm(1) == pytest.approx(1 / HASH_WIDTHS**2)
    with pytest.raises(ValueError):
        hash_false_alarm(0)
    worst = 0.0
    for seed in range(20):
        for c in (27, 400):
            codec = get("countsketch", rows=5, columns=c, seed=seed)
            worst = max(worst, hash_statistics(sketch_code_blocks(codec.new_sketch(20_000)), c)["largest"])
    assert worst < HASH_WIDTHS / 2


def _run(model: str, method: str, shares: list[float] | None, rows: int = 5, large: list | None = None) -> dict:
    run = {"model": model, "method": {"name": method, "kind": "sketched" if method.startswith("sketched") else "vanilla",
                                       "rows": rows},
           "bleu": 1.0, "test_loss": 1.0, "parameters": 10, "compressed_parameters": 10, "traffic": {"last_step_bytes_per_worker": 40.0}}
    if shares is not None:
        run["sketch_error_share"] = shares
        run["sketch_large_errors"] = large if large is not None else [[0, 3] for _ in shares]
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


def test_the_guard_reads_the_larger_share_and_pools_the_large_coordinates_over_steps_and_seeds():
    assert sketch_large_error_share([{"sketch_large_errors": [[1, 4], None]}, {"sketch_large_errors": [[0, 6]]}]) == (0.1, 10.0)
    assert sketch_large_error_share([{"sketch_large_errors": [[0, 0]]}]) == (0.0, 0.0)  # nothing large: nothing to miss
    assert sketch_large_error_share([{"sketch_large_errors": [[0, 1]]}, {}]) is None  # a seed's cell without the list
    m = derive_translation({"t1-transformer-sketched20": _run("transformer", "sketched20", [0.001], large=[[3, 4]]),
                            "t1-lstm-sketched40": _run("lstm", "sketched40", [0.05])})
    assert m["t1.transformer.sketched20.sketch_large_error_share"] == 0.75
    assert m["t1.transformer.sketched20.sketch_large_coordinates"] == 4.0
    assert m["t1.transformer.sketched20.sketch_error_ratio"] == pytest.approx(0.75 / error_bound(5))
    assert m["t1.sketch_error_ratio"] == pytest.approx(0.75 / error_bound(5))


def test_the_hash_guard_takes_the_largest_statistic_over_seeds_and_methods():
    def run(model, method, largest, measuring=1.0):
        r = _run(model, method, [0.0])
        if largest is not None:
            r["sketch_hash_statistics"] = {
                name: {"sign_balance": 0.0, "bucket_agreement": 0.0, "sign_agreement": v, "largest": v}
                for name, v in (("run", largest), ("measuring", measuring))}
        return r
    m = derive_translation({"t1-transformer-vanilla": _run("transformer", "vanilla", None),
                            "t1-transformer-sketched20": run("transformer", "sketched20", 3.0),
                            "t1-transformer-sketched20-s1": run("transformer", "sketched20", 7.0),
                            "t1-lstm-sketched40": run("lstm", "sketched40", 5.0, measuring=6.0)})
    assert m["t1.transformer.sketched20.sketch_hash_deviation"] == 7.0  # the largest over seeds
    assert m["t1.lstm.sketched40.sketch_hash_deviation"] == 6.0  # ... and over the two sketches
    assert m["t1.sketch_hash_ratio"] == pytest.approx(7.0 / HASH_WIDTHS)
    assert "t1.transformer.vanilla.sketch_hash_deviation" not in m
    partial = derive_translation({"t1-transformer-sketched20": run("transformer", "sketched20", 3.0),
                                  "t1-transformer-sketched20-s1": run("transformer", "sketched20", None)})
    assert "t1.sketch_hash_ratio" not in partial  # a seed's cell without its statistics: not judged
