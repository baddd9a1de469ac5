"""The speed targets ``gcbench bench`` checks each row against, and the verdict.

Targets are multiples of a same-run ``dst.copy_(x)`` into a preallocated buffer (the steadier
baseline and the physical limit: the bytes of one read and one write at memory bandwidth; a
``clone`` swings 2x between runs with its page faults), medians of interleaved rounds. A row
*meets* its target when the measured value is on the right side of the limit; a row without a
measured value (failed, skipped) gets no verdict.

Two sets: :data:`TARGETS` for CPU rows (stated for 25M float32 elements) and :data:`GPU_TARGETS`
for CUDA rows (stated for 64M float32 elements: a GPU's copy is short enough that launch overheads
weigh on smaller inputs). The GPU set is tighter where a GPU's many threads make the work
bandwidth-bound: elementwise encode + decode within 2x ``copy_`` (about 60% of its bandwidth
once the payload's own bytes are counted; published quantization kernels reach about 80% of an
H100's), TopK's encode within 4x, Count Sketch's accumulate within 10x, SketchML's encode at
200M pairs/s. A row of one device is never judged against the other's set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The input size each device's target set is stated for (float32 elements): a row measured on a
#: smaller input (``gcbench bench --size``) is shown against its target but not judged (:data:`NOT_JUDGED`).
STATED_NUMEL = {"cpu": 25_000_000, "cuda": 64 * 2**20}
NOT_JUDGED = "not judged: below the stated size"


@dataclass(frozen=True)
class Target:
    """``metric`` of a row compared with ``limit`` (``<=`` when ``upper``, else ``>=``)."""

    text: str
    metric: str  # a BenchRow attribute, or "extra:<key>"
    limit: float
    upper: bool = True

    def value(self, row: Any) -> float | None:
        """The row's measured value of :attr:`metric` (None when not measured)."""
        if self.metric.startswith("extra:"):
            return row.extra.get(self.metric[len("extra:"):])
        return getattr(row, self.metric, None)

    def met(self, row: Any) -> bool | None:
        """True / False, or None when the row has no measured value."""
        v = self.value(row)
        if v is None:
            return None
        return v <= self.limit if self.upper else v >= self.limit


_ELEMENTWISE = Target("enc+dec <= 4x copy", "total_x_copy", 4.0)
_WITH_EF = Target("enc+dec <= 6x copy (with error feedback)", "total_x_copy", 6.0)

#: Row name -> target (or targets, all to be met). Elementwise codecs without error feedback (incl. the inner codec rows of
#: the error-feedback entries, named "<entry> (no EF)"), 3LC / EF-sign with their error
#: accumulation, TopK's encode, Count Sketch's accumulate, SketchML's encode and decode pairs/s,
#: PowerSGD vs torch.
TARGETS: dict[str, Target | tuple[Target, ...]] = {
    **{name: _ELEMENTWISE for name in ("qsgd", "terngrad", "signsgd", "zipml8", "zipml16", "3lc (no EF)",
                                       "ef-signsgd (no EF)")},
    "3lc": _WITH_EF,
    "ef-signsgd": _WITH_EF,
    "topk": Target("encode <= 6x copy", "encode_x_copy", 6.0),
    "topk-sampled": Target("encode <= 6x copy", "encode_x_copy", 6.0),
    "countsketch.accumulate": Target("<= 10x copy", "encode_x_copy", 10.0),
    "sketchml": (
        Target(">= 20M pairs/s encode at 10% density", "encode_rate", 20e6, upper=False),
        Target(">= 40M pairs/s decode", "decode_rate", 40e6, upper=False),
    ),
    "powersgd [resnet50]": Target("enc+dec <= torch's", "extra:time_vs_torch", 1.0),
}


_GPU_ELEMENTWISE = Target("enc+dec <= 2x copy (CUDA)", "total_x_copy", 2.0)

#: Row name -> target for rows measured on a CUDA device (the CPU's :data:`TARGETS` do not apply).
GPU_TARGETS: dict[str, Target | tuple[Target, ...]] = {
    **{name: _GPU_ELEMENTWISE for name in ("qsgd", "terngrad", "signsgd", "zipml8", "zipml16", "3lc (no EF)",
                                           "ef-signsgd (no EF)")},
    "topk": Target("encode <= 4x copy (CUDA)", "encode_x_copy", 4.0),
    "topk-sampled": Target("encode <= 4x copy (CUDA)", "encode_x_copy", 4.0),
    "countsketch.accumulate": Target("<= 10x copy (CUDA)", "encode_x_copy", 10.0),
    "sketchml": Target(">= 200M pairs/s encode at 10% density (CUDA)", "encode_rate", 200e6, upper=False),
    "powersgd [resnet50]": Target("enc+dec <= torch's", "extra:time_vs_torch", 1.0),
}


def targets_for(device_type: str = "cpu") -> dict[str, Target | tuple[Target, ...]]:
    """The target set of rows measured on a device of this type (``"cpu"``, ``"cuda"``)."""
    return GPU_TARGETS if device_type == "cuda" else TARGETS


def targets_of(name: str, device_type: str = "cpu") -> tuple[Target, ...]:
    """The targets of row ``name`` on ``device_type`` (empty when it has none)."""
    t = targets_for(device_type).get(name)
    return () if t is None else t if isinstance(t, tuple) else (t,)


def target_text(name: str, device_type: str = "cpu") -> str | None:
    """The target(s) of row ``name`` on ``device_type`` as text, or None."""
    return "; ".join(t.text for t in targets_of(name, device_type)) or None


def verdict(row: Any, device_type: str = "cpu") -> str | None:
    """``"met"`` when every target of the row with a measured value is met, ``"not met"`` when one
    is not, :data:`NOT_JUDGED` when the row's input is smaller than the size its device's targets are
    stated for (:data:`STATED_NUMEL`; fixed costs weigh more on a smaller input), None (no target, or
    nothing measured)."""
    if row.status != "ok":
        return None
    results = [ok for ok in (t.met(row) for t in targets_of(row.name, device_type)) if ok is not None]
    if not results:
        return None
    if 0 < getattr(row, "numel", 0) < STATED_NUMEL.get(device_type, STATED_NUMEL["cpu"]):
        return NOT_JUDGED
    return "met" if all(results) else "not met"
