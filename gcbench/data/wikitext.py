"""WikiText-103 (Merity et al. 2016) through Hugging Face ``datasets``: tokens of one split.

Two sources, both read by ``datasets`` (nothing downloaded unless the user asks, :mod:`.hf`):

* the unzipped distribution (``wiki.{train,valid,test}.tokens``, or the raw variant ``wiki.*.raw``),
  one file per split, through the ``text`` builder (:func:`file_tokens`);
* the Hub's ``wikitext`` data set (configs ``wikitext-103-v1`` / ``wikitext-103-raw-v1``) when it is
  in the Hugging Face cache (:func:`hub_tokens`).

A line's tokens: whitespace-separated for the tokenised variant (``<unk>`` already in place), words
(with inner apostrophes), numbers and single other characters for the raw one (:data:`RAW_TOKEN`);
each non-empty line ends with ``<eos>``, as in the usual WikiText language-model setup. Tokenising
goes through ``Dataset.map`` with a fingerprint of the split's Arrow files, so a second run reads the
cached tokens instead of tokenising ~1.8M lines again.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import lzma
import os
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DataFormatError, DatasetUnavailableError
from .files import check_data_file, open_maybe_compressed
from .hf import load_builder, load_hub

#: The splits, named as in the distribution's file names.
WIKITEXT_SPLITS = ("train", "valid", "test")
#: The Hub's config per variant and split names per split.
HUB_CONFIGS = {"tokens": "wikitext-103-v1", "raw": "wikitext-103-raw-v1"}
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
#: Tokens of the raw variant: words (with inner apostrophes), numbers, any other single non-space character.
RAW_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\d+|[^\sA-Za-z\d]")
EOS = "<eos>"
#: Bump when tokenising changes: the cached tokens are keyed by it.
CACHE_VERSION = 1


def tokens_batch(batch: dict[str, list], variant: str) -> dict[str, list]:
    """The tokens of a batch of lines (column ``text``) of ``variant``, one list per line (the
    ``Dataset.map`` function of :func:`file_tokens` and :func:`hub_tokens`)."""
    out = []
    for line in batch["text"]:
        toks = line.split() if variant == "tokens" else RAW_TOKEN.findall(line)
        out.append(toks + [EOS] if toks else [])
    return {"tokens": out}


def _first_bad_line(path: Path) -> str | None:
    """``"LINE: why"`` for the first line that is not UTF-8 text or holds a NUL byte (a binary file),
    counted in the decompressed text of a gzip, bzip2 or xz file (the text ``datasets`` reads). Lines
    are read in pieces of at most 1 MiB, so a file without line breaks does not fill memory.

    Raises:
        DataFormatError: a compressed file that is corrupt or truncated.
    """
    opened = open_maybe_compressed(path)  # the gzip, bzip2 and xz files ``datasets`` decompresses
    lineno, col, decoder = 1, 0, codecs.getincrementaldecoder("utf-8")()
    try:
        with opened as fh:
            while piece := fh.readline(1 << 20):
                if b"\x00" in piece:
                    return f"{lineno}: NUL byte: not a WikiText text file"
                try:
                    decoder.decode(piece, final=piece.endswith(b"\n"))
                except UnicodeDecodeError as err:
                    return f"{lineno}: not UTF-8 text ({err.reason} at byte {col + err.start})"
                lineno, col = (lineno + 1, 0) if piece.endswith(b"\n") else (lineno, col + len(piece))
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        return f"{lineno}: not UTF-8 text ({err.reason} at the end of the file)"
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as err:  # gzip.BadGzipFile is an OSError
        raise DataFormatError(f"{path}: corrupt or truncated compressed file ({type(err).__name__}: {err})") from None
    return None


def _tokens(ds: Any, variant: str, max_tokens: int | None) -> list[str]:
    """The first ``max_tokens`` tokens of a Dataset of lines (column ``text``), tokenised by a cached
    ``Dataset.map``; only the lines needed are converted to Python strings."""
    files = [f["filename"] for f in ds.cache_files]
    fp = hashlib.sha256(json.dumps([files, ds.num_rows, variant, CACHE_VERSION]).encode()).hexdigest()[:32] if files else None
    tok = ds.map(tokens_batch, batched=True, fn_kwargs={"variant": variant}, remove_columns=ds.column_names, new_fingerprint=fp)
    if tok.num_rows == 0:
        return []
    import pyarrow.compute as pc

    column = tok.with_format("arrow")["tokens"]
    if max_tokens is not None:
        lengths = np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False), dtype=np.int64)
        lines = int(np.searchsorted(np.cumsum(lengths), max_tokens)) + 1  # lines holding the first max_tokens
        column = column.slice(0, lines)
    out = pc.list_flatten(column).to_pylist()
    return out[:max_tokens] if max_tokens is not None else out


def file_tokens(path: str | os.PathLike, variant: str = "tokens", max_tokens: int | None = None) -> list[str]:
    """The tokens of one WikiText file (``<eos>`` after every non-empty line), at most ``max_tokens``,
    read by ``datasets``' ``text`` builder (Arrow cache) and tokenised by a cached ``Dataset.map``.

    Raises:
        DatasetUnavailableError: no such file.
        DataFormatError: not a regular file; a NUL byte (a binary file) or bytes that are not UTF-8, naming the
            line (of the decompressed text for a gzip, bzip2 or xz file); a corrupt compressed file.
    """
    if variant not in HUB_CONFIGS:
        raise ValueError(f"variant must be 'tokens' or 'raw', got {variant!r}")
    p = Path(path)
    check_data_file(p, "a WikiText file is a text file")
    try:
        ds = load_builder(p, "text")
    except DataFormatError:
        bad = _first_bad_line(p)
        if bad is None:
            raise
        raise DataFormatError(f"{p}:{bad}") from None
    if ds.num_rows and _any_nul(ds.with_format("arrow")["text"]):
        raise DataFormatError(f"{p}:{_first_bad_line(p) or '?: NUL byte'}")
    return _tokens(ds, variant, max_tokens)


def _any_nul(column: Any) -> bool:
    """True when any string of an Arrow column holds a NUL character (vectorised)."""
    import pyarrow.compute as pc

    return bool(pc.any(pc.match_substring(column, "\x00")).as_py())


def hub_tokens(split: str, variant: str = "tokens", max_tokens: int | None = None, *, howto: str) -> list[str]:
    """The tokens of one split of the Hub's ``wikitext`` (``wikitext-103-v1`` or the raw config) from
    the Hugging Face cache, as :func:`file_tokens` makes them (the Hub's rows are the files' lines).

    Raises:
        DatasetUnavailableError: not in the cache and downloads not allowed; the message ends with ``howto``.
    """
    ds = load_hub("wikitext", HUB_CONFIGS[variant], split=HUB_SPLITS[split], howto=howto)
    return _tokens(ds, variant, max_tokens)


def hub_available(variant: str = "tokens") -> bool:
    """True when the Hub's WikiText-103 (``variant``) can be loaded here (cached, or downloads allowed)."""
    try:
        load_hub("wikitext", HUB_CONFIGS[variant], split="test", howto="")
    except DatasetUnavailableError:
        return False
    return True
