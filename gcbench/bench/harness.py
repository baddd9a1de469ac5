"""``gcbench bench``: codec speed as multiples of a same-run ``x.clone()`` and ``dst.copy_(x)``.

Absolute times say more about the machine than about the codec (and a shared machine changes
speed from one minute to the next), so every time is stated next to two baselines measured in the
same process on the same input, *interleaved* with the codec's own calls (round after round:
clone, copy, encode, decode), so that a load change affects both sides of each ratio alike:

* ``clone`` - ``x.clone()``: allocation plus copy (on CPU mostly page faults of fresh memory);
* ``copy``  - ``dst.copy_(x)`` into a preallocated buffer: memory bandwidth.

For each codec (:func:`bench_codec`) it reports the median encode and decode time as multiples of
both (two decodes: ``decode(payload, out=buf)`` into a buffer allocated outside the timed rounds,
the footing of ``copy_`` and what the targets count, and ``decode(payload)`` into a fresh tensor,
``dec new``: :data:`gcbench.bench.table.DECODE_WHAT`), the throughput (elements/s, or key-value pairs/s for sparse-native codecs such as SketchML),
the real payload size (``payload.nbytes``: serialized bytes incl. header and CRC), bits per element,
the relative error of one round trip, and the time of the first (untimed) call, which includes
one-time work such as Count Sketch's hash codes. Extra rows, each labelled, add:

* ``peer`` rows (:mod:`gcbench.bench.peers`): torch's own PowerSGD hook math
  (``powerSGD_hook._orthogonalize`` and the P/Q ``bmm``s, without communication) against gcbench's
  PowerSGD on ResNet-50's layer shapes (:func:`gcbench.bench.inputs.resnet50_shapes`), and
  hivemind's compression classes when hivemind is importable (an optional extra,
  ``pip install gcbench[peers]``);
* ``stage`` rows: Count Sketch accumulate (one row per mode; compiled and auto: the C pass of
  :mod:`gcbench.compressors.kernels.countsketch` where it builds), the floor of a design built on
  torch's scatter-add (``index_add_`` of held codes alone) and unsketch at the reference shape
  (5 x size/50, k = size/500);
* ``stage`` rows of SketchML's encode stages (profiler labels, :func:`gcbench.bench.rounds.stage_timings`);
* ``raw`` rows: the inner codec of error-feedback entries (their encode includes a decode);
* ``vs fastest peer``: time over the fastest same-method peer's (:mod:`gcbench.bench.peers`).

Inputs (:mod:`gcbench.bench.inputs`) are synthetic and labelled: dense float32 N(0, 1) shaped as
the most nearly square matrix; for sparse-native codecs a 1-D sparse COO tensor with i.i.d.
Bernoulli(density) keys and N(0, 1) values. The same inputs as the asv suite
(``benchmarks/common.py``).

Timing is :func:`gcbench.measure.timing.measure` (``time.perf_counter``, CUDA synchronised): every number is
*measured*; the ``target`` column quotes :mod:`gcbench.bench.targets` (CPU or CUDA set, by device).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import __version__, compressors
from .inputs import SEED, make_dense_input, make_sparse_input, powersgd_matrices, resnet_width_div
from .limits import check_rounds, checked_bench_size
from ..measure.error import relative_error
from ..measure.size import bits_per_element
from ..workloads.devices import resolve_device
from ..progress import ProgressBar
from .peers import CSVecStyleSketch, TorchPowerSGDMath, compare_with_peers, countsketch_floor, hivemind_codecs
from .rounds import interleaved, ready_buffer, stage_timings
from .table import COLUMNS, DECODE_WHAT, header_lines, row_cells, to_markdown
from .quiet import quiet_missing_cuda_runtime
from .targets import STATED_NUMEL, target_text, verdict
from ..compressors.registry import check_names, entry
from ..compressors.kernels import core as fused
from ..compressors.kernels import native
from ..compressors.kernels.choice import ISA_ENVS
from ..reproductions.framework.report import cpu_description
from ..measure.timing import Timing, measure
from ..outputs import write_file

quiet_missing_cuda_runtime()  # the compiled rows must not print torch's "No CUDA runtime" warning on a CPU machine

DEFAULT_SIZE = STATED_NUMEL["cpu"]
DEFAULT_DENSITY = 0.1
KEY = "bench"
BASELINES_WHAT = (
    "clone = x.clone(); copy = dst.copy_(x) into a preallocated buffer; both on the dense float32 input "
    "of `size` elements, measured in the same process interleaved with each row's calls (round after "
    "round: clone, copy, encode, decode); ratios are median / median of that row's rounds"
)
TIMING_WHAT = (
    "measured wall clock (time.perf_counter, CUDA synchronised), median over `repeat` rounds after "
    "`warmup` untimed rounds; encode = Codec.encode (no to_bytes), decode = Codec.decode of the payload the "
    "round's encode returned (into a ready buffer, and into a fresh tensor: see decode; bytes and error are "
    "the first payload's)"
)

#: Modes, all timed by default: eager (the reference), compiled (compressors/kernels/core.py's torch.compile
#: kernels for every call) and auto (what runs when GCBENCH_COMPILE is unset: compiled from 1M values on, and
#: for a probed path only where it measured faster on this machine; the targets' verdict that matters).
MODES = ("eager", "compiled", "auto")

# --------------------------------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------------------------------


@dataclass
class BenchRow:
    """One line of ``gcbench bench``. Times in seconds; ``*_x_clone``/``*_x_copy`` are multiples of
    the row's own interleaved baselines; rates are per second in ``rate_unit``."""

    name: str
    kind: str  # "baseline", "codec", "raw" (inner codec of an error-feedback entry), "stage", "peer"
    status: str = "ok"  # "ok", "skipped", "failed"
    what: str = ""
    input: str = ""
    numel: int = 0
    pairs: int | None = None
    encode: dict | None = None
    decode: dict | None = None  # decode(payload, out=buf) into a ready buffer (or allocating: decode_into False)
    decode_new: dict | None = None  # decode(payload) into a fresh tensor (None when decode is that already)
    decode_into: bool | None = None  # whether ``decode`` wrote into a buffer allocated outside the rounds
    first_encode_s: float | None = None
    clone_s: float | None = None
    copy_s: float | None = None
    encode_x_clone: float | None = None
    decode_x_clone: float | None = None
    total_x_clone: float | None = None
    total_x_copy: float | None = None
    encode_x_copy: float | None = None
    decode_x_copy: float | None = None
    decode_new_x_copy: float | None = None
    decode_new_x_clone: float | None = None
    total_new_x_copy: float | None = None  # encode + allocating decode (the footing of peers that allocate)
    encode_rate: float | None = None
    decode_rate: float | None = None
    rate_unit: str = "elements/s"
    nbytes: int | None = None
    bits_per_element: float | None = None
    bits_per_pair: float | None = None
    rel_error: float | None = None
    target: str | None = None
    verdict: str | None = None  # "met" / "not met" against ``target``, or targets.NOT_JUDGED (None: no target or not measured)
    mode: str = "eager"  # "eager", or "compiled" (compressors/kernels/core.py's kernels)
    compile_s: float | None = None  # compilation time within first_encode_s (compiled rows)
    error: str | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


class Baseline:
    """The clone/copy pair timed with every row, on the dense input."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self.dst = torch.empty_like(x)
        self.dst.copy_(x)  # touch the pages: copy_ then measures bandwidth

    def fns(self) -> dict[str, Callable[[], Any]]:
        return {"clone": self.x.clone, "copy": lambda: self.dst.copy_(self.x)}


def _fill_ratios(row: BenchRow, t: Mapping[str, Timing], count: int) -> None:
    """Medians, ratios to the row's interleaved baselines and rates (``count`` items per call)."""
    clone, copy = t["clone"].median_s, t["copy"].median_s
    row.clone_s, row.copy_s = clone, copy
    enc = t.get("encode")
    dec = t.get("decode")
    if enc is not None:
        row.encode = enc.as_dict()
        row.encode_x_clone = enc.median_s / clone
        row.encode_x_copy = enc.median_s / copy
        row.encode_rate = count / enc.median_s if enc.median_s > 0 else None
    if dec is not None:
        row.decode = dec.as_dict()
        row.decode_x_clone = dec.median_s / clone
        row.decode_x_copy = dec.median_s / copy
        row.decode_rate = count / dec.median_s if dec.median_s > 0 else None
    if enc is not None and dec is not None:
        row.total_x_clone = (enc.median_s + dec.median_s) / clone
        row.total_x_copy = (enc.median_s + dec.median_s) / copy
    new = t.get("decode new")
    if new is not None:
        row.decode_new = new.as_dict()
        row.decode_new_x_clone = new.median_s / clone
        row.decode_new_x_copy = new.median_s / copy
        if enc is not None:
            row.total_new_x_copy = (enc.median_s + new.median_s) / copy


def bench_codec(
    codec: Any,
    name: str,
    x: torch.Tensor,
    baseline: Baseline,
    *,
    kind: str = "codec",
    repeat: int = 5,
    warmup: int = 1,
    device: torch.device | str = "cpu",
) -> BenchRow:
    """Measure one codec object on ``x`` (dense, or sparse COO for a sparse-native codec).

    The first encode is timed alone (``first_encode_s``, one-time work included) and its payload
    gives the bytes and the error; then ``warmup`` untimed and ``repeat`` timed rounds of clone,
    copy, encode, decode into a ready buffer, decode into a fresh tensor (:func:`interleaved`), each
    decode of the payload its round's encode returned: a stateful codec's encodes after the first
    are in steady state (error feedback: the residual makes 3LC's stream several times denser), and
    its decodes pay for what those payloads hold. The ready buffer (``decode(payload, out=buf)``, the decode
    the targets count) is allocated and touched once, outside the rounds, as the ``copy_``
    baseline's destination is; a sparse COO payload (or a codec whose decode takes no ``out``)
    times the allocating decode alone.
    """
    sparse = x.layout == torch.sparse_coo
    pairs = int(x._nnz()) if sparse else None
    numel = x.numel()
    desc = (
        f"sparse COO, {numel} elements, {pairs} key-value pairs (density {pairs / numel:.3g}), N(0,1) values"
        if sparse
        else f"dense float32 {tuple(x.shape)} N(0,1)"
    )
    row = BenchRow(name, kind, input=desc, numel=numel, pairs=pairs, target=target_text(name))
    row.rate_unit = "pairs/s" if sparse else "elements/s"
    row.what = "encode = encode(x, key='bench')"
    if getattr(codec, "stateful", False):
        row.what += "; state kept across calls (steady state)"
    if isinstance(codec, compressors.ErrorFeedback):
        row.what += "; error feedback: encode includes the inner decode and the residual update"
    held: dict[str, Any] = {}

    def encode() -> None:
        held["payload"] = codec.encode(x, key=KEY)

    try:
        first = measure(encode, repeat=1, warmup=0, device=device)
        payload = held["payload"]
        decoded = codec.decode(payload)
        row.first_encode_s = first.median_s
        row.nbytes = payload.nbytes
        row.bits_per_element = bits_per_element(row.nbytes, numel)
        row.bits_per_pair = bits_per_element(row.nbytes, pairs) if pairs else None
        row.rel_error = relative_error(x, decoded)
        buf = ready_buffer(codec, payload, decoded)
        del decoded
        fns = {**baseline.fns(), "encode": encode}
        row.decode_into = buf is not None
        if buf is not None:
            row.what += "; decode = decode(the round's payload, out=buf), buf preallocated; decode new = decode(the round's payload)"
            fns["decode"] = lambda: codec.decode(held["payload"], out=buf)
            fns["decode new"] = lambda: codec.decode(held["payload"])
        else:
            row.what += "; decode = decode(the round's payload) into a fresh tensor (its payload cannot decode into a dense buffer)"
            fns["decode"] = lambda: codec.decode(held["payload"])
        t = interleaved(fns, repeat=repeat, warmup=warmup, device=device)
    except Exception as err:  # noqa: BLE001 - the table reports it
        row.status, row.error = "failed", f"{type(err).__name__}: {err}"
        return row
    _fill_ratios(row, t, pairs if sparse else numel)
    return row


def _bench_pair(
    name: str,
    kind: str,
    encode: Callable[[], Any],
    decode: Callable[[], Any] | None,
    baseline: Baseline,
    *,
    count: int,
    unit: str,
    what: str,
    desc: str,
    repeat: int,
    warmup: int,
    device: torch.device | str,
) -> BenchRow:
    """A row for arbitrary encode/decode callables (stages and peers)."""
    row = BenchRow(name, kind, what=what, input=desc, numel=count, rate_unit=unit, target=target_text(name))
    row.mode = fused.mode()  # the mode gcbench's own calls ran in (GCBENCH_COMPILE or a forced block)
    try:
        row.first_encode_s = measure(encode, repeat=1, warmup=0, device=device).median_s
        fns = {**baseline.fns(), "encode": encode}
        if decode is not None:
            fns["decode"] = decode
        t = interleaved(fns, repeat=repeat, warmup=warmup, device=device)
    except Exception as err:  # noqa: BLE001
        row.status, row.error = "failed", f"{type(err).__name__}: {err}"
        return row
    _fill_ratios(row, t, count)
    return row


def _countsketch_rows(
    x: torch.Tensor, baseline: Baseline, modes: Sequence[str], *, peers: bool = False, **kw: Any
) -> list[BenchRow]:
    from ..compressors.codecs.countsketch.codec import CountSketch

    d = x.numel()
    rows_, cols = 5, max(1, d // 50)
    k = max(1, cols // 10)
    flat = x.reshape(-1)
    sk = CountSketch(d, cols, rows_, seed=SEED, device=flat.device)
    shape = f"{rows_} x {cols} table, d = {d}"
    rows: list[BenchRow] = []
    for mode in modes:  # compiled: compressors/kernels/countsketch.py rebuilds the codes
        compiled_before = sum(fused.compile_times().values())
        with fused.forced(mode):
            first = measure(lambda: sk.zero().accumulate(flat), repeat=1, warmup=0, device=kw["device"]).median_s
            acc = _bench_pair(
                "countsketch.accumulate", "stage", lambda: sk.zero().accumulate(flat), None, baseline, count=d,
                unit="elements/s", what=f"CountSketch.accumulate ({shape}; codes rebuilt on every call from compact "
                "hash tables)", desc=f"dense float32 {tuple(x.shape)} N(0,1)", **kw,
            )
        acc.first_encode_s = first  # includes building the hash tables (and compiling)
        if mode != "eager":
            acc.compile_s = sum(fused.compile_times().values()) - compiled_before
        rows.append(acc)
    filled = sk.copy()
    if flat.device.type == "cpu":  # the thread pool's split is the CPU's
        floor = countsketch_floor(flat, cols, rows_, sk.coefficients)
        rows.append(_bench_pair(
            "countsketch.accumulate floor", "stage", floor, None, baseline, count=d, unit="elements/s",
            what=f"index_add_ of precomputed codes only ({shape}, codes held: not rebuilt), the floor of "
            "an accumulate built on torch's scatter-add", desc=f"dense float32 {tuple(x.shape)} N(0,1)", **kw,
        ))
        del floor
    uns = _bench_pair(
        "countsketch.unsketch", "stage", lambda: filled.unsketch(k), None, baseline, count=d,
        unit="elements/s", what=f"CountSketch.unsketch(k = {k}) ({shape}): encode column = unsketch",
        desc="the sketch of the dense input", **kw,
    )
    rows.append(uns)
    if peers:
        peer = CSVecStyleSketch(d, cols, rows_, device=flat.device)
        rows.append(_bench_pair(
            "CSVec-style countsketch.accumulate", "peer", lambda: peer.zero().accumulate(flat), None, baseline,
            count=d, unit="elements/s", desc=f"dense float32 {tuple(x.shape)} N(0,1)",
            what=f"an independent short implementation in CSVec's manner (int64 buckets, float signs, "
            f"bincount of signs * x per row; {shape}), not the csvec package", **kw,
        ))
    return rows


def _powersgd_rows(size: int, **kw: Any) -> list[BenchRow]:
    """gcbench's PowerSGD and torch's hook math on the same ResNet-50 layers, timed in the *same*
    interleaved rounds (clone, copy, ours, theirs), so a load change hits both alike."""
    device, repeat, warmup = kw["device"], kw["repeat"], kw["warmup"]
    div = resnet_width_div(size)
    mats = powersgd_matrices(4, div, device)
    total = sum(t.numel() for t in mats.values())
    label = "ResNet-50" if div == 1 else f"ResNet-50 with widths / {div}"
    desc = f"{label} layer shapes ({len(mats)} matrices, {total} elements), N(0,1), rank 4"
    base = Baseline(torch.cat([t.reshape(-1) for t in mats.values()]))
    codec = compressors.get("powersgd", rank=4)
    torch_math = TorchPowerSGDMath(list(mats.values()), rank=4)
    payloads: dict[str, Any] = {}

    def enc() -> None:
        for k, t in mats.items():
            payloads[k] = codec.encode(t, key=k)

    ours = BenchRow(
        "powersgd [resnet50]", "peer", input=desc, numel=total, target=target_text("powersgd [resnet50]"),
        what="gcbench PowerSGD(rank=4).encode/decode of every layer (key = layer name, warm start; decode "
        "into preallocated outputs, as the torch row's); timed in the same rounds as the torch row",
    )
    theirs = BenchRow(
        "torch powerSGD_hook math [resnet50]", "peer", input=desc, numel=total,
        what="torch powerSGD_hook: _orthogonalize(Q), bmm P = M Q, _orthogonalize(P), bmm Q = M^T P; "
        "decode = bmm P Q^T into preallocated outputs (no all_reduce)",
    )
    try:
        ours.first_encode_s = measure(enc, repeat=1, warmup=0, device=device).median_s
        theirs.first_encode_s = measure(torch_math.encode, repeat=1, warmup=0, device=device).median_s
        fixed = dict(payloads)
        outs = {k: torch.empty_like(t) for k, t in mats.items()}

        def dec() -> None:
            for k, p in fixed.items():
                codec.decode(p, out=outs[k])

        t = interleaved(
            {**base.fns(), "ours encode": enc, "ours decode": dec, "torch encode": torch_math.encode,
             "torch decode": torch_math.decode},
            repeat=repeat, warmup=warmup, device=device,
        )
    except Exception as err:  # noqa: BLE001
        ours.status, ours.error = "failed", f"{type(err).__name__}: {err}"
        return [ours]
    _fill_ratios(ours, {"clone": t["clone"], "copy": t["copy"], "encode": t["ours encode"], "decode": t["ours decode"]}, total)
    _fill_ratios(theirs, {"clone": t["clone"], "copy": t["copy"], "encode": t["torch encode"], "decode": t["torch decode"]}, total)
    ours.nbytes = sum(p.nbytes for p in fixed.values())
    ours.bits_per_element = bits_per_element(ours.nbytes, total)
    ours.extra["time_vs_torch"] = (t["ours encode"].median_s + t["ours decode"].median_s) / (
        t["torch encode"].median_s + t["torch decode"].median_s
    )
    return [ours, theirs]


def _hivemind_rows(x: torch.Tensor, baseline: Baseline, **kw: Any) -> list[BenchRow]:
    codecs, why = hivemind_codecs()
    if why is not None:
        return [BenchRow("hivemind", "peer", status="skipped", error=why)]
    from hivemind.compression import CompressionInfo

    flat = x.reshape(-1)
    info = CompressionInfo.from_tensor(flat)
    rows = []
    for cname, comp in codecs.items():
        held: dict[str, Any] = {}

        def enc(comp: Any = comp, held: dict = held) -> None:
            held["msg"] = comp.compress(flat, info, allow_inplace=False)

        try:
            enc()
        except Exception as err:  # noqa: BLE001
            rows.append(BenchRow(f"hivemind {cname}", "peer", status="failed", error=f"{type(err).__name__}: {err}"))
            continue
        msg = held["msg"]
        row = _bench_pair(
            f"hivemind {cname}", "peer", enc, lambda comp=comp, msg=msg: comp.extract(msg), baseline,
            count=flat.numel(), unit="elements/s",
            what="hivemind compress(x, CompressionInfo.from_tensor(x)) / extract(message); bytes = protobuf ByteSize()",
            desc=f"dense float32 {tuple(x.shape)} N(0,1)", **kw,
        )
        row.nbytes = int(msg.ByteSize())
        row.bits_per_element = bits_per_element(row.nbytes, flat.numel())
        rows.append(row)
    return rows


def _bench_modes(
    make: Callable[[], Any], name: str, x: torch.Tensor, baseline: Baseline, modes: Sequence[str],
    *, kind: str = "codec", tick: Callable[[int], None] = lambda n: None, **kw: Any,
) -> list[BenchRow]:
    """One row per mode for a fresh codec from ``make()`` (``tick(1)`` after each, between rows); a compiled row whose
    codec called no fused kernel and no C kernel is dropped (its code is the eager code) and the eager row says so."""
    rows: list[BenchRow] = []
    for mode in modes:
        calls = fused.call_count() + native.call_count()  # Inductor kernels and C kernels
        compiled_calls = fused.compiled_call_count() + native.call_count()
        compiled_before = sum(fused.compile_times().values())
        with fused.forced(mode):
            row = bench_codec(make(), name, x, baseline, kind=kind, **kw)
        tick(1)
        row.mode = mode
        if mode == "compiled":
            if fused.call_count() + native.call_count() == calls and row.status == "ok" and rows:
                reason = getattr(make(), "no_kernel_reason", "")
                rows[-1].extra["compiled"] = "compiled: same as eager, no kernel" + (f" because {reason}" if reason else "")
                continue
            row.compile_s = sum(fused.compile_times().values()) - compiled_before
        if mode == "auto" and fused.compiled_call_count() + native.call_count() == compiled_calls and row.status == "ok" and rows:
            # the default ran no compiled kernel: its row is the eager one, which says so
            eager = next((r for r in rows if r.mode == "eager"), None)
            if eager is not None:
                eager.extra["auto"] = "auto (the default): runs this eager code here"
                continue
        rows.append(row)
    return rows


def bench_steps(names: Sequence[str], modes: Sequence[str], *, stages: bool = True, peers: bool = True,
                raw_ef: bool = True) -> int:
    """The steps of :func:`run_bench`'s ``on_step``: one per codec and mode (and per mode of an error-feedback
    entry's inner codec with ``raw_ef``), one per group of stage rows (Count Sketch, SketchML) and of peer rows."""
    ef = {n for n in compressors.names() if entry(n).error_feedback}  # an unknown name counts as a plain codec
    return sum(len(modes) * (1 + (raw_ef and n in ef)) + (stages and n in ("countsketch", "sketchml"))
               + (peers and n == "powersgd") for n in names) + peers


def run_bench(
    codecs: Sequence[str] | None = None,
    *,
    size: int = DEFAULT_SIZE,
    device: str = "cpu",
    repeat: int = 5,
    warmup: int = 1,
    density: float = DEFAULT_DENSITY,
    peers: bool = True,
    stages: bool = True,
    raw_ef: bool = True,
    modes: Sequence[str] = MODES,
    on_row: Callable[[str], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], list[BenchRow]]:
    """Measure and return ``(meta, rows)`` without printing (see :func:`bench_main`); ``on_row(name)`` comes before
    each codec or group of rows, ``on_step(done)`` after each :func:`bench_steps` step (between rows, not in one)."""
    names = list(codecs) if codecs else compressors.names()
    check_names(names)  # UnknownCodecError, worded as every command words it
    check_rounds(repeat, warmup)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"--density must be in (0, 1], got {density}")
    modes = tuple(modes)
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes must be a non-empty subset of {', '.join(MODES)}, got {modes!r}")
    dev = torch.device(resolve_device(device))  # cpu, cuda or cuda:N of this machine, else ValueError
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    kw = {"repeat": repeat, "warmup": warmup, "device": dev}

    x = make_dense_input(size, dev)
    baseline = Baseline(x)
    rows: list[BenchRow] = []
    t = interleaved({**baseline.fns(), "fp16 cast": x.half}, repeat=repeat, warmup=warmup, device=dev)
    for bname, what in (("clone", "x.clone()"), ("copy", "dst.copy_(x), dst preallocated"), ("fp16 cast", "x.half()")):
        row = BenchRow(bname, "baseline", what=what, input=f"dense float32 {tuple(x.shape)} N(0,1)", numel=size)
        _fill_ratios(row, {"clone": t["clone"], "copy": t["copy"], "encode": t[bname]}, size)
        rows.append(row)
    copy_s = t["copy"].median_s
    sparse_x: torch.Tensor | None = None
    on_row = on_row or (lambda n: None)
    done, planned = 0, 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if n and on_step is not None:
            on_step(done)

    for name in names:
        tick(planned - done)  # the steps a failed or skipped codec left
        planned += bench_steps([name], modes, stages=stages, peers=peers, raw_ef=raw_ef) - peers
        on_row(name)
        try:
            codec = compressors.get(name)
        except Exception as err:  # noqa: BLE001 - a codec module being written is reported, not raised
            status = "skipped" if isinstance(err, ImportError) else "failed"
            rows.append(BenchRow(name, "codec", status=status, error=f"{type(err).__name__}: {err}", target=target_text(name)))
            continue
        if getattr(codec, "sparse_native", False):
            if sparse_x is None:
                sparse_x = make_sparse_input(size, density, dev)
            inp = sparse_x
        else:
            inp = x
        del codec
        rows.extend(_bench_modes(lambda name=name: compressors.get(name), name, inp, baseline, modes, tick=tick, **kw))
        if raw_ef and isinstance(compressors.get(name), compressors.ErrorFeedback):
            for raw in _bench_modes(lambda name=name: compressors.get(name).codec, f"{name} (no EF)", x, baseline,
                                    modes, kind="raw", tick=tick, **kw):
                raw.what += "; the inner codec of the registry entry, without error feedback"
                rows.append(raw)
        if stages and name == "countsketch":
            on_row("countsketch stages")
            try:
                rows.extend(_countsketch_rows(x, baseline, modes, peers=peers, **kw))
            except Exception as err:  # noqa: BLE001
                rows.append(BenchRow("countsketch stages", "stage", status="failed", error=f"{type(err).__name__}: {err}"))
            tick(1)
        if stages and name == "sketchml" and sparse_x is not None:  # stage rows from profiler labels
            sk, n_pairs, desc = compressors.get(name), int(sparse_x._nnz()), rows[-1].input
            for label, t in stage_timings(lambda: sk.encode(sparse_x, key=KEY), baseline.fns(), prefix="sketchml/",
                                          **kw).items():
                rows.append(BenchRow(f"sketchml {label}", "stage", what=f"label sketchml/{label} of SketchML.encode",
                                     input=desc, numel=size, pairs=n_pairs, rate_unit="pairs/s"))
                _fill_ratios(rows[-1], t, n_pairs)
            tick(1)
        if peers and name == "powersgd":
            on_row("powersgd peers")
            try:
                rows.extend(_powersgd_rows(size, **kw))
            except Exception as err:  # noqa: BLE001
                rows.append(BenchRow("powersgd peers", "peer", status="failed", error=f"{type(err).__name__}: {err}"))
            tick(1)
    tick(planned - done)
    if peers:
        on_row("hivemind peers")
        if dev.type == "cpu":
            rows.extend(_hivemind_rows(x, baseline, **kw))
        else:
            rows.append(BenchRow("hivemind", "peer", status="skipped", error="hivemind's classes are measured on CPU only"))
        tick(1)

    cpu = cpu_description()
    for r in rows:
        r.target, r.verdict = target_text(r.name, dev.type), verdict(r, dev.type)
    compare_with_peers(rows)
    meta = {
        "gcbench": __version__, "torch": torch.__version__, "python": platform.python_version(), "device": str(dev),
        "cpu": cpu["cpu_model"] or platform.processor() or platform.machine(),
        "isa_flags": cpu["isa_flags"],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_limits": {k: os.environ[k] for k in ISA_ENVS if k in os.environ},
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_average_start": list(load_start) if load_start else None,
        "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "modes": list(modes),
        "default_mode": fused.MODE_ENV + "=" + (os.environ.get(fused.MODE_ENV) or "(unset: auto)"),
        "compile": "compiled rows run compressors/kernels/core.py's kernels (torch.compile, dynamic shapes); "
        "auto rows what runs by default (GCBENCH_COMPILE unset): compiled from 1M values on, for a probed path "
        "only where it measured faster here; first call = the first encode, compilation included (compile "
        "column: the kernels' first calls)",
        "size": size, "density": density, "repeat": repeat, "warmup": warmup,
        "baselines": BASELINES_WHAT, "timing": TIMING_WHAT,
        "bytes": "payload.nbytes = len(Payload.to_bytes()): serialized bytes incl. header and CRC",
        "decode": DECODE_WHAT,
        "copy_GBps": 2 * x.numel() * x.element_size() / copy_s / 1e9 if copy_s > 0 else None,
        "input": "synthetic N(0,1) values (not real gradients; `gcbench compare` measures real ones)",
    }
    return meta, rows


def bench_main(
    codecs: Sequence[str] | None = None,
    *,
    size: int | str = DEFAULT_SIZE,
    device: str = "cpu",
    repeat: int = 5,
    warmup: int = 1,
    density: float = DEFAULT_DENSITY,
    peers: bool = True,
    stages: bool = True,
    raw_ef: bool = True,
    modes: Sequence[str] = MODES,
    json_path: str | Path | None = None,
    markdown_path: str | Path | None = None,
    console: Any = None,
) -> list[BenchRow]:
    """Run ``gcbench bench``: measure, print a rich table, optionally write JSON/Markdown.

    Args:
        codecs: registry names (default: every registered codec, in registry order).
        size: elements of the input (an int or ``"25M"``-style text, see :func:`~gcbench.bench.inputs.parse_size`).
        device: ``cpu``, ``cuda``, ``cuda:1``...
        repeat: timed rounds (medians are reported).
        warmup: untimed rounds before them (after the separately timed first encode).
        density: fraction of non-zeros of the sparse input of sparse-native codecs (SketchML).
        peers: add torch's PowerSGD hook math vs gcbench's PowerSGD on ResNet-50 shapes (when
            ``powersgd`` is selected) and hivemind's compression classes (when importable).
        stages: add Count Sketch accumulate/unsketch at the reference shape and SketchML's encode
            stages (when ``countsketch`` / ``sketchml`` is selected).
        raw_ef: add a row for the inner codec of each error-feedback entry.
        modes: any of ``"eager"``, ``"compiled"``, ``"auto"`` (:data:`MODES`; one row per mode for codecs
            with fused kernels; an auto row that ran no compiled kernel is the eager row's).
        json_path, markdown_path: also write the results there.
        console: a ``rich.console.Console`` (default: a new one on stdout). While it runs, a progress bar over the
            :func:`bench_steps` steps is shown on stderr when that is a terminal (:mod:`gcbench.progress`).

    Returns:
        The rows, in table order (baselines first).

    Raises:
        UnknownCodecError: a name that is not registered.
        ValueError: a bad size (over :data:`~gcbench.bench.limits.MAX_BENCH_SIZE` or the device's memory),
            repeat, warmup or density, a device other than cpu/cuda/cuda:N, or CUDA requested without CUDA.
    """
    from rich.console import Console
    from rich.markup import escape
    from ..tables import print_whole, whole_table

    size = checked_bench_size(size, resolve_device(device))  # bounded by MAX_BENCH_SIZE and the device's memory
    console = console if console is not None else Console()
    steps = bench_steps(list(codecs or compressors.names()), modes, stages=stages, peers=peers, raw_ef=raw_ef)
    with ProgressBar("bench", steps) as bar:  # on stderr, on a terminal only; redrawn between rows only
        def on_row(name: str) -> None:
            bar.update(description=f"bench: {escape(name)}")
            if console.is_terminal:
                console.log(f"bench: {escape(name)}")

        meta, rows = run_bench(codecs, size=size, device=device, repeat=repeat, warmup=warmup, density=density,
                               peers=peers, stages=stages, raw_ef=raw_ef, modes=modes, on_row=on_row,
                               on_step=bar.update)
    cells = [[escape(c) for c in row_cells(r)] for r in rows]
    styles = [None if r.status == "ok" and r.verdict != "not met" else ("red" if r.status == "failed" else "yellow") for r in rows]
    for line in header_lines(meta):
        console.print(escape(line))
    # Never truncated: a piped or 80-column console gets a compact table, or one wider than itself.
    print_whole(console, lambda compact: whole_table(
        COLUMNS, cells, title="gcbench bench: time as multiples of a same-run copy_ (targets) and clone",
        caption=escape(meta["baselines"] + "; " + DECODE_WHAT), left=(0, 1, 2, len(COLUMNS) - 2, len(COLUMNS) - 1), styles=styles,
        wrap=(len(COLUMNS) - 2,), wrap_last=True, compact=compact,  # the target's words and the status text
    ))
    base = {r.name: r for r in rows if r.kind == "baseline"}
    console.print(
        f"same-run baselines (medians): clone {base['clone'].encode['median_s'] * 1e3:.2f} ms, "
        f"copy_ {base['copy'].encode['median_s'] * 1e3:.2f} ms ({meta['copy_GBps']:.1f} GB/s read+write), "
        f"fp16 cast {base['fp16 cast'].encode['median_s'] * 1e3:.2f} ms"
    )
    for out, text in ((json_path, lambda: json.dumps({**meta, "rows": [r.as_dict() for r in rows]}, indent=2) + "\n"),
                      (markdown_path, lambda: to_markdown(meta, rows))):
        if out is not None:
            path = Path(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, text())
            console.print(f"wrote {escape(str(path))}")
    return rows
