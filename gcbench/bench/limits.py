"""Bounds on the options of ``gcbench bench``, ``bench-train`` and ``compare``, checked before any
tensor is allocated or any rank is launched, so that a mistyped value fails at once with one line
naming the option instead of hanging, exhausting memory or failing deep inside torch.

Every check raises :class:`ValueError` whose message starts with the option's name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Optional

#: Real ranks a command launches on this machine, at most, per CPU core (``gcbench train``,
#: ``gcbench bench-train``): more processes than that only wait on each other.
RANKS_PER_CPU = 4


def max_local_ranks() -> int:
    """The most real ranks a command launches on this machine: :data:`RANKS_PER_CPU` per CPU core."""
    return RANKS_PER_CPU * (os.cpu_count() or 1)


#: Largest ``gcbench bench --size``: 2**31 float32 elements (8 GiB per buffer).
MAX_BENCH_SIZE = 1 << 31
#: Bytes ``gcbench bench`` holds per input element at once, at most: the float32 input, the copy
#: target, the clone, the fp16 cast, a payload and a decode buffer (six 4-byte buffers).
BENCH_BYTES_PER_ELEMENT = 24
#: Largest ``gcbench bench-train --batch-size`` (samples per rank per step).
MAX_BATCH_SIZE = 1 << 20
#: Largest ``--cap-mb`` / ``--psgd-cap-mb`` of ``gcbench bench-train``: 1 TiB buckets.
MAX_CAP_MB = float(1 << 20)
#: Most timed rounds (``--repeat``) of ``gcbench bench`` and ``compare``, and untimed ones (``bench
#: --warmup``): a median of 1000 rounds is as settled as a median gets, and more only takes hours.
MAX_REPEAT = 1000
MAX_WARMUP = 1000
#: Most Adam steps of ``gcbench compare --steps`` before the gradient is taken (the digits models
#: settle within a few hundred).
MAX_COMPARE_STEPS = 10_000


def machine_memory_bytes() -> Optional[int]:
    """This machine's physical memory in bytes (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def device_memory_bytes(device: str) -> Optional[int]:
    """Total memory of ``device`` (``cpu``, ``cuda``, ``cuda:N``) in bytes; None when unknown."""
    if device.startswith("cuda"):
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[1])
        except (RuntimeError, ValueError, AssertionError):
            return None
    return machine_memory_bytes()


def check_bench_size(size: int, device: str = "cpu", memory_bytes: Optional[int] = None) -> int:
    """``size`` when ``gcbench bench`` can hold its buffers for it on ``device``.

    Args:
        size: elements of the input.
        device: where the buffers live (a checked ``cpu``/``cuda``/``cuda:N``).
        memory_bytes: the memory to fit in (default: ``device``'s total memory).

    Raises:
        ValueError: ``size`` above :data:`MAX_BENCH_SIZE`, or its buffers
            (:data:`BENCH_BYTES_PER_ELEMENT` bytes an element) larger than the memory.
    """
    if size > MAX_BENCH_SIZE:
        raise ValueError(f"--size {size} is above the largest size, {MAX_BENCH_SIZE} elements (2**31)")
    memory = device_memory_bytes(device) if memory_bytes is None else memory_bytes
    need = size * BENCH_BYTES_PER_ELEMENT
    if memory is not None and need > memory:
        raise ValueError(
            f"--size {size} needs about {need / 2**30:.1f} GiB for the bench's buffers "
            f"({BENCH_BYTES_PER_ELEMENT} bytes an element) but {device} has {memory / 2**30:.1f} GiB"
        )
    return size


def checked_bench_size(text: str | int, device: str = "cpu") -> int:
    """Parse ``--size`` text (see :func:`gcbench.bench.inputs.parse_size`) and check it with
    :func:`check_bench_size`; every error names ``--size``."""
    from .inputs import parse_size

    try:
        size = parse_size(text)
    except ValueError as err:
        raise ValueError(f"--size {text!r}: {err}") from None
    return check_bench_size(size, device)


def activation_floats_per_sample(model: str, quick: bool) -> tuple[int, int]:
    """``(values per sample, parameters)`` of a ``bench-train`` model: its input plus every leaf
    module's output for one sample, counted on the meta device (no memory, no compute)."""
    import torch

    from .train import build_model

    with torch.device("meta"):
        net, shape = build_model(model, quick=quick)
    total = [math.prod(shape)]

    def count(_module: object, _inputs: object, output: object) -> None:
        if isinstance(output, torch.Tensor):
            total[0] += output.numel()

    for m in net.modules():
        if not list(m.children()):
            m.register_forward_hook(count)
    with torch.no_grad():
        net(torch.empty((1, *shape), device="meta"))
    return total[0], sum(p.numel() for p in net.parameters())


def bench_train_rank_bytes(model: str, batch: int, quick: bool) -> int:
    """Estimated bytes one ``bench-train`` rank holds for ``model`` at ``batch`` samples: float32
    activations kept for the backward pass and their gradients (two values per activation), and the
    parameters with their gradients, DDP's buckets and the hook's copies (four values a parameter)."""
    per_sample, params = activation_floats_per_sample(model, quick)
    return 4 * (2 * per_sample * batch + 4 * params)


def check_bench_train(
    *, models: Sequence[str], batch: Optional[int], quick: bool, nproc: int, cap_mb: float, psgd_cap_mb: float,
    timeout: float, memory_bytes: Optional[int] = None,
) -> None:
    """Check ``gcbench bench-train``'s numbers before any rank starts.

    ``batch`` None means each model's default batch. ``nproc`` is at most :func:`max_local_ranks`,
    and the ranks' estimated memory (:func:`bench_train_rank_bytes` times ``nproc``) must fit
    ``memory_bytes`` (default: this machine's physical memory).

    Raises:
        ValueError: a value out of range (naming its option), or ranks that would not fit in memory.
    """
    from ..envs.launch import check_timeout
    from .train import BATCH, QUICK_BATCH

    check_timeout(timeout, "--timeout")
    for name, value, top in (("--cap-mb", cap_mb, MAX_CAP_MB), ("--psgd-cap-mb", psgd_cap_mb, MAX_CAP_MB)):
        if not (math.isfinite(value) and 0 < value <= top):
            raise ValueError(f"{name} must be a positive number up to {top:.0f}, got {value}")
    if batch is not None and not 1 <= batch <= MAX_BATCH_SIZE:
        raise ValueError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE}, got {batch}")
    if not 1 <= nproc <= max_local_ranks():
        raise ValueError(f"--nproc must be between 1 and {max_local_ranks()} on this machine ({RANKS_PER_CPU} per CPU core), "
                         f"got {nproc}")
    memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
    if memory is None:
        return
    for model in models:
        b = batch if batch is not None else (QUICK_BATCH if quick else BATCH)[model]
        need = nproc * bench_train_rank_bytes(model, b, quick)
        if need > memory:
            options = f"--batch-size {b} with --nproc {nproc}" if batch is not None else (
                f"--nproc {nproc} with the default batch of {b}")
            raise ValueError(
                f"{options} needs about {need / 2**30:.1f} GiB for {model} but this machine has {memory / 2**30:.1f} GiB"
            )


def check_count(value: int, option: str, low: int, high: int) -> int:
    """``value`` when ``low <= value <= high``; else a ValueError naming ``option``."""
    if not low <= value <= high:
        raise ValueError(f"{option} must be between {low} and {high}, got {value}")
    return value


def check_rounds(repeat: int, warmup: int = 0) -> None:
    """``--repeat`` (1 to :data:`MAX_REPEAT`) and ``--warmup`` (0 to :data:`MAX_WARMUP`) of ``bench``/``compare``."""
    check_count(repeat, "--repeat", 1, MAX_REPEAT)
    check_count(warmup, "--warmup", 0, MAX_WARMUP)
