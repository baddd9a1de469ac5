"""What a SketchML run asks for: methods, models, data set, learning rates.

Planning (:mod:`.workload`) and reporting (:mod:`.report`) both read these, so they live here and
neither of those modules imports the other's internals.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

import numpy as np

from ..framework.runner import RunContext
from ..framework.spec import Spec
from gcbench.envs.network import load_profile

from .critical_path import DriverModel
from .measures import min_trained_loss, priced_run, priced_sweep_rows
from .messages import MethodSpec
from .paperscale import METHODS as CALIBRATION_METHODS
from .paperscale import calibrated_quantities, calibration_rows

#: Quantity tag -> spec workload key of the profile the message-level experiment is priced under.
MSG_PROFILES = {"c1": "profile_fig8", "c2": "profile_tables"}

#: Table 3's default trained a second time, after the other variants (its own cell: ``repeat`` in the
#: config): the same computation's epoch time at two moments of one run, for the order's noise.
T3_REPEAT = "train-linear-sketchml-repeat"

#: Environment variable naming a LIBSVM file (e.g. KDD12) to use instead of the preset's data set.
DATA_ENV = "GCBENCH_SKETCHML_DATA"


#: Epochs of each learning-rate grid point where the preset sets no ``grid_epochs``.
GRID_EPOCHS = 10


def grid_epochs(preset: Mapping[str, Any]) -> int:
    """Epochs of each learning-rate grid point: the preset's ``grid_epochs``, else :data:`GRID_EPOCHS`
    (planning and the report both read this, so they cannot disagree)."""
    return int(preset.get("grid_epochs", GRID_EPOCHS))


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

    def check_options(self, scale: str, preset: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        """Refuse a ``dataset`` option that names no data set, before the run starts (see the runner's
        ``Workload``)."""
        from gcbench.data.prepare import check_dataset_name

        if options.get("dataset"):
            check_dataset_name(str(options["dataset"]))

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
            best = min_trained_loss(res["epochs"])  # the grid point's minimal loss over its trained epochs
            losses.append(math.inf if best is None else best)
        return float(grid[int(np.argmin(losses))])

    # -- the driver's critical path and the calibrated profile ----------------------------------------

    @property
    def calibration(self) -> Mapping[str, Any]:
        """The spec's ``[workload] calibration`` (cluster tag, fit rows, reverse-fit rows)."""
        return self.spec.workload["calibration"]

    @property
    def broadcast_copies(self) -> int | None:
        """The spec's ``broadcast_copies``: copies of the broadcast on the driver's link (Spark's
        TorrentBroadcast: 1), None for one per executor (the serial model)."""
        copies = self.spec.workload.get("broadcast_copies")
        return int(copies) if copies is not None else None

    def driver_models(self) -> dict[str, DriverModel]:
        """Quantity tag -> the driver's critical path under that cluster (spec ``driver_cores``,
        ``broadcast_copies``)."""
        w = self.spec.workload
        return {tag: DriverModel(int(w["driver_cores"][tag]), self.broadcast_copies) for tag in MSG_PROFILES}

    def training_driver(self) -> DriverModel:
        """How the training runs are priced: the driver's decode serial (a training cell records one driver
        time per iteration), the broadcast as the critical path prices it (``broadcast_copies``)."""
        return DriverModel(1, self.broadcast_copies)

    def priced(self, results: Mapping[str, Mapping[str, Any]], workers: int) -> dict[str, Mapping[str, Any]]:
        """``results`` with the training runs' modelled seconds priced from their recorded bytes
        (:func:`.measures.priced_run` under ``profile_tables``, the Fig. 8 sweep's rows under ``profile_fig8``,
        :func:`.measures.priced_sweep_rows`) with :meth:`training_driver`. The cells keep the serial model's
        seconds (``W`` broadcast copies) they recorded; the derivation and the report read these."""
        w, driver = self.spec.workload, self.training_driver()
        tables, fig8 = load_profile(w["profile_tables"]).link, load_profile(w["profile_fig8"]).link
        out: dict[str, Mapping[str, Any]] = {}
        for name, r in results.items():
            if "epochs" in r:
                out[name] = priced_run(r, tables, workers, driver)
            elif name == "fig8-sweep":
                if any("down_bytes_per_iteration" not in row for row in r["rows"]):
                    raise ValueError("the fig8-sweep cell records no bytes per iteration to price: recompute it")
                out[name] = {**r, "rows": priced_sweep_rows(r["rows"], fig8, workers, driver)}
            else:
                out[name] = r
        return out

    def calibrated(self, msg: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any], list[Any]]:
        """``cal.*`` quantities of the message-level result, the fits and the rows (see :mod:`.calibration`)."""
        cal = self.calibration
        tag = cal["cluster"]
        paper = {m: float(self.spec.value(f"t4.{m}.epoch_time").value) for m in CALIBRATION_METHODS}  # type: ignore[arg-type]
        rows = calibration_rows(msg, self.spec.workload[MSG_PROFILES[tag]], self.driver_models()[tag], paper)
        q, fits = calibrated_quantities(rows, tag, cal["fit"], cal["reverse"], cal["test"], float(cal["test_tolerance"]))
        return q, fits, rows
