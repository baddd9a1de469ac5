"""Image loaders of the 3LC reproduction (gcbench.data.images) on tiny generated files, including broken ones.

The IDX and CIFAR-10 binary files are written here byte by byte from the formats' descriptions
(struct / numpy), independently of the parsers under test.
"""

from __future__ import annotations

import gzip
import struct
import tarfile

import numpy as np
import pytest
import torch
from gcbench.reproductions.threelc.train import augment_batch

from gcbench.data import images
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.images import (
    load_cifar10,
    load_fashion_mnist,
    load_idx_pair,
    load_images,
    parse_cifar10_records,
    read_idx,
    to_float,
)


def idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    """An IDX file: 0, 0, type code, ndim, big-endian u32 dims, big-endian data."""
    dt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    head = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return head + arr.astype(dt).tobytes()


def write(path, data: bytes, gz: bool = False):
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def fashion_dir(tmp_path):
    rng = np.random.default_rng(0)
    d = tmp_path / "fm"
    d.mkdir()
    tr = rng.integers(0, 256, (6, 4, 4), dtype=np.uint8)
    te = rng.integers(0, 256, (3, 4, 4), dtype=np.uint8)
    write(d / "train-images-idx3-ubyte.gz", idx_bytes(tr), gz=True)
    write(d / "train-labels-idx1-ubyte.gz", idx_bytes(np.array([0, 1, 2, 3, 4, 9], np.uint8)), gz=True)
    write(d / "t10k-images-idx3-ubyte", idx_bytes(te))  # plain and gzip files may mix
    write(d / "t10k-labels-idx1-ubyte", idx_bytes(np.array([5, 6, 7], np.uint8)))
    return d, tr, te


@pytest.mark.parametrize("code,dtype", [(0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32), (0x0D, np.float32), (0x0E, np.float64)])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip_every_type(tmp_path, code, dtype, gz):
    arr = (np.arange(24).reshape(2, 3, 4) * (1 if code in (0x08, 0x09) else -3)).astype(dtype)
    if code == 0x08:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    got = read_idx(write(tmp_path / "a.idx", idx_bytes(arr, code), gz))
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, arr)


def test_fashion_mnist_from_a_folder_and_the_env_var(fashion_dir, monkeypatch):
    d, tr, te = fashion_dir
    ds = load_fashion_mnist(d)
    assert ds.name == "fashion-mnist" and ds.x_train.shape == (6, 1, 4, 4) and ds.x_test.shape == (3, 1, 4, 4)
    assert torch.equal(ds.x_train[:, 0], torch.from_numpy(tr)) and torch.equal(ds.x_test[:, 0], torch.from_numpy(te))
    assert ds.y_train.tolist() == [0, 1, 2, 3, 4, 9] and ds.y_test.dtype == torch.int64
    monkeypatch.setenv(images.FASHION_ENV, str(d))
    assert images.find_fashion_mnist() == d
    assert load_images("fashion-mnist").summary()["train"] == 6


def test_missing_fashion_mnist_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv(images.FASHION_ENV, raising=False)
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(images, "DEBIAN_FASHION_DIR", tmp_path / "nowhere")
    assert images.find_fashion_mnist() is None
    with pytest.raises(DatasetUnavailableError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist()
    with pytest.raises(DatasetUnavailableError, match="not found in"):
        load_fashion_mnist(tmp_path)


def _corruptions():
    good = idx_bytes(np.zeros((2, 3, 3), np.uint8))
    yield "bad magic", b"\x01" + good[1:], "not an IDX file"
    yield "unknown type", good[:2] + b"\x07" + good[3:], "unknown IDX type code 0x07"
    yield "no dims", bytes([0, 0, 8, 0]), "0 dimensions"
    yield "truncated header", good[:6], "truncated"
    yield "truncated data", good[:-1], "truncated"
    yield "trailing bytes", good + b"\x00", "trailing bytes"
    yield "huge dims", bytes([0, 0, 8, 3]) + struct.pack(">III", 65535, 65535, 65535), "limit"


@pytest.mark.parametrize("name,data,why", list(_corruptions()), ids=[c[0] for c in _corruptions()])
@pytest.mark.parametrize("gz", [False, True])
def test_corrupt_idx_is_a_clear_error(tmp_path, name, data, why, gz):
    p = write(tmp_path / "bad.idx", data, gz)
    with pytest.raises(DataFormatError, match=why) as err:
        read_idx(p)
    assert "bad.idx" in str(err.value)


def test_corrupt_gzip_stream_and_missing_file(tmp_path):
    blob = gzip.compress(idx_bytes(np.zeros((50, 8, 8), np.uint8)))
    p = write(tmp_path / "cut.gz", blob[: len(blob) // 2])
    with pytest.raises(DataFormatError, match="cut.gz"):
        read_idx(p)
    with pytest.raises(DatasetUnavailableError, match="no such file"):
        read_idx(tmp_path / "absent")


def test_idx_pairs_are_checked(tmp_path):
    imgs = write(tmp_path / "i", idx_bytes(np.zeros((3, 2, 2), np.uint8)))
    with pytest.raises(DataFormatError, match="labels must be in 0..9"):
        load_idx_pair(imgs, write(tmp_path / "l", idx_bytes(np.array([0, 10, 1], np.uint8))))
    with pytest.raises(DataFormatError, match="3 images but .* 2 labels"):
        load_idx_pair(imgs, write(tmp_path / "l2", idx_bytes(np.array([0, 1], np.uint8))))
    with pytest.raises(DataFormatError, match="3-D uint8"):
        load_idx_pair(write(tmp_path / "i2", idx_bytes(np.zeros((3, 4), np.uint8))), tmp_path / "l2")
    with pytest.raises(DataFormatError, match="labels must be 1-D"):
        load_idx_pair(imgs, write(tmp_path / "l3", idx_bytes(np.zeros((3, 1), np.uint8))))


def cifar_records(labels, seed=0):
    """Records built field by field: label byte, 1024 red, 1024 green, 1024 blue (row-major 32x32)."""
    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8)
    out = bytearray()
    for lab, im in zip(labels, imgs):
        out.append(lab)
        for ch in range(3):
            for row in range(32):
                out += bytes(int(v) for v in im[ch, row])
    return bytes(out), imgs


@pytest.fixture
def cifar_dir(tmp_path):
    d = tmp_path / "cifar-10-batches-bin"
    d.mkdir()
    parts = []
    for i in range(1, 6):
        data, imgs = cifar_records([i % 10, (i + 3) % 10], seed=i)
        (d / f"data_batch_{i}.bin").write_bytes(data)
        parts.append(imgs)
    data, test_imgs = cifar_records([9, 0, 5], seed=9)
    (d / "test_batch.bin").write_bytes(data)
    return d, np.concatenate(parts), test_imgs


def test_cifar10_binary_folder_and_tarball(cifar_dir, tmp_path):
    d, train, test = cifar_dir
    for root in (d, d.parent):  # the folder itself or its parent
        ds = load_cifar10(root)
        assert ds.x_train.shape == (10, 3, 32, 32) and torch.equal(ds.x_train, torch.from_numpy(train))
        assert torch.equal(ds.x_test, torch.from_numpy(test)) and ds.y_test.tolist() == [9, 0, 5]
        assert ds.y_train.tolist() == [1, 4, 2, 5, 3, 6, 4, 7, 5, 8]
    tgz = tmp_path / "cifar-10-binary.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(d, arcname="cifar-10-batches-bin")
    ds = load_cifar10(tgz, train_files=1)
    assert ds.x_train.shape[0] == 2 and torch.equal(ds.x_train, torch.from_numpy(train[:2]))
    assert load_images(f"cifar10:{tgz}").x_test.shape == (3, 3, 32, 32)


def test_cifar10_refuses_broken_and_pickled_data(cifar_dir, tmp_path):
    d, _, _ = cifar_dir
    with pytest.raises(DataFormatError, match="whole number of 3073-byte"):
        parse_cifar10_records(b"\x00" * 3072, "x")
    rec, _ = cifar_records([3, 12])
    with pytest.raises(DataFormatError, match="record 1 has label 12"):
        parse_cifar10_records(rec, "x")
    (d / "test_batch.bin").write_bytes(rec[:-5])
    with pytest.raises(DataFormatError, match="test_batch.bin"):
        load_cifar10(d)
    py = tmp_path / "py"
    py.mkdir()
    (py / "data_batch_1").write_bytes(b"\x80\x04pickle")
    with pytest.raises(DatasetUnavailableError, match="pickle"):
        load_cifar10(py)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetUnavailableError, match="no CIFAR-10 binary files"):
        load_cifar10(tmp_path / "empty")
    bad_tar = tmp_path / "x.tar.gz"
    bad_tar.write_bytes(b"not a tar")
    with pytest.raises(DataFormatError, match="not a readable tar"):
        load_cifar10(bad_tar)
    with pytest.raises(DatasetUnavailableError, match="GCBENCH_CIFAR10"):
        load_cifar10(None)
    with pytest.raises(DatasetUnavailableError, match="unknown image data set"):
        load_images("imagenet")


def test_to_float_pools_and_normalises_like_a_loop():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.integers(0, 256, (3, 2, 4, 4), dtype=np.uint8))
    xf, mean, std = to_float(x, 2, chunk=2)
    ref = np.zeros((3, 2, 2, 2))
    for n in range(3):
        for c in range(2):
            for i in range(2):
                for j in range(2):
                    ref[n, c, i, j] = x[n, c, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].double().mean() / 255.0
    m = ref.mean(axis=(0, 2, 3))
    s = ref.std(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5)
    np.testing.assert_allclose(xf.numpy(), (ref - m[None, :, None, None]) / s[None, :, None, None], rtol=1e-4, atol=1e-5)
    xt, _, _ = to_float(x[:1], 2, mean=mean, std=std)  # test images reuse the training statistics
    torch.testing.assert_close(xt, xf[:1])
    with pytest.raises(ValueError, match="multiple"):
        to_float(x, 3)


def test_digits_images_are_the_bundled_digits():
    ds = load_images("digits")
    assert ds.x_train.shape == (1500, 1, 8, 8) and ds.x_test.shape == (297, 1, 8, 8)
    assert int(ds.x_train.max()) == 255 and set(ds.y_test.tolist()) <= set(range(10))


def test_augmentation_is_a_padded_crop_and_a_flip():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).reshape(2, 3, 5, 5)
    g = torch.Generator().manual_seed(3)
    out = augment_batch(x, g, pad=2)
    g = torch.Generator().manual_seed(3)  # the same draws, in the same order, read back for the loop
    oy = torch.randint(0, 5, (2,), generator=g)
    ox = torch.randint(0, 5, (2,), generator=g)
    flip = torch.rand(2, generator=g) < 0.5
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for b in range(2):
        crop = padded[b, :, oy[b] : oy[b] + 5, ox[b] : ox[b] + 5]
        if flip[b]:
            crop = crop.flip(-1)
        assert torch.equal(out[b], crop)
