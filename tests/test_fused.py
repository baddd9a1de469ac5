"""Compiled kernels (compressors/kernels/core.py) against the eager reference: same payload bytes and the
same decoded values for every registered codec, on a range of sizes and input dtypes, three steps
in a row for stateful codecs (error feedback, warm starts). Also the GCBENCH_COMPILE switch.

Compiling costs seconds per kernel (more on a loaded machine; Inductor caches the compiled code on
disk, so later runs are quick); the sizes are chosen so that each kernel compiles for the
``(rows, bucket)`` body and the ``(1, tail)`` tail shapes once, and every other size reuses them.
"""

from __future__ import annotations

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import ErrorFeedback
from gcbench.compressors.kernels import core as fused
from gcbench.compressors.kernels import native
from gcbench.compressors.kernels import sign as fused_sign
from gcbench.compressors.kernels import threelc as fused_threelc
from gcbench.compressors.errors import InvalidParameterError, NumericOverflowError

SIZES = (3, 1000, 4099, 70_001)
DTYPES = (torch.float32, torch.float16, torch.float64)
#: Codecs with a compiled kernel (all sizes); the others run the eager code in both modes and are
#: checked on two sizes only (same bytes, at a fraction of the suite's time).
KERNEL_CODECS = ("qsgd", "terngrad", "zipml8", "zipml16", "3lc", "signsgd", "ef-signsgd", "dgc",
                 "countsketch", "topk", "topk-sampled", "sketchml")
#: Codecs whose compiled mode on the CPU runs C kernels (compressors/kernels/native.py) rather than an
#: Inductor kernel (Count Sketch's accumulate, scan and queries; SketchML's decode query, which
#: tests/test_sketchml_decode.py compares, the codec not being byte-reproducible; signSGD's bits and
#: decode, whose Inductor kernels test_inductor_sign_kernels_equal_eager runs; 3LC runs both; ZipML's
#: rounding to 8 and 16 bits and its decode, on every x86 ISA, which tests/test_dequantize_c.py and
#: tests/test_quantize_c.py compare with Inductor's kernels; top-k's candidate scan, exact and
#: sampled, whose Inductor kernel tests/test_topk.py's test_compiled_scan_equals_torch_nonzero runs and
#: tests/test_topk_scan_c.py compares with the C one).
NATIVE_CODECS = ("countsketch", "sketchml", "signsgd", "zipml8", "zipml16", "topk", "topk-sampled")
#: Codecs whose kernels run on the CPU only (Count Sketch's code rebuild: gathers on an accelerator,
#: :meth:`~gcbench.compressors.codecs.countsketch.hashes.HashTables.compiled_codes`).
CPU_KERNELS_ONLY = ("countsketch",)
#: Sizes added for a codec whose kernel starts at a larger size (Count Sketch's code rebuild works on
#: spans of compressors.kernels.countsketch.SPAN = 2^18 coordinates; the exact TopK's candidate scan
#: runs from 2^17 values, compressors.codecs.topk._FILTER_MIN_NUMEL).
EXTRA_SIZES = {"countsketch": (300_001,), "topk": (140_001,)}


def _run(name: str, mode: str, xs: list[torch.Tensor], device: str) -> list[tuple[bytes, torch.Tensor]]:
    with fused.forced(mode):
        codec = compressors.get(name)
        out = []
        for x in xs:
            p = codec.encode(x.to(device), key="k")
            out.append((p.to_bytes(), codec.decode(p)))
        return out


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", [n for n in compressors.names() if compressors.get(n).reproducible])
def test_compiled_payloads_equal_eager(name, device):
    calls, ran_compiled, ran_c = fused.call_count(), fused.compiled_call_count(), native.call_count()
    for n in SIZES + EXTRA_SIZES.get(name, ()) if name in KERNEL_CODECS else (3, 4099):
        for dtype in DTYPES:
            g = torch.Generator().manual_seed(n)
            xs = [(torch.randn(n, generator=g) * 3).to(dtype) for _ in range(3)]
            eager = _run(name, "eager", xs, device)
            compiled = _run(name, "compiled", xs, device)
            for step, ((be, de), (bc, dc)) in enumerate(zip(eager, compiled)):
                assert be == bc, f"{name} n={n} {dtype} step {step}: payload bytes differ"
                assert de.dtype == dc.dtype and torch.equal(de, dc), f"{name} n={n} {dtype} step {step}: decode differs"
    if name in NATIVE_CODECS and device == "cpu":
        assert native.call_count() > ran_c  # these really ran their C kernels
    elif name in CPU_KERNELS_ONLY and device != "cpu":
        pass  # gathers on an accelerator in both modes
    elif name in KERNEL_CODECS:
        assert fused.call_count() > calls  # these really ran a compiled kernel ...
        assert fused.compiled_call_count() > ran_compiled  # ... not only its eager function (small degenerate shapes)
    else:
        assert fused.call_count() == calls  # the list above is complete



def test_kernels_with_products_and_sums_compile_without_fma():
    """Triton fuses ``a * b + c`` into one FMA (one rounding) unless told not to: the CUDA bytes would
    then differ from eager's two roundings (DGC's momentum step did, on an H200). Every kernel whose
    function multiplies and adds floats carries :data:`~gcbench.compressors.kernels.core.NO_FMA`."""
    from gcbench.compressors.kernels import sparse as fused_sparse

    with_products = [fused.dither_codes, fused.dither_planar16, fused.moments, fused.dequantize, fused.dequantize16,
                     fused_sparse.dgc_step, fused_sparse.dgc_step_finite]
    for kernel in with_products:
        assert fused.NO_FMA.items() <= (kernel.options or {}).items(), kernel.name


def test_every_codec_has_a_kernel_or_says_why_not():
    """``gcbench bench`` prints "compiled: same as eager, no kernel because ..." for a codec without a
    kernel (Inductor or C): the reason must exist, and a codec with a kernel must not claim to have none."""
    for name in compressors.names():
        reason = compressors.get(name).no_kernel_reason
        assert (name in KERNEL_CODECS) != bool(reason), name

#: Error feedback whose residual a fused kernel computes (``encode_with_feedback``): the registry's
#: 3LC and EF-sign, and the wrapper around the casts and plain signSGD.
EF_FUSED = ("3lc", "ef-signsgd", "fp16", "bf16", "signsgd")


def _ef(name: str):
    codec = compressors.get(name)
    return codec if isinstance(codec, ErrorFeedback) else ErrorFeedback(codec)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", EF_FUSED)
def test_fused_error_feedback_equals_generic(name, device):
    """Same bytes, decode *and residual memory* as the generic encode / decode / subtract, step after
    step (the residual carries over), including values the 16-bit casts saturate."""
    kernels = fused_threelc.feedback_trits.calls + fused_sign.ef_sign.calls + fused.ef_cast16.calls + native.call_count()
    for n in (3, 4099, 70_001):
        g = torch.Generator().manual_seed(n)
        xs = [torch.randn(n, generator=g) * 3 for _ in range(3)]
        xs[1][::7] *= 1e5  # beyond float16's range: the cast saturates, the residual keeps the rest
        runs = {}
        for mode in ("eager", "compiled"):
            with fused.forced(mode):
                codec, out = _ef(name), []
                for x in xs:
                    p = codec.encode(x.to(device), key="k")
                    out.append((p.to_bytes(), codec.decode(p), codec.residual("k").clone()))
                runs[mode] = out
        for step, ((be, de, re), (bc, dc, rc)) in enumerate(zip(runs["eager"], runs["compiled"])):
            assert be == bc, f"{name} n={n} step {step}: payload bytes differ"
            assert torch.equal(de, dc), f"{name} n={n} step {step}: decode differs"
            assert re.dtype == rc.dtype and re.shape == rc.shape and torch.equal(re, rc), f"{name} n={n} step {step}: residual differs"
    # a fused pass ran: Inductor's, or on the CPU a C one (EF-signSGD's, compressors/kernels/c/sign.c)
    assert fused_threelc.feedback_trits.calls + fused_sign.ef_sign.calls + fused.ef_cast16.calls + native.call_count() > kernels


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", EF_FUSED)
def test_a_generator_does_not_keep_a_deterministic_codec_off_the_fused_path(name, device, monkeypatch):
    """The training paths (the DDP hook, the simulated cluster) hand every encode its tensor's
    generator; a deterministic codec uses none, so its error feedback takes the fused path all the
    same where it applies (compiled, or eager for a codec with ``feedback_in_eager``: no decode inside
    the encode from the second step on), with the bytes and residual of an encode without one, and
    leaves the generator as it was."""
    decodes = {"n": 0}
    inner = type(_ef(name).codec)
    real_decode = inner.decode

    def counting_decode(self, *args, **kwargs):
        decodes["n"] += 1
        return real_decode(self, *args, **kwargs)

    monkeypatch.setattr(inner, "decode", counting_decode)
    for mode in ("eager", "compiled"):
        g = torch.Generator().manual_seed(4099)
        xs = [(torch.randn(4099, generator=g) * 3).to(device) for _ in range(3)]
        with fused.forced(mode):
            with_gen, without = _ef(name), _ef(name)
            gen = torch.Generator(device).manual_seed(7)
            state = gen.get_state()
            for step, x in enumerate(xs):
                decodes["n"] = 0
                p = with_gen.encode(x, key="k", generator=gen)
                if step > 0 and (mode == "compiled" or getattr(inner, "feedback_in_eager", False)):
                    assert decodes["n"] == 0, f"{name} {mode} step {step}: the generic path ran"
                q = without.encode(x, key="k")
                assert p.to_bytes() == q.to_bytes() and torch.equal(with_gen.residual("k"), without.residual("k"))
            assert torch.equal(gen.get_state(), state)


@pytest.mark.parametrize("name", EF_FUSED)
def test_fused_error_feedback_keeps_errors_and_state(name):
    """A non-finite corrected gradient raises the generic path's error, and the memory stays as it was."""
    x = torch.randn(4099, generator=torch.Generator().manual_seed(1))
    bad = x.clone()
    bad[17] = float("nan")
    errors = {}
    for mode in ("eager", "compiled"):
        with fused.forced(mode):
            codec = _ef(name)
            codec.encode(x, key="k")
            before = codec.residual("k").clone()
            with pytest.raises(NumericOverflowError) as err:
                codec.encode(bad, key="k")
            assert torch.equal(codec.residual("k"), before)
            errors[mode] = str(err.value)
    assert errors["eager"] == errors["compiled"]


def _three_steps_equal(name: str) -> None:
    """Eager and compiled give the same bytes and decodes on the CPU, at each of :data:`SIZES`, three
    steps in a row (with error feedback, a step's bytes depend on the residual of the one before)."""
    for n in SIZES:
        g = torch.Generator().manual_seed(n)
        xs = [torch.randn(n, generator=g) * 3 for _ in range(3)]
        for step, ((be, de), (bc, dc)) in enumerate(zip(_run(name, "eager", xs, "cpu"), _run(name, "compiled", xs, "cpu"))):
            assert be == bc and torch.equal(de, dc), f"{name} n={n} step {step}"


@pytest.mark.parametrize("name", ["qsgd", "terngrad", "zipml8", "zipml16"])
def test_inductor_rounding_equals_eager(name, monkeypatch):
    """The compiled rounding kernels (Inductor's on the CPU), which the C pass replaces on the CPU for
    codes of 1 to 8 and 16 bits (``rounding.rounds_in_c``; still the kernels on CUDA and of other
    widths): the eager bytes, several sizes, three steps."""
    from gcbench.compressors.codecs import rounding

    monkeypatch.setattr(rounding, "rounds_in_c", lambda *args: False)
    kernel = fused.dither_planar16 if name == "zipml16" else fused.dither_codes
    ran = kernel.calls - kernel.eager_calls
    c_calls = native.call_count("quantize")
    _three_steps_equal(name)
    assert kernel.calls - kernel.eager_calls > ran
    assert native.call_count("quantize") == c_calls


@pytest.mark.parametrize("name", ["signsgd", "ef-signsgd"])
def test_inductor_sign_kernels_equal_eager(name, monkeypatch):
    """signSGD's and EF-signSGD's compiled kernels (Inductor's on the CPU), which C passes replace on
    the CPU where C kernels build (``codecs.sign.sign_native``; still the kernels on CUDA): the eager
    bytes, decode and residual, several sizes, three steps."""
    from gcbench.compressors.codecs import sign

    monkeypatch.setattr(sign, "sign_native", lambda device: False)
    kernels = (fused_sign.sign_bits, fused_sign.ef_sign, fused_sign.sign_decode)
    ran = sum(k.calls - k.eager_calls for k in kernels)
    c_calls = native.call_count("sign")
    _three_steps_equal(name)
    assert sum(k.calls - k.eager_calls for k in kernels) > ran
    assert native.call_count("sign") == c_calls


def test_kernel_compiles_once_for_many_sizes(monkeypatch):
    """Dynamic shapes: new sizes reuse the compiled kernel (no compilation, no new signature). The
    sizes are above ``EAGER_DEGENERATE_MAX`` (QSGD's rows have a size-1 byte-place dimension, so a
    smaller first call would run eagerly and leave nothing compiled to reuse). Inductor's kernel: the
    CPU's C rounding pass set aside."""
    from gcbench.compressors.codecs import rounding

    monkeypatch.setattr(rounding, "rounds_in_c", lambda *args: False)
    with fused.forced("compiled"):
        codec = compressors.get("qsgd")
        codec.decode(codec.encode(torch.randn(128 * 300 + 7), key="k"))
        before = dict(fused.dither_codes.first_call_s)
        assert before  # the first call compiled
        for n in (128 * 377 + 5, 128 * 600 + 99):
            codec.decode(codec.encode(torch.randn(n), key="k"))
        assert fused.dither_codes.first_call_s == before


def test_a_size_one_dimension_is_a_signature_of_its_own():
    """Inductor specialises dimensions of size 0 or 1 even with dynamic shapes, so a one-row call
    compiles a graph of its own: its first call (compilation) is recorded, not hidden behind the
    many-row signature; other sizes add nothing. Small such calls run the function eagerly instead
    (same values, no compilation)."""
    toy = fused.Kernel(lambda x: x * 2.0, "toy_double")
    big = fused.EAGER_DEGENERATE_MAX + 1
    with fused.forced("compiled"):
        toy(torch.ones(3, 4))
        toy(torch.ones(5, 7))
        assert len(toy.first_call_s) == 1 and toy.eager_calls == 0
        assert torch.equal(toy(torch.ones(1, 4)), torch.full((1, 4), 2.0))
        assert torch.equal(toy(torch.ones(0, 4)), torch.ones(0, 4))
        assert len(toy.first_call_s) == 1 and toy.eager_calls == 2 and toy.calls == 4
        assert torch.equal(toy(torch.ones(1, big)), torch.full((1, big), 2.0))
        assert len(toy.first_call_s) == 2 and toy.eager_calls == 2
        toy(torch.ones(1, big + 9))
        assert len(toy.first_call_s) == 2


def test_mode_switch(monkeypatch):
    monkeypatch.delenv(fused.MODE_ENV, raising=False)
    assert fused.mode() == "auto"  # unset: the per-machine choice (the hook compiles ahead of time)
    monkeypatch.setenv(fused.MODE_ENV, "0")
    assert fused.mode() == "eager" and not fused.use_compiled(10**9)
    monkeypatch.setenv(fused.MODE_ENV, "1")
    assert fused.mode() == "compiled" and fused.use_compiled(1)
    monkeypatch.setenv(fused.MODE_ENV, "auto")
    assert fused.use_compiled(fused.AUTO_MIN_NUMEL) and not fused.use_compiled(fused.AUTO_MIN_NUMEL - 1)
    with fused.forced("eager"):
        assert not fused.use_compiled(10**9)
    assert fused.mode() == "auto"
    monkeypatch.setenv(fused.MODE_ENV, "sometimes")
    with pytest.raises(InvalidParameterError):
        fused.mode()
    with pytest.raises(InvalidParameterError):
        with fused.forced("fast"):
            pass


#: Codecs whose own scan is the finiteness check: a min/max or norm they need anyway (3LC, TernGrad,
#: ZipML, QSGD, the casts' scan of their 16-bit result; both modes) or a compiled kernel's flag
#: (signSGD: compiled mode).
SELF_CHECKED = ("3lc", "terngrad", "zipml8", "qsgd", "signsgd", "fp16", "bf16")


def _raw(name: str):
    codec = compressors.get(name)
    return codec.codec if isinstance(codec, ErrorFeedback) else codec  # 3LC's raw codec: no EF scan


@pytest.mark.parametrize("name", SELF_CHECKED)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_folded_finite_check_skips_the_extra_scan_and_keeps_the_error(name, bad, monkeypatch):
    """The contract's separate scan (numerics.check_finite) does not run, and NaN/Inf still raise the same
    typed error with the same message, state and random stream untouched, in both modes."""
    from gcbench.compressors import base
    from gcbench.compressors.errors import NonFiniteGradientError

    def no_scan(x):
        raise AssertionError("the separate finiteness scan ran")

    monkeypatch.setattr(base, "check_finite", no_scan)
    x = torch.randn(4099, generator=torch.Generator().manual_seed(2))
    y = x.clone()
    y[4097] = bad
    y[5] = bad
    messages = {}
    for mode in ("compiled", "eager") if name == "signsgd" else ("eager", "compiled"):
        with fused.forced(mode):
            codec, twin = (_raw(name) for _ in range(2))
            if mode == "eager" and name == "signsgd":
                monkeypatch.undo()  # eager: no kernel to fold into, the contract's scan runs
            with pytest.raises(NonFiniteGradientError) as err:
                codec.encode(y, key="k")
            messages[mode] = str(err.value)
            assert codec.encode(x, key="k").to_bytes() == twin.encode(x, key="k").to_bytes()
    assert messages["eager"] == messages["compiled"] and "2 non-finite" in messages["eager"]


def test_dgc_overflow_same_error_and_state_in_both_modes():
    """DGC's fused momentum update flags an overflowing accumulator as the eager scan does."""
    x = torch.full((4099,), 3e38)
    messages = {}
    for mode in ("eager", "compiled"):
        with fused.forced(mode):
            codec = compressors.get("dgc")
            codec.encode(x, key="k")
            before = {k: v.clone() for k, v in codec.state_dict().items()}
            with pytest.raises(NumericOverflowError) as err:
                codec.encode(x, key="k")  # u = 0.9 u + g, v + u: beyond float32
            after = codec.state_dict()
            assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
            messages[mode] = str(err.value)
    assert messages["eager"] == messages["compiled"]


def test_terngrad_compiled_decode_rejects_code_3():
    """The fused decode's code-3 flag raises what the table lookup raises."""
    from gcbench.compressors import CorruptPayloadError, Payload

    codec = compressors.get("terngrad")
    p = codec.encode(torch.randn(4099), key="k")
    scale, packed = p.sections
    bad = packed.clone()
    bad[100] = 0xFF  # four codes 3
    hostile = Payload(p.codec_id, p.dtype, p.shape, p.params, (scale, bad), False)
    messages = {}
    for mode in ("eager", "compiled"):
        with fused.forced(mode):
            with pytest.raises(CorruptPayloadError) as err:
                codec.decode(hostile)
            messages[mode] = str(err.value)
    assert messages["eager"] == messages["compiled"]


def test_in_place_residual_update_leaves_saved_state_alone():
    """The fused path overwrites the residual buffer: a state_dict taken before is a copy."""
    with fused.forced("compiled"):
        codec = compressors.get("ef-signsgd")
        codec.encode(torch.randn(4099), key="k")
        saved = codec.state_dict()
        kept = {k: v.clone() for k, v in saved.items()}
        codec.encode(torch.randn(4099), key="k")
        assert all(torch.equal(saved[k], kept[k]) for k in kept)
        assert not torch.equal(codec.residual("k"), kept["ef/k"])


@pytest.mark.parametrize("name", ["qsgd", "terngrad", "zipml8", "zipml16"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 255, 256, 257, 4 * 96 - 1, 4 * 96, 4 * 96 + 5, 128 * 100 + 37])
def test_compiled_stochastic_rounding_at_the_pairs_edges_equals_eager(name, n, monkeypatch):
    """The compiled encode hashes one word for two values ``S`` apart (compressors/kernels/dither.py's
    split_point) and runs the fewer than two rows after ``2S`` eagerly; the eager encode computes each
    value's uniform in sub-chunks. Sizes around the rows' and bytes' edges (small rows under one
    scale: 96 values, so the single-scale codecs pair too), eager chunks and hash sub-chunks that
    split them: the same bytes."""
    from gcbench.compressors.kernels import dither
    from gcbench.compressors.codecs import rounding

    monkeypatch.setattr(rounding, "FUSED_SPAN", 96)
    monkeypatch.setattr(rounding, "MIN_CHUNK", 1024)
    monkeypatch.setattr(dither, "HASH_CHUNK", 100)
    x = torch.randn(n, generator=torch.Generator().manual_seed(5)) * 3
    (be, de), = _run(name, "eager", [x], "cpu")
    (bc, dc), = _run(name, "compiled", [x], "cpu")
    assert be == bc and torch.equal(de, dc)


@pytest.mark.parametrize("levels", [200, 32767])  # 9 and 16 bits: packed high bits, and the planar 16-bit kernels
def test_compiled_wide_qsgd_equals_eager(levels):
    from gcbench.compressors.codecs.qsgd import QSGD

    # more than fused.EAGER_DEGENERATE_MAX values in each half: 9-bit codes are (rows, 128, 1) blocks
    x = torch.randn(128 * 300 + 11, generator=torch.Generator().manual_seed(levels)) * 3
    runs = {}
    compiled = fused.dither_codes.calls - fused.dither_codes.eager_calls
    for mode in ("eager", "compiled"):
        with fused.forced(mode):
            codec = QSGD(levels=levels)
            p = codec.encode(x)
            buf = torch.empty_like(x)
            runs[mode] = (p.to_bytes(), codec.decode(p), codec.decode(p, out=buf))
    assert runs["eager"][0] == runs["compiled"][0]
    assert torch.equal(runs["eager"][1], runs["compiled"][1]) and torch.equal(runs["eager"][1], runs["compiled"][2])
    if levels < 256:
        assert fused.dither_codes.calls - fused.dither_codes.eager_calls > compiled


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_cast_saturates_as_saturating_cast(name, mode):
    """The cast (cast, then saturate the result, both modes) gives numerics.saturating_cast's bits (clamp,
    then cast), at the range's edges included."""
    from gcbench.compressors.numerics import saturating_cast

    f32max = torch.finfo(torch.float32).max
    edges = [65504.0, 65519.99, 65520.0, 1e6, 3.3895313e38, 3.3896e38, f32max, 0.0, -0.0, 1e-8, 6e-8]
    x = torch.tensor(edges + [-e for e in edges] + torch.randn(1000).tolist(), dtype=torch.float32)
    with fused.forced(mode):
        codec = compressors.get(name)
        (q,) = codec.encode(x).sections
    want = saturating_cast(x, q.dtype)
    assert torch.equal(q.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("s", [1, 7, 127, 200, 32767])
def test_qsgd_bucket_kernels_equal_the_eager_ops(s):
    """QSGD's per-bucket scale and decode factor, compiled in one pass each, give the eager ops'
    bits, at the float32 range's edges and on norms a hostile payload may carry (0, subnormal, max)."""
    from gcbench.compressors.codecs.rounding import round_down_nonneg_f32

    fi = torch.finfo(torch.float32)
    g = torch.Generator().manual_seed(s)
    norms = torch.cat([torch.rand(5000, generator=g) * 10, torch.rand(500, generator=g) * fi.max,
                       torch.tensor([0.0, fi.tiny, 1e-45, 2.0**-74, 2.0**-110, fi.max, 1.0, 3.0])]).float()
    s64 = torch.tensor([float(s)], dtype=torch.float64)
    factor = fused.bucket_factor(norms, s64)
    assert torch.equal(factor.view(torch.int32), round_down_nonneg_f32(norms.to(torch.float64) / s).view(torch.int32))
    pos = norms.clamp(min=2.0**-110)  # the encoder's normalisers are >= MIN_SCALE
    scale = fused.bucket_scale(pos, s64)
    assert torch.equal(scale.view(torch.int32), (s / pos.to(torch.float64)).to(torch.float32).view(torch.int32))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sign_scale_and_residual_equal_eager_on_hostile_values(device):
    """signSGD's compiled row sums (fixed-point rounding, ``(y + 2^52) - 2^52`` kept as two ops) and
    packing give the eager bytes, scale and residual on values over float32's whole exponent range,
    subnormals, signed zeros and float32's max, in the raw codec and with error feedback; a first
    step of ``-0.0`` sends bit 1 (``sign(-0) = +1``) and keeps ``-0.0 - s``."""
    from gcbench.compressors.codecs.sign import Sign

    g = torch.Generator().manual_seed(7)
    n = 70_001
    x = ((torch.rand(n, generator=g) + 0.5) * torch.exp2(torch.randint(-140, 120, (n,), generator=g).float())).float()
    x *= torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    x[::97], x[5::101], x[7::89], x[3::211] = 0.0, -0.0, 1e-45, torch.finfo(torch.float32).max
    steps = [x.clamp(-1e37, 1e37), x.flip(0).clamp(-1e37, 1e37), torch.full((n,), -0.0)]
    runs = {}
    for mode in ("eager", "compiled"):
        with fused.forced(mode):
            raw = [Sign(scale="mean_abs").encode(v.to(device)).to_bytes() for v in (x, x[:3001], x[:7])]
            ef, out = ErrorFeedback(Sign(scale="mean_abs")), []
            for v in steps:
                p = ef.encode(v.to(device), key="k")
                out.append((p.to_bytes(), ef.residual("k").cpu().view(torch.int32).tolist()))
            first = ErrorFeedback(Sign(scale="mean_abs"))
            p = first.encode(torch.full((4099,), -0.0, device=device), key="k")
            out.append((p.to_bytes(), first.residual("k").cpu().view(torch.int32).tolist()))
            runs[mode] = (raw, out)
    assert runs["eager"] == runs["compiled"]
    scale, packed = Sign(scale="mean_abs").encode(torch.full((4099,), -0.0)).sections
    assert scale.item() == 0.0 and bool((packed[:-1] == 255).all())


def test_sign_kernels_compile_once_for_many_sizes():
    """Dynamic shapes for signSGD's kernels too: the row sums' (rows, 1024) body, the packing's flat
    multiple of 8 and the first / later error-feedback steps each keep their one signature."""
    with fused.forced("compiled"):
        ef = compressors.get("ef-signsgd")
        for n in (1024 * 3 + 5, 1024 * 7 + 8):
            ef.encode(torch.randn(n), key=str(n))
            ef.encode(torch.randn(n), key=str(n))
        kernels = (fused_sign.abs_rows, fused_sign.ef_sign)
        before = [dict(k.first_call_s) for k in kernels]
        for n in (1024 * 40 + 3, 1024 * 300 + 8 * 11):
            ef.encode(torch.randn(n), key=str(n))
            ef.encode(torch.randn(n), key=str(n))
        assert [k.first_call_s for k in kernels] == before
