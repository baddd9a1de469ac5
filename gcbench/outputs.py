"""Result files written whole or not at all.

Every file a command writes for its user (``--json``, ``--markdown``, ``--plot``, RESULTS.md, a
reproduction's report, plots and results) is written into a new file beside it and moved over the
target only once it is complete (``os.replace``, atomic on one file system). A write that fails
part-way (a full disk, a file-size limit, an interrupt) leaves the file that was there as it was, and
ends in :class:`OutputWriteError`, which names the file and says so.

Two targets are written in place instead, as they are: a path that is not a regular file (a device or
a pipe such as ``/dev/stdout``, which cannot be replaced), and a file in a folder where no new file can
be created although the file itself is writable (there is nowhere to write beside it); the error then
says the file may be incomplete. A symbolic link is followed: the file it points to is replaced and the
link stays.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputWriteError(OSError):
    """A result file could not be written. ``path`` is the file; ``kept`` is True where the file that
    was there (or its absence) is as it was before the write began."""

    def __init__(self, path: str | os.PathLike, cause: OSError, *, kept: bool) -> None:
        why = cause.strerror or str(cause)
        state = ("the file that was there is unchanged" if kept
                 else "it was written in place and may be incomplete")
        super().__init__(cause.errno, f"cannot write {os.fspath(path)}: {why}; {state}")
        self.path, self.kept = Path(path), kept


def _in_place(path: Path) -> bool:
    """Whether ``path`` is an existing path that is not a regular file (written as it is)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a path to write the new content of ``path`` into (same folder, same suffix, so a writer that
    reads the format from the name, such as matplotlib's ``savefig``, keeps it); on a clean exit it is
    synced and moved over ``path`` (the old file's permission bits kept), on an error removed, and an
    ``OSError`` becomes :class:`OutputWriteError`. The folder must exist."""
    target = Path(path)
    direct: Path | None = target if _in_place(target) else None
    if direct is None:
        real = Path(os.path.realpath(target))
        tmp = real.with_name(f".{real.stem}.{secrets.token_hex(4)}{real.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's permissions
        except OSError as err:
            if not (os.access(real, os.W_OK) and os.path.isfile(real)):
                raise OutputWriteError(target, err, kept=True) from err
            direct = real  # nowhere to write beside it, but the file itself is writable
    if direct is not None:
        try:
            yield direct
        except OSError as err:
            raise OutputWriteError(target, err, kept=False) from err
        return
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if os.path.isfile(real):
            os.chmod(tmp, stat.S_IMODE(os.stat(real).st_mode))
        os.replace(tmp, real)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError) and not isinstance(err, OutputWriteError):
            raise OutputWriteError(target, err, kept=True) from err
        raise


def write_file(path: str | os.PathLike, data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Write ``data`` (text in ``encoding``, or bytes) as the whole of ``path``, whole or not at all
    (:func:`replacing`)."""
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    with replacing(path) as out:
        with open(out, "wb") as fh:
            fh.write(raw)
