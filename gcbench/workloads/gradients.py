"""Real gradients for quick codec comparisons, from data bundled with scikit-learn.

A codec's error and size depend on the distribution of what it compresses; Gaussian noise flatters
or punishes codecs in ways real gradients do not. These helpers train a small model for a few steps
on real data (no download, fixed seed, CPU, deterministic) and return the gradients of the *next*
mini-batch, keyed by parameter name like ``model.named_parameters()``:

* :func:`digits_gradients`: an MLP 64-128-64-10 (ReLU, cross-entropy) on the digits images -
  dense gradients, weight matrices keep their shapes (low-rank codecs need matrices).
* :func:`digits_sparse_gradient`: binary logistic regression (digit >= 5) on the sparse
  one-hot + adjacent-pair-cross features of :func:`gcbench.data.digits.digits_cross_features` -
  a sparse COO gradient holding exactly the features present in the batch (about 10% of 38,080),
  the key-value gradients SketchML was designed for.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..data.digits import CROSS_DESCRIPTION, DIGITS_DESCRIPTION, digits_cross_features, load_digits_tensors


def digits_mlp(hidden: Sequence[int] = (128, 64)) -> nn.Sequential:
    """The MLP ``64 -> hidden... -> 10`` with ReLU; layers are named ``fc1, fc2, ..., out``."""
    layers: list[tuple[str, nn.Module]] = []
    width = 64
    for i, h in enumerate(hidden, start=1):
        layers += [(f"fc{i}", nn.Linear(width, h)), (f"relu{i}", nn.ReLU())]
        width = h
    layers.append(("out", nn.Linear(width, 10)))
    return nn.Sequential(OrderedDict(layers))


def digits_gradients(
    seed: int = 0,
    steps: int = 10,
    *,
    batch_size: int = 64,
    hidden: Sequence[int] = (128, 64),
    lr: float = 1e-3,
    flatten: bool = False,
) -> dict[str, torch.Tensor]:
    """Gradients of a digits MLP after ``steps`` Adam steps, on the next mini-batch.

    The model is initialised under ``torch.manual_seed(seed)`` inside a forked RNG (the caller's
    global RNG state is untouched) and mini-batches are drawn without replacement from a generator
    seeded with ``seed``, so the result depends only on the arguments (and the torch build).

    Args:
        seed: model initialisation and batch order.
        steps: Adam steps taken before the gradient is recorded (0 = the initial model).
        batch_size: images per mini-batch (at most 1797).
        hidden: hidden layer widths.
        lr: Adam learning rate.
        flatten: return 1-D tensors instead of the parameter shapes.

    Returns:
        ``{parameter name: float32 CPU gradient}`` in ``named_parameters()`` order.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    data = load_digits_tensors()
    n = data.x.shape[0]
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in 1..{n}, got {batch_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = digits_mlp(hidden)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def batch_loss() -> torch.Tensor:
        idx = torch.randperm(n, generator=gen)[:batch_size]
        return F.cross_entropy(model(data.x[idx]), data.y[idx])

    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        batch_loss().backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    batch_loss().backward()
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.detach().clone()
        out[name] = g.reshape(-1) if flatten else g
    return out


def digits_sparse_gradient(
    seed: int = 0,
    steps: int = 10,
    *,
    batch_size: int = 64,
    lr: float = 0.05,
) -> dict[str, torch.Tensor]:
    """A sparse logistic-regression gradient on the digits cross features.

    Binary logistic regression (label: digit >= 5, no bias, weights start at 0) on
    :func:`gcbench.data.digits.digits_cross_features`, trained ``steps`` Adam steps on mini-batches
    drawn with a generator seeded with ``seed``; the gradient of the mean log-loss on the next
    mini-batch is returned restricted to the features present in that batch.

    Returns:
        ``{"logreg.weight": coalesced float32 sparse COO tensor of shape (38080,)}``; its indices are
        exactly the active features of the batch.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    feats = digits_cross_features()
    n = feats.index.shape[0]
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in 1..{n}, got {batch_size}")
    label = (feats.y >= 5).to(torch.float32)
    w = torch.zeros(feats.dim, requires_grad=True)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([w], lr=lr)

    def batch_loss() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randperm(n, generator=gen)[:batch_size]
        index, mask = feats.index[idx], feats.mask[idx]
        logits = (w[index] * mask).sum(dim=1)  # X_b @ w as a gather over the active ids
        return F.binary_cross_entropy_with_logits(logits, label[idx]), index[mask]

    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        batch_loss()[0].backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    loss, active_ids = batch_loss()
    loss.backward()
    active = torch.unique(active_ids)  # sorted
    values = w.grad.detach()[active].clone()
    grad = torch.sparse_coo_tensor(active.unsqueeze(0), values, (feats.dim,), is_coalesced=True, check_invariants=True)
    return {"logreg.weight": grad}


def describe_dense(seed: int, steps: int) -> str:
    """One line naming exactly what :func:`digits_gradients` returned (for reports)."""
    return (
        f"MLP 64-128-64-10 (ReLU, cross-entropy) on {DIGITS_DESCRIPTION}; gradient of one batch of 64 "
        f"after {steps} Adam steps (lr 1e-3), seed {seed}"
    )


def describe_sparse(seed: int, steps: int) -> str:
    """One line naming exactly what :func:`digits_sparse_gradient` returned (for reports)."""
    return (
        f"binary logistic regression (digit >= 5) on {CROSS_DESCRIPTION}; gradient of one batch of 64 after "
        f"{steps} Adam steps (lr 0.05), seed {seed}, restricted to the batch's active features (sparse COO)"
    )
