"""Typed errors raised by gcbench codecs and the payload wire format.

Every error that gcbench's codecs, payload format and training environments (``gcbench.compressors``,
``gcbench.envs``) raise on bad input or bad use derives from :class:`GCBenchError`, so callers can
catch one family (the kernels' own argument checks, which validated callers never reach, raise plain
``ValueError``: a bug, not bad input). The subclasses also derive from the matching built-in (``ValueError``, ``TypeError``,
``KeyError``) so that code written against plain Python conventions keeps working.
"""

from __future__ import annotations


class GCBenchError(Exception):
    """Base class of every error the codecs, the payload format and the training environments raise
    on bad input or bad use."""


# --- codec construction and input -------------------------------------------------------------


class UnknownCodecError(GCBenchError, KeyError):
    """A codec name (or a wire codec id) that the registry does not know."""

    def __str__(self) -> str:  # KeyError would otherwise print the repr of its argument
        return str(self.args[0]) if self.args else "unknown codec"


class InvalidParameterError(GCBenchError, ValueError):
    """A codec parameter with a wrong name, type or value."""


class UnsupportedInputError(GCBenchError, TypeError):
    """An input tensor a codec cannot take (integer dtype, complex, wrong layout, not a tensor)."""


class NonFiniteGradientError(GCBenchError, ValueError):
    """The input holds NaN or +-Inf. Nothing was encoded and no codec state was changed."""


class NumericOverflowError(NonFiniteGradientError):
    """A finite input whose encoding would overflow the codec's working precision (a momentum or
    residual sum, a matrix product, a sketch bucket). Raised before any state changes."""


class StateError(GCBenchError, ValueError):
    """Per-tensor codec state (error feedback, warm start) does not fit the tensor given."""


# --- payloads ---------------------------------------------------------------------------------


class PayloadError(GCBenchError, ValueError):
    """A payload that cannot be parsed or decoded."""


class TruncatedPayloadError(PayloadError):
    """The bytes end before the lengths in the header say they should."""


class CorruptPayloadError(PayloadError):
    """Bad magic, checksum mismatch, impossible field values, or sections that do not fit the codec."""


class PayloadLimitError(CorruptPayloadError):
    """A payload declaring a tensor larger than the receiver's ``max_numel`` (or a dimension out of
    range): refused before anything is allocated for it."""


class UnsupportedVersionError(PayloadError):
    """A payload written with a wire-format version this gcbench cannot read."""


class PayloadMismatchError(PayloadError):
    """A payload handed to a codec other than the one (or with parameters other than those) that wrote it."""
