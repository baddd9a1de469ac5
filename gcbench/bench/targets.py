"""The speed targets ``gcbench bench`` checks each row against (issue 21), and the verdict.

Targets are multiples of a same-run ``dst.copy_(x)`` into a preallocated buffer (the steadier
baseline and the physical limit: the bytes of one read and one write at memory bandwidth; a
``clone`` swings 2x between runs with its page faults), medians of interleaved rounds, stated for
25M float32 elements. A row *meets* its target when the measured value is on the right side of
the limit; a row without a measured value (failed, skipped) gets no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def targets_of(name: str) -> tuple[Target, ...]:
    """The targets of row ``name`` (empty when it has none)."""
    t = TARGETS.get(name)
    return () if t is None else t if isinstance(t, tuple) else (t,)


def target_text(name: str) -> str | None:
    """The target(s) of row ``name`` as text, or None."""
    return "; ".join(t.text for t in targets_of(name)) or None


def verdict(row: Any) -> str | None:
    """``"met"`` when every target with a measured value is met, ``"not met"`` when one is not,
    None (no target, or nothing measured)."""
    if row.status != "ok":
        return None
    results = [ok for ok in (t.met(row) for t in targets_of(row.name)) if ok is not None]
    if not results:
        return None
    return "met" if all(results) else "not met"
