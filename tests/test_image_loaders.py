"""Image loaders (gcbench.data.images: torchvision.datasets with download=False) on tiny files the
tests write in torchvision's standard layouts, broken ones included. Never downloads anything.

IDX files are written byte by byte from the format's description (struct/numpy), CIFAR python
batches as the pickled dicts the CIFAR page describes, image folders with Pillow as PNG (lossless),
so decoded pixels can be checked exactly against what was written.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import socket
import struct
import tarfile
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import CIFAR10, CIFAR100

from gcbench.data import images
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.images import load_cifar10, load_cifar100, load_fashion_mnist, load_image_folder, load_images


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own gcbench cache, no $GCBENCH_* data paths, no Debian copy, no network."""
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "cache"))
    for env in (images.FASHION_ENV, images.CIFAR10_ENV, images.CIFAR100_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", tmp_path / "no-debian")

    def no_network(*args, **kwargs):
        raise AssertionError("a loader tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)


# -- Fashion-MNIST (IDX) ------------------------------------------------------------------------------


def idx_bytes(arr: np.ndarray) -> bytes:
    """An IDX file of uint8: 0, 0, type code 0x08, ndim, big-endian u32 dims, the data."""
    return bytes([0, 0, 8, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.astype(np.uint8).tobytes()


@pytest.fixture
def idx_folder(tmp_path):
    """The four files as Debian ships them (gzip), 6 train + 3 test 4x4 images."""
    rng = np.random.default_rng(0)
    d = tmp_path / "fm"
    d.mkdir()
    tr = rng.integers(0, 256, (6, 4, 4), dtype=np.uint8)
    te = rng.integers(0, 256, (3, 4, 4), dtype=np.uint8)
    y_tr, y_te = np.array([0, 1, 2, 3, 4, 9], np.uint8), np.array([5, 6, 7], np.uint8)
    for name, arr in (("train-images-idx3-ubyte", tr), ("train-labels-idx1-ubyte", y_tr),
                      ("t10k-images-idx3-ubyte", te), ("t10k-labels-idx1-ubyte", y_te)):
        (d / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(arr)))
    return d, tr, te, y_tr, y_te


def test_fashion_mnist_is_prepared_into_the_torchvision_layout_and_read_by_torchvision(idx_folder, monkeypatch, tmp_path):
    d, tr, te, y_tr, y_te = idx_folder
    assert images.find_fashion_mnist() is None
    with pytest.raises(DatasetUnavailableError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist()
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", d)  # "the package is installed"
    ds = load_fashion_mnist()
    raw = tmp_path / "cache" / "torchvision" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(images.FASHION_FILES)  # decompressed, no temporaries left
    assert (raw / "train-images-idx3-ubyte").read_bytes() == idx_bytes(tr)
    assert ds.x_train.shape == (6, 1, 4, 4) and ds.x_train.dtype == torch.uint8
    assert torch.equal(ds.x_train[:, 0], torch.from_numpy(tr)) and torch.equal(ds.x_test[:, 0], torch.from_numpy(te))
    assert ds.y_train.tolist() == y_tr.tolist() and ds.y_test.tolist() == y_te.tolist() and ds.y_train.dtype == torch.int64
    assert ds.classes[0] == "T-shirt/top" and "torchvision.datasets.FashionMNIST" in ds.description
    # a torchvision root given by path is read in place; a folder of IDX files is prepared into the cache
    assert load_images(f"fashion-mnist:{tmp_path / 'cache' / 'torchvision'}").summary()["train"] == 6
    assert load_images(f"fashion-mnist:{d}").summary()["test"] == 3


def test_a_fashion_mnist_path_that_does_not_hold_it_is_an_error_not_a_fallback(idx_folder, monkeypatch, tmp_path):
    d, *_ = idx_folder
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", d)  # a system copy exists...
    with pytest.raises(DatasetUnavailableError, match="/nonexistent does not exist"):
        load_images("fashion-mnist:/nonexistent")  # ...but the path asked for is not there
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetUnavailableError, match=f"not found in {tmp_path / 'empty'}"):
        load_images(f"fashion-mnist:{tmp_path / 'empty'}")  # ...or does not hold the data
    assert images.find_fashion_mnist(tmp_path / "empty") is None


def test_cli_refuses_a_fashion_mnist_path_without_it_in_one_line(idx_folder, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from gcbench.cli import app

    d, *_ = idx_folder
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", d)  # a system copy: an explicit path that does not exist must not fall back to it
    result = CliRunner().invoke(app, ["reproduce", "3lc", "--scale", "smoke", "--dataset", "fashion-mnist:/nonexistent",
                                      "--out", str(tmp_path / "out")], env={"COLUMNS": "400"})
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if "nonexistent" in line]
    assert len(lines) == 1 and "Traceback" not in result.output and "/nonexistent does not exist" in lines[0]


def test_broken_idx_files_are_data_format_errors(idx_folder, tmp_path):
    d, *_ = idx_folder
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.array([5, 6], np.uint8))))  # 3 images, 2 labels
    with pytest.raises(DataFormatError, match="3 images but 2 labels"):
        load_fashion_mnist(d)
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.array([5, 6, 12], np.uint8))))
    with pytest.raises(DataFormatError, match=r"labels must be in 0\.\.9"):
        load_fashion_mnist(d)
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataFormatError, match="corrupt"):
        load_fashion_mnist(d)


def test_fashion_mnist_prepare_bounds_a_gzip_bomb(idx_folder, monkeypatch):
    d, *_ = idx_folder
    monkeypatch.setattr(images, "MAX_IDX_BYTES", 1000)
    (d / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0" * 5000))
    with pytest.raises(DataFormatError, match="more than 1000 bytes"):
        images.prepare_fashion_mnist(d)


# -- CIFAR (python batches) ---------------------------------------------------------------------------


def write_cifar(root, key, monkeypatch, n_train=(3, 2, 2, 1, 2), n_test=3, seed=0):
    """CIFAR python batches in torchvision's layout (pickled dicts: "data" (N, 3072) uint8 rows of 1,024
    red, green, blue bytes, labels); torchvision's MD5 lists are pointed at these files. Returns the
    images (N, 3, 32, 32) and labels written, train then test."""
    rng = np.random.default_rng(seed)
    cls = CIFAR10 if key == "cifar10" else CIFAR100
    folder = root / cls.base_folder
    folder.mkdir(parents=True)
    label_key, classes = ("labels", 10) if key == "cifar10" else ("fine_labels", 100)
    names = [f"data_batch_{i}" for i in range(1, 6)] if key == "cifar10" else ["train"]
    sizes = list(n_train) if key == "cifar10" else [sum(n_train)]
    written = {"train": [[], []], "test": [[], []]}
    for name, n, split in [*zip(names, sizes, ["train"] * len(names)), ("test_batch" if key == "cifar10" else "test", n_test, "test")]:
        x = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, classes, n).tolist()
        entry = {"data": x.reshape(n, 3072), label_key: y}
        if key == "cifar100":
            entry["coarse_labels"] = [v // 5 for v in y]
        (folder / name).write_bytes(pickle.dumps(entry))
        written[split][0].append(x)
        written[split][1] += y
    meta_name = "batches.meta" if key == "cifar10" else "meta"
    meta_key = "label_names" if key == "cifar10" else "fine_label_names"
    (folder / meta_name).write_bytes(pickle.dumps({meta_key: [f"class{i}" for i in range(classes)]}))

    def md5(name):
        return hashlib.md5((folder / name).read_bytes()).hexdigest()

    test_name = "test_batch" if key == "cifar10" else "test"
    monkeypatch.setattr(cls, "train_list", [[n, md5(n)] for n in names])
    monkeypatch.setattr(cls, "test_list", [[test_name, md5(test_name)]])
    monkeypatch.setattr(cls, "meta", {"filename": meta_name, "key": meta_key, "md5": md5(meta_name)})
    return [(np.concatenate(written[s][0]), written[s][1]) for s in ("train", "test")]


@pytest.mark.parametrize("key", ["cifar10", "cifar100"])
def test_cifar_python_batches_through_torchvision(tmp_path, monkeypatch, key):
    root = tmp_path / "tv"
    (x_tr, y_tr), (x_te, y_te) = write_cifar(root, key, monkeypatch)
    ds = (load_cifar10 if key == "cifar10" else load_cifar100)(root)
    assert ds.name == key and ds.x_train.shape == (10, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert torch.equal(ds.x_train, torch.from_numpy(x_tr)) and torch.equal(ds.x_test, torch.from_numpy(x_te))
    assert ds.y_train.tolist() == y_tr and ds.y_test.tolist() == y_te
    assert len(ds.classes) == (10 if key == "cifar10" else 100) and ds.classes[1] == "class1"
    # the data folder itself, and the archive (extracted into the cache once), name the same data set
    folder = root / (CIFAR10 if key == "cifar10" else CIFAR100).base_folder
    assert torch.equal(load_images(f"{key}:{folder}").x_test, ds.x_test)
    tgz = tmp_path / f"{key}-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    from_tar = load_images(f"{key}:{tgz}")
    assert from_tar.source == str(tmp_path / "cache" / "torchvision") and torch.equal(from_tar.x_train, ds.x_train)
    monkeypatch.setenv(images.CIFAR10_ENV if key == "cifar10" else images.CIFAR100_ENV, str(root))
    assert torch.equal(load_images(key).y_train, ds.y_train)


def test_gcbench_data_extracts_a_cifar_archive_into_the_cache(tmp_path, monkeypatch, capsys):
    from gcbench.commands import data as data_command

    write_cifar(tmp_path / "tv", "cifar100", monkeypatch)
    tgz = tmp_path / "cifar-100-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "tv" / "cifar-100-python", arcname="cifar-100-python")
    assert data_command.data_main([f"cifar100:{tgz}"], tmp_path / "c") == 0
    assert "10 train + 3 test images (3, 32, 32)" in capsys.readouterr().out
    assert (tmp_path / "c" / "torchvision" / "cifar-100-python" / "train").is_file()
    assert data_command.data_main([f"cifar10:{tgz}"], tmp_path / "c") == 2  # the archive holds CIFAR-100: bad input
    assert "not cifar10" in capsys.readouterr().err


def test_cifar_files_that_are_not_the_official_ones_are_refused_before_unpickling(tmp_path, monkeypatch):
    root = tmp_path / "tv"
    write_cifar(root, "cifar10", monkeypatch)
    (root / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps({"data": None}))  # MD5 no longer matches
    with pytest.raises(DataFormatError, match="official MD5"):
        load_cifar10(root)


def one_member_tar(path, member: str, data: bytes):
    """A gzipped tar at ``path`` holding ``data`` under the name ``member``; returns ``path``."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_cifar_missing_binary_and_hostile_archives(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="cifar-10-python.tar.gz"):
        load_images("cifar10")
    with pytest.raises(DatasetUnavailableError, match="no cifar-100-python/"):
        load_cifar100(tmp_path)
    binary = one_member_tar(tmp_path / "cifar-10-binary.tar.gz", "cifar-10-batches-bin/test_batch.bin", b"\0" * 3073)
    with pytest.raises(DataFormatError, match="binary"):  # a file its user named, of the wrong kind
        load_cifar10(binary)
    evil = one_member_tar(tmp_path / "evil.tar.gz", "cifar-10-batches-py/../../escaped", b"x")
    with pytest.raises(DataFormatError, match="evil.tar.gz"):
        load_cifar10(evil)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "cache" / "escaped").exists()
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(DataFormatError, match="not a readable tar archive") as bad:
        load_cifar10(tmp_path / "junk.tar.gz")
    assert "\n" not in str(bad.value)  # one line, not tarfile's list of every method it tried


# -- image folders ----------------------------------------------------------------------------------


def png(path, arr):
    """Write ``(H, W, 3)`` or ``(H, W)`` uint8 as PNG (lossless)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, format="PNG")
    return path


@pytest.fixture
def folder(tmp_path):
    """train/{cat,dog}, val/{cat,dog}; 4x4 RGB and grayscale PNGs; returns root and the arrays by path."""
    rng = np.random.default_rng(0)
    root = tmp_path / "imnet"
    written = {}
    for split, counts in (("train", {"cat": 2, "dog": 3}), ("val", {"cat": 1, "dog": 1})):
        for cls, n in counts.items():
            for i in range(n):
                arr = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
                written[(split, cls, i)] = arr
                png(root / split / cls / f"img{i}.png", arr)
    gray = rng.integers(0, 256, (4, 4), dtype=np.uint8)
    png(root / "train" / "dog" / "z_gray.png", gray)
    written[("train", "dog", "gray")] = np.repeat(gray[:, :, None], 3, axis=2)
    (root / "train" / "dog" / "notes.txt").write_text("not an image: skipped by suffix")
    return root, written


def test_image_folder_labels_order_and_exact_pixels(folder):
    root, w = folder
    ds = load_image_folder(root, size=4)
    assert ds.classes == ("cat", "dog") and ds.x_train.shape == (6, 3, 4, 4) and ds.x_train.dtype == torch.uint8
    assert ds.y_train.tolist() == [0, 0, 1, 1, 1, 1] and ds.y_test.tolist() == [0, 1]
    expected = [w[("train", "cat", 0)], w[("train", "cat", 1)], w[("train", "dog", 0)], w[("train", "dog", 1)],
                w[("train", "dog", 2)], w[("train", "dog", "gray")]]  # sorted file names, grey -> RGB
    for got, exp in zip(ds.x_train, expected):
        assert torch.equal(got, torch.from_numpy(exp.transpose(2, 0, 1).copy()))
    assert torch.equal(ds.x_test[1], torch.from_numpy(w[("val", "dog", 0)].transpose(2, 0, 1).copy()))
    capped = load_image_folder(root, size=4, max_per_class=1)
    assert capped.y_train.tolist() == [0, 1] and torch.equal(capped.x_train[1], ds.x_train[2])
    assert load_images(f"imagefolder:{root}", image_side=4).summary()["train"] == 6
    # a class present in training only: the validation labels keep the training numbering
    (root / "val" / "cat" / "img0.png").unlink()
    assert load_image_folder(root, size=4).y_test.tolist() == [1]


def test_image_folder_resizes_the_shorter_side_and_crops_the_centre(tmp_path):
    # 8 wide x 4 high, columns coloured by index: shorter side 4 == size, so no resampling, only the crop
    arr = np.zeros((4, 8, 3), np.uint8)
    arr[:, :, 0] = (np.arange(8) * 30)[None, :]
    for split in ("train", "val"):
        png(tmp_path / "r" / split / "a" / "wide.png", arr)
    ds = load_image_folder(tmp_path / "r", size=4)
    np.testing.assert_array_equal(ds.x_train[0].numpy(), arr[:, 2:6].transpose(2, 0, 1))  # centre columns 2..5
    # a 16x16 image of four constant 8x8 quadrants, halved to 8x8: each quadrant's interior stays constant
    q = np.zeros((16, 16, 3), np.uint8)
    q[:8, 8:] = 80
    q[8:, :8] = 160
    q[8:, 8:] = 240
    for split in ("train", "val"):
        png(tmp_path / "q" / split / "a" / "q.png", q)
    small = load_image_folder(tmp_path / "q", size=8).x_train[0].numpy()
    assert small.shape == (3, 8, 8)
    np.testing.assert_array_equal(small[:, :3, :3], 0)
    np.testing.assert_array_equal(small[:, 5:, 5:], 240)
    np.testing.assert_array_equal(small[:, :3, 5:], 80)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_header_only(width, height):
    """A well-formed PNG (valid CRCs) declaring ``width`` x ``height`` RGB whose IDAT holds no pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"")) + _chunk(b"IEND", b"")


@pytest.mark.parametrize("name,content,message", [
    ("cut.png", "half", "cut.png: corrupt or truncated"),
    ("text.jpg", b"hello, not a jpeg", "text.jpg: not an image"),
    ("huge.png", _png_header_only(9000, 9000), "huge.png: image is 9000x9000 pixels, outside"),  # refused before decoding
    ("bomb.png", _png_header_only(20000, 20000), "bomb.png"),  # Pillow's own decompression-bomb guard
    ("headonly.png", _png_header_only(4, 4), "headonly.png: corrupt or truncated"),
])
def test_corrupt_images_are_clear_errors_naming_the_file(folder, name, content, message):
    root, _ = folder
    if content == "half":
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
        content = buf.getvalue()[: len(buf.getvalue()) // 2]
    (root / "train" / "cat" / name).write_bytes(content)
    with pytest.raises(DataFormatError, match=message):
        load_image_folder(root, size=4)


def test_image_folder_layout_errors(folder, tmp_path):
    root, _ = folder
    with pytest.raises(DatasetUnavailableError, match="no such folder"):
        load_image_folder(tmp_path / "absent")
    only_train = tmp_path / "t"
    png(only_train / "train" / "a" / "x.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(DatasetUnavailableError, match="val/<class>"):
        load_image_folder(only_train)
    png(only_train / "val" / "ILSVRC2012_val_00000001.png", np.zeros((4, 4, 3), np.uint8))  # flat, as ImageNet ships it
    with pytest.raises(DataFormatError, match="valprep"):
        load_image_folder(only_train, size=4)
    png(root / "val" / "zebra" / "x.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(DataFormatError, match="zebra"):
        load_image_folder(root, size=4)
    with pytest.raises(DatasetUnavailableError, match="imagefolder needs a path"):
        load_images("imagefolder")
    with pytest.raises(DatasetUnavailableError, match="unknown image data set"):
        load_images("imagenet")
