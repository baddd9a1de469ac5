"""ResNet-18 for small images (the CIFAR-style variant) from ``torchvision.models``, for the L-GreCo
reproduction.

He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition" (CVPR 2016), Table 1's 18-layer
network: ``torchvision.models.resnet18`` (its ``ResNet`` class and forward pass, its ``BasicBlock``
stages [2, 2, 2, 2], 1x1 conv + batch-norm projection shortcuts where the shape changes: the
paper's option B). Two changes, both the usual CIFAR adaptation (L-GreCo trains ResNet-18 on 32x32
CIFAR-100 images: Sec. 5.1, Datasets and models; Sec. 5.3): the ImageNet stem (7x7 stride-2
convolution + max-pool) becomes one 3x3 stride-1 convolution over ``in_channels``, and every stage
can be narrowed to ``width * (1, 2, 4, 8)`` channels (torchvision fixes ``width = 64``, 11.2M
parameters for 10 classes; ``width = 16`` is the 2-core ``resnet`` scale) by rebuilding it from
torchvision's ``BasicBlock``. Global average pooling,
then a linear layer; any input side >= 1 works, so Fashion-MNIST (1x28x28), CIFAR (3x32x32), image
folders and the 8x8 digits fallback all run through the same model. Weights: He (Kaiming) normal
(fan-out) for convolutions, batch-norm scale 1 / shift 0 (torchvision's own initialisation),
torch's default for the linear layer.
"""

from __future__ import annotations

from torch import nn
from torchvision.models import ResNet, resnet18
from torchvision.models.resnet import BasicBlock, conv1x1, conv3x3

from gcbench.workloads.models import he_init_, seeded

#: Blocks per stage of ResNet-18.
RESNET18_BLOCKS = (2, 2, 2, 2)


def _stage(cin: int, cout: int, blocks: int, stride: int) -> nn.Sequential:
    """``blocks`` torchvision ``BasicBlock``\\ s; the first has stride ``stride`` and a projection
    shortcut when the shape changes (as ``torchvision.models.ResNet._make_layer`` builds them)."""
    down = None
    if stride != 1 or cin != cout:
        down = nn.Sequential(conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))
    return nn.Sequential(BasicBlock(cin, cout, stride, down), *[BasicBlock(cout, cout) for _ in range(blocks - 1)])


def cifar_resnet18(width: int = 64, in_channels: int = 3, classes: int = 10) -> ResNet:
    """``torchvision.models.resnet18(num_classes=classes)`` with the CIFAR stem and stages of
    ``width * (1, 2, 4, 8)`` channels (see the module docstring).

    Raises:
        ValueError: ``width``, ``in_channels`` or ``classes`` below 1.
    """
    if width < 1 or in_channels < 1 or classes < 1:
        raise ValueError(f"width, in_channels and classes must be >= 1, got {width}, {in_channels}, {classes}")
    import torch

    with torch.device("meta"):  # every parameterised module is replaced below: allocate nothing here
        m = resnet18(num_classes=classes)
    m.conv1 = conv3x3(in_channels, width)
    m.bn1 = nn.BatchNorm2d(width)
    m.maxpool = nn.Identity()  # CIFAR stem: no 2x down-sampling before the first stage
    c = width
    for i, blocks in enumerate(RESNET18_BLOCKS):
        cout = width * 2**i
        setattr(m, f"layer{i + 1}", _stage(c, cout, blocks, 1 if i == 0 else 2))
        c = cout
    m.fc = nn.Linear(c, classes)
    he_init_(m)
    return m


def build_resnet18(width: int = 64, in_channels: int = 3, classes: int = 10, *, seed: int = 0) -> ResNet:
    """:func:`cifar_resnet18` initialised under ``torch.manual_seed(seed)`` in a forked RNG (the
    caller's random state untouched), so every method of a run starts from the same weights."""
    return seeded(lambda: cifar_resnet18(width, in_channels, classes), seed)
