"""Image tensors of the 3LC reproduction: the uint8 -> float transform (gcbench.data.images.to_float),
the digits stand-in, and the training augmentation. The loaders themselves (torchvision.datasets on
files written by the tests) are tested in test_image_loaders.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gcbench.reproductions.threelc.train import augment_batch

from gcbench.data.images import load_images, to_float


def test_to_float_pools_and_normalises_like_a_loop():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.integers(0, 256, (3, 2, 4, 4), dtype=np.uint8))
    xf, mean, std = to_float(x, 2, chunk=2)
    ref = np.zeros((3, 2, 2, 2))
    for n in range(3):
        for c in range(2):
            for i in range(2):
                for j in range(2):
                    ref[n, c, i, j] = x[n, c, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].double().mean() / 255.0
    m = ref.mean(axis=(0, 2, 3))
    s = ref.std(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5)
    np.testing.assert_allclose(xf.numpy(), (ref - m[None, :, None, None]) / s[None, :, None, None], rtol=1e-4, atol=1e-5)
    xt, _, _ = to_float(x[:1], 2, mean=mean, std=std)  # test images reuse the training statistics
    torch.testing.assert_close(xt, xf[:1])
    with pytest.raises(ValueError, match="multiple"):
        to_float(x, 3)


def test_digits_images_are_the_bundled_digits():
    ds = load_images("digits")
    assert ds.x_train.shape == (1500, 1, 8, 8) and ds.x_test.shape == (297, 1, 8, 8)
    assert int(ds.x_train.max()) == 255 and set(ds.y_test.tolist()) <= set(range(10))


def test_augmentation_is_a_padded_crop_and_a_flip():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).reshape(2, 3, 5, 5)
    g = torch.Generator().manual_seed(3)
    out = augment_batch(x, g, pad=2)
    g = torch.Generator().manual_seed(3)  # the same draws, in the same order, read back for the loop
    oy = torch.randint(0, 5, (2,), generator=g)
    ox = torch.randint(0, 5, (2,), generator=g)
    flip = torch.rand(2, generator=g) < 0.5
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for b in range(2):
        crop = padded[b, :, oy[b] : oy[b] + 5, ox[b] : ox[b] + 5]
        if flip[b]:
            crop = crop.flip(-1)
        assert torch.equal(out[b], crop)
