"""WikiText files compressed with gzip, bzip2 or xz: a bad line is named by its number in the
decompressed text and for its own reason (not the compressed bytes'), and a corrupt stream is a
DataFormatError saying so."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from gcbench.data.errors import DataFormatError
from gcbench.data.wikitext import file_tokens

GOOD = b" = Title = \n the first line of text .\n"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress), ("", bytes)])
@pytest.mark.parametrize("bad,why", [(b"caf\xe9 au lait\n", "not UTF-8 text"), (b"nul \x00 here\n", "NUL byte")])
def test_a_bad_line_of_a_compressed_file_is_named_by_its_decompressed_line(tmp_path, suffix, compress, bad, why):
    path = tmp_path / f"wiki.train.tokens{suffix}"
    path.write_bytes(compress(GOOD + bad + GOOD))
    with pytest.raises(DataFormatError, match=rf"{path.name}:3: {why}"):
        file_tokens(path)


def test_a_valid_gz_file_tokenises(tmp_path):
    path = tmp_path / "wiki.valid.tokens.gz"
    path.write_bytes(gzip.compress(GOOD * 3))
    assert file_tokens(path)[:4] == ["=", "Title", "=", "<eos>"]


def test_a_truncated_gz_file_says_so(tmp_path):
    path = tmp_path / "wiki.test.tokens.gz"
    path.write_bytes(gzip.compress(GOOD * 200)[:-30])
    with pytest.raises(DataFormatError, match=rf"{path.name}: corrupt or truncated compressed file \(EOFError"):
        file_tokens(path)


def test_a_long_line_is_scanned_in_pieces(tmp_path):
    path = tmp_path / "wiki.long.tokens"
    path.write_bytes(GOOD + b"word " * 500_000 + b"\xc3" + b"(\n")  # a 2.5 MB line, bad byte near its end
    with pytest.raises(DataFormatError, match=rf"{path.name}:3: not UTF-8 text \(invalid continuation byte at byte 2500000\)"):
        file_tokens(path)
