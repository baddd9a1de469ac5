"""ErrorFeedback's residual, reached through its public methods (what protocols and recorders use)."""

from __future__ import annotations

import pytest
import torch
from gcbench.compressors import ErrorFeedback, StateError, get


def test_corrected_is_what_encode_compresses_and_changes_nothing():
    ef = ErrorFeedback(get("signsgd"))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, generator=g), torch.randn(50, generator=g)
    assert torch.equal(ef.corrected(x, key="w"), x) and ef.residual("w") is None
    ef.encode(x, key="w")
    residual = ef.residual("w").clone()
    assert residual.abs().sum() > 0
    corrected = ef.corrected(y, key="w")
    assert torch.equal(corrected, y + residual) and torch.equal(ef.residual("w"), residual)  # not consumed
    payload = ef.encode(y, key="w")
    assert torch.equal(payload.sections[0], ef.codec.encode(corrected, key="w").sections[0])
    assert torch.allclose(ef.residual("w"), corrected - ef.decode(payload))


def test_residual_can_be_set_moved_and_checked():
    ef, other = ErrorFeedback(get("fp16")), ErrorFeedback(get("fp16"))
    ef.set_residual("w", torch.full((4,), 0.25))
    assert torch.equal(ef.corrected(torch.zeros(4), key="w"), torch.full((4,), 0.25))
    other.set_residual("w", ef.pop_residual("w"))
    assert ef.residual("w") is None and ef.pop_residual("w") is None
    assert torch.equal(other.residual("w"), torch.full((4,), 0.25))
    with pytest.raises(StateError):  # a residual of another shape is refused, not broadcast
        other.corrected(torch.zeros(5), key="w")


def _reference_steps(codec_name, xs, dtype, seed):
    """Error feedback by its definition, step by step, on the inner codec: ``c = float32(g) + e``, encode
    ``c`` saturated to the input's dtype, ``e = c - float32(decode)``."""
    from gcbench.compressors.numerics import saturating_cast

    codec = get(codec_name)
    inner = getattr(codec, "codec", codec)
    gen = torch.Generator().manual_seed(seed)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    e, out = None, []
    for x in xs:
        c = x.to(work) if e is None else x.to(work) + e
        p = inner.encode(saturating_cast(c, dtype), key="w", generator=gen if inner.stochastic else None)
        e = c - inner.decode(p).to(work)
        out.append((p.to_bytes(), e.clone()))
    return out


@pytest.fixture(params=[False, True], ids=["new-memory", "buffered"])
def buffered(request, monkeypatch):
    """Both sizes of error feedback's working tensors: below ``NEW_PAGES_MIN_BYTES`` (new tensors) and, with
    the threshold lowered to 0 for the test's small tensors, the buffered path (kept buffers, the residual
    updated in its own buffer)."""
    if request.param:
        from gcbench.compressors import error_feedback

        monkeypatch.setattr(error_feedback, "NEW_PAGES_MIN_BYTES", 0)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["signsgd", "3lc", "qsgd", "topk", "fp16", "powersgd"])
def test_16_bit_inputs_follow_the_definition_bit_for_bit(name, dtype, buffered):
    """The 16-bit path (widened in per-thread buffers, the decode into a 16-bit buffer) sends the bytes and
    keeps the residuals of the definition, step after step, near the 16-bit range's end too."""
    g = torch.Generator().manual_seed(4)
    top = float(torch.finfo(torch.float16).max)
    xs = [(torch.randn(12, 50, generator=g) * s).clamp(-top, top).to(dtype) for s in (1.0, 3.0, 60000.0, 0.5)]
    codec = get(name)
    ef = codec if isinstance(codec, ErrorFeedback) else ErrorFeedback(codec)
    gen = torch.Generator().manual_seed(9)
    want = _reference_steps(name, xs, dtype, 9)
    for step, (x, (wire, residual)) in enumerate(zip(xs, want)):
        p = ef.encode(x, key="w", generator=gen if ef.codec.stochastic else None)
        assert p.to_bytes() == wire, f"{name} {dtype} step {step}: other bytes"
        assert torch.equal(ef.residual("w").view(torch.int32), residual.view(torch.int32)), f"{name} step {step}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["signsgd", "qsgd", "topk", "randomk", "fp16", "identity", "powersgd"])
def test_buffered_steps_follow_the_definition_and_keep_earlier_payloads(name, dtype, buffered):
    """From a key's second encode on, a float32/float64 CPU input is corrected and decoded in per-thread
    buffers and the new residual copied over the old one: the definition's bytes and residuals, the
    residual's buffer kept (where no payload views it), and every payload sent earlier unchanged when its
    sections view the corrected tensor (identity, PowerSGD's vectors)."""
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(24, 40, generator=g, dtype=dtype) * s for s in (1.0, 3.0, 0.01, 2.0)]
    codec = get(name)
    ef = codec if isinstance(codec, ErrorFeedback) else ErrorFeedback(codec)
    gen = torch.Generator().manual_seed(9)
    want = _reference_steps(name, xs, dtype, 9)
    sent, buffers = [], []
    for step, (x, (wire, residual)) in enumerate(zip(xs, want)):
        p = ef.encode(x, key="w", generator=gen if ef.codec.stochastic else None)
        sent.append((p, [t.clone() for t in p.sections]))
        assert p.to_bytes() == wire, f"{name} {dtype} step {step}: other bytes"
        assert torch.equal(ef.residual("w"), residual) and ef.residual("w").dtype == dtype, f"{name} step {step}"
        buffers.append(ef.residual("w").data_ptr())
    assert all(all(map(torch.equal, p.sections, kept)) for p, kept in sent), f"{name}: a payload changed after later encodes"
    assert len(set(buffers[1:])) == 1 or not buffered, f"{name}: the residual was not updated in its own buffer"


def test_buffered_step_that_raises_leaves_the_residual_and_never_writes_its_input(buffered):
    """A corrected value that overflows raises with the residual as it was; an input that is the residual's
    own buffer is read, never written (the new residual goes into new memory)."""
    from gcbench.compressors import NumericOverflowError

    ef = ErrorFeedback(get("qsgd"))
    big = torch.full((300,), 3e38)
    ef.encode(big, key="w")
    ef.set_residual("w", torch.full((300,), 3e38))
    before = ef.residual("w").clone()
    with pytest.raises(NumericOverflowError):
        ef.encode(big, key="w")
    assert torch.equal(ef.residual("w"), before)
    ef.set_residual("w", torch.ones(300))
    x = ef.residual("w")
    kept = x.clone()
    ef.encode(x, key="w")
    assert torch.equal(x, kept) and ef.residual("w") is not x
