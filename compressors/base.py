"""The codec contract every gcbench compressor implements.

A codec is a *pure* transformation ``tensor -> Payload -> tensor`` that knows nothing of networks:

* :meth:`Codec.encode` validates the input (dtype, finiteness, layout), flattens it and hands a
  1-D contiguous tensor to the subclass's :meth:`Codec._encode`, which returns the payload sections.
* :meth:`Codec.decode` checks that the payload belongs to this codec, hands the sections to
  :meth:`Codec._decode`, and restores the original shape, dtype and layout.

Subclasses are dataclasses: their init fields are the codec parameters (int, float, bool or str),
validated in ``__post_init__`` and written into every payload header so a payload can be decoded
on its own (:func:`gcbench.compressors.decode`). Class attributes declare properties the tests,
the DDP hook and the reproductions rely on:

* ``linear``: payloads of several workers can be summed section-wise (so ``all_reduce`` works).
* ``stochastic``: uses random numbers; they come from an explicit seed or generator only.
* ``reproducible``: same parameters and seed, same bytes (True for every codec but SketchML with
  a DataSketches quantile sketch, whose compaction coins the Python binding cannot seed).
* ``elementwise``: encoding works element by element (no per-tensor state, no random numbers).
* ``stateful``: keeps per-tensor state (keyed by ``key=``), e.g. PowerSGD's warm start.
* ``unbiased``: ``E[decode(encode(x))] = x``.
* ``contractive``: ``||decode(encode(x)) - x|| <= ||x||``.
* ``stages``: the pipeline's steps, each lossless or not.
* ``protocol``: how the execution layer (``gcbench.envs``) moves the codec's gradients between
  workers: ``"all_reduce"`` (payloads summed; what ``linear`` codecs get by default),
  ``"all_gather"`` (serialized payloads exchanged; everyone else's default) or ``"rounds"`` (the
  codec runs its own rounds of all-reduces through a classmethod ``run_rounds``, as PowerSGD's two
  factor all-reduces do). The environment reads this declaration, never the codec's name.

Policies on odd input, shared by every codec:

* integer, bool and complex tensors, meta tensors and tensors of more than 16 dimensions (the
  payload's limit) raise :class:`UnsupportedInputError`, as does a ``decode`` device that is not a
  device, is meta, or is not present;
* float16, bfloat16, float32 and float64 are accepted; ``decode`` returns the input dtype;
* NaN or Inf raise :class:`NonFiniteGradientError` before any state is touched;
* finite input gives finite payloads, state and decoded values, or a typed error before any state
  changes (the *finite-input policy*): codecs compute in float32 (float64 for float64 input);
  narrowing casts (to a float16/bfloat16 section, back to the input dtype on decode) saturate at
  the target's largest finite value (:func:`~.numerics.saturating_cast`); an overflow of the working precision
  itself (a momentum or residual sum, a matrix product, a sketch bucket) raises
  :class:`NumericOverflowError` (a :class:`NonFiniteGradientError`). :meth:`Codec.encode` checks
  every float section it returns, and restores the generator it drew from when it raises;
* decode refuses a payload whose declared shape exceeds the receiver's ``max_numel`` (default
  :data:`~gcbench.compressors.wire.payload.DEFAULT_MAX_NUMEL`; int64 range for a sparse-native codec's sparse COO result)
  with :class:`PayloadLimitError` before allocating anything,
  and a payload that decodes to NaN or Inf (no encoder writes one) with :class:`CorruptPayloadError`;
* empty tensors encode to a payload with no sections and decode to an empty tensor of the same
  shape; 0-d tensors are treated as one element;
* non-contiguous views are copied to contiguous memory first;
* sparse COO tensors are densified for dense codecs and decoded back to sparse COO; codecs with
  ``sparse_native = True`` receive the sorted flat keys and values instead. A hybrid sparse tensor
  (``dense_dim() > 0``), or one standing for more than
  :data:`~gcbench.compressors.wire.payload.DEFAULT_MAX_NUMEL` elements for a codec that densifies it,
  raises :class:`UnsupportedInputError` before anything is allocated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import torch

from .kernels.workspace import fresh, scratch, widening
from .errors import (
    CorruptPayloadError,
    GCBenchError,
    InvalidParameterError,
    PayloadMismatchError,
    StateError,
    UnsupportedInputError,
)
from .numerics import all_finite, check_finite, ensure_finite, nonzero_positions, saturating_cast
from .wire.payload import DEFAULT_MAX_NUMEL, MAX_NDIM, MAX_SPARSE_NUMEL, Payload, ParamValue, check_shape

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Stage(NamedTuple):
    """One step of a codec's pipeline, e.g. ``Stage("2-bit packing", lossless=True)``."""

    name: str
    lossless: bool


class SparseInput(NamedTuple):
    """What a ``sparse_native`` codec receives: sorted unique flat keys and their values."""

    keys: torch.Tensor  # int64, sorted ascending, unique
    values: torch.Tensor  # same length, input dtype
    numel: int  # size of the flat key space


def validate_input(tensor: object, who: str = "codec", *, max_sparse_numel: int = DEFAULT_MAX_NUMEL) -> None:
    """Raise :class:`UnsupportedInputError` unless ``tensor`` is a dense or sparse COO float tensor
    holding values (not on the meta device) with at most ``MAX_NDIM`` dimensions (what a payload carries).

    A sparse COO tensor must have scalar values (``dense_dim() == 0``) and a shape of at most
    ``max_sparse_numel`` elements: what densifying it may allocate (default
    :data:`~gcbench.compressors.wire.payload.DEFAULT_MAX_NUMEL`, the receiver's default limit), checked
    before anything is allocated."""
    if not isinstance(tensor, torch.Tensor):
        raise UnsupportedInputError(f"{who} encodes a torch.Tensor, not {type(tensor).__name__}")
    if tensor.dtype not in FLOAT_DTYPES:
        raise UnsupportedInputError(
            f"{who} encodes floating tensors ({', '.join(map(str, FLOAT_DTYPES))}), not {tensor.dtype}"
        )
    if tensor.layout not in (torch.strided, torch.sparse_coo):
        raise UnsupportedInputError(f"layout {tensor.layout} is not supported (dense or sparse COO only)")
    if tensor.device.type == "meta":
        raise UnsupportedInputError(f"{who} encodes values; a meta tensor has none")
    if tensor.dim() > MAX_NDIM:  # refused before any state changes: its payload could not be sent
        raise UnsupportedInputError(f"{who}: a payload carries at most {MAX_NDIM} dimensions, got {tensor.dim()}")
    if tensor.layout == torch.sparse_coo:
        if tensor.dense_dim() > 0:
            raise UnsupportedInputError(
                f"{who} takes sparse COO tensors with scalar values; this hybrid one has {tensor.dense_dim()} "
                "dense dimension(s): pass tensor.to_dense(), or tensor.to_dense().to_sparse()"
            )
        numel = math.prod(tensor.shape)
        if numel > max_sparse_numel:
            raise UnsupportedInputError(
                f"{who}: this sparse COO tensor stands for {numel} elements, more than the {max_sparse_numel} "
                "it may densify; encode it with a sparse-native codec, or in parts"
            )


def check_call(key: object, generator: object, who: str = "codec") -> None:
    """Raise :class:`UnsupportedInputError` unless ``key`` is None or hashable (it names a tensor's state,
    e.g. a parameter name) and ``generator`` is None or a ``torch.Generator``: checked before any state
    is read or changed."""
    try:
        hash(key)
    except TypeError:
        raise UnsupportedInputError(f"{who}: key names a tensor (e.g. its parameter name) and must be hashable, "
                                    f"got {type(key).__name__}") from None
    if generator is not None and not isinstance(generator, torch.Generator):
        raise UnsupportedInputError(f"{who}: generator must be a torch.Generator or None, got {type(generator).__name__}")


def state_entries(state: object, who: str = "codec") -> Mapping[str, torch.Tensor]:
    """``state`` as a ``load_state_dict`` takes it: a mapping of str keys to tensors, else :class:`StateError`
    (before anything is restored)."""
    if not isinstance(state, Mapping):
        raise StateError(f"{who}: a state dict is a mapping of names to tensors, got {type(state).__name__}")
    bad = [k for k, t in state.items() if not isinstance(k, str) or not isinstance(t, torch.Tensor)]
    if bad:
        raise StateError(f"{who}: a state dict maps names (str) to tensors; not so for {bad[:3]!r}")
    return state


def _strictly_increasing(keys: torch.Tensor) -> bool:
    """Whether 1-D ``keys`` strictly increase (on the CPU by numpy's compare: several times faster)."""
    k = keys.numpy() if keys.device.type == "cpu" and not keys.requires_grad else keys
    return not bool((k[1:] <= k[:-1]).any())


@functools.cache
def _param_names(cls: type) -> tuple[str, ...]:
    """The names of a codec class's parameters (its ``init`` fields), looked up once per class:
    ``dataclasses.fields`` walks every field on each call, and :attr:`Codec.params` is read on every
    encode and decode."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


@dataclass(eq=False)
class Codec:
    """Base class of every gcbench codec. See the module docstring for the contract."""

    codec_id: ClassVar[int] = -1
    linear: ClassVar[bool] = False
    stochastic: ClassVar[bool] = False
    stateful: ClassVar[bool] = False
    unbiased: ClassVar[bool] = False
    contractive: ClassVar[bool] = False
    sparse_native: ClassVar[bool] = False
    stages: ClassVar[tuple[Stage, ...]] = ()
    #: Same parameters and seed give the same bytes. Only a codec built on a library whose own
    #: randomness cannot be seeded (SketchML's DataSketches quantile sketches) says False.
    reproducible: ClassVar[bool] = True
    #: For linear codecs: indexes of the sections that are summed across workers (None = all).
    #: The other sections (a shared seed, say) must be identical on every worker.
    summed_sections: ClassVar[tuple[int, ...] | None] = None
    #: Each output element depends on its input element only, with no per-tensor state or random
    #: numbers: encoding a concatenation gives the concatenation of the encodings. The DDP hook
    #: then encodes, reduces and decodes a whole bucket at once (:mod:`gcbench.envs.ddp_hook`).
    elementwise: ClassVar[bool] = False
    #: Paper the codec implements, cited in ``gcbench codecs``.
    reference: ClassVar[str] = ""
    #: Why compiled mode (:mod:`~gcbench.compressors.kernels.core`) runs this codec's eager code, for ``gcbench bench``'s row;
    #: empty for codecs with a kernel, or that have not said.
    no_kernel_reason: ClassVar[str] = ""
    #: ``_decode`` validates the payload's scale (finite) and maps every code to ``+-scale`` or 0,
    #: so its output is finite by construction and :meth:`decode` skips its own scan of the result
    #: (one pass fewer; ``python -m gcbench.commands.fuzz`` and ``tests/test_hostile_payloads.py``
    #: check the claim).
    decodes_finite: ClassVar[bool] = False
    #: ``_encode`` returns only finite float sections (it checks them itself, or they are finite by
    #: construction), so :meth:`encode` skips its own scan of them (one pass fewer).
    encodes_finite: ClassVar[bool] = False
    #: The codec implements :meth:`_decode_into`: ``decode(payload, out=buf)`` of a float32 payload
    #: writes the values straight into ``buf`` instead of a fresh tensor copied over.
    decodes_into: ClassVar[bool] = False
    #: With ``decodes_into``: :meth:`_decode_into` also writes into an ``out`` of the payload's own
    #: dtype (16-bit or float64), the bits of :meth:`_decode`'s values cast (saturating) to it, with
    #: no float32 tensor between (codecs that carry values as they are: the sparse ones, identity).
    decodes_into_own_dtype: ClassVar[bool] = False
    #: The payload's one section is the input itself, unchanged, and decodes to itself (the
    #: identity): a protocol may send the tensor as it is and check the finiteness of the sum it
    #: receives instead of each worker's input (:func:`gcbench.envs.protocols.all_reduce.run_fused`).
    passthrough: ClassVar[bool] = False
    #: How gradients encoded by this codec travel (see the module docstring); a subclass that does
    #: not set it gets ``"all_reduce"`` when ``linear``, else ``"all_gather"``.
    protocol: ClassVar[str] = "all_gather"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "protocol" not in cls.__dict__ and cls.protocol in ("all_reduce", "all_gather"):
            cls.protocol = "all_reduce" if cls.linear else "all_gather"

    _generators: dict = field(default_factory=dict, init=False, repr=False)

    # -- parameters --------------------------------------------------------------------------------

    @property
    def params(self) -> dict[str, ParamValue]:
        """The codec's parameters, as written into every payload header."""
        return {name: getattr(self, name) for name in _param_names(type(self))}

    @classmethod
    def param_specs(cls) -> list[tuple[str, Any, Any]]:
        """``(name, type annotation, default)`` of each parameter, for docs and the CLI."""
        return [(f.name, f.type, f.default) for f in dataclasses.fields(cls) if f.init]

    @property
    def lossless(self) -> bool:
        """True when every stage is lossless (decode(encode(x)) == x exactly)."""
        return all(s.lossless for s in self.stages)

    def check_params_travel(self) -> None:
        """Raise :class:`InvalidParameterError` unless every parameter fits its wire record.

        Ints must be int64 and strings at most 65,535 UTF-8 bytes (see ``compressors/wire/payload.py``).
        :meth:`encode` and ``registry.get`` call it, so an out-of-range value fails before encoding.
        """
        for name, value in self.params.items():
            if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 63:
                raise InvalidParameterError(f"{type(self).__name__}: {name}={value} does not fit an int64")
            if isinstance(value, str) and len(value.encode("utf-8", "surrogatepass")) > 0xFFFF:
                raise InvalidParameterError(f"{type(self).__name__}: {name} is longer than 65,535 bytes")

    def _require(self, ok: bool, message: str) -> None:
        """Raise :class:`InvalidParameterError` unless ``ok`` (for ``__post_init__`` checks)."""
        if not ok:
            raise InvalidParameterError(f"{type(self).__name__}: {message}")

    # -- randomness --------------------------------------------------------------------------------

    def generator(self, device: torch.device) -> torch.Generator:
        """The codec's own generator for ``device``, seeded from its ``seed`` parameter: two codecs built
        with the same seed produce the same sequence of payloads (:meth:`state_dict` saves where it stands)."""
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(int(getattr(self, "seed", 0)))
        return self._generators[key]

    # -- state -------------------------------------------------------------------------------------

    def reset_state(self) -> None:
        """Forget per-tensor state and restart the random sequence (no-op for stateless codecs)."""
        self._generators.clear()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Per-tensor state and the codec's own generators (``rng/<device>``) as a flat ``{name: tensor}``
        dict, for checkpoints: a codec that loads it encodes the next input to the bytes this one would."""
        return {f"rng/{d}": g.get_state() for d, g in self._generators.items()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore state saved by :meth:`state_dict` (:class:`StateError` if a generator's does not fit)."""
        state = state_entries(state, type(self).__name__)
        try:
            gens = {k[4:]: torch.Generator(device=k[4:]).set_state(t.cpu()) for k, t in state.items() if k.startswith("rng/")}
        except (RuntimeError, TypeError, ValueError) as err:
            raise StateError(f"cannot restore the codec's generators: {err}") from None
        self._generators.clear()
        self._generators.update(gens)

    # -- the contract ------------------------------------------------------------------------------

    def encode(
        self,
        tensor: torch.Tensor,
        *,
        key: str | None = None,
        generator: torch.Generator | None = None,
    ) -> Payload:
        """Encode ``tensor``.

        Args:
            tensor: a float16/bfloat16/float32/float64 tensor of any shape, dense or sparse COO.
            key: names the tensor for stateful codecs (e.g. the parameter name); ignored otherwise.
            generator: random source for stochastic codecs; defaults to the codec's own, seeded
                from its ``seed`` parameter.
        """
        check_call(key, generator, type(self).__name__)
        validate_input(
            tensor, type(self).__name__, max_sparse_numel=MAX_SPARSE_NUMEL if self.sparse_native else DEFAULT_MAX_NUMEL
        )
        self.check_params_travel()
        sparse = tensor.layout == torch.sparse_coo
        shape = tuple(tensor.shape)
        x = tensor.detach()
        if sparse:
            x = x.coalesce()
            check_finite(x.values())
        elif not self.checks_finite(x):
            check_finite(x)
        if generator is None and self.stochastic:
            generator = self.generator(x.device)
        # An error leaves the random sequence where it was (the finite-input policy: no state change).
        rng_state = generator.get_state() if generator is not None else None
        try:
            checked = None  # the input itself, already checked above
            if math.prod(shape) == 0:
                sections: Sequence[torch.Tensor] = ()
            elif self.sparse_native:
                sections = self._encode_sparse(_sparse_input(x, sparse), key=key, generator=generator)
            else:
                flat = (x.to_dense() if sparse else x).reshape(-1).contiguous()
                checked = flat.data_ptr()
                sections = self._encode(flat, key=key, generator=generator)
            if not self.encodes_finite:
                ensure_finite(*(s for s in sections if s.data_ptr() != checked), what=f"{type(self).__name__}'s payload")
        except GCBenchError:
            if rng_state is not None:
                generator.set_state(rng_state)
            raise
        return Payload(type(self).codec_id, tensor.dtype, shape, self.params, tuple(sections), sparse)

    def payload_of(self, tensor: torch.Tensor, sections: Sequence[torch.Tensor]) -> Payload:
        """The payload :meth:`encode` returns for a dense ``tensor`` whose sections were computed
        elsewhere (a fused error-feedback pass, :mod:`.error_feedback`): the same parameter and
        section checks, the same header."""
        self.check_params_travel()
        ensure_finite(*sections, what=f"{type(self).__name__}'s payload")
        return Payload(type(self).codec_id, tensor.dtype, tuple(tensor.shape), self.params, tuple(sections), False)

    def decode(
        self,
        payload: Payload,
        *,
        device: torch.device | str | None = None,
        max_numel: int | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decode ``payload`` into a tensor of its original shape, dtype and layout.

        Args:
            payload: what :meth:`encode` returned, or :meth:`Payload.from_bytes` parsed.
            device: where the result goes (default: where the sections are, or ``out``'s device).
            max_numel: the largest tensor the caller accepts (the receiver knows its own tensor's
                size); default :data:`~gcbench.compressors.wire.payload.DEFAULT_MAX_NUMEL` (2**28 elements), or int64
                range for a sparse COO result of a ``sparse_native`` codec (its cost follows the
                keys it carries). Checked on the declared shape before anything is allocated.
            out: a ready dense contiguous tensor of the payload's shape and dtype (a DDP bucket, a
                gradient) to write the result into, which is returned; the same values as without
                it. A fresh result costs the page faults of new memory (``x.clone()`` is 4-8x a
                ``copy_`` into a ready buffer on the CPU), which ``out`` avoids for codecs
                with ``decodes_into``. If decode raises, ``out`` holds unspecified values.

        Raises:
            PayloadMismatchError: ``payload`` is not a Payload, or was written by another codec or
                other parameters.
            PayloadLimitError: the declared shape has a dimension or element count over ``max_numel``.
            CorruptPayloadError: the sections do not have the sizes this codec writes, or decode to
                values no encoder writes (NaN, Inf).
            UnsupportedInputError: ``out`` is not a dense contiguous tensor of the payload's shape,
                dtype and device, requires grad, is an inference tensor outside inference mode,
                shares memory with the payload, or the payload decodes to sparse COO; ``device`` is
                not a device, is ``meta``, or is not available here.
        """
        if not isinstance(payload, Payload):
            raise PayloadMismatchError(f"decode takes a Payload, not {type(payload).__name__}")
        if payload.codec_id != type(self).codec_id:
            raise PayloadMismatchError(
                f"payload was written by codec id {payload.codec_id}; {type(self).__name__} has id {type(self).codec_id}"
            )
        if dict(payload.params) != self.params:
            raise PayloadMismatchError(f"payload parameters {dict(payload.params)} differ from this codec's {self.params}")
        if max_numel is None:
            max_numel = MAX_SPARSE_NUMEL if self.sparse_native and payload.sparse else DEFAULT_MAX_NUMEL
        n = check_shape(payload.shape, max_numel)
        asked = _decode_device(device)
        dev = asked if asked is not None else payload.device
        if out is not None:
            dev = _check_out(out, payload, asked)
        _check_usable(dev, payload.device)
        sections = tuple(s.to(dev) for s in payload.sections)
        if n == 0:
            if sections:
                raise CorruptPayloadError("an empty tensor's payload has no sections")
            if out is not None:
                return out
            empty = torch.zeros(payload.shape, dtype=payload.dtype, device=dev)
            return empty.to_sparse() if payload.sparse else empty
        if self.sparse_native:
            keys, values = self._decode_sparse(sections, n)
            if keys.shape != values.shape or keys.dim() != 1:
                raise CorruptPayloadError("decoded keys and values differ in length")
            # The base class checks what the sparse tensor below relies on, whatever the codec did:
            # keys in range and strictly increasing (so the COO tensor really is coalesced).
            if keys.numel() and (int(keys[0]) < 0 or int(keys[-1]) >= n or not _strictly_increasing(keys)):
                raise CorruptPayloadError("decoded keys are out of range or not strictly increasing")
            if not all_finite(values):
                raise CorruptPayloadError(f"{type(self).__name__} payload decodes to non-finite values")
            values = saturating_cast(values, payload.dtype)
            if payload.sparse:
                # flat keys -> COO indices (torch.unravel_index would import half of torch on first use)
                # (a 1-D tensor's keys are its indices: checked in range above, no division)
                strides = _contiguous_strides(payload.shape)
                if len(payload.shape) == 1:
                    idx = keys.unsqueeze(0)
                elif payload.shape:
                    idx = torch.stack(
                        [torch.div(keys, s, rounding_mode="floor") % d for s, d in zip(strides, payload.shape)]
                    )
                else:
                    idx = keys.new_zeros((0, keys.numel()))
                return torch.sparse_coo_tensor(
                    idx, values, payload.shape, is_coalesced=True, check_invariants=False
                )
            flat = (out.view(-1) if out is not None else fresh(n, payload.dtype, dev)).zero_()
            flat.index_copy_(0, keys.to(torch.int64), values.to(flat.dtype))  # 2.4x faster than flat[keys] = values
            return out if out is not None else flat.reshape(payload.shape)
        # float32 is the working precision of a float32 payload: no cast, the codec writes the final
        # values straight into the caller's buffer, or into a new one (:func:`.kernels.workspace.fresh`)
        own = payload.dtype == torch.float32 or self.decodes_into_own_dtype
        into = self.decodes_into and own and (out is not None or not payload.sparse)
        if into:
            flat = out.view(-1) if out is not None else fresh(n, payload.dtype, dev)
            self._decode_into(sections, n, flat)
        elif self.decodes_into and out is not None and widening(payload.dtype, n):
            # a 16-bit payload into the caller's buffer: its float32 working values go into this
            # thread's buffer (:func:`.kernels.workspace.scratch`, held until ``release``: the page
            # faults of a new one cost about four times the decode), then are cast into ``out``.
            # Only with ``out``: the caller already holds a tensor of the declared size, so nothing
            # of a size only the payload declares is allocated before the codec has checked its
            # sections.
            flat = scratch("decode.working", n, torch.float32, dev)
            self._decode_into(sections, n, flat)
        else:
            flat = self._decode(sections, n)
        if flat.shape != (n,):
            raise CorruptPayloadError(f"{type(self).__name__} decoded {tuple(flat.shape)} values, expected ({n},)")
        if not self.decodes_finite and not all_finite(flat):
            raise CorruptPayloadError(
                f"{type(self).__name__} payload decodes to non-finite values (no encoder writes them)"
            )
        if into:
            return out if out is not None else flat.view(payload.shape)
        if out is not None:  # cast and clamped in the caller's buffer: no full-size temporary
            return saturating_cast(flat.view(payload.shape), payload.dtype, out=out)
        if flat.dtype == payload.dtype:
            result = flat.reshape(payload.shape)
        else:  # cast and clamped into new memory (:func:`.kernels.workspace.fresh`)
            result = saturating_cast(flat, payload.dtype, out=fresh(n, payload.dtype, flat.device)).view(payload.shape)
        return result.to_sparse() if payload.sparse else result

    def combine(self, payloads: Sequence[Payload]) -> Payload:
        """Aggregate payloads of several workers for a ``linear`` codec: what all_reduce computes.

        The payload is linear: ``combine([encode(a), encode(b)])`` equals ``encode(a + b)`` up to
        floating-point rounding (with identical parameters and seeds on every worker). Decoding may
        be non-linear (Count Sketch's median and top-k), so it runs once, on the sum.

        Raises:
            PayloadMismatchError: the codec is not linear, an item is not a :class:`Payload` of this
                codec and its parameters, or the payloads differ in shape, dtype or any section's
                dtype or length.
        """
        if not self.linear:
            raise PayloadMismatchError(f"{type(self).__name__} is not linear: its payloads cannot be summed")
        if isinstance(payloads, Payload):
            raise PayloadMismatchError("combine takes a sequence of payloads, not one Payload")
        try:
            payloads = list(payloads)
        except TypeError:
            raise PayloadMismatchError(f"combine takes a sequence of payloads, not {type(payloads).__name__}") from None
        if not payloads:
            raise PayloadMismatchError("combine needs at least one payload")
        for k, p in enumerate(payloads):
            if not isinstance(p, Payload):
                raise PayloadMismatchError(f"combine takes Payloads; item {k} is a {type(p).__name__}")
        first = payloads[0]
        if first.codec_id != type(self).codec_id or dict(first.params) != self.params:
            raise PayloadMismatchError(
                f"payload of codec id {first.codec_id} with parameters {dict(first.params)}; "
                f"{type(self).__name__} (id {type(self).codec_id}) has {self.params}"
            )
        for p in payloads[1:]:
            if (p.codec_id, p.shape, p.dtype, dict(p.params), len(p.sections)) != (
                first.codec_id, first.shape, first.dtype, dict(first.params), len(first.sections)
            ):
                raise PayloadMismatchError("payloads of different codecs, shapes or parameters cannot be combined")
            for i, (a, b) in enumerate(zip(first.sections, p.sections)):
                if a.dtype != b.dtype or a.shape != b.shape:
                    raise PayloadMismatchError(
                        f"section {i} is {tuple(b.shape)} {b.dtype} in one payload and {tuple(a.shape)} {a.dtype} in the first"
                    )
        summed = range(len(first.sections)) if self.summed_sections is None else self.summed_sections
        out = []
        for i, sec in enumerate(first.sections):
            if i in summed:
                total = sec.clone()
                for p in payloads[1:]:
                    total += p.sections[i]
                out.append(total)
            else:
                for p in payloads[1:]:
                    if not torch.equal(p.sections[i], sec):
                        raise PayloadMismatchError(f"shared section {i} differs across workers (different seeds?)")
                out.append(sec)
        return Payload(first.codec_id, first.dtype, first.shape, first.params, tuple(out), first.sparse)

    def roundtrip(self, tensor: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """``decode(encode(tensor))`` - convenient in tests and error measurements."""
        return self.decode(self.encode(tensor, **kwargs))

    # -- what subclasses implement -----------------------------------------------------------------

    def checks_finite(self, x: torch.Tensor) -> bool:
        """Whether :meth:`_encode` itself raises :class:`NonFiniteGradientError` (via
        :func:`~.numerics.raise_if_non_finite`, before any state or random draw changes) for this dense input,
        so :meth:`encode` skips its own scan: a codec that reads the input for its scale anyway
        (a min/max) or in a compiled kernel folds the check into that pass.
        Default False: :meth:`encode` checks."""
        return False

    def _encode(
        self, x: torch.Tensor, *, key: str | None, generator: torch.Generator | None
    ) -> Sequence[torch.Tensor]:
        """Encode a non-empty 1-D contiguous float tensor into payload sections."""
        raise NotImplementedError

    def _decode(self, sections: tuple[torch.Tensor, ...], numel: int) -> torch.Tensor:
        """Rebuild the 1-D tensor of ``numel`` values from validated-by-you sections.

        Default for codecs with ``decodes_into``: a new float32 tensor (on the sections' device)
        filled by :meth:`_decode_into`, so both paths give the same bits by construction."""
        if not self.decodes_into:
            raise NotImplementedError
        out = fresh(numel, torch.float32, sections[0].device if sections else None)
        self._decode_into(sections, numel, out)
        return out

    def _decode_into(self, sections: tuple[torch.Tensor, ...], numel: int, out: torch.Tensor) -> None:
        """For codecs with ``decodes_into``: write what :meth:`_decode` returns, bit for bit, into
        the 1-D contiguous float32 tensor ``out`` of ``numel`` elements (same section checks); with
        ``decodes_into_own_dtype``, ``out`` may also be of the payload's dtype, which gets those
        values cast as :func:`~.numerics.saturating_cast` casts them."""
        raise NotImplementedError

    def _encode_sparse(
        self, sparse: SparseInput, *, key: str | None, generator: torch.Generator | None
    ) -> Sequence[torch.Tensor]:
        """For ``sparse_native`` codecs: encode sorted keys and values into sections."""
        raise NotImplementedError

    def _decode_sparse(self, sections: tuple[torch.Tensor, ...], numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For ``sparse_native`` codecs: rebuild ``(keys, values)``."""
        raise NotImplementedError


def _sparse_input(x: torch.Tensor, sparse: bool) -> SparseInput:
    """Sorted flat keys and values of a coalesced sparse COO tensor or of a dense tensor's non-zeros."""
    numel = math.prod(x.shape)
    if sparse:
        idx = x.indices()
        if x.dim() == 0:
            keys = torch.zeros(idx.shape[1], dtype=torch.int64, device=x.device)
        elif x.dim() == 1:  # the flat keys are the indices: a view, no int64 copy (nor its temporaries)
            keys = idx[0]
        else:
            strides = torch.tensor(_contiguous_strides(x.shape), dtype=torch.int64, device=x.device)
            keys = (idx * strides[:, None]).sum(0)
        values = x.values().reshape(-1)
        # A coalesced COO tensor is sorted lexicographically, i.e. by flat key: sort only if not.
        if keys.numel() > 1 and bool((keys[1:] < keys[:-1]).any()):
            order = torch.argsort(keys)
            keys, values = keys[order], values[order]
        return SparseInput(keys, values, numel)
    flat = x.reshape(-1)
    keys = nonzero_positions(flat)
    return SparseInput(keys, flat.index_select(0, keys), numel)  # 6x faster than flat[keys] on the CPU


def _check_out(out: object, payload: Payload, device: torch.device | None) -> torch.device:
    """Validate ``decode``'s ``out`` against the payload; return the device the result goes to."""
    if not isinstance(out, torch.Tensor):
        raise UnsupportedInputError(f"out must be a torch.Tensor, not {type(out).__name__}")
    if out.requires_grad:
        raise UnsupportedInputError("out must not require grad: decode writes into it in place, outside autograd")
    if out.is_inference() and not torch.is_inference_mode_enabled():
        raise UnsupportedInputError("out is an inference tensor: decode can write into it only inside torch.inference_mode")
    if payload.sparse:
        raise UnsupportedInputError("out= takes a dense tensor; this payload decodes to a sparse COO tensor")
    if out.layout != torch.strided or not out.is_contiguous():
        raise UnsupportedInputError("out must be a dense contiguous tensor")
    if tuple(out.shape) != tuple(payload.shape) or out.dtype != payload.dtype:
        raise UnsupportedInputError(
            f"out is {tuple(out.shape)} {out.dtype}; the payload decodes to {tuple(payload.shape)} {payload.dtype}"
        )
    if device is not None and out.device != device:
        raise UnsupportedInputError(f"out is on {out.device}, decode was asked for {device}")
    if payload.shares_memory_with(out):
        raise UnsupportedInputError("out shares memory with the payload's sections")
    return out.device


def _decode_device(device: object) -> torch.device | None:
    """``decode``'s ``device`` argument as a :class:`torch.device` (None when not given).

    Raises:
        UnsupportedInputError: not a device name, index or :class:`torch.device`.
    """
    if device is None:
        return None
    try:
        return torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError) as err:
        raise UnsupportedInputError(f"decode device {device!r} is not a device: {err}") from None


def _check_usable(dev: torch.device, here: torch.device) -> None:
    """Raise :class:`UnsupportedInputError` unless a decode can write values on ``dev``: not the
    meta device (it holds no values), and one this process can reach (a CUDA device on a machine
    without one, an index past the last GPU). Unless the sections (on ``here``) are there already,
    an empty tensor is created there to find out: it allocates nothing, so an out-of-memory device
    is not mistaken for a missing one."""
    if dev.type == "meta":
        raise UnsupportedInputError("decode cannot write to the meta device: it holds no values")
    if dev.type == "cpu" or dev == here:
        return
    try:
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as err:  # torch built without CUDA raises AssertionError
        raise UnsupportedInputError(f"decode device {dev} is not available here: {str(err).splitlines()[0]}") from None


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def expect_sections(
    codec: Codec, sections: tuple[torch.Tensor, ...], spec: Sequence[tuple[torch.dtype, int | None]]
) -> None:
    """Check section count, dtypes and lengths (``None`` = any length) or raise CorruptPayloadError."""
    name = type(codec).__name__
    if len(sections) != len(spec):
        raise CorruptPayloadError(f"{name} payload has {len(sections)} sections, expected {len(spec)}")
    for i, (s, (dtype, length)) in enumerate(zip(sections, spec)):
        if s.dtype != dtype:
            raise CorruptPayloadError(f"{name} section {i} has dtype {s.dtype}, expected {dtype}")
        if length is not None and s.numel() != length:
            raise CorruptPayloadError(f"{name} section {i} has {s.numel()} elements, expected {length}")


def check_ratio(codec: Codec) -> None:
    """Validate and normalise a codec's ``ratio`` parameter to a float in ``(0, 1]`` (for ``__post_init__``)."""
    r = codec.ratio  # type: ignore[attr-defined]
    codec._require(isinstance(r, (int, float)) and not isinstance(r, bool), f"ratio must be a float, got {r!r}")
    codec._require(math.isfinite(r) and 0 < r <= 1, f"ratio must be in (0, 1], got {r!r}")
    codec.ratio = float(r)  # type: ignore[attr-defined]


def check_seed(codec: Codec) -> None:
    """Validate a codec's ``seed`` parameter: an int in ``[0, 2**63)`` (for ``__post_init__``)."""
    s = codec.seed  # type: ignore[attr-defined]
    codec._require(isinstance(s, int) and not isinstance(s, bool), f"seed must be an int, got {s!r}")
    codec._require(0 <= s < 2**63, f"seed must be in [0, 2**63), got {s}")
