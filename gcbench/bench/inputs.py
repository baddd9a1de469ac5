"""The synthetic inputs of ``gcbench bench`` (and the asv suite): sizes, dense and sparse tensors,
ResNet-50's layer shapes and the PowerSGD matrices among them. Every input is labelled as synthetic
where it is reported."""

from __future__ import annotations

import math
import re

import torch

#: Seed of every synthetic input.
SEED = 0


def parse_size(text: str | int) -> int:
    """``"25M"``, ``"1m"``, ``"500k"``, ``"1e6"`` or ``25000000`` -> an element count (>= 1)."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgG]?)\s*", str(text))
        if not m:
            raise ValueError(f"not a size: {text!r} (examples: 25M, 500k, 1000000)")
        scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2).lower()]
        try:
            value = float(m.group(1)) * scale
        except ValueError:
            raise ValueError(f"not a size: {text!r} (examples: 25M, 500k, 1000000)") from None
        if not math.isfinite(value):
            raise ValueError(f"not a finite size: {text!r}")
        if value != int(value):
            raise ValueError(f"not a whole number of elements: {text!r}")
        value = int(value)
    if value < 1:
        raise ValueError(f"size must be >= 1, got {value}")
    return value


#: Largest element count :func:`matrix_shape` factors (2**40): at most 2**20 trial divisions.
MAX_MATRIX_NUMEL = 1 << 40


def matrix_shape(numel: int) -> tuple[int, int]:
    """The most nearly square ``(rows, cols)`` with ``rows * cols == numel``.

    Raises:
        ValueError: ``numel`` below 1 or above :data:`MAX_MATRIX_NUMEL` (the search is bounded).
    """
    if not 1 <= numel <= MAX_MATRIX_NUMEL:
        raise ValueError(f"matrix_shape takes 1 to {MAX_MATRIX_NUMEL} elements, got {numel}")
    rows = next(d for d in range(math.isqrt(numel), 0, -1) if numel % d == 0)
    return rows, numel // rows


def make_dense_input(size: int, device: torch.device | str = "cpu", seed: int = SEED) -> torch.Tensor:
    """float32 N(0, 1) values of shape :func:`matrix_shape` ``(size)``, drawn on CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(matrix_shape(size), generator=gen).to(device)


def make_sparse_input(size: int, density: float, device: torch.device | str = "cpu", seed: int = SEED) -> torch.Tensor:
    """A coalesced 1-D sparse COO tensor of ``size`` elements: i.i.d. Bernoulli(``density``) keys,
    N(0, 1) values (drawn on CPU from ``seed``)."""
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    gen = torch.Generator().manual_seed(seed)
    keys = torch.nonzero(torch.rand(size, generator=gen) < density).reshape(-1)
    values = torch.randn(keys.numel(), generator=gen)
    return torch.sparse_coo_tensor(keys.unsqueeze(0), values, (size,), is_coalesced=True, check_invariants=False).to(device)


def resnet50_shapes(width_div: int = 1) -> list[tuple[str, tuple[int, ...]]]:
    """Parameter names and shapes of ``torchvision.models.resnet50()`` (bottlenecks 3-4-6-3,
    expansion 4, 1000 classes; 25,557,032 parameters in 161 tensors), read from the model built on
    the meta device (no memory), with every channel width divided by ``width_div`` (the input's 3
    channels, the kernel sizes and the 1000 classes stay)."""
    from torchvision.models import resnet50

    if width_div < 1:
        raise ValueError(f"width_div must be >= 1, got {width_div}")
    with torch.device("meta"):
        model = resnet50()

    def w(c: int) -> int:
        return max(1, c // width_div)

    shapes: list[tuple[str, tuple[int, ...]]] = []
    for name, p in model.named_parameters():
        s = tuple(p.shape)
        if name == "fc.weight":
            s = (s[0], w(s[1]))  # 1000 classes x the last stage's channels
        elif name == "fc.bias":
            pass
        elif len(s) == 4:  # conv (out, in, kh, kw); the stem's 3 input channels stay
            s = (w(s[0]), s[1] if name == "conv1.weight" else w(s[1]), s[2], s[3])
        else:  # batch-norm scale / shift
            s = (w(s[0]),)
        shapes.append((name, s))
    return shapes


def powersgd_matrices(
    rank: int = 4, width_div: int = 1, device: torch.device | str = "cpu", seed: int = SEED
) -> dict[str, torch.Tensor]:
    """N(0, 1) 'gradients' of the ResNet-50 layers that torch's ``powerSGD_hook`` compresses at
    ``rank`` (two or more dimensions and ``n m > 2 (n + m) r``, its default
    ``min_compression_rate``); the 1-D ones both implementations send uncompressed are left out."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in resnet50_shapes(width_div):
        if len(shape) < 2:
            continue
        n, m = shape[0], math.prod(shape[1:])
        r = min(n, m, rank)
        if (n + m) * r * 2 < n * m:
            out[name] = torch.randn(shape, generator=gen).to(device)
    return out


def resnet_width_div(size: int) -> int:
    """The power-of-two width divisor (1..64) whose ResNet-50 has the number of parameters
    closest to ``size`` (1 = the real ResNet-50, 25.6M)."""
    best, best_gap = 1, math.inf
    for div in (1, 2, 4, 8, 16, 32, 64):
        total = sum(math.prod(s) for _, s in resnet50_shapes(div))
        gap = abs(math.log(total / size))
        if gap < best_gap:
            best, best_gap = div, gap
    return best
