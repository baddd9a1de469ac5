"""DGC's sampled top-k stops lowering its threshold as soon as at least ``0.8 k`` values pass it:
exactly ``0.8 k`` is enough, so those values alone are sent and no further lowering lets smaller
ones in."""

from __future__ import annotations

import math

import torch

from gcbench.compressors.codecs.topk import LOWER_BOUND, SAMPLE_RATIO, sampled_topk_indices


def test_exactly_the_lower_bound_of_k_stops_the_adaptation() -> None:
    """The sample's threshold lands on a level that exactly ``0.8 k`` values reach: they are the answer."""
    n, k, seed = 1000, 10, 4
    assert LOWER_BOUND * k == 8.0
    num_samples = max(math.ceil(n * SAMPLE_RATIO), math.ceil(2 * n / k))  # DGC's sample size
    top_samples = math.ceil(num_samples * k / n)
    # the positions the sample will draw (the same generator, the same draw)
    pos = torch.randint(0, n, (num_samples,), generator=torch.Generator().manual_seed(seed))
    drawn = set(pos.tolist())
    # the first `top_samples` distinct drawn positions, and 8 - top_samples never drawn, hold 10.0;
    # everything else holds 5.0: the threshold is 10.0 and exactly 8 values reach it
    big = list(dict.fromkeys(pos.tolist()))[:top_samples]
    big += [i for i in range(n) if i not in drawn][: 8 - len(big)]
    assert len(big) == 8
    x = torch.full((n,), 5.0)
    x[big] = 10.0
    got = sampled_topk_indices(x, k, torch.Generator().manual_seed(seed))
    assert got.tolist() == sorted(big)
