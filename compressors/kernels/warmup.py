"""Compile ahead of time: run a codec's kernels once, on the sizes it will see, before they matter.

In ``auto`` and ``compiled`` mode (:func:`~gcbench.compressors.kernels.core.mode`) a kernel compiles
the first time it runs compiled, and a probed path measures both modes the first time it is asked
(:mod:`~gcbench.compressors.kernels.choice`): seconds with Inductor's on-disk cache, tens of seconds
without it. In a training rank that first call would land inside the first step, where the other ranks
wait in a collective and the launcher's hang detector counts. :func:`warm_up` moves it before training:
it builds a *fresh* codec (the caller's factory, so no state of the real one is touched: no residual,
warm start or generator draw), encodes synthetic normal values of each size the model will send and
decodes the payload, which compiles every kernel those sizes take (shapes are dynamic: one compilation
per kernel and signature, not per size) and makes the per-machine choices. The DDP hook calls it when
it is built with the model (:class:`gcbench.envs.ddp_hook.GCBenchHookState`, ``compile_ahead``).

In eager mode it does nothing; in ``auto`` mode only sizes of at least
:data:`~gcbench.compressors.kernels.core.AUTO_MIN_NUMEL` values are warmed (smaller ones run eager).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import core

#: At most this many distinct sizes are warmed (the largest): with dynamic shapes a kernel compiled
#: for one size serves the others, and a size's warm-up after the first costs one encode and decode.
MAX_SIZES = 8


@dataclass
class WarmUp:
    """What :func:`warm_up` did: the sizes it ran, its wall time, the kernels' compile seconds."""

    mode: str
    sizes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    compile_s: dict[str, float] = field(default_factory=dict)


def sizes_to_warm(numels: Iterable[int], mode: str | None = None, limit: int = MAX_SIZES) -> list[int]:
    """The distinct sizes of ``numels`` that run compiled in ``mode`` (default: the current one),
    largest first, at most ``limit``: none in eager mode, those of at least ``AUTO_MIN_NUMEL`` in
    ``auto`` mode, all positive ones in ``compiled`` mode."""
    mode = core.mode() if mode is None else mode
    if mode == "eager":
        return []
    floor = core.AUTO_MIN_NUMEL if mode == "auto" else 1
    return sorted({int(n) for n in numels if int(n) >= floor}, reverse=True)[:limit]


def warm_up(
    factory: Callable[[int], Any],
    numels: Iterable[int],
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    on_size: Callable[[], None] | None = None,
) -> WarmUp:
    """Encode and decode synthetic N(0, 1) values (seed ``seed``) of each size ``n`` of
    :func:`sizes_to_warm` with the codec ``factory(n)`` (a new one per size, built with the
    parameters that size's tensor gets; never the caller's live codec, whose state the calls would
    change). Returns a :class:`WarmUp`. A size whose factory returns None (an exchange method with
    rounds of its own, not a codec) is skipped. ``on_size()`` is called after each size (a launcher's
    progress counter: a long compilation is not a hang)."""
    report = WarmUp(mode=core.mode())
    sizes = sizes_to_warm(numels, report.mode)
    if not sizes:
        return report
    before = core.compile_times()
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    for n in sizes:
        codec = factory(n)
        if codec is None:
            continue
        x = torch.randn(n, generator=gen).to(device=device, dtype=dtype)
        codec.decode(codec.encode(x))
        report.sizes.append(n)
        if on_size is not None:
            on_size()
    report.seconds = time.perf_counter() - start
    after = core.compile_times()
    report.compile_s = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}
    return report
