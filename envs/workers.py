"""Each worker's codecs: what to build (:class:`CodecSpec`), building and seeding them (:class:`WorkerCodecs`).

Randomness: every tensor key gets its own ``torch.Generator`` (per worker and device), passed to
``encode(..., generator=)``, so results do not depend on how DDP groups tensors into buckets or in
which order buckets arrive. For codecs whose workers must draw the *same* numbers (the
``all_reduce`` and ``rounds`` protocols: RandomK's coordinates, sketch hashes, PowerSGD's initial
``Q``) the generator is seeded from ``(codec seed, key)`` on every worker; for the others from
``(codec seed, rank, key)``, so workers' stochastic rounding is independent (as with one RNG per
process). The codec's own ``seed`` parameter is the same on every worker, so every worker can
decode every payload.

How a codec's gradients travel is its own declaration (``protocol``, see
:mod:`gcbench.compressors.base`): :func:`protocol_of` reads it, never the codec's name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..compressors import ErrorFeedback, families
from ..compressors.base import Codec
from ..compressors.errors import InvalidParameterError, UnsupportedInputError
from .errors import UnsupportedTopologyError

#: Protocols whose workers must draw the same random numbers (their payloads are summed).
SHARED_RANDOMNESS = ("all_reduce", "rounds")


@dataclass
class CodecSpec:
    """How to build a worker's codecs: a name (or a factory) plus parameters.

    Attributes:
        name: a codec registry name or a gradient-exchange method's
            (:func:`gcbench.compressors.families.build`); ignored when ``factory`` is given.
        params: codec parameters (override the registry entry's defaults).
        factory: ``factory(**params) -> Codec``, instead of the registry.
        error_feedback: wrap the codec in :class:`~gcbench.compressors.ErrorFeedback` (a registry
            entry that already applies error feedback is not wrapped twice).
        layer_params: per-tensor-key parameter overrides (L-GreCo's per-layer ranks/ratios).
    """

    name: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    factory: Callable[..., Any] | None = None
    error_feedback: bool = False
    layer_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is None and self.factory is None:
            raise InvalidParameterError("CodecSpec needs a registry name or a factory")

    @classmethod
    def of(
        cls,
        codec: "str | CodecSpec | Callable[..., Any]",
        params: Mapping[str, Any] | None = None,
        *,
        error_feedback: bool = False,
        layer_params: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> "CodecSpec":
        """The spec of ``codec`` (a registry or method name, a ready spec, which carries its own
        parameters, or a factory), checked (:meth:`check`) before anything trains with it.

        Raises:
            UnsupportedInputError: ``codec`` is none of the three (a TypeError).
            InvalidParameterError: ``codec`` is a ready spec and ``params``, ``error_feedback`` or
                ``layer_params`` are given too (the spec's own would silently win).
            UnknownCodecError, InvalidParameterError, UnsupportedTopologyError: what building it raises.
        """
        given = {"params": dict(params or {}), "error_feedback": error_feedback, "layer_params": dict(layer_params or {})}
        if isinstance(codec, CodecSpec):
            extra = [name for name, value in given.items() if value]
            if extra:
                raise InvalidParameterError(f"a CodecSpec carries its own params, error_feedback and layer_params; "
                                            f"got {', '.join(extra)} beside it: set them in the spec")
            spec = codec
        elif isinstance(codec, str):
            spec = cls(name=codec, **given)
        elif callable(codec):
            spec = cls(factory=codec, **given)
        else:
            raise UnsupportedInputError(f"codec must be a registry name, a CodecSpec or a factory, not {type(codec).__name__}")
        spec.check()
        return spec

    def check(self) -> None:
        """Build the codec once with the shared parameters and once with each layer's overrides
        (then drop them), so that an unknown name, a parameter out of range or error feedback on a
        method that keeps its own raises its typed error here, not in the first backward pass."""
        self.build(None)
        for key in self.layer_params:
            self.build(key)

    def params_for(self, key: str | None) -> dict[str, Any]:
        """The parameters used for tensor ``key`` (``params`` updated by ``layer_params[key]``)."""
        return {**self.params, **(self.layer_params.get(key, {}) if key is not None else {})}

    def build(self, key: str | None = None) -> Any:
        """A new codec for tensor ``key`` (an ErrorFeedback wrapper when ``error_feedback``).

        A gradient-exchange method that is not a codec (it keeps its own error accumulation) is
        never wrapped: asking for error feedback on it raises UnsupportedTopologyError.
        """
        params = self.params_for(key)
        codec = self.factory(**params) if self.factory is not None else families.build(self.name, **params)
        if not isinstance(codec, (Codec, ErrorFeedback)):
            if self.error_feedback:
                raise UnsupportedTopologyError(
                    f"{self.label} keeps its own error accumulation; error_feedback must be False"
                )
            return codec
        if self.error_feedback and not isinstance(codec, ErrorFeedback):
            codec = ErrorFeedback(codec)
        return codec

    @property
    def label(self) -> str:
        """Short human-readable description (for reports)."""
        base = self.name if self.factory is None else getattr(self.factory, "__name__", "factory")
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{base}({extra})" + ("+ef" if self.error_feedback else "")


def inner_codec(codec: Any) -> Any:
    """The codec under an error-feedback wrapper (or ``codec`` itself)."""
    return codec.codec if isinstance(codec, ErrorFeedback) else codec


def protocol_of(codec: Any) -> str:
    """How gradients encoded by ``codec`` are aggregated: the codec's own ``protocol`` declaration."""
    return str(inner_codec(codec).protocol)


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from ``parts`` (stable across processes and runs)."""
    digest = hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _params_label(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


class WorkerCodecs:
    """One worker's codecs and per-tensor generators.

    Codecs are built lazily per distinct parameter set (tensors sharing parameters share one codec
    instance; stateful codecs keep their state per ``key``, e.g. PowerSGD's warm starts).
    """

    def __init__(self, spec: CodecSpec, rank: int = 0) -> None:
        self.spec = spec
        self.rank = rank
        self._codecs: dict[str, Any] = {}
        self._generators: dict[tuple[str, str], torch.Generator] = {}
        self._pending_codec_state: dict[str, dict[str, torch.Tensor]] = {}
        self._pending_generators: dict[tuple[str, str], torch.Tensor] = {}

    def codec_for(self, key: str) -> Any:
        """The codec that encodes tensor ``key`` (built on first use)."""
        label = _params_label(self.spec.params_for(key))
        codec = self._codecs.get(label)
        if codec is None:
            codec = self.spec.build(key)
            pending = self._pending_codec_state.pop(label, None)
            if pending is not None:
                codec.load_state_dict(pending)
            self._codecs[label] = codec
        return codec

    def built_codec(self, params: Mapping[str, Any]) -> Any | None:
        """The codec already built for parameter set ``params`` (None when none was)."""
        return self._codecs.get(_params_label(params))

    def generator_for(self, key: str, device: torch.device, codec: Any) -> torch.Generator:
        """The generator for tensor ``key`` on ``device`` (see the module docstring for seeding)."""
        gk = (key, str(device))
        gen = self._generators.get(gk)
        if gen is None:
            gen = torch.Generator(device=device)
            base = int(getattr(inner_codec(codec), "seed", 0))
            parts = (base, key) if protocol_of(codec) in SHARED_RANDOMNESS else (base, self.rank, key)
            gen.manual_seed(derive_seed(*parts))
            pending = self._pending_generators.pop(gk, None)
            if pending is not None:
                gen.set_state(pending.cpu())  # a checkpoint loaded with map_location may hold it on a device
            self._generators[gk] = gen
        return gen

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume bit-exactly: codec states (residuals, warm starts) and generators."""
        generators = {f"{k}@{d}": st for (k, d), st in self._pending_generators.items()}
        generators.update({f"{k}@{d}": g.get_state() for (k, d), g in self._generators.items()})
        return {
            # state loaded but not yet claimed by a codec/generator is kept, not dropped
            "codecs": {**self._pending_codec_state, **{label: c.state_dict() for label, c in self._codecs.items()}},
            "generators": generators,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (applied lazily as codecs and generators are built)."""
        self._codecs.clear()
        self._generators.clear()
        self._pending_codec_state = {k: dict(v) for k, v in state.get("codecs", {}).items()}
        self._pending_generators = {}
        for name, st in state.get("generators", {}).items():
            key, _, dev = name.rpartition("@")
            self._pending_generators[(key, dev)] = st
