"""The reproduction's models: a tiny transformer and an LSTM seq2seq (translation), a small ResNet (images).

Sketched-SGD sketches the *whole* model's gradient as one vector and selects one global top-k
(Ivkin et al. 2019, Algorithm 2; the authors' code flattens every parameter into one CSVec). gcbench's
aggregation works per parameter tensor (as DDP hands tensors over), so :class:`FlatParams` holds a
model's parameters as one flat ``nn.Parameter`` and runs the model through
``torch.func.functional_call`` on views of it: the aggregation, the DDP hook and every codec then see
one tensor of ``d`` elements, and "top-k" means the global top-k of the paper.

Sizes are the presets' (``spec.toml``); the paper's models were a 90M-parameter transformer and a
70M-parameter LSTM (slides, "Empirical Results") trained for 60,000 iterations.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from gcbench.workloads.models import seeded
from torch import nn


class FlatParams(nn.Module):
    """``module``'s parameters as one flat parameter ``flat`` (the module itself is not registered).

    ``forward(*args)`` runs ``module`` with its parameters replaced by views of ``flat``, so gradients
    land in ``flat.grad``. :meth:`sync` copies ``flat`` back into ``module`` (for code that calls the
    module's own methods, e.g. greedy decoding).

    With ``dense_1d`` the 1-D parameters (biases and normalisation gains) live in a second flat
    parameter ``dense`` and ``flat`` holds the others: the aggregation can then send ``dense``
    uncompressed, as the authors send bias gradients (Sketched-SGD §5.1; gcbench's reading: every
    1-D parameter, which includes LayerNorm gains).
    """

    def __init__(self, module: nn.Module, dense_1d: bool = False) -> None:
        super().__init__()
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        is_dense = [bool(dense_1d) and p.dim() == 1 for _, p in named]
        order = [i for i, b in enumerate(is_dense) if not b] + [i for i, b in enumerate(is_dense) if b]
        named = [named[i] for i in order]
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.n_sketched = sum(1 for b in is_dense if not b)
        tensors = [p.detach().reshape(-1) for _, p in named]
        self.flat = nn.Parameter(torch.cat(tensors[: self.n_sketched]).clone())
        self.dense: nn.Parameter | None = None
        if self.n_sketched < len(tensors):
            self.dense = nn.Parameter(torch.cat(tensors[self.n_sketched :]).clone())
        object.__setattr__(self, "inner", module)  # not a submodule: DDP and optimizers see `flat` only
        for p in module.parameters():
            p.requires_grad_(False)

    def views(self) -> dict[str, torch.Tensor]:
        """Parameter name -> view of ``flat`` (or ``dense``) shaped like the parameter."""
        parts = list(self.flat.split(self.numels[: self.n_sketched]))
        if self.dense is not None:
            parts += list(self.dense.split(self.numels[self.n_sketched :]))
        return {n: t.view(s) for n, t, s in zip(self.names, parts, self.shapes)}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return torch.func.functional_call(self.inner, self.views(), args, kwargs)

    @torch.no_grad()
    def sync(self) -> nn.Module:
        """Copy ``flat`` into the wrapped module's parameters and return the module."""
        params = dict(self.inner.named_parameters())
        for n, v in self.views().items():
            params[n].copy_(v)
        return self.inner


# ---------------------------------------------------------------------------------------------------
# translation
# ---------------------------------------------------------------------------------------------------


class TinyTransformer(nn.Module):
    """Pre-norm encoder-decoder transformer (Vaswani et al. 2017) with learned positions.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 = padding).
        d_model, heads, layers, ff: width, attention heads, encoder and decoder layers, feed-forward width.
        max_len: longest sequence (positions).
        dropout: dropout inside the layers.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, *, d_model: int = 64, heads: int = 4, layers: int = 2,
                 ff: int = 128, max_len: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(src_vocab, d_model, padding_idx=0)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        enc = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, batch_first=True, norm_first=True)
        dec = nn.TransformerDecoderLayer(d_model, heads, ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, layers, norm=nn.LayerNorm(d_model))
        self.out = nn.Linear(d_model, tgt_vocab)

    def _embed(self, emb: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return emb(ids) * math.sqrt(self.d_model) + self.pos(pos)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(memory, src_padding_mask)``."""
        mask = src == 0
        return self.encoder(self._embed(self.src_emb, src), src_key_padding_mask=mask), mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, len, tgt_vocab)`` for the target prefix ``tgt_in`` (causal)."""
        n = tgt_in.shape[1]
        causal = torch.triu(torch.ones((n, n), dtype=torch.bool, device=tgt_in.device), diagonal=1)
        h = self.decoder(self._embed(self.tgt_emb, tgt_in), memory, tgt_mask=causal,
                         tgt_key_padding_mask=tgt_in == 0, memory_key_padding_mask=src_mask)
        return self.out(h)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, mask = self.encode(src)
        return self.decode(tgt_in, memory, mask)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, bos: int, eos: int, max_len: int) -> torch.Tensor:
        """Greedy decoding: ``(batch, <= max_len)`` token ids (after BOS; EOS then padding)."""
        memory, mask = self.encode(src)
        out = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = self.decode(out, memory, mask)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos
            if bool(done.all()):
                break
        return out[:, 1:]


class LSTMSeq2Seq(nn.Module):
    """LSTM encoder-decoder with dot-product attention over the encoder states (Luong et al. 2015).

    The decoder LSTM reads the target prefix; each output attends to the encoder outputs and
    ``tanh(W [context; h])`` feeds the output layer (no input feeding, so training runs over the
    whole target at once).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, *, emb: int = 64, hidden: int = 128, layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, emb, padding_idx=0)
        self.tgt_emb = nn.Embedding(tgt_vocab, emb, padding_idx=0)
        self.encoder = nn.LSTM(emb, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.decoder = nn.LSTM(emb, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.out = nn.Linear(hidden, tgt_vocab)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(encoder outputs, padding mask, final state)``."""
        mask = src == 0
        lengths = (~mask).sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.src_emb(src), lengths, batch_first=True, enforce_sorted=False)
        out, state = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return out, mask, state

    def _attend(self, h: torch.Tensor, enc: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(h, enc.transpose(1, 2)).masked_fill(mask[:, None, :], float("-inf"))
        ctx = torch.bmm(torch.softmax(scores, dim=-1), enc)
        return self.out(torch.tanh(self.combine(torch.cat([ctx, h], dim=-1))))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        enc, mask, state = self.encode(src)
        h, _ = self.decoder(self.tgt_emb(tgt_in), state)
        return self._attend(h, enc, mask)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, bos: int, eos: int, max_len: int) -> torch.Tensor:
        """Greedy decoding, one LSTM step at a time."""
        enc, mask, state = self.encode(src)
        tok = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        steps = []
        for _ in range(max_len):
            h, state = self.decoder(self.tgt_emb(tok), state)
            nxt = self._attend(h, enc, mask)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)
            steps.append(nxt)
            done |= nxt == eos
            tok = nxt[:, None]
            if bool(done.all()):
                break
        return torch.stack(steps, dim=1)


def translation_loss(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Token-level cross entropy with teacher forcing; ``tgt`` = ``BOS y EOS`` padded with 0."""
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=0)


def build_translation_model(kind: str, src_vocab: int, tgt_vocab: int, params: dict[str, Any], seed: int) -> nn.Module:
    """``"transformer"`` or ``"lstm"`` with ``params`` (the preset's), initialised from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "transformer":
            return TinyTransformer(src_vocab, tgt_vocab, **params)
        if kind == "lstm":
            return LSTMSeq2Seq(src_vocab, tgt_vocab, **params)
    raise ValueError(f"unknown translation model {kind!r}; known: transformer, lstm")


# ---------------------------------------------------------------------------------------------------
# images
# ---------------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """He et al. 2016's basic block (two 3x3 convolutions and the identity), GroupNorm instead of
    BatchNorm: no running statistics, so W simulated workers sharing one replica behave as W real ones."""

    def __init__(self, channels: int, groups: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(h)))


class SmallResNet(nn.Module):
    """A small ResNet for ``side x side`` images (``in_channels`` colours): 3x3 stem, ``blocks`` basic blocks (at half
    resolution for sides of 16 or more, after a 2x2 max pool; at full resolution below, as the 14x14 and 8x8
    presets), global average pooling, a linear classifier."""

    def __init__(self, side: int = 28, channels: int = 16, blocks: int = 2, classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.side, self.in_channels = side, in_channels
        self.stem = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.norm = nn.GroupNorm(4, channels)
        self.blocks = nn.Sequential(*[BasicBlock(channels) for _ in range(blocks)])
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm(self.stem(x.reshape(-1, self.in_channels, self.side, self.side))))
        h = F.max_pool2d(h, 2) if self.side >= 16 else h
        h = self.blocks(h)
        return self.fc(h.mean(dim=(2, 3)))


def build_image_model(side: int, params: dict[str, Any], seed: int) -> nn.Module:
    """:class:`SmallResNet` for ``side x side`` images, initialised from ``seed``."""
    return seeded(lambda: SmallResNet(side=side, **params), seed)
