"""Edge cases of 3LC, QSGD, ZipML, signSGD, random-k and bit packing.

Each test pins one documented property on a small, seeded input: ties of 3LC's quantizer on strided
input and its sparsity range; the first error-feedback step of 3LC and signSGD, which must not write
into the caller's gradient; the accuracy of QSGD's normaliser for tiny buckets and its max-norm buckets
of zeros and subnormals; ZipML's float64 range and its grid for ranges wider than float32; random-k's
float64 values; and bit unpacking's refusal of a negative value count.
"""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import CorruptPayloadError, InvalidParameterError, Payload
from gcbench.compressors.codecs.qsgd import QSGD
from gcbench.compressors.codecs.randomk import RandomK
from gcbench.compressors.codecs.sign import Sign
from gcbench.compressors.codecs.threelc.codec import ThreeLC, quantize_3value
from gcbench.compressors.codecs.zipml import ZipML
from gcbench.compressors.wire.bitpack import unpack_bits

# --- 3LC --------------------------------------------------------------------------------------------


def test_3lc_quantization_of_a_strided_view_equals_the_contiguous_one_ties_included() -> None:
    """A strided (non-contiguous) 1-D view quantizes exactly as its contiguous copy: values at exactly
    ``-M/2`` and ``+M/2`` go to 0, the extremes to -1 and +1."""
    base = torch.tensor([-1.0, 9.0, 2.0, 9.0, 1.0, 9.0, -2.0, 9.0, 0.5, 9.0, -0.5, 9.0])
    view = base[::2]  # [-1, 2, 1, -2, 0.5, -0.5]: M = 2, ties at -1 and +1
    assert not view.is_contiguous()
    trits, m = quantize_3value(view)
    assert m == 2.0
    assert trits.tolist() == [0, 1, 0, -1, 0, 0]
    ref, m_ref = quantize_3value(view.contiguous())
    assert m_ref == m and torch.equal(trits, ref)


@pytest.mark.parametrize("sparsity", [0.99, 2.0, 2.5])
def test_3lc_quantize_refuses_a_sparsity_multiplier_outside_one_to_two(sparsity: float) -> None:
    """``quantize_3value`` takes the multiplier ``s`` in ``[1, 2)`` only, as the codec does."""
    with pytest.raises(InvalidParameterError):
        quantize_3value(torch.randn(10), sparsity)


@pytest.mark.parametrize(
    "codec", [ThreeLC(), ThreeLC(sparsity=1.5, zero_run=False), Sign(), Sign(scale="mean_abs")], ids=repr
)
@pytest.mark.parametrize("n", [13, 1000])
def test_first_feedback_step_leaves_the_gradient_alone(codec, n: int) -> None:
    """``encode_with_feedback(g, None)`` (the first step, no memory yet) sends what ``encode(g)`` sends,
    returns a new residual ``g - decode(payload)`` and leaves the caller's gradient ``g`` as it was."""
    g = torch.randn(n, generator=torch.Generator().manual_seed(n))
    before = g.clone()
    sections, residual = codec.encode_with_feedback(g, None)
    assert torch.equal(g, before)
    assert residual.data_ptr() != g.data_ptr()
    payload = codec.payload_of(before, sections)
    assert payload.to_bytes() == codec.encode(before).to_bytes()
    assert torch.equal(residual, before - codec.decode(payload))


# --- QSGD -------------------------------------------------------------------------------------------


def test_qsgd_tiny_bucket_norms_are_the_exact_l2_norm_rounded_up() -> None:
    """Buckets whose float32 squares underflow (values around 1e-22) still send their exact l2 norm:
    never below it (so no level clips) and within float32 rounding of it."""
    g = torch.Generator().manual_seed(3)
    d = 4
    x = torch.randn(64 * d, generator=g) * 1e-22
    x[::d] = 3e-22  # one value whose square alone is subnormal in float32
    p = QSGD(levels=3, bucket_size=d).encode(x)
    norms = p.sections[0].double()
    exact = torch.linalg.vector_norm(x.double().view(-1, d), dim=1)
    assert torch.all(norms >= exact)
    assert torch.all(norms <= exact * (1 + 2.0**-22))
    assert torch.all(norms >= x.abs().view(-1, d).amax(1).double())


def test_qsgd_max_norm_buckets_of_zeros_and_subnormals_decode_to_neighbouring_levels() -> None:
    """With ``norm="max"``, a bucket of zeros decodes to zeros and a bucket of subnormal values to
    values within one level of the input, of the same sign or zero; every decoded value is finite."""
    x = torch.tensor([0.0, 0.0, 0.0, 0.0, 1e-45, -1e-45, 3e-45, 0.0, 1.0, -2.0, 0.5, 0.25])
    for seed in range(4):
        codec = QSGD(levels=3, bucket_size=4, norm="max", seed=seed)
        p = codec.encode(x)
        out = codec.decode(p)
        assert torch.all(torch.isfinite(out))
        assert torch.equal(out[:4], torch.zeros(4))
        step = p.sections[0].double().repeat_interleave(4) / 3
        assert torch.all((out.double() - x.double()).abs() <= step * (1 + 1e-6))
        assert torch.all(out.double() * x.double() >= 0)


# --- ZipML ------------------------------------------------------------------------------------------


def test_zipml_float64_range_covers_a_maximum_that_float32_rounds_down() -> None:
    """A float64 maximum whose nearest float32 lies below it (0.7) is rounded up: the payload's range
    covers every input value."""
    x = torch.tensor([0.1, 0.25, 0.7], dtype=torch.float64)
    assert float(torch.tensor(0.7, dtype=torch.float32)) < 0.7
    p = ZipML(bits=4).encode(x)
    lo, hi = p.sections[0].double().tolist()
    assert lo <= 0.1 and hi >= 0.7
    assert hi == pytest.approx(0.7, rel=1e-7)


def test_zipml_range_wider_than_float32_keeps_values_on_neighbouring_grid_points() -> None:
    """A range wider than the float32 maximum (-3e38 .. 3e38) still puts every value on one of the two
    grid points around it: the decoded value is within one step of the input."""
    x = torch.tensor([-3e38, 3e38, 0.0, 1e38, -1e38, 2e38])
    step = 6e38 / 255
    for seed in range(3):
        codec = ZipML(bits=8, seed=seed)
        out = codec.decode(codec.encode(x))
        assert torch.all(torch.isfinite(out))
        assert torch.all((out.double() - x.double()).abs() <= step * (1 + 1e-5)), out


# --- random-k ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", ["uniform", "stratified"])
def test_randomk_sends_float64_values_of_float64_input_exactly(sampling: str) -> None:
    """float64 input travels as float64 values: the kept coordinates decode to the input bit for bit,
    digits beyond float32's precision included."""
    x = 1.0 + torch.arange(1, 201, dtype=torch.float64) * 1e-12
    codec = RandomK(ratio=0.1, seed=5, sampling=sampling)
    p = Payload.from_bytes(codec.encode(x).to_bytes())
    assert p.sections[1].dtype == torch.float64
    out = codec.decode(p)
    assert out.dtype == torch.float64
    kept = out != 0
    assert int(kept.sum()) == 20
    assert torch.equal(out[kept], x[kept])


# --- bit packing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 7, 12])
@pytest.mark.parametrize("n", [-1, -3, -8])
def test_unpack_bits_refuses_a_negative_value_count(bits: int, n: int) -> None:
    """A negative value count is a corrupt header: ``unpack_bits`` raises CorruptPayloadError for it
    (never an IndexError), whatever bytes come with it."""
    for data in (torch.zeros(0, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)):
        with pytest.raises(CorruptPayloadError):
            unpack_bits(data, bits, n)
