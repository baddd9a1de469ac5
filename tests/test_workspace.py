"""compressors/kernels/workspace.py: per-thread, per-name scratch buffers on the CPU, fresh tensors elsewhere."""

from __future__ import annotations

import threading

import pytest
import torch

from gcbench.compressors.kernels import workspace


def test_scratch_reuses_one_buffer_per_name_and_grows():
    workspace.release()
    a = workspace.scratch("t.a", 100, torch.uint8)
    b = workspace.scratch("t.a", 60, torch.uint8)
    assert a.numel() == 100 and b.numel() == 60 and a.data_ptr() == b.data_ptr()  # the same pages, call after call
    other = workspace.scratch("t.b", 60, torch.uint8)
    assert other.data_ptr() != a.data_ptr()  # two names never alias
    assert workspace.scratch("t.a", 60, torch.float32).data_ptr() != a.data_ptr()  # nor two dtypes
    big = workspace.scratch("t.a", 1000, torch.uint8)
    assert big.numel() == 1000 and workspace.scratch("t.a", 10, torch.uint8).data_ptr() == big.data_ptr()
    assert workspace.release() == 1000 + 60 + 60 * 4
    assert workspace.release() == 0


def test_scratch_is_per_thread():
    workspace.release()
    mine = workspace.scratch("t.thread", 64, torch.uint8).data_ptr()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(workspace.scratch("t.thread", 64, torch.uint8).data_ptr()))
    worker.start()
    worker.join()
    assert seen and seen[0] != mine
    workspace.release()


def test_threelc_feedback_bytes_are_unchanged_when_the_quartic_buffer_is_reused():
    """Two codecs, one after the other on this thread, share the quartic bytes' buffer: each step's
    payload equals that of a run that starts from released buffers."""
    from gcbench.compressors import registry
    from gcbench.compressors.kernels import core

    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(50_003, generator=gen) for _ in range(3)]

    def run(release_each: bool):
        codec = registry.get("3lc")
        payloads = []
        for x in xs:
            if release_each:
                workspace.release()
            payloads.append(codec.encode(x))
        return [p.to_bytes() for p in payloads]  # read after every call: no payload views the buffer

    with core.forced("compiled"):
        shared = run(False)
        workspace.scratch("threelc.quartic", 80_000, torch.uint8).fill_(7)  # stale bytes of another size
        fresh = run(True)
        again = run(False)
    assert shared == fresh == again


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("numel", [0, 5, workspace.FRESH_MIN_BYTES + 3])
def test_fresh_is_a_new_tensor_that_fills_its_own_aligned_storage(dtype, numel):
    """Above FRESH_MIN_BYTES the memory is numpy's; either way a flat contiguous tensor of its own,
    filling its storage (error feedback writes over a decode it owns only then) and aligned as torch's."""
    a, b = workspace.fresh(numel, dtype), workspace.fresh(numel, dtype)
    for t in (a, b):
        assert t.dtype == dtype and t.shape == (numel,) and t.device.type == "cpu" and t.is_contiguous()
        assert t.storage_offset() == 0 and t.untyped_storage().nbytes() == numel * dtype.itemsize
        assert t.data_ptr() % workspace.ALIGN == 0 or numel == 0
    if numel:
        a.view(torch.uint8).fill_(1)
        b.view(torch.uint8).fill_(2)
        assert int(a.view(torch.uint8).max()) == 1  # two calls, two memories


def test_error_feedback_writes_its_residual_over_a_fresh_decode():
    """A large decode comes from fresh(); error feedback overwrites it with the residual instead of
    allocating another full-size tensor (what tests/test_memory_bounds.py measures at 8M values)."""
    from gcbench.compressors import ErrorFeedback, registry
    from gcbench.compressors.kernels import core

    n = workspace.FRESH_MIN_BYTES // 4 + 1
    ef = ErrorFeedback(registry.get("zipml8"))
    decoded = []
    real = ef.codec.decode
    ef.codec.decode = lambda payload, **kw: decoded.append(real(payload, **kw)) or decoded[-1]
    with core.forced("eager"):
        ef.encode(torch.randn(n, generator=torch.Generator().manual_seed(0)), key="k")
    assert ef.residual("k").data_ptr() == decoded[0].data_ptr()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_input_is_widened_in_the_codecs_buffer_up_to_the_cap(dtype, monkeypatch):
    """The quantizers' float32 copy of a 16-bit input (``as_float32``) is the same values as ``to``, in one
    buffer per codec reused call after call; above :data:`~workspace.WORKING_COPY_MAX_BYTES` it is new memory."""
    from gcbench.compressors.codecs.rounding import as_float32

    workspace.release()
    x = (torch.randn(3001, generator=torch.Generator().manual_seed(2)) * 1000).to(dtype)
    first = as_float32(x, "T")
    assert torch.equal(first, x.to(torch.float32))
    assert as_float32(x.flip(0), "T").data_ptr() == first.data_ptr()  # reused: no new pages
    assert as_float32(x, "U").data_ptr() != first.data_ptr()  # each codec its own
    monkeypatch.setattr(workspace, "WORKING_COPY_MAX_BYTES", 3000 * 4)
    assert as_float32(x, "T").data_ptr() != first.data_ptr() and torch.equal(as_float32(x, "T"), x.to(torch.float32))
    workspace.release()


def test_a_16_bit_decode_into_out_reuses_one_working_buffer():
    """A 16-bit payload decoded into ``out`` goes through this thread's float32 buffer, not new memory each
    call (checked by the pages it uses); the values are the fresh decode's."""
    from gcbench import compressors

    workspace.release()
    codec = compressors.get("qsgd")
    p = codec.encode(torch.randn(5000, generator=torch.Generator().manual_seed(3)).half())
    out = torch.empty(5000, dtype=torch.float16)
    workspace.release()  # the encode's own buffers
    codec.decode(p, out=out)
    assert workspace.release() >= 5000 * 4  # the working copy was this thread's buffer
    codec.decode(p, out=out)
    assert torch.equal(out, codec.decode(p))
    workspace.release()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["signsgd", "ef-signsgd", "qsgd", "zipml8", "zipml16", "terngrad", "3lc"])
def test_a_16_bit_input_encodes_to_the_sections_of_its_float32_values(name, dtype):
    """The codecs that quantize in float32 send, for a 16-bit input widened in their buffers, the sections
    they send for the same values given as float32 (the same random draws), twice in a row (the buffer
    reused) and on a size with a partial last byte."""
    from gcbench import compressors

    for n in (4099, 70_001):
        x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 5).to(dtype)
        a, b = compressors.get(name), compressors.get(name)
        inner_a, inner_b = getattr(a, "codec", a), getattr(b, "codec", b)
        for step in range(2):
            ga, gb = torch.Generator().manual_seed(step), torch.Generator().manual_seed(step)
            pa = inner_a.encode(x, generator=ga if inner_a.stochastic else None)
            pb = inner_b.encode(x.float(), generator=gb if inner_b.stochastic else None)
            assert len(pa.sections) == len(pb.sections)
            for sa, sb in zip(pa.sections, pb.sections):
                assert sa.dtype == sb.dtype and torch.equal(sa, sb), f"{name} {dtype} n={n} step {step}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_3lc_scale_of_a_widened_16_bit_input_is_clamped_to_the_inputs_range(dtype):
    """3LC's M = max|x| * s is clamped to the *input* dtype's largest value (Sec. 3.1's scale, kept finite on
    the wire), also when the 16-bit input is quantized from its float32 copy: with s = 1.9 and values near
    float16's end, the payload's M is that dtype's largest value (float16), and each value decodes to
    M times its trit by the definition (beyond M/2: +-M, else 0)."""
    from gcbench.compressors.codecs.threelc.codec import ThreeLC

    top = torch.finfo(dtype).max
    x = (torch.randn(4099, generator=torch.Generator().manual_seed(8)) * 30000).clamp(-65504, 65504).to(dtype)
    x[7] = 65504.0 if dtype == torch.float16 else 6e37
    codec = ThreeLC(sparsity=1.9)
    p = codec.encode(x)
    m = min(float(x.float().abs().max()) * 1.9, top)
    assert float(p.sections[0][0]) == float(torch.tensor(m, dtype=torch.float32))
    mf = float(p.sections[0][0])
    xf = x.float()
    trits = (xf > mf / 2).float() - (xf < -mf / 2).float()
    want = (trits * torch.tensor(mf)).clamp(-top, top).to(dtype)
    assert torch.equal(codec.decode(p), want)
