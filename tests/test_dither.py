"""The quantizers' counter-based uniforms (compressors/kernels/dither.py): the torch hash against an
independent numpy uint32 implementation, statistical checks that a broken hash fails (shown on two
broken ones), and the seed semantics of the codecs that use them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dither_reference import uniform16, words

from gcbench import compressors
from gcbench.compressors.kernels import dither
from gcbench.compressors.kernels import core as fused

KEYS = [0, 1, 0x7FFFFFFF_FFFFFFFF, 0x12345678_9ABCDEF0, dither.draw_key(torch.Generator().manual_seed(3), torch.device("cpu")).item()]
N = 1 << 19  # draws for the statistics: ~8 per 16-bit value


@pytest.mark.parametrize("key", KEYS)
def test_pair_hash_equals_the_uint32_reference(key):
    """Masked int64 arithmetic (no signed overflow) gives pcg_hash's wrapping uint32 results, at
    indices whose low word wraps and whose high word is large."""
    idx = np.array([0, 1, 2, 2**16, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 5, 2**62 + 12345, 2**63 - 1], dtype=np.uint64)
    idx = np.concatenate([idx, np.arange(5000, dtype=np.uint64) * np.uint64(7919)])
    got = dither.pair_hash(torch.from_numpy(idx.astype(np.int64)), *dither.key_words(torch.tensor([key]))).numpy()
    assert got.min() >= 0 and got.max() < 2**32
    np.testing.assert_array_equal(got, words(key, idx).astype(np.int64))


@pytest.mark.parametrize("key", KEYS)
def test_pair_hash32_equals_the_uint32_reference(key):
    """The compiled kernels' int32 form (wrapping products, logical shifts as masked arithmetic ones)
    gives the reference's words over the whole int32 index range, through :func:`kernel_words` and
    :func:`hash_halves` as the kernels call them; above ``2**31`` pairs the words are int64."""
    idx = np.concatenate([np.array([0, 1, 2**16, 2**30, 2**31 - 2, 2**31 - 1], dtype=np.uint64),
                          np.arange(5000, dtype=np.uint64) * np.uint64(429_497)])
    words32 = dither.kernel_words(torch.tensor([key]), 2**31)
    assert words32.dtype == torch.int32
    lo, hi = dither.hash_halves(torch.from_numpy(idx.astype(np.int32)), words32)
    ref = words(key, idx).astype(np.int64)
    np.testing.assert_array_equal(lo.numpy(), ref & 0xFFFF)
    np.testing.assert_array_equal(hi.numpy(), ref >> 16)
    assert dither.kernel_words(torch.tensor([key]), 2**31 + 1).dtype == torch.int64


def test_int64_products_stay_below_2_63():
    """The largest product any step forms (a 32-bit word times the largest multiplier) fits int64."""
    assert (2**32 - 1) * max(dither.PCG_MUL, dither.PCG_OUT) + dither.PCG_INC < 2**63


@pytest.mark.parametrize("n,span", [(1, 128), (255, 128), (256, 128), (1000, 128), (70_001, 96), (40_000, 16_384)])
def test_uniforms_into_follow_the_documented_pairing(n, span, monkeypatch):
    """Eager sub-chunks (crossing S and 2S) give the uniforms of the reference's definition."""
    monkeypatch.setattr(dither, "HASH_CHUNK", 999)
    key = KEYS[-1]
    out = torch.empty(n)
    start = n // 3
    dither.uniforms_into(out[start:], start, torch.tensor([key]), dither.split_point(n, span))
    dither.uniforms_into(out[:start], 0, torch.tensor([key]), dither.split_point(n, span))
    np.testing.assert_array_equal(out.numpy().astype(np.int64), uniform16(key, n, span))


@pytest.mark.parametrize("key", KEYS[1:])
@pytest.mark.parametrize("start", [0, 2**32 - 700, 2**33 - 3, 2**40 + 9])
def test_eager_cpu_words_equal_the_torch_hash(key, start, monkeypatch):
    """The eager CPU path (numpy uint32, sub-chunks that split at a new high word of the index) gives
    :func:`pair_hash`'s words, the compiled kernels' function, for both halves of every pair."""
    monkeypatch.setattr(dither, "HASH_CHUNK", 999)
    m = 2500
    low, high = torch.empty(m), torch.empty(m)
    dither.pair_uniforms_into(low, high, start, torch.tensor([key]))
    h = dither.pair_hash(torch.arange(start, start + m, dtype=torch.int64), *dither.key_words(torch.tensor([key])))
    assert torch.equal(low, (h & 0xFFFF).float()) and torch.equal(high, (h >> 16).float())
    out = torch.empty(m)
    dither.uniforms_into(out, start, torch.tensor([key]), split=0)  # no pairs: each its own word's high half
    assert torch.equal(out, (h >> 16).float())


def _chi2_z(counts: np.ndarray) -> float:
    """How many standard deviations the chi-square statistic of ``counts`` (uniform expected) lies
    from its mean (df = bins - 1, sd = sqrt(2 df)): two-sided, so a stream that is too even (one that
    repeats a permutation of the values) fails as well as a lumpy one."""
    expected = counts.sum() / counts.size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = counts.size - 1
    return (chi2 - df) / math.sqrt(2 * df)


def _uniformity_failures(r: np.ndarray) -> list[str]:
    """The checks each 16-bit stream must pass: all 65536 values, the high and low bytes, the
    correlation of neighbours (and of each value with the one 2 later)."""
    failures = []
    for name, v, bins in (("16-bit", r, 1 << 16), ("high byte", r >> 8, 256), ("low byte", r & 0xFF, 256)):
        z = _chi2_z(np.bincount(v, minlength=bins).astype(np.float64))
        if abs(z) > 6:
            failures.append(f"{name} chi-square z = {z:.1f}")
    u = (r + 0.5) / 65536
    for lag in (1, 2):
        c = float(np.corrcoef(u[:-lag], u[lag:])[0, 1])
        if abs(c) > 6 / math.sqrt(len(u)):
            failures.append(f"lag-{lag} correlation {c:.4f}")
    return failures


@pytest.mark.parametrize("span", [128, 16_384])
def test_uniforms_pass_uniformity_and_independence_checks(span):
    r = uniform16(KEYS[-1], N, span)
    assert _uniformity_failures(r) == []
    # the two halves of a word (values S apart) and two keys' streams at the same index: uncorrelated
    split = dither.split_point(N, span)
    u = (r + 0.5) / 65536
    assert abs(np.corrcoef(u[:split], u[split : 2 * split])[0, 1]) < 6 / math.sqrt(split)
    v = (uniform16(KEYS[1], N, span) + 0.5) / 65536
    assert abs(np.corrcoef(u, v)[0, 1]) < 6 / math.sqrt(N)
    assert np.sum(u == v) < N / 65536 + 6 * math.sqrt(N / 65536)  # equal by chance only


@pytest.mark.parametrize("a,b", [(0, 1), (5, 5 | 1 << 40), (2**32, 2**32 + 2**31)])
def test_close_keys_give_unrelated_streams(a, b):
    """Keys one bit apart (in the low or the high word): not the same stream at permuted indices (the
    sorted values differ) and equal at an index only by chance."""
    ra, rb = uniform16(a, N, 128), uniform16(b, N, 128)
    assert not np.array_equal(np.sort(ra), np.sort(rb))
    expected = N / 65536  # equal values by chance: Poisson, sd sqrt(expected)
    assert int((ra == rb).sum()) < expected + 6 * math.sqrt(expected)


def test_the_checks_reject_broken_streams():
    """Streams a careless implementation might ship fail the checks above: the index itself, a good
    hash of the index's low 16 bits only (it repeats every 2**16 indices: too even, each value ~8
    times exactly) and a multiplicative hash mod 2**16 (also periodic)."""
    i = np.arange(N, dtype=np.int64)
    assert _uniformity_failures(i % 65536)
    periodic = (words(5, i & 0xFFFF) >> 16).astype(np.int64)
    assert _uniformity_failures(periodic)
    assert _uniformity_failures((i * 40503) & 0xFFFF)


@pytest.mark.parametrize("name", ["qsgd", "terngrad", "zipml8", "zipml16"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_seed_semantics(name, mode):
    """Same seed: same bytes; another seed: other bytes; successive encodes: other bytes. One key per
    encode: the generator advances by one draw."""
    x = torch.randn(70_001, generator=torch.Generator().manual_seed(9))
    with fused.forced(mode):
        a, b = compressors.get(name, seed=1), compressors.get(name, seed=1)
        first = a.encode(x).to_bytes()
        assert first == b.encode(x).to_bytes()
        assert first != compressors.get(name, seed=2).encode(x).to_bytes()
        assert first != a.encode(x).to_bytes()
        g = torch.Generator().manual_seed(4)
        state = g.get_state()
        a.encode(x, generator=g)
        twin = torch.Generator().set_state(state)
        torch.empty(1, dtype=torch.int64).random_(generator=twin)
        assert torch.equal(g.get_state(), twin.get_state())


def test_stochastic_rounding_is_unbiased_at_every_fraction():
    """E[code] = y for y on a grid of fractions in [0, 1] (all values of one tensor, so every index's
    uniform takes part): the mean code over many keys within 5 standard errors."""
    from gcbench.compressors.codecs.rounding import stochastic_round

    y = torch.linspace(0, 1, 4097)
    total = torch.zeros_like(y, dtype=torch.float64)
    reps = 400
    g = torch.Generator().manual_seed(11)
    for _ in range(reps):
        total += stochastic_round(y, 1.0, offset=0.0, top=1, bits=8, generator=g).double()
    mean = total / reps
    se = torch.sqrt(y.double() * (1 - y.double()) / reps).clamp(min=1e-3)
    assert bool(((mean - y.double()).abs() <= 5 * se + 2.0**-16).all())


@pytest.mark.cuda
@pytest.mark.parametrize("chunk", [999, 1 << 22])
def test_device_uniforms_equal_the_cpu_reference_whatever_the_sub_chunk(chunk, monkeypatch):
    """Off the CPU the eager hash runs in larger sub-chunks (:func:`~dither.hash_chunk`): the same
    uniforms as the reference's definition, crossing S and 2S."""
    monkeypatch.setattr(dither, "DEVICE_HASH_CHUNK", chunk)
    n, span, key = 70_001, 96, KEYS[-1]
    out = torch.empty(n, device="cuda")
    dither.uniforms_into(out, 0, torch.tensor([key], device="cuda"), dither.split_point(n, span))
    np.testing.assert_array_equal(out.cpu().numpy().astype(np.int64), uniform16(key, n, span))


def test_hash_chunk_is_larger_off_the_cpu():
    assert dither.hash_chunk(torch.device("cpu")) == dither.HASH_CHUNK
    assert dither.hash_chunk(torch.device("meta")) == dither.DEVICE_HASH_CHUNK > dither.HASH_CHUNK


@pytest.mark.parametrize("key", [0, 1, 2**32 - 1, 2**32, 0x9E3779B97F4A7C15 >> 1, 2**63 - 1])
def test_key_words_int_equal_the_tensor_ones(key):
    """The Python-integer key words the C passes and the eager CPU hash take equal the tensor ones
    the compiled kernels take (another shift of the high word, or the hash of the whole key, fails)."""
    k0, k1 = dither.key_words(torch.tensor([key]))
    assert dither.key_words_int(torch.tensor([key])) == (int(k0), int(k1))
