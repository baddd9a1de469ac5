"""The ``all_reduce`` protocol (linear codecs): encode, sum the payloads' summed sections, decode.

Each worker encodes its gradients; the payloads' summed sections (``codec.summed_sections``) are
all_reduced, batched into one flat tensor per section dtype; the summed payload is decoded once
and divided by ``W``. Sections that are not summed (e.g. RandomK's per-call seed) must be
identical on every worker: they are not sent. With ``verify_shared="first"`` (default) a 64-bit
digest of every payload's layout and shared sections is all_gathered the first time a tensor key is
aggregated (8 bytes per worker, counted as ``check`` traffic) and a mismatch raises
:class:`~gcbench.envs.errors.CollectiveMismatchError`; ``"always"`` checks every step, ``"never"``
trusts the seeds (a mismatch then silently corrupts the sum, or fails in the collective).

:func:`run_fused` is the same protocol for a bucket whose tensors share one ``elementwise`` codec
(identity, fp16, bf16 casts; no error feedback, no per-layer parameters): the bucket's flat buffer
is encoded once, its sections all_reduced in place and decoded once, which is what the per-tensor
path computes element for element (so results are bit-identical) without Python work per tensor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

from ...compressors import Payload
from ...compressors.base import validate_input
from ...compressors.numerics import all_finite
from ...compressors.errors import CorruptPayloadError, NonFiniteGradientError
from ..errors import CollectiveMismatchError
from ..exchange import Exchange


def _digest(ex: Exchange, codecs: Sequence[Any], payloads: Sequence[Payload]) -> int:
    h = hashlib.blake2b(digest_size=8)
    for codec, p in zip(codecs, payloads):
        summed = set(ex.summed_sections(codec, p))
        h.update(repr((p.codec_id, p.shape, str(p.dtype), sorted(p.params.items()))).encode())
        for i, s in enumerate(p.sections):
            h.update(repr((i, str(s.dtype), s.numel())).encode())
            if i not in summed:
                h.update(s.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def _verify(
    ex: Exchange, codecs: Sequence[Any], payloads: Sequence[Sequence[Payload]], keys: Sequence[str], device: torch.device
) -> None:
    digests = [torch.tensor([_digest(ex, codecs, payloads[i])], dtype=torch.int64, device=device) for i in range(ex.n_local)]
    t0 = ex.start()
    gathered = ex.collective.all_gather(digests)[0]
    ex.stop(t0, "comm")
    ex.record("all_gather", [("check", [8] * ex.n_local, None)])
    values = [int(t.item()) for t in gathered]
    bad = [r for r, v in enumerate(values) if v != values[0]]
    if bad:
        raise CollectiveMismatchError(
            f"shared payload sections or section lengths of ranks {bad} differ from rank 0's for tensors "
            f"{list(keys)[:4]}...: workers must build the codec with the same seed and parameters"
        )
    ex.mark_verified(keys)


def run(ex: Exchange, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
    """The mean of ``grads`` over all workers, per key (see the module docstring).

    A worker whose encode finds NaN or Inf sends NaN flats of the layout these keys had last time
    (:attr:`~gcbench.envs.exchange.Exchange.layouts`; the keys verified, no check due this call), then
    raises its own error; the sum carries the NaN to every worker, whose decode finds it and raises
    :class:`~gcbench.compressors.errors.NonFiniteGradientError`. Without a known layout (the keys'
    first call, new parameters, ``verify_shared="always"``) it raises before the collective."""
    device = grads[0][0].device
    need_check = ex.check_due(keys)
    try:
        payloads = ex.encode_all(grads, keys)
    except NonFiniteGradientError:
        layout = ex.layouts.get(tuple(keys))
        if layout is not None and not need_check:
            for dtype, numel in layout:
                flats = [torch.full((numel,), float("nan"), dtype=dtype, device=device) for _ in range(ex.n_local)]
                ex.collective.all_reduce(flats)
                ex.record("all_reduce", [("payload", [f.numel() * f.element_size() for f in flats], None)])
            ex.unverify(keys)  # as every worker does: the next call checks the shared sections again
        raise
    codecs = [ex.codec(0, k) for k in keys]
    if need_check:
        _verify(ex, codecs, payloads, keys, device)
    # one flat tensor per section dtype, sections in (tensor, section) order
    layout = [(j, s) for j, p in enumerate(payloads[0]) for s in ex.summed_sections(codecs[j], p)]
    dtypes = sorted({str(payloads[0][j].sections[s].dtype) for j, s in layout})
    summed: dict[tuple[int, int], torch.Tensor] = {}
    sent: list[tuple[torch.dtype, int]] = []
    for dt in dtypes:
        members = [(j, s) for j, s in layout if str(payloads[0][j].sections[s].dtype) == dt]
        flats = [torch.cat([payloads[i][j].sections[s].reshape(-1) for j, s in members]) for i in range(ex.n_local)]
        sent.append((flats[0].dtype, flats[0].numel()))
        t0 = ex.start()
        reduced = ex.collective.all_reduce(flats)[0]
        ex.stop(t0, "comm")
        ex.record("all_reduce", [("payload", [f.numel() * f.element_size() for f in flats], None)])
        offset = 0
        for j, s in members:
            n = payloads[0][j].sections[s].numel()
            summed[(j, s)] = reduced[offset : offset + n]
            offset += n
    # what a worker whose encode fails next time sends instead (NaN: float flats only)
    if sent and all(dtype.is_floating_point for dtype, _ in sent):
        ex.layouts[tuple(keys)] = sent
    t0 = ex.start()
    out = []
    for j, p in enumerate(payloads[0]):
        sections = tuple(summed.get((j, s), sec) for s, sec in enumerate(p.sections))
        total = Payload(p.codec_id, p.dtype, p.shape, p.params, sections, p.sparse)
        try:
            decoded = ex.decode_grad(codecs[j], total, grads[0][j], device=device, into=ex.outputs.get(keys[j]))
        except CorruptPayloadError as err:  # the sum of payloads encoded here: NaN or Inf in it
            ex.unverify(keys)
            raise _sum_error(str(err)) from None
        out.append(ex.mean_(decoded))
    ex.stop(t0, "decode")
    return out


def _sum_error(detail: str) -> NonFiniteGradientError:
    """The error of a worker whose all-reduced sum holds NaN or Inf (``detail``: what found it).

    Where a codec's payload is checked, every worker that raises it, and the worker whose NaN caused
    it, forgets that the keys' shared sections were checked
    (:meth:`~gcbench.envs.exchange.Exchange.unverify`): a codec whose random draws all workers share
    drew on some of them and not on the one that failed, so the next call checks again and raises
    :class:`~gcbench.envs.errors.CollectiveMismatchError` rather than summing values drawn at other
    coordinates."""
    return NonFiniteGradientError(
        "the all-reduced bucket holds non-finite values (NaN/Inf): a worker's gradients held NaN or Inf, "
        f"or their encoded sum exceeds its dtype's range; the bucket's average was not computed ({detail})"
    )


def run_fused(ex: Exchange, flats: Sequence[torch.Tensor], keys: Sequence[str]) -> torch.Tensor:
    """The mean over all workers of ``flats`` (one flat bucket per local worker, the tensors
    ``keys`` laid end to end), encoded as one tensor by the codec every key shares.

    The flats are the caller's to overwrite (DDP's bucket buffer, as torch's own ``allreduce_hook``
    does): an identity payload is reduced in place and the result divided in place.

    A worker whose bucket holds NaN or Inf does not raise before the collective, which would leave
    the others waiting in it: it sends a payload of NaN instead, which the sum carries to every
    worker, whose decode then finds it (a decode never returns non-finite values). That worker
    raises its own error, the others :class:`~gcbench.compressors.errors.NonFiniteGradientError`
    naming the sum.
    """
    device = flats[0].device
    codec = ex.codec(0, keys[0])
    if getattr(codec, "passthrough", False):
        return _run_passthrough(ex, codec, flats, keys)
    t0 = ex.start()
    payloads, failure = [], None
    for f in flats:
        try:
            payloads.append([codec.encode(f)])
        except NonFiniteGradientError as err:
            failure = failure or err
            payloads.append([_poisoned(codec, f)])
    ex.stop(t0, "encode")
    if ex.check_due(keys):
        _verify(ex, [codec], payloads, keys, device)
    p = payloads[0][0]
    summed = ex.summed_sections(codec, p)
    sections = list(p.sections)
    by_dtype: dict[str, list[int]] = {}
    for s in summed:
        by_dtype.setdefault(str(p.sections[s].dtype), []).append(s)
    for dt in sorted(by_dtype):
        members = by_dtype[dt]
        if len(members) == 1:
            flat_sections = [row[0].sections[members[0]].reshape(-1) for row in payloads]
        else:
            flat_sections = [torch.cat([row[0].sections[s].reshape(-1) for s in members]) for row in payloads]
        t0 = ex.start()
        reduced = ex.collective.all_reduce(flat_sections, inplace=True)[0]
        ex.stop(t0, "comm")
        ex.record("all_reduce", [("payload", [f.numel() * f.element_size() for f in flat_sections], None)])
        offset = 0
        for s in members:
            n = p.sections[s].numel()
            sections[s] = reduced[offset : offset + n].view(p.sections[s].shape)
            offset += n
    t0 = ex.start()
    total = Payload(p.codec_id, p.dtype, p.shape, p.params, tuple(sections), p.sparse)
    # decoded straight into the bucket (the caller's to overwrite) unless the payload is the bucket itself
    try:
        decoded = ex.decode_grad(codec, total, flats[0], device=device, into=flats[0])
    except CorruptPayloadError as err:  # the sum of our own payloads: NaN or Inf in it
        ex.unverify(keys)
        if failure is not None:
            raise failure from None
        raise _sum_error(str(err)) from None
    if failure is not None:
        raise failure
    out = ex.mean_(decoded)
    ex.stop(t0, "decode")
    return out


def _poisoned(codec: Any, flat: torch.Tensor) -> Payload:
    """A payload of ``codec`` for a bucket like ``flat`` whose float sections are all NaN: what a
    worker whose bucket failed its finiteness check sends, so that every worker's sum shows it."""
    p = codec.encode(torch.zeros_like(flat))
    sections = tuple(s.clone().fill_(float("nan")) if s.is_floating_point() else s for s in p.sections)
    return Payload(p.codec_id, p.dtype, p.shape, p.params, sections, p.sparse)


def _run_passthrough(ex: Exchange, codec: Any, flats: Sequence[torch.Tensor], keys: Sequence[str]) -> torch.Tensor:
    """:func:`run_fused` for a ``passthrough`` codec (the payload is the bucket itself): the flats
    are summed in place as they are, and one finiteness check of the sum stands for the codec's
    check of each worker's input before the collective and of the received payload after it.

    NaN or Inf in any worker's bucket shows in the sum (NaN + x is NaN, Inf + a finite value is
    Inf, Inf - Inf is NaN), as does a float sum beyond the dtype's range, so every worker raises
    :class:`~gcbench.compressors.errors.NonFiniteGradientError` at the same point, where a check
    of the input alone lets the worker holding the bad value raise before the collective and leaves
    the others waiting in it. Same values, same recorded traffic as the generic path (one scan of
    the bucket fewer)."""
    for f in flats:
        validate_input(f, type(codec).__name__)
    payloads = [[Payload(codec.codec_id, f.dtype, tuple(f.shape), codec.params, (f,), False)] for f in flats]
    if ex.check_due(keys):
        _verify(ex, [codec], payloads, keys, flats[0].device)
    flat_sections = [f.reshape(-1) for f in flats]
    t0 = ex.start()
    reduced = ex.collective.all_reduce(flat_sections, inplace=True)[0]
    ex.stop(t0, "comm")
    ex.record("all_reduce", [("payload", [f.numel() * f.element_size() for f in flat_sections], None)])
    t0 = ex.start()
    if not all_finite(reduced):  # nothing shared to check again: the payload is the bucket itself
        raise _sum_error(f"{reduced.numel()} {reduced.dtype} values")
    out = flats[0]
    if reduced.data_ptr() != out.data_ptr():  # a collective that summed into a new tensor
        out.view(-1).copy_(reduced)
    out = ex.mean_(out)
    ex.stop(t0, "decode")
    return out
