"""A dictd dictionary that is not one (a non-UTF-8 index, a truncated or corrupt ``.dict.dz``, a huge
or gzip-bomb body) is refused with a DataFormatError naming the file, in bounded memory, and leaves
an earlier cache as it was."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest

from gcbench.data import text
from gcbench.data.errors import DataFormatError
from gcbench.data.text import encode_dictd_number, load_dictd_pairs, parse_dictd

SENTENCE = "Sein Vorschlag passt mir gar nicht.\n\n   I don't like his suggestion at all.\n"


def write_dict(folder, body: bytes, index: bytes | None = None, *, gz: bool = True):
    folder.mkdir(parents=True, exist_ok=True)
    if index is None:
        index = f"sein\t{encode_dictd_number(0)}\t{encode_dictd_number(len(SENTENCE.encode()))}\n".encode()
    (folder / "german-english.index").write_bytes(index)
    name = "german-english.dict.dz" if gz else "german-english.dict"
    (folder / name).write_bytes(gzip.compress(body) if gz else body)
    return folder, folder / name, folder / "german-english.index"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)


def test_a_non_utf8_index_names_the_file_and_line(tmp_path):
    good = f"sein\t{encode_dictd_number(0)}\t{encode_dictd_number(len(SENTENCE.encode()))}\n".encode()
    folder, _, index = write_dict(tmp_path / "d", SENTENCE.encode(), index=good + b"\xff\xfe\tA\tB\n")
    with pytest.raises(DataFormatError, match=rf"{index}:2: not UTF-8"):
        load_dictd_pairs(folder, cache_dir=tmp_path / "cache")


def test_a_truncated_dict_dz_names_the_file(tmp_path):
    folder, dz, _ = write_dict(tmp_path / "d", SENTENCE.encode() * 50)
    dz.write_bytes(dz.read_bytes()[:-12])  # cut inside the stream: no end-of-stream marker
    with pytest.raises(DataFormatError, match=rf"{dz}: unreadable, truncated or corrupt \(EOFError"):
        load_dictd_pairs(folder, cache_dir=tmp_path / "cache")


def test_a_corrupt_dict_dz_names_the_file(tmp_path):
    folder, dz, _ = write_dict(tmp_path / "d", bytes(range(256)) * 200)
    raw = bytearray(dz.read_bytes())
    raw[20:60] = b"\xff" * 40  # deflate data that do not decode
    dz.write_bytes(bytes(raw))
    with pytest.raises(DataFormatError, match=rf"{dz}: unreadable, truncated or corrupt"):
        load_dictd_pairs(folder, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("gz", [True, False])
def test_a_file_over_the_cap_is_refused(tmp_path, monkeypatch, gz):
    monkeypatch.setattr(text, "MAX_DICTD_BYTES", 4096)
    folder, body, _ = write_dict(tmp_path / "d", SENTENCE.encode() * 200, gz=gz)  # 15 kB decompressed
    with pytest.raises(DataFormatError, match=rf"{body}: more than 4096 bytes"):
        load_dictd_pairs(folder, cache_dir=tmp_path / "cache")


def test_an_index_over_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "MAX_DICTD_BYTES", 4096)
    line = f"sein\t{encode_dictd_number(0)}\t{encode_dictd_number(len(SENTENCE.encode()))}\n".encode()
    folder, _, index = write_dict(tmp_path / "d", SENTENCE.encode(), index=line * 1000)
    with pytest.raises(DataFormatError, match=rf"{index}: more than 4096 bytes"):
        load_dictd_pairs(folder, cache_dir=tmp_path / "cache")


def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "MAX_DICTD_BYTES", 4 << 20)
    folder = tmp_path / "d"
    folder.mkdir()
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip stream of 64 MiB of zeros, ~64 kB on disk
    block = bytes(1 << 20)
    dz = folder / "german-english.dict.dz"
    with open(dz, "wb") as fh:
        for _ in range(64):
            fh.write(comp.compress(block))
        fh.write(comp.flush())
    (folder / "german-english.index").write_text("sein\tA\tB\n")
    tracemalloc.start()
    try:
        with pytest.raises(DataFormatError, match=rf"{dz}: more than {4 << 20} bytes decompressed"):
            parse_dictd(dz, folder / "german-english.index", 5, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes held while refusing a gzip bomb"


def test_a_failing_preparation_leaves_the_cache_as_it_was(tmp_path):
    cache = tmp_path / "cache"
    folder, dz, _ = write_dict(tmp_path / "d", (SENTENCE * 3).encode())
    first = load_dictd_pairs(folder, cache_dir=cache)
    before = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    dz.write_bytes(dz.read_bytes()[:-12])
    with pytest.raises(DataFormatError):
        load_dictd_pairs(folder, cache_dir=cache)
    assert sorted(p.relative_to(cache) for p in cache.rglob("*")) == before
    (cached,) = [p for p in cache.iterdir() if p.name.startswith("dict-de-en-")]
    from gcbench.data.hf import hf_datasets

    assert hf_datasets().load_from_disk(str(cached)).num_rows == len(first.pairs) == 1
