"""gcbench codecs: the public contract.

>>> from gcbench import compressors
>>> codec = compressors.get("qsgd", levels=15, seed=0)
>>> payload = codec.encode(grad)
>>> wire = payload.to_bytes()                      # len(wire) == payload.nbytes
>>> approx = compressors.decode(compressors.Payload.from_bytes(wire))
"""

from .base import Codec, SparseInput, Stage
from .numerics import check_finite
from .error_feedback import ErrorFeedback
from .errors import (
    CorruptPayloadError,
    GCBenchError,
    InvalidParameterError,
    NonFiniteGradientError,
    NumericOverflowError,
    PayloadError,
    PayloadLimitError,
    PayloadMismatchError,
    StateError,
    TruncatedPayloadError,
    UnknownCodecError,
    UnsupportedInputError,
    UnsupportedVersionError,
)
from .wire.payload import FORMAT_VERSION, Payload
from .registry import ENTRIES, Entry, class_for_id, classes, decode, entry, get, names

__all__ = [
    "Codec", "Stage", "SparseInput", "check_finite", "ErrorFeedback", "Payload", "FORMAT_VERSION",
    "ENTRIES", "Entry", "class_for_id", "classes", "decode", "entry", "get", "names",
    "GCBenchError", "CorruptPayloadError", "InvalidParameterError", "NonFiniteGradientError",
    "NumericOverflowError", "PayloadError", "PayloadLimitError", "PayloadMismatchError", "StateError", "TruncatedPayloadError",
    "UnknownCodecError", "UnsupportedInputError", "UnsupportedVersionError",
]
