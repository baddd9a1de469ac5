"""The ``rounds`` protocol: the codec runs its own rounds of all-reduces.

For methods whose exchange is not one payload per tensor: PowerSGD's two factor all-reduces
(Vogels et al. 2019, Algorithm 1 distributed), Sketched-SGD's sketch and exact-value rounds (Ivkin
et al. 2019, Algorithm 2). The codec class provides ``run_rounds(ctx, grads, keys)``; ``ctx`` is the
:class:`~gcbench.envs.exchange.Exchange`, whose ``all_reduce`` batches each round's tensors into
one flat tensor per dtype and records its bytes by kind. Tensors are grouped by codec class, so
one bucket may hold several such methods.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..exchange import Exchange
from ..workers import inner_codec


def run(ex: Exchange, grads: Sequence[Sequence[torch.Tensor]], keys: Sequence[str]) -> list[torch.Tensor]:
    """The mean update of every key, by each codec class's ``run_rounds``."""
    groups: dict[type, list[int]] = {}
    for j, key in enumerate(keys):
        groups.setdefault(type(inner_codec(ex.codec(0, key))), []).append(j)
    out: list[torch.Tensor | None] = [None] * len(keys)
    for cls, idx in groups.items():
        results = cls.run_rounds(ex, [[g[j] for j in idx] for g in grads], [keys[j] for j in idx])
        for j, r in zip(idx, results):
            out[j] = r
    return out  # type: ignore[return-value]
