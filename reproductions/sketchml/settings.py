"""What a SketchML run asks for: methods, models, data set, learning rates.

Planning (:mod:`.workload`) and reporting (:mod:`.report`) both read these, so they live here and
neither of those modules imports the other's internals.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from ..framework.runner import RunContext
from ..framework.spec import Spec
from .messages import MethodSpec

#: Environment variable naming a LIBSVM file (e.g. KDD12) to use instead of the preset's data set.
DATA_ENV = "GCBENCH_SKETCHML_DATA"


def grid_name(model: str, lr: float) -> str:
    """Name of the learning-rate grid cell of ``model`` at ``lr``."""
    return f"grid-{model}-lr{lr:g}"


class SketchMLSettings:
    """The spec's methods and models, and the per-run choices derived from the run's options."""

    def __init__(self, spec: Spec):
        self.spec = spec
        w = spec.workload
        self.methods = {name: MethodSpec.from_mapping(name, m) for name, m in w["methods"].items()}
        self.models = list(w["models"])

    @staticmethod
    def codec_mode(ctx: RunContext) -> str:
        """The preset's ``codec_mode``: the :mod:`gcbench.compressors.kernels.core` mode cells run codecs in,
        ``"eager"`` (default) or ``"compiled"`` (see :mod:`.workload`'s docstring)."""
        mode = str(ctx.preset.get("codec_mode", "eager"))
        if mode not in ("eager", "compiled"):
            raise ValueError(f"codec_mode must be 'eager' or 'compiled', got {mode!r}")
        return mode

    def dataset_key(self, ctx: RunContext) -> Any:
        """The data set of this run: the option, else ``$GCBENCH_SKETCHML_DATA``, else the preset's."""
        override = ctx.options.get("dataset") or os.environ.get(DATA_ENV)
        if override:
            return override
        return ctx.preset["dataset"]

    def lr_for(self, ctx: RunContext, model: str, done: Mapping[str, Mapping[str, Any]]) -> float | None:
        """The learning rate of ``model``: the preset's ``lr``, or the grid's best (None until it ran)."""
        if "lr" in ctx.options and ctx.options["lr"]:
            return float(ctx.options["lr"])
        lr = ctx.preset.get("lr")
        if isinstance(lr, Mapping):
            return float(lr[model])
        if lr is not None:
            return float(lr)
        grid = ctx.preset["lr_grid"]
        losses = []
        for g in grid:
            res = done.get(grid_name(model, g))
            if res is None:
                return None
            losses.append(res["summary"]["min_test_loss"])
        return float(grid[int(np.argmin(losses))])
