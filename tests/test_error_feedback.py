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
