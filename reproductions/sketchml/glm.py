"""The generalised linear models of SketchML §4.1: Logistic Regression, SVM and Linear regression.

Labels are ``y`` in {0, 1} in the data sets; the models use ``s = 2y - 1`` in {-1, +1}, as the
released code does for all three (``org.dma.sketchml.ml.objective.Loss``). With margin ``m = x . w``::

    lr      loss = log(1 + exp(-s m))        d/dm = -s / (1 + exp(s m))
    svm     loss = max(0, 1 - s m)           d/dm = -s where s m <= 1, else 0   (the code's subgradient)
    linear  loss = (m - s)^2 / 2             d/dm = m - s

The reported loss is the mean data loss on the test set, as the code's validation loss
(``ValidationUtil.calLossPrecision``); the training objective adds ``(λ/2)||w||^2`` (λ = 0.01).

A worker's gradient is *sparse key-value*: only the features present in its rows with a non-zero
``d/dm`` have a key. As in the released code (``GradientDescent.miniBatchGradientDescent`` then
``l2Reg`` on the sparse gradient), the worker averages over its own mini-batch and adds ``λ w_k`` to
each of *its* keys before compressing (lazy ℓ2): regularisation travels inside the compressed message.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

MODELS = ("lr", "svm", "linear")


def _check(model: str) -> None:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def signs(y: np.ndarray) -> np.ndarray:
    """{0, 1} labels -> {-1, +1}."""
    return 2.0 * np.asarray(y, dtype=np.float64) - 1.0


def row_losses(model: str, margin: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row loss for margins ``margin`` and labels ``y`` in {0, 1}."""
    _check(model)
    s = signs(y)
    if model == "lr":
        return np.logaddexp(0.0, -s * margin)
    if model == "svm":
        return np.maximum(0.0, 1.0 - s * margin)
    return 0.5 * (margin - s) ** 2


def dloss_dmargin(model: str, margin: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Derivative of the per-row loss with respect to the margin (a subgradient for the hinge)."""
    _check(model)
    s = signs(y)
    if model == "lr":
        return -s * 0.5 * (1.0 - np.tanh(0.5 * s * margin))  # -s / (1 + exp(s m)), overflow-free
    if model == "svm":
        return np.where(s * margin <= 1.0, -s, 0.0)
    return margin - s


def test_loss(model: str, X: sp.csr_matrix, y: np.ndarray, w: np.ndarray) -> float:
    """Mean data loss on ``(X, y)``: what the reports call the (test) loss, as the released code's validation."""
    if X.shape[0] == 0:
        return float("nan")
    return float(row_losses(model, X @ w, y).mean())


def objective(model: str, X: sp.csr_matrix, y: np.ndarray, w: np.ndarray, l2: float) -> float:
    """The training objective ``mean loss + l2/2 ||w||^2`` on ``(X, y)``."""
    data = row_losses(model, X @ w, y).mean() if X.shape[0] else 0.0
    return float(data + 0.5 * l2 * np.dot(w, w))


def accuracy(model: str, X: sp.csr_matrix, y: np.ndarray, w: np.ndarray) -> float:
    """Share of rows whose margin has the sign of ``2y - 1`` (all three models predict by sign)."""
    if X.shape[0] == 0:
        return float("nan")
    return float(np.mean((X @ w > 0.0) == (y > 0.5)))


def sparse_gradient(
    model: str, X: sp.csr_matrix, y: np.ndarray, w: np.ndarray, l2: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """One worker's mini-batch gradient as sorted keys and values.

    Returns ``(keys, values)``: ``keys`` (int64, ascending) are the features present in rows whose
    ``d/dm`` is non-zero; ``values = (X^T d)[keys] / n_rows + l2 * w[keys]`` (the batch mean plus the
    lazy ℓ2 term on the worker's keys, as the released code).
    """
    D = X.shape[1]
    n_rows = X.shape[0]
    if n_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    d = dloss_dmargin(model, X @ w, y)
    active = d != 0.0
    if not active.all():
        X = X[active]
        d = d[active]
    if X.nnz == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    counts = np.diff(X.indptr)
    weights = X.data * np.repeat(d, counts)
    present = np.bincount(X.indices, minlength=D) > 0
    keys = np.flatnonzero(present)
    values = np.bincount(X.indices, weights=weights, minlength=D)[keys] / n_rows
    if l2:
        values += l2 * w[keys]
    return keys.astype(np.int64), values


class Adam:
    """Adam (Kingma & Ba 2015) on a float64 parameter vector, as SketchML §4.1 uses it.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, bias-corrected by the step count ``t``,
    ``w -= lr m_hat / (sqrt(v_hat) + eps)``. :meth:`step_sparse` updates only the keys of a sparse
    gradient (the released code's ``Adam.update`` for sparse gradients: absent keys keep ``w``, ``m``
    and ``v``); the code advances its bias correction once per epoch, we do it per step as Adam does.
    """

    def __init__(self, dim: int, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(dim)
        self.v = np.zeros(dim)
        self.t = 0

    def reset(self) -> None:
        """Back to step 0 with zero moments, written in place: the pages of ``m`` and ``v`` are then
        mapped, so a timed step that follows pays no first touch of them (``np.zeros`` maps its pages
        lazily, and the first step over tens of millions of keys would count their faults)."""
        self.m.fill(0.0)
        self.v.fill(0.0)
        self.t = 0

    def step(self, w: np.ndarray, g: np.ndarray) -> None:
        """Update ``w`` in place with gradient ``g``."""
        self.t += 1
        self.m *= self.b1
        self.m += (1.0 - self.b1) * g
        self.v *= self.b2
        self.v += (1.0 - self.b2) * (g * g)
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        w -= (self.lr / c1) * self.m / (np.sqrt(self.v / c2) + self.eps)

    def step_sparse(self, w: np.ndarray, keys: np.ndarray, g: np.ndarray) -> None:
        """Update ``w[keys]`` in place with the gradient values ``g`` of those keys (unique keys)."""
        self.t += 1
        m = self.b1 * self.m[keys] + (1.0 - self.b1) * g
        v = self.b2 * self.v[keys] + (1.0 - self.b2) * (g * g)
        self.m[keys] = m
        self.v[keys] = v
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        w[keys] -= (self.lr / c1) * m / (np.sqrt(v / c2) + self.eps)
