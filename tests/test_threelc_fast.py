"""3LC's fast paths against references: the zero-run encoder against a second
vectorised implementation built from torch ops (frozen below) and the naive loop, across its CPU chunks and on its
generic (CUDA) code path; the compiled zero-run scan against the eager parse, hostile streams
included; ``decode(out=)`` on the dense and sparse decode paths, in eager and compiled mode; the
quartic packing kernels on every five-trit group. Sizes stay small (seconds)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from gcbench import compressors
from gcbench.compressors import CorruptPayloadError
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import threelc as fused_threelc
from gcbench.compressors.codecs.threelc import zero_run
from gcbench.compressors.codecs.threelc.codec import ThreeLC
from gcbench.compressors.codecs.threelc.zero_run import MAX_RUN, ZERO_GROUP, zero_run_decode, zero_run_encode
from test_threelc import naive_zero_run

# --- a zero-run encoder built from torch ops, frozen as a byte-level reference -------------------

_TORCH_OPS_RUN_CODE = torch.tensor(
    [ZERO_GROUP, ZERO_GROUP] + [243 + k - 2 for k in range(2, MAX_RUN + 1)], dtype=torch.uint8
)


def torch_ops_zero_run_encode(data: torch.Tensor) -> torch.Tensor:
    """Run boundaries from a shifted comparison and ``nonzero``, chunk starts via
    ``repeat_interleave`` over the runs, code bytes written, one ``masked_select`` compaction."""
    if data.numel() == 0:
        return data.clone()
    z = data == ZERO_GROUP
    change = torch.nonzero(z[1:] != z[:-1]).reshape(-1) + 1
    first_z, last_z = bool(z[0]), bool(z[-1])
    if change.numel() == 0 and not first_z:
        return data.clone()
    parts = [change]
    if first_z:
        parts.insert(0, change.new_zeros(1))
    if last_z:
        parts.append(change.new_full((1,), data.numel()))
    bounds = torch.cat(parts) if len(parts) > 1 else change
    s = bounds[0::2]
    length = bounds[1::2] - s
    nchunk = (length + (MAX_RUN - 1)) // MAX_RUN
    total = int(nchunk.sum())
    if total > s.numel():
        run = torch.repeat_interleave(nchunk, output_size=total)
        first = torch.cumsum(nchunk, 0).sub_(nchunk)
        pos = torch.arange(total).mul_(MAX_RUN).add_(s.sub(first, alpha=MAX_RUN)[run])
        c = torch.clamp_(bounds[1::2][run] - pos, max=MAX_RUN)
    else:
        pos, c = s, length
    work = data.clone()
    work[pos] = _TORCH_OPS_RUN_CODE[c]
    keep = torch.logical_not(z)
    keep[pos] = True
    return torch.masked_select(work, keep)


def _streams(seed: int) -> list[torch.Tensor]:
    """Quartic-like streams: random densities of non-zero groups, all-zero runs of every length
    around the 14-run limit and far beyond it, at the start, the end, and nowhere."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in (1, 2, 5, 13, 14, 15, 27, 28, 29, 41, 100, 997, 5000):
        for density in (0.0, 0.01, 0.1, 0.5, 0.95, 1.0):
            d = torch.randint(0, 243, (n,), generator=g, dtype=torch.uint8)
            d[torch.rand(n, generator=g) >= density] = ZERO_GROUP
            d[d == ZERO_GROUP] = ZERO_GROUP
            out.append(d)
    for run in (1, 2, 13, 14, 15, 27, 28, 29, 42, 43, 200, 1001):
        z = torch.full((run,), ZERO_GROUP, dtype=torch.uint8)
        x = torch.tensor([7], dtype=torch.uint8)
        out += [z, torch.cat([x, z]), torch.cat([z, x]), torch.cat([x, z, x, z, z, x])]
    return out


@pytest.mark.parametrize(("block", "scan"), [(None, None), (1, None), (7, 1), (64, 13), (3, 100)])
@pytest.mark.parametrize("seed", [0, 1])
def test_zero_run_encode_is_byte_identical_to_the_torch_ops_reference_and_naive(seed, block, scan, monkeypatch):
    """The torch-ops reference encoder's bytes and the paper's greedy loop's, whole-stream and in CPU
    chunks of as few as one kept byte and scan blocks as short as one stream byte (runs crossing chunks and
    blocks, blocks and streams without a kept byte)."""
    if block is not None:
        monkeypatch.setattr(zero_run, "RUN_BLOCK", block)
    if scan is not None:
        monkeypatch.setattr(zero_run, "SCAN_BLOCK", scan)
    for d in _streams(seed):
        got = zero_run_encode(d)
        assert torch.equal(got, torch_ops_zero_run_encode(d)), (d.tolist(), got.tolist())
        if d.numel() <= 1001:
            assert got.tolist() == naive_zero_run(d.tolist())
        assert torch.equal(zero_run_decode(got, d.numel()), d)


def test_zero_run_segments_torch_path_equals_numpy_path():
    """The generic segment arithmetic on torch tensors (the CUDA path, run here on CPU) writes
    the bytes the numpy path writes."""
    for d in _streams(3):
        n = d.numel()
        pos = torch.nonzero(d != ZERO_GROUP).reshape(-1)
        got = zero_run.segments(d, pos, -1, n)
        assert torch.equal(got, zero_run_encode(d)), d.tolist()
        want = zero_run.segments(d.numpy(), np.flatnonzero(d.numpy() != ZERO_GROUP), -1, n)
        assert np.array_equal(got.numpy(), want)


def test_zero_run_encode_of_a_long_dense_stream_matches_naive():
    """Several default CPU chunks of kept bytes, a dense stream as error feedback produces (~half kept)."""
    g = torch.Generator().manual_seed(5)
    n = 6 * zero_run.RUN_BLOCK + 12345
    d = torch.randint(0, 243, (n,), generator=g, dtype=torch.uint8)
    d[torch.rand(n, generator=g) < 0.5] = ZERO_GROUP
    d[70_000:200_000] = ZERO_GROUP  # a long run (chunks are counted in kept bytes)
    assert int((d != ZERO_GROUP).sum()) > 2 * zero_run.RUN_BLOCK  # at least three chunks
    got = zero_run_encode(d)
    assert got.tolist() == naive_zero_run(d.tolist())
    assert torch.equal(got, torch_ops_zero_run_encode(d))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_zero_run_parse_modes_agree_and_reject_the_same_streams(mode):
    """The compiled per-byte scan gives the eager parse's expansion and count, and raises the same
    typed error for a non-canonical stream or a wrong total (the compiled kernel, forced on)."""
    bad = [[121, 121], [121, 243], [244, 121], [243, 255], [5, 121, 121, 5], [254, 243]]
    good = [[255, 121], [255, 255, 5], [121, 5, 121], [243], [5]]
    with fused.forced(mode):
        for s in bad:
            with pytest.raises(CorruptPayloadError, match="non-canonical"):
                zero_run_decode(torch.tensor(s, dtype=torch.uint8))
        for s in good:
            d = torch.tensor(s, dtype=torch.uint8)
            n = sum(b - 241 if b >= 243 else 1 for b in s)
            assert zero_run_decode(d).tolist() == sum(([121] * (b - 241) if b >= 243 else [b] for b in s), [])
            with pytest.raises(CorruptPayloadError, match="expands to"):
                zero_run_decode(d, n + 1)
        for d in _streams(4)[::7]:
            enc = zero_run_encode(d)
            ends, first, count = zero_run.parse_zero_run(enc, d.numel())
            assert count == int(((d != ZERO_GROUP)).sum())
            assert torch.equal(zero_run.expand_zero_run(ends, first, d.numel()), d)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("n", [1, 4, 5, 4099, 70_001])
def test_decode_into_equals_decode_on_dense_and_sparse_streams(mode, n):
    """``decode(out=)`` writes :meth:`ThreeLC._decode`'s values into the caller's buffer (returned
    as is) for sparse payloads (one step) and the dense ones error feedback produces (later steps),
    with and without zero-run encoding, for sizes that end in a partial group."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    with fused.forced(mode):
        for codec in (compressors.get("3lc"), ThreeLC(zero_run=False), ThreeLC(sparsity=1.9)):
            for step in range(3):
                p = codec.encode(x, key="k") if hasattr(codec, "memory") else codec.encode(x * (step + 1))
                fresh = codec.decode(p)
                buf = torch.full((n,), float("nan"))
                got = codec.decode(p, out=buf)
                assert got is buf and got.data_ptr() == buf.data_ptr()
                assert torch.equal(got.view(torch.int32), fresh.view(torch.int32)), (type(codec), step)


def test_decode_into_with_a_float64_scale_is_the_cast_of_the_float64_decode():
    """A float64 scale in a float32 payload (no encoder writes it; decode accepts it): the values
    computed in float64 and cast, as ``decode`` without ``out`` does."""
    codec = ThreeLC()
    p = codec.encode(torch.randn(1003, generator=torch.Generator().manual_seed(2)))
    scale, data = p.sections
    sections = (scale.to(torch.float64) * (1 + 2**-40), data)
    want = codec._decode(sections, 1003).to(torch.float32)
    out = torch.empty(1003)
    codec._decode_into(sections, 1003, out)
    assert torch.equal(out, want)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.cuda)])
def test_device_paths_give_the_cpu_bytes_and_values(device, mode):
    """On CUDA (one block, torch ``nonzero`` and the generic segment arithmetic; Triton kernels
    when compiled): the CPU's zero-run bytes, the same 3LC payloads with error feedback step after
    step, and ``decode(out=)`` on the device equal to the CPU's decode."""
    with fused.forced(mode):
        for d in _streams(6)[::5]:
            assert torch.equal(zero_run_encode(d.to(device)).cpu(), zero_run_encode(d))
            assert torch.equal(zero_run_decode(zero_run_encode(d).to(device), d.numel()).cpu(), d)
        x = torch.randn(70_001, generator=torch.Generator().manual_seed(9))
        cpu, dev = compressors.get("3lc"), compressors.get("3lc")
        for _ in range(3):
            pc, pd = cpu.encode(x, key="k"), dev.encode(x.to(device), key="k")
            assert pc.to_bytes() == pd.to_bytes()
            buf = torch.empty(x.shape, device=device)
            assert torch.equal(dev.decode(pd, out=buf).cpu(), cpu.decode(pc))


def test_quartic_kernels_pack_every_group_as_the_paper():
    """All 243 groups of five shifted trits, compiled and eager: :data:`pack_shifted` (uint8 sums)
    and :data:`pack_trits` (float comparisons, 256-bit vectors) give ``81a + 27b + 9c + 3d + e``
    (Sec. 3.2), over more groups than a vector holds and a tail; values exactly at ``+-M/2`` are
    ties that go to 0 (shifted trit 1: byte 121)."""
    digits = torch.tensor(list(itertools.product(range(3), repeat=5)), dtype=torch.uint8)
    want = (digits.long() * torch.tensor([81, 27, 9, 3, 1])).sum(1).to(torch.uint8).repeat(3)
    trits = digits.repeat(3, 1).reshape(-1)  # 729 groups: 45 vectors of 16 and a tail of 9
    h = torch.tensor([0.5])
    x = trits.float() - 1  # -1, 0, 1 against thresholds +-0.5
    for kernel, args in ((fused_threelc.pack_shifted, (trits,)), (fused_threelc.pack_trits, (x, h, -h))):
        assert torch.equal(kernel.fn(*args), want)
        with fused.forced("compiled"):
            assert torch.equal(kernel(*args), want)
    ties = fused_threelc.pack_trits(x * 0.5, h, -h)
    assert torch.equal(ties, torch.full_like(want, ZERO_GROUP))


def _scan_inputs():
    """Flat float32 pairs ``(g, e)`` for the scans: signed zeros, subnormals, the largest floats (whose
    sum overflows to Inf), Inf and NaN at either end and inside, lengths around a vector's."""
    gen = torch.Generator().manual_seed(11)
    tiny, big = torch.finfo(torch.float32).smallest_normal, torch.finfo(torch.float32).max
    for n in (1, 7, 8, 9, 31, 64, 65, 1000):
        g = torch.randn(n, generator=gen) * torch.logspace(-40, 30, n)
        e = torch.randn(n, generator=gen) * 1e-3
        yield g, None
        yield g, e
        yield -g.abs(), -e.abs()
        yield torch.full((n,), -0.0), torch.full((n,), -0.0)
        yield torch.full((n,), tiny / 4), torch.full((n,), -tiny / 8)
        for at in {0, n // 2, n - 1}:
            for bad in (float("nan"), float("inf"), -float("inf"), big):
                h = g.clone()
                h[at] = bad
                yield h, (e.clone().fill_(big) if bad == big else e)


def test_the_c_scan_gives_the_eager_scans_maximum_or_its_error():
    """3LC's C scan (the read-only pass before its C feedback pass) returns the eager scan's
    ``max |g + e|`` exactly, and Inf exactly where the eager scan raises (a NaN or Inf in ``g + e``,
    a sum that overflows)."""
    from gcbench.compressors.error_feedback import checked_amax, corrected_scan
    from gcbench.compressors.errors import NumericOverflowError

    cases = 0
    for g, e in _scan_inputs():
        with fused.forced("eager"):
            try:
                want = corrected_scan(g, e)
            except NumericOverflowError as err:
                want = str(err)
        got = fused_threelc.feedback_scan_c(g, e)
        try:
            got = checked_amax(got)
        except NumericOverflowError as err:
            got = str(err)
        assert got == want, (g, e)
        cases += 1
    assert cases > 100
    with pytest.raises(ValueError):
        fused_threelc.feedback_scan_c(torch.zeros(4), torch.zeros(5))
    with pytest.raises(ValueError):
        fused_threelc.feedback_scan_c(torch.zeros(8)[::2], None)
