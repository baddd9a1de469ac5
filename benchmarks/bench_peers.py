"""Installable peers of the same methods, timed by the same asv run as gcbench's codecs.

* :class:`PowerSGDPeers` - torch's own PowerSGD hook math
  (``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook._orthogonalize`` and the P/Q
  ``bmm``s, warm start, no communication: :class:`gcbench.bench.peers.TorchPowerSGDMath`) against
  gcbench's ``PowerSGD(rank=4)`` on the compressible layers of ResNet-50 (25.5M elements;
  ``"resnet50"``, needs ``GCBENCH_BENCH_FULL=1``) and of ResNet-50 with every width / 4
  (1.6M elements, ``"resnet50-w4"``, runs in quick mode). Values N(0, 1).
* :class:`QuantileStepPeers` - the quantile step of SketchML (256 equal-count buckets of the
  magnitudes of the sparse input's values): gcbench's ``quantile_splits`` (DataSketches classic
  quantiles, k = 128, the paper's choice, incl. the tensor -> numpy conversion), DataSketches
  called directly (``quantiles_doubles_sketch(128)``, ``kll_floats_sketch(200)``) and the exact
  order statistics by ``torch.sort``.
* :class:`HivemindPeers` - hivemind's compression classes (``Float16Compression``,
  ``Uniform8BitQuantization``, ``Quantile8BitQuantization``, ``BlockwiseQuantization``) on the
  dense input, on CPU: ``time_compress``, ``time_extract``, ``track_bits_per_element`` (protobuf
  ``ByteSize``). hivemind is an optional extra (``pip install gcbench[peers]``; it needs
  numpy < 2.4 today): without it every case is skipped the asv way.
"""

from __future__ import annotations

import torch

from .common import (
    DENSITIES,
    DEVICES,
    SIZES,
    TIMEOUT,
    bits_per_element,
    check_case,
    full_run,
    make_input,
    make_sparse_input,
    synchronize,
)

RANK = 4
MODELS = {"resnet50-w4": 4, "resnet50": 1}  # name -> width divisor


class PowerSGDPeers:
    """asv: rank-4 PowerSGD on ResNet-50 layer shapes, gcbench's codec vs torch's hook math."""

    params = (["gcbench", "torch-hook"], list(MODELS), DEVICES)
    param_names = ["impl", "model", "device"]
    timeout = TIMEOUT

    def setup(self, impl: str, model: str, device: str) -> None:
        check_case(1_000_000, device)
        if MODELS[model] == 1 and not full_run():
            raise NotImplementedError("the full ResNet-50 (25.5M elements) runs only with GCBENCH_BENCH_FULL=1")
        try:
            from gcbench.bench.inputs import powersgd_matrices
            from gcbench.bench.peers import TorchPowerSGDMath
        except ImportError as err:
            raise NotImplementedError(f"gcbench.bench.peers: {err}") from None
        self.mats = powersgd_matrices(RANK, MODELS[model], device)
        self.device = device
        if impl == "torch-hook":
            math = TorchPowerSGDMath(list(self.mats.values()), rank=RANK)
            self._encode, self._decode = math.encode, math.decode
        else:
            from gcbench import compressors

            codec = compressors.get("powersgd", rank=RANK)
            payloads = {k: codec.encode(t, key=k) for k, t in self.mats.items()}

            def encode() -> None:
                for k, t in self.mats.items():
                    codec.encode(t, key=k)

            def decode() -> None:
                for p in payloads.values():
                    codec.decode(p)

            self._encode, self._decode = encode, decode
        self._encode()  # warm start, as in training after the first step
        synchronize(device)

    def time_encode(self, impl: str, model: str, device: str) -> None:
        self._encode()
        synchronize(self.device)

    def time_decode(self, impl: str, model: str, device: str) -> None:
        self._decode()
        synchronize(self.device)

    def track_elements(self, impl: str, model: str, device: str) -> int:
        return sum(t.numel() for t in self.mats.values())

    track_elements.unit = "elements"  # type: ignore[attr-defined]


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

    def track_bits_per_element(self, cls: str, numel: int) -> float:
        return bits_per_element(self.msg.ByteSize(), self.numel)

    track_bits_per_element.unit = "bits/element"  # type: ignore[attr-defined]
