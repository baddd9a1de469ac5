"""Checks of options that several commands share, made before any work starts: output folders and files (the device: :func:`gcbench.workloads.devices.resolve_device`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..data.files import nearest_existing, unexaminable


def output_dir_problem(path: str | os.PathLike | None, option: str) -> str | None:
    """Why ``path`` cannot be made or used as an output folder (None when it can, or when not given):
    it is a file, the nearest part of it that exists is a file (``a-file/sub``), or a part of it cannot
    be examined (:func:`~gcbench.data.files.unexaminable`)."""
    if path is None:
        return None
    p = Path(path)
    try:
        q = nearest_existing(p)
    except OSError as err:
        return f"{option} {p}: {unexaminable(err)}"
    if q is None or q.is_dir():
        return None
    return f"{option} {p} is a file, not a folder" if q == p else f"{option} {p}: {q} is a file, not a folder"


def same_output_problem(*outputs: tuple[Optional[Path], str]) -> Optional[str]:
    """Why two output options (``(path, option)``) would write one file (None when they do not):
    the second write would replace the first."""
    seen: dict[Path, str] = {}
    for path, option in outputs:
        if path is None:
            continue
        key = Path(os.path.abspath(path)).resolve()
        if key in seen:
            return f"{option} {path} is the file {seen[key]} writes; give each output its own file"
        seen[key] = option
    return None
