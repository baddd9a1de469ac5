"""What a Sketched-SGD run asks for: the translation and image presets with the run's overrides,
and the methods of each.

Planning (:mod:`.workload`) and reporting (:mod:`.report`) both read these, so they live here and
neither of those modules imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.runner import RunContext
from ..framework.spec import Spec
from .methods import MethodConfig

#: Data set names (prefixes) that select the image experiments rather than translation.
IMAGE_PREFIXES = ("fashion", "fmnist", "cifar", "digits")


def is_image_dataset(name: str | None) -> bool:
    """Whether a ``--dataset`` value names image data (it then overrides the image preset's)."""
    return bool(name) and name.lower().startswith(IMAGE_PREFIXES)


def translation_preset(preset: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """A scale's translation preset with the run's overrides (dataset, workers, epochs = steps, lr): what
    the translation cells are configured with."""
    p = dict(preset["translation"])
    ds = options.get("dataset")
    if ds and not is_image_dataset(ds):
        p["dataset"] = ds
    if options.get("workers"):
        p["workers"] = int(options["workers"])
    if options.get("epochs"):
        p["steps"] = int(options["epochs"])
    if options.get("lr"):
        p["lr"] = {m: float(options["lr"]) for m in p["models"]}
    return p


class SketchedSGDSettings:
    """The spec, and the per-run presets and methods derived from it and the run's options."""

    def __init__(self, spec: Spec):
        self.spec = spec

    def check_options(self, scale: str, preset: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        """Refuse a ``dataset`` option that names neither an image nor a translation data set, before the
        run starts (an image name replaces the image experiments' data, any other the translation's)."""
        from gcbench.data.errors import UnknownDatasetError
        from gcbench.data.images import image_dataset_kind

        from .translation import check_corpus_name

        ds = options.get("dataset")
        if not ds:
            return
        if is_image_dataset(str(ds)):
            image_dataset_kind(str(ds))
            return
        try:
            check_corpus_name(str(ds))
        except UnknownDatasetError as err:
            raise UnknownDatasetError(f"{err}; the image experiments read 'fashion-mnist[:PATH]', 'cifar10[:PATH]', "
                                          "'cifar100[:PATH]' or 'digits'") from None

    def translation_preset(self, ctx: RunContext) -> dict[str, Any]:
        """The translation preset with the run's overrides (:func:`translation_preset`)."""
        return translation_preset(ctx.preset, ctx.options)

    def image_preset(self, ctx: RunContext) -> dict[str, Any]:
        """The image preset with the run's data set override and the preset's seed."""
        p = dict(ctx.preset["images"])
        ds = ctx.options.get("dataset")
        if ds and is_image_dataset(ds):
            p["dataset"] = ds
        p["seed"] = int(ctx.preset.get("seed", 0))
        return p

    def method(self, name: str, model: str, uncompressed_biases: bool | None = None) -> MethodConfig:
        """The translation method ``name`` for ``model`` (``k = d // d_per_k``, the paper's parameters
        per applied coordinate; biases as the
        workload's ``uncompressed_biases`` unless given). Sketched-SGD's ``P`` and columns are set
        later, by the paper's rule for the model's size (:meth:`.methods.MethodConfig.size_for`)."""
        w = self.spec.workload
        m = w["methods"][name]
        dense = bool(w.get("uncompressed_biases", True)) if uncompressed_biases is None else bool(uncompressed_biases)
        sparse = m["kind"] != "vanilla"
        d_per_k = int(w["d_per_k"][model]) if sparse else 0
        return MethodConfig(name=name, kind=m["kind"], k_fraction=1.0 / d_per_k if sparse else 0.0, d_per_k=d_per_k,
                            rows=int(w["rows"]), ratio=float(m.get("ratio", 0.0)), seed=int(w["sketch_seed"]),
                            dense_1d=dense and m["kind"] in ("true_topk", "sketched"))

    def image_methods(self) -> dict[str, MethodConfig]:
        """vanilla, local top-k, true top-k and Sketched-SGD for the images, every parameter compressed
        (``dense_1d`` off: ``uncompressed_biases`` applies to the translation methods)."""
        w = self.spec.workload
        im = w["images"]
        return {
            "vanilla": MethodConfig("vanilla", "vanilla"),
            "local_topk": MethodConfig("local_topk", "local_topk", k_fraction=float(im["local_topk_fraction"])),
            # the same k as Sketched-SGD, selected exactly: what the sketch approximates
            "true_topk": MethodConfig("true_topk", "true_topk", k_fraction=float(im["sketched_fraction"])),
            "sketched": MethodConfig("sketched", "sketched", k_fraction=float(im["sketched_fraction"]),
                                     rows=int(w["rows"]), ratio=float(im["sketched_ratio"]), seed=int(w["sketch_seed"])),
        }
