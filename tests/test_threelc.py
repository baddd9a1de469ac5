"""Tests of the 3LC codec (Lim, Andersen, Kaminsky, SysML 2019) against naive loop references.

The references below are written from the paper's description (Section 3) with Python loops, so a
vectorisation bug in ``compressors/codecs/threelc/codec.py`` shows up as a byte-level disagreement.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import devices
from gcbench import compressors
from gcbench.compressors import CorruptPayloadError, ErrorFeedback, InvalidParameterError, Payload
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels.core import forced
from gcbench.compressors.kernels.threelc import ZERO_RUN_C
from gcbench.compressors.wire.bitpack import pack_bits
from gcbench.compressors.codecs.threelc.codec import (
    ThreeLC,
    quantize_3value,
    quartic_decode,
    quartic_encode,
    stage_sizes,
    zero_run_decode,
    zero_run_encode,
)

# --- naive references (loops; independent of the implementation) ----------------------------------


def naive_quantize(x: np.ndarray, s: float) -> tuple[list[int], float]:
    """round(x / M) with M = float32(max|x| * s); ties (|x| == M/2) go to 0; computed in float64."""
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    m = float(np.float32(amax * s))
    trits = []
    for v in x.astype(np.float64):
        if m == 0.0:
            trits.append(0)
            continue
        r = v / m
        trits.append(1 if r > 0.5 else (-1 if r < -0.5 else 0))
    return trits, m


def naive_quartic(trits: list[int]) -> list[int]:
    padded = list(trits) + [0] * (-len(trits) % 5)  # pad with quantized zeros
    out = []
    for i in range(0, len(padded), 5):
        p = [t + 1 for t in padded[i : i + 5]]
        out.append(81 * p[0] + 27 * p[1] + 9 * p[2] + 3 * p[3] + p[4])
    return out


def naive_unquartic(data: list[int], n: int) -> list[int]:
    out = []
    for a in data:
        digits = []
        for _ in range(5):
            digits.append(a % 3 - 1)
            a //= 3
        out.extend(reversed(digits))
    return out[:n]


def naive_zero_run(data: list[int]) -> list[int]:
    out, i = [], 0
    while i < len(data):
        if data[i] != 121:
            out.append(data[i])
            i += 1
            continue
        j = i
        while j < len(data) and data[j] == 121:
            j += 1
        run = j - i
        while run > 0:  # greedy: 14, 14, ..., remainder
            k = min(14, run)
            out.append(121 if k == 1 else 243 + k - 2)
            run -= k
        i = j
    return out


def naive_unzero_run(data: list[int]) -> list[int]:
    out = []
    for b in data:
        out.extend([121] * (b - 241) if b >= 243 else [b])
    return out


def u8(values) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.uint8)


def trit_tensor(values) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int8)


# --- quartic encoding -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(0, 12))
@pytest.mark.parametrize("pattern", ["zeros", "plus", "minus", "mixed"])
def test_quartic_short_lengths_match_naive(n, pattern):
    fill = {"zeros": [0], "plus": [1], "minus": [-1], "mixed": [1, -1, 0, 0, 1, 1, -1]}[pattern]
    trits = [fill[i % len(fill)] for i in range(n)]
    enc = quartic_encode(trit_tensor(trits))
    assert enc.dtype == torch.uint8 and enc.numel() == math.ceil(n / 5)
    assert enc.tolist() == naive_quartic(trits)
    dec = quartic_decode(enc, n)
    assert dec.dtype == torch.int8 and dec.tolist() == trits
    assert naive_unquartic(enc.tolist(), n) == trits


def test_quartic_known_bytes():
    # five zeros -> 121; all +1 -> 242; all -1 -> 0; paper's weights 81,27,9,3,1 on the first value
    assert quartic_encode(trit_tensor([0] * 5)).tolist() == [121]
    assert quartic_encode(trit_tensor([1] * 5)).tolist() == [242]
    assert quartic_encode(trit_tensor([-1] * 5)).tolist() == [0]
    assert quartic_encode(trit_tensor([1, 0, 0, 0, 0])).tolist() == [121 + 81]
    assert quartic_encode(trit_tensor([0, 0, 0, 0, -1])).tolist() == [120]
    # a 1-value tail is padded with quantized zeros: [+1] -> 2,1,1,1,1
    assert quartic_encode(trit_tensor([1])).tolist() == [162 + 27 + 9 + 3 + 1]


def test_quartic_rejects_bad_trits():
    with pytest.raises(InvalidParameterError):
        quartic_encode(trit_tensor([0, 2, 0]))
    with pytest.raises(InvalidParameterError):
        quartic_encode(torch.zeros(3))


@pytest.mark.parametrize("bad", range(243, 256))
def test_quartic_decode_rejects_run_bytes(bad):
    with pytest.raises(CorruptPayloadError):
        quartic_decode(u8([121, bad, 0]), 15)


def test_quartic_decode_rejects_wrong_length_and_bad_padding():
    enc = quartic_encode(trit_tensor([1, -1, 0, 1, 0, 1, 1]))  # 2 bytes, 3 padding trits
    with pytest.raises(CorruptPayloadError):
        quartic_decode(enc[:1], 7)  # truncated
    with pytest.raises(CorruptPayloadError):
        quartic_decode(torch.cat([enc, u8([121])]), 7)  # one byte too many
    with pytest.raises(CorruptPayloadError):
        quartic_decode(enc.to(torch.int16), 7)
    bad_pad = enc.clone()
    bad_pad[-1] += 1  # last digit (a padding trit) becomes 2: not a quantized zero
    with pytest.raises(CorruptPayloadError):
        quartic_decode(bad_pad, 7)
    assert quartic_decode(bad_pad, 10).numel() == 10  # the same byte is fine when it is data


# --- zero-run encoding ----------------------------------------------------------------------------

RUN_LENGTHS = [1, 2, 3, 13, 14, 15, 16, 27, 28, 29, 30, 42, 43]
#: The two zero-run coders on the CPU: the vectorised Python reference (eager mode) and the C
#: kernels (compiled mode, where they must build).
CODERS = ["python", "c"]


@contextlib.contextmanager
def coder(name: str):
    """Run the block's zero-run coding with the coder ``name`` (:data:`CODERS`)."""
    with forced("compiled" if name == "c" else "eager"):
        yield


@pytest.fixture(params=CODERS)
def zr(request):
    """Each zero-run test once per coder (the block of the test runs in its mode)."""
    with coder(request.param):
        yield request.param


@pytest.mark.parametrize("run", RUN_LENGTHS)
@pytest.mark.parametrize("where", ["alone", "start", "middle", "end"])
def test_zero_run_exact_on_runs(run, where, zr):
    zeros = [121] * run
    stream = {
        "alone": zeros,
        "start": zeros + [7, 200],
        "middle": [3] + zeros + [0],
        "end": [242, 5] + zeros,
    }[where]
    enc = zero_run_encode(u8(stream))
    assert enc.tolist() == naive_zero_run(stream)
    assert zero_run_decode(enc, len(stream)).tolist() == stream
    assert zero_run_decode(enc).tolist() == stream


def test_zero_run_known_codes(zr):
    assert zero_run_encode(u8([121] * 2)).tolist() == [243]
    assert zero_run_encode(u8([121] * 14)).tolist() == [255]
    assert zero_run_encode(u8([121] * 15)).tolist() == [255, 121]
    assert zero_run_encode(u8([121] * 29)).tolist() == [255, 255, 121]
    assert zero_run_encode(u8([121] * 30)).tolist() == [255, 255, 243]
    assert zero_run_encode(u8([121, 1, 121, 121, 1])).tolist() == [121, 1, 243, 1]


@pytest.mark.parametrize(
    "stream",
    [[], [121], [0], [5] * 40, list(range(0, 121)) + list(range(122, 243)), [121, 3] * 20, [121] * 1000],
    ids=["empty", "one-zero", "one-byte", "no-zeros", "all-symbols", "alternating", "all-zeros"],
)
def test_zero_run_exact_on_adversarial_streams(stream, zr):
    data = u8(stream)
    enc = zero_run_encode(data)
    assert enc.tolist() == naive_zero_run(stream)
    assert zero_run_decode(enc, len(stream)).tolist() == stream
    assert data.tolist() == stream  # the input is not modified


@pytest.mark.parametrize("density", [0.0, 0.002, 0.05, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("n", [63, 64, 65, 129, 1000, 100_003])
def test_zero_run_c_matches_python_on_long_streams(density, n):
    """The C coder's 64-byte blocks, their tails and long runs (past 16 chunks of 14, written with
    one memset) give the Python reference's bytes; its expansion gives the stream back."""
    rng = np.random.default_rng(n + int(density * 1000))
    values = rng.integers(0, 242, n)
    values[values >= 121] += 1  # quartic bytes other than 121
    stream = np.where(rng.random(n) < density, values, 121)
    if n > 10_000:
        stream[1000:6000] = 121  # a run of 5000 zero groups
    data = torch.from_numpy(stream.astype(np.uint8))
    with coder("python"):
        want = zero_run_encode(data)
    with coder("c"):
        got = zero_run_encode(data)
        back = zero_run_decode(got, n)
    assert torch.equal(got, want)
    assert torch.equal(back, data)


@pytest.mark.parametrize("density", [0.001, 0.5])
def test_codec_decodes_the_same_values_with_either_coder(density):
    """ThreeLC's decode on the CPU (auto mode below the compile threshold: the stream decoded in one
    C pass; compiled: the C expansion, then the compiled table decode) equals the Python path's."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(50_003, generator=g) * (torch.rand(50_003, generator=g) < density)
    codec = ThreeLC()
    with forced("eager"):
        payload = codec.encode(x)
        want = codec.decode(payload)
    for mode in ("auto", "compiled"):
        with forced(mode):
            assert codec.encode(x).to_bytes() == payload.to_bytes()
            assert torch.equal(codec.decode(payload), want)


def _decode_outcome(payload: Payload, n: int, codec: ThreeLC | None = None):
    """What ``decode(out=)`` gives for ``payload`` in the current mode: the bits of the values (into a
    NaN-filled slice of a larger buffer, whose values past ``n`` must stay NaN), or the error."""
    buf = torch.full((n + 7,), float("nan"))
    try:
        got = (codec or ThreeLC()).decode(payload, out=buf[:n])
    except CorruptPayloadError as err:
        return type(err), str(err)
    assert got.data_ptr() == buf.data_ptr() and torch.isnan(buf[n:]).all()  # nothing written past n
    return buf[:n].view(torch.int32).tolist()  # the bits: -0.0 and +0.0 differ


@settings(max_examples=400)  # about 1 ms each: the corner cases need more than the profile's default
@given(
    stream=st.lists(st.sampled_from([121, 121, 0, 7, 40, 120, 122, 200, 242, 243, 244, 250, 254, 255]), min_size=1,
                    max_size=30),
    extra=st.integers(-6, 6),
    scale=st.sampled_from([0.0, 1e-40, 0.25, 3.0e38]),
)
def test_one_pass_c_decode_matches_the_python_decoder(stream, extra, scale):
    """The C pass that expands, checks and decodes a stream in one go (auto mode, CPU, below the
    compile threshold) writes the Python decoder's values bit for bit (every one of them, nothing
    past the buffer) or raises its error, with its message, on any byte string, value count and scale."""
    groups = len(naive_unzero_run(stream))
    n = max(1, 5 * groups - 2 + extra)  # around the count the stream stands for: valid and invalid
    payload = Payload(ThreeLC.codec_id, torch.float32, (n,), ThreeLC().params,
                      (torch.tensor([scale], dtype=torch.float32), u8(stream)))
    with forced("eager"):
        want = _decode_outcome(payload, n)
    calls = native.call_count(ZERO_RUN_C)
    with forced("auto"):
        got = _decode_outcome(payload, n)
    assert got == want
    reached = len(stream) <= (n + 4) // 5 <= 14 * len(stream)  # past the byte-count check: the C pass ran
    assert native.call_count(ZERO_RUN_C) == calls + reached


@pytest.mark.parametrize("n", [1, 4, 5, 6, 16, 432, 2304, 50_003])
@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_one_pass_c_decode_of_encoded_tensors(n, density):
    """Real payloads (quantized, quartic, zero-run coded) decode to the same values by the one-pass
    C decoder as by the Python decoder, into ``out`` and into a fresh tensor."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * (torch.rand(n, generator=g) < density)
    codec = ThreeLC(sparsity=1.5)
    payload = codec.encode(x)
    with forced("eager"):
        want = _decode_outcome(payload, n, codec)
        fresh = codec.decode(payload)
    with forced("auto"):
        assert _decode_outcome(payload, n, codec) == want
        assert torch.equal(codec.decode(payload).view(torch.int32), fresh.view(torch.int32))


def test_zero_run_falls_back_to_python_without_a_compiler(tmp_path):
    """No C compiler (``CC`` names none) and no cached build: ``auto`` warns once and codes with the
    Python reference (the same bytes), ``compiled`` raises NativeBuildError, ``eager`` builds nothing."""
    import subprocess
    import sys

    script = (
        "import warnings, torch\n"
        "from gcbench.compressors.kernels.core import forced\n"
        "from gcbench.compressors.kernels.native import NativeBuildError\n"
        "from gcbench.compressors.codecs.threelc.zero_run import zero_run_encode, zero_run_decode\n"
        "data = torch.tensor([121] * 30 + [1, 7] + [121] * 100, dtype=torch.uint8)\n"
        "with forced('eager'):\n"
        "    want = zero_run_encode(data)\n"
        "with forced('auto'), warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    assert torch.equal(zero_run_encode(data), want)\n"
        "    assert torch.equal(zero_run_decode(want, data.numel()), data)\n"
        "assert sum('could not be built' in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]\n"
        "with forced('compiled'):\n"
        "    try:\n"
        "        zero_run_encode(data)\n"
        "    except NativeBuildError as err:\n"
        "        print('raised:', err)\n"
    )
    env = {**__import__("os").environ, "CC": str(tmp_path / "no-such-cc"), "GCBENCH_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "raised: no C compiler found" in run.stdout


@st.composite
def trit_streams(draw):
    """Trit streams with controlled sparsity, built as runs so that long zero-runs occur."""
    p_zero = draw(st.sampled_from([0.0, 0.3, 0.8, 0.95, 0.995, 1.0]))
    n = draw(st.integers(0, 2000))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    nonzero = rng.random(n) >= p_zero
    signs = rng.choice([-1, 1], size=n)
    return (nonzero * signs).astype(int).tolist()


@pytest.mark.parametrize("name", CODERS)
@given(trits=trit_streams())
def test_pipeline_matches_naive_on_random_streams(name, trits):
    enc = quartic_encode(trit_tensor(trits))
    assert enc.tolist() == naive_quartic(trits)
    with coder(name):
        zr = zero_run_encode(enc)
        assert zr.tolist() == naive_zero_run(enc.tolist())
        back = zero_run_decode(zr, enc.numel())
    assert torch.equal(back, enc)
    assert quartic_decode(back, len(trits)).tolist() == trits


@pytest.mark.parametrize("name", CODERS)
@given(stream=st.lists(st.sampled_from([121, 121, 121, 0, 7, 242, 243, 244, 250, 254, 255]), max_size=40))
def test_zero_run_decoder_accepts_exactly_the_canonical_streams(name, stream):
    """Any byte string: either CorruptPayloadError, or it re-encodes to itself (canonical)."""
    data = u8(stream)
    with coder(name):
        try:
            dec = zero_run_decode(data)
        except CorruptPayloadError:
            # the naive reference agrees that the greedy encoder never writes it
            assert naive_zero_run(naive_unzero_run(stream)) != stream
            return
        assert dec.tolist() == naive_unzero_run(stream)
        assert zero_run_encode(dec).tolist() == stream


@pytest.mark.parametrize(
    "stream",
    [[121, 121], [121, 243], [243, 121], [250, 255], [121, 255], [244, 244], [255, 243, 121]],
)
def test_zero_run_rejects_non_canonical(stream, zr):
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(u8(stream))


def test_zero_run_rejects_wrong_lengths_before_allocating(zr):
    enc = zero_run_encode(u8([121] * 30 + [1]))  # [255, 255, 243, 1] -> 31 bytes
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(enc, 30)
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(enc, 32)
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(enc[:-1], 31)  # truncated
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(u8([]), 1)
    # a declared length beyond 14 x the data is refused without allocating it (10**15 bytes)
    with pytest.raises(CorruptPayloadError, match="cannot expand"):
        zero_run_decode(enc, 10**15)
    with pytest.raises(CorruptPayloadError):
        zero_run_decode(enc.to(torch.int8), 31)


# --- 3-value quantization -------------------------------------------------------------------------


@pytest.mark.parametrize("s", [1.0, 1.3, 1.9])
def test_quantization_matches_naive_and_decodes_to_three_values(s):
    x = torch.randn(3001, generator=torch.Generator().manual_seed(1))
    trits, m = quantize_3value(x, s)
    ref, ref_m = naive_quantize(x.numpy(), s)
    assert m == ref_m and trits.tolist() == ref
    out = ThreeLC(sparsity=s).roundtrip(x)
    assert set(out.unique().tolist()) <= {-m, 0.0, m}
    assert torch.equal(out, m * trits.float())
    # the largest value always survives (|x_max| = M / s > M / 2)
    i = int(x.abs().argmax())
    assert out[i] == math.copysign(m, float(x[i]))


def test_quantization_ties_go_to_zero():
    x = torch.tensor([1.0, 0.5, -0.5, 0.25, -1.0])
    trits, m = quantize_3value(x, 1.0)
    assert m == 1.0 and trits.tolist() == [1, 0, 0, 0, -1]


def test_sparsity_multiplier_gives_more_zeros():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(2))
    zeros = {s: int((quantize_3value(x, s)[0] == 0).sum()) for s in (1.0, 1.5, 1.9)}
    assert zeros[1.0] < zeros[1.5] < zeros[1.9]


def test_error_feedback_telescopes():
    """sum_t decode_t = sum_t g_t - e_T, and |e_T| <= M_T / 2 elementwise (paper Section 3.1)."""
    codec = compressors.get("3lc", sparsity=1.5)
    assert isinstance(codec, ErrorFeedback) and isinstance(codec.codec, ThreeLC)
    gen = torch.Generator().manual_seed(3)
    true_sum = torch.zeros(4000, dtype=torch.float64)
    sent_sum = torch.zeros(4000, dtype=torch.float64)
    for _ in range(40):
        g = torch.randn(4000, generator=gen) + 0.05  # a small consistent drift, as in a gradient
        p = codec.encode(g, key="w")
        sent_sum += codec.decode(p).double()
        true_sum += g.double()
        m = float(p.sections[0][0])
    residual = codec.memory["w"].double()
    torch.testing.assert_close(sent_sum + residual, true_sum, rtol=0, atol=1e-3)
    assert float((true_sum - sent_sum).abs().max()) <= m / 2 + 1e-5
    # the accumulated drift (40 x 0.05 = 2 per element) is transmitted, not lost to rounding ...
    assert abs(float(sent_sum.mean()) - float(true_sum.mean())) < 0.2
    # ... while without error feedback most of it is lost: each step rounds the small drift to zero
    raw = ThreeLC(sparsity=1.5)
    gen = torch.Generator().manual_seed(3)
    raw_sum = sum(raw.roundtrip(torch.randn(4000, generator=gen) + 0.05).double() for _ in range(40))
    assert abs(float(raw_sum.mean()) - float(true_sum.mean())) > 1.5
    assert float((true_sum - raw_sum).abs().max()) > 2 * float((true_sum - sent_sum).abs().max())


# --- the codec ------------------------------------------------------------------------------------


@pytest.mark.parametrize("zero_run", [True, False])
@pytest.mark.parametrize("n", [1, 4, 5, 6, 14, 71, 2003])
@pytest.mark.parametrize("kind", ["sparse", "dense", "zeros"])
def test_codec_round_trip_and_wire(zero_run, n, kind):
    gen = torch.Generator().manual_seed(n)
    x = {
        "sparse": torch.randn(n, generator=gen),
        "dense": torch.rand(n, generator=gen) * 2 - 1,
        "zeros": torch.zeros(n),
    }[kind]
    codec = ThreeLC(sparsity=1.0, zero_run=zero_run)
    p = codec.encode(x)
    trits, m = quantize_3value(x, 1.0)
    out = codec.decode(p)
    assert torch.equal(out, m * trits.float())
    data = p.sections[1]
    expected = naive_quartic(trits.tolist())
    assert data.tolist() == (naive_zero_run(expected) if zero_run else expected)
    wire = p.to_bytes()
    assert len(wire) == p.nbytes
    assert torch.equal(codec.decode(Payload.from_bytes(wire)), out)


@pytest.mark.parametrize("n", [1003, 1005])
def test_blocked_encoding_matches_whole_tensor(monkeypatch, n):
    """The CPU encoder works in cache-sized blocks; small blocks must give the same bytes."""
    from gcbench.compressors.codecs.threelc import codec as threelc

    x = torch.randn(n, generator=torch.Generator().manual_seed(10)) * (torch.arange(n) % 7 == 0)
    whole = ThreeLC(zero_run=False).encode(x).sections[1]
    monkeypatch.setattr(threelc, "CPU_BLOCK", 15)
    blocked = ThreeLC(zero_run=False).encode(x).sections[1]
    assert torch.equal(blocked, whole)
    assert blocked.tolist() == naive_quartic(quantize_3value(x, 1.0)[0].tolist())


def test_sparse_and_dense_decode_paths_agree():
    """The decoder scatters few non-zero groups, or expands dense streams: same values either way."""
    gen = torch.Generator().manual_seed(4)
    for x in (torch.randn(5000, generator=gen), torch.rand(5000, generator=gen) - 0.5):
        a = ThreeLC(zero_run=True).roundtrip(x)
        b = ThreeLC(zero_run=False).roundtrip(x)
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes(dtype):
    x = (torch.randn(999, generator=torch.Generator().manual_seed(5)) * 1000).to(dtype)
    out = ThreeLC(sparsity=1.9).roundtrip(x)
    assert out.dtype == dtype and torch.isfinite(out).all()
    big = torch.full((10,), torch.finfo(dtype).max, dtype=dtype)
    big[3] = -big[3]
    # M = max * 1.9 would overflow: it is clamped to the dtype's range, so the output stays finite
    out = ThreeLC(sparsity=1.9).roundtrip(big)
    assert torch.isfinite(out).all() and torch.equal(out, big)


def test_hostile_payloads_raise_corrupt():
    x = torch.randn(998, generator=torch.Generator().manual_seed(6)) * 0.01
    x[500] = 1.0  # one spike: long zero-runs (bytes 255) around it
    x[-1] = -1.0  # the last group (3 values + 2 padding trits) is not all zeros
    for zero_run in (True, False):
        codec = ThreeLC(zero_run=zero_run)
        p = codec.encode(x)
        scale, data = p.sections

        def with_sections(*secs):
            return Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(secs))

        bad = [
            (scale,),
            (scale, data, data),
            (scale.double()[:0], data),
            (-scale, data),
            (torch.tensor([float("nan")]), data),
            (torch.tensor([float("inf")]), data),
            (torch.zeros(1), data),  # M = 0 with non-zero trits
            (scale, data[:-1]),  # truncated
            (scale, torch.cat([data, u8([121])])),
            (scale, torch.cat([data, u8([7])])),
            (scale, data.to(torch.int16)),
        ]
        quartic = quartic_encode(quantize_3value(x, 1.0)[0])
        assert int(quartic[-1]) % 9 == 4  # padding trits 1, 1 (quantized zeros)
        quartic[-1] += 1  # a padding trit that is not a quantized zero
        bad.append((scale, zero_run_encode(quartic) if zero_run else quartic))
        if zero_run:
            i = int((data == 255).nonzero()[0])
            # a run of 14 written as 13 + 1: right length, but not what the greedy encoder writes
            bad.append((scale, torch.cat([data[:i], u8([254, 121]), data[i + 1 :]])))
        else:
            d = data.clone()
            d[10] = 250
            bad.append((scale, d))  # a run byte in a quartic-only stream
        for secs in bad:
            with pytest.raises(CorruptPayloadError):
                codec.decode(with_sections(*secs))


def test_parameters_are_validated():
    for bad in (0.5, 2.0, float("nan"), True, "1"):
        with pytest.raises(InvalidParameterError):
            ThreeLC(sparsity=bad)
    with pytest.raises(InvalidParameterError):
        ThreeLC(zero_run=1)
    assert ThreeLC(sparsity=1).sparsity == 1.0
    assert [s.lossless for s in ThreeLC.stages] == [False, True, True]


def test_sparse_coo_input_round_trip():
    dense = torch.zeros(30, 8)
    dense[3, 1], dense[17, 5], dense[20, 0] = 2.0, -1.5, 0.5
    codec = ThreeLC()
    out = codec.decode(codec.encode(dense.to_sparse()))
    expected = torch.zeros(30, 8)
    expected[3, 1], expected[17, 5] = 2.0, -2.0  # M = 2; 0.5 < M/2 rounds to 0
    assert out.layout == torch.sparse_coo and torch.equal(out.to_dense(), expected)


# --- per-stage sizes (the 3LC traffic table) ------------------------------------------------------


def test_stage_sizes_are_real_bytes():
    x = torch.randn(1003, generator=torch.Generator().manual_seed(7))
    sizes = stage_sizes(x, 1.0)
    trits, _ = quantize_3value(x, 1.0)
    assert sizes["fp32"] == 4 * 1003
    assert sizes["2bit"] == pack_bits((trits + 1).to(torch.uint8), 2).numel() == math.ceil(2 * 1003 / 8)
    assert sizes["quartic"] == len(naive_quartic(trits.tolist())) == math.ceil(1003 / 5)
    assert sizes["zero_run"] == len(naive_zero_run(naive_quartic(trits.tolist())))
    assert sizes["payload"] == ThreeLC().encode(x).nbytes
    assert stage_sizes(torch.zeros(0))["zero_run"] == 0


def test_quartic_saves_20_percent_and_zero_run_at_least_2x(record_property):
    """Paper: quartic ~20% below 2-bit packing; zero-run 2x or more on top on sparse streams."""
    n = 100_000
    s = 1.9
    codec = compressors.get("3lc", sparsity=s)
    gen = torch.Generator().manual_seed(8)
    for _ in range(5):  # a few steps of error feedback on gaussian gradients
        g = torch.randn(n, generator=gen)
        corrected = g + codec.memory.get("w", torch.zeros(n))
        codec.encode(g, key="w")
    sizes = stage_sizes(corrected, s)
    assert sizes["quartic"] / sizes["2bit"] == pytest.approx(0.8)  # 1/5 vs 1/4 byte per value
    on_top = sizes["quartic"] / sizes["zero_run"]
    record_property("zero_run_on_top_of_quartic", on_top)
    assert 2.0 <= on_top <= 14.0


# --- devices --------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", devices())
def test_device_round_trip(device):
    x = torch.randn(20_000, generator=torch.Generator().manual_seed(9))
    for zero_run in (True, False):
        codec = ThreeLC(sparsity=1.2, zero_run=zero_run)
        p_cpu = codec.encode(x)
        p_dev = codec.encode(x.to(device))
        assert all(torch.equal(a.cpu(), b) for a, b in zip(p_dev.sections, p_cpu.sections))
        assert torch.equal(codec.decode(p_dev).cpu(), codec.decode(p_cpu))


def test_a_stream_too_short_for_its_declared_size_is_refused_before_allocating(monkeypatch):
    """A half-precision payload (decoded into a new float32 tensor, then cast) declaring a million values
    with four stream bytes: refused by the byte count before anything of the declared size exists, on
    the one-pass path (below the compile threshold) as on the others (2^28 values)."""
    sizes: list[int] = []
    real_empty = torch.empty

    def recording_empty(*shape, **kw):
        t = real_empty(*shape, **kw)
        sizes.append(t.numel())
        return t

    codec = ThreeLC()
    p = codec.encode(torch.randn(16, generator=torch.Generator().manual_seed(14)).half())
    monkeypatch.setattr(torch, "empty", recording_empty)
    for n in ((1 << 20) - 1, 1 << 28):
        hostile = Payload(p.codec_id, torch.float16, (n,), p.params, p.sections)
        with forced("auto"), pytest.raises(CorruptPayloadError, match="cannot expand"):
            codec.decode(hostile)
    assert max(sizes, default=0) < 1 << 16
