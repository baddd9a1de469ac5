"""CUDA paths that only start above a size, against the CPU: TernGrad's fixed-order sum whose levels
run on the device (2^16 values or more left), SketchML's table bucketing (2^17 values or more, float32
and float64), and QSGD's odd code widths (3, 5, 6 and 7 bits). The smaller CUDA tests of each codec
stay below those sizes. Every test here is marked ``cuda`` and skips without a GPU."""

from __future__ import annotations

import pytest
import torch
from gcbench.compressors import Payload, decode, get
from gcbench.compressors.codecs.sketchml.codec import bucketize
from gcbench.compressors.codecs.terngrad import DEVICE_SUM_STOP, abs_max_and_std, fixed_sum
from gcbench.compressors.kernels import core as fused

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

#: The device under test (a module constant, so the tests' own logic can be run on the CPU too).
DEVICE = "cuda"
#: Past 2^21: fixed_sum of this many values runs two levels on the device (to 65,946 values, then
#: 2,086) before the host; of TernGrad's 65,921 column sums of this many values, one.
BIG = (1 << 21) + 12_345


def _values(n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def test_fixed_sum_gives_the_cpu_float_when_its_levels_run_on_the_device():
    v = _values(BIG, 1, torch.float64) * 1e3
    assert fixed_sum(v.to(DEVICE)) == fixed_sum(v)


def test_terngrad_moments_and_payload_cross_devices_at_a_size_past_the_device_levels():
    """Eager (the same elementwise float32 additions on both sides, and no compiling): the same
    max |x| and standard deviation; a payload encoded on the GPU decodes on the CPU to what the GPU
    decodes."""
    x = _values(BIG, 2)
    assert BIG // fused.MOMENT_ROWS >= DEVICE_SUM_STOP  # the column sums reach the device levels
    with fused.forced("eager"):
        assert abs_max_and_std(x.to(DEVICE)) == abs_max_and_std(x)
        p = get("terngrad").encode(x.to(DEVICE), key="w")
        on_gpu = decode(p).cpu()
    assert torch.equal(decode(Payload.from_bytes(p.to_bytes())), on_gpu)
    s = p.sections[0].cpu()  # TernGrad's values are -s, 0 or s
    assert 0 < float(s) <= float(x.abs().max()) and torch.isin(on_gpu.abs(), torch.cat([s.new_zeros(1), s])).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sketchml_table_bucketing_on_the_device_equals_searchsorted(dtype):
    n = 3 * (1 << 17) + 7  # the table serves 2^17 values or more
    values = _values(n, 3, dtype).to(DEVICE)
    values[:5] = torch.tensor([0.0, -0.0, 1e-30, -1e30, 3.0e38], dtype=dtype)  # tiny, huge, beyond float32 (float64)
    boundaries = torch.sort(_values(255, 4, dtype)).values.to(DEVICE)
    values[5:260] = boundaries  # values exactly on a split
    want = torch.searchsorted(boundaries, values, right=True)
    assert torch.equal(bucketize(values, boundaries), want)
    assert torch.equal(bucketize(values, boundaries, out_int32=True), want.to(torch.int32))
    assert torch.equal(bucketize(values.cpu(), boundaries.cpu()), want.cpu())


@pytest.mark.parametrize("levels, bits", [(3, 3), (15, 5), (31, 6), (63, 7)])
def test_qsgd_odd_widths_on_the_device_decode_the_same_on_the_cpu(levels, bits):
    """Below the compiled size (eager on the GPU): the codes within one level of the value, and the
    payload's bytes decoding on the CPU to what the GPU decodes."""
    n = 300_001
    x = _values(n, levels)
    codec = get("qsgd", levels=levels, bucket_size=512)
    p = codec.encode(x.to(DEVICE), key="w")
    assert p.sections[1].numel() == -(-n * bits // 8), "the codes' width"
    on_gpu = decode(p).cpu()
    assert torch.equal(decode(Payload.from_bytes(p.to_bytes())), on_gpu)
    norms = p.sections[0].cpu().repeat_interleave(512)[:n]
    assert torch.all((on_gpu - x).abs() <= norms / levels * 1.0001)
