"""A tiny Transformer language model on real English text, for the L-GreCo reproduction.

The paper's Table 4 model is Transformer-XL on WikiText-103 (not available here). This is the
smallest honest stand-in: a one-layer causal Transformer (d = 64, 4 heads) over a word-level
vocabulary of 1,000 (the rest -> ``<unk>``), trained on the English prose of Python's own
documentation as the standard library ships it (``pydoc_data.topics``: ~80k words; the first 90%
for training, the last 10% held out). The metric is held-out perplexity.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 1000
CONTEXT = 32
_TOKEN = re.compile(r"[a-z]+|[.,;:()]")


@dataclass
class LMData:
    """Token ids of the training and held-out parts."""

    train: torch.Tensor
    test: torch.Tensor
    vocab: int


def load_lm_data(vocab: int = VOCAB) -> LMData:
    """Tokenise ``pydoc_data.topics`` (lower-case words and punctuation), keep the ``vocab - 1`` most
    frequent words of the training part, map the rest to id 0 (``<unk>``)."""
    from pydoc_data import topics

    words = _TOKEN.findall(" ".join(topics.topics[k] for k in sorted(topics.topics)).lower())
    cut = int(0.9 * len(words))
    common = [w for w, _ in Counter(words[:cut]).most_common(vocab - 1)]
    index = {w: i + 1 for i, w in enumerate(common)}
    ids = torch.tensor([index.get(w, 0) for w in words], dtype=torch.int64)
    return LMData(ids[:cut], ids[cut:], vocab)


class TinyLM(nn.Module):
    """Embedding + learned positions, one causal Transformer encoder layer, output projection."""

    def __init__(self, vocab: int = VOCAB, d: int = 64, heads: int = 4, ff: int = 128, context: int = CONTEXT):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        self.block = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.out = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x) + self.pos[:t]
        h = self.block(h, src_mask=self.mask[:t, :t], is_causal=True)
        return self.out(h)


def build_lm(seed: int = 0) -> TinyLM:
    """A :class:`TinyLM` initialised under ``seed`` (the caller's RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyLM()


def lm_batch(data: LMData, step: int, rank: int, world: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of ``CONTEXT + 1`` tokens at positions drawn for (seed, step); rank ``r`` takes its slice."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, data.train.numel() - CONTEXT - 1, (batch * world,), generator=g)[rank * batch : (rank + 1) * batch]
    win = torch.stack([data.train[s : s + CONTEXT + 1] for s in starts.tolist()])
    return win[:, :-1], win[:, 1:]


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def lm_perplexity(model: nn.Module, data: LMData) -> float:
    """Held-out perplexity over consecutive non-overlapping windows of the test part."""
    n = (data.test.numel() - 1) // CONTEXT
    x = data.test[: n * CONTEXT].reshape(n, CONTEXT)
    y = data.test[1 : n * CONTEXT + 1].reshape(n, CONTEXT)
    with torch.no_grad():
        return math.exp(float(lm_loss(model, x, y)))
