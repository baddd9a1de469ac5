"""The codec registry: names -> codec factories, and wire ids -> codec classes.

Adding a codec = one module in ``compressors/`` defining a :class:`~.base.Codec` subclass with a
unique ``codec_id``, plus one :class:`Entry` line in ``ENTRIES`` below. Everything else (the
parametrised tests, ``gcbench codecs``/``compare``, the asv suite, the DDP hook, the reproductions)
iterates this registry and picks the new codec up with no other edit.

Entries name their target as ``"module:attribute"`` (a Codec class or a factory function) and are
imported on first use, so listing the registry is cheap.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .base import Codec
from .errors import InvalidParameterError, UnknownCodecError


@dataclass(frozen=True)
class Entry:
    """One registry line.

    Attributes:
        name: what users pass to :func:`get`.
        target: ``"module:attr"`` within ``gcbench.compressors``: a Codec class or a factory.
        defaults: parameter values this entry fixes or defaults (a preset), overridable by ``get``.
        summary: one line for ``gcbench codecs``.
        error_feedback: the entry wraps the codec in :class:`~.error_feedback.ErrorFeedback`.
    """

    name: str
    target: str
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    error_feedback: bool = False

    def load(self) -> Callable[..., Codec]:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)


# fmt: off
ENTRIES: list[Entry] = [
    # --- lossless / cast ---------------------------------------------------------------------------
    Entry("identity", "codecs.identity:Identity", "no compression: the tensor's own bytes (lossless)"),
    Entry("fp16", "codecs.identity:Cast", "cast to IEEE float16", {"to": "float16"}),
    Entry("bf16", "codecs.identity:Cast", "cast to bfloat16", {"to": "bfloat16"}),
    # --- sparsification ----------------------------------------------------------------------------
    Entry("topk", "codecs.topk:TopK", "exact top-k by magnitude (torch.topk)", {"method": "exact"}),
    Entry("topk-sampled", "codecs.topk:TopK", "top-k by a sampled threshold, as in DGC", {"method": "sampled"}),
    Entry("randomk", "codecs.randomk:RandomK", "random-k with a shared seed (linear)"),
    Entry("dgc", "codecs.dgc:DGC", "Deep Gradient Compression: sampled threshold, momentum correction, masking"),
    # --- quantization ------------------------------------------------------------------------------
    Entry("qsgd", "codecs.qsgd:QSGD", "QSGD: s levels, bucketed norms, minimal-bit packing"),
    Entry("terngrad", "codecs.terngrad:TernGrad", "TernGrad: 2.5 sigma clipping, stochastic ternary, 2-bit packed"),
    Entry("signsgd", "codecs.sign:Sign", "signSGD: 1 bit per element", {"scale": "none"}),
    Entry("ef-signsgd", "codecs.sign:Sign", "EF-signSGD: 1 bit + mean |x| scale, with error feedback", {"scale": "mean_abs"}, error_feedback=True),
    Entry("zipml8", "codecs.zipml:ZipML", "ZipML-style uniform 8-bit fixed point, stochastic rounding", {"bits": 8}),
    Entry("zipml16", "codecs.zipml:ZipML", "ZipML-style uniform 16-bit fixed point, stochastic rounding", {"bits": 16}),
    # --- low rank ----------------------------------------------------------------------------------
    Entry("powersgd", "codecs.powersgd:PowerSGD", "PowerSGD: rank-r power iteration with warm start"),
    # --- seed codecs (SketchML, Sketched-SGD, 3LC) ---------------------------------------------------
    Entry("sketchml", "codecs.sketchml.codec:SketchML", "SketchML: quantile buckets + MinMaxSketch + delta-binary keys", {"preset": "paper"}),
    Entry("countsketch", "codecs.countsketch.codec:CountSketchCodec", "Count Sketch of the gradient, top-k unsketch (linear)"),
    Entry("3lc", "codecs.threelc.codec:ThreeLC", "3LC: 3-value quantization + error feedback, quartic and zero-run encoding", error_feedback=True),
]
# fmt: on

if len({e.name for e in ENTRIES}) != len(ENTRIES):  # pragma: no cover - guards edits to ENTRIES
    raise RuntimeError("duplicate codec names in the registry")


def names() -> list[str]:
    """Names of every registered codec, in registry order."""
    return [e.name for e in ENTRIES]


def _unknown_codecs(unknown: Sequence[str], also: Sequence[str] = ()) -> UnknownCodecError:
    """The one wording of an unknown codec name, whichever command or function meets it."""
    known = f"known: {', '.join(names())}" + (f"; exchange methods: {', '.join(also)}" if also else "")
    return UnknownCodecError(f"unknown codec{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; {known}")


def entry(name: str) -> Entry:
    """The registry line for ``name`` (looked up in ``ENTRIES`` itself, so an entry added there is found)."""
    for e in ENTRIES:
        if e.name == name:
            return e
    raise _unknown_codecs([name])


def check_names(candidates: Iterable[str], *, also: Sequence[str] = ()) -> None:
    """Raise :class:`UnknownCodecError` naming every one of ``candidates`` that is neither a registered
    codec nor one of ``also`` (the exchange methods a command takes beside the codecs); the message
    lists what is known, in registry order."""
    known = set(names()) | set(also)
    unknown = [n for n in dict.fromkeys(candidates) if n not in known]
    if unknown:
        raise _unknown_codecs(unknown, also)


def parameter_names(factory: Callable[..., Any]) -> list[str] | None:
    """The parameters ``factory`` (a codec class or a factory) takes by name, in its signature's order;
    None when it takes any name (``**kwargs``) or its signature cannot be read."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def check_param_names(name: str, factory: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidParameterError` when ``params`` holds a name ``factory`` does not take: the
    message names the codec ``name``, the unknown parameter(s) and every valid one."""
    valid = parameter_names(factory)
    if valid is None:
        return
    unknown = [k for k in params if k not in valid]
    if unknown:
        raise InvalidParameterError(
            f"{name}: unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"valid parameters: {', '.join(valid) if valid else 'none'}"
        )


def get(name: str, **params: Any) -> Codec:
    """Build the codec registered as ``name`` with ``params`` overriding the entry's defaults.

    Raises:
        UnknownCodecError: no such name.
        InvalidParameterError: an unknown parameter name or a bad value.
    """
    e = entry(name)
    factory = e.load()
    check_param_names(name, factory, params)
    merged = {**e.defaults, **params}
    try:
        codec = factory(**merged)
    except TypeError as err:  # a missing argument, or a name a factory with **kwargs refuses
        raise InvalidParameterError(f"{name}: {err}") from None
    codec.check_params_travel()
    if e.error_feedback:
        from .error_feedback import ErrorFeedback

        return ErrorFeedback(codec)  # type: ignore[return-value]
    return codec


_CLASSES: dict[int, type[Codec]] = {}


def classes() -> dict[int, type[Codec]]:
    """Every registered codec class by wire id (imports every entry)."""
    for e in ENTRIES:
        _remember(e)
    return dict(_CLASSES)


def _remember(e: Entry) -> None:
    obj = e.load()
    if isinstance(obj, type) and issubclass(obj, Codec):
        other = _CLASSES.setdefault(obj.codec_id, obj)
        if other is not obj:
            raise RuntimeError(f"codec id {obj.codec_id} used by {other.__name__} and {obj.__name__}")


def class_for_id(codec_id: int) -> type[Codec]:
    """The codec class with wire id ``codec_id`` (imports entries only until it is found)."""
    for e in ENTRIES:
        if codec_id in _CLASSES:
            break
        _remember(e)
    try:
        return _CLASSES[codec_id]
    except KeyError:
        raise UnknownCodecError(f"no codec has wire id {codec_id}") from None


def decode(
    payload: "Payload", *, device: Any = None, max_numel: int | None = None, out: Any = None  # noqa: F821
) -> Any:
    """Decode any payload on its own: the codec is rebuilt from the payload's id and parameters.

    ``max_numel`` is the largest tensor the caller accepts, ``out`` a ready tensor to write the
    result into (see :meth:`Codec.decode`).
    """
    from .errors import CorruptPayloadError, PayloadMismatchError
    from .wire.payload import Payload

    if not isinstance(payload, Payload):  # wire bytes go through Payload.from_bytes first
        raise PayloadMismatchError(
            f"decode takes a Payload (parse wire bytes with Payload.from_bytes), not {type(payload).__name__}"
        )
    cls = class_for_id(payload.codec_id)
    try:
        codec = cls(**payload.params)
    except (TypeError, ValueError, OverflowError) as err:  # InvalidParameterError is a ValueError
        raise CorruptPayloadError(f"payload parameters do not build a {cls.__name__}: {err}") from None
    return codec.decode(payload, device=device, max_numel=max_numel, out=out)
