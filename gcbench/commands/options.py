"""Checks of options that several commands share, made before any work starts: output folders and files,
seeds (the device: :func:`gcbench.workloads.devices.resolve_device`)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Optional

from ..data.files import nearest_existing, unexaminable

#: Seeds of ``gcbench compare``: ``0 <= seed < 2**63``, what torch's and numpy's generators take.
COMPARE_SEED_LIMIT = 1 << 63
#: Seeds of ``gcbench train``: ``0 <= seed < 2**32``, a narrower range because the run derives further
#: seeds from it (the batch order's ``seed * 1_000_003 + epoch``), which must stay within torch.manual_seed's.
TRAIN_SEED_LIMIT = 1 << 32


def seed_bound(limit: int) -> str:
    """The largest seed below ``limit`` (a power of two) as every command writes it, e.g. ``2**32 - 1``."""
    return f"2**{limit.bit_length() - 1} - 1"


def check_seed(seed: int, limit: int, option: str = "--seed") -> int:
    """``seed`` when ``0 <= seed < limit``; else a ValueError naming ``option`` and the range."""
    if not 0 <= seed < limit:
        raise ValueError(f"{option} must be between 0 and {seed_bound(limit)}, got {seed}")
    return seed


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
    if q is None:
        return None
    if not q.is_dir():
        return f"{option} {p} is a file, not a folder" if q == p else f"{option} {p}: {q} is a file, not a folder"
    why = folder_write_problem(q)  # read-only, /proc, permissions: refused here, not after the work
    return f"{option} {p}: cannot write in {q} ({why})" if why else None


def folder_write_problem(folder: str | os.PathLike) -> str | None:
    """Why nothing can be created in the existing folder ``folder`` (the OS's words), or None. Tried, not
    read from permission bits (which say nothing to root, nor about /proc or a read-only mount): an empty
    folder is made in it and removed at once."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".gcbench-probe-"))
    except OSError as err:
        return err.strerror or str(err)
    return None


def output_file_problem(path: Optional[Path], option: str) -> Optional[str]:
    """Why ``path`` cannot be written as an output file (None when it can, or when not given): it is a
    folder, its folder does not exist, or the file cannot be created or written there (read-only, /proc,
    permissions). Checked before any work, so a run never ends in a traceback when it saves its results;
    a file created to find that out is removed, an existing one is left as it was."""
    if path is None:
        return None
    if path.is_dir():
        return f"{option} {path} is a folder; give a file name"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"{option} {path}: folder {parent} does not exist"
    try:
        if os.path.lexists(path):
            if stat.S_ISREG(os.stat(path).st_mode):  # a device or pipe (/dev/stdout) is written as it is
                with open(path, "ab"):
                    pass
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(path)
    except OSError as err:
        return f"{option} {path} cannot be written ({err.strerror or err})"
    return None


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
