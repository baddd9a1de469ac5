"""Parallel text for translation runs: Debian's German-English dictionary, WMT14, tokens, BLEU.

Every corpus is a Hugging Face ``datasets.Dataset`` (columns ``source``, ``target``) held by a
:class:`ParallelCorpus`; nothing here downloads (:mod:`.hf` keeps ``datasets`` offline unless the
user asks). Sources of sentence pairs:

* :func:`load_dictd_pairs`: the German-English dictionary of TU Chemnitz (Frank Richter, GPL-2+) as
  Debian's ``dict-de-en`` package ships it for ``dictd``: ``/usr/share/dictd/german-english.dict.dz``
  (gzip-readable text) and ``german-english.index``. Many entries are whole example sentences
  ("Sein Vorschlag passt mir gar nicht." -> "I don't like his suggestion at all."); with
  :data:`MIN_WORDS` = 5 words on both sides there are about 27,000 of them (see
  :func:`parse_dictd_entry` for how an entry becomes a pair). Install with
  ``apt-get install dict-de-en``. Parsed once, then cached as Arrow in gcbench's cache folder.
* :func:`load_wmt14`: WMT14 English-German, from ``datasets.load_dataset("wmt14", "de-en")`` when
  the user has it in the Hugging Face cache (or allows the download), or from local files through
  ``datasets``' ``text`` builder (line-aligned ``train.en`` / ``train.de``, optionally ``.gz``:
  :func:`load_parallel_text`) or ``json`` / ``parquet`` builders (records with a ``translation``
  ``{"en", "de"}`` field, the Hub's schema, or ``en`` and ``de`` columns: :func:`load_parallel_records`).

:func:`split_indices` makes a deterministic train/held-out split, :func:`tokenized` adds the word
tokens with ``Dataset.map`` (its fingerprint cache: a second run does not re-tokenise),
:class:`Vocab` is a word-level vocabulary from the training split's tokens (:meth:`Vocab.from_tokens`),
:func:`encode_tokens` turns tokens into padded id tensors (``Dataset.map`` again, cached), and
:func:`corpus_bleu` scores greedy translations with sacrebleu (corpus BLEU, lowercased, on this
module's word tokens for both sides).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import DataFormatError, DatasetUnavailableError
from .files import default_cache_dir, open_maybe_gzip, staging_folder
from .hf import builder_for, hf_datasets, load_builder, load_hub

#: Where Debian's dict-de-en puts its files.
DICTD_DIR = Path("/usr/share/dictd")
#: Environment variable naming another folder holding the dictionary's files (used when no folder is passed).
DICTD_ENV = "GCBENCH_DICTD_DIR"
DICTD_STEM = "german-english"
#: The apt line that installs the dictionary.
DICTD_INSTALL = "apt-get install -y dict-de-en"
#: Pairs kept by default: at least this many words on both sides (whole sentences, not headwords).
MIN_WORDS = 5
#: Largest dictd file accepted, the ``.dict`` counted decompressed (the German-English one is 32 MB
#: decompressed, its index 14 MB): a larger file is refused as not a dictionary, so a gzip bomb
#: or a huge file cannot exhaust memory.
MAX_DICTD_BYTES = 1 << 28
#: dictd's base64 alphabet for offsets and lengths in ``.index`` files.
DICTD_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(DICTD_B64)}
#: Annotations removed from both sides: {grammar}, [usage], <cross refs>, (notes).
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)")
_TOKEN = re.compile(r"\w+|[^\w\s]")

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
#: Bump when parsing, cleaning, tokenising or encoding changes: the Arrow caches are keyed by it.
CACHE_VERSION = 1
#: The apt line / Python call / file layouts that provide WMT14 (printed when it is missing).
WMT14_HOWTO = (
    "WMT14 en-de is not downloaded unless you ask: run once with HF_DATASETS_OFFLINE=0 to let Hugging Face "
    "datasets fetch it (datasets.load_dataset('wmt14', 'de-en'), about 1.4 GB, cached in gcbench's cache), "
    "or pass local files: --dataset wmt14:TRAIN.en,TRAIN.de[,TEST.en,TEST.de] (text, .gz ok) "
    "or wmt14:TRAIN.jsonl|parquet[,TEST.jsonl|parquet] (records with translation.en/.de)"
)


@dataclass(frozen=True)
class ParallelCorpus:
    """Sentence pairs and where they came from.

    Attributes:
        pairs: ``(source, target)`` sentences.
        name: short name for reports.
        description: one line: source files, package, filters.
        params: how the pairs were selected (printed in reports).
        dataset: the same pairs as an Arrow-backed ``datasets.Dataset`` (columns ``source``,
            ``target``) when they were loaded from files; ``Dataset.map`` caches its results beside
            those files. None for pairs built in memory (:meth:`as_dataset` makes an uncached one).
    """

    pairs: list[tuple[str, str]]
    name: str
    description: str
    params: dict = field(default_factory=dict)
    dataset: Any = field(default=None, repr=False, compare=False)

    def summary(self) -> dict:
        """JSON-ready description."""
        return {"name": self.name, "description": self.description, "pairs": len(self.pairs), "params": dict(self.params)}

    def as_dataset(self) -> Any:
        """:attr:`dataset`, or the pairs as an in-memory ``datasets.Dataset`` (nothing cached)."""
        if self.dataset is not None:
            return self.dataset
        return hf_datasets().Dataset.from_dict({"source": [a for a, _ in self.pairs], "target": [b for _, b in self.pairs]})

    def swapped(self, note: str = "") -> "ParallelCorpus":
        """The same corpus translated the other way (``source`` and ``target`` exchanged)."""
        ds = self.dataset.rename_columns({"source": "target", "target": "source"}) if self.dataset is not None else None
        return ParallelCorpus([(b, a) for a, b in self.pairs], self.name, self.description + note, dict(self.params), ds)


def _pairs_of(ds: Any) -> list[tuple[str, str]]:
    """The ``(source, target)`` rows of a Dataset as Python tuples (one columnar read)."""
    if ds.num_rows == 0:
        return []
    cols = ds.select_columns(["source", "target"]).to_dict()
    return list(zip(cols["source"], cols["target"]))


def _fingerprint(ds: Any, step: str, params: Mapping[str, Any]) -> str | None:
    """The ``Dataset.map`` fingerprint of ``step`` with ``params`` applied to ``ds``: a digest of the
    Arrow files ``ds`` reads (their names carry the builder's hash of the source files), its rows and
    columns, and :data:`CACHE_VERSION`. Only whole cached datasets (or their first rows) are mapped
    here, so these identify the content. None for in-memory data (nothing is cached then)."""
    files = [f["filename"] for f in ds.cache_files]
    if not files:
        return None
    key = json.dumps([files, ds.num_rows, ds.column_names, step, dict(params), CACHE_VERSION], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def text_cache_dir(root: str | os.PathLike | None = None) -> Path:
    """Where prepared text corpora are cached as Arrow: ``<root>/text``, ``root`` the data cache
    (``gcbench data --cache-dir``; default :func:`gcbench.data.files.default_cache_dir`)."""
    return (Path(root) if root is not None else default_cache_dir()) / "text"


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
    """``(dict file, index file)`` under ``root`` (default: the folder :data:`DICTD_ENV` names, else
    :data:`DICTD_DIR`); ``.dict.dz`` or ``.dict``.

    Raises:
        DatasetUnavailableError: the files are not there (the message says how to install them).
    """
    base = Path(root if root is not None else os.environ.get(DICTD_ENV) or DICTD_DIR)
    index = base / f"{stem}.index"
    for name in (f"{stem}.dict.dz", f"{stem}.dict"):
        if (base / name).is_file() and index.is_file():
            return base / name, index
    raise DatasetUnavailableError(
        f"the German-English dictionary is not installed ({base}/{stem}.dict.dz and .index are missing). "
        f"It ships in Debian/Ubuntu's dict-de-en package: `{DICTD_INSTALL}` (as root), or pass its folder "
        f"as dataset='dictd:/path/to/folder' (or set {DICTD_ENV}), or use WMT14 files: dataset='wmt14:train.en,train.de[,test.en,test.de]'"
    )


def parse_dictd(dict_path: Path, index_path: Path, min_words: int, max_words: int | None) -> tuple[list[tuple[str, str]], int]:
    """``(pairs, index entries)`` of a dictd dictionary: entries read at the offsets the ``.index``
    lists (in file order; an offset listed twice is read once), parsed by :func:`parse_dictd_entry`,
    kept when both sides have between ``min_words`` and ``max_words`` whitespace-separated words;
    exact duplicate pairs are dropped.

    Raises:
        DataFormatError: a malformed or non-UTF-8 index line, an entry outside the dictionary file, a
            truncated or corrupt ``.dict.dz``, an unreadable file, or a file over :data:`MAX_DICTD_BYTES`
            (the message names the file).
    """
    data = _read_capped(dict_path)
    raw_index = _read_capped(index_path, compressed=False)
    try:
        index_text = raw_index.decode("utf-8")
    except UnicodeDecodeError as err:
        lineno = raw_index.count(b"\n", 0, err.start) + 1
        raise DataFormatError(f"{index_path}:{lineno}: not UTF-8 text ({err.reason}); not a dictd index") from None
    del raw_index
    # An entry with min_words words on both sides holds at least 4 min_words + 3 bytes and
    # 2 min_words + 1 spaces: shorter entries (most are single words) are skipped unparsed.
    shortest = 4 * min_words + 3
    spans: dict[int, int] = {}
    entries = 0
    with io.StringIO(index_text, newline=None) as fh:  # lines split as a file opened in text mode splits them
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
    return pairs, entries


def _read_capped(path: Path, *, compressed: bool = True) -> bytes:
    """The bytes of a dictd file (decompressed when ``compressed`` and it starts with the gzip magic
    bytes), at most :data:`MAX_DICTD_BYTES` of them held in memory.

    Raises:
        DataFormatError: an unreadable file, a truncated or corrupt gzip stream, or more than
            :data:`MAX_DICTD_BYTES` bytes; the message names ``path``.
    """
    chunks, total = [], 0
    try:
        with (open_maybe_gzip(path) if compressed else open(path, "rb")) as fh:
            while chunk := fh.read(1 << 20):  # chunks: the cap bounds memory before the whole file is read
                total += len(chunk)
                if total > MAX_DICTD_BYTES:
                    raise DataFormatError(f"{path}: more than {MAX_DICTD_BYTES} bytes{' decompressed' if compressed else ''}; "
                                          "not a dictd dictionary file")
                chunks.append(chunk)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise DataFormatError(f"{path}: unreadable, truncated or corrupt ({type(err).__name__}: {err})") from None
    return b"".join(chunks)


def _cached_entries(meta_path: Path) -> int | None:
    """The entry count recorded in a dictionary cache's ``gcbench.json``, or None where the file is
    missing, unreadable or not of the shape :func:`load_dictd_pairs` writes (a corrupted cache)."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):  # missing, a folder, not UTF-8, not JSON
        return None
    entries = meta.get("entries") if isinstance(meta, dict) else None
    return entries if type(entries) is int and entries >= 0 else None


def load_dictd_pairs(
    root: str | os.PathLike | None = None,
    *,
    stem: str = DICTD_STEM,
    min_words: int = MIN_WORDS,
    max_words: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ParallelCorpus:
    """Sentence pairs ``(german, english)`` from a dictd German-English dictionary (:func:`parse_dictd`),
    as a ``datasets.Dataset`` built once and cached as Arrow under ``cache_dir`` (default
    :func:`text_cache_dir`), keyed by the dictionary files (path, size, modification time), the
    word limits and :data:`CACHE_VERSION`; later calls read the Arrow files and parse nothing. A cache
    whose ``gcbench.json`` is missing or corrupted (:func:`_cached_entries`) is built again.

    Raises:
        DatasetUnavailableError: the dictionary is not installed.
        DataFormatError: a malformed dictionary file (as :func:`parse_dictd` says); the cache is left as it was.
    """
    dict_path, index_path = dictd_paths(root, stem)
    stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in (dict_path, index_path)]
    key = hashlib.sha256(json.dumps([stats, min_words, max_words, CACHE_VERSION]).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir is not None else text_cache_dir()
    folder = folder / f"dict-de-en-{key}"
    hfd = hf_datasets()
    meta_path = folder / "gcbench.json"
    if _cached_entries(meta_path) is None:  # written last: a readable one marks a complete cache
        pairs, entries = parse_dictd(dict_path, index_path, min_words, max_words)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with staging_folder(folder.parent) as tmp:
            features = hfd.Features({"source": hfd.Value("string"), "target": hfd.Value("string")})
            # one shard even when empty: datasets cannot read back a save without shards
            hfd.Dataset.from_dict({"source": [a for a, _ in pairs], "target": [b for _, b in pairs]},
                                  features=features).save_to_disk(str(tmp / "ds"), num_shards=1)
            (tmp / "ds" / "gcbench.json").write_text(json.dumps({"entries": entries, "files": stats}))
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete or corrupted earlier attempt
            try:
                os.replace(tmp / "ds", folder)
            except OSError:  # another process cached it first: use theirs
                if not meta_path.is_file():
                    raise
    entries = _cached_entries(meta_path)
    if entries is None:
        raise DatasetUnavailableError(f"{meta_path}: the dictionary's cache is corrupted; remove {folder} and run again")
    ds = hfd.load_from_disk(str(folder))
    return ParallelCorpus(
        _pairs_of(ds),
        name="dict-de-en",
        description=(f"Debian dict-de-en ({dict_path.name}: TU Chemnitz German-English dictionary, GPL-2+), "
                     f"entries with {min_words}{'-' + str(max_words) if max_words else '+'} words on both sides"),
        params={"path": str(dict_path), "entries": entries, "min_words": min_words, "max_words": max_words},
        dataset=ds,
    )


# ---------------------------------------------------------------------------------------------------
# WMT14: the Hub's copy, or local files through datasets' text / json / parquet builders
# ---------------------------------------------------------------------------------------------------


def _clean_batch(batch: dict[str, list], max_words: int | None) -> dict[str, list]:
    """Strip both sides; drop pairs with an empty side or more than ``max_words`` words on a side."""
    src, tgt = [], []
    for s, t in zip(batch["source"], batch["target"]):
        s, t = (s or "").strip(), (t or "").strip()
        if not s or not t or (max_words is not None and (len(s.split()) > max_words or len(t.split()) > max_words)):
            continue
        src.append(s)
        tgt.append(t)
    return {"source": src, "target": tgt}


def _clean_pairs(ds: Any, max_words: int | None, max_pairs: int | None) -> Any:
    """:func:`_clean_batch` over the whole Dataset (``Dataset.map``, cached), then its first ``max_pairs``."""
    ds = ds.map(_clean_batch, batched=True, fn_kwargs={"max_words": max_words}, remove_columns=ds.column_names,
                new_fingerprint=_fingerprint(ds, "clean", {"max_words": max_words}))
    if max_pairs is not None and ds.num_rows > max_pairs:
        ds = ds.select(range(max_pairs))
    return ds


def load_parallel_text(
    source: str | os.PathLike,
    target: str | os.PathLike,
    *,
    max_pairs: int | None = None,
    max_words: int | None = None,
    name: str = "wmt14",
) -> ParallelCorpus:
    """Line-aligned parallel text (WMT14's ``train.en`` / ``train.de`` layout; ``.gz`` decompressed)
    through ``datasets``' ``text`` builder (cached as Arrow).

    Pairs with an empty side are skipped; ``max_words`` drops pairs longer than that on either side;
    ``max_pairs`` keeps the first pairs only.

    Raises:
        DatasetUnavailableError: a file is missing.
        DataFormatError: the files have different numbers of lines, or are not UTF-8 text.
    """
    src, tgt = Path(source), Path(target)
    a, b = load_builder(src, "text"), load_builder(tgt, "text")
    if a.num_rows != b.num_rows:
        raise DataFormatError(f"{src} has {a.num_rows} lines but {tgt} has {b.num_rows}: parallel files must be line-aligned")
    both = hf_datasets().concatenate_datasets([a.rename_column("text", "source"), b.rename_column("text", "target")], axis=1)
    ds = _clean_pairs(both, max_words, max_pairs)
    return ParallelCorpus(_pairs_of(ds), name=name, description=f"parallel text {src} / {tgt} (datasets 'text' builder)",
                          params={"source": str(src), "target": str(tgt), "max_pairs": max_pairs, "max_words": max_words},
                          dataset=ds)


def _translation_columns(ds: Any, where: str, source_lang: str = "en", target_lang: str = "de") -> Any:
    """Records with a ``translation`` struct (the Hub's WMT schema) or plain language columns ->
    columns ``source``, ``target`` (vectorised: ``Dataset.flatten``, no per-row Python)."""
    if "translation" in ds.column_names:
        ds = ds.flatten()
        names = {f"translation.{source_lang}": "source", f"translation.{target_lang}": "target"}
    else:
        names = {source_lang: "source", target_lang: "target"}
    missing = [c for c in names if c not in ds.column_names]
    if missing:
        raise DataFormatError(f"{where}: no {' / '.join(missing)} field (columns: {', '.join(ds.column_names)}); expected "
                              f"records {{'translation': {{'{source_lang}': ..., '{target_lang}': ...}}}} or "
                              f"'{source_lang}' and '{target_lang}' columns")
    return ds.select_columns(list(names)).rename_columns(names)


def load_parallel_records(
    path: str | os.PathLike,
    *,
    max_pairs: int | None = None,
    max_words: int | None = None,
    name: str = "wmt14",
) -> ParallelCorpus:
    """English -> German pairs from a JSON-lines or parquet file through ``datasets``' ``json`` /
    ``parquet`` builder (the Hub's WMT14 schema ``{"translation": {"de": .., "en": ..}}``, or ``en``
    and ``de`` columns). Filters as :func:`load_parallel_text`.

    Raises:
        DatasetUnavailableError: the file is missing.
        DataFormatError: not readable by the builder, or without the language fields.
    """
    p = Path(path)
    kind = builder_for(p)
    ds = _clean_pairs(_translation_columns(load_builder(p, kind), str(p)), max_words, max_pairs)
    return ParallelCorpus(_pairs_of(ds), name=name, description=f"parallel records {p} (datasets '{kind}' builder)",
                          params={"path": str(p), "max_pairs": max_pairs, "max_words": max_words}, dataset=ds)


def load_wmt14(
    files: Sequence[str] = (),
    *,
    max_pairs: int | None = None,
    max_words: int | None = None,
    held_out: int | None = None,
) -> tuple[ParallelCorpus, ParallelCorpus | None]:
    """WMT14 English -> German: ``(train, test)``; ``test`` is None when only training data are given.

    ``files`` empty: ``datasets.load_dataset("wmt14", "de-en")`` from the Hugging Face cache (train
    and newstest2014 = its ``test`` split; downloaded only when the user allowed it, :mod:`.hf`).
    Two or four plain-text files ``TRAIN.en, TRAIN.de[, TEST.en, TEST.de]``: :func:`load_parallel_text`.
    One or two ``.jsonl``/``.json``/``.parquet`` files ``TRAIN[, TEST]``: :func:`load_parallel_records`.
    ``held_out`` caps the test pairs.

    Raises:
        DatasetUnavailableError: not cached / a file missing (the message says how to get WMT14).
        DataFormatError: malformed files or a wrong number of them.
    """
    files = [f for f in files if f]
    if not files:
        splits = []
        for split, cap, words in (("train", max_pairs, max_words), ("test", held_out, None)):
            ds = load_hub("wmt14", "de-en", split=split, howto=WMT14_HOWTO)
            ds = _clean_pairs(_translation_columns(ds, f"wmt14 de-en {split}"), words, cap)
            splits.append(ParallelCorpus(_pairs_of(ds), name="wmt14", description=f"WMT14 de-en {split} split "
                                         "(Hugging Face datasets 'wmt14'), English -> German",
                                         params={"split": split, "max_pairs": cap, "max_words": words}, dataset=ds))
        return splits[0], splits[1]
    if all(builder_for(f) != "text" for f in files) and len(files) in (1, 2):
        train = load_parallel_records(files[0], max_pairs=max_pairs, max_words=max_words)
        return train, load_parallel_records(files[1], max_pairs=held_out) if len(files) == 2 else None
    if len(files) not in (2, 4) or any(builder_for(f) != "text" for f in files):
        raise DataFormatError("wmt14 data: 'wmt14' (Hugging Face cache), 'wmt14:TRAIN.en,TRAIN.de[,TEST.en,TEST.de]' "
                              "(text) or 'wmt14:TRAIN.jsonl|parquet[,TEST.jsonl|parquet]'")
    train = load_parallel_text(files[0], files[1], max_pairs=max_pairs, max_words=max_words)
    return train, load_parallel_text(files[2], files[3], max_pairs=held_out) if len(files) == 4 else None


# ---------------------------------------------------------------------------------------------------
# splits, tokens, vocabularies
# ---------------------------------------------------------------------------------------------------


def split_indices(n: int, held_out: int | float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Deterministic ``(train, held_out)`` row indices (each sorted): a seeded permutation of ``range(n)``.

    ``held_out`` is a count (int) or a fraction (float in (0, 1)). The same ``n`` and seed always
    give the same split.
    """
    k = round(held_out * n) if isinstance(held_out, float) else int(held_out)
    if not 0 < k < n:
        raise ValueError(f"held_out must leave both splits non-empty: {held_out!r} of {n} pairs")
    perm = np.random.default_rng(seed).permutation(n)
    return sorted(perm[k:].tolist()), sorted(perm[:k].tolist())


def split_pairs(pairs: Sequence[tuple[str, str]], held_out: int | float, seed: int = 0) -> tuple[list, list]:
    """The pairs of :func:`split_indices`: ``(train pairs, held-out pairs)``."""
    train, test = split_indices(len(pairs), held_out, seed)
    return [pairs[i] for i in train], [pairs[i] for i in test]


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens: runs of word characters, and every other non-space character alone."""
    return _TOKEN.findall(text.lower())


def _tokenize_batch(batch: dict[str, list]) -> dict[str, list]:
    return {"source_tokens": [tokenize(s) for s in batch["source"]], "target_tokens": [tokenize(t) for t in batch["target"]]}


def tokenized(ds: Any) -> Any:
    """``ds`` (columns ``source``, ``target``) plus ``source_tokens`` and ``target_tokens``
    (:func:`tokenize`), through ``Dataset.map``: for a file-backed data set the result is cached as
    Arrow beside it under a fingerprint of its files and :data:`CACHE_VERSION`, so a second run
    reads the tokens instead of tokenising again."""
    return ds.map(_tokenize_batch, batched=True, new_fingerprint=_fingerprint(ds, "tokenize", {}))


class Vocab:
    """A word-level vocabulary: ``<pad> <bos> <eos> <unk>`` then words by descending count (ties by word).

    Args:
        sentences: training sentences (already tokenized, or strings passed through :func:`tokenize`).
        max_size: most words kept (specials not counted); None = all.
        min_count: drop words seen fewer times.
        counts: word counts to use instead of counting ``sentences`` (:meth:`from_tokens`).
    """

    def __init__(self, sentences: Iterable[Sequence[str] | str] = (), *, max_size: int | None = None, min_count: int = 1,
                 counts: Mapping[str, int] | None = None) -> None:
        if counts is None:
            tally: Counter[str] = Counter()
            for s in sentences:
                tally.update(tokenize(s) if isinstance(s, str) else s)
            counts = tally
        words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[:max_size]
        self.itos: list[str] = list(SPECIALS) + words
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def from_tokens(cls, tokens: Any, *, max_size: int | None = None, min_count: int = 1) -> "Vocab":
        """The vocabulary of a token column (a pyarrow ``list<string>`` array, e.g. a :func:`tokenized`
        split's ``target_tokens`` read with ``with_format("arrow")``), counted by Arrow's
        ``value_counts`` (no Python loop over tokens)."""
        import pyarrow.compute as pc

        vc = pc.value_counts(pc.list_flatten(tokens))
        return cls(counts=dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist())),
                   max_size=max_size, min_count=min_count)

    def digest(self) -> str:
        """SHA-256 of the words in id order (keys the cache of :func:`encode_tokens`)."""
        return hashlib.sha256("\n".join(self.itos).encode()).hexdigest()

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


def _encode_batch(batch: dict[str, list], src: dict[str, int], tgt: dict[str, int], max_len: int) -> dict[str, list]:
    unk, pad, bos, eos = 3, 0, 1, 2  # the positions of SPECIALS
    s = [[src.get(w, unk) for w in toks[:max_len]] for toks in batch["source_tokens"]]
    t = [[bos] + [tgt.get(w, unk) for w in toks[:max_len]] + [eos] for toks in batch["target_tokens"]]
    return {"src_ids": [x + [pad] * (max_len - len(x)) for x in s], "tgt_ids": [y + [pad] * (max_len + 2 - len(y)) for y in t]}


def encode_tokens(ds: Any, src: Vocab, tgt: Vocab, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids of a :func:`tokenized` data set: ``(source (N, max_len), target (N, max_len + 2))`` int64,
    0-padded; sources truncated to ``max_len`` words, targets ``<bos> y[:max_len] <eos>``; unknown
    words -> ``<unk>``. Through ``Dataset.map``, cached for file-backed data under a fingerprint that
    includes both vocabularies (:meth:`Vocab.digest`) and ``max_len``."""
    fp = _fingerprint(ds, "encode", {"src": src.digest(), "tgt": tgt.digest(), "max_len": max_len})
    enc = ds.map(_encode_batch, batched=True, fn_kwargs={"src": src.stoi, "tgt": tgt.stoi, "max_len": max_len},
                 remove_columns=ds.column_names, new_fingerprint=fp)
    import pyarrow.compute as pc

    cols = enc.with_format("arrow")
    n = enc.num_rows
    # fixed-length rows: the flattened values reshape to (N, L) without a per-row conversion
    flat = {c: np.array(pc.list_flatten(cols[c]).to_numpy(), dtype=np.int64) for c in ("src_ids", "tgt_ids")} if n else {}  # a writable copy
    s = torch.from_numpy(flat["src_ids"].reshape(n, max_len)) if n else torch.zeros(0, max_len, dtype=torch.long)
    t = torch.from_numpy(flat["tgt_ids"].reshape(n, max_len + 2)) if n else torch.zeros(0, max_len + 2, dtype=torch.long)
    return s, t


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
