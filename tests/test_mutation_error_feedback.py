"""Error feedback around 3LC: from the second step on, the scale ``M`` is taken from the largest
*magnitude* of the corrected gradient ``g + e``, also when that largest magnitude is a negative
value, and matches what the codec alone sends for ``g + e``."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import ErrorFeedback
from gcbench.compressors.codecs.threelc.codec import ThreeLC


@pytest.mark.parametrize("n", [7, 1000])
def test_second_step_scale_is_the_largest_magnitude_of_the_corrected_gradient(n: int) -> None:
    """The most negative value dominates ``g + e``: ``M`` must cover it, not only the largest value."""
    gen = torch.Generator().manual_seed(1)
    codec = ThreeLC()
    ef = ErrorFeedback(codec)
    ef.encode(torch.randn(n, generator=gen), key="w")
    g = torch.randn(n, generator=gen)
    g[n // 2] = -50.0  # the largest magnitude, and negative
    corrected = ef.corrected(g, key="w")
    payload = ef.encode(g, key="w")
    m = float(payload.sections[0][0])
    assert m == float(torch.tensor(float(corrected.abs().max()), dtype=torch.float32))
    # the same bytes as the codec alone on g + e, and every decoded value within M
    alone = codec.encode(corrected)
    assert payload.to_bytes() == alone.to_bytes()
    assert bool((ef.decode(payload).abs() <= m).all())
    assert torch.allclose(ef.residual("w"), corrected - codec.decode(alone))
