"""Bad input beyond the wire fuzzer: typed errors, bounded time and memory, nothing lost.

The fuzzer (``gcbench.commands.fuzz``) changes header fields of wire bytes. Here payloads are forged
section by section (cut, lengthened, filled with extreme values, reinterpreted as another dtype,
swapped with another codec's), and the arguments around a decode or an encode are bad: a device
that is not one, the meta device, a buffer of another kind, a tensor with more dimensions than a
payload carries. Every case must raise a :class:`GCBenchError` within a second, with a peak
resident set of a few MiB beyond what the result itself needs, leave the payload's sections and
the codec's state as they were, and never hand back a payload that cannot be sent.
"""

from __future__ import annotations

import sys
import time

import pytest
import torch

from gcbench import compressors
from gcbench.compressors import ErrorFeedback, GCBenchError, Payload
from gcbench.compressors.errors import PayloadError, PayloadMismatchError, UnsupportedInputError
from gcbench.compressors.wire.payload import DTYPE_CODES, MAX_NDIM

NAMES = compressors.names()
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc/self/clear_refs")

#: Peak resident growth allowed to a refused or decoded forgery beyond 4x its result's bytes.
SLACK_BYTES = 16 << 20
TIME_LIMIT = 5.0  # a hang guard, not a speed claim: generous on two loaded cores
INT_EXTREMES = (0, -1, 2**31 - 1, 2**31, -(2**31), 2**32, 2**40, 2**62, 2**63 - 1, -(2**63))
FLOAT_EXTREMES = (-1.0, float("nan"), float("inf"), -float("inf"), 1e-45, 3.4e38)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _peak_during(fn):
    """``(result or None, exception or None, seconds, peak resident growth in bytes)`` of ``fn()``:
    the kernel's high-water mark, reset by writing 5 to ``/proc/self/clear_refs`` (no garbage
    collection first, unlike ``benchmarks.memory``: 70 ms a call; a collection during ``fn`` can
    only hide growth, never invent it). An allocation under glibc's largest mmap threshold (32 MiB) may
    reuse pages an earlier test freed and not show; larger ones are always fresh pages."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_bytes("VmRSS")
    out = err = None
    t0 = time.perf_counter()
    try:
        out = fn()
    except BaseException as e:  # noqa: BLE001 - judged by the caller
        err = e
    dt = time.perf_counter() - t0
    return out, err, dt, max(0, _status_bytes("VmHWM") - before)


def _result_bytes(out) -> int:
    """4x the bytes of a decoded result (values at 4 bytes or more, a sparse result's indices too)."""
    if not isinstance(out, torch.Tensor):
        return 0
    if out.layout == torch.sparse_coo:
        c = out.coalesce()
        return 4 * (c.values().numel() * max(c.element_size(), 4) + c.indices().numel() * 8)
    return 4 * out.numel() * max(out.element_size(), 4)


def check_memory_bound(decode, bound_of) -> tuple:
    """Run ``decode`` under :func:`_peak_during` and assert its peak growth is within ``bound_of(out)``.

    The high-water mark is the whole process's resident set, file-backed pages included: a first
    call that faults in library code, or pages the kernel reclaimed under pressure elsewhere, shows
    as growth once. A peak over the bound is therefore measured a second time and the smaller of the
    two is judged; a decode that really needs the memory needs it on every call."""
    out, err, dt, peak = _peak_during(decode)
    bound = bound_of(out)
    if peak > bound:
        _, _, _, again = _peak_during(decode)
        assert min(peak, again) <= bound, f"peak {peak >> 20} then {again >> 20} MiB, bound {bound >> 20} MiB"
    return out, err, dt


def check_refused_or_sound(payload: Payload, decode=None) -> str:
    """Decode ``payload`` and return the outcome; fail the test on a broken contract."""
    before = [s.clone() for s in payload.sections]
    decode = decode or (lambda: compressors.decode(payload, max_numel=1 << 22))
    out, err, dt = check_memory_bound(decode, lambda o: SLACK_BYTES + _result_bytes(o))
    if err is not None and not isinstance(err, GCBenchError):
        raise AssertionError(f"untyped {type(err).__name__}: {err}")
    assert dt < TIME_LIMIT, f"took {dt:.2f} s"
    for a, b in zip(before, payload.sections):
        same = torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.numel() else b.numel() == 0
        assert same, "sections changed"
    if out is not None:
        assert tuple(out.shape) == payload.shape and out.dtype == payload.dtype
        values = out.coalesce().values() if out.layout == torch.sparse_coo else out
        assert bool(torch.isfinite(values).all()), "decoded non-finite values"
    return "ok" if err is None else type(err).__name__


def _forge(p: Payload, **kw) -> Payload:
    f = dict(codec_id=p.codec_id, dtype=p.dtype, shape=p.shape, params=p.params, sections=p.sections, sparse=p.sparse)
    f.update(kw)
    return Payload(f["codec_id"], f["dtype"], tuple(f["shape"]), dict(f["params"]), tuple(f["sections"]), f["sparse"])


def _section_forgeries(s: torch.Tensor):
    n = s.numel()
    yield s[:0].clone()
    yield torch.cat([s, s[:1] if n else s.new_zeros(1)])
    yield torch.cat([s, s])
    if not n:
        return
    yield s[:-1].clone()
    fills = FLOAT_EXTREMES if s.is_floating_point() else INT_EXTREMES
    for v in fills:
        if not s.is_floating_point() and not torch.iinfo(s.dtype).min <= v <= torch.iinfo(s.dtype).max:
            continue
        for where in (0, -1, slice(None)):
            t = s.clone()
            try:
                t[where] = v
            except RuntimeError:  # beyond the dtype's range (3.4e38 in float16)
                continue
            yield t
    raw = s.contiguous().view(torch.uint8)
    for dt in DTYPE_CODES:
        size = torch.empty((), dtype=dt).element_size()
        if dt not in (s.dtype, torch.bool) and raw.numel() % size == 0:
            yield raw.view(dt).clone()


INPUTS = {
    "matrix": lambda: torch.randn(64, 48),
    "sparse": lambda: (torch.randn(40, 30) * (torch.rand(40, 30) < 0.05)).to_sparse(),
}


@linux_only
@pytest.mark.parametrize("kind", sorted(INPUTS))
@pytest.mark.parametrize("name", NAMES)
def test_forged_sections_shapes_and_dtypes_fail_typed_fast_and_small(name, kind):
    torch.manual_seed(0)
    p = Payload.from_bytes(compressors.get(name).encode(INPUTS[kind](), key="w").to_bytes())
    outcomes = []
    for i, s in enumerate(p.sections):
        for forged in _section_forgeries(s):
            secs = list(p.sections)
            secs[i] = forged
            outcomes.append(check_refused_or_sound(_forge(p, sections=secs)))
        outcomes.append(check_refused_or_sound(_forge(p, sections=p.sections[:i] + p.sections[i + 1 :])))
    outcomes.append(check_refused_or_sound(_forge(p, sections=p.sections + (torch.zeros(4),))))
    for shape in [(p.numel + 1,), (p.numel * 2,), (1,), (), (1 << 22,), (1 << 21, 2)]:
        outcomes.append(check_refused_or_sound(_forge(p, shape=shape)))
    for dt in DTYPE_CODES:
        outcomes.append(check_refused_or_sound(_forge(p, dtype=dt)))
    outcomes.append(check_refused_or_sound(_forge(p, sparse=not p.sparse)))
    assert outcomes.count("ok") < len(outcomes)  # the forgeries reach the codec's own checks


@linux_only
@pytest.mark.parametrize("name", NAMES)
def test_another_codecs_sections_fail_typed(name):
    x = torch.randn(64, 48)
    mine = compressors.get(name).encode(x, key="w")
    for other in NAMES:
        if other != name:
            theirs = compressors.get(other).encode(x, key="w")
            check_refused_or_sound(_forge(mine, sections=theirs.sections))
            with pytest.raises(PayloadMismatchError):  # another class, or the same with other parameters
                compressors.get(name).decode(theirs)


@linux_only
def test_the_oracle_flags_what_it_should(monkeypatch):
    """Not vacuous: an untyped error, a slow or large decode, and one that writes into the payload fail."""
    p = compressors.get("identity").encode(torch.randn(8))
    for fake, match in [
        (lambda: 1 / 0, "untyped ZeroDivisionError"),
        (lambda: time.sleep(TIME_LIMIT + 0.1), "took"),
        (lambda: torch.ones(1 << 24).add_(1).sum().item() and None, "peak"),  # 64 MiB: over glibc's largest mmap threshold
        (lambda: p.sections[0].zero_().sum().item() and None, "sections changed"),
        (lambda: torch.full((8,), float("nan")), "non-finite"),
    ]:
        with pytest.raises(AssertionError, match=match):
            check_refused_or_sound(p, fake)


@linux_only
def test_the_memory_oracle_forgives_a_first_call_only():
    """Growth that happens once (a first call faulting in library code) is not charged to a decode;
    growth on every call is, and a sparse result's own bytes count toward its bound."""
    calls, kept = [], []

    def first_call_only():
        calls.append(1)
        if not kept:
            kept.append(torch.ones(1 << 24).add_(1))  # 64 MiB kept alive, as a lazy initialisation would be
        return torch.zeros(8)

    check_memory_bound(first_call_only, lambda o: SLACK_BYTES)
    assert len(calls) == 2  # the first call's growth was over the bound, so it was measured again
    with pytest.raises(AssertionError, match="peak"):
        check_memory_bound(lambda: torch.ones(1 << 24).add_(1).sum().item(), lambda o: SLACK_BYTES)
    big_sparse = torch.sparse_coo_tensor(
        torch.arange(1 << 20)[None], torch.ones(1 << 20), (1 << 21,), check_invariants=True
    )
    assert _result_bytes(big_sparse) == 4 * ((1 << 20) * 4 + (1 << 20) * 8)


# --- decode arguments -----------------------------------------------------------------------------


NO_CUDA = [] if torch.cuda.is_available() else ["cuda", "cuda:0"]
BAD_DEVICES = ["meta", "bogus", "cpu:x", 1.5, "cuda:4096", *NO_CUDA]


@pytest.mark.parametrize("device", BAD_DEVICES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_decode_to_a_device_that_cannot_hold_the_result_is_refused(name, device):
    codec = compressors.get(name)
    p = codec.encode(torch.randn(16, 8), key="w")
    before = [s.clone() for s in p.sections]
    with pytest.raises(UnsupportedInputError):
        codec.decode(p, device=device)
    with pytest.raises(UnsupportedInputError):
        compressors.decode(p, device=device)
    assert all(torch.equal(a, b) for a, b in zip(before, p.sections))


@pytest.mark.parametrize("name", NAMES)
def test_decode_into_a_meta_buffer_is_refused(name):
    codec = compressors.get(name)
    p = codec.encode(torch.randn(16, 8), key="w")
    with pytest.raises(UnsupportedInputError, match="meta"):
        codec.decode(p, out=torch.empty(16, 8, device="meta"))


@pytest.mark.parametrize("what", [None, b"GCBP", "GCBP", 5, torch.zeros(3)], ids=repr)
def test_registry_decode_of_something_else_than_a_payload_is_typed(what):
    with pytest.raises(PayloadMismatchError, match="takes a Payload"):
        compressors.decode(what)


# --- the wire parser's buffers --------------------------------------------------------------------


def test_a_strided_buffer_is_read_in_its_logical_order():
    wire = compressors.get("qsgd").encode(torch.randn(100)).to_bytes()
    spread = memoryview(bytes(b for c in wire for b in (c, 0)))[::2]
    assert not spread.c_contiguous
    assert Payload.from_bytes(spread).to_bytes() == wire
    with pytest.raises(PayloadError):
        Payload.from_bytes(memoryview(wire + wire)[::2])


def test_a_released_buffer_is_a_typed_error():
    view = memoryview(bytearray(compressors.get("identity").encode(torch.ones(3)).to_bytes()))
    view.release()
    with pytest.raises(PayloadError):
        Payload.from_bytes(view)


def test_from_tensor_refuses_a_meta_tensor():
    with pytest.raises(PayloadError, match="meta"):
        Payload.from_tensor(torch.empty(64, dtype=torch.uint8, device="meta"))


# --- the encode side ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_encode_of_a_meta_tensor_is_refused(name):
    with pytest.raises(UnsupportedInputError, match="meta"):
        compressors.get(name).encode(torch.empty(16, 8, device="meta"), key="w")


def _state(codec) -> dict:
    return {k: v.clone() for k, v in codec.state_dict().items()}


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", NAMES)
def test_more_dimensions_than_a_payload_carries_are_refused_before_any_state_changes(name):
    """A 17-dimensional tensor is refused before encode updates the codec's state (a residual, a
    momentum, a warm start): its payload could not be serialized, and the state would move for a
    gradient no worker can receive."""
    codec = compressors.get(name)
    codec.encode(torch.randn(64, 48), key="w")
    before = _state(codec)
    x = torch.randn(*([1] * (MAX_NDIM - 2)), 4, 3)
    wide = x.reshape(*([1] * (MAX_NDIM - 1)), 4, 3)
    assert codec.encode(x, key="x").to_bytes()  # 16 dimensions travel
    after_ok = _state(codec)
    with pytest.raises(UnsupportedInputError, match=f"at most {MAX_NDIM} dimensions"):
        codec.encode(wide, key="wide")
    assert _same_state(after_ok, _state(codec))
    assert before.keys() <= after_ok.keys()


@pytest.mark.parametrize("name", [n for n in NAMES if compressors.entry(n).error_feedback])
def test_error_feedback_residual_is_kept_when_a_wide_tensor_is_refused(name):
    """The fused error-feedback path updates the residual in place: a residual held for a
    17-dimensional tensor (set by a protocol) must come through a refused encode unchanged."""
    codec = compressors.get(name)
    assert isinstance(codec, ErrorFeedback)
    shape = (1,) * (MAX_NDIM - 1) + (64, 32)
    residual = torch.randn(shape) * 0.1
    codec.set_residual("k", residual.clone())
    with pytest.raises(UnsupportedInputError):
        codec.encode(torch.randn(shape), key="k")
    assert torch.equal(codec.residual("k"), residual)


ODD_INPUTS = {
    "float16": lambda: torch.randn(300).half(),
    "bfloat16": lambda: torch.randn(300).bfloat16(),
    "float64": lambda: torch.randn(33, 5).double(),
    "transposed": lambda: torch.randn(64, 48).t(),
    "strided": lambda: torch.randn(1000)[::3],
    "expanded": lambda: torch.randn(1, 48).expand(64, 48),
    "0-d": lambda: torch.tensor(1.5),
    "empty": lambda: torch.empty(0, 5),
}


@pytest.mark.parametrize("kind", sorted(ODD_INPUTS))
@pytest.mark.parametrize("name", NAMES)
def test_odd_inputs_round_trip_to_their_own_shape_and_dtype_or_are_refused(name, kind):
    x = ODD_INPUTS[kind]()
    kept = x.clone()
    try:
        wire = compressors.get(name).encode(x, key="w").to_bytes()
    except GCBenchError:
        return  # a documented refusal (e.g. a float64 range a codec's float32 scale cannot hold)
    assert torch.equal(x, kept)  # the caller's tensor is not written
    out = compressors.decode(Payload.from_bytes(wire))
    assert tuple(out.shape) == tuple(x.shape) and out.dtype == x.dtype and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("bad", ["int64", "bool", "complex", "csr", "list"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")  # torch's, on building one
def test_non_float_inputs_are_refused_typed(name, bad):
    x = {
        "int64": lambda: torch.arange(10),
        "bool": lambda: torch.ones(4, dtype=torch.bool),
        "complex": lambda: torch.randn(4, dtype=torch.complex64),
        "csr": lambda: torch.randn(4, 4).to_sparse_csr(),
        "list": lambda: [1.0, 2.0],
    }[bad]()
    with pytest.raises(UnsupportedInputError):
        compressors.get(name).encode(x, key="w")
