"""File helpers every data loader shares: the cache folder, compression detection, checksums."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

#: Environment variable naming the cache folder for prepared data sets (default ~/.cache/gcbench/data).
CACHE_ENV = "GCBENCH_DATA"


def default_cache_dir() -> Path:
    """``$GCBENCH_DATA`` or ``~/.cache/gcbench/data``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "gcbench" / "data"


#: Magic bytes of the compressed formats the loaders read, and the stdlib module that opens each.
COMPRESSED_MAGIC = {"gzip": (b"\x1f\x8b", gzip), "bzip2": (b"BZh", bz2), "xz": (b"\xfd7zXZ\x00", lzma)}


def open_maybe_compressed(path: str | os.PathLike, kinds: tuple[str, ...] = tuple(COMPRESSED_MAGIC)) -> IO[bytes]:
    """The file opened for binary reading, decompressed on the fly when it starts with the magic bytes
    of one of ``kinds`` (of :data:`COMPRESSED_MAGIC`). The caller closes it (``with``)."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    for kind in kinds:
        prefix, module = COMPRESSED_MAGIC[kind]
        if magic.startswith(prefix):
            return module.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def open_maybe_gzip(path: str | os.PathLike) -> IO[bytes]:
    """:func:`open_maybe_compressed` for gzip only (dictzip ``.dict.dz`` files are gzip files too)."""
    return open_maybe_compressed(path, ("gzip",))


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def staging_folder(parent: str | os.PathLike, prefix: str = ".tmp-") -> Iterator[Path]:
    """A new temporary folder inside ``parent`` (the same file system, so ``os.replace`` moves what was
    prepared there into place atomically), removed with whatever is left in it on exit, error or not."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: :func:`regular_file_problem`'s words for a path that does not exist.
NO_SUCH_FILE = "no such file"


def regular_file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a data file, or None: it must exist and be a regular file
    (a named pipe or device would block or never end; a folder cannot be read)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return NO_SUCH_FILE
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a named pipe, socket or device)"
    return None


def check_data_file(path: str | os.PathLike, what: str = "") -> None:
    """Raise unless ``path`` is a data file that can be read (:func:`regular_file_problem`); ``what``
    says what it should hold (``"a CIFAR archive is a .tar.gz file"``) after the reason.

    Raises:
        DatasetUnavailableError: no such file (a data set that is not here).
        DataFormatError: a folder, a named pipe, socket or device, or a path that cannot be examined
            (bad input: the caller named it).
    """
    from .errors import DataFormatError, DatasetUnavailableError

    problem = regular_file_problem(path)
    if problem is None:
        return
    message = f"{path}: {problem}" + (f" ({what})" if what else "")
    raise (DatasetUnavailableError if problem == NO_SUCH_FILE else DataFormatError)(message)


def nearest_existing(path: str | os.PathLike) -> Path | None:
    """The first of ``path`` and its parents (as given: a relative path ends at ``.``) that exists, or None.
    Where it is a folder, ``path`` can be used or created as one.

    Raises:
        OSError: one of them cannot be examined (e.g. a permission denied); ``filename`` names it.
    """
    p = Path(path)
    for q in (p, *p.parents):
        try:
            os.stat(q)
        except (FileNotFoundError, NotADirectoryError):  # look further up
            continue
        return q
    return None


def unexaminable(err: OSError) -> str:
    """The words for a path :func:`nearest_existing` could not examine (its ``OSError``): which one and why
    (e.g. a permission denied, a loop of symbolic links)."""
    return f"{err.filename} cannot be used ({err.strerror or err})"


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be used (or created) as a folder, or None: it, or the nearest of its
    parents that exists, is not a folder."""
    p = Path(path).absolute()
    try:
        q = nearest_existing(p)
    except OSError as err:
        return unexaminable(err)
    if q is None or q.is_dir():
        return None
    return f"{q} is not a folder" if q == p else f"{q} (a parent of it) is not a folder"
