"""What an L-GreCo run asks for: the methods, the codecs, the image and text data sets and the
training configuration with the run's overrides.

Planning and deriving (:mod:`.workload`) and reporting (:mod:`.report`) all read these, so they
live here and neither of those modules imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.runner import RunContext
from ..framework.spec import Spec
from ..framework.settling import claims_bound, settled
from .metrics import accordion_critical_share, accordion_forced_share

#: Bump when the workload's code changes what a cell computes (invalidates cached cells).
CODE_VERSION = 9  # 9: L-GreCo's decisions carry the budget's independent measurement (.budget); 8: QSGD / TernGrad / ZipML uniforms from compressors.kernels.dither (DITHER_VERSION 2)
METHODS = ("uniform", "lgreco", "accordion", "cgx", "lgreco+accordion")
#: Extra method of the TopK cells (after ``lgreco``, whose mean overall density it uses): the whole
#: model compressed at once by :func:`gcbench.envs.ddp_hook.gcbench_global_hook` (Sec. 5.3).
GLOBAL_TOPK = "global-topk"
LABELS = {"uniform": "Uniform", "lgreco": "L-GreCo", "accordion": "Accordion", "cgx": "CGX-kmeans",
          "lgreco+accordion": "L-GreCo + Accordion", "uncompressed": "uncompressed",
          GLOBAL_TOPK: "global TopK (L-GreCo's mean density)"}
#: Quantity ids of each method.
METHOD_IDS = {"uniform": "uniform", "lgreco": "lgreco", "accordion": "accordion", "cgx": "cgx",
              "lgreco+accordion": "lgreco_accordion", GLOBAL_TOPK: "global_topk"}
#: Short report labels of Table 4's methods, by quantity id (the "ours" column of the claims tables).
TABLE4_SHORT = {"uniform": "uniform", "lgreco": "L-GreCo", "accordion": "Accordion", "cgx": "CGX",
                "lgreco_accordion": "L-GreCo+Accordion"}


def table4_labels(unit: str) -> dict[str, str]:
    """Report labels of Table 4's compression ratios and of the single-node throughputs modelled with
    overlap (uniform and L-GreCo), whose unit is ``unit`` (tokens/s for the LM, img/s for the images)."""
    return {**{f"t4.{mid}.ratio": f"{name} (x)" for mid, name in TABLE4_SHORT.items()},
            **{f"t4.{mid}.tput_single_overlap": f"{TABLE4_SHORT[mid]} ({unit}, modelled: lgreco-single-node profile, 8 GPUs, overlapped)"
               for mid in ("uniform", "lgreco")}}


#: Models of the image cells: the digits models of gcbench.workloads.models and the ResNet-18 of .resnet.
IMAGE_MODELS = ("mlp", "cnn", "resnet18")
#: The configuration-derived flag of the claims that rest on Accordion's ratio or on the calibration fitted
#: on Accordion's row: 1 where the share of the ratio window the schedule forces on Accordion
#: (:func:`.metrics.accordion_forced_share`) is at most the share at 2D that Table 4's own ratios imply.
FORCED_FLAG = "t4.forced_within_paper"
#: The final-metric claim's measured flag: whether the uncompressed image training's cross entropy
#: has settled (:mod:`..framework.settling`).
IMAGE_SETTLED_FLAG = "acc.settled"
#: Preset keys of the ResNet-18 cells (beyond the common ones).
RESNET_KEYS = ("dataset", "width", "image_size", "eval_samples", "train_samples", "weight_decay")




def _require_digits(model: str, scale: str, want: str) -> None:
    """The digits models take the sklearn digits only.

    Raises:
        DatasetUnavailableError: ``want`` names another image data set.
    """
    from gcbench.data.errors import DatasetUnavailableError

    if want.partition(":")[0].strip().lower() != "digits":
        raise DatasetUnavailableError(
            f"the {model} model of scale {scale!r} takes the sklearn digits only; image data set {want!r} "
            "needs a ResNet-18 scale (--scale resnet, --scale full)"
        )


class LGreCoSettings:
    """The spec's codecs and the per-run configuration derived from the preset and the run's options."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.codecs = {k: dict(v) for k, v in spec.workload["codecs"].items()}

    def paper_critical_share(self) -> float | None:
        """The share of training at Accordion's low-compression setting that Table 4's uniform and
        Accordion ratios imply (:func:`.metrics.accordion_critical_share` of the spec's values: 6.0%)."""
        return accordion_critical_share(self.spec.value("t4.uniform.ratio").value, self.spec.value("t4.accordion.ratio").value)

    def forced_flags(self, steps: int, warmup: int, every: int, since: int) -> dict[str, float | None]:
        """``t4.accordion.forced_share`` (:func:`.metrics.accordion_forced_share` of the run's configuration,
        ratio window from step ``since``) and :data:`FORCED_FLAG`: 1 where that share is at most
        :meth:`paper_critical_share`, 0 where more. Both follow from the configuration and Table 4's values;
        no measurement enters them."""
        forced, bound = accordion_forced_share(steps, warmup, every, since), self.paper_critical_share()
        flag = None if forced is None or bound is None else float(forced <= bound)
        return {"t4.accordion.forced_share": forced, FORCED_FLAG: flag}

    def accordion_quantities(self, measured: Mapping[str, float | None], steps: int, warmup: int, every: int,
                             since: int) -> dict[str, float | None]:
        """``t4.accordion.critical_share``, as information: the share at 2D that the run's uniform and
        Accordion ratios imply (:func:`.metrics.accordion_critical_share`); and :meth:`forced_flags` of the
        run's configuration, which the claims on Accordion's ratio and the calibration name."""
        share = accordion_critical_share(measured.get("t4.uniform.ratio"), measured.get("t4.accordion.ratio"))
        return {"t4.accordion.critical_share": share, **self.forced_flags(steps, warmup, every, since)}

    def final_metric_bound(self) -> float | None:
        """The tolerance of the claims whose ``testable`` is :data:`IMAGE_SETTLED_FLAG` (the final-metric
        claim, 1%): :func:`..framework.settling.claims_bound`."""
        return claims_bound(self.spec, IMAGE_SETTLED_FLAG)

    def image_settled_flags(self, measured: Mapping[str, float | None]) -> dict[str, float | None]:
        """:data:`IMAGE_SETTLED_FLAG`: whether the uncompressed image training's cross entropy falls by at most
        :meth:`final_metric_bound` over the run's last tenth (``acc.uncompressed.loss_fall``)."""
        return {IMAGE_SETTLED_FLAG: settled(measured.get("acc.uncompressed.loss_fall"), self.final_metric_bound())}

    def run_config(self, ctx: RunContext) -> dict[str, Any]:
        """The image cells' config: the preset's training keys with the run's overrides (workers, steps, lr)
        and, for ResNet-18, its data set keys and the data set of :meth:`dataset_choice`."""
        p = ctx.preset
        cfg = {k: p[k] for k in ("model", "steps", "every", "warmup", "batch", "lr", "momentum", "bucket_cap_mb", "seed")}
        cfg["workers"] = int(ctx.options.get("workers") or p["workers"])
        if ctx.options.get("epochs"):
            cfg["steps"] = int(ctx.options["epochs"])
        if ctx.options.get("lr"):
            cfg["lr"] = float(ctx.options["lr"])
        if cfg["model"] not in IMAGE_MODELS:
            raise ValueError(f"{self.spec.path}: model must be one of {IMAGE_MODELS}, got {cfg['model']!r}")
        dataset, _ = self.dataset_choice(ctx)
        if cfg["model"] == "resnet18":
            cfg.update({k: p[k] for k in RESNET_KEYS if k in p})
            cfg["dataset"] = dataset
        return cfg

    def check_options(self, scale: str, preset: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        """Refuse, before the run starts, a ``dataset`` option that names no image or text data set, or an
        image data set other than digits for a scale whose model is the digits MLP."""
        from gcbench.data.errors import DatasetUnavailableError, UnknownDatasetError
        from gcbench.data.images import image_dataset_kind

        from .lm import is_text_dataset

        ds = options.get("dataset")
        if not ds or is_text_dataset(str(ds)):
            return
        digits_model = preset["model"] not in ("resnet18", "tlm")
        try:
            image_dataset_kind(str(ds))
        except UnknownDatasetError as err:
            raise UnknownDatasetError(f"{err}; the language model reads 'pydoc' or 'wikitext103[:FOLDER]'") from None
        except DatasetUnavailableError:
            # a digits model refuses another data set below, with its own reason; 'digits:PATH' is refused here
            if not digits_model or str(ds).partition(":")[0].strip().lower() == "digits":
                raise
        if digits_model:
            _require_digits(str(preset["model"]), scale, str(ds))

    def dataset_choice(self, ctx: RunContext) -> tuple[str, str | None]:
        """``(image data set, why it is not the preset's)``; a missing Fashion-MNIST is replaced by the
        preset's ``fallback`` (the report says so). The digits MLP/CNN take only ``digits``.

        Raises:
            DatasetUnavailableError: an image data set other than digits for a digits model.
        """
        from .lm import is_text_dataset

        p = ctx.preset
        override = ctx.options.get("dataset")
        if override and not is_text_dataset(str(override)):
            want, fallback = str(override), None
        else:
            want, fallback = str(p.get("dataset", "digits")), p.get("fallback")
        if p["model"] != "resnet18":
            _require_digits(str(p["model"]), ctx.scale, want)
            return "digits", None
        if want.split(":")[0] == "fashion-mnist" and fallback:
            from gcbench.data.images import FASHION_HOWTO, find_fashion_mnist

            if find_fashion_mnist(want.partition(":")[2] or None) is None:
                return str(fallback), f"Fashion-MNIST was not found, so this run used `{fallback}` instead. {FASHION_HOWTO}"
        return want, None

    def text_choice(self, ctx: RunContext) -> tuple[str, str | None]:
        """``(the LM's text, why it is not the preset's)``: the ``dataset`` option when it names a text
        data set; else the ``lm`` table's ``dataset`` (default ``pydoc``), where a WikiText-103 that is
        not found (:func:`.lm.find_wikitext`) is replaced by the table's ``fallback``. A WikiText found
        here is named by its folder, so the ranks read the same files."""
        from .lm import TEXT_DATASETS, WIKITEXT_HOWTO, find_wikitext, is_text_dataset

        lm = ctx.preset.get("lm") or ctx.preset  # a language-model scale (model "tlm") names its text at the top
        override = ctx.options.get("dataset")
        if override and is_text_dataset(str(override)):
            want, fallback = str(override), None
        else:
            want, fallback = str(lm.get("dataset", "pydoc")), lm.get("fallback")
        name, _, arg = want.partition(":")
        if name.strip().lower() in TEXT_DATASETS:
            found = find_wikitext(arg or None)
            if found is not None:
                return f"{name}:{found}", None
            if fallback:
                return str(fallback), f"WikiText-103 was not found, so the LM used `{fallback}` instead. {WIKITEXT_HOWTO}"
        return want, None

    def lm_config(self, ctx: RunContext, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The LM cells' config: the preset's ``lm`` over the common one, the text of :meth:`text_choice`."""
        lm = ctx.preset["lm"]
        common = {k: v for k, v in cfg.items() if k not in RESNET_KEYS}
        lcfg = {**common, **{k: v for k, v in lm.items() if k not in ("codec", "methods", "fallback")}, "model": "tlm"}
        lcfg["dataset"] = self.text_choice(ctx)[0]
        device = str(ctx.options.get("device") or "cpu")
        if device != "cpu":  # in the cell's key: a result on another device is another cell; CPU keys unchanged
            lcfg["device"] = device
        return lcfg

    @staticmethod
    def model_label(cfg: Mapping[str, Any]) -> str:
        """``"digits MLP"``, ``"digits CNN"`` or ``"ResNet-18 (width 64)"``."""
        if cfg["model"] == "resnet18":
            return f"ResNet-18 (width {cfg['width']})"
        return f"digits {cfg['model'].upper()}"
