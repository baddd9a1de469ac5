"""RandomK: shared-seed linearity, exact uniform/stratified sampling, unbiased rescaling, hostile payloads."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload, PayloadMismatchError
from gcbench.compressors.codecs.randomk import RandomK, random_indices


def naive_k(n: int, ratio: float) -> int:
    return min(n, max(1, int(round(ratio * n))))


def kept_indices(codec: RandomK, x: torch.Tensor) -> np.ndarray:
    """Coordinates a call keeps, read off the decoded tensor of an input with no zeros."""
    out = codec.decode(codec.encode(x))
    return np.flatnonzero(out.numpy().ravel())


def naive_blocks(n: int, k: int) -> list[range]:
    """The stratified blocks written out: k consecutive blocks, the first n % k one longer."""
    sizes = [n // k + (1 if j < n % k else 0) for j in range(k)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [range(int(a), int(a) + s) for a, s in zip(starts, sizes)]


@pytest.mark.parametrize(
    "bad", [dict(ratio=0.0), dict(ratio=2.0), dict(sampling="blocks"), dict(rescale=1), dict(seed=-3)]
)
def test_bad_parameters_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        RandomK(**bad)


@given(seed=st.integers(0, 2**20), n=st.integers(1, 3000), ratio=st.sampled_from([0.001, 0.01, 0.1, 0.3, 0.9, 1.0]),
       sampling=st.sampled_from(["uniform", "stratified"]))
def test_decode_keeps_exactly_k_coordinates_of_x(seed, n, ratio, sampling):
    x = torch.rand(n, generator=torch.Generator().manual_seed(seed)) + 0.5  # no zeros
    codec = RandomK(ratio=ratio, seed=seed, sampling=sampling)
    p = codec.encode(x)
    k = naive_k(n, ratio)
    assert p.sections[0].dtype == torch.int64 and p.sections[0].numel() == 1
    assert p.sections[1].numel() == k and p.data_nbytes == 8 + 4 * k
    out = codec.decode(Payload.from_bytes(p.to_bytes()))
    kept = out != 0
    assert int(kept.sum()) == k
    assert torch.equal(out[kept], x[kept])
    if sampling == "stratified":
        idx = set(np.flatnonzero(kept.numpy()).tolist())
        assert all(len(idx.intersection(b)) == 1 for b in naive_blocks(n, k)), "one coordinate per block"


def test_linear_combine_sums_what_workers_sent():
    n = 5000
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    workers = [RandomK(ratio=0.02, seed=11) for _ in xs]
    for step in range(3):  # same call count on every worker -> same coordinates
        payloads = [w.encode(x) for w, x in zip(workers, xs)]
        combined = workers[0].combine(payloads)
        summed = workers[0].decode(combined)
        mask = workers[0].decode(payloads[0]) != 0
        expect = torch.where(mask, xs[0] + xs[1] + xs[2], torch.zeros(n))
        assert torch.allclose(summed, expect, atol=1e-6)
        assert torch.allclose(summed, sum(w.decode(p) for w, p in zip(workers, payloads)), atol=1e-6)
    other = RandomK(ratio=0.02, seed=12).encode(xs[0])
    with pytest.raises(PayloadMismatchError):  # a different seed is a different coordinate set
        workers[0].combine([payloads[0], other])


def test_the_call_sequence_is_reproducible_and_varies():
    x = torch.rand(1000) + 1
    a, b = RandomK(ratio=0.05, seed=4), RandomK(ratio=0.05, seed=4)
    seq_a = [kept_indices(a, x) for _ in range(4)]
    seq_b = [kept_indices(b, x) for _ in range(4)]
    assert all(np.array_equal(s, t) for s, t in zip(seq_a, seq_b))
    assert not np.array_equal(seq_a[0], seq_a[1])
    a.reset_state()
    assert np.array_equal(kept_indices(a, x), seq_a[0])


@pytest.mark.parametrize("n,k,trials,critical", [(6, 2, 4500, 36.12), (9, 2, 7200, 66.62)])
def test_uniform_sampling_is_exactly_uniform_over_pairs(n, k, trials, critical):
    """All C(n, 2) pairs equally likely, chi-square at P = 0.001: (6, 2) takes the randperm path
    (4k >= n), (9, 2) the draw-deduplicate-subsample path."""
    counts = dict.fromkeys(itertools.combinations(range(n), k), 0)
    for s in range(trials):
        idx, scale = random_indices(n, k, s, "uniform")
        counts[tuple(idx.tolist())] += 1
        assert scale == n / k
    expected = trials / len(counts)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < critical, (chi2, counts)


@pytest.mark.parametrize("n,k", [(1000, 10), (1000, 300), (37, 5)])
def test_uniform_inclusion_probability_is_k_over_n(n, k):
    trials = 3000
    hits = np.zeros(n)
    for s in range(trials):
        idx, _ = random_indices(n, k, 10_000 + s, "uniform")
        assert idx.numel() == k and bool((idx[1:] > idx[:-1]).all())
        hits[idx.numpy()] += 1
    p = k / n
    sd = math.sqrt(p * (1 - p) / trials)
    freq = hits / trials
    assert abs(freq.mean() - p) < 1e-12  # exactly k per call
    assert np.abs(freq - p).max() < 5 * sd + 1e-12


@pytest.mark.parametrize("sampling", ["uniform", "stratified"])
def test_rescale_is_unbiased(sampling):
    """E[decode] = x: the mean of T draws is within 5 standard errors of x, using the exact
    per-coordinate variance x_i^2 (1/p_i - 1)."""
    n, trials = 23, 4000
    x = torch.linspace(-2, 3, n, dtype=torch.float64)
    codec = RandomK(ratio=0.2, rescale=True, sampling=sampling, seed=1)
    draws = torch.stack([codec.roundtrip(x) for _ in range(trials)])
    k = naive_k(n, 0.2)
    p = torch.tensor([1 / len(b) for b in naive_blocks(n, k)] if sampling == "stratified" else [k / n])
    if sampling == "stratified":
        p = torch.cat([torch.full((len(b),), float(q)) for b, q in zip(naive_blocks(n, k), p)])
    p = p.expand(n).double()
    se = (x**2 * (1 / p - 1) / trials).sqrt()
    assert bool(((draws.mean(0) - x).abs() <= 5 * se + 1e-12).all())
    biased = torch.stack([RandomK(ratio=0.2, sampling=sampling, seed=1).roundtrip(x) for _ in range(50)])
    assert float(biased.abs().max()) <= float(x.abs().max()), "without rescale, values are x's own"


@given(seed=st.integers(0, 2**16), n=st.integers(1, 400), ratio=st.sampled_from([0.01, 0.2, 1.0]))
def test_default_is_contractive(seed, n, ratio):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = RandomK(ratio=ratio, seed=seed).roundtrip(x)
    assert float((x - out).norm()) <= float(x.norm()) + 1e-12


def test_payload_decodes_on_the_cpu_whatever_the_encoding_device():
    """The coordinates come from a CPU generator seeded by the payload: a payload parsed from bytes
    (always on the CPU) decodes to the same tensor."""
    x = torch.randn(3000, generator=torch.Generator().manual_seed(2))
    codec = RandomK(ratio=0.01, seed=3, sampling="stratified")
    p = codec.encode(x)
    assert torch.equal(codec.decode(Payload.from_bytes(p.to_bytes())), codec.decode(p))


def _rebuild(p: Payload, secs) -> Payload:
    return Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs), p.sparse)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s, v: (torch.tensor([-1]), v),  # seed below range
        lambda s, v: (torch.tensor([2**62]), v),  # seed above range
        lambda s, v: (s.to(torch.int32), v),  # seed dtype
        lambda s, v: (torch.cat([s, s]), v),  # two seeds
        lambda s, v: (s, v[:-1]),  # k - 1 values
        lambda s, v: (s, torch.cat([v, v[:1]])),  # k + 1 values
        lambda s, v: (s, v.to(torch.int32)),  # integer values
        lambda s, v: (s, torch.full_like(v, float("nan"))),  # non-finite values
    ],
)
def test_hostile_payloads_raise_corrupt_payload_error(mutate):
    codec = RandomK(ratio=0.1)
    p = codec.encode(torch.randn(50))
    bad = _rebuild(p, mutate(*p.sections))
    with pytest.raises(CorruptPayloadError):
        codec.decode(Payload.from_bytes(bad.to_bytes()))
    with pytest.raises(CorruptPayloadError):
        codec.decode(_rebuild(p, p.sections[:1]))


def _sorted_draw_reference(n: int, k: int, call_seed: int) -> torch.Tensor:
    """The uniform rule with the obvious final step (the codec's wire contract): the same generator
    calls, then ``sort(distinct[randperm[:k]])`` / ``sort(randperm(n)[:k])``; the codec finds the
    same set with a mask instead of a sort, so its coordinates must equal these."""
    g = torch.Generator().manual_seed(call_seed)
    if k == n:
        return torch.arange(n)
    if 4 * k >= n:
        return torch.sort(torch.randperm(n, generator=g)[:k]).values
    draw = k + k * k // n + 4 * math.isqrt(k) + 16
    distinct = torch.empty(0, dtype=torch.int64)
    while True:
        distinct = torch.unique(torch.cat([distinct, torch.randint(0, n, (draw,), generator=g)]))
        if distinct.numel() >= k:
            break
        draw = k - distinct.numel() + 4 * math.isqrt(k) + 16
    return torch.sort(distinct[torch.randperm(distinct.numel(), generator=g)[:k]]).values


@pytest.mark.parametrize("n, k", [(10, 1), (10, 3), (10, 10), (100, 30), (1000, 10), (1000, 999), (12_345, 5000),
                                  (1_000_000, 10_000)])
def test_uniform_coordinates_equal_the_sorted_draw(n, k):
    for s in range(5):
        seed = s * 7919 + n
        assert torch.equal(random_indices(n, k, seed, "uniform")[0], _sorted_draw_reference(n, k, seed)), (n, k, s)


def test_decode_into_a_buffer_equals_a_fresh_decode():
    """Bits equal, stale contents cleared; float64 values in a float32 payload (written only for
    float64 input) saturate as the fresh decode's cast does."""
    codec = RandomK(ratio=0.05, seed=3)
    x = torch.randn(4099, generator=torch.Generator().manual_seed(1))
    p = codec.encode(x)
    buf = torch.full_like(x, float("nan"))
    assert codec.decode(p, out=buf) is buf and torch.equal(buf, codec.decode(p))
    wide = p.sections[1].double()
    wide[0] = 1e300
    q = Payload(p.codec_id, p.dtype, p.shape, p.params, (p.sections[0], wide), p.sparse)
    assert torch.equal(codec.decode(q, out=buf), codec.decode(q)) and float(buf.abs().max()) == torch.finfo().max


def test_decode_reuses_the_encodes_coordinates(monkeypatch):
    """The decode of a payload draws no coordinates again when its encode drew them (the same seed):
    one draw per encode + decode, and the same values as a fresh draw."""
    from gcbench.compressors.codecs import randomk

    randomk.device_indices.cache_clear()
    calls = []
    real = randomk.random_indices
    monkeypatch.setattr(randomk, "random_indices", lambda *a: calls.append(a) or real(*a))
    codec = RandomK(ratio=0.05, seed=3)
    x = torch.randn(10_007, generator=torch.Generator().manual_seed(1))
    p = codec.encode(x)
    y = codec.decode(p)
    assert len(calls) == 1
    randomk.device_indices.cache_clear()
    assert torch.equal(codec.decode(p), y) and len(calls) == 2  # drawn afresh: the same coordinates
