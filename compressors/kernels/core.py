"""Fused kernels: one ``torch.compile`` pass where eager torch makes several, eager the reference.

Each eager torch op reads and writes its whole operand, so an elementwise quantizer of six ops
makes six passes over memory; compiled (CPU Inductor: C++/OpenMP; CUDA: Triton) the same function
is one pass. A :class:`Kernel` holds one pure elementwise function, written once in torch ops, and
runs it either *eager* (the reference) or *compiled* (``torch.compile(fn, dynamic=True)``: one
compilation per kernel and dtype signature, reused for every tensor size; compiled code is also
cached on disk by Inductor, so a new process compiles again in seconds, not minutes).

Eager and compiled give the same bits because the kernels use only correctly rounded float32
operations (``+``, ``*``, conversions) and no fused multiply-add: Inductor compiles C++ with
``-ffp-contract=off``, and the eager reference spells each product and sum as separate ops (eager
``addcmul``/``add(alpha=)`` use an FMA on CPUs that have one, so their bytes depended on the
CPU; they are not used here). Random numbers are computed inside the kernels, as a counter-based
hash of a key (drawn from the codec's generator once per call) and the element's index
(:mod:`~gcbench.compressors.kernels.dither`): integer arithmetic, exact in both modes, so same seed -> same bytes.
``tests/test_fused.py`` checks payload equality for every codec that uses a kernel. A float16 /
bfloat16 intermediate that the result depends on (the cast residual ``c - fp16(c)``) needs
Inductor's ``emulate_precision_casts``: by default it keeps such values in float32.

Kernels also return the contract's checks as reductions of the same pass (``isfinite(x).all()``,
a code-3 flag) so an elementwise codec reads its input once, not two or three times
(:meth:`.base.Codec.checks_finite`); error-feedback kernels return the new residual next to the
code (:mod:`.error_feedback`). Codecs without a kernel say why in ``no_kernel_reason``. This module
holds the quantizers' and casts' kernels and the :class:`Kernel` machinery; 3LC's kernels live in
:mod:`~gcbench.compressors.kernels.threelc`, signSGD's and EF-signSGD's in :mod:`~gcbench.compressors.kernels.sign`, the sparse selections' in
:mod:`~gcbench.compressors.kernels.sparse`, Count Sketch's code rebuild in :mod:`~gcbench.compressors.kernels.countsketch`.

Mode (:func:`mode`), from the environment variable ``GCBENCH_COMPILE``:

* ``0`` / ``eager`` / ``off``: always eager;
* ``1`` / ``compiled`` / ``on``: compiled for every call (any size);
* ``auto``: compiled for tensors of at least :data:`AUTO_MIN_NUMEL` elements (where one
  pass instead of several saves more than a call's overhead), eager below; and for a path that
  names itself (:func:`use_compiled`'s ``path``: the quantizers' ``"dither"`` and
  ``"dequantize"``, signSGD's ``"sign"`` and ``"sign-decode"``), only where compiled is the faster of the two on this machine, measured once
  per machine, thread count and torch version and cached on disk
  (:mod:`~gcbench.compressors.kernels.choice`): compiled never runs slower than eager there.

Unset means ``auto``: what runs by default is the faster of the two implementations on this machine.
Its cost is the first run's: a kernel compiles the first time it runs compiled (seconds with Inductor's
on-disk cache, tens of seconds without it), and a probed path measures both modes once per machine
(about ten calls at :data:`~gcbench.compressors.kernels.choice.PROBE_NUMEL` values). So that this does
not land inside a training rank's first step (against the launcher's hang timeout), the DDP hook
compiles its codecs ahead of time, for the sizes of the model's parameters, when it is built
(:func:`gcbench.compressors.kernels.warmup.warm_up`). Where compiling fails (no C++ compiler, a broken
toolchain) ``auto`` warns once and runs eager from then on in that process (:func:`compile_unavailable`
says why); ``compiled`` raises. ``GCBENCH_COMPILE=0`` keeps everything eager (no compiler needed),
and ``gcbench bench`` times eager, compiled and the default side by side whatever the variable says.

:func:`forced` overrides the environment inside a ``with`` block (the bench and the tests).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import choice
from .dither import hash_halves, uniforms_into
from .workspace import fresh
from ..errors import InvalidParameterError

MODE_ENV = "GCBENCH_COMPILE"
#: ``auto`` compiles from this many elements on (smaller tensors: eager).
AUTO_MIN_NUMEL = 1 << 20
_MODES = {"0": "eager", "eager": "eager", "off": "eager", "1": "compiled", "compiled": "compiled", "on": "compiled",
          "": "auto", "auto": "auto"}

_override = threading.local()
#: A kernel call whose first argument has a dimension of size 0 or 1 and at most this many elements
#: runs eagerly (:class:`Kernel`): a one-row call of the stochastic rounding (one row of
#: ``rounding.FUSED_SPAN`` values), of :func:`by_rows`'s body (one bucket), a one-value call. Larger
#: calls of such a shape (the 8-bit codes' ``(rows, groups, 1)``) compile their own graph.
EAGER_DEGENERATE_MAX = 1 << 14


def mode() -> str:
    """``"eager"``, ``"compiled"`` or ``"auto"`` (see the module docstring).

    Raises:
        InvalidParameterError: ``GCBENCH_COMPILE`` holds another value.
    """
    forced_mode = getattr(_override, "mode", None)
    if forced_mode is not None:
        return forced_mode
    raw = os.environ.get(MODE_ENV, "").strip().lower()
    if raw not in _MODES:
        raise InvalidParameterError(f"{MODE_ENV} must be one of 0, 1, eager, compiled, auto; got {raw!r}")
    return _MODES[raw]


@contextlib.contextmanager
def forced(new_mode: str) -> Iterator[None]:
    """Run the block in ``new_mode`` (``"eager"``, ``"compiled"`` or ``"auto"``), this thread only."""
    if new_mode not in ("eager", "compiled", "auto"):
        raise InvalidParameterError(f"mode must be eager, compiled or auto, got {new_mode!r}")
    old = getattr(_override, "mode", None)
    _override.mode = new_mode
    try:
        yield
    finally:
        _override.mode = old


def use_compiled(numel: int, path: str | None = None) -> bool:
    """Whether a kernel call on ``numel`` elements runs compiled in the current mode; in ``auto``
    mode, for a named ``path`` with a probe, only where compiled is the faster on this machine
    (:func:`~gcbench.compressors.kernels.choice.prefers_compiled`: measured once, cached on disk)."""
    m = mode()
    if m == "auto" and numel >= AUTO_MIN_NUMEL:
        return not compile_failures and (path is None or choice.prefers_compiled(path, forced))
    return m == "compiled"


#: Why compiled kernels cannot run in this process (``auto`` mode's first failed compilation: no C++
#: compiler, a broken toolchain), or empty. ``auto`` then runs everything eager; ``compiled`` raises.
#: Emptying it (once the toolchain is fixed) lets ``auto`` compile again in the same process.
compile_failures: list[str] = []


def compile_unavailable() -> str | None:
    """Why ``auto`` mode stopped compiling in this process (the first compilation error), or None."""
    return compile_failures[0] if compile_failures else None


def _give_up_compiling(name: str, err: BaseException) -> None:
    """Record that compiling failed (``auto`` mode) and warn once: from now on ``auto`` runs eager."""
    if not compile_failures:
        compile_failures.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        warnings.warn(
            f"gcbench: compiling kernel {name} failed ({compile_failures[0]}); GCBENCH_COMPILE=auto runs eager code "
            "from now on in this process (the same bytes, slower). Set GCBENCH_COMPILE=0 to skip compiling.",
            RuntimeWarning, stacklevel=3,
        )


class Kernel:
    """A pure tensor function, compiled on first use (see the module docstring).

    Args:
        fn: the function (torch ops only, no data-dependent Python control flow). Its eager
            reference is the caller's own (chunked, memory-bounded) eager code, which the tests
            compare with this kernel byte for byte.
        name: shown in :func:`compile_times`.

    The compiled function is built on the first call and kept for the life of the process (one
    per kernel: a fixed, small number); the wall time of the first call per input signature
    (compilation included) is recorded in :attr:`first_call_s`. A signature is each tensor's dtype,
    device and which of its dimensions have size 0 or 1: Inductor specialises those even with
    dynamic shapes, so a one-row call and a many-row call compile two graphs, and both first calls
    are recorded (Python ints likewise: 0 and 1 are specialised, other values are symbolic).

    Except for small degenerate calls: when the first argument (every kernel's data) has a
    dimension of size 0 or 1 and at most :data:`EAGER_DEGENERATE_MAX` elements, ``fn`` runs eagerly
    (counted in :attr:`eager_calls`). Such a call would compile a graph of its own for a shape that
    only edge cases produce (a one-row tensor, one value), 0.7-8 s each on this machine, where
    its eager ops take microseconds and give the same bits (:func:`by_rows` treats its one-row tail
    so too).

    The compiled code is built for the calling thread's torch thread count (``cpp.threads``, unless
    the kernel's options set it): the first compiled call's count holds for the process, and the
    on-disk cache keeps one entry per count.
    """

    def __init__(self, fn: Callable[..., Any], name: str, options: dict[str, Any] | None = None) -> None:
        self.fn = fn
        self.name = name
        self.options = options
        self._compiled: Callable[..., Any] | None = None
        self._seen: set[tuple] = set()
        self.first_call_s: dict[str, float] = {}
        self.calls = 0
        self.eager_calls = 0
        _KERNELS.append(self)

    def __call__(self, *args: Any) -> Any:
        """``torch.compile(fn, dynamic=True)(*args)``."""
        self.calls += 1
        first = args[0] if args else None
        small = isinstance(first, torch.Tensor) and first.numel() <= EAGER_DEGENERATE_MAX
        if small and min(first.shape, default=2) <= 1:
            self.eager_calls += 1
            return self.fn(*args)
        if self._compiled is None:
            keep_inductor_cache()
            # the thread count in the options, hence in Inductor's on-disk cache key: a kernel compiled
            # in a one-thread process (a test, a one-thread training rank) keeps a serial loop, and was
            # served to later two-thread processes (sign bits of 25M values: 11.2 against 6.2 ms)
            # and an OpenMP region whatever size it is first compiled for (DYNAMIC_THREADS), unless
            # the kernel fixes its threads: a test's small first call otherwise left a serial loop
            # in the on-disk cache for every later process (signSGD's decode of 25M values: 1.7x
            # copy_ against 0.95x, served to ``gcbench bench`` after the test suite had run)
            options = {"cpp.threads": torch.get_num_threads(), **(self.options or {})}
            if "cpp.threads" not in (self.options or {}):
                options = {**DYNAMIC_THREADS, **options}
            self._compiled = torch.compile(self.fn, dynamic=True, options=options)
        sig = tuple(
            (a.dtype, a.device.type, tuple(d <= 1 for d in a.shape)) if isinstance(a, torch.Tensor)
            else (type(a).__name__, a <= 1 if isinstance(a, int) else None)
            for a in args
        )
        if sig in self._seen:
            return self._compiled(*args)
        start = time.perf_counter()
        try:
            out = self._compiled(*args)
        except Exception as err:  # noqa: BLE001 - any compilation failure; auto mode falls back to eager
            if mode() != "auto":
                raise
            _give_up_compiling(self.name, err)
            self.eager_calls += 1
            return self.fn(*args)  # this call's result, eagerly (the same bits)
        self._seen.add(sig)
        self.first_call_s[repr(sig)] = time.perf_counter() - start
        return out


_KERNELS: list[Kernel] = []

#: Inductor's variable for its on-disk cache of compiled code (default: a folder under ``/tmp``, which
#: a reboot empties).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def keep_inductor_cache() -> str | None:
    """Before gcbench's first compilation: point Inductor's cache at ``inductor/<code key>`` beside the
    compile choices (:func:`~gcbench.compressors.kernels.choice.cache_path`'s folder, ``~/.cache/gcbench``
    unless ``GCBENCH_CACHE_DIR`` moves it), so that compiled kernels outlive a reboot's ``/tmp``.
    The code key (:func:`~gcbench.compressors.kernels.choice.code_key`: CPU flags, vector ISA limits,
    torch version) gives each machine and torch its own folder: torch 2.11 served a kernel built for
    AVX-512 to a process limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``), whose QSGD codes were then
    wrong, and a home folder may be shared by machines of several kinds. Only when
    ``TORCHINDUCTOR_CACHE_DIR`` is unset (a user's setting, or a cache Inductor has already chosen in
    this process, is kept) and the folder can be made. Returns the folder in use, or None."""
    if INDUCTOR_CACHE_ENV not in os.environ:
        folder = choice.cache_path().parent / "inductor" / choice.code_key()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        os.environ[INDUCTOR_CACHE_ENV] = str(folder)
    return os.environ[INDUCTOR_CACHE_ENV]


def call_count() -> int:
    """Compiled kernel calls so far in this process (all kernels): tells whether a codec used one."""
    return sum(k.calls for k in _KERNELS)


def compiled_call_count() -> int:
    """Kernel calls so far that ran compiled (:func:`call_count` less the small degenerate calls that
    ran the function eagerly, :class:`Kernel`)."""
    return sum(k.calls - k.eager_calls for k in _KERNELS)


def compile_times() -> dict[str, float]:
    """Seconds spent in each kernel's first compiled calls (compilation included) so far."""
    return {k.name: sum(k.first_call_s.values()) for k in _KERNELS if k.first_call_s}


# --------------------------------------------------------------------------------------------------
# the kernels
# --------------------------------------------------------------------------------------------------

#: ``cpp.dynamic_threads``: an OpenMP region whatever size the kernel was first compiled for;
#: otherwise a small first size (a test's) makes Inductor emit a serial loop (seen for the moments
#: kernel at 100K values: no ``omp parallel``), and its on-disk cache can serve that code to later
#: processes at any size. For the quantizers' kernels and the reductions of error feedback and 3LC.
#: (Compiled at full size with a clean cache, 3LC's residual-and-trits pass runs alike with or without
#: it, 7.7 against 7.95 ms at 25M values; the 1.4-2x gaps first measured there came from on-disk code
#: compiled in a one-thread process, which :class:`Kernel` now keys by the thread count.)
DYNAMIC_THREADS = {"cpp.dynamic_threads": True}

#: Options of every kernel that computes a product and a sum. Triton contracts them into a fused
#: multiply-add unless Inductor emulates precision casts (it then compiles with
#: ``enable_fp_fusion=False``; on CPU Inductor compiles C++ with ``-ffp-contract=off`` anyway): their
#: float32 results must equal the eager ops', each rounded on its own.
NO_FMA = {"emulate_precision_casts": True}

#: Options of the quantizers' kernels.
_QUANT_OPTIONS = {**NO_FMA, **DYNAMIC_THREADS}



def _dither_values(
    x: torch.Tensor, scale: torch.Tensor, r: torch.Tensor, const: torch.Tensor, shift: torch.Tensor, top: int,
) -> torch.Tensor:
    """Float32 ``clamp(fl(fl(fl(x - shift) * scale_row) + fl(const + r * 2**-16)), 0, top)`` of
    ``(rows, cols)`` values (a bucket per row, or any rows for a one-element ``scale``), ``r`` their
    16-bit uniforms (int32 or int64); its truncating conversion to an integer is the stochastically rounded
    code. Each product and sum is rounded to float32 separately (no FMA), as in the eager code. Rows,
    not a per-element ``i // bucket`` index, keep the loop vectorised.

    The clamp is two selects, not ``clamp``: Inductor's ``maximum``/``minimum`` propagate NaN with a
    compare, a mask move and an or after each (12 of about 125 instructions per vector iteration of
    QSGD's loop), and the values are finite here (finite inputs, bounded scales); for finite values
    the two agree up to the sign of a zero, which the truncation to an integer erases (QSGD's
    25M-value kernel: 21.6 against 24.3 ms, one thread, same process)."""
    w = const + r.to(torch.float32) * (2.0**-16)
    y = (x - shift) * scale.unsqueeze(1)
    v = y + w
    v = torch.where(v > 0.0, v, 0.0)
    return torch.where(v < top, v, float(top))


#: :func:`row_places`' tensors by ``(groups, k, dtype, device)``: a few shapes per process (one per
#: bucket size and code width), at most :data:`_PLACES_MAX` kept.
_PLACES: dict[tuple, torch.Tensor] = {}
_PLACES_MAX = 16


def avx512() -> bool:
    """Whether torch's CPU kernels, and Inductor's (which follow ``ATEN_CPU_CAPABILITY`` too), use
    AVX-512: masked vector loads of any integer width. Without it (AVX2), ATen's integer loads with a
    count go through a stack buffer (:func:`places_dtype`, :mod:`~gcbench.compressors.kernels.dequantize`)."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def places_dtype(span: int, words: torch.Tensor) -> torch.dtype:
    """The dtype of :func:`row_places` for rows of ``span`` values hashed with ``words``: float32
    (converted to ``words``' integers in the kernel, exactly: ``span <= 2**24``) on a CPU whose
    kernels run without AVX-512, else ``words``' own dtype.

    Inductor's AVX2 code loads every integer vector through ATen's ``Vectorized<int32_t>::loadu(ptr,
    count)``, which has no full-width fast path there: it fills a stack buffer, copies the count's
    bytes in and loads them back (a store-forwarding stall per 8 lanes), where float loads are one
    instruction. Measured on an AVX-512 machine limited to AVX2 (``ATEN_CPU_CAPABILITY=avx2``,
    ``TORCHINDUCTOR_CPP_MARCH=x86-64-v3``), QSGD's compiled 25M-value encode: 2.8x a ``copy_`` with
    float32 places against 4.7x with int32 ones; with AVX-512 (masked loads) int32 is the faster,
    2.3x against 2.6x. The same integers either way, so the same bytes."""
    if words.device.type == "cpu" and span <= 1 << 24 and not avx512():
        return torch.float32
    return words.dtype


def row_places(groups: int, k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(k, 1, groups)`` integers of ``dtype`` (:func:`places_dtype`; float32 holds them exactly):
    ``[j, 0, g] = g k + j``, the index within a row of the value at place ``j`` of group ``g``
    (:func:`_dither_codes`' rows of ``groups`` groups of ``k`` values). A loaded tensor, not an
    ``arange`` inside the kernel: Inductor builds an ``arange`` vector from scalars in every
    iteration of its loop (35 of about 125 instructions per vector iteration of QSGD's loop,
    AVX-512; a load from L1 instead: 25.0 against 33.7 ms for 25M values, one thread, same process).
    Cached (a bucket's worth of integers)."""
    key = (groups, k, dtype, str(device))
    t = _PLACES.get(key)
    if t is None:
        if len(_PLACES) >= _PLACES_MAX:
            _PLACES.clear()
        t = torch.arange(groups * k, dtype=dtype, device=device).view(groups, k).t().contiguous().view(k, 1, groups)
        _PLACES[key] = t
    return t


def _pair_uniforms(x: torch.Tensor, words: torch.Tensor, places: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms of the ``(rows, span)`` values ``x`` (contiguous) of the first half of the first
    ``2S`` values (:func:`~gcbench.compressors.kernels.dither.split_point`) and of the values at the same places of the second half:
    the low and high 16 bits of one word per pair (``words``: :func:`~gcbench.compressors.kernels.dither.kernel_words`;
    ``places``: :func:`row_places` of ``(span, 1)``)."""
    base = torch.arange(x.shape[0], dtype=words.dtype, device=x.device).view(-1, 1) * x.shape[1]
    return hash_halves(base + places[0].to(words.dtype), words)


def _dither_codes(
    x0: torch.Tensor, x1: torch.Tensor, s0: torch.Tensor, s1: torch.Tensor, words: torch.Tensor, places: torch.Tensor,
    const: torch.Tensor, shift: torch.Tensor, top: int, out0: torch.Tensor, out1: torch.Tensor,
) -> None:
    """Stochastic rounding of the first ``2S`` values (:func:`~gcbench.compressors.kernels.dither.split_point`): float32 ``x0``,
    ``x1`` are its two halves as ``(rows, groups, k)`` (a row: a bucket, or any length under one
    scale); ``outK`` (``(rows, groups)``) = the codes of :func:`_dither_values` of ``xK``, one word
    of :func:`~gcbench.compressors.kernels.dither.pair_hash` serving ``x0`` and ``x1`` at the same place. ``k`` = 1: ``outK`` holds
    the codes (uint8 or int32); ``k`` = 2, 4 or 8: uint8 bytes of ``k`` codes of ``8 / k`` bits, least
    significant first (:func:`~gcbench.compressors.wire.bitpack.pack_bits`'s layout), packed in the same pass (each of a
    byte's codes computed from its own strided slice: no int32 codes in memory). ``s0``, ``s1``:
    float32, one scale per row, or one element for all; ``words``: the key's words
    (:func:`~gcbench.compressors.kernels.dither.kernel_words`: int32 below ``2**31`` pairs);
    ``places``: :func:`row_places` of ``(groups, k)`` (:func:`places_dtype`); ``const``, ``shift``:
    one-element float32 tensors (tensors, not Python numbers, so that a new value does not
    recompile). Separate arguments, not views of one tensor: Inductor then writes
    each output in place (a view's mutation costs a copy of the whole)."""
    k = x0.shape[2]
    # int32 words: 32-bit lanes (dither.pair_hash32), native vector multiplies and shifts on AVX2
    base = torch.arange(x0.shape[0], dtype=words.dtype, device=x0.device).view(-1, 1) * (x0.shape[1] * k)
    bytes0 = bytes1 = None
    for j in range(k):
        # one hash per j, read by its two halves only: a word read by more consumers (all k places
        # of a byte) is written to memory by Inductor (its realize_reads_threshold), 8 bytes a pair
        r0, r1 = hash_halves(base + places[j].to(words.dtype), words)
        c0 = _dither_values(x0[:, :, j], s0, r0, const, shift, top)
        c1 = _dither_values(x1[:, :, j], s1, r1, const, shift, top)
        if k == 1:
            out0.copy_(c0)
            out1.copy_(c1)
            return
        weight = 1 << (8 // k * j)
        c0, c1 = c0.to(torch.int32) * weight, c1.to(torch.int32) * weight
        bytes0, bytes1 = (c0, c1) if j == 0 else (bytes0 + c0, bytes1 + c1)
    out0.copy_(bytes0)
    out1.copy_(bytes1)


#: QSGD / TernGrad / ZipML stochastic rounding (:func:`~gcbench.compressors.codecs.rounding.stochastic_round`).
dither_codes = Kernel(_dither_codes, "dither_codes", _QUANT_OPTIONS)


def _dither_planar16(
    x0: torch.Tensor, x1: torch.Tensor, s0: torch.Tensor, s1: torch.Tensor, words: torch.Tensor, places: torch.Tensor,
    const: torch.Tensor, shift: torch.Tensor, top: int, low0: torch.Tensor, low1: torch.Tensor, high0: torch.Tensor,
    high1: torch.Tensor,
) -> None:
    """The codes of :func:`_dither_codes` (``top < 2**16``) written as :func:`~gcbench.compressors.wire.bitpack.pack_bits`'s
    16-bit planar layout: ``lowK`` = the low bytes of ``xK``'s codes, ``highK`` = their high bytes
    (uint8, shaped as ``xK``), in the same pass (no int32 codes, no shifts and concatenation). The
    bytes are split in float32 (``h = floor(c / 256)``, ``c - 256 h``: exact for integers below
    ``2**24``), whose conversion to uint8 Inductor vectorises; through int32 it did not."""
    r0, r1 = _pair_uniforms(x0, words, places)
    for x, s, r, low, high in ((x0, s0, r0, low0, high0), (x1, s1, r1, low1, high1)):
        c = torch.trunc(_dither_values(x, s, r, const, shift, top))  # the code, a float32 integer < 2**16
        h = torch.floor(c * (1.0 / 256))  # exact: a power-of-two scaling of an integer below 2**24
        high.copy_(h)
        low.copy_(c - h * 256.0)


#: Inductor's thresholds for writing an intermediate to memory, raised for :data:`dither_planar16`:
#: its code has two consumers (the low and the high byte) and some 40 ops of hash before it, so by
#: default Inductor wrote each half's float32 values to a buffer and read them back in a second loop
#: (ZipML-16's 25M-value encode: 10.3x against 5.1x a ``copy_`` in one loop, with the float byte split).
_ONE_LOOP = {"realize_opcount_threshold": 1000, "realize_reads_threshold": 1000}

#: 16-bit stochastic rounding straight into the planar bytes (ZipML-16, QSGD with s >= 128).
dither_planar16 = Kernel(_dither_planar16, "dither_planar16", {**_QUANT_OPTIONS, **_ONE_LOOP})


def dither_unpaired(
    x: torch.Tensor, scale: torch.Tensor, key: torch.Tensor, base: int, const: torch.Tensor, shift: torch.Tensor,
    top: int,
) -> torch.Tensor:
    """Eager: the int32 codes of the ``(rows, cols)`` values ``x`` from flat index ``base >= 2S`` on
    (the few values after the pairs, :func:`~gcbench.compressors.kernels.dither.split_point`), each with the high 16 bits of its
    own word; ``scale``: one per row, or one element."""
    rows, cols = x.shape
    # each value's uniform: the high 16 bits of its own word (a split point of 0 makes every index
    # unpaired), hashed in numpy's uint32 arithmetic on the CPU (a few small ops, not some thirty)
    r = uniforms_into(torch.empty(rows * cols, dtype=torch.float32, device=x.device), base, key, 0)
    return _dither_values(x, scale, r.view(rows, cols), const, shift, top).to(torch.int32)


#: Rows of :func:`_moments`: each column's sums add this many values in a fixed order.
MOMENT_ROWS = 32


def _moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """TernGrad's statistics of float32 ``x`` of ``(MOMENT_ROWS, cols)`` in one read: per column, the
    float32 sum and sum of squares of its values, added row 0 first, one rounded float32 operation at
    a time (elementwise ops, not a reduction, whose order Inductor and ATen choose differently: the
    same bits compiled and eager), and its min and max (NaN propagates, Inf shows: the finiteness
    check). All four are columns, not reductions to one value: a pointwise kernel runs on every
    thread (Inductor keeps a full reduction over a dynamic size on one thread when the size it first
    saw was small). float32 sums of 32 values are exact to ``2**-19`` relative, ample for a standard
    deviation; a square that overflows makes the sum infinite and the caller recompute in float64
    (float64 accumulators cost 1.33x a ``copy_`` at 25M values, float32 ones 0.88x, same run)."""
    s, q, lo, hi = x[0], x[0] * x[0], x[0], x[0]
    for j in range(1, MOMENT_ROWS):
        v = x[j]
        s = s + v
        q = q + v * v
        lo = torch.minimum(lo, v)
        hi = torch.maximum(hi, v)
    return s, q, lo, hi


#: TernGrad's min, max, sum and sum of squares in one pass (:func:`~gcbench.compressors.codecs.terngrad.abs_max_and_std`).
moments = Kernel(_moments, "moments", _QUANT_OPTIONS)


def _dequantize(
    codes: torch.Tensor, factor: torch.Tensor, offset: torch.Tensor, base: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    """``out`` = float32 ``fl(fl(codes - offset) * factor_row) + base`` of ``(rows, cols)`` codes,
    one factor per row; ``offset``, ``base``: one-element float32 tensors. Returns the largest
    code (the decoder's range check, folded into the same read of the codes)."""
    out.copy_((codes.to(torch.float32) - offset) * factor.unsqueeze(1) + base)
    return codes.amax()


#: The inverse map of QSGD / TernGrad / ZipML codes (:func:`~gcbench.compressors.codecs.rounding.decode_packed`).
dequantize = Kernel(_dequantize, "dequantize", _QUANT_OPTIONS)


def _dequantize16(
    low: torch.Tensor, high: torch.Tensor, factor: torch.Tensor, offset: torch.Tensor, base: torch.Tensor,
    out: torch.Tensor,
) -> torch.Tensor:
    """:func:`_dequantize` of 16-bit codes read from their planar bytes (``low + 256 * high``, exact
    integers) in the same pass; returns the largest code."""
    codes = low.to(torch.int32) + high.to(torch.int32) * 256
    out.copy_((codes.to(torch.float32) - offset) * factor.unsqueeze(1) + base)
    return codes.amax()


#: 16-bit planar codes decoded in one pass (:func:`~gcbench.compressors.codecs.rounding.decode_packed`).
dequantize16 = Kernel(_dequantize16, "dequantize16", _QUANT_OPTIONS)


def _bucket_scale(norms: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """QSGD's float32 scale ``fl32(s / fl64(norm))`` of each bucket (``s``: a one-element float64
    tensor): the eager ``(s / norms.double()).float()`` in one pass."""
    return (s / norms.to(torch.float64)).to(torch.float32)


#: QSGD's per-bucket scale (:meth:`~gcbench.compressors.codecs.qsgd.QSGD._encode`). A few small eager ops over one value per
#: bucket are each a parallel region; on a loaded 2-core machine every region waits for a
#: preempted thread (measured: 5-8 ms each at 25M values, against 27 ms for the decode kernel).
bucket_scale = Kernel(_bucket_scale, "bucket_scale")


def _bucket_factor(norms: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """QSGD's decode factor :func:`~gcbench.compressors.codecs.rounding.round_down_nonneg_f32` ``(fl64(norm) / s)`` of each bucket
    (``s``: a one-element float64 tensor) in one pass: float64 quotient, rounded to float32, the
    bit pattern decremented where that rounding went up (the same bits as the eager ops)."""
    v = norms.to(torch.float64) / s
    r = v.to(torch.float32)
    high = (r.to(torch.float64) > v).to(torch.int32)
    return (r.view(torch.int32) - high).view(torch.float32)


#: QSGD's per-bucket decode factor (:meth:`~gcbench.compressors.codecs.qsgd.QSGD._decode_into`).
bucket_factor = Kernel(_bucket_factor, "bucket_factor")


def by_rows(
    kernel: Kernel, flat: tuple[torch.Tensor, ...], per_row: torch.Tensor, bucket: int, *rest: Any,
    out_dtype: torch.dtype, out: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
) -> tuple[Any, list[Any]]:
    """``kernel(*views, per_row, *rest, *out_views)`` on the flat tensors ``flat`` viewed as rows of
    ``bucket`` elements (one ``per_row`` value each), writing a flat ``out_dtype`` result into
    ``out`` (a new tensor when None; else a flat contiguous tensor of that dtype, the caller's, or
    a tuple of them for a kernel with several outputs).

    ``per_row`` holds ``ceil(n / bucket)`` values. The ``(rows, bucket)`` body runs compiled (its
    dynamic shape compiles once); the short ``(1, tail)`` tail runs ``kernel.fn`` eagerly: the same
    correctly rounded ops give the same bits, and a 1-row shape would be one more compilation.
    Both write into one output (a concatenation would cost one more pass over it). Returns the
    output and what the kernel returned for the body and the tail (its reductions, if any).
    """
    n = flat[0].numel()
    if out is None:
        out = fresh(n, out_dtype, flat[0].device)
    outs = out if isinstance(out, tuple) else (out,)
    full = n // bucket
    results = []
    if full:
        results.append(kernel(*(t[: full * bucket].view(full, bucket) for t in flat), per_row[:full], *rest,
                              *(o[: full * bucket].view(full, bucket) for o in outs)))
    if n % bucket:
        results.append(kernel.fn(*(t[full * bucket :].view(1, -1) for t in flat), per_row[full : full + 1], *rest,
                                 *(o[full * bucket :].view(1, -1) for o in outs)))
    return out, results


# --------------------------------------------------------------------------------------------------
# error feedback: the correction, the quantization and the new residual in one pass each
# --------------------------------------------------------------------------------------------------
#
# The generic error-feedback wrapper (:class:`.error_feedback.ErrorFeedback`) makes about ten passes:
# ``g + e``, a finiteness check, the codec's own check, its scale, its quantization, the decode of
# its payload, ``corrected - decoded`` and a finiteness check of that. For a codec whose decoded
# value is known from its code (a cast: the cast value) the kernels below compute the residual next
# to the code, in the same pass (3LC's: :mod:`~gcbench.compressors.kernels.threelc`). Every value is the same float32
# operation the eager path performs, so the bits agree.


def _ef_scan(g: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``max |g + e|`` (float32) and whether every ``g + e`` is finite, in one read-only pass: the
    corrected gradient is not stored (the next pass recomputes it in registers), so nothing is
    written before the check has passed and the residual buffer can then be updated in place."""
    c = g + e
    return c.abs().amax(), torch.isfinite(c).all()


#: ``corrected = g + residual``: its max magnitude and finiteness (:mod:`.error_feedback`).
ef_scan = Kernel(_ef_scan, "ef_scan", DYNAMIC_THREADS)


def _ef_amax(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``max |g|`` and whether every ``g`` is finite (the first step: no residual yet)."""
    return g.abs().amax(), torch.isfinite(g).all()


#: The first error-feedback step's corrected gradient is the input itself: only its scan remains.
ef_amax = Kernel(_ef_amax, "ef_amax", DYNAMIC_THREADS)


def _saturate(x: torch.Tensor, top: float, dtype: torch.dtype) -> torch.Tensor:
    """:func:`..numerics.saturating_cast` of float32 ``x``: clamp to ``+-top`` (exact), then round."""
    return x.clamp(-top, top).to(dtype)


def _ef_cast16(
    g: torch.Tensor, e: torch.Tensor | None, top: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A cast with error feedback in one pass: ``c = g + e`` (``g`` when ``e`` is None: the first
    step), the saturating cast ``q`` of ``c``, the residual ``c - q`` (``q`` widened exactly) and
    whether every ``c`` is finite."""
    c = g if e is None else g + e
    q = _saturate(c, top, dtype)
    return q, c - q.to(torch.float32), torch.isfinite(c).all()


#: fp16 / bf16 casts with error feedback (:meth:`~gcbench.compressors.codecs.identity.Cast.encode_with_feedback`). Inductor
#: keeps a float16 intermediate in float32 unless told to round it (``emulate_precision_casts``):
#: without it ``c - q`` would be ``c - c = 0``, not the rounding error the eager path feeds back.
ef_cast16 = Kernel(_ef_cast16, "ef_cast16", NO_FMA)


# --------------------------------------------------------------------------------------------------
# decoders and state updates
# --------------------------------------------------------------------------------------------------


def _trits_decode(packed: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """TernGrad's 2-bit codes of ``(bytes, 1)`` packed bytes (LSB first) written into ``out`` as
    float32 ``(code - 1) * scale``, ``(bytes, 4)``: the values of :func:`~gcbench.compressors.codecs.terngrad.decode_trits`'s
    table (``-s``, ``0``, ``s``); returns whether any code is 3 (no encoder writes it), from the
    same pass."""
    shifts = torch.arange(4, dtype=torch.int32, device=packed.device) * 2
    codes = (packed.to(torch.int32) >> shifts) & 3
    out.copy_((codes.to(torch.float32) - 1.0) * scale)
    return (codes == 3).any()


#: TernGrad decode (:func:`~gcbench.compressors.codecs.terngrad.decode_trits`).
trits_decode = Kernel(_trits_decode, "trits_decode")

