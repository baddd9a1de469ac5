"""Parameter ladders: the candidate compression parameters ``C = {c_1, ..., c_k}`` of Algorithm 1.

A :class:`Ladder` is data: a registry codec name, the name of the one parameter that varies, its
candidate values (sorted ascending), the uniform default the budget is measured at, and the other
parameters held fixed. ``ladder.build(j)`` returns the *raw* codec for candidate ``j`` (never
wrapped in error feedback: L-GreCo measures errors "without applying error feedback", Sec. 4).

Search ranges (L-GreCo Sec. 5.1, "Parameter ranges"): with ``D`` the uniform default parameter,

* quantization (bits) and low rank (rank): ``[D/2, 2D]`` in steps of 1 - the public code's
  ``[floor(gamma D), ceil(beta D)]`` with ``gamma = 0.5``, ``beta = 2`` (rank 4 -> 2..8, rank 32 ->
  16..64, 4 bits -> 2..8);
* sparsification (density): ``[D/10, 10 D]`` in steps of ``D/10`` (density 1% -> 0.1%, 0.2%, ...,
  10%: 100 candidates), capped at density 1.

QSGD's axis in the paper is *bits per value*; gcbench's QSGD takes ``levels`` ``s`` and packs the
signed level ``[0, 2s]`` in ``bits_for_levels(2s + 1)`` bits, so ``b`` bits is ``s = 2^(b-1) - 1``
(b = 2 -> s = 1, 4 -> 7, 8 -> 127); ``b = 1`` is impossible (3 signed levels need 2 bits), so the
bits range starts at 2. The ladder keeps the paper's bits as ``axis_values``.

Beyond the paper (L-GreCo has no ladder for them; choices documented here):

* SketchML ``buckets`` (quantile buckets q): a quantization parameter, but the unit step of the
  ``[D/2, 2D]`` rule gives 385 candidates for q = 256, each needing a quantile sketch; the ladder
  keeps the range and uses ``steps`` (default 12) equal steps: 128, 160, ..., 512.
* 3LC ``sparsity`` multiplier ``s`` in ``[1, 2)`` (3LC Sec. 3.1; larger s = more zeros): the whole
  valid range in steps of 0.1 (1.0, 1.1, ..., 1.9).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base import Codec
from ..errors import InvalidParameterError
from ..wire.payload import ParamValue
from ..registry import entry

#: The public code's range factors: ``[floor(GAMMA D), ceil(BETA D)]`` (L-GreCo Sec. 5.1).
GAMMA = 0.5
BETA = 2.0


@dataclass(frozen=True, eq=False)
class Ladder:
    """Candidate values of one parameter of one registry codec.

    Attributes:
        codec: registry name (``gcbench.compressors.get`` name), e.g. ``"powersgd"``.
        param: the parameter that varies, e.g. ``"rank"``.
        values: candidate values, ascending, unique.
        default: the uniform reference value (must be one of ``values``): the error budget is the
            summed error of every layer at this value (Algorithm 1 line 2).
        base: other codec parameters, fixed for every candidate (e.g. ``{"seed": 0}``).
        axis: the paper's name for the axis when it differs from ``param`` (``"bits"`` for QSGD).
        axis_values: the paper-axis value of each candidate (e.g. bits), aligned with ``values``.
        rule: how the values were built (for reports).
        fixed_size: the payload size depends only on the tensor's shape and dtype, never on its
            values (PowerSGD, QSGD, exact TopK; checked by the tests), so measured costs may be
            reused across decisions (:func:`.tables.measure_tables`'s ``cost_cache``).
        larger_compresses_more: a larger value gives smaller payloads (3LC's sparsity multiplier);
            False for ranks, bits, densities and bucket counts.
        matrices_only: the parameter acts on tensors of two or more dimensions only; vectors
            (biases, norm gains) are sent whole whatever value a table records for them (PowerSGD's
            rank).
    """

    codec: str
    param: str
    values: tuple[ParamValue, ...]
    default: ParamValue
    base: Mapping[str, Any] = field(default_factory=dict)
    axis: str = ""
    axis_values: tuple[Any, ...] | None = None
    rule: str = ""
    fixed_size: bool = False
    larger_compresses_more: bool = False
    matrices_only: bool = False

    def __post_init__(self) -> None:
        vals = tuple(self.values)
        object.__setattr__(self, "values", vals)
        if not vals:
            raise InvalidParameterError("a ladder needs at least one candidate value")
        if len(set(vals)) != len(vals) or list(vals) != sorted(vals):
            raise InvalidParameterError(f"ladder values must be ascending and unique, got {vals}")
        if self.default not in vals:
            raise InvalidParameterError(f"the default {self.default!r} is not one of the ladder values {vals}")
        if self.axis_values is not None and len(self.axis_values) != len(vals):
            raise InvalidParameterError("axis_values must align with values")
        entry(self.codec)  # raises UnknownCodecError early
        object.__setattr__(self, "base", dict(self.base))

    def __len__(self) -> int:
        return len(self.values)

    @property
    def reference_index(self) -> int:
        """Index of :attr:`default` in :attr:`values`."""
        return self.values.index(self.default)

    def index_of(self, value: ParamValue) -> int:
        """Index of ``value`` (raises InvalidParameterError when it is not a candidate)."""
        try:
            return self.values.index(value)
        except ValueError:
            raise InvalidParameterError(
                f"{value!r} is not a candidate of the {self.codec}.{self.param} ladder"
            ) from None

    def params(self, j: int) -> dict[str, Any]:
        """Codec parameters of candidate ``j`` (``base`` plus ``{param: values[j]}``)."""
        return {**self.base, self.param: self.values[j]}

    def build(self, j: int) -> Codec:
        """The raw codec of candidate ``j``: registry defaults, ``base``, the candidate value.

        Never wrapped in error feedback, even for registry entries that wrap (``"3lc"``).
        """
        e = entry(self.codec)
        try:
            return e.load()(**{**e.defaults, **self.params(j)})
        except TypeError as err:
            raise InvalidParameterError(f"{self.codec}: {err}") from None

    def label(self, j: int) -> Any:
        """The paper-axis value of candidate ``j`` (e.g. bits) or the parameter value."""
        return self.axis_values[j] if self.axis_values is not None else self.values[j]


# -- the paper's ranges ---------------------------------------------------------------------------


def quantization_range(default: int, *, lowest: int = 1, span: Sequence[float] | None = None) -> list[int]:
    """``[floor(D/2), ceil(2D)]`` in steps of 1 (quantization bits and low rank, Sec. 5.1).

    ``span`` ``(gamma, beta)`` replaces the factors: ``[floor(gamma D), ceil(beta D)]`` with
    ``0 < gamma <= 1 <= beta`` (e.g. Table 4's PowerSGD ranges: L-GreCo ``[8, 64]`` around rank 32
    is ``(0.25, 2)``, L-GreCo + Accordion ``[8, 128]`` is ``(0.25, 4)``).
    """
    if not isinstance(default, int) or isinstance(default, bool) or default < 1:
        raise InvalidParameterError(f"default must be a positive int, got {default!r}")
    gamma, beta = _span(span)
    lo = max(lowest, math.floor(gamma * default))
    hi = math.ceil(beta * default)
    return list(range(lo, hi + 1))


def _span(span: Sequence[float] | None) -> tuple[float, float]:
    """``(gamma, beta)``: Sec. 5.1's ``(GAMMA, BETA)`` for None, else ``span`` checked."""
    if span is None:
        return GAMMA, BETA
    try:
        gamma, beta = (float(x) for x in span)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"span must be two numbers (gamma, beta), got {span!r}") from None
    if not (math.isfinite(gamma) and math.isfinite(beta) and 0 < gamma <= 1 <= beta):
        raise InvalidParameterError(f"span (gamma, beta) needs 0 < gamma <= 1 <= beta, got {span!r}")
    return gamma, beta


def _span_rule(span: Sequence[float] | None) -> str:
    """The ``[gamma D, beta D]`` of a range, for a ladder's ``rule``."""
    gamma, beta = _span(span)
    if (gamma, beta) == (GAMMA, BETA):
        return "[D/2, 2D] step 1 (Sec. 5.1)"
    return f"[{gamma:g}D, {beta:g}D] step 1"


def sparsification_range(default: float, *, maximum: float = 1.0) -> list[float]:
    """``[D/10, 10 D]`` in steps of ``D/10`` (sparsification density, Sec. 5.1), capped at ``maximum``.

    Values are ``k D / 10`` for ``k = 1..100`` rounded to 12 significant digits, so ``k = 10`` is
    exactly ``D`` (the default stays on the ladder).
    """
    if not (isinstance(default, (int, float)) and not isinstance(default, bool) and 0 < default <= maximum):
        raise InvalidParameterError(f"default density must be in (0, {maximum}], got {default!r}")
    out = []
    for k in range(1, 101):
        v = float(f"{k * default / 10:.12g}")
        if v <= maximum:
            out.append(v)
    if float(default) not in out:  # pragma: no cover - the 12-digit rounding makes k = 10 exact
        out = sorted(set(out) | {float(default)})
    return out


# -- ladders of the codecs ------------------------------------------------------------------------


def powersgd_ladder(rank: int = 4, *, span: Sequence[float] | None = None, **base: Any) -> Ladder:
    """PowerSGD ranks ``[floor(r/2), ceil(2r)]`` step 1 (the paper's low-rank range; ``span``: other
    factors, see :func:`quantization_range`)."""
    return Ladder(
        "powersgd",
        "rank",
        tuple(quantization_range(rank, span=span)),
        rank,
        base,
        rule=_span_rule(span),
        fixed_size=True,
        matrices_only=True,
    )


def qsgd_bits_to_levels(bits: int) -> int:
    """QSGD levels ``s`` whose signed levels ``[0, 2s]`` pack in exactly ``bits`` bits: ``2^(b-1) - 1``."""
    if not 2 <= bits <= 16:
        raise InvalidParameterError(f"QSGD bits must be in 2..16, got {bits}")
    return (1 << (bits - 1)) - 1


def qsgd_ladder(bits: int = 4, *, span: Sequence[float] | None = None, **base: Any) -> Ladder:
    """QSGD bits ``[floor(b/2), ceil(2b)]`` step 1 (clipped to 2..16), as ``levels = 2^(b-1) - 1``
    (``span``: other factors, see :func:`quantization_range`)."""
    bits_range = [b for b in quantization_range(bits, lowest=2, span=span) if b <= 16]
    levels = tuple(qsgd_bits_to_levels(b) for b in bits_range)
    return Ladder(
        "qsgd",
        "levels",
        levels,
        qsgd_bits_to_levels(bits),
        base,
        axis="bits",
        axis_values=tuple(bits_range),
        rule=f"bits {_span_rule(span)}; levels = 2^(bits-1) - 1",
        fixed_size=True,
    )


def topk_ladder(ratio: float = 0.01, **base: Any) -> Ladder:
    """TopK densities ``[D/10, 10 D]`` step ``D/10`` (the paper's sparsification range)."""
    return Ladder(
        "topk",
        "ratio",
        tuple(sparsification_range(ratio)),
        float(ratio),
        base,
        axis="density",
        rule="[D/10, 10D] step D/10 (Sec. 5.1)",
        fixed_size=base.get("method", "exact") == "exact",
    )


def sketchml_ladder(buckets: int = 256, steps: int = 12, **base: Any) -> Ladder:
    """SketchML quantile buckets over ``[D/2, 2D]`` in ``steps`` equal steps (beyond the paper)."""
    lo, hi = max(2, math.floor(GAMMA * buckets)), math.ceil(BETA * buckets)
    step = max(1, (hi - lo) // max(1, steps))
    values = sorted(set(range(lo, hi + 1, step)) | {buckets})
    return Ladder("sketchml", "buckets", tuple(values), buckets, base, rule=f"[D/2, 2D] step {step} (gcbench)")


def threelc_ladder(sparsity: float = 1.0, **base: Any) -> Ladder:
    """3LC sparsity multipliers 1.0, 1.1, ..., 1.9 (the valid range [1, 2); beyond the paper)."""
    values = sorted({round(1.0 + k / 10, 10) for k in range(10)} | {float(sparsity)})
    return Ladder("3lc", "sparsity", tuple(values), float(sparsity), base, rule="[1, 2) step 0.1 (gcbench)",
                  larger_compresses_more=True)


#: The ladders whose range takes a ``span`` (quantization bits and low rank).
SPANNED = ("powersgd", "qsgd")

_LADDERS = {
    "powersgd": powersgd_ladder,
    "qsgd": qsgd_ladder,
    "topk": topk_ladder,
    "topk-sampled": lambda ratio=0.01, **b: Ladder(
        "topk-sampled",
        "ratio",
        tuple(sparsification_range(ratio)),
        float(ratio),
        b,
        axis="density",
        rule="[D/10, 10D] step D/10 (Sec. 5.1)",
    ),
    "sketchml": sketchml_ladder,
    "3lc": threelc_ladder,
}


def ladder_for(codec: str, default: Any = None, **base: Any) -> Ladder:
    """The ladder of registry codec ``codec`` around ``default`` (the codec's usual default if None).

    ``default`` is in the paper's axis: rank for PowerSGD, *bits* for QSGD, density for TopK,
    buckets for SketchML, sparsity multiplier for 3LC.
    """
    try:
        make = _LADDERS[codec]
    except KeyError:
        raise InvalidParameterError(f"no ladder for codec {codec!r}; laddered: {sorted(_LADDERS)}") from None
    return make(**base) if default is None else make(default, **base)


#: The ladder default (paper axis) a codec's own parameters imply: rank, bits (QSGD ``levels =
#: 2^(b-1) - 1``), density, buckets, sparsity multiplier. None: the parameter is not set.
_AXIS_OF_PARAMS = {
    "powersgd": lambda p: int(p["rank"]) if "rank" in p else None,
    "qsgd": lambda p: int(p["levels"]).bit_length() + 1 if "levels" in p else None,
    "topk": lambda p: float(p["ratio"]) if "ratio" in p else None,
    "topk-sampled": lambda p: float(p["ratio"]) if "ratio" in p else None,
    "sketchml": lambda p: int(p["buckets"]) if "buckets" in p else None,
    "3lc": lambda p: float(p["sparsity"]) if "sparsity" in p else None,
}


def ladder_around(codec: str, params: Mapping[str, Any], default: Any = None, *,
                  span: Sequence[float] | None = None) -> Ladder:
    """The ladder of ``codec`` around the value its own ``params`` set, the other params held fixed.

    ``default`` (paper axis) overrides the value read from ``params``; with neither, the ladder's
    usual default. ``span`` ``(gamma, beta)``: the range ``[gamma D, beta D]`` of a quantization or
    low-rank ladder (:data:`SPANNED`) instead of Sec. 5.1's ``[D/2, 2D]``. Raises
    InvalidParameterError when ``params`` set the laddered parameter to a value that is not the
    ladder's default (e.g. QSGD ``levels = 5``, which is no whole bit count), or for a ``span`` on
    another ladder.
    """
    probe = ladder_for(codec)
    base = {k: v for k, v in params.items() if k != probe.param}
    if span is not None:
        if codec not in SPANNED:
            raise InvalidParameterError(f"a span applies to the ladders of {SPANNED}, not {codec!r}")
        base["span"] = span
    if default is None:
        axis = _AXIS_OF_PARAMS.get(codec)
        default = axis(params) if axis is not None else None
    ladder = ladder_for(codec, default, **base)
    if ladder.param in params and params[ladder.param] != ladder.default:
        raise InvalidParameterError(f"{codec}.{ladder.param}={params[ladder.param]!r} is not the ladder default {ladder.default!r}")
    return ladder


def laddered_codecs() -> list[str]:
    """Registry names that have a ladder."""
    return sorted(_LADDERS)


def values_of(ladder: Ladder, choice: Sequence[int]) -> list[ParamValue]:
    """Parameter values of a per-layer ``choice`` of candidate indexes."""
    return [ladder.values[int(j)] for j in choice]
