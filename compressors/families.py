"""Gradient-exchange methods built by name: the codec registry plus the methods that are not codecs.

A method whose exchange is more than one payload per tensor (Sketched-SGD's two rounds, with a
state that is not a residual) is not a :class:`~.base.Codec` and has no registry line: it is a
class with the declarations the execution layer reads (``protocol = "rounds"`` and a classmethod
``run_rounds``), listed in :data:`FAMILIES`. :func:`build` is what the DDP hook and the simulated
cluster call for a name, so they never name a method themselves.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import registry
from .errors import InvalidParameterError

#: Methods that are not registry codecs: name -> ``"module:attribute"`` in ``gcbench.compressors``.
FAMILIES: dict[str, str] = {"sketched-sgd": "methods.sketched_sgd:SketchedSGD"}


def names() -> list[str]:
    """Every name :func:`build` accepts: the registry's, then :data:`FAMILIES`."""
    return registry.names() + list(FAMILIES)


def build(name: str, **params: Any) -> Any:
    """The codec (or exchange method) called ``name`` with ``params``.

    Raises:
        UnknownCodecError: no such name.
        InvalidParameterError: an unknown parameter name or a bad value.
    """
    target = FAMILIES.get(name)
    if target is None:
        registry.check_names([name], also=list(FAMILIES))
        return registry.get(name, **params)
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
    registry.check_param_names(name, cls, params)
    try:
        return cls(**params)
    except TypeError as err:
        raise InvalidParameterError(f"{name}: {err}") from None
