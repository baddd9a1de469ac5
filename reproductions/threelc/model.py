"""The CIFAR-style ResNet of He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition"
(CVPR 2016), Section 4.2 — the family of 3LC's ResNet-110 workload.

Depth ``6n + 2``: a 3x3 convolution to ``width`` channels, three stages of ``n`` basic blocks (two
3x3 convolutions with batch normalisation each) at ``width``, ``2 width`` and ``4 width`` channels
(the first block of stages 2 and 3 halves the feature map with stride 2), global average pooling
and a fully connected layer. ``n = 1, 3, 18`` give ResNet-8, -20, -110; the paper's width is 16.
Shortcuts are identities, with zero-padded extra channels where the width doubles (the paper's
option A, the one it uses on CIFAR-10). Convolutions carry no bias (batch norm follows each);
weights get He (Kaiming) normal initialisation, as in the paper.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from gcbench.workloads.models import he_init_, seeded


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the (option A) shortcut, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride = stride
        self.extra = cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x
        if self.stride != 1:
            sc = sc[:, :, :: self.stride, :: self.stride]
        if self.extra:
            sc = F.pad(sc, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))
        return F.relu(out + sc)


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for small images (any side divisible by 4; 8x8 digits work too).

    Args:
        depth: ``6n + 2`` (8, 20, 32, 44, 56, 110...).
        width: channels of the first stage (16 in the paper).
        in_channels: 1 (grayscale) or 3 (RGB).
        classes: output classes.
    """

    def __init__(self, depth: int = 20, width: int = 16, in_channels: int = 3, classes: int = 10) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"a CIFAR ResNet has depth 6n+2 >= 8 (8, 20, 32, 44, 56, 110...), got {depth}")
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        n = (depth - 2) // 6
        self.depth, self.width = depth, width
        self.conv = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        blocks: list[nn.Module] = []
        c = width
        for stage, mult in enumerate((1, 2, 4)):
            for j in range(n):
                blocks.append(BasicBlock(c, width * mult, 2 if stage > 0 and j == 0 else 1))
                c = width * mult
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)
        he_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, in_channels, H, W)`` -> ``(batch, classes)`` logits."""
        h = F.relu(self.bn(self.conv(x)))
        h = self.blocks(h)
        return self.fc(h.mean(dim=(2, 3)))


def build_resnet(depth: int, width: int, in_channels: int, *, classes: int = 10, seed: int = 0) -> CifarResNet:
    """A :class:`CifarResNet` initialised under ``torch.manual_seed(seed)`` in a forked RNG (the
    caller's global random state is untouched), so every method of a run starts from the same weights."""
    return seeded(lambda: CifarResNet(depth, width, in_channels, classes), seed)


def with_batch_statistics(model: nn.Module, batches: Iterable[torch.Tensor]) -> nn.Module:
    """A copy of ``model`` whose batch-norm running statistics are its activations' mean and variance
    over ``batches`` (one training-mode pass without gradients, every layer's cumulative average):
    what evaluating a model that has not trained a step needs. With the defaults (mean 0, variance
    1) a deep ResNet's initial weights score far from what they are: ResNet-110's held-out loss is
    about 1e7 with them, a few units with its own statistics. ``model`` is left as it was."""
    net = copy.deepcopy(model)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the batches
    net.train()
    with torch.no_grad():
        for x in batches:
            net(x)
    return net.eval()
