"""PowerSGD: power-iteration math against numpy, orthogonalization against torch's hook, the SVD
tail bound, exact rank-r recovery, the two-all-reduce protocol, state and hostile payloads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import devices
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload, StateError
from gcbench.compressors.codecs.powersgd import (
    PowerSGD,
    compute_p,
    compute_q,
    decompress,
    matrix_shape,
    orthogonalize_,
    should_compress,
    threads_for,
)
from gcbench.compressors.codecs import powersgd as powersgd_module


def gram_schmidt(a: np.ndarray) -> np.ndarray:
    """Classical Gram-Schmidt, column by column (full column rank assumed)."""
    q = np.array(a, dtype=np.float64)
    for j in range(q.shape[1]):
        for i in range(j):
            q[:, j] -= (q[:, i] @ q[:, j]) * q[:, i]
        q[:, j] /= np.linalg.norm(q[:, j])
    return q


def matrix_with_singular_values(n: int, m: int, sv: list[float], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, len(sv))))
    v, _ = np.linalg.qr(rng.standard_normal((m, len(sv))))
    return (u * np.array(sv)) @ v.T


# -- orthogonalization -------------------------------------------------------------------------


@given(seed=st.integers(0, 2**16), n=st.integers(1, 60), r=st.integers(1, 8))
def test_orthogonalize_gives_orthonormal_columns_equal_to_gram_schmidt(seed, n, r):
    r = min(r, n)
    a = np.random.default_rng(seed).standard_normal((n, r))
    assume(np.linalg.cond(a) < 1e4)  # Gram-Schmidt's result is only stable for well-conditioned input
    p = orthogonalize_(torch.from_numpy(a.copy()))
    np.testing.assert_allclose(p.T @ p, np.eye(r), atol=1e-10)
    np.testing.assert_allclose(p.numpy(), gram_schmidt(a), atol=1e-7)


@pytest.mark.parametrize("r", [1, 2, 4])
def test_orthogonalize_agrees_with_torch_powersgd_hook(r):
    a = torch.randn(3, 50, r, generator=torch.Generator().manual_seed(r), dtype=torch.float64)
    theirs = a.clone()
    _orthogonalize(theirs)  # Gram-Schmidt for r <= 2, Householder QR (signs unfixed) for r > 2
    ours = orthogonalize_(a.clone())
    # same column span: identical projectors; for r <= 2 identical columns
    assert torch.allclose(ours @ ours.transpose(1, 2), theirs @ theirs.transpose(1, 2), atol=1e-10)
    if r <= 2:
        assert torch.allclose(ours, theirs, atol=1e-10)


def test_orthogonalize_rank_deficient_and_zero_columns_stay_orthonormal():
    a = torch.zeros(10, 3, dtype=torch.float64)
    a[:, 0] = torch.arange(10.0)
    a[:, 2] = 2 * a[:, 0]  # rank 1
    for p in (a, torch.zeros(10, 3, dtype=torch.float64)):
        q = orthogonalize_(p.clone())
        assert torch.allclose(q.T @ q, torch.eye(3, dtype=torch.float64), atol=1e-12)
    half = orthogonalize_(torch.randn(20, 3).half())
    assert torch.allclose(half.float().T @ half.float(), torch.eye(3), atol=5e-3)
    with pytest.raises(ValueError):
        orthogonalize_(torch.randn(2, 3))


# -- one encode step against numpy -------------------------------------------------------------


@pytest.mark.parametrize("shape,rank", [((30, 20), 4), ((16, 3, 3, 3), 2), ((12, 50), 1)])
def test_encode_equals_naive_power_step(shape, rank):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    n, m = shape[0], int(np.prod(shape[1:]))
    q0 = rng.standard_normal((m, rank))
    codec = PowerSGD(rank=rank)
    codec.set_warm_start("w", torch.from_numpy(q0))
    p = codec.encode(torch.from_numpy(x), key="w")  # float64 input: float64 arithmetic
    mat = x.reshape(n, m)
    p_ref = gram_schmidt(mat @ q0)
    q_ref = mat.T @ p_ref
    assert p.sections[0].tolist() == [n, m, rank]
    np.testing.assert_allclose(p.sections[1].numpy().reshape(n, rank), p_ref, atol=1e-9)
    np.testing.assert_allclose(p.sections[2].numpy().reshape(m, rank), q_ref, atol=1e-9)
    out = codec.decode(p).numpy()
    np.testing.assert_allclose(out, (p_ref @ q_ref.T).reshape(shape), atol=1e-9)
    np.testing.assert_allclose(codec.state_dict()["q/w"].numpy(), q_ref, atol=1e-9)  # warm start kept


@given(seed=st.integers(0, 2**16), n=st.integers(2, 40), m=st.integers(2, 40), rank=st.integers(1, 5))
def test_decode_is_an_orthogonal_projection(seed, n, m, rank):
    """P P^T M with orthonormal P: Pythagoras ||M||^2 = ||out||^2 + ||M - out||^2 (so contractive)."""
    x = torch.randn(n, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = PowerSGD(rank=rank, seed=seed).roundtrip(x)
    lhs = float((x**2).sum())
    rhs = float((out**2).sum() + ((x - out) ** 2).sum())
    assert abs(lhs - rhs) <= 1e-9 * lhs


@pytest.mark.parametrize("true_rank,rank", [(1, 1), (3, 3), (3, 4)])
def test_exactly_low_rank_matrix_is_reconstructed_in_one_step(true_rank, rank):
    rng = np.random.default_rng(true_rank)
    mat = rng.standard_normal((40, true_rank)) @ rng.standard_normal((true_rank, 25))
    out = PowerSGD(rank=rank).roundtrip(torch.from_numpy(mat))
    np.testing.assert_allclose(out.numpy(), mat, atol=1e-9 * np.abs(mat).max())


def test_warm_start_converges_to_the_svd_tail_bound():
    """Repeated calls on a fixed M are subspace iteration: the error reaches the Eckart-Young bound
    sqrt(sum_{i>r} sigma_i^2) and never goes below it."""
    sv = [10.0, 8.0, 6.0, 5.0, 2.0, 1.0, 0.5, 0.25]
    mat = matrix_with_singular_values(60, 45, sv, seed=1)
    rank = 4
    tail = float(np.sqrt(np.sum(np.square(sv[rank:]))))
    codec = PowerSGD(rank=rank)
    x = torch.from_numpy(mat)
    errs = [float((codec.roundtrip(x, key="w") - x).norm()) for _ in range(40)]
    assert min(errs) >= tail * (1 - 1e-9)
    assert errs[0] > tail * 1.01, "one step from a random Q is not the best rank-r approximation"
    assert errs[-1] == pytest.approx(tail, rel=1e-8)
    # without warm start every call restarts from a random Q: no convergence
    cold = PowerSGD(rank=rank, warm_start=False)
    cold_errs = [float((cold.roundtrip(x, key="w") - x).norm()) for _ in range(5)]
    assert min(cold_errs) > tail * 1.001 and cold.state_dict().keys() <= {"rng/cpu"}


def test_two_all_reduce_protocol_equals_compressing_the_mean():
    """The documented DDP protocol with 3 workers = single-worker PowerSGD on the mean matrix."""
    rng = np.random.default_rng(5)
    ms = [torch.from_numpy(rng.standard_normal((30, 24))) for _ in range(3)]
    q0 = torch.from_numpy(rng.standard_normal((24, 3)))
    p = torch.stack([compute_p(m_, q0) for m_ in ms]).mean(0)  # all_reduce mean of P
    orthogonalize_(p)
    q = torch.stack([compute_q(m_, p) for m_ in ms]).mean(0)  # all_reduce mean of Q
    update = decompress(p, q)
    single = PowerSGD(rank=3)
    single.set_warm_start(None, q0)
    expect = single.roundtrip(sum(ms) / 3)
    assert torch.allclose(update, expect, atol=1e-10)


# -- uncompressed tensors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,rank", [((50,), 4), ((), 4), ((4, 4), 4), ((3, 100), 4), ((1, 1000), 2), ((2, 2, 2), 2)]
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_vectors_and_small_matrices_travel_uncompressed_and_exact(shape, rank, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    codec = PowerSGD(rank=rank)
    p = codec.encode(x)
    numel = x.numel()
    assert p.sections[0].tolist() == [numel, 1, 0]
    assert p.data_nbytes == 24 + numel * x.element_size()
    assert torch.equal(codec.decode(Payload.from_bytes(p.to_bytes())), x)


def test_compression_rule_and_matrix_view():
    assert matrix_shape((16, 3, 3, 3)) == (16, 27) and matrix_shape((7,)) is None and matrix_shape(()) is None
    assert should_compress(10, 10, 4) and not should_compress(10, 10, 5)  # 80 < 100, 100 >= 100
    assert not should_compress(3, 100, 4)  # r = 3: 309 >= 300
    assert should_compress(4, 100, 3) and not should_compress(1, 1000, 8)


def test_payload_bytes_are_the_factors():
    p = PowerSGD(rank=4).encode(torch.randn(64, 32))
    assert p.data_nbytes == 24 + 4 * 4 * (64 + 32)
    assert [s.dtype for s in p.sections] == [torch.int64, torch.float32, torch.float32]
    assert PowerSGD(rank=4).encode(torch.randn(64, 32).bfloat16()).sections[1].dtype == torch.float32


# -- state -------------------------------------------------------------------------------------


def test_state_is_per_key_checked_and_resumable():
    xs = [torch.randn(20, 30, generator=torch.Generator().manual_seed(s)) for s in range(6)]
    ref = PowerSGD(rank=2, seed=7)
    ref_bytes = [ref.encode(x, key="a").to_bytes() for x in xs]
    first = PowerSGD(rank=2, seed=7)
    for x in xs[:3]:
        first.encode(x, key="a")
    resumed = PowerSGD(rank=2, seed=7)
    resumed.load_state_dict(first.state_dict())
    assert [resumed.encode(x, key="a").to_bytes() for x in xs[3:]] == ref_bytes[3:]
    with pytest.raises(StateError):
        resumed.encode(torch.randn(20, 31), key="a")  # Q is 30 x 2, this needs 31 x 2
    resumed.encode(torch.randn(20, 31), key="b")  # another key is fine
    resumed.reset_state()
    assert resumed.state_dict() == {}
    with pytest.raises(StateError):
        resumed.load_state_dict({"p/a": torch.zeros(2, 2)})


@pytest.mark.parametrize("bad", [dict(rank=0), dict(rank=2.0), dict(rank=True), dict(warm_start=1), dict(seed=-1)])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        PowerSGD(**bad)


# -- hostile payloads --------------------------------------------------------------------------


def test_hostile_payloads_raise_corrupt_payload_error():
    codec = PowerSGD(rank=4)
    x = torch.randn(30, 20)
    p = codec.encode(x)
    hdr, pp, qq = p.sections

    def rebuild(*secs):
        return Payload.from_bytes(Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs)).to_bytes())

    t = lambda *v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    cases = [
        (t(20, 30, 4), pp, qq),  # dims swapped: section lengths no longer match
        (t(60, 10, 4), torch.zeros(240), torch.zeros(40)),  # another valid view of 600 elements (see below)
        (t(30, 20, 5), torch.zeros(150), torch.zeros(100)),  # rank above the codec's
        (t(30, 20, 3), torch.zeros(90), torch.zeros(60)),  # rank below min(n, m, rank): an encoder would use 4
        (t(30, 21, 4), pp, qq),  # n m != numel
        (t(-30, -20, 4), pp, qq),  # negative dims
        (t(30, 20), pp, qq),  # short header
        (hdr.to(torch.int32), pp, qq),  # header dtype
        (hdr, pp[:-1], qq),  # P too short
        (hdr, pp, qq.double()),  # P and Q of different dtypes
        (hdr, pp, qq.to(torch.int32)),  # integer Q
        (hdr, pp),  # missing Q
        (hdr, pp, torch.full_like(qq, float("nan"))),  # non-finite
        (hdr, torch.full_like(pp, float("inf")), qq),  # non-finite P alone: caught on P Q^T
        (t(600, 1, 0), pp),  # uncompressed flag, wrong length
        (t(599, 1, 0), torch.zeros(600)),  # uncompressed flag, wrong numel
        (t(600, 1, 0), torch.zeros(600, dtype=torch.int32)),  # uncompressed, integer values
    ]
    # (60, 10, 4): 60*10 = 600 and (60+10)*4 < 600, so it is a layout an encoder could write for a
    # (60, 10) tensor of the same numel: decode accepts it (it cannot know the original shape).
    ok = codec.decode(rebuild(*cases.pop(1)))
    assert ok.shape == x.shape
    for j, secs in enumerate(cases):
        with pytest.raises(CorruptPayloadError):
            codec.decode(rebuild(*secs))
    fine = codec.decode(rebuild(t(600, 1, 0), torch.zeros(600)))  # a valid uncompressed layout
    assert torch.equal(fine, torch.zeros(30, 20))


def test_factors_whose_product_overflows_raise_and_safe_ones_decode_into_a_buffer():
    """The decode's finiteness comes from a bound on the factors: finite P and Q whose product
    overflows float32 still raise (the result is checked when the bound fails), with and without
    ``out``; a valid payload decodes into ``out`` with the bits of the allocating decode."""
    codec = PowerSGD(rank=4)
    x = torch.randn(30, 20)
    p = codec.encode(x)
    hdr, pp, qq = p.sections
    out = torch.empty(30, 20)
    assert torch.equal(codec.decode(p, out=out).view(torch.int32), codec.decode(p).view(torch.int32))
    huge = Payload.from_bytes(Payload(p.codec_id, p.dtype, p.shape, p.params,
                                      (hdr, torch.full_like(pp, 1e30), torch.full_like(qq, 1e30))).to_bytes())
    for target in (None, out):
        with pytest.raises(CorruptPayloadError):
            codec.decode(huge, out=target)
    # beyond the bound (4 x 1e19 x 1e19 > half the float32 maximum), yet finite: one column each
    one_column = lambda t: torch.zeros_like(t).view(-1, 4).index_fill_(1, torch.tensor([0]), 1e19).reshape(-1)  # noqa: E731
    large = Payload.from_bytes(Payload(p.codec_id, p.dtype, p.shape, p.params,
                                       (hdr, one_column(pp), one_column(qq))).to_bytes())
    assert torch.equal(codec.decode(large, out=out), torch.full((30, 20), 1e38))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orthogonalize_is_bitwise_linalg_qr_with_nonnegative_r_diagonal(dtype):
    """orthogonalize_ calls geqrf + householder_product directly (what linalg.qr runs, without its
    triu): the result must be linalg.qr's Q with columns flipped where R's diagonal is negative,
    bit for bit, for single, batched, rank-deficient and zero inputs."""
    g = torch.Generator().manual_seed(3)
    cases = [
        torch.randn(50, 4, generator=g, dtype=dtype),
        torch.randn(3, 20, 3, generator=g, dtype=dtype),
        torch.randn(30, 1, generator=g, dtype=dtype).repeat(1, 4),  # rank 1
        torch.zeros(10, 2, dtype=dtype),
    ]
    for m in cases:
        q, r = torch.linalg.qr(m, mode="reduced")
        sign = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
        sign = torch.where(sign == 0, torch.ones_like(sign), sign)
        expect = q * sign.unsqueeze(-2)
        got = orthogonalize_(m.clone())
        assert torch.equal(got, expect)
        eye = torch.eye(m.shape[-1], dtype=dtype).expand(got.shape[:-2] + (m.shape[-1], m.shape[-1]))
        assert torch.allclose(got.transpose(-2, -1) @ got, eye, atol=1e-5)


def test_small_tensors_run_on_one_thread_and_the_setting_is_restored(monkeypatch):
    """threads_for: one thread inside the block for small CPU tensors only; encode and decode
    leave torch's thread count as they found it, also when they raise; results agree with the
    all-threads path (GEMM sums may be ordered differently, so to rounding, not bitwise)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        limit = powersgd_module.single_thread_limit()
        with threads_for(limit, torch.device("cpu")):
            assert torch.get_num_threads() == 1
        with threads_for(limit + 1, torch.device("cpu")):
            assert torch.get_num_threads() == 2
        with pytest.raises(KeyError), threads_for(10, torch.device("cpu")):
            raise KeyError("inside")
        assert torch.get_num_threads() == 2
        x = torch.randn(64, 3, 3, 3)
        one = PowerSGD(rank=4)
        p1 = one.encode(x, key="k")
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(powersgd_module, "SINGLE_THREAD_NUMEL_FIXED", 0)
        every = PowerSGD(rank=4)
        p2 = every.encode(x, key="k")
        for a, b in zip(p1.sections, p2.sections):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(one.decode(p1), every.decode(p2))
        with pytest.raises(CorruptPayloadError):
            one.decode(Payload(p1.codec_id, p1.dtype, p1.shape, p1.params,
                               (p1.sections[0], p1.sections[1], torch.full_like(p1.sections[2], float("nan")))))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_one_thread_limit_follows_the_load(monkeypatch):
    """Busy (1-minute load at least twice the CPU count): matrices up to 2**20 on one thread; not
    busy, or no load average: up to 2**16; GCBENCH_POWERSGD_1T's value whatever the load. A reading
    is reused for a second."""
    monkeypatch.setattr(powersgd_module, "SINGLE_THREAD_NUMEL_FIXED", None)
    monkeypatch.setattr(powersgd_module.os, "cpu_count", lambda: 2)
    clock = [100.0]
    monkeypatch.setattr(powersgd_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(powersgd_module, "load_reading", [-1e9, 0.0])  # no reading yet

    def load(value):
        def read():
            if value is None:
                raise OSError("no load average here")
            return (value, value, value)
        monkeypatch.setattr(powersgd_module.os, "getloadavg", read)
        clock[0] += 2.0  # past the reuse window

    for value, want in ((4.0, 1 << 20), (3.9, 1 << 16), (1.0, 1 << 16), (None, 1 << 16), (6.0, 1 << 20)):
        load(value)
        assert powersgd_module.single_thread_limit() == want, value
    monkeypatch.setattr(powersgd_module.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert powersgd_module.single_thread_limit() == 1 << 20  # within the second: the busy reading still holds
    monkeypatch.setattr(powersgd_module, "SINGLE_THREAD_NUMEL_FIXED", 123)
    assert powersgd_module.single_thread_limit() == 123


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [(0, 0), (37, 11), (63, 39)])
def test_a_compressed_matrix_is_checked_by_its_q_with_the_input_error(bad, where, device):
    """No pass over the matrix: Q = M^T P carries any NaN or Inf of M, and the error is then the
    input's (NonFiniteGradientError, not an overflow), with no warm start stored and the random
    sequence where it was: the next clean encode equals a fresh codec's."""
    from gcbench.compressors import NonFiniteGradientError

    x = torch.randn(64, 40, generator=torch.Generator().manual_seed(1)).to(device)
    codec = PowerSGD(rank=4)
    y = x.clone()
    y[where] = bad
    with pytest.raises(NonFiniteGradientError):
        codec.encode(y, key="k")
    fresh = PowerSGD(rank=4)  # a stored warm start or a moved generator would give other bytes
    assert codec.encode(x, key="k").to_bytes() == fresh.encode(x, key="k").to_bytes()
