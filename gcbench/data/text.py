"""Parallel text for translation runs: Debian's German-English dictionary, WMT-style files, BLEU.

Nothing here downloads. Two sources of sentence pairs:

* :func:`load_dictd_pairs`: the German-English dictionary of TU Chemnitz (Frank Richter, GPL-2+) as
  Debian's ``dict-de-en`` package ships it for ``dictd``: ``/usr/share/dictd/german-english.dict.dz``
  (gzip-readable text) and ``german-english.index``. Many entries are whole example sentences
  ("Sein Vorschlag passt mir gar nicht." -> "I don't like his suggestion at all."); with
  :data:`MIN_WORDS` = 5 words on both sides there are about 27,000 of them (see
  :func:`parse_dictd_entry` for how an entry becomes a pair). Install with
  ``apt-get install dict-de-en``.
* :func:`load_parallel_text`: WMT14-style plain parallel text (one sentence per line, the two files
  line-aligned, optionally gzip-compressed), e.g. ``train.en`` / ``train.de`` and
  ``newstest2014.en`` / ``newstest2014.de`` for users who have WMT14.

:func:`split_pairs` makes a deterministic train/held-out split, :class:`Vocab` a word-level
vocabulary built from the training split, and :func:`corpus_bleu` scores greedy translations with
sacrebleu (corpus BLEU, lowercased, on this module's word tokens for both sides).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataFormatError, DatasetUnavailableError
from .files import open_maybe_gzip

#: Where Debian's dict-de-en puts its files.
DICTD_DIR = Path("/usr/share/dictd")
DICTD_STEM = "german-english"
#: The apt line that installs the dictionary.
DICTD_INSTALL = "apt-get install -y dict-de-en"
#: Pairs kept by default: at least this many words on both sides (whole sentences, not headwords).
MIN_WORDS = 5
#: dictd's base64 alphabet for offsets and lengths in ``.index`` files.
DICTD_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(DICTD_B64)}
#: Annotations removed from both sides: {grammar}, [usage], <cross refs>, (notes).
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)")
_TOKEN = re.compile(r"\w+|[^\w\s]")

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


@dataclass(frozen=True)
class ParallelCorpus:
    """Sentence pairs and where they came from.

    Attributes:
        pairs: ``(source, target)`` sentences.
        name: short name for reports.
        description: one line: source files, package, filters.
        params: how the pairs were selected (printed in reports).
    """

    pairs: list[tuple[str, str]]
    name: str
    description: str
    params: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-ready description."""
        return {"name": self.name, "description": self.description, "pairs": len(self.pairs), "params": dict(self.params)}


# ---------------------------------------------------------------------------------------------------
# dictd (dict-de-en)
# ---------------------------------------------------------------------------------------------------


def decode_dictd_number(text: str) -> int:
    """A dictd ``.index`` offset or length: base64 digits, most significant first.

    Raises:
        DataFormatError: a character outside dictd's alphabet, or an empty field.
    """
    if not text:
        raise DataFormatError("empty dictd number")
    value = 0
    for ch in text:
        digit = _B64_VALUE.get(ch)
        if digit is None:
            raise DataFormatError(f"invalid dictd base64 digit {ch!r} in {text!r}")
        value = value * 64 + digit
    return value


def encode_dictd_number(value: int) -> str:
    """Inverse of :func:`decode_dictd_number` (used to write test fixtures)."""
    if value < 0:
        raise ValueError("dictd numbers are >= 0")
    digits = []
    while True:
        value, r = divmod(value, 64)
        digits.append(DICTD_B64[r])
        if value == 0:
            return "".join(reversed(digits))


def clean_text(text: str) -> str:
    """Remove dictionary annotations (``{..} [..] <..> (..)``) and ellipses; squeeze spaces."""
    return " ".join(_ANNOTATION.sub(" ", text).replace("…", " ").split())


def parse_dictd_entry(entry: str) -> tuple[str, str] | None:
    """One dictd entry of dict-de-en -> ``(german, english)``, or None when a side is empty.

    An entry is the headword line (German), then lines indented by one space (grammar and notes,
    or the wrapped rest of a long German headword), then the English translation indented by three
    spaces (long ones wrap onto following lines, indented or not)::

        Sein Vorschlag passt mir gar nicht.
        <one space, here empty>
           I don't like his suggestion at all.

    German = headword + the one-space lines, English = the translation up to its first ``;``
    (the other alternatives are dropped); both go through :func:`clean_text`.
    """
    lines = entry.split("\n")
    german = [lines[0]]
    i = 1
    while i < len(lines) and not lines[i].startswith("   "):
        if lines[i].strip():
            german.append(lines[i])
        i += 1
    english = " ".join(line.strip() for line in lines[i:] if line.strip())
    de = clean_text(" ".join(german))
    en = clean_text(english.split(";")[0])
    if not de or not en:
        return None
    return de, en


def dictd_paths(root: str | os.PathLike | None = None, stem: str = DICTD_STEM) -> tuple[Path, Path]:
    """``(dict file, index file)`` under ``root`` (default :data:`DICTD_DIR`); ``.dict.dz`` or ``.dict``.

    Raises:
        DatasetUnavailableError: the files are not there (the message says how to install them).
    """
    base = Path(root) if root is not None else DICTD_DIR
    index = base / f"{stem}.index"
    for name in (f"{stem}.dict.dz", f"{stem}.dict"):
        if (base / name).is_file() and index.is_file():
            return base / name, index
    raise DatasetUnavailableError(
        f"the German-English dictionary is not installed ({base}/{stem}.dict.dz and .index are missing). "
        f"It ships in Debian/Ubuntu's dict-de-en package: `{DICTD_INSTALL}` (as root), or pass its folder "
        "as dataset='dictd:/path/to/folder', or use WMT14 files: dataset='wmt14:train.en,train.de[,test.en,test.de]'"
    )


def load_dictd_pairs(
    root: str | os.PathLike | None = None,
    *,
    stem: str = DICTD_STEM,
    min_words: int = MIN_WORDS,
    max_words: int | None = None,
) -> ParallelCorpus:
    """Sentence pairs ``(german, english)`` from a dictd German-English dictionary.

    Entries are read at the offsets the ``.index`` lists (in file order; an offset listed twice is
    read once), parsed by :func:`parse_dictd_entry`, and kept when both sides have between
    ``min_words`` and ``max_words`` whitespace-separated words; exact duplicate pairs are dropped.

    Raises:
        DatasetUnavailableError: the dictionary is not installed.
        DataFormatError: a malformed index line or an entry outside the dictionary file.
    """
    dict_path, index_path = dictd_paths(root, stem)
    with open_maybe_gzip(dict_path) as fh:
        data = fh.read()
    # An entry with min_words words on both sides holds at least 4 min_words + 3 bytes and
    # 2 min_words + 1 spaces: shorter entries (most are single words) are skipped unparsed.
    shortest = 4 * min_words + 3
    spans: dict[int, int] = {}
    entries = 0
    with open(index_path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                if line.strip():
                    raise DataFormatError(f"{index_path}:{lineno}: expected 'headword<TAB>offset<TAB>length', got {line!r}")
                continue
            entries += 1
            try:
                length = decode_dictd_number(parts[2])
                if length < shortest:
                    continue
                off = decode_dictd_number(parts[1])
            except DataFormatError as err:
                raise DataFormatError(f"{index_path}:{lineno}: {err}") from None
            if off + length > len(data):
                raise DataFormatError(f"{index_path}:{lineno}: entry [{off}, {off + length}) lies outside {dict_path} ({len(data)} bytes)")
            spans.setdefault(off, length)
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for off in sorted(spans):
        if data.count(b" ", off, off + spans[off]) < 2 * min_words + 1:
            continue
        parsed = parse_dictd_entry(data[off : off + spans[off]].decode("utf-8", errors="replace"))
        if parsed is None or parsed[0].startswith("00-database"):
            continue
        nd, ne = len(parsed[0].split()), len(parsed[1].split())
        if nd < min_words or ne < min_words:
            continue
        if max_words is not None and (nd > max_words or ne > max_words):
            continue
        if parsed not in seen:
            seen.add(parsed)
            pairs.append(parsed)
    return ParallelCorpus(
        pairs,
        name="dict-de-en",
        description=(f"Debian dict-de-en ({dict_path.name}: TU Chemnitz German-English dictionary, GPL-2+), "
                     f"entries with {min_words}{'-' + str(max_words) if max_words else '+'} words on both sides"),
        params={"path": str(dict_path), "entries": entries, "min_words": min_words, "max_words": max_words},
    )


# ---------------------------------------------------------------------------------------------------
# WMT14-style plain text
# ---------------------------------------------------------------------------------------------------


def _read_lines(path: Path) -> list[str]:
    try:
        with open_maybe_gzip(path) as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise DatasetUnavailableError(f"{path}: no such file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: not UTF-8 text ({err})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def load_parallel_text(
    source: str | os.PathLike,
    target: str | os.PathLike,
    *,
    max_pairs: int | None = None,
    max_words: int | None = None,
    name: str = "wmt14",
) -> ParallelCorpus:
    """Line-aligned parallel text (WMT14's ``train.en`` / ``train.de`` layout; ``.gz`` read as gzip).

    Pairs with an empty side are skipped; ``max_words`` drops pairs longer than that on either side;
    ``max_pairs`` keeps the first pairs only.

    Raises:
        DatasetUnavailableError: a file is missing.
        DataFormatError: the files have different numbers of lines, or are not UTF-8.
    """
    src, tgt = Path(source), Path(target)
    a, b = _read_lines(src), _read_lines(tgt)
    if len(a) != len(b):
        raise DataFormatError(f"{src} has {len(a)} lines but {tgt} has {len(b)}: parallel files must be line-aligned")
    pairs = []
    for s, t in zip(a, b):
        s, t = s.strip(), t.strip()
        if not s or not t:
            continue
        if max_words is not None and (len(s.split()) > max_words or len(t.split()) > max_words):
            continue
        pairs.append((s, t))
        if max_pairs is not None and len(pairs) >= max_pairs:
            break
    return ParallelCorpus(pairs, name=name, description=f"parallel text {src} / {tgt}",
                          params={"source": str(src), "target": str(tgt), "max_pairs": max_pairs, "max_words": max_words})


# ---------------------------------------------------------------------------------------------------
# splits, tokens, vocabularies
# ---------------------------------------------------------------------------------------------------


def split_pairs(pairs: Sequence[tuple[str, str]], held_out: int | float, seed: int = 0) -> tuple[list, list]:
    """Deterministic ``(train, held_out)`` split: a seeded permutation of the pairs' order.

    ``held_out`` is a count (int) or a fraction (float in (0, 1)). The same pairs in the same order
    and the same seed always give the same split.
    """
    n = len(pairs)
    k = round(held_out * n) if isinstance(held_out, float) else int(held_out)
    if not 0 < k < n:
        raise ValueError(f"held_out must leave both splits non-empty: {held_out!r} of {n} pairs")
    perm = np.random.default_rng(seed).permutation(n)
    test = sorted(perm[:k].tolist())
    train = sorted(perm[k:].tolist())
    return [pairs[i] for i in train], [pairs[i] for i in test]


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens: runs of word characters, and every other non-space character alone."""
    return _TOKEN.findall(text.lower())


class Vocab:
    """A word-level vocabulary: ``<pad> <bos> <eos> <unk>`` then words by descending count.

    Args:
        sentences: training sentences (already tokenized, or strings passed through :func:`tokenize`).
        max_size: most words kept (specials not counted); None = all.
        min_count: drop words seen fewer times.
    """

    def __init__(self, sentences: Iterable[Sequence[str] | str], *, max_size: int | None = None, min_count: int = 1) -> None:
        counts: Counter[str] = Counter()
        for s in sentences:
            counts.update(tokenize(s) if isinstance(s, str) else s)
        words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[:max_size]
        self.itos: list[str] = list(SPECIALS) + words
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def pad(self) -> int:
        return 0

    @property
    def bos(self) -> int:
        return 1

    @property
    def eos(self) -> int:
        return 2

    @property
    def unk(self) -> int:
        return 3

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Token ids of ``text`` (unknown words -> ``<unk>``), truncated to ``max_len``, no BOS/EOS."""
        ids = [self.stoi.get(t, self.unk) for t in tokenize(text)]
        return ids[:max_len] if max_len is not None else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Words of ``ids`` joined by spaces, stopping at ``<eos>`` and skipping ``<pad>``/``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos:
                break
            if i in (self.pad, self.bos):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return " ".join(out)


# ---------------------------------------------------------------------------------------------------
# BLEU
# ---------------------------------------------------------------------------------------------------


def bleu_signature() -> str:
    """sacrebleu's signature of the BLEU :func:`corpus_bleu` computes (for reports)."""
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:  # pragma: no cover
        return "sacrebleu not installed"
    metric = BLEU(tokenize="none", force=True)
    metric.corpus_score(["a"], [["a"]])  # the signature needs the number of references
    return str(metric.get_signature()) + " (inputs lowercased and tokenized by gcbench.data.text.tokenize)"


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of ``hypotheses`` against one reference each, with sacrebleu.

    Both sides are lowercased and split by :func:`tokenize` (so punctuation and apostrophes are
    tokens on both sides), then scored by ``sacrebleu.corpus_bleu`` with ``tokenize="none"`` and its
    defaults otherwise: 4-grams, ``smooth_method="exp"``, the corpus brevity penalty. Not comparable
    to the paper's WMT14 numbers (cased, 13a-tokenized newstest2014); it ranks methods on one split.

    Raises:
        DatasetUnavailableError: sacrebleu is not installed (it is pinned in envs/requirements-cpu.txt).
        ValueError: different numbers of hypotheses and references.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    try:
        import sacrebleu
    except ImportError:  # pragma: no cover - sacrebleu is a pinned dependency
        raise DatasetUnavailableError("BLEU needs sacrebleu: `pip install sacrebleu==2.6.0`") from None
    hyps = [" ".join(tokenize(h)) for h in hypotheses]
    refs = [" ".join(tokenize(r)) for r in references]
    # force=True: the text is tokenized on purpose (sacrebleu would otherwise warn about it)
    return float(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score)
