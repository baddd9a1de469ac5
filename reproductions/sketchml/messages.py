"""Key-value gradient messages: what a worker sends the driver, as real serialized bytes.

SketchML's gradients are key-value pairs (§2, §3.4). The methods differ in how the pair travels:

* **SketchML** is a ``sparse_native`` codec: it encodes keys (delta-binary) and values (quantile
  buckets + MinMaxSketch) itself. The message is the codec's payload, ``payload.to_bytes()``.
* **Adam-float / Adam-double / ZipML** compress (or not) only the values; the paper notes "ZipML is
  unable to compress the gradient keys". Their message is a small key-value container, version 1,
  all integers little-endian::

      offset  size     field
      0       4        magic b"GKV1"
      4       4        n, number of keys (u32)
      8       8        dim, size of the key space (u64)
      16      4 n      keys, int32, ascending
      16+4n   ...      the values' payload: gcbench wire format v1 (``Payload.to_bytes()``) of the
                       n values encoded by a dense codec (identity in float32 or float64, zipml8,
                       zipml16); it carries its own lengths and CRC-32.

  Keys travel as raw 4-byte integers, as in the paper's uncompressed baseline ("the original size
  12d" = 4-byte key + 8-byte double value, §3.5).

Every size reported is ``len(message)``; decoding parses the bytes back (nothing is passed around
in memory), so the driver works only from what crossed the (simulated) wire.
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from gcbench.compressors import Payload, get
from gcbench.compressors.errors import CorruptPayloadError

KV_MAGIC = b"GKV1"
_KV_HEADER = struct.Struct("<4sIQ")
VALUE_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class MethodSpec:
    """One method of the comparison.

    Attributes:
        name: ``sketchml``, ``adam-float``, ``adam-double``, ``zipml8``, ``zipml16`` or a variant name.
        codec: registry name of the codec (``identity`` for uncompressed Adam).
        params: codec parameters (overriding the registry entry's preset).
        value_dtype: dtype the gradient values are handed to the codec in.
        label: display name (as in the paper's tables).
    """

    name: str
    codec: str
    params: Mapping[str, Any] = field(default_factory=dict)
    value_dtype: str = "float64"
    label: str = ""

    @classmethod
    def from_mapping(cls, name: str, m: Mapping[str, Any]) -> "MethodSpec":
        """Build from a spec's ``[workload.methods.NAME]`` table."""
        dtype = str(m.get("value_dtype", "float64"))
        if dtype not in VALUE_DTYPES:
            raise ValueError(f"method {name}: value_dtype must be one of {sorted(VALUE_DTYPES)}, got {dtype!r}")
        return cls(name, str(m["codec"]), dict(m.get("params", {})), dtype, str(m.get("label", name)))

    def as_config(self) -> dict[str, Any]:
        """JSON-able description (part of a cell's config)."""
        return {"name": self.name, "codec": self.codec, "params": dict(self.params), "value_dtype": self.value_dtype}


@dataclass(frozen=True)
class Message:
    """One encoded message and what its bytes are made of."""

    data: bytes
    n_keys: int
    key_nbytes: int  # bytes spent on keys (flags included for delta-binary)

    @property
    def nbytes(self) -> int:
        """Total size on the wire."""
        return len(self.data)


class MessageCodec:
    """Encode ``(keys, values)`` of one worker into a :class:`Message` and back, for a :class:`MethodSpec`."""

    def __init__(self, method: MethodSpec, dim: int):
        self.method = method
        self.dim = int(dim)
        self.codec = get(method.codec, **dict(method.params))
        self.native = bool(getattr(type(self.codec), "sparse_native", False))
        self.dtype = VALUE_DTYPES[method.value_dtype]
        if not self.native and self.dim >= 2**31:
            raise ValueError(f"{method.name}: int32 keys cannot address {self.dim} features")

    def encode(self, keys: np.ndarray, values: np.ndarray) -> Message:
        """Encode sorted unique int64 ``keys`` and their float ``values``."""
        vals = torch.from_numpy(np.ascontiguousarray(values)).to(self.dtype)
        if self.native:
            k = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.int64))
            sparse = torch.sparse_coo_tensor(k[None, :], vals, (self.dim,), is_coalesced=True, check_invariants=False)
            payload = self.codec.encode(sparse)
            return Message(payload.to_bytes(), len(keys), native_key_nbytes(payload, len(keys)))
        header = _KV_HEADER.pack(KV_MAGIC, len(keys), self.dim)
        key_bytes = np.ascontiguousarray(keys, dtype="<i4").tobytes()
        payload = self.codec.encode(vals)
        return Message(header + key_bytes + payload.to_bytes(), len(keys), 4 * len(keys))

    def decode(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Parse a message into ``(keys int64, values float64)``.

        Raises:
            PayloadError: the bytes are not a message this method writes (``CorruptPayloadError``,
                or ``TruncatedPayloadError`` for a cut value payload).
        """
        if self.native:
            payload = Payload.from_bytes(data)
            with warnings.catch_warnings():  # torch's note on sparse invariant checks, once per process
                warnings.filterwarnings("ignore", message="Sparse invariant checks")
                out = self.codec.decode(payload).coalesce()
            return out.indices()[0].numpy().astype(np.int64, copy=False), out.values().to(torch.float64).numpy()
        if len(data) < _KV_HEADER.size:
            raise CorruptPayloadError("key-value message shorter than its header")
        magic, n, dim = _KV_HEADER.unpack_from(data)
        if magic != KV_MAGIC:
            raise CorruptPayloadError("not a GKV1 key-value message")
        if dim != self.dim:
            raise CorruptPayloadError(f"message key space {dim} differs from the model's {self.dim}")
        end = _KV_HEADER.size + 4 * n
        if len(data) < end:
            raise CorruptPayloadError(f"message too short for {n} keys")
        keys = np.frombuffer(data, dtype="<i4", count=n, offset=_KV_HEADER.size).astype(np.int64)
        if n and (keys.min() < 0 or keys.max() >= dim or np.any(np.diff(keys) <= 0)):
            raise CorruptPayloadError("keys out of range or not strictly ascending")
        payload = Payload.from_bytes(data[end:])
        vals = self.codec.decode(payload)
        if vals.numel() != n:
            raise CorruptPayloadError(f"{vals.numel()} values for {n} keys")
        return keys, vals.to(torch.float64).numpy()


#: SketchML's payload sections, as documented in ``compressors/codecs/sketchml/codec.py``:
#: meta, bucket_values, keys (delta-binary: 2-bit flags + delta bytes), tables.
SKETCHML_CODEC_ID = 40
SKETCHML_KEY_SECTION = 2


def native_key_nbytes(payload: Payload, n_keys: int) -> int:
    """Bytes a sparse-native codec's payload spends on keys (flags included), or -1 if unknown.

    For SketchML this is its delta-binary ``keys`` section (the paper's "bytes per key" counts the
    2-bit flag too: 1 byte + 2 bits = 1.25 bytes).
    """
    if payload.codec_id == SKETCHML_CODEC_ID and len(payload.sections) > SKETCHML_KEY_SECTION:
        return int(payload.sections[SKETCHML_KEY_SECTION].numel())
    return -1 if n_keys else 0


#: Keys of the warm-up message (at most; fewer in a smaller model). Large enough that a compiled
#: codec's kernels see more than one row and a tail (its rows are 16K values): Inductor specialises a
#: dimension of size 1, so a one-row warm-up left the multi-row graph to compile inside the first
#: timed encode (measured: ZipML-8's first KDD12-size encode 5.4 s against 0.05 s for the next).
WARM_UP_KEYS = (1 << 20) - 7


def warm_up(codec: MessageCodec) -> None:
    """One encode/decode of up to :data:`WARM_UP_KEYS` keys, so that lazy imports and first-call
    costs (compilation included) stay out of measured times."""
    keys = np.arange(0, min(codec.dim, WARM_UP_KEYS), dtype=np.int64)
    codec.decode(codec.encode(keys, np.linspace(-1e-3, 1e-3, keys.size)).data)


def uncompressed_nbytes(n_keys: int, dim: int) -> int:
    """Size of the Adam-double message for ``n_keys`` pairs, by building it (real bytes)."""
    codec = MessageCodec(MethodSpec("adam-double", "identity", {}, "float64"), dim)
    return codec.encode(np.arange(n_keys, dtype=np.int64), np.zeros(n_keys)).nbytes
