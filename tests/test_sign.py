"""signSGD / EF-signSGD: exact bits against a naive packer, sizes, contraction, error feedback."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import devices
from gcbench.compressors import (
    CorruptPayloadError,
    ErrorFeedback,
    InvalidParameterError,
    NonFiniteGradientError,
    Payload,
    decode,
    get,
)
from gcbench.compressors.codecs.sign import Sign
from hypothesis import given
from hypothesis import strategies as st


def naive_sign_bytes(x: list[float]) -> bytes:
    """Bit i % 8 of byte i // 8 is 1 when x_i >= 0 (sign(0) = +1), LSB first, zero padding."""
    out = bytearray(math.ceil(len(x) / 8))
    for i, v in enumerate(x):
        if v >= 0:
            out[i // 8] |= 1 << (i % 8)
    return bytes(out)


finite32 = st.floats(min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, width=32)


@given(st.lists(finite32, min_size=1, max_size=300))
def test_bits_match_naive_reference(values):
    x = torch.tensor(values, dtype=torch.float32)
    p = Sign().encode(x)
    assert len(p.sections) == 1
    assert bytes(p.sections[0].tolist()) == naive_sign_bytes(values)
    out = Sign().decode(p)
    assert out.tolist() == [1.0 if v >= 0 else -1.0 for v in values]


@given(st.lists(finite32, min_size=1, max_size=300))
def test_mean_abs_decode(values):
    x = torch.tensor(values, dtype=torch.float32)
    p = Sign(scale="mean_abs").encode(x)
    scale, bits = p.sections
    assert bytes(bits.tolist()) == naive_sign_bytes(values)
    expect = sum(abs(float(v)) for v in x) / len(values)
    assert scale.item() == pytest.approx(expect, rel=1e-5)
    out = Sign(scale="mean_abs").decode(p)
    assert torch.equal(out, torch.where(x >= 0, scale, -scale))


def test_mean_abs_scale_of_a_long_tensor_is_accurate():
    x = torch.randn(2**21 + 3, generator=torch.Generator().manual_seed(4))
    scale = Sign(scale="mean_abs").encode(x).sections[0].item()
    assert scale == pytest.approx(float(x.double().abs().mean()), rel=1e-6)


def test_sign_of_zero_is_plus_one():
    x = torch.tensor([0.0, -0.0, 1e-45, -1e-45, -1.0])
    assert Sign().roundtrip(x).tolist() == [1.0, 1.0, 1.0, -1.0, -1.0]


@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 1000, 1003])
def test_payload_sizes(n):
    x = torch.randn(n)
    p = Sign().encode(x)
    assert p.data_nbytes == math.ceil(n / 8)
    assert p.nbytes == math.ceil(n / 8) + p.overhead_nbytes == len(p.to_bytes())
    q = Sign(scale="mean_abs").encode(x)
    assert q.data_nbytes == math.ceil(n / 8) + 4
    assert [t.dtype for t in q.sections] == [torch.float32, torch.uint8]


@given(st.integers(0, 2**16), st.integers(1, 500))
def test_mean_abs_contraction_identity(seed, n):
    """||x - C(x)||^2 = ||x||^2 - ||x||_1^2 / d for C(x) = ||x||_1/d sign(x) (Karimireddy et al.)."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x[:: 3] *= 10.0
    c = Sign(scale="mean_abs").roundtrip(x)
    lhs = float(((x - c) ** 2).sum())
    l2, l1 = float((x**2).sum()), float(x.abs().sum())
    # the scale travels as float32: compare with its relative rounding (~6e-8) in mind
    assert lhs == pytest.approx(l2 - l1 * l1 / n, rel=1e-6, abs=1e-6 * l2)
    assert lhs <= l2 * (1 + 1e-6)


def test_plain_sign_is_not_contractive():
    x = torch.full((10,), 1e-3)
    assert float(((x - Sign().roundtrip(x)) ** 2).sum()) > float((x**2).sum())
    assert not Sign.contractive


def test_ef_signsgd_registry_entry_and_telescoping_sum():
    ef = get("ef-signsgd")
    assert isinstance(ef, ErrorFeedback) and isinstance(ef.codec, Sign) and ef.codec.scale == "mean_abs"
    assert isinstance(get("signsgd"), Sign) and get("signsgd").scale == "none"
    g = torch.Generator().manual_seed(0)
    n, steps = 512, 300
    total_g = torch.zeros(n, dtype=torch.float64)
    total_dec = torch.zeros(n, dtype=torch.float64)
    plain = torch.zeros(n, dtype=torch.float64)
    drift = torch.randn(n, generator=g) * 0.1
    for t in range(steps):
        grad = drift + torch.randn(n, generator=g)
        p = ef.encode(grad, key="w")
        total_g += grad.double()
        total_dec += ef.decode(p).double()
        plain += Sign(scale="mean_abs").roundtrip(grad).double()
        # telescoping: sum of decoded = sum of gradients - current memory
        if t in (0, 10, steps - 1):
            mem = ef.memory["w"].double()
            assert torch.allclose(total_dec, total_g - mem, atol=1e-4 * (t + 1))
    # the memory stays bounded, so the decoded sum tracks the true sum ...
    err_ef = float((total_g - total_dec).norm() / total_g.norm())
    err_plain = float((total_g - plain).norm() / total_g.norm())
    assert err_ef < 0.1
    # ... which the scaled sign alone (biased) does not
    assert err_plain > 3 * err_ef
    assert float(ef.memory["w"].norm()) < 5 * float(grad.norm())


def test_ef_memory_survives_bad_input():
    ef = get("ef-signsgd")
    ef.encode(torch.randn(10), key="a")
    before = ef.memory["a"].clone()
    with pytest.raises(NonFiniteGradientError):
        ef.encode(torch.tensor([float("nan")] * 10), key="a")
    assert torch.equal(ef.memory["a"], before)


def test_invalid_scale():
    with pytest.raises(InvalidParameterError):
        Sign(scale="l2")


def test_hostile_payloads():
    n = 13
    for codec in (Sign(), Sign(scale="mean_abs")):
        good = codec.encode(torch.randn(n))
        bits = good.sections[-1]
        padded = torch.cat([bits[:-1], bits[-1:] | 0x80])  # 13 bits: bits 5..7 of byte 1 are padding
        cases = [
            (*good.sections[:-1], padded),
            (*good.sections[:-1], bits[:-1]),
            (*good.sections[:-1], torch.cat([bits, bits])),
            (*good.sections[:-1], bits.to(torch.int8)),
            (),
        ]
        if codec.scale == "mean_abs":
            cases += [
                (torch.tensor([float("nan")]), bits),
                (torch.tensor([-1.0]), bits),
                (torch.tensor([float("inf")]), bits),
                (torch.tensor([1.0, 2.0]), bits),
                (bits,),
            ]
        else:
            cases += [(torch.tensor([1.0]), bits)]
        for sections in cases:
            payload = Payload(Sign.codec_id, torch.float32, (n,), codec.params, tuple(sections))
            with pytest.raises(CorruptPayloadError):
                codec.decode(payload)
            if sections:
                with pytest.raises(CorruptPayloadError):
                    decode(Payload.from_bytes(payload.to_bytes()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", ["none", "mean_abs"])
def test_other_float_dtypes(dtype, scale):
    x = torch.randn(77, generator=torch.Generator().manual_seed(3)).to(dtype)
    codec = Sign(scale=scale)
    p = codec.encode(x)
    assert bytes(p.sections[-1].tolist()) == naive_sign_bytes(x.double().tolist())
    out = codec.decode(p)
    assert out.dtype == dtype
    m = 1.0 if scale == "none" else float(x.double().abs().mean())
    expect = torch.where(x >= 0, 1.0, -1.0).double() * m
    assert torch.allclose(out.double(), expect, rtol=1e-2 if dtype != torch.float64 else 1e-6)


def test_float64_mean_beyond_float32_is_rejected():
    from gcbench.compressors import UnsupportedInputError

    with pytest.raises(UnsupportedInputError):
        Sign(scale="mean_abs").encode(torch.full((4,), 1e300, dtype=torch.float64))
    minus_one = torch.full((4,), -1.0, dtype=torch.float64)
    assert torch.equal(Sign().roundtrip(torch.full((4,), -1e300, dtype=torch.float64)), minus_one)


@pytest.mark.parametrize("device", devices())
def test_device_round_trip(device):
    x = torch.randn(1001, device=device)
    p = Sign(scale="mean_abs").encode(x)
    assert bytes(p.sections[1].cpu().tolist()) == naive_sign_bytes(x.cpu().tolist())
    out = Sign(scale="mean_abs").decode(p)
    assert out.device.type == device
    assert torch.equal(out.sign(), torch.where(x >= 0, 1.0, -1.0))
