"""What a 3LC run asks for: its methods and sparsity multipliers, the data set and the training
configuration, and the per-stage byte totals of a cell.

Planning and deriving (:mod:`.workload`) and reporting (:mod:`.report`) all read these, so they
live here and neither of those modules imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..framework.runner import RunContext
from ..framework.spec import Spec
from .train import MethodSpec, TrainConfig

#: Classes of every data set of this reproduction (Fashion-MNIST, CIFAR-10, digits): ln of it is a
#: uniform guess's held-out loss, the bar the tie run must pass to stand for a training ResNet-110.
TIE_CLASSES = 10
#: The cell of the 32-bit run over a schedule ``length_check`` times as long (scales that set it), the
#: quantity of its final accuracy above the run's 32-bit one (points), and the accuracy claims' flag.
LONG_CELL, LENGTH_GAIN, SETTLED_FLAG = "long-32bit", "acc.length_gain_pp", "acc.schedule_settled"


def s_key(s: float) -> str:
    """``1.5 -> "1.50"`` (the suffix of 3LC method names and quantities)."""
    return f"{float(s):.2f}"


def stage_bytes(result: Mapping[str, Any]) -> dict[str, int]:
    """Per-stage byte totals of a 3LC cell, push and pull together."""
    out: dict[str, int] = {}
    for side in result["stages"].values():
        for k, v in side["bytes"].items():
            out[k] = out.get(k, 0) + int(v)
    return out


def paper_band(spec: Spec, value_id: str) -> tuple[float, float, str]:
    """A paper range of the spec (the abstract's traffic reduction, ``traffic.reduction``, or its time
    reduction, ``time.reduction``) as ``(low, high, "low–high×")``: the workload's time targets, the
    report's words and its plots' shaded bands."""
    lo, hi = (float(v) for v in spec.value(value_id).value)
    return lo, hi, f"{lo:g}–{hi:g}×"


class ThreeLCSettings:
    """The spec's methods (in report order) and sparsity multipliers, and the per-run choices."""

    def __init__(self, spec: Spec):
        self.spec = spec
        w = spec.workload
        self.methods = {name: MethodSpec.from_mapping(name, m) for name, m in w["methods"].items()}
        self.order = [m for m in w.get("order", list(self.methods)) if m in self.methods]
        self.sparsities = [float(s) for s in w["sparsity_multipliers"]]
        for s in self.sparsities:
            if f"3lc-s{s_key(s)}" not in self.methods:
                raise ValueError(f"{spec.path}: no [workload.methods.\"3lc-s{s_key(s)}\"] for sparsity multiplier {s}")

    def check_options(self, scale: str, preset: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        """Refuse a ``dataset`` option that names no image data set, before the run starts."""
        from gcbench.data.images import image_dataset_kind

        if options.get("dataset"):
            image_dataset_kind(str(options["dataset"]))

    def dataset_choice(self, ctx: RunContext) -> tuple[str, str | None]:
        """``(data set to use, why it is not the preset's)``; the fallback replaces a missing Fashion-MNIST."""
        override = ctx.options.get("dataset")
        if override:
            return str(override), None
        want = str(ctx.preset["dataset"])
        fallback = ctx.preset.get("fallback")
        if want.split(":")[0] == "fashion-mnist" and fallback:
            from gcbench.data.images import FASHION_HOWTO, find_fashion_mnist

            if find_fashion_mnist(want.partition(":")[2] or None) is None:
                return str(fallback), f"Fashion-MNIST was not found, so this run used `{fallback}` instead. {FASHION_HOWTO}"
        return want, None

    def tie_config(self, ctx: RunContext) -> tuple[str, TrainConfig, int] | None:
        """``(method, config, evaluated test images)`` of the scale's ``tie-`` cell: the sub-table's
        model over the first ``steps`` steps of the run's schedule; None at a scale without one."""
        sub = ctx.preset.get("proxy_tie")
        if not isinstance(sub, Mapping):
            return None
        m = str(sub["method"])
        if m not in self.methods or not self.methods[m].is_3lc:
            raise ValueError(f"{self.spec.path}: proxy_tie method {m!r} is not a 3LC method of [workload.methods]")
        cfg = self.run_config(ctx)
        steps = min(int(sub["steps"]), cfg.steps)
        tcfg = dataclasses.replace(cfg, depth=int(sub["depth"]), steps=steps, horizon=cfg.steps, eval_every=steps,
                                   stage_check_every=max(steps, 1))
        return m, tcfg, int(sub["eval_samples"])

    def length_config(self, ctx: RunContext) -> TrainConfig | None:
        """The :class:`TrainConfig` of the scale's ``long-32bit`` cell: the run's schedule stretched to
        ``length_check`` times its steps (warm-up, evaluations and stage checks stretched alike, so the
        learning rate at each fraction of the run is the run's); None at a scale without ``length_check``."""
        if "length_check" not in ctx.preset:
            return None
        f = int(ctx.preset["length_check"])
        if f < 2:
            raise ValueError(f"{self.spec.path}: length_check must be an integer >= 2, got {ctx.preset['length_check']!r}")
        cfg = self.run_config(ctx)
        return dataclasses.replace(cfg, steps=cfg.steps * f, warmup_steps=cfg.warmup_steps * f, eval_every=cfg.eval_every * f,
                                   stage_check_every=cfg.stage_check_every * f,
                                   horizon=None if cfg.horizon is None else cfg.horizon * f)

    def run_config(self, ctx: RunContext) -> TrainConfig:
        """The :class:`TrainConfig` of this run's ``train-`` cells (preset, overridden by the options)."""
        return self.config_from(ctx.preset, ctx)

    def config_from(self, p: Mapping[str, Any], ctx: RunContext) -> TrainConfig:
        """A :class:`TrainConfig` from preset ``p`` and the run's options."""
        w = self.spec.workload
        return TrainConfig(
            depth=int(p["depth"]), width=int(p["width"]), workers=int(ctx.options.get("workers") or p["workers"]),
            batch_per_worker=int(p["batch_per_worker"]), steps=int(ctx.options.get("epochs") or p["steps"]),
            lr=float(ctx.options.get("lr") or p["lr"]), momentum=float(w["momentum"]), weight_decay=float(w["weight_decay"]),
            warmup_steps=int(p.get("warmup_steps", 0)), schedule=str(p.get("schedule", "cosine")),
            eval_every=int(p["eval_every"]), seed=int(p.get("seed", 0)), stage_check_every=int(p["stage_check_every"]),
            profiles=tuple(w["profiles"]),
        )
