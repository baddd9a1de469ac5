"""DGC: momentum correction, accumulation and masking against a naive numpy loop; state handling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, ErrorFeedback, InvalidParameterError, Payload, StateError
from gcbench.compressors.codecs.dgc import DGC
from gcbench.compressors.codecs.topk import TopK


def naive_k(n: int, ratio: float) -> int:
    return min(n, max(1, int(round(ratio * n))))


def grads(n: int, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # a persistent per-coordinate bias makes some coordinates build up in v over steps
    bias = rng.standard_normal(n).astype(np.float32) * np.float32(0.3)
    return [(rng.standard_normal(n).astype(np.float32) + bias) for _ in range(steps)]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("seed", [0, 1])
def test_dgc_matches_a_naive_loop_over_steps(momentum, seed):
    """u = m u + g; v = v + u; send v at a top set of |v|; zero u and v there (Lin et al. 2018)."""
    n, ratio, steps = 5000, 0.01, 12
    k = naive_k(n, ratio)
    codec = DGC(ratio=ratio, momentum=momentum, seed=seed)
    u = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    m = np.float32(momentum)
    for t, g in enumerate(grads(n, steps, seed)):
        u = m * u + g
        v = v + u
        p = codec.encode(torch.from_numpy(g).reshape(50, 100), key="layer")
        idx = p.sections[0].numpy().astype(np.int64)
        vals = p.sections[1].numpy()
        assert 1 <= idx.size <= k and np.all(np.diff(idx) > 0)
        assert idx.size >= 0.8 * k, f"step {t}: only {idx.size} of k={k} selected"
        np.testing.assert_allclose(vals, v[idx], rtol=1e-5, atol=1e-6)
        rest = np.ones(n, bool)
        rest[idx] = False
        assert np.abs(v[idx]).min() >= np.abs(v[rest]).max() - 1e-5, f"step {t}: not a top set of |v|"
        out = codec.decode(p).reshape(-1).numpy()
        expect = np.zeros(n, np.float32)
        expect[idx] = v[idx]
        np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)
        u[idx] = 0  # momentum factor masking
        v[idx] = 0
    state = codec.state_dict()
    np.testing.assert_allclose(state["u/layer"].numpy(), u, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state["v/layer"].numpy(), v, rtol=1e-5, atol=1e-5)


def test_tiny_tensors_use_exact_selection_and_match_the_naive_loop_exactly():
    """n=150, ratio=0.01 -> k=2 and DGC samples everything: selection is exact top-2 of |v|."""
    n, k = 150, 2
    codec = DGC(ratio=0.01, momentum=0.5)
    u = np.zeros(n)
    v = np.zeros(n)
    for g in grads(n, 8, 3):
        g64 = g.astype(np.float64)
        u = 0.5 * u + g64
        v = v + u
        top = np.sort(np.argsort(-np.abs(v), kind="stable")[:k])
        p = codec.encode(torch.from_numpy(g64))  # float64 input: float64 state and values
        np.testing.assert_array_equal(p.sections[0].numpy(), top)
        np.testing.assert_allclose(p.sections[1].numpy(), v[top], rtol=1e-12)
        u[top] = 0
        v[top] = 0


def test_momentum_zero_is_error_feedback_top_k():
    """With m = 0, DGC's v is error-feedback memory: same outputs as ErrorFeedback(TopK exact) on a
    tensor small enough for exact selection."""
    dgc = DGC(ratio=0.01, momentum=0.0)
    ef = ErrorFeedback(TopK(ratio=0.01))
    for g in grads(150, 10, 4):
        x = torch.from_numpy(g.astype(np.float64))
        assert torch.allclose(dgc.roundtrip(x, key="w"), ef.roundtrip(x, key="w"), rtol=1e-12, atol=1e-12)


def test_keys_are_independent_and_shapes_are_checked():
    codec = DGC(ratio=0.1)
    a, b = torch.randn(40), torch.randn(40)
    codec.encode(a, key="a")
    solo = DGC(ratio=0.1)
    solo.encode(a, key="a")
    codec.encode(b, key="b")
    state, ref = codec.state_dict(), solo.state_dict()
    assert torch.equal(state["u/a"], ref["u/a"]) and torch.equal(state["v/a"], ref["v/a"])
    with pytest.raises(StateError):
        codec.encode(torch.randn(41), key="a")
    with pytest.raises(StateError):
        codec.encode(torch.randn(40, dtype=torch.float64), key="a")  # float64 work dtype vs float32 state
    codec.reset_state()
    assert codec.state_dict() == {}


def test_state_dict_resumes_the_exact_byte_sequence():
    xs = [torch.randn(20_000, generator=torch.Generator().manual_seed(s)) for s in range(6)]
    ref = DGC(ratio=0.01, seed=9)
    ref_bytes = [ref.encode(x, key="w").to_bytes() for x in xs]
    first = DGC(ratio=0.01, seed=9)
    for x in xs[:3]:
        first.encode(x, key="w")
    resumed = DGC(ratio=0.01, seed=9)
    resumed.load_state_dict(first.state_dict())
    assert [resumed.encode(x, key="w").to_bytes() for x in xs[3:]] == ref_bytes[3:]
    with pytest.raises(StateError):
        resumed.load_state_dict({"u/w": torch.zeros(3)})  # u without v


def test_decode_is_stateless():
    worker = DGC(ratio=0.01)
    x = torch.randn(3000)
    worker.encode(x, key="w")
    p = worker.encode(x, key="w")
    assert torch.equal(DGC(ratio=0.01).decode(Payload.from_bytes(p.to_bytes())), worker.decode(p))


@pytest.mark.parametrize("bad", [dict(momentum=1.0), dict(momentum=-0.1), dict(momentum="0.9"), dict(ratio=0.0)])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(InvalidParameterError):
        DGC(**bad)


def test_hostile_payloads_raise_corrupt_payload_error():
    codec = DGC(ratio=0.01)
    p = codec.encode(torch.randn(2000))
    idx, vals = p.sections  # k = 20

    def rebuild(i, v):
        return Payload.from_bytes(Payload(p.codec_id, p.dtype, p.shape, p.params, (i, v)).to_bytes())

    cases = [
        (torch.cat([idx[:-1], torch.tensor([2000], dtype=torch.int32)]), vals),  # out of range
        (torch.cat([idx[:1], idx[:-1]]), vals),  # repeated
        (idx[:0], vals[:0]),  # nothing selected
        (torch.arange(21, dtype=torch.int32), torch.ones(21)),  # more than k
        (idx, torch.full_like(vals, float("inf"))),
    ]
    for i, v in cases:
        with pytest.raises(CorruptPayloadError):
            codec.decode(rebuild(i, v))


def test_fp16_values_saturate_instead_of_overflowing():
    codec = DGC(ratio=0.5, momentum=0.9)
    x = torch.full((4,), 60000.0, dtype=torch.float16)
    x[1] = 1.0
    codec.encode(x, key="w")  # sends two coordinates; the other two keep accumulating in float32
    out = codec.roundtrip(x, key="w")  # v = 60000 + (0.9*60000 + 60000) > 65504 at the unsent ones
    assert bool(torch.isfinite(out).all()) and float(out.max()) == 65504.0


def test_bfloat16_values_beyond_range_saturate_like_float16():
    """The float32 accumulation of a bfloat16 input can outgrow bfloat16's range: the sent value
    saturates at bfloat16's largest (as float16's does at 65504) instead of becoming inf, which the
    contract's check refused only after the accumulation had been zeroed at the sent coordinates."""
    c = compressors.get("dgc", ratio=0.5, momentum=0.0)
    c.encode(torch.tensor([2.0**127, 3e38]).bfloat16(), key="a")
    out = c.decode(c.encode(torch.tensor([2.0**127 - 2.0**119, 0.0]).bfloat16(), key="a"))
    assert out.dtype == torch.bfloat16 and float(out.max()) == torch.finfo(torch.bfloat16).max
