"""Numeric helpers every codec shares: finiteness checks, the finite-input policy's errors and
saturating casts, a fixed-order scatter-add, int64 fixed point for sums whose bits must not depend on
the order of their additions, the positions of non-zero values, and the length of a CPU work block.

The policies they implement are the codec contract's (:mod:`~gcbench.compressors.base`, "Policies on
odd input"); codecs and the execution layer import them from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .errors import NonFiniteGradientError, NumericOverflowError


def check_finite(x: torch.Tensor) -> None:
    """Raise :class:`NonFiniteGradientError` if ``x`` holds NaN or Inf (one reduction in the common
    case, :func:`all_finite`; the exact count only when it finds one)."""
    if not all_finite(x):
        raise_if_non_finite(x)


def raise_if_non_finite(x: torch.Tensor) -> None:
    """Raise :class:`NonFiniteGradientError` (the message of :func:`check_finite`) if ``x`` holds NaN
    or Inf: the exact count, for a codec whose own scan (a min/max, a fused kernel's flag) found one."""
    n_bad = int((~torch.isfinite(x)).sum())
    if n_bad:
        raise NonFiniteGradientError(
            f"input holds {n_bad} non-finite value(s) (NaN/Inf) of {x.numel()}; nothing was encoded"
        )


def finite_aminmax(x: torch.Tensor) -> tuple[float, float]:
    """``torch.aminmax(x)`` as floats, raising :class:`NonFiniteGradientError` (the message of
    :func:`check_finite`) when ``x`` holds NaN or Inf: NaN shows at both ends, Inf at one, so a codec
    that reads its scale from the min/max makes this scan its finiteness check (``checks_finite``)."""
    lo, hi = (float(v) for v in torch.aminmax(x))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise_if_non_finite(x)
    return lo, hi


def all_finite(x: torch.Tensor) -> bool:
    """True when ``x`` (any float tensor) holds no NaN or Inf, by one reduction and one read-back in
    the common case, the fewest ops a small tensor (a DDP bucket of a small model) can pay for it.

    The sum in ``x``'s own dtype first: NaN and Inf propagate through every addition (Inf - Inf is
    NaN), so a finite sum proves every value finite; only a non-finite sum (which finite values can
    also give, by overflowing it: easily in float16) pays for the exact check, one ``aminmax`` pass
    (NaN propagates to both ends, Inf shows at one; it cannot overflow). The sum is the faster pass
    in every dtype (one thread: 25M float16 values 2.4 ms against ``aminmax``'s 9.1, a 0.27M-value
    bucket 15 against 36 us; float32, half ``aminmax``'s time)."""
    if x.numel() == 0:
        return True
    if math.isfinite(float(x.sum())):
        return True
    lo, hi = torch.aminmax(x.reshape(-1))
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def all_finite_many(tensors: Sequence[torch.Tensor]) -> bool:
    """:func:`all_finite` of every tensor in ``tensors`` with one read-back for all of them in the common
    case: each tensor's sum in its own dtype (a finite sum proves finite values), and the exact check of
    :func:`all_finite` per tensor only where some sum is not finite."""
    ts = [t for t in tensors if t.numel()]
    if not ts:
        return True
    if bool(torch.stack([t.sum().double() for t in ts]).isfinite().all()):
        return True
    return all(all_finite(t) for t in ts)


def ensure_finite(*tensors: torch.Tensor, what: str = "the encoding") -> None:
    """Raise :class:`NumericOverflowError` unless every float tensor in ``tensors`` is finite.

    For the finite-input policy: stateful codecs call it on their new state *before* storing it.
    """
    for t in tensors:
        if t.is_floating_point() and not all_finite(t):
            raise overflow_error(what, t.dtype)


def overflow_error(what: str, dtype: torch.dtype) -> NumericOverflowError:
    """The :class:`NumericOverflowError` of :func:`ensure_finite`, for a check a fused kernel made."""
    return NumericOverflowError(
        f"{what} overflows its working precision ({dtype}) for this finite input; "
        "nothing was encoded and no state was changed"
    )


def nonzero_positions(x: torch.Tensor) -> torch.Tensor:
    """``torch.nonzero(x.reshape(-1)).reshape(-1)``: the ascending int64 positions of the non-zero
    values of ``x`` (bool masks included; NaN counts as non-zero, -0.0 as zero).

    On the CPU numpy's ``flatnonzero`` over a bool mask (SIMD over bytes, a count then a fill), the
    mask from numpy's comparison with zero where numpy has the dtype (one thread, 2^20 float32
    values: 60 us against torch's 650). Elsewhere ``torch.nonzero``.
    """
    flat = x.detach().reshape(-1)
    if flat.device.type != "cpu":
        return torch.nonzero(flat).reshape(-1)
    if flat.dtype == torch.bool:
        mask = flat.numpy()
    elif flat.dtype in _NUMPY_NUMBERS:
        mask = flat.numpy() != 0
    else:
        mask = (flat != 0).numpy()
    return torch.from_numpy(np.flatnonzero(mask)).to(torch.int64)


#: Dtypes whose values :func:`nonzero_positions` compares with zero in numpy.
_NUMPY_NUMBERS = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                            torch.float32, torch.float64})


def quarter_block(n: int, multiple: int, lo: int, hi: int) -> int:
    """Length of one CPU work block over ``n`` elements: a quarter of ``n`` clamped to ``[lo, hi]``,
    rounded down to a multiple of ``multiple`` (at least ``multiple``). A quarter keeps a block's
    temporaries a fraction of the input, so an encode peaks below 2x its input;
    ``lo`` keeps small tensors to a few large torch calls, ``hi`` bounds the temporaries of huge ones."""
    b = min(hi, max(lo, n // 4))
    return max(multiple, b // multiple * multiple)


def saturating_cast(x: torch.Tensor, dtype: torch.dtype, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x.to(dtype)`` with values beyond ``dtype``'s range clamped to its largest finite value.

    Finite input stays finite; values within range are cast exactly as ``to`` casts them. Narrowing,
    the cast comes first and the clamp is made in place in ``dtype``: the cast rounds a value beyond
    the range to an infinity (or, below the rounding boundary, to the largest finite value) and the
    clamp brings the infinities back, the bits of a clamp to ``dtype``'s bound in ``x``'s precision
    followed by the cast, without a full-size temporary in ``x``'s precision (on 8M float32 values
    to float16: 2.3 against 14 ms). NaN stays NaN.

    Args:
        out: a tensor of ``dtype`` and ``x``'s shape to write the result into (returned); ``x`` itself
            is never written.
    """
    if out is not None:
        out.copy_(x)
        result = out
    elif x.dtype == dtype:
        return x
    else:
        result = x.to(dtype)
    if x.is_floating_point() and dtype.is_floating_point and torch.finfo(x.dtype).max > torch.finfo(dtype).max:
        top = torch.finfo(dtype).max
        result.clamp_(-top, top)
    return result


def ordered_add_at(acc: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``acc[index[i]] += values[i]`` for every ``i``, in place, in an order fixed by the inputs, so
    float sums have the same bits every run. On the CPU ``index_add_`` adds in index order; on CUDA
    it adds with atomics in whatever order threads reach them, so there ``index_put_`` with
    ``accumulate=True`` is used instead, which sorts the indices and adds each slot's values in a
    fixed order (PyTorch's reproducibility notes list it as deterministic on CUDA)."""
    if acc.device.type == "cpu":
        return acc.index_add_(0, index, values)
    return acc.index_put_((index,), values, accumulate=True)


#: Bits below an int64's sign bit that a fixed-point sum may fill (:func:`fixed_point_scale`): two
#: bits of headroom below 2**63.
FIXED_POINT_BITS = 61


def fixed_point_scale(top: float, count: int) -> float:
    """The power of two ``s`` for summing ``count`` values of magnitude at most ``top`` in int64 fixed
    point (:func:`to_fixed_point`), exactly and so in any order (CUDA's atomics included).

    With ``top < 2**e`` and ``2**L >= count``, ``s = 2**(61 - L - e)``: each rounded value is at most
    ``2**(61 - L)`` in magnitude and any ``count`` of them add up within ``2**61``. Each value is
    rounded to a multiple of ``1 / s``, an absolute error of at most ``0.5 / s <= top * 2**(L - 61)``
    (``top * 2**-35`` for 64M values): below the rounding of a float32 sum of the values as soon as
    the sum's magnitude reaches ``top * 2**(L - 37)``.

    Raises:
        ValueError: ``top`` negative or not finite, or ``count`` < 0.
    """
    if not (math.isfinite(top) and top >= 0) or count < 0:
        raise ValueError(f"fixed_point_scale needs a finite top >= 0 and a count >= 0, got {top!r}, {count!r}")
    _, e = math.frexp(top)  # top = m * 2**e with 0.5 <= m < 1 (top = 0: e = 0)
    return math.ldexp(1.0, FIXED_POINT_BITS - max(count - 1, 0).bit_length() - e)


def to_fixed_point(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``round(x * scale)`` as int64 (ties to even): exact products in float64 (``scale`` a power of
    two from :func:`fixed_point_scale`, ``x`` float32 or narrower), one rounding each."""
    return torch.round(x.to(torch.float64) * scale).to(torch.int64)


def from_fixed_point(q: torch.Tensor, scale: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The values of int64 fixed-point sums ``q`` (:func:`to_fixed_point`'s units) in ``dtype``: through
    float64 (rounded there beyond 2**53), divided by the power of two exactly, then rounded to ``dtype``."""
    return (q.to(torch.float64) / scale).to(dtype)
