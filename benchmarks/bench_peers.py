"""Installable peers of the same methods, timed by the same asv run as gcbench's codecs.

* :class:`PowerSGDPeers` - torch's own PowerSGD hook math
  (``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook._orthogonalize`` and the P/Q
  ``bmm``s, warm start, no communication: :class:`gcbench.bench.peers.TorchPowerSGDMath`) against
  gcbench's ``PowerSGD(rank=4)`` on the compressible layers of ResNet-50 (54 matrices, 25,502,912
  elements; ``"resnet50"``, needs ``GCBENCH_BENCH_FULL=1``) and of ResNet-50 with every width / 4
  (53 matrices, 1,979,440 elements, ``"resnet50-w4"``, runs in quick mode; ``track_elements``
  records the count). Values N(0, 1). ``time_encode``,
  ``time_decode``, and ``track_encode_over_copy`` / ``track_decode_over_copy`` (into ready buffers)
  over a same-process ``copy_`` of the matrices.
* :class:`PowerSGDOverTorch` - the two implementations timed in one process, in the same interleaved
  rounds: ``track_gcbench_over_torch``, gcbench's encode + decode over torch's.
* :class:`QuantileStepPeers` - the quantile step of SketchML (256 equal-count buckets of the
  magnitudes of the sparse input's values): gcbench's ``quantile_splits`` (DataSketches classic
  quantiles, k = 128, the paper's choice, incl. the tensor -> numpy conversion), DataSketches
  called directly (``quantiles_doubles_sketch(128)``, ``kll_floats_sketch(200)``) and the exact
  order statistics by ``torch.sort``; ``track_quantile_step_over_copy`` over a ``copy_`` of the
  magnitudes.
* :class:`HivemindPeers` - hivemind's compression classes (``Float16Compression``,
  ``Uniform8BitQuantization``, ``Quantile8BitQuantization``, ``BlockwiseQuantization``) on the
  dense input, on CPU: ``time_compress``, ``time_extract``, ``track_compress_over_copy``,
  ``track_extract_over_copy`` (over a same-process ``copy_`` of the input) and
  ``track_bits_per_element`` (protobuf ``ByteSize``). hivemind is an optional extra
  (``pip install gcbench[peers]``; it needs numpy < 2.4 today): without it every case is skipped the
  asv way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .common import (
    DENSITIES,
    DEVICES,
    OVER_COPY,
    SIZES,
    TIMEOUT,
    bits_per_element,
    check_case,
    decoder,
    full_run,
    interleaved_medians,
    make_input,
    make_sparse_input,
    over_copy,
    synchronize,
)

RANK = 4
MODELS = {"resnet50-w4": 4, "resnet50": 1}  # name -> width divisor


def powersgd_case(model: str, device: str) -> tuple[dict[str, torch.Tensor], type]:
    """The rank-``RANK`` matrices of ``model`` on ``device`` and torch's hook math
    (:class:`gcbench.bench.peers.TorchPowerSGDMath`), or NotImplementedError (asv: skip)."""
    check_case(1_000_000, device)
    if MODELS[model] == 1 and not full_run():
        raise NotImplementedError("the full ResNet-50 (25.5M elements) runs only with GCBENCH_BENCH_FULL=1")
    try:
        from gcbench.bench.inputs import powersgd_matrices
        from gcbench.bench.peers import TorchPowerSGDMath
    except ImportError as err:
        raise NotImplementedError(f"gcbench.bench.peers: {err}") from None
    return powersgd_matrices(RANK, MODELS[model], device), TorchPowerSGDMath


def powersgd_impl(impl: str, mats: dict[str, torch.Tensor], torch_math: type) -> tuple[Callable, Callable, Callable]:
    """``(encode, decode, decode into ready buffers)`` of every matrix by ``impl``, warm-started (one
    encode done, as in training after the first step). torch's decode always writes into its
    preallocated outputs; gcbench's ``decode`` allocates, its third one decodes with ``out=``."""
    if impl == "torch-hook":
        math = torch_math(list(mats.values()), rank=RANK)
        math.encode()
        return math.encode, math.decode, math.decode
    from gcbench import compressors

    codec = compressors.get("powersgd", rank=RANK)
    payloads = {k: codec.encode(t, key=k) for k, t in mats.items()}
    ready = [decoder(codec, p) for p in payloads.values()]

    def encode() -> None:
        for k, t in mats.items():
            codec.encode(t, key=k)

    def decode() -> None:
        for p in payloads.values():
            codec.decode(p)

    def decode_ready() -> None:
        for d in ready:
            d()

    encode()
    return encode, decode, decode_ready


class PowerSGDPeers:
    """asv: rank-4 PowerSGD on ResNet-50 layer shapes, gcbench's codec vs torch's hook math: times, and
    each over a same-process ``copy_`` of the matrices."""

    params = (["gcbench", "torch-hook"], list(MODELS), DEVICES)
    param_names = ["impl", "model", "device"]
    timeout = TIMEOUT

    def setup(self, impl: str, model: str, device: str) -> None:
        self.mats, torch_math = powersgd_case(model, device)
        self.device = device
        self._encode, self._decode, self._decode_ready = powersgd_impl(impl, self.mats, torch_math)
        synchronize(device)

    def time_encode(self, impl: str, model: str, device: str) -> None:
        self._encode()
        synchronize(self.device)

    def time_decode(self, impl: str, model: str, device: str) -> None:
        self._decode()
        synchronize(self.device)

    def track_encode_over_copy(self, impl: str, model: str, device: str) -> float:
        return over_copy(self._encode, list(self.mats.values()), device)

    track_encode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_decode_over_copy(self, impl: str, model: str, device: str) -> float:
        """Decode into ready buffers (both implementations)."""
        return over_copy(self._decode_ready, list(self.mats.values()), device)

    track_decode_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_elements(self, impl: str, model: str, device: str) -> int:
        return sum(t.numel() for t in self.mats.values())

    track_elements.unit = "elements"  # type: ignore[attr-defined]


class PowerSGDOverTorch:
    """asv: gcbench's PowerSGD over torch's hook math, both timed in this process in the same
    interleaved rounds (gcbench encode, decode, torch encode, decode; decodes into ready buffers):
    ``(encode + decode) / (encode + decode)`` of the medians, ``gcbench bench``'s ``time_vs_torch``."""

    params = (list(MODELS), DEVICES)
    param_names = ["model", "device"]
    timeout = TIMEOUT

    def setup(self, model: str, device: str) -> None:
        mats, torch_math = powersgd_case(model, device)
        self.fns = {}
        for impl in ("gcbench", "torch-hook"):
            encode, _, decode_ready = powersgd_impl(impl, mats, torch_math)
            self.fns[f"{impl} encode"], self.fns[f"{impl} decode"] = encode, decode_ready
        synchronize(device)

    def track_gcbench_over_torch(self, model: str, device: str) -> float:
        m = interleaved_medians(self.fns, device)
        return (m["gcbench encode"] + m["gcbench decode"]) / (m["torch-hook encode"] + m["torch-hook decode"])

    track_gcbench_over_torch.unit = "x torch powerSGD_hook math"  # type: ignore[attr-defined]


QUANTILE_IMPLS = ["gcbench-quantile_splits", "datasketches-quantiles_doubles", "datasketches-kll_floats", "torch-sort"]


class QuantileStepPeers:
    """asv: SketchML's quantile step (256 buckets of |values|), gcbench vs DataSketches vs exact."""

    params = (QUANTILE_IMPLS, SIZES, DENSITIES)
    param_names = ["impl", "numel", "density"]
    timeout = TIMEOUT

    def setup(self, impl: str, numel: int, density: float) -> None:
        check_case(numel, "cpu")
        self.mag = make_sparse_input(numel, density, "cpu").values().abs()
        self.ranks = [i / 256 for i in range(1, 256)]
        if impl == "gcbench-quantile_splits":
            try:
                from gcbench.compressors.codecs.sketchml.codec import quantile_splits
            except ImportError as err:
                raise NotImplementedError(f"gcbench.compressors.codecs.sketchml.codec: {err}") from None
            self.run = lambda: quantile_splits(self.mag, 256, sketch="quantiles", k=128)
        elif impl.startswith("datasketches"):
            try:
                import datasketches
            except ImportError as err:
                raise NotImplementedError(f"datasketches: {err}") from None
            if impl.endswith("quantiles_doubles"):
                arr = self.mag.double().numpy()

                def run() -> None:
                    sk = datasketches.quantiles_doubles_sketch(128)
                    sk.update(arr)
                    sk.get_quantiles(self.ranks)

            else:
                arr = self.mag.numpy()

                def run() -> None:
                    sk = datasketches.kll_floats_sketch(200)
                    sk.update(arr)
                    sk.get_quantiles(self.ranks)

            self.run = run
        else:
            n = self.mag.numel()
            pos = torch.tensor([min(n * i // 256, n - 1) for i in range(1, 256)])
            self.run = lambda: torch.sort(self.mag).values[pos]

    def time_quantile_step(self, impl: str, numel: int, density: float) -> None:
        self.run()

    def track_quantile_step_over_copy(self, impl: str, numel: int, density: float) -> float:
        return over_copy(self.run, self.mag, "cpu")

    track_quantile_step_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]


HIVEMIND_CLASSES = ["Float16Compression", "Uniform8BitQuantization", "Quantile8BitQuantization", "BlockwiseQuantization"]


class HivemindPeers:
    """asv: hivemind's compression classes on CPU (skipped when hivemind is not installed)."""

    params = (HIVEMIND_CLASSES, SIZES)
    param_names = ["cls", "numel"]
    timeout = TIMEOUT

    def setup(self, cls: str, numel: int) -> None:
        check_case(numel, "cpu")
        try:
            import hivemind.compression as hc
        except Exception as err:  # noqa: BLE001 - optional extra "peers"
            raise NotImplementedError(f"hivemind is not importable: {err}") from None
        try:
            self.comp = getattr(hc, cls)()
        except Exception as err:  # noqa: BLE001 - e.g. BlockwiseQuantization without bitsandbytes
            raise NotImplementedError(f"hivemind {cls}: {err}") from None
        self.x = make_input(numel, "cpu").reshape(-1)
        self.info = hc.CompressionInfo.from_tensor(self.x)
        self.msg = self.comp.compress(self.x, self.info, allow_inplace=False)
        self.numel = numel

    def time_compress(self, cls: str, numel: int) -> None:
        self.comp.compress(self.x, self.info, allow_inplace=False)

    def time_extract(self, cls: str, numel: int) -> None:
        self.comp.extract(self.msg)

    def track_compress_over_copy(self, cls: str, numel: int) -> float:
        return over_copy(lambda: self.comp.compress(self.x, self.info, allow_inplace=False), self.x, "cpu")

    track_compress_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_extract_over_copy(self, cls: str, numel: int) -> float:
        """Extract into a fresh tensor (hivemind has no ``out``)."""
        return over_copy(lambda: self.comp.extract(self.msg), self.x, "cpu")

    track_extract_over_copy.unit = OVER_COPY  # type: ignore[attr-defined]

    def track_bits_per_element(self, cls: str, numel: int) -> float:
        return bits_per_element(self.msg.ByteSize(), self.numel)

    track_bits_per_element.unit = "bits/element"  # type: ignore[attr-defined]
