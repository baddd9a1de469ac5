"""Real data that ships inside an installed package, as torch tensors.

Nothing here downloads: the bundled data need no network, so a benchmark's default run works on a
fresh clone. The source is scikit-learn's bundled
``load_digits`` (UCI optical recognition of handwritten digits: 1,797 images of 8x8 pixels with
integer intensities 0..16, ten classes), read from the CSV file inside the scikit-learn wheel.

Two views of it:

* :func:`load_digits_tensors`: the dense 64-pixel images scaled to [0, 1] (for small MLPs).
* :func:`digits_cross_features`: a sparse, high-dimensional binary encoding in the style of
  click-through-rate data (KDD12, Criteo), where a model's gradient touches only the features
  present in the batch. Feature ids (dimension :data:`CROSS_DIM` = 38,080):

  - ``pixel*17 + v`` for every pixel with intensity ``v > 0`` (one-hot pixel intensities);
  - ``1088 + left*289 + v_left*17 + v_right`` for every horizontally adjacent pixel pair
    (``left`` = the left pixel's index) unless both are 0;
  - ``1088 + 18496 + top*289 + v_top*17 + v_bottom`` for every vertically adjacent pair unless
    both are 0.

  An image activates 107 features on average; 18,674 of the 38,080 ids occur in the data set, and a
  batch of 64 images touches about 10% of the ids (SketchML's Fig. 8 works at ~10% density).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

#: One-hot pixel intensities: 64 pixels x 17 intensity values.
UNIGRAM_DIM = 64 * 17
#: One block of adjacent-pair crosses: 64 anchor pixels x 17 x 17 intensity pairs.
PAIR_DIM = 64 * 17 * 17
#: Dimension of :func:`digits_cross_features` (unigrams + horizontal pairs + vertical pairs).
CROSS_DIM = UNIGRAM_DIM + 2 * PAIR_DIM
#: Most features one image can activate (64 unigrams + 56 horizontal + 56 vertical pairs).
MAX_ACTIVE = 64 + 56 + 56

#: The digits' train/test split used across gcbench: the first ``N_TRAIN`` images train, the last 297 test.
N_TRAIN = 1500

DIGITS_DESCRIPTION = "scikit-learn load_digits (UCI handwritten digits, 1797 images 8x8, bundled in the sklearn wheel)"
CROSS_DESCRIPTION = (
    "scikit-learn load_digits encoded as binary one-hot pixel intensities + adjacent-pixel-pair crosses "
    f"({CROSS_DIM} dims, ~107 active per image)"
)


@dataclass(frozen=True)
class Digits:
    """The digits data set as tensors.

    Attributes:
        x: float32 ``(1797, 64)``, pixel intensities divided by 16 (in [0, 1]).
        y: int64 ``(1797,)``, the digit 0..9.
        intensities: int64 ``(1797, 8, 8)``, the raw intensities 0..16.
    """

    x: torch.Tensor
    y: torch.Tensor
    intensities: torch.Tensor


@dataclass(frozen=True)
class SparseFeatures:
    """A binary sparse design matrix stored as padded per-row feature ids.

    Row ``i`` has the features ``index[i, mask[i]]`` set to 1 (ids unique within a row); padded slots
    hold id 0 with ``mask`` False. This layout makes ``X @ w`` a gather and ``X.T @ r`` a
    scatter-add, both vectorised.

    Attributes:
        index: int64 ``(n, MAX_ACTIVE)`` feature ids.
        mask: bool ``(n, MAX_ACTIVE)``, which slots are real features.
        dim: number of feature ids (:data:`CROSS_DIM`).
        y: int64 ``(n,)`` the digit 0..9 of each row.
    """

    index: torch.Tensor
    mask: torch.Tensor
    dim: int
    y: torch.Tensor

    def to_coo(self) -> torch.Tensor:
        """The design matrix as a coalesced float32 sparse COO tensor ``(n, dim)``."""
        rows = torch.arange(self.index.shape[0]).unsqueeze(1).expand_as(self.index)[self.mask]
        cols = self.index[self.mask]
        vals = torch.ones(cols.numel(), dtype=torch.float32)
        return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (self.index.shape[0], self.dim), check_invariants=True).coalesce()


@lru_cache(maxsize=1)
def load_digits_tensors() -> Digits:
    """Load scikit-learn's bundled digits data set (no download) as tensors."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    raw = np.asarray(bunch.data, dtype=np.int64)
    intensities = torch.from_numpy(raw.reshape(-1, 8, 8).copy())
    x = torch.from_numpy(raw.astype(np.float32) / 16.0)
    y = torch.from_numpy(np.asarray(bunch.target, dtype=np.int64))
    return Digits(x=x, y=y, intensities=intensities)


@lru_cache(maxsize=1)
def digits_cross_features() -> SparseFeatures:
    """The digits as sparse binary features: one-hot intensities plus adjacent-pair crosses.

    See the module docstring for the exact feature ids.
    """
    v = load_digits_tensors().intensities  # (n, 8, 8)
    n = v.shape[0]
    pos = torch.arange(64).reshape(8, 8)
    uni = pos * 17 + v  # (n, 8, 8)
    uni_on = v > 0
    horiz = UNIGRAM_DIM + pos[:, :7] * 289 + v[:, :, :7] * 17 + v[:, :, 1:]  # (n, 8, 7)
    horiz_on = (v[:, :, :7] > 0) | (v[:, :, 1:] > 0)
    vert = UNIGRAM_DIM + PAIR_DIM + pos[:7, :] * 289 + v[:, :7, :] * 17 + v[:, 1:, :]  # (n, 7, 8)
    vert_on = (v[:, :7, :] > 0) | (v[:, 1:, :] > 0)
    index = torch.cat([uni.reshape(n, -1), horiz.reshape(n, -1), vert.reshape(n, -1)], dim=1)
    mask = torch.cat([uni_on.reshape(n, -1), horiz_on.reshape(n, -1), vert_on.reshape(n, -1)], dim=1)
    index = torch.where(mask, index, torch.zeros_like(index))
    return SparseFeatures(index=index.contiguous(), mask=mask.contiguous(), dim=CROSS_DIM, y=load_digits_tensors().y)
