"""A tiny Transformer language model on real English text, for the L-GreCo reproduction.

The paper's Table 4 model is Transformer-XL on WikiText-103. The stand-in is a causal Transformer
over a word-level vocabulary (1,000 by default; the rest -> ``<unk>``) whose shape the scale sets:
:func:`build_lm`'s default is the one-layer model (d = 64, 4 heads) that the image scales train beside
their image model, and the ``claims`` scale passes its preset's ``tlm`` shape (2 layers, d_model 256,
feed-forward 1024). The text is WikiText-103 where it is given or found (below; the scales whose
``dataset`` is ``wikitext103`` look for it, :meth:`.settings.LGreCoSettings.text_choice`), else the
English prose of Python's own documentation as the standard library ships it (``pydoc_data.topics``:
~80k words; the first 90% for training, the last 10% held out), always available. The metric is
held-out perplexity.

Users who have WikiText-103 (Merity et al. 2016) pass its folder (:func:`load_wikitext`,
dataset ``"wikitext103:FOLDER"``): the tokenised files ``wiki.train.tokens``, ``wiki.valid.tokens``,
``wiki.test.tokens`` (whitespace-separated tokens, ``<unk>`` already in place, one paragraph or
`` = Heading = `` per line) or the raw variant ``wiki.*.raw`` (tokenised here: words, numbers and
single punctuation marks); or have the Hub's ``wikitext`` in their Hugging Face cache (dataset
``"wikitext103:hf"``). Both are read by Hugging Face ``datasets`` (:mod:`gcbench.data.wikitext`,
tokens cached by ``Dataset.map``). Each non-empty line ends with ``<eos>``, as in the usual WikiText
language-model setup; the ``vocab - 1`` most frequent training tokens are kept, the rest map to id
0. The test split is the held-out set (``wiki.valid.*`` is checked and counted, not trained on).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.workloads.models import seeded
from torch import nn

VOCAB = 1000
CONTEXT = 32
_TOKEN = re.compile(r"[a-z]+|[.,;:()]")


@dataclass
class LMData:
    """Token ids of the training and held-out parts (and where they come from)."""

    train: torch.Tensor
    test: torch.Tensor
    vocab: int
    name: str = "pydoc"
    description: str = "English prose of Python's documentation (stdlib pydoc_data.topics), first 90% train, last 10% held out"
    valid: torch.Tensor | None = None


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


# -- WikiText-103 (for users who have it) --------------------------------------------------------------

#: Default cap on training tokens read (WikiText-103's 103M tokens do not fit a 2-core CI box).
WIKITEXT_MAX_TOKENS = 5_000_000
#: WikiText-103's training tokens (Merity et al. 2016, Table 1): the epoch of L-GreCo's Table 1.
WIKITEXT103_TRAIN_TOKENS = 103_227_021
#: The folder name meaning "the Hub's wikitext in the Hugging Face cache".
HUB = "hf"

#: Environment variable naming the WikiText-103 folder (used when no folder is given).
WIKITEXT_ENV = "GCBENCH_WIKITEXT103"

WIKITEXT_HOWTO = (
    "WikiText-103 is not bundled (no download here): get wikitext-103-v1.zip (tokenised) or "
    "wikitext-103-raw-v1.zip from its authors (Merity et al. 2016; the Salesforce/Smerity research pages "
    f"or the Hugging Face 'wikitext' data set), unzip it and pass the folder: dataset 'wikitext103:FOLDER' "
    f"(or set ${WIKITEXT_ENV}, or unzip it under <gcbench data cache>/wikitext-103); or use the Hub's copy: "
    "run once with HF_DATASETS_OFFLINE=0 and dataset 'wikitext103:hf' (Hugging Face datasets, cached in gcbench's cache)."
)


def _wikitext_files(folder: Path) -> tuple[dict[str, Path], str]:
    """The three split files of ``folder`` (or its ``wikitext-103[-raw]`` sub-folder) and the variant."""
    from gcbench.data.wikitext import WIKITEXT_SPLITS

    candidates = [folder, folder / "wikitext-103", folder / "wikitext-103-raw"]
    for c in candidates:
        for variant in ("tokens", "raw"):
            files = {s: c / f"wiki.{s}.{variant}" for s in WIKITEXT_SPLITS}
            if files["train"].is_file() or files["test"].is_file():
                missing = [f.name for f in files.values() if not f.is_file()]
                if missing:
                    raise DatasetUnavailableError(f"{c}: WikiText files missing: {', '.join(missing)}. {WIKITEXT_HOWTO}")
                return files, variant
    raise DatasetUnavailableError(
        f"{folder}: no wiki.train.tokens / wiki.test.tokens (or wiki.*.raw) here or in wikitext-103[-raw]/. {WIKITEXT_HOWTO}"
    )


def find_wikitext(folder: str | os.PathLike | None = None) -> Path | str | None:
    """The first folder holding WikiText split files: ``folder``, ``$GCBENCH_WIKITEXT103``,
    ``<gcbench data cache>/wikitext-103``; else :data:`HUB` when the Hub's copy is in the Hugging
    Face cache (``folder`` ``"hf"`` asks for that one only); None when none is (files are not read)."""
    from gcbench.data.files import default_cache_dir
    from gcbench.data.wikitext import hub_available

    if folder is not None and str(folder) == HUB:
        return HUB if hub_available() else None
    candidates = [Path(folder)] if folder else []
    if os.environ.get(WIKITEXT_ENV):
        candidates.append(Path(os.environ[WIKITEXT_ENV]))
    candidates.append(default_cache_dir() / "wikitext-103")
    for c in candidates:
        if not c.is_dir():
            continue
        try:
            _wikitext_files(c)
        except DatasetUnavailableError:
            continue
        return c
    return HUB if not folder and hub_available() else None


def read_wikitext_tokens(path: str | os.PathLike, variant: str = "tokens", max_tokens: int | None = None) -> list[str]:
    """The tokens of one WikiText file, ``<eos>`` after every non-empty line, at most ``max_tokens``
    (:func:`gcbench.data.wikitext.file_tokens`: Hugging Face ``datasets``' text builder, cached tokens).

    ``variant`` ``"tokens"``: split on whitespace (the file is already tokenised); ``"raw"``:
    words, numbers and single punctuation marks (:data:`gcbench.data.wikitext.RAW_TOKEN`).

    Raises:
        DatasetUnavailableError: no such file.
        DataFormatError: bytes that are not UTF-8 or a NUL byte (a binary file), naming the line;
            a file without any token.
    """
    from gcbench.data.wikitext import file_tokens

    p = Path(path)
    if not p.is_file():
        raise DatasetUnavailableError(f"{p}: no such file. {WIKITEXT_HOWTO}")
    out = file_tokens(p, variant, max_tokens)
    if not out:
        raise DataFormatError(f"{p}: no tokens (empty or blank file)")
    return out


def load_wikitext(folder: str | os.PathLike, vocab: int = VOCAB, *, max_tokens: int | None = WIKITEXT_MAX_TOKENS) -> LMData:
    """WikiText-103 (tokenised or raw variant) as :class:`LMData` for :class:`TinyLM`.

    Args:
        folder: the unzipped folder (``wiki.train.tokens``, ``wiki.valid.tokens``, ``wiki.test.tokens``
            or ``wiki.*.raw``), or its parent.
        vocab: kept vocabulary (``vocab - 1`` most frequent training tokens + ``<unk>`` = id 0; the
            file's own ``<unk>`` maps to 0 too).
        max_tokens: read at most this many tokens of each split (None: all).

    Raises:
        DatasetUnavailableError: the folder or a split file is missing (with where to get it).
        DataFormatError: a split that is binary, not UTF-8, empty, or (test) shorter than one window.
    """
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab}")
    if str(folder) == HUB:
        from gcbench.data.wikitext import WIKITEXT_SPLITS, hub_tokens

        variant, where = "tokens", "the Hub's wikitext-103-v1 in the Hugging Face cache"
        files = {s: Path(f"wikitext-103-v1 {s}") for s in WIKITEXT_SPLITS}
        tokens = {s: hub_tokens(s, variant, max_tokens, howto=WIKITEXT_HOWTO) for s in WIKITEXT_SPLITS}
    else:
        p = Path(folder)
        if not p.is_dir():
            raise DatasetUnavailableError(f"{p}: no such folder. {WIKITEXT_HOWTO}")
        files, variant = _wikitext_files(p)
        where = f"{'tokenised' if variant == 'tokens' else 'raw'} files in {files['train'].parent}"
        tokens = {s: read_wikitext_tokens(f, variant, max_tokens) for s, f in files.items()}
    for s in ("train", "test"):
        if len(tokens[s]) < CONTEXT + 2:
            raise DataFormatError(f"{files[s]}: {len(tokens[s])} tokens, fewer than one {CONTEXT + 1}-token window")
    counts = Counter(tokens["train"])
    counts.pop("<unk>", None)
    common = [w for w, _ in counts.most_common(vocab - 1)]
    index = {w: i + 1 for i, w in enumerate(common)}
    ids = {s: torch.tensor([index.get(w, 0) for w in t], dtype=torch.int64) for s, t in tokens.items()}
    capped = f", at most {max_tokens:,} tokens per split" if max_tokens is not None else ""
    return LMData(
        ids["train"], ids["test"], vocab, name="wikitext103",
        description=(f"WikiText-103 ({where}, read by Hugging Face datasets): "
                     f"{len(tokens['train']):,} train / {len(tokens['valid']):,} valid / {len(tokens['test']):,} test tokens"
                     f"{capped}; vocabulary {vocab:,} (the rest <unk>), held out: wiki.test"),
        valid=ids["valid"],
    )


def load_text(spec: str | None = None, vocab: int = VOCAB) -> LMData:
    """``None``/``"pydoc"`` (the default, always available) or ``"wikitext103[:FOLDER]"`` (without a
    folder: :func:`find_wikitext`).

    Raises:
        DatasetUnavailableError: an unknown name or missing files.
        DataFormatError: malformed files.
    """
    if spec is None or spec.strip().lower() in ("", "pydoc", "pydoc_data"):
        return load_lm_data(vocab)
    name, _, arg = spec.partition(":")
    if name.strip().lower() in TEXT_DATASETS:
        if not arg:
            found = find_wikitext()
            if found is None:
                raise DatasetUnavailableError(f"{name}: no folder given and none found. {WIKITEXT_HOWTO}")
            arg = str(found)
        return load_wikitext(arg, vocab)
    raise DatasetUnavailableError(f"unknown text data set {spec!r}: use 'pydoc' or 'wikitext103:FOLDER'")


#: Names of text data sets (the LM's); anything else is an image data set.
TEXT_DATASETS = ("wikitext103", "wikitext-103", "wikitext")


def is_text_dataset(spec: str) -> bool:
    """True for ``pydoc`` and ``wikitext103[:FOLDER]``."""
    name = spec.partition(":")[0].strip().lower()
    return name in TEXT_DATASETS or name in ("pydoc", "pydoc_data")


class TinyLM(nn.Module):
    """Embedding + learned positions, ``layers`` causal Transformer encoder layers, output projection.

    One layer (the default) is the attribute ``block``; more are ``blocks.0``, ``blocks.1``, ...
    """

    def __init__(self, vocab: int = VOCAB, d: int = 64, heads: int = 4, ff: int = 128, context: int = CONTEXT,
                 layers: int = 1):
        super().__init__()
        if layers < 1 or d < 1 or heads < 1 or ff < 1 or d % heads:
            raise ValueError(f"need layers, d, heads, ff >= 1 and d divisible by heads; got {layers}, {d}, {heads}, {ff}")
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        if layers == 1:
            self.block = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        else:
            self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
                                        for _ in range(layers))
        self.out = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x) + self.pos[:t]
        for block in self.blocks if hasattr(self, "blocks") else (self.block,):
            h = block(h, src_mask=self.mask[:t, :t], is_causal=True)
        return self.out(h)


def build_lm(seed: int = 0, vocab: int = VOCAB, *, d_model: int = 64, layers: int = 1, heads: int = 4,
             ff: int = 128) -> TinyLM:
    """A :class:`TinyLM` over ``vocab`` token ids initialised under ``seed`` (the caller's RNG untouched);
    the defaults are the smaller scales' one-layer model (d 64)."""
    return seeded(lambda: TinyLM(vocab, d_model, heads, ff, layers=layers), seed)


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


def lm_perplexity(model: nn.Module, data: LMData, chunk: int = 256) -> float:
    """Held-out perplexity over consecutive non-overlapping windows of the test part (``chunk``
    windows per forward pass, so WikiText-103's 245k test tokens do not need a 1 GB logit tensor)."""
    n = (data.test.numel() - 1) // CONTEXT
    device = next(model.parameters()).device
    x = data.test[: n * CONTEXT].reshape(n, CONTEXT).to(device)
    y = data.test[1 : n * CONTEXT + 1].reshape(n, CONTEXT).to(device)
    if n <= chunk:
        with torch.no_grad():
            return math.exp(float(lm_loss(model, x, y)))
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, chunk):  # chunks of windows bound memory (not a loop over tokens)
            logits = model(x[i : i + chunk])
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[i : i + chunk].reshape(-1), reduction="sum"))
    return math.exp(total / (n * CONTEXT))
