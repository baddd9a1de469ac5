"""Counter-based dither: the stochastic-rounding uniforms of QSGD, TernGrad and ZipML as a hash of
(key, element index), computed inside the quantizing pass instead of drawn from a generator's stream.

A generator's stream is serial (CPU: mt19937, one word after another), so drawing the uniforms was
a pass of its own that no kernel could fuse (measured at 25M values: ``random_`` over the 6.25M
int64 words alone cost 3.45x a ``copy_``). A counter-based generator (Salmon, Moraes, Dror, Shaw,
"Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011) instead computes the ``i``-th number as a
function of ``(key, i)``: every element's uniform is computed where it is used, in any order, in
eager and compiled code alike.

The function (:func:`pair_hash`): a 32-bit word ``pcg(pcg(lo32(p) ^ k0) ^ lo32(k1 + hi32(p)))``, where
``pcg`` is the ``pcg_hash`` of Jarzynski and Olano, "Hash Functions for GPU Rendering", JCGT 9(3),
2020 (one LCG step of O'Neill's PCG, 2014, then its RXS-M-XS output permutation; their
recommendation for quality at low cost), ``k0`` the key's low 32 bits and ``k1 = pcg(k0) ^`` its
high 31 bits. The first round mixes the index with ``k0``, the second keys that again with ``k1``
(which depends on the whole key) and the index's high word, so two keys give unrelated streams (not
shifts or permutations of each other). Each word gives two 16-bit uniforms, its low and high
halves, to two elements ``S`` apart (:func:`split_point`): half the hashing per element, and in a
compiled kernel both elements are in the same loop iteration. ``pcg`` is a bijection of 32-bit words, so for one key the words of
``2**32`` consecutive pairs take every value once: each half is exactly uniform over that period.

Three forms of the same words. :func:`pair_hash` holds the 32-bit words in int64 and keeps every
product below ``2**63`` (a word ``< 2**32`` times a multiplier ``< 2**30``), then masks it to 32
bits: no signed integer overflow anywhere (torch 2.14 has no unsigned 32-bit shifts or additions on
CPU); the eager path off the CPU uses it. The compiled kernels use :func:`pair_hash32`: int32 lanes
whose multiplies and additions wrap modulo ``2**32`` (Inductor's C++ performs them on the unsigned
type, Triton's wrap), logical shifts written as masked arithmetic ones. A CPU without AVX-512 has no
64-bit vector multiply nor arithmetic shift: Inductor emitted the int64 hash there as scalar
``imul`` (108 in the QSGD kernel, none vectorised), and emits the int32 one as ``vpmulld`` on
``ymm`` registers (AVX2, 8 lanes) or ``zmm`` (AVX-512, 16 lanes, where the int64 form used
``vpmullq`` on 8). Eager on the CPU computes the words with numpy's wrapping uint32 arithmetic
(:func:`_words_np`: no masks, 4-byte words). The tests hold all three to an independent reference
and to each other byte for byte.

The key is drawn once per encode call from the codec's generator (:func:`draw_key`): same seed,
same bytes; another seed, other bytes; successive calls differ.

:data:`DITHER_VERSION` names the random function: a payload's bytes for a given seed depend on it
(its wire format does not), so cached results keyed on codec bytes must include it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

#: 1: four 16-bit uniforms per int64 word of the generator's stream (``Generator.random_``);
#: 2: :func:`pair_hash`, the counter-based hash of (key drawn from the generator, element index).
DITHER_VERSION = 2

_MASK32 = 0xFFFFFFFF
#: pcg_hash's LCG step (PCG's 32-bit multiplier and increment) and RXS-M-XS multiplier.
PCG_MUL = 747796405
PCG_INC = 2891336453
PCG_OUT = 277803737
#: Eager sub-chunk of :func:`uniforms_into`: its int64 temporaries (256 KB) stay in cache, and it is
#: not above ATen's parallel grain (32768), so its ~30 ops run without an OpenMP region each
#: (measured, 25M uniforms, load 1.3: 307 ms at 32K, 335 ms at 16K, 285 ms at 64K on two threads
#: with twice the CPU time, 390 ms at 128K; on a loaded 2-core machine the regions cost far more).
#: The numpy path of the CPU does not depend on it much: a 25M ZipML-8 eager encode took 98.8, 93.6,
#: 90.6 and 91.6 ms at 16K, 32K, 64K and 128K (same process, interleaved).
HASH_CHUNK = 1 << 15
#: The sub-chunk off the CPU: each of the ~30 ops of a sub-chunk is a kernel launch there, and a GPU's
#: memory holds 4M-pair temporaries (32 MB each) easily. At 32K a 64M-value eager QSGD encode on an
#: H200 took 2300x a ``copy_``: launches, not arithmetic. The words do not depend on the sub-chunk.
DEVICE_HASH_CHUNK = 1 << 22


def hash_chunk(device: torch.device) -> int:
    """The eager hash's sub-chunk on ``device`` (:data:`HASH_CHUNK` on the CPU, else :data:`DEVICE_HASH_CHUNK`)."""
    return HASH_CHUNK if device.type == "cpu" else DEVICE_HASH_CHUNK


def draw_key(generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """One int64 key in ``[0, 2**63)`` from ``generator`` (one draw), as a one-element tensor on
    ``device`` (a tensor, so that a compiled kernel does not recompile for a new key, and no
    device-to-host copy is needed on CUDA)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    key = torch.empty(1, dtype=torch.int64, device=gen_device).random_(generator=generator)
    return key.to(device)


def _pcg_(v: torch.Tensor) -> torch.Tensor:
    """pcg_hash of int64 ``v`` in ``[0, 2**32)``, in place (``v`` must be the caller's own tensor):
    ``s = v * 747796405 + 2891336453``, ``w = (s ^ (s >> ((s >> 28) + 4))) * 277803737``, ``w ^ (w >>
    22)``, all mod ``2**32``; products < 2**62. In place because the eager path makes about 30 such
    ops per word: fresh int64 temporaries for each made it about a fifth slower (the compiled
    kernels trace the same ops functionally)."""
    v.mul_(PCG_MUL).add_(PCG_INC).bitwise_and_(_MASK32)
    t = torch.bitwise_right_shift(v, 28).add_(4)
    v.bitwise_xor_(torch.bitwise_right_shift(v, t, out=t))
    v.mul_(PCG_OUT).bitwise_and_(_MASK32)
    return v.bitwise_xor_(torch.bitwise_right_shift(v, 22, out=t))


def pcg_hash(v: torch.Tensor) -> torch.Tensor:
    """Jarzynski and Olano's pcg_hash of int64 ``v`` in ``[0, 2**32)``: a bijection of 32-bit words."""
    return _pcg_(v.clone())


def key_words(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(k0, k1)`` of a one-element int64 ``key`` in ``[0, 2**63)``: ``k0`` its low 32 bits, ``k1 =
    pcg(k0) ^`` its high 31 bits. ``k1`` depends on both halves of the key: keys that differ in their
    low word only would otherwise give one stream at xor-permuted indices. Computed once per call."""
    k0 = key & _MASK32
    return k0, pcg_hash(k0) ^ (key >> 32)


def pcg_int(v: int) -> int:
    """:func:`pcg_hash` of one word ``v`` in ``[0, 2**32)``, in Python's integers: for one word about
    1 us, where :func:`_pcg_np_` on a one-element array took 10 and the tensor ops some 30."""
    s = (v * PCG_MUL + PCG_INC) & _MASK32
    w = ((s ^ (s >> ((s >> 28) + 4))) * PCG_OUT) & _MASK32
    return w ^ (w >> 22)


def key_words_int(key: torch.Tensor) -> tuple[int, int]:
    """:func:`key_words` as Python integers, from one read of the key (no small tensor ops): the
    words the C passes and the eager CPU hash take."""
    whole = int(key)
    k0 = whole & _MASK32
    return k0, pcg_int(k0) ^ (whole >> 32)


def pair_hash(p: torch.Tensor, k0: torch.Tensor, k1: torch.Tensor) -> torch.Tensor:
    """``pcg(pcg(lo32(p) ^ k0) ^ lo32(k1 + hi32(p)))``: the 32-bit word (int64 in ``[0, 2**32)``) of
    the pairs ``p`` (int64, ``>= 0``) under the key words ``k0``, ``k1`` (:func:`key_words`); its low
    and high 16 bits are two elements' uniforms (see :func:`split_point`).

    Written in torch ops: traced into the compiled kernels, and the eager path off the CPU; the eager
    CPU path computes the same words with numpy's uint32 arithmetic (:func:`_words_np`). Integer
    arithmetic is exact in all three, and the tests hold each to an independent reference."""
    v = _pcg_((p & _MASK32).bitwise_xor_(k0))
    return _pcg_(v.bitwise_xor_(torch.bitwise_right_shift(p, 32).add_(k1).bitwise_and_(_MASK32)))


#: :data:`PCG_INC` as the int32 of the same 32 bits (two's complement).
_PCG_INC_I32 = PCG_INC - (1 << 32)
#: Pair indices below this take :func:`pair_hash32` (their high word is 0).
PAIRS_32 = 1 << 31


def _to_i32(w: torch.Tensor) -> torch.Tensor:
    """int64 ``w`` in ``[0, 2**32)`` as the int32 of the same 32 bits (``w - 2**32`` from ``2**31``
    on): an exact conversion, not one that relies on how a narrowing conversion wraps."""
    return (w - ((w >> 31) << 32)).to(torch.int32)


def _pcg32(v: torch.Tensor) -> torch.Tensor:
    """:func:`pcg_hash` on int32 ``v`` holding the 32 bits of each word (two's complement): int32
    ``*`` and ``+`` wrap modulo ``2**32`` as uint32 ones do, and the logical right shifts are
    arithmetic shifts of the sign-cleared value (``(v >> 4) & 0x0FFFFFFF`` is ``v``'s logical shift
    by 4, then shifted by ``t - 4``; ``(w >> 22) & 0x3FF`` is ``w``'s by 22). Functional ops: traced
    into the compiled kernels only."""
    s = v * PCG_MUL + _PCG_INC_I32
    s = s ^ (((s >> 4) & 0x0FFFFFFF) >> ((s >> 28) & 15))
    w = s * PCG_OUT
    return w ^ ((w >> 22) & 0x3FF)


def key_words32(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`key_words` as int32 (the same 32 bits each, :func:`_to_i32`)."""
    k0, k1 = key_words(key)
    return _to_i32(k0), _to_i32(k1)


def kernel_words(key: torch.Tensor, pairs: int) -> torch.Tensor:
    """The key words (:func:`key_words`) of a compiled kernel hashing ``pairs`` pairs, as one
    two-element tensor ``[k0, k1]``, computed once per call outside the kernel (inside it, the
    scalar key arithmetic sat in every iteration of the vector loop): int32 (:func:`key_words32`)
    when ``pairs <= 2**31`` (the kernel then hashes in 32-bit lanes, :func:`pair_hash32`), int64
    above (:func:`pair_hash`). The kernel tells the two by the dtype."""
    words = key_words32(key) if pairs <= PAIRS_32 else key_words(key)
    return torch.cat(words)


def hash_halves(index: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The low and high 16 bits of the words of the pairs ``index`` (of ``words``' dtype) under the
    key words ``words`` of :func:`kernel_words` (int32: :func:`pair_hash32`; int64:
    :func:`pair_hash`). Traced into the compiled kernels."""
    k0, k1 = words[0], words[1]
    if words.dtype == torch.int32:
        return halves32(pair_hash32(index, k0, k1))
    h = pair_hash(index, k0, k1)
    return h & 0xFFFF, h >> 16


def pair_hash32(p: torch.Tensor, k0: torch.Tensor, k1: torch.Tensor) -> torch.Tensor:
    """:func:`pair_hash` in 32-bit integer arithmetic, for the compiled kernels: int32 pairs ``p``
    in ``[0, 2**31)`` (their high word is 0: ``lo32(k1 + 0) = k1``), int32 key words
    (:func:`key_words32`); returns the same 32-bit words as int32 (their low 16 bits ``h & 0xFFFF``,
    their high 16 bits ``(h >> 16) & 0xFFFF``, :func:`halves32`).

    Why 32 bits: a CPU without AVX-512 has no 64-bit vector multiply nor 64-bit arithmetic right
    shift, so Inductor's int64 hash (:func:`pair_hash`) runs those lanes emulated, element by
    element; int32 multiplies and shifts are native vector instructions on AVX2, AVX-512 and NEON
    alike, with twice the lanes per register. Inductor's C++ performs integer ``*`` and ``+`` on
    the unsigned type (defined wrap-around, not signed overflow); Triton's wrap as well."""
    return _pcg32(_pcg32(p ^ k0) ^ k1)


def halves32(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The low and high 16 bits (int32 in ``[0, 2**16)``) of the int32 words ``h`` of
    :func:`pair_hash32`."""
    return h & 0xFFFF, (h >> 16) & 0xFFFF


def split_point(n: int, span: int) -> int:
    """``S``: elements ``e < S`` and ``S + e`` share the word ``pair_hash(e)`` (low 16 bits: ``e``'s
    uniform; high 16 bits: ``S + e``'s); elements ``e >= 2S`` take the high 16 bits of their own
    ``pair_hash(e)`` (indices ``>= 2S`` are no pair's). ``S = u * floor(n / (2 u))`` for ``u`` the
    least common multiple of ``span`` and 8: whole rows of ``span`` values (a bucket, or the compiled
    kernel's row under one scale), so that a compiled kernel computes one word for two elements that
    lie in the same place of two rows (two contiguous streams, half the hashing), and whole bytes of
    packed codes, so that the eager code can quantize the two halves chunk by chunk too; fewer than
    ``2 u`` values are left unpaired."""
    unit = span * 8 // math.gcd(span, 8)
    return unit * (n // (2 * unit))


def _pcg_np_(v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """pcg_hash of the uint32 array ``v``, in place (``t``: a uint32 scratch of the same size).
    numpy's uint32 arithmetic wraps modulo ``2**32``: no masks, and words of 4 bytes, not 8."""
    v *= np.uint32(PCG_MUL)
    v += np.uint32(PCG_INC)
    np.right_shift(v, 28, out=t)
    t += np.uint32(4)
    np.right_shift(v, t, out=t)
    v ^= t
    v *= np.uint32(PCG_OUT)
    np.right_shift(v, 22, out=t)
    v ^= t
    return v


def _words_np(a: int, b: int, k0: int, k1: int, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """:func:`pair_hash` of the pairs ``a..b-1`` (``b - a <= len(v)``) under the key words ``k0``,
    ``k1`` (:func:`key_words`, as ints), as uint32 in ``v[: b - a]`` (``t``: scratch): the eager CPU
    path. Its uint32 ops run about 1.4x as fast as the masked int64 torch ops over a tensor and cost
    ~1 us each, not ~4 us, on a short one (measured: 12.5M words 115 against 165 ms, one thread); a
    range that crosses a multiple of ``2**32`` (a new high word) is hashed in two parts."""
    m = b - a
    cut = min(b, (a >> 32) + 1 << 32)
    if cut < b:
        _words_np(cut, b, k0, k1, v[cut - a : m], t[cut - a : m])
    w, tw = v[: cut - a], t[: cut - a]
    lo = a & _MASK32
    w[:] = np.arange(lo, lo + (cut - a), dtype=np.uint32)
    w ^= np.uint32(k0)
    _pcg_np_(w, tw)
    w ^= np.uint32((k1 + (a >> 32)) & _MASK32)
    _pcg_np_(w, tw)
    return v[:m]


def _word_chunks(key: torch.Tensor, device: torch.device, m: int) -> tuple[Callable, Callable]:
    """``(words, view)`` for hashing up to ``m`` pairs in sub-chunks (:func:`hash_chunk`):
    ``words(a, b)`` = the words of the pairs ``a..b-1``, and ``view(out)`` = ``out`` as the array
    those words are written into. On the CPU numpy's uint32 arithmetic (:func:`_words_np`, into
    scratch reused from sub-chunk to sub-chunk) and a numpy view; elsewhere :func:`pair_hash` and
    ``out`` itself. The key words are computed once per call."""
    if device.type != "cpu":
        k0, k1 = key_words(key)
        return (lambda a, b: pair_hash(torch.arange(a, b, dtype=torch.int64, device=device), k0, k1)), (lambda o: o)
    v, t = np.empty(max(1, min(m, HASH_CHUNK)), np.uint32), np.empty(max(1, min(m, HASH_CHUNK)), np.uint32)
    k0, k1 = key_words_int(key)
    return (lambda a, b: _words_np(a, b, k0, k1, v, t)), (lambda o: o.detach().numpy())


def pair_uniforms_into(low: torch.Tensor, high: torch.Tensor, start: int, key: torch.Tensor) -> None:
    """Eager: ``low[j]``, ``high[j]`` = the uniforms (exact float32 integers in ``[0, 2**16)``) of the
    elements ``start + j`` and ``S + start + j`` (``start + j < S``): the low and high halves of word
    ``start + j``, computed once for both, in sub-chunks (:func:`hash_chunk`, :func:`_word_chunks`)."""
    m = low.numel()
    words, view = _word_chunks(key, low.device, m)
    lo, hi = view(low), view(high)
    chunk = hash_chunk(low.device)
    for a in range(0, m, chunk):  # sub-chunks, not elements
        b = min(m, a + chunk)
        w = words(start + a, start + b)
        lo[a:b] = w & 0xFFFF
        hi[a:b] = w >> 16


def uniforms_into(out: torch.Tensor, start: int, key: torch.Tensor, split: int) -> torch.Tensor:
    """Eager: ``out[j]`` = the uniform (an exact float32 integer in ``[0, 2**16)``) of element
    ``start + j`` of a tensor whose split point (:func:`split_point`) is ``split``, computed in
    sub-chunks (:func:`hash_chunk`) so that the temporaries stay small (:func:`_word_chunks`).
    Returns ``out``."""
    m = out.numel()
    words, view = _word_chunks(key, out.device, m)
    dst = view(out)
    bounds = [start, start + m]
    bounds[1:1] = [b for b in (split, 2 * split) if start < b < start + m]
    chunk = hash_chunk(out.device)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        # one segment: the low half of the pairs, the high half, or the unpaired rest
        offset, high = (0, False) if lo < split else (split, True) if lo < 2 * split else (0, True)
        for a in range(lo, hi, chunk):  # sub-chunks, not elements
            b = min(hi, a + chunk)
            w = words(a - offset, b - offset)
            dst[a - start : b - start] = w >> 16 if high else w & 0xFFFF
    return out
