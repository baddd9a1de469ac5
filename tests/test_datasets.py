"""Bundled data and the real-gradient helpers, checked against naive numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench.data.digits import CROSS_DIM, MAX_ACTIVE, digits_cross_features, load_digits_tensors
from gcbench.workloads.gradients import digits_gradients, digits_mlp, digits_sparse_gradient


def test_digits_tensors():
    d = load_digits_tensors()
    assert d.x.shape == (1797, 64) and d.x.dtype == torch.float32
    assert d.y.shape == (1797,) and set(d.y.tolist()) == set(range(10))
    assert float(d.x.min()) == 0.0 and float(d.x.max()) == 1.0
    assert torch.equal(d.x, d.intensities.reshape(-1, 64).float() / 16)


def _naive_cross_ids(img: np.ndarray) -> set[int]:
    """The documented feature ids of one 8x8 image, by plain loops."""
    ids = set()
    for r in range(8):
        for c in range(8):
            p = r * 8 + c
            if img[r, c] > 0:
                ids.add(p * 17 + int(img[r, c]))
            if c < 7 and (img[r, c] > 0 or img[r, c + 1] > 0):
                ids.add(64 * 17 + p * 289 + int(img[r, c]) * 17 + int(img[r, c + 1]))
            if r < 7 and (img[r, c] > 0 or img[r + 1, c] > 0):
                ids.add(64 * 17 + 64 * 289 + p * 289 + int(img[r, c]) * 17 + int(img[r + 1, c]))
    return ids


def test_cross_features_match_a_naive_encoding():
    f = digits_cross_features()
    imgs = load_digits_tensors().intensities.numpy()
    assert f.dim == CROSS_DIM == 38080
    assert f.index.shape == f.mask.shape == (1797, MAX_ACTIVE)
    assert int(f.index.max()) < CROSS_DIM and int(f.index.min()) >= 0
    for i in [0, 1, 7, 500, 1796]:
        got = f.index[i][f.mask[i]].tolist()
        assert len(got) == len(set(got)), "ids are unique within a row"
        assert set(got) == _naive_cross_ids(imgs[i])
    coo = f.to_coo()
    assert coo.shape == (1797, CROSS_DIM)
    assert coo._nnz() == int(f.mask.sum())


def _naive_sparse_grad_at_zero(seed: int, batch: int = 64) -> dict[int, float]:
    """Logistic-loss gradient at w = 0: X_b^T (sigmoid(0) - y) / B, from the naive encoding."""
    imgs = load_digits_tensors().intensities.numpy()
    y = (load_digits_tensors().y.numpy() >= 5).astype(np.float64)
    idx = torch.randperm(1797, generator=torch.Generator().manual_seed(seed))[:batch].numpy()
    grad: dict[int, float] = {}
    for i in idx:
        for fid in _naive_cross_ids(imgs[i]):
            grad[fid] = grad.get(fid, 0.0) + (0.5 - y[i]) / batch
    return grad


def test_sparse_gradient_matches_a_naive_reference_at_step_zero():
    g = digits_sparse_gradient(seed=3, steps=0)["logreg.weight"]
    assert g.layout == torch.sparse_coo and g.is_coalesced() and g.shape == (CROSS_DIM,)
    ref = _naive_sparse_grad_at_zero(seed=3)
    keys = g.indices()[0].tolist()
    assert keys == sorted(ref)  # exactly the batch's active features, sorted
    np.testing.assert_allclose(g.values().numpy(), [ref[k] for k in keys], rtol=1e-5, atol=1e-7)


def test_sparse_gradient_is_deterministic_sparse_and_trained():
    a = digits_sparse_gradient(seed=0, steps=5)["logreg.weight"]
    b = digits_sparse_gradient(seed=0, steps=5)["logreg.weight"]
    c = digits_sparse_gradient(seed=0, steps=0)["logreg.weight"]
    assert torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
    assert 0.02 < a._nnz() / CROSS_DIM < 0.2  # about 10% of the key space
    assert bool(torch.isfinite(a.values()).all()) and float(a.values().norm()) > 0
    assert not torch.equal(a.to_dense(), c.to_dense())  # training steps change the gradient


def _naive_mlp_grads(seed: int, batch: int = 64) -> dict[str, np.ndarray]:
    """Backprop of mean cross-entropy through 64-128-64-10 ReLU, by hand in float64 numpy."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = digits_mlp((128, 64))
    w = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
    d = load_digits_tensors()
    idx = torch.randperm(1797, generator=torch.Generator().manual_seed(seed))[:batch].numpy()
    x, y = d.x.numpy()[idx].astype(np.float64), d.y.numpy()[idx]
    z1 = x @ w["fc1.weight"].T + w["fc1.bias"]
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w["fc2.weight"].T + w["fc2.bias"]
    h2 = np.maximum(z2, 0)
    logits = h2 @ w["out.weight"].T + w["out.bias"]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dlogits = p.copy()
    dlogits[np.arange(batch), y] -= 1
    dlogits /= batch
    dz2 = (dlogits @ w["out.weight"]) * (z2 > 0)
    dz1 = (dz2 @ w["fc2.weight"]) * (z1 > 0)
    return {
        "fc1.weight": dz1.T @ x, "fc1.bias": dz1.sum(0),
        "fc2.weight": dz2.T @ h1, "fc2.bias": dz2.sum(0),
        "out.weight": dlogits.T @ h2, "out.bias": dlogits.sum(0),
    }


def test_dense_gradient_matches_hand_backprop_at_step_zero():
    got = digits_gradients(seed=5, steps=0)
    ref = _naive_mlp_grads(seed=5)
    assert list(got) == list(ref)
    for name, g in got.items():
        assert g.dtype == torch.float32 and tuple(g.shape) == ref[name].shape
        np.testing.assert_allclose(g.double().numpy(), ref[name], rtol=1e-4, atol=1e-7, err_msg=name)


def test_dense_gradient_is_deterministic_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a = digits_gradients(seed=1, steps=3)
    assert torch.equal(state, torch.get_rng_state())
    b = digits_gradients(seed=1, steps=3)
    other = digits_gradients(seed=2, steps=3)
    trained = digits_gradients(seed=1, steps=0)
    shapes = {k: tuple(p.shape) for k, p in digits_mlp((128, 64)).named_parameters()}
    assert {k: tuple(v.shape) for k, v in a.items()} == shapes
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], other[k]) for k in a)
    assert not all(torch.equal(a[k], trained[k]) for k in a)
    for g in a.values():
        assert bool(torch.isfinite(g).all()) and float(g.norm()) > 0
    flat = digits_gradients(seed=1, steps=3, flatten=True)
    assert all(flat[k].dim() == 1 and torch.equal(flat[k], a[k].reshape(-1)) for k in a)


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        digits_gradients(steps=-1)
    with pytest.raises(ValueError):
        digits_gradients(batch_size=0)
    with pytest.raises(ValueError):
        digits_sparse_gradient(batch_size=5000)
