"""Bad input to PowerSGD's distributed rounds, DGC under inference mode and the shared checks of
the codec contract (``combine``, ``decode(out=...)``, sparse COO input): a typed error, raised
before any state changes, and valid input unaffected."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import Payload
from gcbench.compressors.errors import (
    NonFiniteGradientError,
    NumericOverflowError,
    PayloadMismatchError,
    UnsupportedInputError,
)
from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.workers import CodecSpec, WorkerCodecs

# -- PowerSGD's rounds (the DDP hook's and the simulated cluster's protocol) ------------------------

SHAPES = [(30, 20), (20,)]
KEYS = ["w", "b"]


def _aggregator(W: int, error_feedback: bool, rank: int = 2) -> Aggregator:
    spec = CodecSpec(name="powersgd", params={"rank": rank}, error_feedback=error_feedback)
    return Aggregator([WorkerCodecs(spec, r) for r in range(W)], LocalCollective(W))


def _grads(W: int, seed: int, scale: float = 1.0) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) * scale for s in SHAPES] for _ in range(W)]


def _codec_states(agg: Aggregator) -> list[dict[str, torch.Tensor]]:
    return [w.codec_for("w").state_dict() for w in agg.workers]


def _same_states(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def _with_nan(grads: list[list[torch.Tensor]], worker: int, j: int) -> list[list[torch.Tensor]]:
    bad = [[t.clone() for t in row] for row in grads]
    bad[worker][j].view(-1)[3] = float("nan")
    return bad


@pytest.mark.parametrize("error_feedback", [False, True])
@pytest.mark.parametrize("bad_step", [0, 2])
@pytest.mark.parametrize("where", ["matrix", "dense", "overflow"])
def test_powersgd_rounds_refuse_bad_gradients_and_keep_their_state(error_feedback, bad_step, where):
    """NaN in a worker's matrix or dense tensor raises the input's NonFiniteGradientError, finite
    values whose factors overflow NumericOverflowError; warm starts, residuals and random draws are
    as they were, so the following clean steps give the bytes of a run that never saw the bad one."""
    W = 2
    ours, ref = _aggregator(W, error_feedback), _aggregator(W, error_feedback)
    for step in range(bad_step):
        grads = _grads(W, seed=step)
        ours.aggregate(grads, KEYS, step=step)
        ref.aggregate(grads, KEYS, step=step)
    before = _codec_states(ours)
    if where == "overflow":
        # |M| up to 3.1e38 (finite): P = M Q's entries have a spread of about 4.5e38, so many exact
        # values lie beyond float32's range and overflow in any summation order. At 3e37 only an entry
        # near the edge did, and whether it did depended on the GEMM's order (AVX2 or AVX-512 kernels).
        bad, error = _grads(W, seed=50, scale=1e38), NumericOverflowError
    else:
        bad, error = _with_nan(_grads(W, seed=50), 1, 0 if where == "matrix" else 1), NonFiniteGradientError
    with pytest.raises(error) as raised:
        ours.aggregate(bad, KEYS, step=bad_step)
    if where != "overflow":
        assert not isinstance(raised.value, NumericOverflowError)
        assert "non-finite value" in str(raised.value)
    assert _same_states(_codec_states(ours), before)
    for step in range(bad_step, bad_step + 2):
        grads = _grads(W, seed=100 + step)
        out = ours.aggregate(grads, KEYS, step=step + 1)
        expected = ref.aggregate(grads, KEYS, step=step)
        assert all(bool(torch.isfinite(t).all()) for t in out)
        assert all(torch.equal(a, b) for a, b in zip(out, expected))
    assert _same_states(_codec_states(ours), _codec_states(ref))


def test_powersgd_rounds_raise_what_encode_raises_for_one_worker():
    grads = _grads(1, seed=7)
    bad = _with_nan(grads, 0, 0)
    with pytest.raises(NonFiniteGradientError) as from_rounds:
        _aggregator(1, False).aggregate(bad, KEYS, step=0)
    with pytest.raises(NonFiniteGradientError) as from_encode:
        compressors.get("powersgd", rank=2).encode(bad[0][0], key="w")
    assert type(from_rounds.value) is type(from_encode.value)
    assert str(from_rounds.value) == str(from_encode.value)


def test_powersgd_rounds_give_fp16_updates_that_saturate():
    """A finite float16 gradient whose rank-1 update exceeds float16's range (a projection can exceed
    the largest entry it projects) gets float16's largest value, not Inf (the decode's saturating cast)."""
    d = torch.full((30,), 0.05)
    d[0] = 1.0
    g = torch.stack([d] * 19 + [torch.ones(30)], 1) * 65504.0
    grads = [[g.half(), torch.zeros(20, dtype=torch.float16)]]
    out = _aggregator(1, False, rank=1).aggregate(grads, KEYS, step=0)
    assert bool(torch.isfinite(out[0]).all()) and float(out[0].abs().max()) == 65504.0


# -- DGC under torch.inference_mode --------------------------------------------------------------


def _dgc_run(inference: bool, stateful_codec: str = "dgc") -> list[bytes]:
    g = torch.Generator().manual_seed(3)
    a, b, d = (torch.randn(500, generator=g) for _ in range(3))
    c = compressors.get(stateful_codec, ratio=0.02)
    out = [c.encode(a, key="w").to_bytes()]
    if inference:
        with torch.inference_mode():
            out.append(c.encode(b, key="w").to_bytes())
    else:
        out.append(c.encode(b, key="w").to_bytes())
    out.append(c.encode(d, key="w").to_bytes())
    with torch.inference_mode():  # a state loaded inside inference mode is usable outside it
        c.load_state_dict(c.state_dict())
    out.append(c.encode(a, key="w").to_bytes())
    return out


def test_dgc_encodes_under_inference_mode_with_the_same_bytes():
    assert _dgc_run(inference=True) == _dgc_run(inference=False)


def test_dgc_first_encode_under_inference_mode_keeps_normal_state():
    c = compressors.get("dgc", ratio=0.02)
    x = torch.randn(500)
    with torch.inference_mode():
        c.encode(x, key="w")
    assert not any(t.is_inference() for t in c.state_dict().values())
    c.encode(x, key="w")  # the in-place update outside inference mode


# -- Codec.combine -------------------------------------------------------------------------------


def _randomk_payloads() -> tuple[compressors.Codec, Payload, Payload]:
    c, worker = compressors.get("randomk", ratio=0.1), compressors.get("randomk", ratio=0.1)
    return c, c.encode(torch.randn(200)), worker.encode(torch.randn(200) * 2)  # the same seed: shared coordinates


def _retyped(p: Payload, dtype: torch.dtype) -> Payload:
    """``p`` with its summed section's values in ``dtype`` (same length), as parsed from bytes."""
    i = max(range(len(p.sections)), key=lambda k: p.sections[k].is_floating_point())
    sections = tuple(s.to(dtype) if k == i else s for k, s in enumerate(p.sections))
    return Payload.from_bytes(dataclasses.replace(p, sections=sections, _cache={}).to_bytes())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int32])
@pytest.mark.parametrize("first", [True, False])
def test_combine_refuses_sections_of_another_dtype(dtype, first):
    c, p, q = _randomk_payloads()
    other = _retyped(q, dtype)
    with pytest.raises(PayloadMismatchError, match="section"):
        c.combine([other, p] if first else [p, other])


@pytest.mark.parametrize("bad", [["x"], "x", 5, None])
def test_combine_refuses_what_is_not_a_payload(bad):
    c, p, _ = _randomk_payloads()
    with pytest.raises(PayloadMismatchError):
        c.combine([p, *bad] if isinstance(bad, list) else bad)
    with pytest.raises(PayloadMismatchError):
        c.combine(p)


def test_combine_refuses_another_codecs_payloads():
    c, _, _ = _randomk_payloads()
    other = compressors.get("randomk", ratio=0.2)
    p = other.encode(torch.randn(200))
    with pytest.raises(PayloadMismatchError):
        c.combine([p, p])


def test_combine_of_matching_payloads_is_unchanged():
    c, p, q = _randomk_payloads()
    total = c.combine([p, q])
    assert torch.equal(c.decode(total), c.decode(p) + c.decode(q))


# -- decode(out=...) -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", compressors.names())
def test_decode_refuses_an_out_that_requires_grad(name):
    c = compressors.get(name)
    x = torch.randn(16, 8)
    payload = c.encode(x, key="k")
    out = torch.zeros(16, 8, requires_grad=True)
    with pytest.raises(UnsupportedInputError, match="grad"):
        c.decode(payload, out=out)
    assert not out.detach().any()


def test_decode_refuses_an_inference_out_outside_inference_mode():
    c = compressors.get("qsgd")
    payload = c.encode(torch.randn(64))
    with torch.inference_mode():
        out = torch.zeros(64)
    with pytest.raises(UnsupportedInputError, match="inference"):
        c.decode(payload, out=out)
    with torch.inference_mode():
        assert torch.equal(c.decode(payload, out=out), c.decode(payload))


# -- sparse COO input ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["topk", "qsgd", "powersgd", "identity"])
def test_sparse_input_too_large_to_densify_is_refused(name):
    huge = torch.sparse_coo_tensor([[3]], [1.0], (2**30,), check_invariants=True)
    with pytest.raises(UnsupportedInputError, match="sparse"):
        compressors.get(name).encode(huge)
    with pytest.raises(UnsupportedInputError, match="sparse"):
        compressors.ErrorFeedback(compressors.get(name)).encode(huge, key="k")


def test_sparse_native_codec_takes_a_large_key_space():
    huge = torch.sparse_coo_tensor([[3]], [1.0], (2**30,), check_invariants=True)
    c = compressors.get("sketchml")
    out = c.decode(c.encode(huge))
    assert out.layout == torch.sparse_coo and out.shape == huge.shape


@pytest.mark.parametrize("name", ["sketchml", "topk", "qsgd"])
def test_hybrid_sparse_input_is_refused(name):
    hybrid = torch.randn(4, 3).to_sparse(1)
    assert hybrid.dense_dim() == 1
    with pytest.raises(UnsupportedInputError, match="dense dimension"):
        compressors.get(name).encode(hybrid)


def test_sparse_input_within_the_limit_still_encodes():
    x = torch.randn(8, 6)
    x[x.abs() < 0.5] = 0
    c = compressors.get("topk", ratio=0.5)
    assert torch.equal(c.decode(c.encode(x.to_sparse())).to_dense(), c.decode(c.encode(x)))
