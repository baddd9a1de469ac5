"""Count Sketch data structure and codec (compressors/codecs/countsketch/codec.py).

Checks exact modular hashing against Python integers, the sketch against a naive loop
implementation written here, linearity, the unsketch shortcuts against brute force, the
estimator's statistics, and heavy-hitter recovery against the Count Sketch guarantee.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gcbench import compressors
from gcbench.compressors import (
    CorruptPayloadError,
    InvalidParameterError,
    NonFiniteGradientError,
    Payload,
    PayloadMismatchError,
)
from gcbench.compressors.codecs.countsketch import codec as cs
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import countsketch as fused_sketch
from gcbench.compressors.kernels import native
from gcbench.compressors.codecs.countsketch import hashes as csh
from gcbench.compressors.codecs.countsketch import modp
from gcbench.compressors.codecs.countsketch.codec import PRIME, CountSketch, CountSketchCodec

P = PRIME
U61 = st.integers(0, P - 1)
EDGE = [0, 1, 2, P - 1, P - 2, (1 << 31) - 1, 1 << 31, (1 << 30) - 1, 1 << 30, (1 << 60) + 12345]


# --- exact arithmetic mod 2^61 - 1 ----------------------------------------------------------------


@given(a=st.lists(st.one_of(U61, st.sampled_from(EDGE)), min_size=1, max_size=50), data=st.data())
def test_mod_arithmetic_is_exact_against_python_ints(a, data):
    b = data.draw(st.lists(st.one_of(U61, st.sampled_from(EDGE)), min_size=len(a), max_size=len(a)))
    x = data.draw(st.lists(st.integers(0, (1 << 31) - 1), min_size=len(a), max_size=len(a)))
    ta, tb, tx = torch.tensor(a), torch.tensor(b), torch.tensor(x)
    assert modp.mulmod(ta, tb).tolist() == [(p * q) % P for p, q in zip(a, b)]
    assert modp.addmod(ta, tb).tolist() == [(p + q) % P for p, q in zip(a, b)]
    assert modp.mulmod_small(ta, tx).tolist() == [(p * q) % P for p, q in zip(a, x)]
    # the lazily reduced product used by the hash: congruent, bounded, for inputs up to 2^62 + 2^31
    big = [p + q for p, q in zip(a, b)]  # < 2^62
    lazy = modp.mul_lazy(torch.tensor(big), tx).tolist()
    assert all(0 <= v <= P + 2 and v % P == (p * q) % P for v, p, q in zip(lazy, big, x))


def test_mod_arithmetic_worst_cases():
    """The largest operands, where a naive int64 product would overflow."""
    vals = [P - 1, P - 2, (1 << 61) - 3, (1 << 31) - 1]
    ta = torch.tensor([v for v in vals for _ in vals])
    tb = torch.tensor([w for _ in vals for w in vals])
    assert modp.mulmod(ta, tb).tolist() == [(v * w) % P for v in vals for w in vals]
    worst = torch.tensor([(1 << 62) + (1 << 31)])
    x = (1 << 31) - 1
    assert int(modp.mul_lazy(worst, torch.tensor([x]))) % P == (((1 << 62) + (1 << 31)) * x) % P


def _python_hashes(coef: list[list[int]], tokens: list[int], c: int) -> tuple[list[list[int]], list[list[int]]]:
    """Buckets and signs from the documented polynomials, in Python integers."""
    buckets, signs = [], []
    for a, b, e3, e2, e1, e0 in coef:
        buckets.append([((a * i + b) % P) % c for i in tokens])
        signs.append([1 if ((((e3 * i + e2) * i + e1) * i + e0) % P) % 2 else -1 for i in tokens])
    return buckets, signs


def test_hashes_equal_the_polynomials_in_python_ints():
    sk = CountSketch(700, 53, 4, seed=11)
    coef = sk.coefficients.tolist()
    assert all(0 <= v < P for row in coef for v in row)
    buckets, signs = _python_hashes(coef, list(range(700)), 53)
    assert sk.buckets().tolist() == buckets
    assert sk.signs().tolist() == [[float(s) for s in row] for row in signs]
    # tokens near 2^31, where the lazy reduction is stressed, and the general (exact) path
    tokens = [(1 << 31) - 1, (1 << 31) - 2, (1 << 30) + 7, 123456789, 0]
    b_fast, raw_fast = csh.hash_block(sk.coefficients, torch.tensor(tokens), 53)
    b_exact, raw_exact = csh.hash_block_exact(sk.coefficients, torch.tensor(tokens), 53)
    want_b, want_s = _python_hashes(coef, tokens, 53)
    assert b_fast.tolist() == want_b and b_exact.tolist() == want_b
    assert [[1 if v % 2 else -1 for v in row] for row in raw_fast.tolist()] == want_s
    assert torch.equal(raw_fast, raw_exact)


def test_same_seed_same_hashes_in_independent_constructions():
    torch.manual_seed(123)  # the global RNG must not matter
    a = CountSketch(5000, 97, 5, seed=7)
    codes_a = a.codes.clone()
    torch.manual_seed(999)
    b = CountSketch(5000, 97, 5, seed=7)
    assert torch.equal(a.coefficients, b.coefficients)
    assert torch.equal(codes_a, b.codes)
    c = CountSketch(5000, 97, 5, seed=8)
    assert not torch.equal(c.codes, codes_a)


def test_threaded_hashing_equals_one_block_at_a_time(monkeypatch):
    coef = modp.hash_coefficients(3, 5)
    threaded = csh.compute_codes(40_000, 101, coef, torch.device("cpu"))
    monkeypatch.setattr(csh, "thread_pool", lambda: None)
    serial = csh.compute_codes(40_000, 101, coef, torch.device("cpu"))
    assert torch.equal(threaded, serial)


# --- the sketch against a naive implementation ----------------------------------------------------


def _naive_table(x: np.ndarray, buckets, signs, c: int) -> np.ndarray:
    table = np.zeros((len(buckets), c))
    for j in range(len(buckets)):
        for i in range(len(x)):
            table[j, buckets[j][i]] += signs[j][i] * x[i]
    return table


def _naive_estimates(table: np.ndarray, buckets, signs, d: int) -> np.ndarray:
    r = table.shape[0]
    out = np.empty(d)
    for i in range(d):
        vals = sorted(signs[j][i] * table[j, buckets[j][i]] for j in range(r))
        out[i] = vals[(r - 1) // 2]  # lower median, as torch.median / CSVec
    return out


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5, 7])
def test_sketch_equals_naive_loops(r):
    d, c = 300, 23
    x = torch.randn(d, generator=torch.Generator().manual_seed(r)) * 3
    sk = CountSketch(d, c, r, seed=r).accumulate(x)
    buckets, signs = _python_hashes(sk.coefficients.tolist(), list(range(d)), c)
    table = _naive_table(x.double().numpy(), buckets, signs, c)
    np.testing.assert_allclose(sk.table.numpy(), table, rtol=1e-5, atol=1e-5)
    est = _naive_estimates(sk.table.double().numpy(), buckets, signs, d)
    np.testing.assert_allclose(sk.estimate().numpy(), est, rtol=1e-6, atol=1e-6)
    idx = torch.tensor([0, 5, 299, 17, 17])
    np.testing.assert_allclose(sk.query(idx).numpy(), est[idx.numpy()], rtol=1e-6, atol=1e-6)
    l2 = math.sqrt(sorted((sk.table.double() ** 2).sum(1).tolist())[(r - 1) // 2])
    assert sk.l2estimate() == pytest.approx(l2, rel=1e-9)


def test_accumulate_in_halves_on_threads_gives_identical_bytes(monkeypatch):
    monkeypatch.setattr(cs, "SPLIT_MIN", 1000)
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    threaded = CountSketch(5000, 64, 5, seed=2).accumulate(x).table.clone()
    monkeypatch.setattr(cs, "thread_pool", lambda: None)
    serial = CountSketch(5000, 64, 5, seed=2).accumulate(x).table
    assert torch.equal(threaded, serial)
    ref = CountSketch(5000, 64, 5, seed=2)
    monkeypatch.setattr(cs, "SPLIT_MIN", 1 << 30)
    assert torch.allclose(ref.accumulate(x).table, serial, atol=1e-5)


@given(seed=st.integers(0, 10_000), r=st.integers(1, 9))
def test_median_network_equals_torch_median(seed, r):
    g = torch.Generator().manual_seed(seed)
    vals = torch.randint(-3, 4, (r, 50), generator=g).float()  # many ties
    want = vals.median(dim=0).values
    assert torch.equal(cs.median_rows(vals.clone()), want)


# --- linearity --------------------------------------------------------------------------------------


def test_sketches_are_linear():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2000, generator=g), torch.randn(2000, generator=g)
    sa = CountSketch(2000, 101, 5, seed=3).accumulate(a)
    sb = CountSketch(2000, 101, 5, seed=3).accumulate(b)
    sab = CountSketch(2000, 101, 5, seed=3).accumulate(a + b)
    assert torch.allclose((sa + sb).table, sab.table, atol=1e-5)
    sa += sb
    assert torch.allclose(sa.table, sab.table, atol=1e-5)
    sc = CountSketch(2000, 101, 5, seed=3)
    sc += sab.table.reshape(-1)
    assert torch.equal(sc.table, sab.table)
    with pytest.raises(InvalidParameterError):
        sa += CountSketch(2000, 101, 5, seed=4)


def test_codec_payloads_combine_into_the_sketch_of_the_sum():
    codec = CountSketchCodec(rows=5, columns=200, k=10, seed=9)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(40, 50, generator=g) for _ in range(3)]
    combined = codec.combine([codec.encode(x) for x in xs])
    direct = codec.encode(xs[0] + xs[1] + xs[2])
    assert torch.allclose(combined.sections[0], direct.sections[0], atol=1e-4)
    # decoding the combined payload is the top-k of the summed sketch
    summed = codec.sketch_of(combined)
    idx, vals = summed.unsketch(10)
    out = codec.decode(combined).reshape(-1)
    assert set(torch.nonzero(out).reshape(-1).tolist()) == set(idx.tolist())
    assert torch.equal(out[idx], vals)


# --- unsketch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5, 6])
def test_threshold_scan_finds_exactly_the_estimates_above_it(r):
    g = torch.Generator().manual_seed(r)
    x = torch.randn(20_000, generator=g)
    sk = CountSketch(20_000, 300, r, seed=r).accumulate(x)
    est = sk.estimate()
    for q in [0.5, 0.9, 0.999]:
        thr = float(est.abs().quantile(q))
        want = torch.nonzero(est.abs() >= thr).reshape(-1)
        assert torch.equal(sk._at_least(thr), want)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_blocks_of_any_size_give_the_same_estimates_and_scan(monkeypatch, mode):
    """Off the CPU the estimates and the threshold scan run in larger blocks (``DEVICE_BLOCK``): each
    coordinate's answer depends on no block boundary (eager, and C or compiled where they build)."""
    monkeypatch.setattr(cs, "FAST_MIN_D", 0)
    d = 300_007
    x = torch.randn(d, generator=torch.Generator().manual_seed(8))
    with fused.forced(mode):
        sk = CountSketch(d, 6_000, 5, seed=8).accumulate(x)
        want = (sk.estimate(), sk._at_least(2.0), sk.unsketch(3_000))
        for chunk, scan in [(1_000, 3_001), (cs.DEVICE_BLOCK, cs.DEVICE_BLOCK)]:
            monkeypatch.setattr(cs, "CHUNK", chunk)
            monkeypatch.setattr(cs, "SCAN_BLOCK", scan)
            got = (sk.estimate(), sk._at_least(2.0), sk.unsketch(3_000))
            assert all(torch.equal(a, b) for a, b in zip(want[:2] + want[2], got[:2] + got[2]))


@pytest.mark.parametrize("fast_min_d", [0, 1 << 40])
def test_unsketch_is_the_topk_of_the_estimates(monkeypatch, fast_min_d):
    monkeypatch.setattr(cs, "FAST_MIN_D", fast_min_d)
    g = torch.Generator().manual_seed(4)
    d = 100_000
    x = torch.randn(d, generator=g)
    x[torch.randperm(d, generator=g)[:300]] *= 20
    sk = CountSketch(d, 2000, 5, seed=4).accumulate(x)
    mag = sk.estimate().abs()
    for k in [1, 7, 300, 1000]:
        idx, vals = sk.unsketch(k)
        assert idx.numel() == k and len(set(idx.tolist())) == k
        assert torch.equal(vals, sk.query(idx))
        kth = torch.topk(mag, k).values[-1]
        assert bool((mag[idx] >= kth).all())  # a top-k set (ties aside)
        assert int((mag > kth).sum()) <= k
    assert sk.unsketch(0)[0].numel() == 0
    assert sk.unsketch(d + 5)[0].numel() == d


def test_unsketch_falls_back_when_the_sample_misleads(monkeypatch):
    """Mass only off the sampled stride: the sampled threshold is too high, the exact path answers."""
    monkeypatch.setattr(cs, "FAST_MIN_D", 0)
    d = 1 << 16
    x = torch.zeros(d)
    x[1::2] = torch.linspace(1, 2, d // 2)  # the sample takes stride // 2 + j * stride: even indices
    sk = CountSketch(d, 8192, 3, seed=0).accumulate(x)
    idx, _ = sk.unsketch(50)
    mag = sk.estimate().abs()
    assert bool((mag[idx] >= torch.topk(mag, 50).values[-1]).all())


# --- statistics of the estimator and heavy hitters --------------------------------------------------


def _collision_probability(c: int) -> float:
    """P(h(i) = h(j)), i != j, for h = ((a x + b) mod p) mod c with a, b uniform on Z_p: the pair
    (a i + b, a j + b) is uniform on Z_p^2, so it is sum_b (n_b / p)^2 with n_b = #{v < p: v = b mod c}."""
    q, rem = divmod(P, c)
    return (rem * (q + 1) ** 2 + (c - rem) * q**2) / P**2


def test_single_row_estimates_are_unbiased_with_the_predicted_variance():
    """One row: est_i - x_i = sum_{j != i} s_i s_j x_j [h(j) = h(i)], so over random hashes
    E[err_i] = 0 (pairwise-independent unbiased signs) and E[err_i^2] = sum_{j != i} x_j^2 P(collide).
    x > 0 makes a sign bias visible (constant signs would give E[err_i] = sum_j x_j / c)."""
    d, c, trials = 256, 16, 300
    x = torch.rand(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    errs = torch.stack([CountSketch(d, c, 1, seed=s).accumulate(x).estimate().double() - x for s in range(trials)])
    pc = _collision_probability(c)
    var_theory = ((x**2).sum() - x**2) * pc  # per coordinate
    mean_err = errs.mean(0)
    # each mean is over `trials` independent hash draws: 6 standard errors, all 256 coordinates
    assert bool((mean_err.abs() <= 6 * torch.sqrt(var_theory / trials)).all()), mean_err.abs().max()
    ratio = float((errs**2).mean() / var_theory.mean())
    assert 0.85 < ratio < 1.15, ratio


def _binom_tail(n: int, q: float, at_least: int) -> float:
    return sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(at_least, n + 1))


def test_planted_heavy_hitters_are_recovered_as_often_as_count_sketch_promises():
    """Plant k = 8 coordinates of magnitude H = 1 (random signs) among d = 4096 whose other entries
    are uniform in [-a, a], a = 0.01 (tail mass L^2 = (d - k) a^2 / 3); sketch with c = 512 columns
    and r = 5 rows. Each planted coordinate is an (eps, l2) heavy hitter with eps = H / ||x|| ~ 0.35.

    Bound: in one row, coordinate i's error exceeds Delta = (H - a) / 2 only if i shares its bucket
    with a planted coordinate (probability <= k * P(collide) ~ k / c) or the light coordinates in
    its bucket sum beyond Delta (Chebyshev: <= L^2 P(collide) / Delta^2). So a row fails with
    probability q <= k P(collide) + L^2 P(collide) / Delta^2 ~ 0.0167; the median of r = 5
    independent rows fails only if >= 3 rows fail: B = P[Bin(5, q) >= 3] ~ 4.6e-5; a union bound over
    the d coordinates gives: all errors < Delta, hence the top-k of the estimates is exactly the
    planted set, with probability >= 1 - d B ~ 0.81. Over 150 independent seeds the number of
    failures must not exceed what that probability allows (binomial upper tail at 1e-6).
    """
    d, k, c, r, a, H = 4096, 8, 512, 5, 0.01, 1.0
    pc = _collision_probability(c)
    light2 = (d - k) * a * a / 3
    delta = (H - a) / 2
    q = k * pc + light2 * pc / delta**2
    fail_bound = min(1.0, d * _binom_tail(r, q, (r + 1) // 2))
    assert 0.1 < fail_bound < 0.3  # the parameters give a non-vacuous bound
    trials, failures = 150, 0
    rng = torch.Generator().manual_seed(2024)
    for s in range(trials):
        x = (torch.rand(d, generator=rng, dtype=torch.float64) * 2 - 1) * a
        planted = torch.randperm(d, generator=rng)[:k]
        x[planted] = H * (torch.randint(0, 2, (k,), generator=rng).double() * 2 - 1)
        idx, _ = CountSketch(d, c, r, seed=10_000 + s).accumulate(x).unsketch(k)
        failures += set(idx.tolist()) != set(planted.tolist())
    # smallest f with P[Bin(trials, fail_bound) >= f] < 1e-6
    allowed = next(f for f in range(trials + 1) if _binom_tail(trials, fail_bound, f) < 1e-6)
    assert failures < allowed, (failures, allowed, fail_bound)


# --- the codec -----------------------------------------------------------------------------------------


def test_codec_defaults_sizes_and_bytes():
    codec = compressors.get("countsketch")
    assert isinstance(codec, CountSketchCodec) and codec.codec_id == 41 and codec.linear and not codec.stochastic
    assert codec.columns_for(100_000) == 1000  # n / (5 rows * 20x)
    assert codec.k_for(100_000) == 100  # c / 10
    assert codec.columns_for(3) == 1 and codec.k_for(3) == 1
    x = torch.randn(250, 400, generator=torch.Generator().manual_seed(0))
    p = codec.encode(x)
    assert len(p.sections) == 1 and p.sections[0].dtype == torch.float32
    assert p.data_nbytes == 5 * 1000 * 4
    assert p.nbytes == len(p.to_bytes()) == p.data_nbytes + p.overhead_nbytes
    out = codec.decode(p)
    assert out.shape == x.shape and int(torch.count_nonzero(out)) == 100
    again = compressors.decode(Payload.from_bytes(p.to_bytes()))
    assert torch.equal(again, out)


def test_codec_decode_is_the_unsketched_topk():
    codec = CountSketchCodec(rows=5, columns=3000, k=25, seed=5)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6000, generator=g, dtype=torch.float64)
    heavy = torch.randperm(6000, generator=g)[:25]
    x[heavy] = 50.0 + torch.arange(25, dtype=torch.float64)
    out = codec.decode(codec.encode(x))
    assert out.dtype == torch.float64
    assert set(torch.nonzero(out).reshape(-1).tolist()) == set(heavy.tolist())
    assert torch.allclose(out[heavy], x[heavy], atol=5.0)  # estimates within the sketch's error


def test_codec_rejects_bad_parameters_and_overflow():
    for bad in [dict(rows=0), dict(rows=65), dict(columns=-1), dict(columns=1 << 30), dict(compression=0.0),
                dict(compression=float("inf")), dict(k=-1), dict(seed=-1), dict(rows=True)]:
        with pytest.raises(InvalidParameterError):
            CountSketchCodec(**bad)
    codec = CountSketchCodec(rows=1, columns=1)
    with pytest.raises(NonFiniteGradientError):
        codec.encode(torch.full((4,), 3e38))


def test_codec_rejects_hostile_payloads():
    codec = CountSketchCodec(rows=3, columns=50, k=5)
    p = codec.encode(torch.randn(1000))

    def hostile(*sections):
        return Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(sections))

    table = p.sections[0]
    for bad in [hostile(table[:-1]), hostile(torch.cat([table, table[:1]])), hostile(table.double()),
                hostile(table, table), hostile(), hostile(torch.where(torch.arange(150) == 7, float("nan"), table))]:
        with pytest.raises(CorruptPayloadError):
            codec.decode(bad)
    with pytest.raises(PayloadMismatchError):
        CountSketchCodec(rows=3, columns=50, k=5, seed=1).decode(p)
    with pytest.raises(PayloadMismatchError):
        codec.sketch_of(compressors.get("identity").encode(torch.randn(3)))


def test_countsketch_rejects_bad_arguments():
    for args in [(0, 5, 1), (10, 0, 1), (10, 5, 0), (10, 1 << 30, 1)]:
        with pytest.raises(InvalidParameterError):
            CountSketch(*args)
    sk = CountSketch(10, 5, 3)
    with pytest.raises(InvalidParameterError):
        sk.accumulate(torch.ones(11))
    with pytest.raises(InvalidParameterError):
        sk.query(torch.tensor([10]))
    with pytest.raises(InvalidParameterError):
        CountSketch(10, 5, 3, table=torch.zeros(14))


# --- memory: hash codes owned by the codec, bounded ------------------------------


def test_hash_tables_do_not_outlive_the_codec():
    import gc
    import weakref

    codec = CountSketchCodec(rows=5, compression=10.0)
    codec.encode(torch.randn(20_000), key="k")
    # packed sign bits (one byte per coordinate for r <= 8) + the int32 bucket tables (rank and
    # 2 (v mod c) per row and entry; three per row and 2^16-block), not 4 r d bytes of codes
    want = 20_000 + 5 * 20_000 * 8 + 5 * 1 * 12
    assert codec.hash_cache.nbytes == want
    ref = weakref.ref(codec.hash_cache)
    other = CountSketchCodec(rows=5, compression=10.0)
    assert other.hash_cache.nbytes == 0  # no sharing through a process-wide cache
    del codec
    gc.collect()
    assert ref() is None


def test_hash_cache_is_bounded_and_streaming_gives_the_same_bytes():
    x = torch.randn(1 << 20 | 37)  # >= the two-halves threshold, so accumulate splits each row
    cached = CountSketchCodec(rows=3, compression=50.0)
    small = CountSketchCodec(rows=3, compression=50.0)
    small.hash_cache.max_bytes = csh.HashTables.size_of(x.numel(), 3) - 1  # one byte short
    a, b = cached.encode(x, key="k"), small.encode(x, key="k")
    assert a.to_bytes() == b.to_bytes()  # sign hash evaluated block by block: the same sums
    held = cached.hash_cache.nbytes
    assert small.hash_cache.nbytes == 0 and 0 < held <= csh.HashTables.size_of(x.numel(), 3) < 4 * 3 * x.numel()
    cached.hash_cache.max_bytes = csh.HashTables.size_of(5000, 3)
    cached.encode(torch.randn(5000), key="k")  # evicts the big entry to stay within the budget
    assert cached.hash_cache.nbytes <= cached.hash_cache.max_bytes
    assert torch.equal(cached.decode(a), small.decode(b))
    with pytest.raises(cs.InvalidParameterError):
        cs.HashCodeCache(-1)


# --- codes rebuilt from compact tables equal the direct evaluation --------------------------------


@pytest.mark.parametrize(
    ("d", "c", "r", "seed"),
    [
        (1, 1, 1, 0),
        (70_001, 53, 5, 3),  # two 2^16 blocks and a remainder
        (200_000, (1 << 30) - 1, 3, 7),  # widest tables: int64 codes (4c >= 2^31)
        (140_000, 1 << 29, 2, 1),  # the int32/int64 boundary
        (66_000, 1000, 11, 5),  # r > 8: two bytes of sign bits per coordinate
        (5_000, 3, 64, 9),  # the most rows a codec allows
    ],
)
def test_tables_rebuild_exactly_the_codes_of_the_polynomials(d, c, r, seed):
    coef = modp.hash_coefficients(r, seed)
    cpu = torch.device("cpu")
    want = csh.compute_codes(d, c, coef, cpu)
    for signs in (True, False):
        tables = csh.HashTables(d, c, coef, cpu, signs=signs)
        assert torch.equal(tables.codes(0, r, 0, d).long(), want.long())
        # unaligned ranges and row subsets (what accumulate and the decoders ask for)
        s, e = d // 3, d - d // 5
        assert torch.equal(tables.codes(r // 2, r, s, e).long(), want[r // 2 :, s:e].long())
        idx = torch.randint(0, d, (999,), generator=torch.Generator().manual_seed(seed))
        assert torch.equal(tables.codes_at(idx).long(), want[:, idx].long())


def test_tables_for_vectors_longer_than_2_to_31_use_exact_products():
    d, c, r = (1 << 33) + 5, 12_345, 3  # no sign bits: only the bucket tables are built
    coef = modp.hash_coefficients(r, 4)
    tables = csh.HashTables(d, c, coef, torch.device("cpu"), signs=False)
    first, last = d - 70_000, d
    want = csh.compute_codes(d, c, coef, torch.device("cpu"), first, last)
    assert torch.equal(tables.codes(0, r, first, last).long(), want.long())
    tokens = [first, (1 << 32) + 1, d - 1]
    buckets, signs = _python_hashes(coef.tolist(), tokens, c)
    got = tables.codes_at(torch.tensor(tokens))
    assert (got >> 1).tolist() == buckets
    assert (1 - 2 * (got & 1)).tolist() == signs


# Golden MD5 digests of the payload and decoded bytes on these inputs, from a reference encoder that
# holds every int32 code in full: the chunked encoder must reproduce them byte for byte.
GOLDEN_BYTES = [
    (1000, dict(rows=5, seed=3), torch.float32, "791c21a9e5dc5e4ba949ad7c2b7dbe50", "246b2f02349323ce2737090f74f770b2"),
    ((1 << 20) + 37, dict(rows=3, compression=50.0, seed=1), torch.float32,
     "68748a523a11ac20752c28afa7b91964", "d8c1e9dadb04f74cc9ae32df513fd222"),
    (300_001, dict(rows=7, columns=1000, seed=9), torch.float32,
     "432ccbc3f1986dcaa05091ab639f09de", "5f00782c2ce62ebbdda07b139110d6ff"),
    (70_000, dict(rows=9, compression=5.0, seed=2, k=500), torch.float16,
     "6f601ea48ae1cd0eb683e61aa770b606", "5902ccb9405b0fdfb3955b4f2c18c57f"),
    (200_000, dict(rows=1, compression=3.0, seed=4), torch.bfloat16,
     "df1333694ab11de99b26a84be8418f6f", "fee4439e3358aceabc2eb4ae6ff7d74c"),
]


@pytest.mark.parametrize("cache", ["default", "none", "compiled"])
@pytest.mark.parametrize(("n", "kw", "dtype", "payload_sha", "decoded_sha"), GOLDEN_BYTES)
def test_payload_and_decode_bytes_equal_the_encoder_that_held_all_codes(
    n, kw, dtype, payload_sha, decoded_sha, cache
):
    """Also in compiled mode: the C kernels (compressors/kernels/c/countsketch.c; r <= 8, any length)
    or the compiled code rebuild (compressors/kernels/countsketch.py; vectors of at least one kernel
    span, 2^18); the 9-row case stays eager."""
    import hashlib

    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3).to(dtype)
    with fused.forced("compiled" if cache == "compiled" else "eager"):
        codec = CountSketchCodec(**kw)
        if cache == "none":
            codec.hash_cache.max_bytes = 0  # sign polynomial evaluated block by block
        calls = fused_sketch.sketch_codes.calls + native.call_count(fused_sketch.SKETCH_C)
        payload = codec.encode(x, key="k")
        assert hashlib.sha256(payload.to_bytes()).hexdigest()[:32] == payload_sha
        decoded = codec.decode(payload).float().numpy().tobytes()
        assert hashlib.sha256(decoded).hexdigest()[:32] == decoded_sha
        # compiled: the C kernels (accumulate, scan; any length) or the compiled rebuild (whole spans)
        kernel = cache == "compiled" and kw["rows"] <= 8
        assert (fused_sketch.sketch_codes.calls + native.call_count(fused_sketch.SKETCH_C) > calls) == kernel


@pytest.mark.parametrize(("d", "c", "r"), [(1 << 18, 7, 1), (600_003, 1_001, 5), (3 * (1 << 18) + 17, 40_000, 8)])
def test_compiled_rebuild_equals_the_polynomials_on_every_range(d, c, r):
    """The compiled kernel writes whole spans of 2^18 coordinates, the eager loop the partial ends:
    together the codes of any range and rows, into contiguous and strided buffers alike, equal the
    direct evaluation; so does a sketch accumulated with them (one row at a time)."""
    coef = modp.hash_coefficients(r, d)
    cpu = torch.device("cpu")
    want = csh.compute_codes(d, c, coef, cpu)
    tables = csh.HashTables(d, c, coef, cpu)
    with fused.forced("compiled"):
        assert tables.compiled_codes()
        calls = fused_sketch.sketch_codes.calls
        span = fused_sketch.SPAN
        ranges = [(0, d), (1, d - 1), (span, min(d, 2 * span)), (d // 3, d), (5, min(d, span + 70_000))]
        ranges.append((d - 3, d))
        for s, e in ranges:
            r0 = (s % 2) * (r // 2)  # all rows, or the upper half
            assert torch.equal(tables.codes(r0, r, s, e), want[r0:, s:e]), (s, e)
            wide = torch.full((r - r0, e - s + 9), -1, dtype=torch.int32)
            tables.codes(r0, r, s, e, out=wide[:, 4 : e - s + 4])  # a strided view: written in place
            assert torch.equal(wide[:, 4:-5], want[r0:, s:e]) and bool((wide[:, :4] == -1).all())
        assert fused_sketch.sketch_codes.calls > calls
        x = torch.randn(d, generator=torch.Generator().manual_seed(r))
        compiled = CountSketch(d, c, r, seed=d).accumulate(x).table
    with fused.forced("eager"):
        assert not tables.compiled_codes()
        assert torch.equal(CountSketch(d, c, r, seed=d).accumulate(x).table, compiled)


@pytest.mark.cuda
def test_accelerator_tables_and_sketch_agree_with_the_cpu(monkeypatch):
    """On CUDA codes are rebuilt by gathers and each bucket summed exactly in int64 fixed point, then
    rounded once (the CPU adds float32 in index order): codes exactly equal, tables equal up to the
    CPU's float32 rounding, decode close; the same table, bit for bit, from run to run."""
    d, c, r = 300_001, 997, 5
    coef = modp.hash_coefficients(r, 3)
    want = csh.compute_codes(d, c, coef, torch.device("cpu"))
    gpu = csh.HashTables(d, c, coef, torch.device("cuda"))
    assert torch.equal(gpu.codes(0, r, 0, d).cpu().long(), want.long())
    idx = torch.arange(0, d, 7)
    assert torch.equal(gpu.codes_at(idx.cuda()).cpu().long(), want[:, idx].long())
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    cpu_sk = CountSketch(d, c, r, seed=3).accumulate(x)
    gpu_sk = CountSketch(d, c, r, seed=3, device="cuda").accumulate(x.cuda())
    torch.testing.assert_close(gpu_sk.table.cpu(), cpu_sk.table, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gpu_sk.estimate().cpu(), cpu_sk.estimate(), rtol=1e-4, atol=1e-3)
    again = CountSketch(d, c, r, seed=3, device="cuda").accumulate(x.cuda())
    assert torch.equal(again.table, gpu_sk.table)
    # from the CPU's table, the GPU's blocks (DEVICE_BLOCK, here several) give the CPU's estimates
    # and scan bit for bit: gathers and medians, no sums
    monkeypatch.setattr(cs, "DEVICE_BLOCK", 1 << 16)
    same = CountSketch(d, c, r, seed=3, table=cpu_sk.table.cuda())
    assert torch.equal(same.estimate().cpu(), cpu_sk.estimate())
    assert torch.equal(same._at_least(1.0).cpu(), cpu_sk._at_least(1.0))


def test_hold_codes_trades_memory_for_speed_with_the_same_bytes():
    x = torch.randn((1 << 20) + 3, generator=torch.Generator().manual_seed(5))
    lean, held = CountSketchCodec(rows=5), CountSketchCodec(rows=5)
    held.hash_cache.hold_codes = True
    a, b = lean.encode(x, key="k"), held.encode(x, key="k")
    assert a.to_bytes() == b.to_bytes()
    assert torch.equal(lean.decode(a), held.decode(b))
    assert held.hash_cache.nbytes >= 4 * 5 * x.numel() > 4 * lean.hash_cache.nbytes
    tight = CountSketchCodec(rows=5)
    tight.hash_cache = csh.HashCodeCache(csh.HashTables.size_of(x.numel(), 5), hold_codes=True)
    tight.encode(x, key="k")  # the codes do not fit this budget: the compact tables are kept instead
    assert 0 < tight.hash_cache.nbytes < 4 * 5 * x.numel()



@pytest.mark.parametrize(("d", "c", "r"), [(1, 1, 1), (1000, 3, 5), (70_001, 257, 8), (300_000, 6_000, 5), (300_000, 100, 9)])
def test_accumulate_in_c_has_the_bytes_of_index_add(d: int, c: int, r: int) -> None:
    """Accumulate with the C kernel (compiled mode) equals the eager reference (codes rebuilt in
    numpy, ``index_add_``) bit for bit: few columns (many additions per bin, whose order shows in the
    bits), partial blocks, one to eight rows (one sign byte) and nine (two sign bytes: not the C
    path), over a table that is not zero."""
    from gcbench.compressors.kernels.core import forced

    g = torch.Generator().manual_seed(d + c + r)
    x = torch.randn(d, generator=g) * torch.logspace(-15, 15, d)
    y = torch.randn(d, generator=g)
    tables = []
    for mode in ("eager", "compiled"):
        with forced(mode):
            sk = CountSketch(d, c, r, seed=7)
            sk.accumulate(x).accumulate(y)
            tables.append(sk.table.clone())
    assert torch.equal(tables[0].view(torch.int32), tables[1].view(torch.int32))


def test_accumulate_c_refuses_foreign_tables_and_wrong_types() -> None:
    """A code outside the accumulator (tables that are not a sketch's own) is refused after the
    others are added; tensors of other types or shapes are refused before anything runs."""
    from gcbench.compressors.kernels.countsketch import accumulate_c

    sk = CountSketch(100_000, 1000, 3, seed=1)
    t = sk.tables
    tables = (t.rank, t.vc2, t.km1, t.delta, t.base0)
    v = torch.randn(100_000)
    acc = torch.zeros(2000)
    accumulate_c(acc, v, 0, 100_000, 2, tables, t.negbits, 2000)  # the sketch's own: fine
    broken = (t.rank, t.vc2, t.km1, t.delta, t.base0 + 5000)
    with pytest.raises(ValueError, match="outside"):
        accumulate_c(torch.zeros(2000), v, 0, 100_000, 2, broken, t.negbits, 2000)
    with pytest.raises(ValueError, match="takes float32"):
        accumulate_c(torch.zeros(2000, dtype=torch.float64), v, 0, 100_000, 2, tables, t.negbits, 2000)
    with pytest.raises(ValueError, match="takes float32"):
        accumulate_c(acc, v, 0, 100_001, 2, tables, t.negbits, 2000)  # past the vector's end
    with pytest.raises(ValueError, match="takes float32"):
        accumulate_c(acc, v, 0, 100_000, 3, tables, t.negbits, 2000)  # no such row


@pytest.mark.parametrize(("d", "c", "r"), [(300_000, 6_000, 5), (1_500_007, 20_000, 3), (1_100_000, 9_000, 8)])
def test_unsketch_with_c_scan_equals_the_reference(d: int, c: int, r: int) -> None:
    """Unsketch's candidate scan in C (compiled mode) selects the coordinates of the torch gathers
    (eager): the same indices and estimates; several spans, two threads, one to eight rows."""
    from gcbench.compressors.kernels.core import forced

    g = torch.Generator().manual_seed(d)
    x = torch.randn(d, generator=g)
    x[torch.randint(0, d, (d // 200,), generator=g)] *= 50.0  # heavy hitters
    got = []
    for mode in ("eager", "compiled"):
        with forced(mode):
            sk = CountSketch(d, c, r, seed=11)
            sk.accumulate(x)
            idx, vals = sk.unsketch(d // 100)
            order = torch.argsort(idx)
            got.append((idx[order], vals[order]))
    assert torch.equal(got[0][0], got[1][0])
    assert torch.equal(got[0][1], got[1][1])


@pytest.mark.parametrize(("d", "c", "r"), [(1, 1, 1), (70_001, 300, 3), (300_000, 6_000, 5), (200_000, 4_000, 8)])
def test_query_in_c_equals_the_reference(d: int, c: int, r: int) -> None:
    """Point queries with the C gathers (compiled mode) equal the eager ones bit for bit, at any
    coordinates (unsorted, repeated, the ends); an index out of range is refused either way."""
    from gcbench.compressors.kernels.core import forced

    g = torch.Generator().manual_seed(d + r)
    x = torch.randn(d, generator=g)
    idx = torch.cat([torch.randint(0, d, (5000,), generator=g), torch.tensor([0, d - 1, 0])])
    got = []
    for mode in ("eager", "compiled"):
        with forced(mode):
            sk = CountSketch(d, c, r, seed=3)
            sk.accumulate(x)
            got.append(sk.query(idx.view(-1, 1)))
            with pytest.raises(compressors.InvalidParameterError):
                sk.query(torch.tensor([d]))
    assert got[0].shape == (idx.numel(), 1)
    assert torch.equal(got[0].view(torch.int32), got[1].view(torch.int32))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_ordered_add_at_gives_the_same_bits_every_run(device):
    """Many float32 values into few slots: the sums depend on the order of the additions, which
    ``ordered_add_at`` fixes (CUDA ``index_add_``'s atomics do not); on the CPU it is index order."""
    from gcbench.compressors.numerics import ordered_add_at

    g = torch.Generator().manual_seed(1)
    values = (torch.randn(1 << 16, generator=g) * torch.logspace(-6, 6, 1 << 16)).to(device)
    index = torch.randint(0, 7, (1 << 16,), generator=g).to(device)
    first = ordered_add_at(torch.zeros(7, device=device), index, values)
    for _ in range(3):
        assert torch.equal(ordered_add_at(torch.zeros(7, device=device), index, values), first)
    if device == "cpu":
        want = torch.zeros(7)
        for slot in range(7):
            for v in values[index == slot].tolist():  # index order, one float32 rounding per addition
                want[slot] = torch.tensor(want[slot].item() + v, dtype=torch.float32)
        assert torch.equal(first, want)
