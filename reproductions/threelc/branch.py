"""The shared warm-up of the claims scale's traffic cells and the settle verdict of their branches.

3LC's traffic depends on the gradient statistics, which move fast while the loss falls from its
initial value (:mod:`.settle` measured ~80 steps at ResNet-110). Training each 3LC setting from
initialisation to its steady state would cost four times those steps at ~4 s each (the 3LC codec
on one CPU core); instead one ``traffic-warmup`` cell trains the model uncompressed (cheaper: no
3LC codec) and stores where it stands (:class:`~.train.TrainState`: both models and the server's
optimizer) as a checkpoint file next to the cell cache; every ``traffic-3lc-s<s>`` cell branches
from that checkpoint, starts its error-accumulation memories empty, and measures the traffic of its
own steps. The cell cache computes the warm-up once per configuration; a branch interrupted mid-way
is recomputed from the same checkpoint (deterministic on one thread: the same bytes and losses).

The checkpoint's SHA-256 is part of the warm-up cell's (digest-protected) result; a missing or
altered file is not trusted: the warm-up is recomputed and the file rewritten.

:func:`settle_verdict` says, from the branch's own per-window reductions, whether its traffic has
stopped moving over the steady-state steps; a claim on a branch that has not is reported as
provisional.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .train import TrainState

CHECKPOINT_DIR = "checkpoints"


def checkpoint_path(run_dir: Path, cell_key: str) -> Path:
    """Where the warm-up cell ``cell_key`` (``name-digest``) keeps its checkpoint."""
    return Path(run_dir) / CHECKPOINT_DIR / f"{cell_key}.pt"


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_state(state: TrainState, path: Path) -> str:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename); returns its SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save({"step": state.step, "server": state.server, "replica": state.replica, "optimizer": state.optimizer,
                        "memories": state.memories}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return file_sha256(path)


def load_state(path: Path, sha256: str | None) -> TrainState | None:
    """The state stored at ``path``, or None when the file is missing or its SHA-256 is not ``sha256``."""
    if sha256 is None or not path.is_file() or file_sha256(path) != sha256:
        return None
    blob = torch.load(path, map_location="cpu", weights_only=True)
    return TrainState(int(blob["step"]), blob["server"], blob["replica"], blob["optimizer"], blob.get("memories", {}))


def window_reductions(fp32_per_step: float, sent: Sequence[int], window: int) -> list[float]:
    """The reduction (fp32 bytes / bytes sent) of each non-overlapping window of ``window`` steps."""
    out = []
    for i in range(0, len(sent) - window + 1, window):
        chunk = sent[i : i + window]
        out.append(fp32_per_step * window / sum(chunk) if sum(chunk) else math.inf)
    return out


def settled_at(fp32_per_step: float, sent: Sequence[int], window: int = 20, tolerance: float = 0.15) -> int | None:
    """The first step ``k * window`` from which every window's reduction is within ``tolerance``
    (relative) of the last window's; None when fewer than three windows were measured (too short
    to tell) or only the last window qualifies."""
    red = window_reductions(fp32_per_step, sent, window)
    if len(red) < 3:
        return None
    last = red[-1]
    k = len(red) - 1
    while k > 0 and abs(red[k - 1] / last - 1.0) <= tolerance:
        k -= 1
    return None if k == len(red) - 1 else k * window


def settle_verdict(fp32_per_step: float, sent: Sequence[int], window: int, settled_from: int,
                   tolerance: float) -> dict[str, Any]:
    """Whether a branch's traffic is settled over its steady-state steps.

    The branch's steps are cut into windows of ``window`` steps (:func:`window_reductions`);
    it is *settled* when :func:`settled_at` finds a start (every window from there within
    ``tolerance`` of the last one) at or before ``settled_from``: the steady-state steps then all lie
    in windows that agree with each other. A series still drifting over its last windows gives
    *not settled*, as does one too short to have three windows.
    """
    at = settled_at(fp32_per_step, sent, window, tolerance)
    return {"settled": at is not None and at <= settled_from, "settled_at": at,
            "windows": window_reductions(fp32_per_step, sent, window), "window": window, "tolerance": tolerance}


def branch_sent(result: Mapping[str, Any]) -> list[int]:
    """Per step, the framed bytes a 3LC cell sent (push + pull)."""
    st = result["stages"]
    return [int(a) + int(b) for a, b in zip(st["push"]["framed_per_step"], st["pull"]["framed_per_step"])]


__all__ = ["CHECKPOINT_DIR", "branch_sent", "checkpoint_path", "file_sha256", "load_state", "save_state", "settle_verdict",
           "settled_at", "window_reductions"]
