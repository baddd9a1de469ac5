"""Typed errors of gcbench's execution environments (DDP hook, simulated cluster, launcher).

They derive from :class:`gcbench.compressors.GCBenchError`, as do the parameter and input errors the
environments raise (``InvalidParameterError``, ``UnsupportedInputError``), so one ``except`` catches
every error of bad input or bad use.
"""

from __future__ import annotations

from ..compressors.errors import GCBenchError


class EnvError(GCBenchError):
    """Base class of errors raised by :mod:`gcbench.envs`."""


class CollectiveMismatchError(EnvError, RuntimeError):
    """Workers disagree about something that must be identical on every rank before a collective:
    the shared (non-summed) sections of a linear codec's payloads, section lengths, tensor shapes."""


class UnsupportedTopologyError(EnvError, ValueError):
    """A codec asked to run on a topology it cannot use (e.g. all_reduce for a non-linear codec)."""


class WorkerFailedError(EnvError, RuntimeError):
    """A rank of a distributed run died, raised, or stopped making progress.

    Attributes:
        ranks: the ranks held responsible (dead, or the slowest when the run hung).
        reason: ``"died"``, ``"raised"`` or ``"hung"``.
    """

    def __init__(self, message: str, *, ranks: tuple[int, ...] = (), reason: str = "") -> None:
        super().__init__(message)
        self.ranks = tuple(ranks)
        self.reason = reason


class ProfileError(EnvError, ValueError):
    """A cluster profile file that is missing, malformed, or names an unknown topology."""
