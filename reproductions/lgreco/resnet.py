"""ResNet-18 for small images (the CIFAR-style variant), for the L-GreCo reproduction.

He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition" (CVPR 2016), Table 1's
18-layer network: four stages of two basic blocks ([2, 2, 2, 2]) at ``w``, ``2w``, ``4w``, ``8w``
channels (``w = 64`` in the paper; 11.2M parameters for 10 classes). For 28x28 / 32x32 inputs the
ImageNet stem (7x7 stride-2 convolution + max-pool) is replaced by one 3x3 stride-1 convolution, as
in the usual CIFAR adaptation (e.g. the "pytorch-cifar" ResNet18 that L-GreCo-style CIFAR runs use);
stages 2-4 halve the feature map with stride 2 and their first block has a 1x1 convolution +
batch norm shortcut (the paper's option B). Global average pooling, then a linear layer.

``width`` scales every stage (``width = 4`` gives a ~44k-parameter network for tests); any input
side >= 1 works (the pooling is global), so Fashion-MNIST (1x28x28), CIFAR (3x32x32), image folders
and the 8x8 digits fallback all run through the same code. Weights: He (Kaiming) normal for
convolutions, batch-norm scale 1 / shift 0, torch's default for the linear layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gcbench.models import he_init_, seeded

#: Blocks per stage of ResNet-18.
RESNET18_BLOCKS = (2, 2, 2, 2)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the shortcut (identity, or 1x1 conv + BN when the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18.

    Args:
        width: channels of the first stage (64 in the paper); stages have ``width * (1, 2, 4, 8)``.
        in_channels: 1 (grayscale) or 3 (RGB).
        classes: output classes.
    """

    def __init__(self, width: int = 64, in_channels: int = 3, classes: int = 10) -> None:
        super().__init__()
        if width < 1 or in_channels < 1 or classes < 1:
            raise ValueError(f"width, in_channels and classes must be >= 1, got {width}, {in_channels}, {classes}")
        self.width = width
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages = []
        c = width
        for i, n in enumerate(RESNET18_BLOCKS):
            cout = width * 2**i
            blocks = [BasicBlock(c, cout, 1 if i == 0 else 2)] + [BasicBlock(cout, cout, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            c = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(c, classes)
        he_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, in_channels, H, W)`` -> ``(batch, classes)`` logits."""
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(h.mean(dim=(2, 3)))


def build_resnet18(width: int = 64, in_channels: int = 3, classes: int = 10, *, seed: int = 0) -> ResNet18:
    """A :class:`ResNet18` initialised under ``torch.manual_seed(seed)`` in a forked RNG (the caller's
    random state untouched), so every method of a run starts from the same weights."""
    return seeded(lambda: ResNet18(width, in_channels, classes), seed)
