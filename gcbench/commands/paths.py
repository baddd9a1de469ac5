"""Checks of the output folders the commands write into, made before any work starts."""

from __future__ import annotations

import os
from pathlib import Path


def output_dir_problem(path: str | os.PathLike | None, option: str) -> str | None:
    """Why ``path`` cannot be made or used as an output folder (None when it can, or when not given):
    it is a file, or the nearest part of it that exists is a file (``a-file/sub``)."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"{option} {p} is a file, not a folder"
    for parent in p.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{option} {p}: {parent} is a file, not a folder"
    return None
