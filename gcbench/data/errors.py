"""Typed errors of the data loaders.

Both derive from :class:`gcbench.compressors.GCBenchError`, so one ``except`` catches every error
gcbench raises on bad input, and from the built-in they replace (``ValueError`` for a malformed
file, ``RuntimeError`` for data that are not here) so plain-Python callers keep working.
"""

from __future__ import annotations

from ..compressors.errors import GCBenchError


class DataFormatError(GCBenchError, ValueError):
    """A data file is malformed; the message names the file and, where known, the line."""


class DatasetUnavailableError(GCBenchError, RuntimeError):
    """A data set cannot be prepared or loaded here (missing package, bad checksum, no network)."""


class UnknownDatasetError(DatasetUnavailableError):
    """A data set name that no loader knows; the message lists the names that are accepted."""
