"""The C decode of one-byte quantization codes and of TernGrad's trits (compressors/kernels/dequantize.py,
compressors/kernels/c/dequantize.c) against their torch references, bit for bit, and a run limited to
AVX2 (where the C decode, and Inductor's rounding with float32 row places, run) giving the eager bytes
and values."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys

import pytest
import torch
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.dequantize import DEQUANTIZE_C, dequantize_u16_c, dequantize_u8_c, trits_decode_c, unpack_bits_c
from gcbench.compressors.wire.bitpack import pack_bits, unpack_bits

pytestmark = pytest.mark.skipif(native.library(DEQUANTIZE_C) is None, reason="no C compiler here")


def _bits(t: torch.Tensor) -> list[int]:
    return t.view(torch.int32).tolist()


@pytest.mark.parametrize("span", [1, 7, 128, 1000, 5000])
@pytest.mark.parametrize("offset,base", [(0.0, 0.0), (127.0, 0.0), (1.0, 0.0), (0.0, -3.25), (3.0, 1e-3)])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_dequantize_has_the_bits_of_the_torch_ops(span, offset, base, workers, openmp, monkeypatch):
    """fl(fl(code - offset) * factor) + base with each operation rounded on its own (a fused
    multiply-add changes the last bit of many values: this test fails), base added only when not 0
    (-0.0 stays -0.0), factors from subnormal to large, per row or one for all; the largest code.
    With OpenMP (one call) and without (a call per block on pool threads)."""
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = torch.Generator().manual_seed(span)
    n = 3 * span + 5 if span > 1 else 4099
    codes = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    rows = -(-n // span)
    factors = (torch.rand(rows, generator=g) * 2 - 0.5) * torch.exp2(torch.randint(-140, 100, (rows,), generator=g).float())
    for per_row in (True, False):
        f = factors if per_row else factors[:1].clone()
        want = codes.to(torch.float32) - offset
        want = want * (f.repeat_interleave(span)[:n] if per_row else f)
        if base:
            want = want + base
        out = torch.full((n,), float("nan"))
        peak = dequantize_u8_c(codes, f.contiguous(), span, offset, base, out, workers)
        assert _bits(out) == _bits(want) and peak == int(codes.max())


@pytest.mark.parametrize("span", [1, 128, 16384])
@pytest.mark.parametrize("offset,base", [(0.0, 0.0), (32767.0, 0.0), (0.0, -3.25)])
@pytest.mark.parametrize("workers,openmp", [(1, True), (2, True), (2, False)])
def test_dequantize_u16_has_the_bits_of_the_torch_ops(span, offset, base, workers, openmp, monkeypatch):
    """16-bit codes from their two byte planes: the same values as the torch ops, and the largest code."""
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = torch.Generator().manual_seed(span)
    n = 3 * span + 5 if span > 1 else 4099
    low, high = (torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g) for _ in range(2))
    rows = -(-n // span)
    factors = torch.rand(rows, generator=g) * torch.exp2(torch.randint(-20, 20, (rows,), generator=g).float())
    for per_row in (True, False):
        f = factors if per_row else factors[:1].clone()
        codes = low.to(torch.int32) + high.to(torch.int32) * 256
        want = (codes.to(torch.float32) - offset) * (f.repeat_interleave(span)[:n] if per_row else f)
        if base:
            want = want + base
        out = torch.full((n,), float("nan"))
        peak = dequantize_u16_c(low, high, f.contiguous(), span, offset, base, out, workers)
        assert _bits(out) == _bits(want) and peak == int(codes.max())


@pytest.mark.parametrize("openmp", [True, False])
def test_trits_decode_is_the_table_and_flags_code_three(openmp, monkeypatch):
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = torch.Generator().manual_seed(3)
    valid = torch.tensor([b for b in range(256) if not b & (b >> 1) & 0x55], dtype=torch.uint8)
    packed = valid[torch.randint(0, valid.numel(), (300_001,), generator=g)]
    table = torch.tensor([[((b >> (2 * j)) & 3) - 1.0 for j in range(4)] for b in range(256)]) * 0.37
    for workers in (1, 2):
        out = torch.empty(4 * packed.numel())
        assert trits_decode_c(packed, table, out, workers) is False
        assert torch.equal(out.view(-1, 4), table[packed.long()])
        bad = packed.clone()
        bad[123_456] = 0b0000_1100  # the code 3 in its second pair
        assert trits_decode_c(bad, table, out, workers) is True


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("openmp", [True, False])
def test_unpack_bits_c_gives_unpack_bits_values(bits, openmp, monkeypatch):
    """Every width below a byte, counts that end inside a group of eight and inside a byte, on one and
    on two threads (blocks of 8192 groups: 300,001 codes cross several), with and without OpenMP."""
    if not openmp:
        monkeypatch.setattr(native, "openmp", lambda name: False)
    g = torch.Generator().manual_seed(bits)
    for n in (0, 1, 5, 7, 8, 9, 15, 16, 17, 1001, 65_543, 300_001):
        codes = torch.randint(0, 1 << bits, (n,), dtype=torch.uint8, generator=g)
        packed = pack_bits(codes, bits)
        for workers in (1, 2):
            out = torch.full((n,), 255, dtype=torch.uint8)
            unpack_bits_c(packed, bits, n, out, workers)
            assert torch.equal(out, codes) and torch.equal(out, unpack_bits(packed, bits, n, torch.uint8)), (bits, n, workers)


@pytest.mark.parametrize("levels", [1, 3, 7, 15, 31, 63])
def test_qsgd_decode_unpacks_in_c_with_the_eager_values_and_refuses_bad_padding(levels):
    """QSGD at 2 to 7 bits: below the compiled kernels' size (the chunked decode) and above it, the
    decode that unpacks in C gives the eager decode's values, and a payload whose last byte has a
    padding bit set is refused as it is by bitpack."""
    from gcbench import compressors
    from gcbench.compressors.errors import CorruptPayloadError
    from gcbench.compressors.kernels import core

    for n in (70_001, (1 << 20) + 3):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3
        with core.forced("eager"):
            codec = compressors.get("qsgd", levels=levels)
            p = codec.encode(x, key="k")
            want = codec.decode(p)
        with core.forced("auto"):
            before = native.call_count(DEQUANTIZE_C)
            got = compressors.get("qsgd", levels=levels).decode(p)
            assert native.call_count(DEQUANTIZE_C) > before  # the C unpack (and, without AVX-512, the C decode) ran
        assert torch.equal(got, want), (levels, n)
    bits = (2 * levels + 1).bit_length()
    if (n * bits) % 8:  # the last byte holds padding bits: set one
        sections = list(p.sections)
        codes = next(i for i, t in enumerate(sections) if t.dtype == torch.uint8 and t.numel() == (n * bits + 7) // 8)
        sections[codes] = sections[codes].clone()
        sections[codes][-1] |= 0x80
        corrupt = dataclasses.replace(p, sections=tuple(sections))
        with core.forced("auto"), pytest.raises(CorruptPayloadError, match="padding"):
            compressors.get("qsgd", levels=levels).decode(corrupt)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        dequantize_u8_c(torch.zeros(4, dtype=torch.int32), torch.ones(1), 4, 0.0, 0.0, torch.empty(4), 1)
    with pytest.raises(ValueError):
        dequantize_u8_c(torch.zeros(8, dtype=torch.uint8), torch.ones(1), 4, 0.0, 0.0, torch.empty(7), 1)
    with pytest.raises(ValueError):
        trits_decode_c(torch.zeros(4, dtype=torch.uint8), torch.ones(256, 4), torch.empty(15), 1)
    with pytest.raises(ValueError):
        unpack_bits_c(torch.zeros(3, dtype=torch.uint8), 8, 3, torch.empty(3, dtype=torch.uint8), 1)  # 8 bits: no
    with pytest.raises(ValueError):
        unpack_bits_c(torch.zeros(3, dtype=torch.uint8), 3, 9, torch.empty(9, dtype=torch.uint8), 1)  # 9 codes: 4 bytes


_AVX2_SCRIPT = """
import torch
from gcbench import compressors
from gcbench.compressors.codecs import rounding
from gcbench.compressors.kernels import core, native
assert torch.backends.cpu.get_cpu_capability() == "AVX2" and not core.avx512()
in_c = rounding.rounds_in_c
for name in ("qsgd", "terngrad", "zipml8", "zipml16"):
    x = torch.randn(70_001, generator=torch.Generator().manual_seed(1)) * 3
    runs = {}
    for mode in ("eager", "compiled", "auto"):
        with core.forced(mode):
            codec = compressors.get(name)
            before = native.call_count()
            p = codec.encode(x, key="k")
            runs[mode] = (p.to_bytes(), codec.decode(p))
            if mode != "eager":
                assert native.call_count() > before, (name, mode, "the C decode did not run")
    assert runs["eager"][0] == runs["compiled"][0] == runs["auto"][0], name
    assert all(torch.equal(runs["eager"][1], runs[m][1]) for m in ("compiled", "auto")), name
    # Inductor's rounding kernel with float32 row places, the C rounding pass set aside
    rounding.rounds_in_c = lambda *args: False
    kernel = core.dither_planar16 if name == "zipml16" else core.dither_codes
    ran = kernel.calls - kernel.eager_calls
    with core.forced("compiled"):
        assert compressors.get(name).encode(x, key="k").to_bytes() == runs["eager"][0], name
    assert kernel.calls - kernel.eager_calls > ran, name
    rounding.rounds_in_c = in_c
print("same")
"""


def _inductor_takes_a_march() -> bool:
    """Whether this torch's Inductor reads ``TORCHINDUCTOR_CPP_MARCH`` (2.14 does, 2.11 does not); without it, it builds
    AVX2-vectorised code with ``-march=native``, which on an AVX-512 machine is no AVX2 machine's code
    (torch 2.11: float32 decodes 1 ulp apart; with ``-march=x86-64-v3`` the eager bits)."""
    from torch._inductor import config

    return hasattr(config.cpp, "march")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or "AVX" not in torch.backends.cpu.get_cpu_capability(),
                    reason="an x86 CPU with AVX2 or AVX-512")
@pytest.mark.skipif(not _inductor_takes_a_march(), reason="this torch's Inductor cannot build an AVX2 machine's code here")
@pytest.mark.slow
def test_a_run_limited_to_avx2_gives_the_eager_bytes():
    """``ATEN_CPU_CAPABILITY=avx2`` and ``TORCHINDUCTOR_CPP_MARCH=x86-64-v3`` (an AVX2 machine's code on
    any AVX2 or AVX-512 one): the quantizers' encode (the C rounding pass, and Inductor's with float32
    row places) and their C decode give the eager payloads and values."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}
    run = subprocess.run([sys.executable, "-c", _AVX2_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and "same" in run.stdout, run.stderr[-3000:]


@pytest.mark.parametrize("bits,per_bucket", [(8, True), (8, False), (16, False), (4, True)])
def test_inductors_decode_where_no_c_pass_runs_gives_the_eager_values(bits, per_bucket, monkeypatch):
    """The C pass decodes one-byte and 16-bit codes on every CPU; Inductor's decode kernels
    (core.dequantize, dequantize16) run where it does not (an accelerator, a C compiler that fails):
    with the C pass set aside, the compiled decode has eager's bits and its range check."""
    from gcbench.compressors.codecs import rounding
    from gcbench.compressors.errors import CorruptPayloadError
    from gcbench.compressors.kernels import core

    monkeypatch.setattr(rounding, "dequantize_native", lambda device: False)
    n, bucket = 70_001, 128
    g = torch.Generator().manual_seed(bits)
    top = (1 << bits) - 2
    codes = torch.randint(0, top + 1, (n,), generator=g)
    packed = pack_bits(codes, bits)
    factor = torch.rand(-(-n // bucket), generator=g) if per_bucket else 0.0123
    args = dict(numel=n, bits=bits, top=top, offset=float(top // 2), factor=factor, bucket=bucket if per_bucket else 0,
                base=0.0 if per_bucket else -1.5)
    ran = core.compiled_call_count()
    with core.forced("eager"):
        eager = rounding.decode_packed(packed, **args)
    with core.forced("compiled"):
        compiled = rounding.decode_packed(packed, **args)
    assert core.compiled_call_count() > ran  # Inductor's kernel really ran
    assert _bits(compiled) == _bits(eager)
    bad = pack_bits(torch.where(torch.arange(n) == 5, top + 1, codes), bits)
    with core.forced("compiled"), pytest.raises(CorruptPayloadError, match="exceeds the largest valid code"):
        rounding.decode_packed(bad, **args)
