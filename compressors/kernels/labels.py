"""Profiler labels on a codec's stages that cost nothing when no profiler is recording.

``torch.profiler.record_function`` enters and leaves a profiler scope on every call, recording or
not: a few microseconds each, and SketchML labels about ten stages per encode, a fifth of a small
message's encode. :func:`stage_label` opens the scope only while a profiler records (as
``gcbench bench --stages`` does, or a user's own ``torch.profiler.profile``), so the labels are in
every trace and free everywhere else.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from torch.profiler import record_function

#: torch's own test of whether a profiler records (present in every supported torch); where a build
#: lacks it, every label is opened, as ``record_function`` alone would.
_recording = getattr(torch.autograd, "_profiler_enabled", None)
_NO_LABEL = contextlib.nullcontext()


def stage_label(name: str) -> ContextManager[object]:
    """``record_function(name)`` while a profiler records, else a shared no-op context."""
    if _recording is not None and not _recording():
        return _NO_LABEL
    return record_function(name)
