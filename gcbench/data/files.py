"""File helpers every data loader shares: the cache folder, gzip detection, checksums."""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path
from typing import IO

#: Environment variable naming the cache folder for prepared data sets (default ~/.cache/gcbench/data).
CACHE_ENV = "GCBENCH_DATA"


def default_cache_dir() -> Path:
    """``$GCBENCH_DATA`` or ``~/.cache/gcbench/data``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "gcbench" / "data"


def open_maybe_gzip(path: str | os.PathLike) -> IO[bytes]:
    """The file opened for binary reading, decompressed on the fly when it starts with the gzip magic
    bytes (dictzip ``.dict.dz`` files are gzip files too). The caller closes it (``with``)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
