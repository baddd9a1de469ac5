"""CIFAR-100 binary and ImageNet-style folder loaders (gcbench.data.images) on tiny generated files,
broken ones included. Never downloads anything.

CIFAR-100 records are written byte by byte from the format's description (coarse label, fine
label, 1,024 red, 1,024 green, 1,024 blue bytes, row-major), independently of the parser. Image
folders are written with Pillow as PNG (lossless), so decoded pixels can be checked exactly
against numpy slicing of what was written.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from gcbench.data import images
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.images import decode_image, load_cifar100, load_image_folder, load_images, parse_cifar100_records

# -- CIFAR-100 -------------------------------------------------------------------------------------


def cifar100_records(coarse, fine, seed=0):
    """Records built field by field; returns the bytes and the (N, 3, 32, 32) images written."""
    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 256, (len(fine), 3, 32, 32), dtype=np.uint8)
    out = bytearray()
    for c, f, im in zip(coarse, fine, imgs):
        out.append(c)
        out.append(f)
        for ch in range(3):
            for row in range(32):
                out += bytes(int(v) for v in im[ch, row])
    return bytes(out), imgs


@pytest.fixture
def cifar100_dir(tmp_path):
    d = tmp_path / "cifar-100-binary"
    d.mkdir()
    train, tr_imgs = cifar100_records([0, 19, 7], [0, 99, 42], seed=1)
    test, te_imgs = cifar100_records([3, 4], [55, 5], seed=2)
    (d / "train.bin").write_bytes(train)
    (d / "test.bin").write_bytes(test)
    (d / "fine_label_names.txt").write_text("\n".join(f"fine{i}" for i in range(100)) + "\n")
    return d, tr_imgs, te_imgs


def test_cifar100_folder_parent_tarball_and_labels(cifar100_dir, tmp_path):
    d, tr, te = cifar100_dir
    for root in (d, d.parent):
        ds = load_cifar100(root)
        assert ds.name == "cifar100" and ds.x_train.shape == (3, 3, 32, 32)
        assert torch.equal(ds.x_train, torch.from_numpy(tr)) and torch.equal(ds.x_test, torch.from_numpy(te))
        assert ds.y_train.tolist() == [0, 99, 42] and ds.y_test.tolist() == [55, 5] and ds.y_train.dtype == torch.int64
        assert len(ds.classes) == 100 and ds.classes[42] == "fine42"  # names read from fine_label_names.txt
    coarse = load_cifar100(d, label="coarse")
    assert coarse.y_train.tolist() == [0, 19, 7] and coarse.classes == tuple(str(i) for i in range(20))
    tgz = tmp_path / "cifar-100-binary.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(d, arcname="cifar-100-binary")
    ds = load_images(f"cifar100:{tgz}")
    assert torch.equal(ds.x_test, torch.from_numpy(te)) and ds.classes[99] == "fine99"


def test_cifar100_broken_files_are_clear_errors(cifar100_dir, tmp_path, monkeypatch):
    d, _, _ = cifar100_dir
    with pytest.raises(DataFormatError, match="whole number of 3074-byte"):
        parse_cifar100_records(b"\x00" * 3073, "x")  # a CIFAR-10 record is one byte short
    rec, _ = cifar100_records([1, 20], [3, 4])
    with pytest.raises(DataFormatError, match="record 1 has coarse label 20"):
        parse_cifar100_records(rec, "x")
    rec, _ = cifar100_records([1, 2], [100, 4])
    with pytest.raises(DataFormatError, match="record 0 has fine label 100"):
        parse_cifar100_records(rec, "x")
    good = (d / "test.bin").read_bytes()
    (d / "test.bin").write_bytes(good[:-7])  # truncated
    with pytest.raises(DataFormatError, match="test.bin"):
        load_cifar100(d)
    (d / "test.bin").unlink()
    with pytest.raises(DatasetUnavailableError, match="missing test.bin"):
        load_cifar100(d)
    py = tmp_path / "py"
    py.mkdir()
    (py / "train").write_bytes(b"\x80\x04pickle")
    with pytest.raises(DatasetUnavailableError, match="pickle"):
        load_cifar100(py)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetUnavailableError, match="no CIFAR-100 binary files"):
        load_cifar100(tmp_path / "empty")
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataFormatError, match="not a readable tar"):
        load_cifar100(bad)
    monkeypatch.delenv(images.CIFAR100_ENV, raising=False)
    with pytest.raises(DatasetUnavailableError, match="GCBENCH_CIFAR100"):
        load_images("cifar100")
    with pytest.raises(ValueError, match="fine"):
        parse_cifar100_records(rec, "x", label="medium")


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


def test_decode_resizes_the_shorter_side_and_crops_the_centre(tmp_path):
    # 8 wide x 4 high, columns coloured by index: shorter side 4 == size, so no resampling, only the crop
    arr = np.zeros((4, 8, 3), np.uint8)
    arr[:, :, 0] = (np.arange(8) * 30)[None, :]
    got = decode_image(png(tmp_path / "wide.png", arr), 4)
    np.testing.assert_array_equal(got, arr[:, 2:6].transpose(2, 0, 1))  # centre columns 2..5
    # a 16x16 image of four constant 8x8 quadrants, halved to 8x8: each quadrant's interior stays constant
    q = np.zeros((16, 16, 3), np.uint8)
    q[:8, 8:] = 80
    q[8:, :8] = 160
    q[8:, 8:] = 240
    small = decode_image(png(tmp_path / "q.png", q), 8)
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


def test_corrupt_images_are_clear_errors_naming_the_file(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
    (tmp_path / "cut.png").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(DataFormatError, match="cut.png"):
        decode_image(tmp_path / "cut.png", 8)
    (tmp_path / "text.jpg").write_bytes(b"hello, not a jpeg")
    with pytest.raises(DataFormatError, match="text.jpg: not an image"):
        decode_image(tmp_path / "text.jpg", 8)
    (tmp_path / "huge.png").write_bytes(_png_header_only(9000, 9000))  # 81M pixels declared: refused before decoding
    with pytest.raises(DataFormatError, match="huge.png: image is 9000x9000 pixels, outside"):
        decode_image(tmp_path / "huge.png", 8)
    (tmp_path / "bomb.png").write_bytes(_png_header_only(20000, 20000))  # Pillow's own decompression-bomb guard
    with pytest.raises(DataFormatError, match="bomb.png"):
        decode_image(tmp_path / "bomb.png", 8)
    (tmp_path / "headonly.png").write_bytes(_png_header_only(4, 4))
    with pytest.raises(DataFormatError, match="headonly.png: corrupt or truncated"):
        decode_image(tmp_path / "headonly.png", 4)


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
    (root / "val" / "zebra" / "x.png").unlink()
    (root / "val" / "zebra").rmdir()
    (root / "train" / "cat" / "img1.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataFormatError, match="img1.png"):
        load_image_folder(root, size=4)
    with pytest.raises(DatasetUnavailableError, match="imagefolder needs a path"):
        load_images("imagefolder")
