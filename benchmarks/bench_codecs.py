"""Encode/decode time, peak memory, real payload size and error of every registered codec,
generated from the registry.

asv (see ``asv.conf.json``) runs five suites, all parametrised over the registry, so a new registry
line is benchmarked with no edit here:

* :class:`CodecSuite` - every codec that is not sparse-native, on the dense input of
  :func:`benchmarks.common.make_input`, x ``SIZES`` x ``DEVICES``: ``time_encode``,
  ``time_decode``, ``track_bits_per_element`` (``8 * payload.nbytes / numel``, the real serialized
  bytes incl. header and CRC), ``track_relative_error`` (``||decode(encode(x)) - x|| / ||x||``) and
  ``track_encode_over_copy`` / ``track_decode_over_copy``: encode, and decode into a ready buffer
  where the codec has ``out=`` (as ``gcbench bench``), over a ``copy_`` of the input into a ready
  buffer, timed in the same process (:func:`benchmarks.common.over_copy`).
* :class:`CodecMemory` - the same cases, ``peakmem_encode``: asv's peak resident set size of the
  benchmark process (interpreter + torch + the input + everything encode allocates; compare with
  ``Baselines.peakmem_clone`` for the cost of one extra copy). Its setup does not encode, so the
  peak is encode's. ``track_encode_peak_ratio``: the peak *increase* of the resident set during
  that first encode over the input's bytes (:mod:`benchmarks.memory`; the "<= 2x" bound). On CUDA this is still host memory (asv measures RSS), not GPU memory.
* :class:`SparseCodecSuite` / :class:`SparseCodecMemory` - sparse-native codecs (SketchML) on
  sparse COO input at ``DENSITIES`` 1% and 10%; adds ``track_bits_per_pair`` (bits per key-value
  pair sent). Their ``*_over_copy`` baseline is a ``copy_`` of the dense input of the same size, as
  in ``gcbench bench``.
* :class:`PerTensorSuite` - every dense-input codec called once per tensor on the 161 parameter
  tensors of a ResNet-50 (channel widths divided by :data:`PER_TENSOR_WIDTH_DIV`: the same tensors,
  most of them small), as a per-layer codec runs (L-GreCo's layer-wise parameters, a parameter
  server's per-tensor messages): ``time_encode``, ``time_decode``, and ``track_encode_over_copy`` and
  ``track_decode_over_copy``, over a same-process ``copy_`` of every tensor into a ready buffer. The fixed cost of
  a call, which the whole-tensor suites hide, shows here.

Combinations that cannot run are *skipped* the asv way (``NotImplementedError`` in ``setup``):
CUDA on a machine without it, 25M elements without ``GCBENCH_BENCH_FULL=1`` (see
:mod:`benchmarks.common`), and registry entries whose module does not exist yet.

Stateful codecs keep their state across the timed calls (key ``"bench"``): PowerSGD warm-starts
from the previous Q and error feedback carries its residual, i.e. steady-state training steps.
Error-feedback entries (``3lc``, ``ef-signsgd``) time the wrapper: its encode includes a decode of
the inner codec and the residual update. After each call on CUDA the suite synchronises so queued
kernels are counted.

The same cases run under pytest-benchmark in ``benchmarks/test_quick_codecs.py``
(``tox -e bench-quick``).
"""

from __future__ import annotations

from .common import (
    DENSITIES,
    DEVICES,
    KEY,
    OVER_COPY,
    SIZES,
    TIMEOUT,
    bits_per_element,
    build,
    check_case,
    check_device,
    decoder,
    dense_codec_names,
    make_input,
    make_sparse_input,
    over_copy,
    per_tensor_inputs,
    relative_error,
    sparse_codec_names,
    synchronize,
)
from .memory import encode_peak_ratio


class CodecSuite:
    """asv: ``time_encode``, ``time_decode``, ``track_bits_per_element``, ``track_relative_error``,
    ``track_encode_over_copy`` and ``track_decode_over_copy`` of every dense-input codec."""

    params = (dense_codec_names(), SIZES, DEVICES)
    param_names = ["codec", "numel", "device"]
    timeout = TIMEOUT

    def setup(self, name: str, numel: int, device: str) -> None:
        check_case(numel, device)
        self.codec = build(name, device)
        self.x = make_input(numel, device)
        self.payload = self.codec.encode(self.x, key=KEY)
        self.device = device
        synchronize(device)

    def time_encode(self, name: str, numel: int, device: str) -> None:
        self.codec.encode(self.x, key=KEY)
        synchronize(self.device)

    def time_decode(self, name: str, numel: int, device: str) -> None:
        self.codec.decode(self.payload)
        synchronize(self.device)

    def track_bits_per_element(self, name: str, numel: int, device: str) -> float:
        return bits_per_element(self.payload.nbytes, numel)

    track_bits_per_element.unit = "bits/element"  # type: ignore[attr-defined]

    def track_relative_error(self, name: str, numel: int, device: str) -> float:
        return relative_error(self.x, self.codec.decode(self.payload))

    track_relative_error.unit = "||x' - x|| / ||x||"  # type: ignore[attr-defined]

    def track_encode_over_copy(self, name: str, numel: int, device: str) -> float:
        return over_copy(lambda: self.codec.encode(self.x, key=KEY), self.x, device)

    track_encode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_decode_over_copy(self, name: str, numel: int, device: str) -> float:
        return over_copy(decoder(self.codec, self.payload), self.x, device)

    track_decode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]


class CodecMemory:
    """asv: ``peakmem_encode`` of every dense-input codec (setup draws the input, encodes nothing)."""

    params = (dense_codec_names(), SIZES, DEVICES)
    param_names = ["codec", "numel", "device"]
    timeout = TIMEOUT

    def setup(self, name: str, numel: int, device: str) -> None:
        check_case(numel, device)
        self.codec = build(name, device)
        self.x = make_input(numel, device)
        self.device = device

    def peakmem_encode(self, name: str, numel: int, device: str) -> None:
        self.codec.encode(self.x, key=KEY)
        synchronize(self.device)

    def track_encode_peak_ratio(self, name: str, numel: int, device: str) -> float:
        """Peak resident-set increase of the first encode over the input's bytes
        (:func:`benchmarks.memory.encode_peak_ratio`; the bound is <= 2)."""
        return encode_peak_ratio(self.codec, self.x.reshape(-1), key=KEY)

    track_encode_peak_ratio.unit = "x input"  # type: ignore[attr-defined]


class SparseCodecSuite:
    """asv: the :class:`CodecSuite` benchmarks for sparse-native codecs (SketchML) on sparse COO
    input at 1% and 10% density, plus ``track_bits_per_pair``; ``*_over_copy`` over a ``copy_`` of the
    dense input of the same size (as ``gcbench bench``)."""

    params = (sparse_codec_names(), SIZES, DENSITIES, DEVICES)
    param_names = ["codec", "numel", "density", "device"]
    timeout = TIMEOUT

    def setup(self, name: str, numel: int, density: float, device: str) -> None:
        check_case(numel, device)
        self.codec = build(name, device)
        self.x = make_sparse_input(numel, density, device)
        self.payload = self.codec.encode(self.x, key=KEY)
        self.device = device
        synchronize(device)

    def time_encode(self, name: str, numel: int, density: float, device: str) -> None:
        self.codec.encode(self.x, key=KEY)
        synchronize(self.device)

    def time_decode(self, name: str, numel: int, density: float, device: str) -> None:
        self.codec.decode(self.payload)
        synchronize(self.device)

    def track_bits_per_element(self, name: str, numel: int, density: float, device: str) -> float:
        return bits_per_element(self.payload.nbytes, numel)

    track_bits_per_element.unit = "bits/element"  # type: ignore[attr-defined]

    def track_bits_per_pair(self, name: str, numel: int, density: float, device: str) -> float:
        return bits_per_element(self.payload.nbytes, max(1, int(self.x._nnz())))

    track_bits_per_pair.unit = "bits/key-value pair"  # type: ignore[attr-defined]

    def track_relative_error(self, name: str, numel: int, density: float, device: str) -> float:
        return relative_error(self.x, self.codec.decode(self.payload))

    track_relative_error.unit = "||x' - x|| / ||x||"  # type: ignore[attr-defined]

    def track_encode_over_copy(self, name: str, numel: int, density: float, device: str) -> float:
        return over_copy(lambda: self.codec.encode(self.x, key=KEY), make_input(numel, device), device)

    track_encode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_decode_over_copy(self, name: str, numel: int, density: float, device: str) -> float:
        return over_copy(decoder(self.codec, self.payload), make_input(numel, device), device)

    track_decode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]


class SparseCodecMemory:
    """asv: ``peakmem_encode`` of sparse-native codecs."""

    params = (sparse_codec_names(), SIZES, DENSITIES, DEVICES)
    param_names = ["codec", "numel", "density", "device"]
    timeout = TIMEOUT

    def setup(self, name: str, numel: int, density: float, device: str) -> None:
        check_case(numel, device)
        self.codec = build(name, device)
        self.x = make_sparse_input(numel, density, device)
        self.device = device

    def peakmem_encode(self, name: str, numel: int, density: float, device: str) -> None:
        self.codec.encode(self.x, key=KEY)
        synchronize(self.device)

    def track_encode_peak_ratio(self, name: str, numel: int, density: float, device: str) -> float:
        """As :meth:`CodecMemory.track_encode_peak_ratio`; the input's bytes are the COO keys + values."""
        return encode_peak_ratio(self.codec, self.x, key=KEY)

    track_encode_peak_ratio.unit = "x input"  # type: ignore[attr-defined]


def all_codec_names() -> list[str]:
    """Every codec name the suites above are parametrised over (== ``compressors.names()``)."""
    return CodecSuite.params[0] + SparseCodecSuite.params[0]


#: :class:`PerTensorSuite`'s channel-width divisor of ResNet-50 (4: 1,993,976 parameters in the same
#: 161 tensors, 16 to 512,000 values each, half of them at most 128).
PER_TENSOR_WIDTH_DIV = 4


class PerTensorSuite:
    """asv: ``time_encode``, ``time_decode`` (one call per tensor, every ResNet-50 parameter tensor),
    ``track_encode_over_copy`` and ``track_decode_over_copy`` of every dense-input codec."""

    params = (dense_codec_names(), DEVICES)
    param_names = ["codec", "device"]
    timeout = TIMEOUT

    def setup(self, name: str, device: str) -> None:
        check_device(device)
        self.codec = build(name, device)
        self.tensors = per_tensor_inputs(PER_TENSOR_WIDTH_DIV, device)
        self.payloads = [self.codec.encode(x, key=key) for key, x in self.tensors]
        self.device = device
        synchronize(device)

    def _encode_all(self) -> None:
        for key, x in self.tensors:
            self.codec.encode(x, key=key)

    def time_encode(self, name: str, device: str) -> None:
        self._encode_all()
        synchronize(self.device)

    def time_decode(self, name: str, device: str) -> None:
        for p in self.payloads:
            self.codec.decode(p)
        synchronize(self.device)

    def track_encode_over_copy(self, name: str, device: str) -> float:
        return over_copy(self._encode_all, [x for _, x in self.tensors], device)

    track_encode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_decode_over_copy(self, name: str, device: str) -> float:
        decodes = [decoder(self.codec, p) for p in self.payloads]

        def decode_all() -> None:
            for decode in decodes:
                decode()

        return over_copy(decode_all, [x for _, x in self.tensors], device)

    track_decode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]
