"""The device a workload runs on, from a ``--device`` value."""

from __future__ import annotations


def resolve_device(device: str | None) -> str:
    """``None`` -> ``"cuda"`` when available, else ``"cpu"``; ``cpu``, ``cuda`` and ``cuda:N`` are checked.

    Raises:
        ValueError: an unknown device, or a CUDA device this machine does not have.
    """
    import torch

    if device is None or device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = device.partition(":")
    if kind == "cpu" and not index:
        return "cpu"
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device is available on this machine")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device
