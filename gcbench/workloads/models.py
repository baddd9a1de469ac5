"""Small real models for distributed training runs on data that ships with a package.

* ``"mlp"``: the digits MLP ``64 -> 128 -> 64 -> 10`` (ReLU), :func:`gcbench.workloads.gradients.digits_mlp`
  - the same network the codec comparisons take gradients from.
* ``"cnn"``: a tiny CNN for the 8x8 digit images: two 3x3 convolutions (16 and 32 channels,
  padding 1, ReLU; 2x2 max-pool after the second) and a linear layer to 10 classes. Its 4-D
  convolution weights give low-rank codecs (PowerSGD) something other than plain matrices.

Both take a ``(batch, 64)`` float tensor of pixel intensities in [0, 1] (as
:func:`gcbench.data.digits.load_digits_tensors` returns) and produce ``(batch, 10)`` logits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import nn

from .gradients import digits_mlp

MODELS = ("mlp", "cnn")

_M = TypeVar("_M")


def seeded(factory: Callable[[], _M], seed: int) -> _M:
    """``factory()`` run under ``torch.manual_seed(seed)`` in a forked RNG: the same weights for a
    seed, and the caller's global random state untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def he_init_(module: nn.Module) -> None:
    """He et al. (CVPR 2016)'s initialisation in place: Kaiming normal (fan-out, ReLU) for every
    convolution, scale 1 and shift 0 for every batch norm; other layers keep torch's default."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class DigitsCNN(nn.Module):
    """Conv(1->16, 3x3) - ReLU - Conv(16->32, 3x3) - ReLU - MaxPool(2) - Linear(32*4*4 -> 10)."""

    def __init__(self, channels: Sequence[int] = (16, 32)) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            OrderedDict(
                [
                    ("conv1", nn.Conv2d(1, c1, 3, padding=1)),
                    ("relu1", nn.ReLU()),
                    ("conv2", nn.Conv2d(c1, c2, 3, padding=1)),
                    ("relu2", nn.ReLU()),
                    ("pool", nn.MaxPool2d(2)),
                ]
            )
        )
        self.out = nn.Linear(c2 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, 64)`` or ``(batch, 1, 8, 8)`` intensities in [0, 1]."""
        h = self.features(x.reshape(-1, 1, 8, 8))
        return self.out(h.flatten(1))


def build_model(name: str = "mlp", *, seed: int = 0) -> nn.Module:
    """Build ``name`` (one of :data:`MODELS`) with weights initialised under ``torch.manual_seed(seed)``
    in a forked RNG (the caller's global random state is untouched)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return seeded(digits_mlp if name == "mlp" else DigitsCNN, seed)
