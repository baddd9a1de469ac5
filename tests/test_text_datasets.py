"""Text corpora through Hugging Face datasets: local text/json/parquet files, the Arrow caches
(dict-de-en built once, tokens not recomputed), offline by default, the missing-data message."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gcbench.data import hf, text
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.text import ParallelCorpus, Vocab, encode_tokens, load_dictd_pairs, load_wmt14, tokenize, tokenized

EN = ["the house is big .", "a cat sat on the mat", "", "it rains , it pours !", "one more line here"]
DE = ["das haus ist gross .", "eine katze sass auf der matte", "leer", "es regnet , es giesst !", "noch eine zeile hier"]


def write_lines(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def kept(en=EN, de=DE) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(en, de) if a.strip() and b.strip()]


@pytest.mark.parametrize("gz", [False, True])
def test_plain_text_files_through_the_text_builder(tmp_path, gz):
    suffix = ".gz" if gz else ""
    src = write_lines(tmp_path / f"train.en{suffix}", EN, gz)
    tgt = write_lines(tmp_path / f"train.de{suffix}", DE, gz)
    te_s = write_lines(tmp_path / "test.en", EN[:2])
    te_t = write_lines(tmp_path / "test.de", DE[:2])
    train, test = load_wmt14([str(src), str(tgt), str(te_s), str(te_t)], max_words=5, held_out=1)
    assert train.pairs == [p for p in kept() if max(len(p[0].split()), len(p[1].split())) <= 5]
    assert test.pairs == kept()[:1]
    assert train.dataset.column_names == ["source", "target"] and train.dataset.num_rows == len(train.pairs)
    assert train.dataset.cache_files  # Arrow files on disk: Dataset.map results are cached beside them
    only, none = load_wmt14([str(src), str(tgt)], max_pairs=2)
    assert only.pairs == kept()[:2] and none is None


def test_text_file_errors_are_typed(tmp_path):
    src = write_lines(tmp_path / "a.en", EN)
    short = write_lines(tmp_path / "b.de", DE[:3])
    with pytest.raises(DataFormatError, match="line-aligned"):
        load_wmt14([str(src), str(short)])
    with pytest.raises(DatasetUnavailableError, match="no such file"):
        load_wmt14([str(src), str(tmp_path / "missing.de")])
    with pytest.raises(DataFormatError, match="wmt14 data"):
        load_wmt14([str(src)])
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"\xff\xfe not utf-8\n" * 5)
    with pytest.raises(DataFormatError, match="not readable as text"):
        load_wmt14([str(src), str(bad)])


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize("schema", ["translation", "columns"])
def test_json_and_parquet_records(tmp_path, kind, schema):
    rows = [{"translation": {"de": d, "en": e}} if schema == "translation" else {"de": d, "en": e} for e, d in zip(EN, DE)]
    path = tmp_path / f"train.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    train, test = load_wmt14([str(path), str(path)], held_out=2)
    assert train.pairs == kept() and test.pairs == kept()[:2]
    assert f"'{'json' if kind == 'jsonl' else 'parquet'}' builder" in train.description


def test_records_without_the_language_fields(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"fr": "bonjour", "en": "hello"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="no de field"):
        load_wmt14([str(path)])


def test_vocab_from_arrow_counts_equals_the_counter_vocab(tmp_path):
    src, tgt = write_lines(tmp_path / "t.en", EN * 3), write_lines(tmp_path / "t.de", DE * 3)
    corpus, _ = load_wmt14([str(src), str(tgt)])
    tok = tokenized(corpus.dataset).with_format("arrow")
    for column, side in (("source_tokens", 0), ("target_tokens", 1)):
        for size, min_count in ((None, 1), (4, 1), (None, 4)):
            fast = Vocab.from_tokens(tok[column], max_size=size, min_count=min_count)
            naive = Vocab([p[side] for p in corpus.pairs], max_size=size, min_count=min_count)
            assert fast.itos == naive.itos


def test_encoded_ids_match_a_per_sentence_encoding(tmp_path):
    corpus = ParallelCorpus(kept() * 2, "toy", "toy")
    src = Vocab([a for a, _ in corpus.pairs], max_size=6)
    tgt = Vocab([b for _, b in corpus.pairs], max_size=6)
    s, t = encode_tokens(tokenized(corpus.as_dataset()), src, tgt, max_len=4)
    assert s.dtype == t.dtype == torch.long and s.shape == (len(corpus.pairs), 4) and t.shape == (len(corpus.pairs), 6)
    for i, (a, b) in enumerate(corpus.pairs):
        x = src.encode(a, 4)
        y = [tgt.bos] + tgt.encode(b, 4) + [tgt.eos]
        assert s[i].tolist() == x + [0] * (4 - len(x)) and t[i].tolist() == y + [0] * (6 - len(y))


def _counting_tokenize(monkeypatch) -> list[int]:
    calls = [0]
    real = text.tokenize

    def counted(s: str) -> list[str]:
        calls[0] += 1
        return real(s)

    monkeypatch.setattr(text, "tokenize", counted)
    return calls


def test_a_second_run_reads_the_cached_tokens_and_ids(tmp_path, monkeypatch):
    from gcbench.reproductions.sketched_sgd.translation import prepare_data

    src, tgt = write_lines(tmp_path / "t.en", EN * 4), write_lines(tmp_path / "t.de", DE * 4)
    calls = _counting_tokenize(monkeypatch)
    preset = {"held_out": 3, "max_len": 6, "min_count": 1}
    first = prepare_data(load_wmt14([str(src), str(tgt)])[0], None, preset, seed=0)
    assert calls[0] == 2 * (first.summary["train_pairs"] + len(first.test_refs))  # both sides, once each
    cache_files = {f.name for f in Path(load_wmt14([str(src), str(tgt)])[0].dataset.cache_files[0]["filename"]).parent.glob("cache-*.arrow")}
    assert cache_files  # Dataset.map wrote its results as Arrow
    calls[0] = 0
    second = prepare_data(load_wmt14([str(src), str(tgt)])[0], None, preset, seed=0)
    assert calls[0] == 0  # not re-tokenised
    assert torch.equal(first.train_src, second.train_src) and torch.equal(first.test_tgt, second.test_tgt)
    assert first.tgt_vocab.itos == second.tgt_vocab.itos
    third = prepare_data(load_wmt14([str(src), str(tgt)])[0], None, {**preset, "max_len": 3}, seed=0)
    assert calls[0] == 0 and third.train_src.shape[1] == 3  # new ids from the cached tokens
    write_lines(src, EN * 4 + ["a changed file"])
    write_lines(tgt, DE * 4 + ["eine geaenderte datei"])
    prepare_data(load_wmt14([str(src), str(tgt)])[0], None, preset, seed=0)
    assert calls[0] > 0  # changed files: tokenised again, never a stale cache


def test_dict_de_en_is_parsed_once_then_read_from_arrow(tmp_path, monkeypatch):
    from dictd_fixtures import write_dictd
    from test_repro_sketched_sgd import ENTRIES

    folder = write_dictd(tmp_path / "d", ENTRIES, gz=True)
    cache = tmp_path / "cache"
    first = load_dictd_pairs(folder, cache_dir=cache)
    assert first.dataset.num_rows == len(first.pairs) > 0 and list(cache.iterdir())

    def no_parsing(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(text, "parse_dictd", no_parsing)
    again = load_dictd_pairs(folder, cache_dir=cache)
    assert again.pairs == first.pairs and again.params == first.params
    with pytest.raises(AssertionError, match="parsed again"):  # other limits: another cache entry
        load_dictd_pairs(folder, cache_dir=cache, min_words=1)


def test_missing_wmt14_says_how_to_get_it_in_one_line():
    with pytest.raises(DatasetUnavailableError) as info:
        load_wmt14([])
    message = str(info.value)
    assert "\n" not in message and "HF_DATASETS_OFFLINE=0" in message and "wmt14:TRAIN.en,TRAIN.de" in message


def test_reproduce_with_wmt14_missing_exits_2_with_one_line(tmp_path):
    from typer.testing import CliRunner

    from gcbench.cli import app

    result = CliRunner().invoke(app, ["reproduce", "sketched-sgd", "--scale", "micro", "--out", str(tmp_path), "--no-wandb",
                                      "--dataset", "wmt14"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "HF_DATASETS_OFFLINE=0" in line]
    assert len(lines) == 1 and lines[0].startswith("gcbench reproduce:") and "Traceback" not in result.output


OFFLINE_PROBE = r"""
import json, os, socket, sys
attempts = []
real_connect = socket.socket.connect
def connect(self, address):
    attempts.append(str(address))
    raise OSError("network disabled by the test")
socket.socket.connect = connect
from gcbench.data import hf
from gcbench.data.errors import DatasetUnavailableError
from gcbench.data.text import load_wmt14
try:
    load_wmt14([])
    outcome = "loaded"
except DatasetUnavailableError as err:
    outcome = str(err)
import datasets, huggingface_hub.constants as c
print(json.dumps({"outcome": outcome, "attempts": attempts, "env": os.environ.get("HF_DATASETS_OFFLINE"),
                  "hub_env": os.environ.get("HF_HUB_OFFLINE"), "config": datasets.config.HF_HUB_OFFLINE,
                  "hub": c.HF_HUB_OFFLINE, "home": os.environ.get("HF_HOME"), "cache": str(hf.hf_datasets_cache())}))
"""


def _probe(env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    proc = subprocess.run([sys.executable, "-c", OFFLINE_PROBE], capture_output=True, text=True, env={**clean, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_offline_by_default_and_the_cache_in_gcbench_s_folder(tmp_path):
    out = _probe({"GCBENCH_DATA": str(tmp_path / "g")})
    assert out["env"] == out["hub_env"] == "1" and out["config"] is True and out["hub"] is True
    assert out["attempts"] == []  # nothing tried the network
    assert "downloads not allowed" in out["outcome"]
    assert out["home"] == str(tmp_path / "g" / "huggingface") and out["cache"].startswith(str(tmp_path / "g"))
    mine = _probe({"GCBENCH_DATA": str(tmp_path / "g"), "HF_HOME": str(tmp_path / "mine")})
    assert mine["home"] == str(tmp_path / "mine") and mine["cache"] == str(tmp_path / "mine" / "datasets")


def test_downloads_only_when_the_user_asks(monkeypatch):
    for name in hf.OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not hf.downloads_allowed()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    assert hf.downloads_allowed()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert not hf.downloads_allowed()


def test_builder_choice_by_suffix():
    assert [hf.builder_for(p) for p in ("a.en", "a.en.gz", "a.jsonl", "a.json.gz", "a.parquet", "a.tokens")] == [
        "text", "text", "json", "json", "parquet", "text"]
    assert tokenize("Don't go!") == ["don", "'", "t", "go", "!"]


# -- WikiText-103 ------------------------------------------------------------------------------------

WIKI = " = Valkyria Chronicles III = \n\n Senjō no Valkyria 3 : <unk> Chronicles is a game .\n It sold 1 @,@ 000 copies .\n"


def test_wikitext_file_tokens_are_cached_and_capped(tmp_path, monkeypatch):
    from gcbench.data import wikitext

    path = tmp_path / "wiki.train.tokens"
    path.write_text(WIKI * 5, encoding="utf-8")
    naive = [t for line in (WIKI * 5).splitlines() if line.split() for t in line.split() + ["<eos>"]]
    calls = [0]
    real = wikitext.tokens_batch

    def counted(batch, variant):
        calls[0] += 1
        return real(batch, variant)

    monkeypatch.setattr(wikitext, "tokens_batch", counted)
    assert wikitext.file_tokens(path) == naive and calls[0] > 0
    calls[0] = 0
    assert wikitext.file_tokens(path, max_tokens=7) == naive[:7] and calls[0] == 0  # the cached tokens, cut
    assert wikitext.file_tokens(path, max_tokens=len(naive) + 5) == naive


def test_wikitext_from_the_hub_cache_equals_the_files(tmp_path, monkeypatch):
    from gcbench.data import wikitext

    path = tmp_path / "wiki.test.tokens"
    path.write_text(WIKI, encoding="utf-8")
    lines = [line + "\n" for line in WIKI.split("\n")[:-1]]  # the Hub's rows keep their line breaks
    seen = []

    def cached(name, config, *, split, howto):
        seen.append((name, config, split))
        return hf.hf_datasets().Dataset.from_dict({"text": lines})

    monkeypatch.setattr(wikitext, "load_hub", cached)
    assert wikitext.hub_tokens("valid", howto="") == wikitext.file_tokens(path)
    assert seen == [("wikitext", "wikitext-103-v1", "validation")]


def test_missing_wikitext_hub_copy_says_how_to_get_it():
    from gcbench.reproductions.lgreco.lm import load_text

    with pytest.raises(DatasetUnavailableError) as info:
        load_text("wikitext103:hf")
    assert "\n" not in str(info.value) and "HF_DATASETS_OFFLINE=0" in str(info.value)
