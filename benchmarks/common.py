"""Shared pieces of gcbench's asv and pytest-benchmark suites: sizes, devices, inputs, skips.

This module depends only on torch and the codec API (``gcbench.compressors``: ``names``, ``entry``,
``get``, ``Codec.encode``/``decode``, ``Payload.nbytes``), so the suite also runs against older
commits (``asv continuous``). asv imports every module of the suite to discover it, and one import
error fails them all, so at module level the suite's modules import only the standard library,
torch, numpy, pytest, each other and ``gcbench.compressors``. Any other gcbench name (stage functions,
peers, the workspace) is imported inside ``setup`` or the benchmark's body, and a missing import skips
that case the asv way (``NotImplementedError``, :data:`SkipNotImplemented` in a body);
tests/test_benchmarks_imports.py checks this.

Speed as ratios. asv runs each benchmark in its own process, so a codec's ``time_encode`` and
``Baselines.time_copy_`` are two processes' readings. Every suite that times work on a tensor input
therefore also records ``track_<what>_over_copy`` (unit ``"x copy_"``; ``PowerSGDOverTorch`` records
the ratio of its two implementations instead): :func:`over_copy`, the median of the work over the
median of a ``copy_`` of its input into a ready buffer, timed in the same process in interleaved rounds
(the rounds of ``gcbench bench``, :func:`gcbench.bench.rounds.interleaved`).

Sizes. Every suite is parametrised over ``SIZES`` = 1M and 25M elements. asv gives a benchmark no
way to know whether it runs under ``--quick``, so the 25M cases follow SciPy's ``SCIPY_XSLOW``
convention: they are skipped unless the environment variable ``GCBENCH_BENCH_FULL=1`` is set
(asv passes the environment through to the benchmark processes). ``asv run --quick`` on a fresh
clone therefore runs the 1M cases only; the full run is
``GCBENCH_BENCH_FULL=1 asv run -E existing:python --set-commit-hash $(git rev-parse HEAD)``.

Devices. ``cpu`` and ``cuda``; CUDA cases are skipped without a CUDA device. CUDA inputs are drawn on
the CPU (same values on every machine) and moved; every timed call ends with a synchronisation.
``GCBENCH_BENCH_DEVICES`` (comma-separated device types, e.g. ``cuda``) skips the cases of other
devices, so a GPU machine can record its CUDA cases alone (``gcbench gpu-check`` sets it); the
parameter lists stay the same, so its results sit beside the other machines' on the asv page.

Inputs are synthetic and say so: dense float32 N(0, 1) values shaped as the most nearly square
matrix (low-rank codecs need two dimensions), and for sparse-native codecs (SketchML) a 1-D sparse
COO tensor whose keys are i.i.d. Bernoulli(density) positions and whose values are N(0, 1). A small
module-level cache keeps the most recent inputs, so pytest-benchmark and repeated setups in one
process draw them once (asv forks a fresh process per benchmark, where the cache is cold: drawing
25M normals costs about 0.15 s).
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import torch

from gcbench import compressors

#: Tensor sizes (elements) every suite is parametrised over.
SIZES = [1_000_000, 25_000_000]
#: Sizes that run without ``GCBENCH_BENCH_FULL=1`` (what ``asv run --quick`` measures).
QUICK_SIZES = (1_000_000,)
DEVICES = ["cpu", "cuda"]
#: Fractions of non-zero elements of the sparse inputs (SketchML and its stages).
DENSITIES = [0.01, 0.1]
#: The key stateful codecs keep their state under.
KEY = "bench"
#: Seed of every generated input.
SEED = 0
#: Generous per-benchmark time limit (seconds): 25M SketchML or Count Sketch cases on 2 loaded cores.
TIMEOUT = 900


def full_run() -> bool:
    """True when the 25M cases run (``GCBENCH_BENCH_FULL`` set to anything but ``""``/``"0"``)."""
    return os.environ.get("GCBENCH_BENCH_FULL", "") not in ("", "0")


def check_device(device: str) -> None:
    """Raise NotImplementedError (asv: skip) when this device does not run here."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise NotImplementedError("CUDA is not available")
    only = [d.strip() for d in os.environ.get("GCBENCH_BENCH_DEVICES", "").split(",") if d.strip()]
    if only and torch.device(device).type not in only:
        raise NotImplementedError(f"{device} cases are not requested (GCBENCH_BENCH_DEVICES={','.join(only)})")


def check_case(numel: int, device: str) -> None:
    """Raise NotImplementedError (asv: skip) when this size or device does not run here."""
    check_device(device)
    if numel not in QUICK_SIZES and not full_run():
        raise NotImplementedError(f"{numel}-element cases run only with GCBENCH_BENCH_FULL=1")


def synchronize(device: str | torch.device) -> None:
    """Wait for queued CUDA work (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# -- the codec registry, split by input kind ------------------------------------------------------


def is_sparse_native(name: str) -> bool:
    """True when registry entry ``name`` encodes key-value pairs (``sparse_native``); False when
    its module cannot be imported (the dense suite then lists it, and its setup skips it)."""
    try:
        target = compressors.entry(name).load()
    except Exception:  # noqa: BLE001 - a codec module being written must not break discovery
        return False
    return bool(getattr(target, "sparse_native", False))


def dense_codec_names() -> list[str]:
    """Registry names benchmarked on dense tensors (every codec that is not sparse-native)."""
    return [n for n in compressors.names() if not is_sparse_native(n)]


def sparse_codec_names() -> list[str]:
    """Registry names benchmarked on sparse key-value input at ``DENSITIES``."""
    return [n for n in compressors.names() if is_sparse_native(n)]


def build(name: str, device: str) -> compressors.Codec:
    """The registered codec ``name`` (fresh state), or NotImplementedError when it cannot run here."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise NotImplementedError("CUDA is not available")
    try:
        return compressors.get(name)
    except ImportError as err:  # the registry lists codecs whose module is still being written
        raise NotImplementedError(f"{name}: {err}") from None


# -- inputs ---------------------------------------------------------------------------------------

_CACHE: OrderedDict[tuple, object] = OrderedDict()
_CACHE_ENTRIES = 3


def _cached(key: tuple, make: Callable[[], object]) -> object:
    value = _CACHE.get(key)
    if value is None:
        value = make()
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return value


def matrix_shape(numel: int) -> tuple[int, int]:
    """The most nearly square ``(rows, cols)`` with ``rows * cols == numel`` (a layer's weight matrix:
    low-rank codecs such as PowerSGD need two dimensions)."""
    rows = max(d for d in range(1, math.isqrt(numel) + 1) if numel % d == 0)
    return rows, numel // rows


def make_input(numel: int, device: str, seed: int = SEED) -> torch.Tensor:
    """The dense benchmark input: a :func:`matrix_shape` float32 tensor of N(0, 1) values drawn on
    CPU from ``seed`` (cached; do not modify it)."""

    def make() -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(matrix_shape(numel), generator=gen).to(device)

    return _cached(("dense", numel, device, seed), make)  # type: ignore[return-value]


def make_sparse_input(numel: int, density: float, device: str, seed: int = SEED) -> torch.Tensor:
    """The sparse benchmark input: a coalesced 1-D COO tensor of ``numel`` elements whose keys are
    i.i.d. Bernoulli(``density``) positions and whose values are N(0, 1) (cached; do not modify)."""

    def make() -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        keys = torch.nonzero(torch.rand(numel, generator=gen) < density).reshape(-1)
        values = torch.randn(keys.numel(), generator=gen)
        x = torch.sparse_coo_tensor(keys.unsqueeze(0), values, (numel,), is_coalesced=True, check_invariants=False)
        return x.to(device)

    return _cached(("sparse", numel, density, device, seed), make)  # type: ignore[return-value]


# The suite's own measures. asv runs this suite against the library at many commits, so what it
# measures must not come from the commit under test: a change to the library's helpers would move
# the readings of every commit, and a commit without them could not be read at all. The library keeps
# its own (gcbench.measure.size.bits_per_element, gcbench.measure.error.relative_error) for its
# commands; tests/test_bench.py checks that both give the same numbers.


def bits_per_element(nbytes: int, count: int) -> float:
    """Bits sent per element: ``8 * nbytes / count`` (``count`` positive)."""
    return 8.0 * nbytes / count


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``||y - x|| / ||x||`` (dense or sparse COO tensors, float64 accumulation)."""
    xd = x.to_dense() if x.layout == torch.sparse_coo else x
    yd = y.to_dense() if y.layout == torch.sparse_coo else y
    num = float((yd.double() - xd.double()).norm())
    den = float(xd.double().norm())
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


# -- speed as ratios to a same-process copy_ ------------------------------------------------------
#
# asv runs every benchmark in its own process, so ``Baselines.time_copy_`` is another process's copy.
# The ``track_*_over_copy`` benchmarks time the work and a ``copy_`` of its input into a ready buffer
# in the same process, interleaved round after round (copy, then the work), and record the ratio of
# the medians, as ``gcbench bench`` does (:func:`gcbench.bench.rounds.interleaved`: each call one
# ``gcbench.measure.timing.measure``, CUDA synchronised). asv repeats a track itself, so the rounds
# are few.

try:  # asv_runner's skip from inside a benchmark body (setup skips with any NotImplementedError)
    from asv_runner.benchmarks.mark import SkipNotImplemented
except ImportError:  # outside asv (pytest): a plain NotImplementedError
    SkipNotImplemented = NotImplementedError  # type: ignore[assignment,misc]

#: Timed rounds of one ``track_*_over_copy`` (after one untimed round).
RATIO_ROUNDS = 5
#: The unit of every ``track_*_over_copy``.
OVER_COPY = "x copy_"


def interleaved_medians(
    fns: Mapping[str, Callable[[], object]], device: str | torch.device, rounds: int = RATIO_ROUNDS, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of each function of ``fns``, called once per round in ``fns``' order, ``rounds``
    rounds after ``warmup`` untimed ones (:func:`gcbench.bench.rounds.interleaved`, the harness's
    rounds). A commit without it skips the benchmark (:data:`SkipNotImplemented`)."""
    try:
        from gcbench.bench.rounds import interleaved
    except ImportError as err:
        raise SkipNotImplemented(f"gcbench.bench.rounds: {err}") from None
    timed = interleaved(fns, repeat=rounds, warmup=warmup, device=device)
    return {name: t.median_s for name, t in timed.items()}


def over_copy(
    work: Callable[[], object],
    src: torch.Tensor | Sequence[torch.Tensor],
    device: str | torch.device,
    rounds: int = RATIO_ROUNDS,
) -> float:
    """``median(work()) / median(dst.copy_(src))``, both timed in this process in interleaved rounds
    (copy, then the work; :func:`interleaved_medians`). ``src`` is the work's input, or its inputs
    (copied one after the other in each round); ``dst`` is allocated and touched once, outside the
    rounds, so ``copy_`` measures bandwidth, not page faults."""
    sources = [src] if isinstance(src, torch.Tensor) else list(src)
    buffers = [torch.empty_like(s) for s in sources]

    def copy() -> None:
        for dst, s in zip(buffers, sources):
            dst.copy_(s)

    copy()
    medians = interleaved_medians({"copy": copy, "work": work}, device, rounds)
    return medians["work"] / medians["copy"]


def decoder(codec: compressors.Codec, payload: object) -> Callable[[], object]:
    """``decode(payload, out=buf)`` into :func:`gcbench.bench.rounds.ready_buffer` where the codec has one
    (the decode ``gcbench bench`` times and its targets count), else ``decode(payload)``. A commit without
    it skips the benchmark (:data:`SkipNotImplemented`)."""
    try:
        from gcbench.bench.rounds import ready_buffer
    except ImportError as err:
        raise SkipNotImplemented(f"gcbench.bench.rounds: {err}") from None
    buf = ready_buffer(codec, payload)
    if buf is None:
        return lambda: codec.decode(payload)
    return lambda: codec.decode(payload, out=buf)


def per_tensor_inputs(width_div: int, device: str, seed: int = SEED) -> tuple[tuple[str, torch.Tensor], ...]:
    """N(0, 1) tensors of the shapes of ``torchvision.models.resnet50()``'s 161 parameters, channel
    widths divided by ``width_div`` (:func:`gcbench.bench.inputs.resnet50_shapes`), named as its
    parameters, drawn on CPU from ``seed`` (cached; do not modify them). A commit without the shapes
    skips the case."""
    try:
        from gcbench.bench.inputs import resnet50_shapes
    except ImportError as err:
        raise NotImplementedError(f"gcbench.bench.inputs: {err}") from None

    def make() -> tuple[tuple[str, torch.Tensor], ...]:
        gen = torch.Generator().manual_seed(seed)
        return tuple((name, torch.randn(shape, generator=gen).to(device)) for name, shape in resnet50_shapes(width_div))

    return _cached(("per-tensor", width_div, device, seed), make)  # type: ignore[return-value]
