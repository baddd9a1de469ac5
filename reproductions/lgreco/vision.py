"""The image cells' data, model and evaluation: the sklearn digits as ``gcbench train`` splits them
(``mlp``/``cnn``), or an image data set for the ResNet-18 (:mod:`.resnet`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

class ImageData:
    """Training and evaluation tensors of an image cell, and what the report says about them."""

    def __init__(self, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                 classes: int, summary: dict[str, Any]) -> None:
        self.x_train, self.y_train, self.x_test, self.y_test = x_train, y_train, x_test, y_test
        self.classes, self.summary = classes, summary

    @property
    def n_train(self) -> int:
        """Training examples."""
        return int(self.x_train.shape[0])

    @property
    def channels(self) -> int:
        """Input channels (images) or 1 (flat digits)."""
        return int(self.x_train.shape[1]) if self.x_train.dim() == 4 else 1


def load_image_data(cfg: Mapping[str, Any]) -> ImageData:
    """The data of an image cell: the digits as ``gcbench train`` splits them (``mlp``/``cnn``), or
    ``cfg["dataset"]`` through :func:`gcbench.data.images.load_images` for ``resnet18`` (average-pooled to
    ``image_size`` when that divides the side, normalised with the training statistics; at most
    ``train_samples`` training and ``eval_samples`` test images).

    Raises:
        DatasetUnavailableError, DataFormatError: see :func:`gcbench.data.images.load_images`.
    """
    if cfg["model"] != "resnet18":
        from gcbench.data.digits import N_TRAIN, load_digits_tensors

        d = load_digits_tensors()
        n = d.x.shape[0]
        return ImageData(d.x[:N_TRAIN], d.y[:N_TRAIN], d.x[N_TRAIN:], d.y[N_TRAIN:], 10,
                         {"name": "digits", "description": f"sklearn digits ({n:,} 8x8 images; first {N_TRAIN:,} train, {n - N_TRAIN} test)"})
    from gcbench.data.images import load_images, to_float

    ds = load_images(cfg["dataset"], image_side=int(cfg.get("image_size") or 32))
    side = int(ds.x_train.shape[-1])
    want = int(cfg.get("image_size") or side)
    size = want if side % want == 0 else side
    n_tr = min(int(cfg.get("train_samples") or ds.x_train.shape[0]), int(ds.x_train.shape[0]))
    n_te = min(int(cfg.get("eval_samples") or ds.x_test.shape[0]), int(ds.x_test.shape[0]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the statistics' reductions depend on the thread count: ranks and the simulator must agree
    try:
        x_tr, mean, std = to_float(ds.x_train[:n_tr], size)
        x_te, _, _ = to_float(ds.x_test[:n_te], size, mean=mean, std=std)
    finally:
        torch.set_num_threads(threads)
    summary = {**ds.summary(), "used_train": n_tr, "used_test": n_te, "image_size": size,
               "resized": f"{side}x{side} -> {size}x{size} (average pooling)" if size != side else f"{side}x{side} (native)"}
    return ImageData(x_tr, ds.y_train[:n_tr].clone(), x_te, ds.y_test[:n_te].clone(), len(ds.classes), summary)


def build_image_model(cfg: Mapping[str, Any], data: ImageData) -> torch.nn.Module:
    """The cell's model, initialised from ``cfg["seed"]`` (the same weights for every method)."""
    if cfg["model"] == "resnet18":
        from .resnet import build_resnet18

        return build_resnet18(int(cfg["width"]), data.channels, data.classes, seed=cfg["seed"])
    from gcbench.workloads.models import build_model

    return build_model(cfg["model"], seed=cfg["seed"])


def evaluate_images(model: torch.nn.Module, data: ImageData, chunk: int = 512) -> dict[str, float]:
    """Training loss (over the first ``len(x_test)`` training images) and test accuracy, in evaluation
    mode (batch norm uses its running statistics)."""
    was = model.training
    model.eval()
    n = min(data.n_train, int(data.x_test.shape[0]))
    loss = 0.0
    correct = 0
    with torch.no_grad():
        for i in range(0, n, chunk):  # chunks bound memory (not a loop over examples)
            loss += float(F.cross_entropy(model(data.x_train[i : min(i + chunk, n)]), data.y_train[i : min(i + chunk, n)], reduction="sum"))
        for i in range(0, int(data.x_test.shape[0]), chunk):
            correct += int((model(data.x_test[i : i + chunk]).argmax(1) == data.y_test[i : i + chunk]).sum())
    model.train(was)
    return {"train_loss": loss / max(n, 1), "test_accuracy": correct / max(int(data.x_test.shape[0]), 1)}


def evaluate_digits(model: torch.nn.Module, data: ImageData) -> dict[str, float]:
    """Training loss over the whole training split and test accuracy, each in one batch, as
    ``gcbench train`` evaluates its digits models (the model's mode is left as it is)."""
    with torch.no_grad():
        train_loss = float(F.cross_entropy(model(data.x_train), data.y_train))
        test_acc = float((model(data.x_test).argmax(1) == data.y_test).float().mean())
    return {"train_loss": train_loss, "test_accuracy": test_acc}
