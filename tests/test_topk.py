"""TopK: exact and DGC-sampled top-k against naive numpy references, bounds and hostile payloads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload, get
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels.sparse import abs_at_least
from gcbench.compressors.codecs.topk import (
    TopK,
    kth_largest,
    index_dtype,
    num_selected,
    sampled_topk_indices,
    topk_indices,
)


def naive_k(n: int, ratio: float) -> int:
    """k as the docstring defines it, written out independently."""
    k = int(round(ratio * n))
    return min(n, max(1, k))


def naive_top_magnitudes(x: np.ndarray, k: int) -> np.ndarray:
    """The multiset of the k largest |x| (sorted), via a full sort."""
    return np.sort(np.abs(x).ravel())[::-1][:k][::-1]


def sections(p: Payload) -> tuple[np.ndarray, np.ndarray]:
    idx, vals = p.sections
    return idx.numpy().astype(np.int64), vals.double().numpy()


def rebuild(p: Payload, **changes) -> Payload:
    secs = list(p.sections)
    for i, s in changes.items():
        secs[int(i[1:])] = s
    return Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs), p.sparse)


# -- k and dtypes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,ratio,k",
    [(1, 0.01, 1), (99, 0.01, 1), (250, 0.01, 2), (350, 0.01, 4), (1000, 0.0015, 2), (10, 1.0, 10), (7, 0.5, 4)],
)
def test_num_selected_table(n, ratio, k):
    assert num_selected(n, ratio) == k == naive_k(n, ratio)


def test_index_dtype_switches_at_2_to_the_31():
    assert index_dtype(2**31 - 1) == torch.int32
    assert index_dtype(2**31) == torch.int64


@pytest.mark.parametrize("bad", [dict(ratio=0.0), dict(ratio=1.5), dict(ratio=float("nan")), dict(ratio=True),
                                 dict(method="approx"), dict(seed=-1), dict(seed=1.5)])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        TopK(**bad)


# -- exact top-k against the naive reference ---------------------------------------------------

# Small integer magnitudes make ties common: then only the multiset of magnitudes is defined.
tied_arrays = st.lists(st.integers(-4, 4), min_size=1, max_size=300).map(lambda v: np.array(v, dtype=np.float32) * 0.25)


@given(x=tied_arrays, ratio=st.sampled_from([0.01, 0.05, 0.2, 0.5, 1.0]))
def test_exact_topk_matches_naive_magnitude_multiset(x, ratio):
    codec = TopK(ratio=ratio)
    p = codec.encode(torch.from_numpy(x))
    idx, vals = sections(p)
    k = naive_k(x.size, ratio)
    assert idx.size == k
    assert np.all(np.diff(idx) > 0), "indices sorted ascending and unique"
    np.testing.assert_array_equal(vals, x[idx])
    np.testing.assert_array_equal(np.sort(np.abs(vals)), naive_top_magnitudes(x, k))
    expect = np.zeros_like(x)
    expect[idx] = x[idx]
    out = codec.decode(Payload.from_bytes(p.to_bytes()))
    np.testing.assert_array_equal(out.numpy(), expect)


@given(seed=st.integers(0, 2**16), n=st.integers(1, 2000), ratio=st.sampled_from([0.001, 0.01, 0.1]))
def test_exact_topk_indices_equal_argsort_for_distinct_values(seed, n, ratio):
    rng = np.random.default_rng(seed)
    x = rng.permutation(n).astype(np.float64) + 1.0
    x *= rng.choice([-1.0, 1.0], size=n)
    k = naive_k(n, ratio)
    expect = np.sort(np.argsort(-np.abs(x), kind="stable")[:k])
    idx, vals = sections(TopK(ratio=ratio).encode(torch.from_numpy(x)))
    np.testing.assert_array_equal(idx, expect)
    np.testing.assert_array_equal(vals, x[expect])


@given(seed=st.integers(0, 2**16), n=st.integers(1, 500), ratio=st.sampled_from([0.01, 0.1, 0.4]))
def test_exact_topk_is_a_k_over_n_contraction(seed, n, ratio):
    """Stich et al. 2018, Def. 2.1: ||x - top_k(x)||^2 <= (1 - k/n) ||x||^2."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = TopK(ratio=ratio).roundtrip(x)
    k = naive_k(n, ratio)
    assert float(((x - out) ** 2).sum()) <= (1 - k / n) * float((x**2).sum()) * (1 + 1e-12) + 1e-300


@pytest.mark.parametrize(
    "dtype,elem", [(torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 4), (torch.float64, 8)]
)
def test_values_travel_in_the_input_dtype_exactly(dtype, elem):
    x = torch.randn(40, 25, generator=torch.Generator().manual_seed(1)).to(dtype)
    codec = TopK(ratio=0.1)
    p = codec.encode(x)
    k = naive_k(1000, 0.1)
    assert p.sections[0].dtype == torch.int32 and p.sections[1].dtype == dtype
    assert p.data_nbytes == k * (4 + elem)
    out = codec.decode(p)
    assert out.dtype == dtype and out.shape == x.shape
    kept = out != 0
    assert int(kept.sum()) == k
    assert torch.equal(out[kept], x[kept]), "kept values are exact copies"


def test_all_zero_tensor_sends_k_zeros():
    for method in ("exact", "sampled"):
        codec = TopK(ratio=0.01, method=method)
        p = codec.encode(torch.zeros(50_000))
        assert p.sections[0].numel() == 500
        assert torch.equal(codec.decode(p), torch.zeros(50_000))


# -- sampled threshold -------------------------------------------------------------------------


def _is_top_set(imp: np.ndarray, idx: np.ndarray) -> bool:
    mask = np.zeros(imp.size, bool)
    mask[idx] = True
    return mask.all() or imp[mask].min() >= imp[~mask].max()


@pytest.mark.parametrize("dist", ["normal", "cauchy", "lognormal", "sparse"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_selection_is_a_top_set_of_about_k(dist, seed):
    rng = np.random.default_rng(seed)
    n, ratio = 60_000, 0.01
    x = {
        "normal": rng.standard_normal(n),
        "cauchy": rng.standard_cauchy(n),
        "lognormal": rng.lognormal(0, 3, n) * rng.choice([-1, 1], n),
        "sparse": rng.standard_normal(n) * (rng.random(n) < 0.05),
    }[dist].astype(np.float32)
    k = naive_k(n, ratio)
    p = TopK(ratio=ratio, method="sampled", seed=seed).encode(torch.from_numpy(x))
    idx, vals = sections(p)
    assert 0.8 * k <= idx.size <= k
    assert np.all(np.diff(idx) > 0)
    assert _is_top_set(np.abs(x), idx)
    np.testing.assert_array_equal(vals, x[idx])


def naive_dgc_select(imp: np.ndarray, k: int, pos: np.ndarray) -> np.ndarray:
    """DGC's adaptation rule with python loops: threshold from the sample, lower by 0.8 (<= 10 times),
    exact top-k among the candidates when more than k pass."""
    n = imp.size
    t = math.ceil(pos.size * k / n)
    thr = np.float32(sorted(imp[pos].tolist())[-t])
    for it in range(11):
        cand = [i for i in range(n) if imp[i] >= thr]
        if len(cand) > k:
            return np.array(sorted(sorted(cand, key=lambda i: -imp[i])[:k]))
        if len(cand) >= 0.8 * k or it == 10:
            return np.array(cand)
        thr = np.float32(thr * np.float32(0.8))
    raise AssertionError


@pytest.mark.parametrize("seed", range(12))
def test_sampled_selection_equals_naive_dgc_rule(seed):
    """White-box: the same sample positions (the first draw of the generator) give the same result
    as a loop-by-loop transcription of DGC's rule; steep tails make the lowering loop run."""
    rng = np.random.default_rng(seed)
    n, k = 4000, 40
    imp = np.exp(-rng.permutation(n) / rng.choice([15.0, 60.0, 400.0])).astype(np.float32)
    imp *= np.float32(1) + rng.random(n).astype(np.float32) * np.float32(1e-3)  # break ties, off-grid values
    s = max(math.ceil(n * 0.01), math.ceil(2 * n / k))
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, n, (s,), generator=torch.Generator().manual_seed(seed)).numpy()
    got = sampled_topk_indices(torch.from_numpy(imp), k, g).numpy()
    np.testing.assert_array_equal(got, naive_dgc_select(imp, k, pos))


def test_sampled_tiny_tensors_use_exact_selection():
    x = torch.randn(150, generator=torch.Generator().manual_seed(0))
    # n=150, ratio=0.01 -> k=2, 2n/k = 150 samples >= n: DGC samples everything
    a = TopK(ratio=0.01, method="sampled").encode(x)
    b = TopK(ratio=0.01, method="exact").encode(x)
    assert all(torch.equal(s, t) for s, t in zip(a.sections, b.sections))


def test_sampled_is_reproducible_from_the_seed():
    x = torch.randn(30_000, generator=torch.Generator().manual_seed(0))
    a, b = TopK(ratio=0.01, method="sampled", seed=5), TopK(ratio=0.01, method="sampled", seed=5)
    assert [a.encode(x).to_bytes() for _ in range(3)] == [b.encode(x).to_bytes() for _ in range(3)]
    assert TopK(method="sampled").stochastic and not TopK(method="exact").stochastic


# -- hostile payloads --------------------------------------------------------------------------


def _valid(method="exact"):
    codec = TopK(ratio=0.1, method=method)
    x = torch.randn(200, generator=torch.Generator().manual_seed(3))
    return codec, codec.encode(x)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda i, v: (torch.cat([i[:-1], torch.tensor([200], dtype=torch.int32)]), v),  # index == n
        lambda i, v: (torch.cat([torch.tensor([-1], dtype=torch.int32), i[1:]]), v),  # negative
        lambda i, v: (torch.cat([i[:1], i[:-1]]), v),  # repeated index
        lambda i, v: (i.flip(0), v),  # unsorted
        lambda i, v: (i.to(torch.int64), v),  # wrong index dtype for n < 2**31
        lambda i, v: (i.float(), v),  # float indices
        lambda i, v: (i, v.to(torch.int32)),  # integer values
        lambda i, v: (i[:-1], v[:-1]),  # k - 1 coordinates (exact must send k)
        lambda i, v: (i, v[:-1]),  # lengths differ
        lambda i, v: (i, torch.where(torch.arange(v.numel()) == 3, torch.tensor(float("nan")), v)),  # NaN
        lambda i, v: (i, torch.where(torch.arange(v.numel()) == 0, torch.tensor(float("inf")), v)),  # Inf
    ],
)
def test_hostile_payloads_raise_corrupt_payload_error(mutate):
    codec, p = _valid()
    i, v = mutate(*p.sections)
    bad = rebuild(p, s0=i, s1=v)
    with pytest.raises(CorruptPayloadError):
        codec.decode(Payload.from_bytes(bad.to_bytes()))


def test_sampled_decoder_bounds_the_count():
    codec, p = _valid("sampled")
    i, v = p.sections
    with pytest.raises(CorruptPayloadError):  # zero coordinates: the encoder always sends >= 1
        codec.decode(rebuild(p, s0=i[:0], s1=v[:0]))
    more = torch.arange(21, dtype=torch.int32)  # k + 1 = 21
    with pytest.raises(CorruptPayloadError):
        codec.decode(rebuild(p, s0=more, s1=torch.ones(21)))
    with pytest.raises(CorruptPayloadError):
        codec.decode(Payload(p.codec_id, p.dtype, p.shape, p.params, p.sections[:1]))
    fewer = codec.decode(rebuild(p, s0=i[:5], s1=v[:5]))  # 1..k is what the sampled encoder may write
    assert int((fewer != 0).sum()) == 5


def test_registry_entries_build_topk():
    assert get("topk").method == "exact" and get("topk-sampled").method == "sampled"


# --- the candidate-filter fast path (large tensors) --------------------------------------------------


def _plain_topk(importance: torch.Tensor, k: int) -> torch.Tensor:
    """The reference selection the fast path must reproduce exactly: torch.topk, then sort."""
    return torch.sort(torch.topk(importance, k, sorted=False).indices).values


KINDS = ["normal", "sorted", "ties", "sparse", "periodic", "signed-zeros", "wide"]


def _input(kind: str, n: int, seed: int) -> torch.Tensor:
    """"ties", "sparse" and "signed-zeros" put equal magnitudes (+-0 among them) at the k-th value
    (the fallback), "sorted"/"periodic" defeat a strided sample, "wide" spans many binades."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    if kind == "sorted":
        x = torch.sort(x).values
    elif kind == "ties":
        x = torch.round(x * 4) / 4
    elif kind == "sparse":
        x[torch.rand(n, generator=g) < 0.995] = 0
    elif kind == "periodic":
        x = torch.where(torch.arange(n) % 3 == 0, 10.0, 0.1) * torch.sign(x)
    elif kind == "signed-zeros":
        x[torch.rand(n, generator=g) < 0.95] = 0.0
        x[torch.rand(n, generator=g) < 0.5] *= -1  # -0.0 where it hit a zero
    elif kind == "wide":
        x = x * torch.exp2(torch.randint(-100, 100, (n,), generator=g).float())
    return x


@pytest.mark.parametrize("mode", ["eager", "eager-1-thread", "compiled"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ratio", [1e-4, 0.01, 0.1])
def test_exact_fast_path_equals_plain_topk(seed, kind, ratio, mode, request):
    # n above the filter threshold (and not a multiple of 8) so the candidate filter, the
    # compiled scan's tail and several eager blocks run; the reference is torch.topk of the full
    # |x|, sorted
    n = 200_003
    x = _input(kind, n, seed)
    k = naive_k(n, ratio)
    if mode == "eager-1-thread":
        request.getfixturevalue("one_torch_thread")
    with fused.forced(mode.split("-")[0]):
        payload = get("topk", ratio=ratio).encode(x)
        helper = topk_indices(x.abs(), k)  # the shared helper (importance given, eager comparisons)
    idx, vals = sections(payload)
    expected = _plain_topk(x.abs(), k)
    np.testing.assert_array_equal(idx, expected.numpy())
    assert torch.equal(payload.sections[1].view(torch.int32), x[expected].view(torch.int32))  # bits: -0.0 too
    assert torch.equal(helper, expected)


@pytest.mark.parametrize("n", [8, 9, 15, 16, 17, 1000, 4099, 70_001])
def test_compiled_scan_equals_torch_nonzero(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    x[::5] = 0.0
    x[1::7] = -0.0
    x[2::11] = x[3::11][: x[2::11].numel()]  # ties
    with fused.forced("compiled"):
        for t in (0.0, 0.5, 1.0, 2.0, 10.0):
            thr = torch.tensor(t)
            idx, finite = abs_at_least(x, thr)
            assert finite and torch.equal(idx, torch.nonzero(x.abs() >= thr).reshape(-1)), t
        y = x.clone()
        y[-1] = float("nan")  # in the eager tail, or the last slab
        assert not abs_at_least(y, torch.tensor(0.5))[1]
        y = x.clone()
        y[0] = float("-inf")
        assert not abs_at_least(y, torch.tensor(0.5))[1]


def magnitudes(kind: str, seed: int) -> torch.Tensor:
    """30,001 seeded magnitudes of one kind: normal, ties (multiples of 1/8), zeros (90% of them),
    one-value, wide (exponents over 240 binades) or two-values (1 and 3e-30)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(30_001, generator=g).abs()
    if kind == "ties":
        a = torch.round(a * 8) / 8
    elif kind == "zeros":
        a[torch.rand(a.numel(), generator=g) < 0.9] = 0.0
    elif kind == "one-value":
        a = torch.full_like(a, 0.75)
    elif kind == "wide":
        a = a * torch.exp2(torch.randint(-120, 120, a.shape, generator=g).float())
    elif kind == "two-values":
        a = torch.where(torch.rand(a.numel(), generator=g) < 0.5, 1.0, 3e-30)
    return a


@pytest.mark.parametrize("kind", ["normal", "ties", "zeros", "one-value", "wide"])
@pytest.mark.parametrize("size", [30_001, 1000])  # the radix histogram, and kthvalue below _RADIX_MIN
def testkth_largest_equals_kthvalue(kind, size):
    a = magnitudes(kind, seed=5)[:size]
    c = a.numel()
    for k in (1, 2, 17, 300, c // 2, c - 1, c):
        assert kth_largest(a, k) == torch.kthvalue(a, c - k + 1).values, k


@pytest.mark.parametrize("name, n", [("topk", 140_001), ("topk-sampled", 4099), ("topk-sampled", 300_001)])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_candidate_scan_is_the_finiteness_check(name, n, bad, monkeypatch):
    """Where the scan reads the whole input (compiled: the packed-bit kernel; eager with one thread:
    cache-sized blocks, several of them at 300k) the contract's separate scan does not run and
    NaN/Inf raise its typed error (same message, random stream untouched); eager with two threads
    (full-size comparisons) the contract's scan runs and says the same."""
    from gcbench.compressors import base
    from gcbench.compressors.errors import NonFiniteGradientError

    x = torch.randn(n, generator=torch.Generator().manual_seed(2))
    y = x.clone()
    y[n - 2] = bad
    y[5] = bad
    messages = {}
    before = torch.get_num_threads()
    try:
        for mode, threads in (("eager", 2), ("eager", 1), ("compiled", 2)):
            torch.set_num_threads(threads)
            with fused.forced(mode), monkeypatch.context() as m:
                codec, twin = get(name), get(name)
                folded = (mode, threads) != ("eager", 2)
                assert codec.checks_finite(x) == folded
                if folded:
                    m.setattr(base, "check_finite", lambda t: pytest.fail("the separate finiteness scan ran"))
                with pytest.raises(NonFiniteGradientError) as err:
                    codec.encode(y)
                messages[mode, threads] = str(err.value)
                assert codec.encode(x).to_bytes() == twin.encode(x).to_bytes()
    finally:
        torch.set_num_threads(before)
    assert len(set(messages.values())) == 1 and "2 non-finite" in messages["eager", 1]
    assert not get(name).checks_finite(x[:100])  # tiny: plain torch.topk, the contract's scan runs


@pytest.mark.parametrize("name", ["topk", "topk-sampled", "dgc"])
def test_decode_into_a_buffer_equals_a_fresh_decode(name):
    """Bits equal, stale contents cleared; float64 values in a float32 payload (no encoder writes
    them) saturate as the fresh decode's cast does, or both raise the same error."""
    codec = get(name)
    x = torch.randn(70_001, generator=torch.Generator().manual_seed(1)) * 3
    p = codec.encode(x, key="a")
    fresh = codec.decode(p)
    buf = torch.full_like(x, float("nan"))
    assert codec.decode(p, out=buf) is buf and torch.equal(buf.view(torch.int32), fresh.view(torch.int32))
    wide = p.sections[1].double()
    wide[0] = 1e300
    q = rebuild(p, s1=wide)
    assert torch.equal(codec.decode(q, out=buf), codec.decode(q))
    for bad in (rebuild(p, s1=p.sections[1][:-1]), rebuild(p, s0=p.sections[0].flip(0))):
        with pytest.raises(CorruptPayloadError) as fresh_err:
            codec.decode(bad)
        with pytest.raises(CorruptPayloadError) as into_err:
            codec.decode(bad, out=buf)
        assert str(fresh_err.value) == str(into_err.value)


def test_nonzero_sorted_equals_torch_nonzero():
    from gcbench.compressors.codecs.topk import nonzero_sorted

    g = torch.Generator().manual_seed(3)
    for n in (0, 9, 65_535, 65_536, 70_001, 300_000):
        for density in (0.0, 0.001, 0.2, 1.0):
            mask = torch.rand(n, generator=g) < density
            for m in (mask, mask[3:]):  # a view at an odd offset takes the plain path
                assert torch.equal(nonzero_sorted(m), torch.nonzero(m).reshape(-1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_absolute_flag_equals_passing_magnitudes(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(150_001, generator=g)
    x[::7] = torch.round(x[::7])  # some ties
    for k in (15, 1500, 15_000):
        a = sampled_topk_indices(x.abs(), k, torch.Generator().manual_seed(seed))
        b = sampled_topk_indices(x, k, torch.Generator().manual_seed(seed), absolute=True)
        assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_cuda_selection_equals_cpu(mode):
    """On CUDA (Triton kernel compiled, full-size comparisons eager) the exact method sends the
    CPU's payload for distinct magnitudes (the sampled one draws from the device's generator:
    tests/test_fused.py compares its modes on CUDA), and decode into a CUDA buffer equals a fresh
    decode."""
    x = torch.randn(200_003, generator=torch.Generator().manual_seed(4))
    with fused.forced(mode):
        cpu = get("topk").encode(x)
        gpu = get("topk").encode(x.cuda())
        assert cpu.to_bytes() == gpu.to_bytes()
        buf = torch.full_like(x, float("nan"), device="cuda")
        assert torch.equal(get("topk").decode(gpu, out=buf).cpu(), get("topk").decode(cpu))



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["topk", "topk-sampled", "dgc"])
def test_the_blocked_scan_selects_what_the_full_size_comparisons_select(name, dtype):
    """Eager with one thread the candidate scan runs in cache-sized blocks (numpy's comparison where
    numpy has the dtype); with two, as full-size torch comparisons. The sampled selections return the
    candidates above a threshold that is itself a value of the input, so a scan that dropped the
    values equal to it, or misplaced a block, would change the bytes."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(300_001, generator=g) * 3).to(dtype)
    x[::97] = x[5]  # many values tied with one another
    out = {}
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            with fused.forced("eager"):
                codec = get(name)
                out[threads] = [codec.encode(x * s, key="k").to_bytes() for s in (1, -1)]
    finally:
        torch.set_num_threads(before)
    assert out[1] == out[2]
