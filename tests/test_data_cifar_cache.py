"""CIFAR archives extracted once, and put in place without a moment where the cached folder is
missing; ``~`` expanded alike by the check of a data set's PATH and by the loaders; ``digits`` takes
no PATH."""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest
import torch
from test_image_loaders import private_cache, write_cifar  # noqa: F401 - private_cache: the autouse fixture (own cache, no network)

from gcbench.data import images
from gcbench.data.errors import DataFormatError, DatasetUnavailableError
from gcbench.data.images import image_dataset_kind, load_images




def cifar_archive(tmp_path, monkeypatch, name="cifar-10-python.tar.gz"):
    """A CIFAR-10 archive of tiny official-looking batches (torchvision's MD5 lists point at them)."""
    write_cifar(tmp_path / "tv", "cifar10", monkeypatch)
    tgz = tmp_path / name
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "tv" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return tgz


def test_an_archive_is_extracted_once(tmp_path, monkeypatch):
    tgz = cifar_archive(tmp_path, monkeypatch)
    first = load_images(f"cifar10:{tgz}")
    cached = tmp_path / "cache" / "torchvision" / "cifar-10-batches-py"
    inode = cached.stat().st_ino

    def no_extraction(*args, **kwargs):
        raise AssertionError("the archive was opened again")

    monkeypatch.setattr(images.tarfile, "open", no_extraction)
    again = load_images(f"cifar10:{tgz}")
    assert torch.equal(again.x_train, first.x_train) and cached.stat().st_ino == inode


def test_a_changed_cached_file_is_extracted_again(tmp_path, monkeypatch):
    tgz = cifar_archive(tmp_path, monkeypatch)
    first = load_images(f"cifar10:{tgz}")
    batch = tmp_path / "cache" / "torchvision" / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(batch.read_bytes()[:-1])  # no longer the official file: extracted again, then read
    assert torch.equal(load_images(f"cifar10:{tgz}").x_train, first.x_train)


def test_the_cached_folder_is_never_missing_while_preparing_again(tmp_path, monkeypatch):
    tgz = cifar_archive(tmp_path, monkeypatch)
    load_images(f"cifar10:{tgz}")
    other = tmp_path / "copy" / tgz.name  # another archive (another stamp) of the same files: prepared again
    other.parent.mkdir()
    shutil.copy(tgz, other)
    cached = tmp_path / "cache" / "torchvision" / "cifar-10-batches-py"
    replace, missing = os.replace, []

    def watched(src, dst, *args, **kwargs):
        replace(src, dst, *args, **kwargs)
        if not cached.is_dir():
            missing.append((str(src), str(dst)))

    monkeypatch.setattr(os, "replace", watched)
    assert load_images(f"cifar10:{other}").x_train.shape[0] == 10
    assert missing == [], f"the cached folder was missing after {missing}"


def test_a_bad_archive_leaves_a_good_cache_as_it_was(tmp_path, monkeypatch):
    tgz = cifar_archive(tmp_path, monkeypatch)
    load_images(f"cifar10:{tgz}")
    cached = tmp_path / "cache" / "torchvision" / "cifar-10-batches-py"
    before = {p.name: p.read_bytes() for p in cached.iterdir()}
    bad_dir = tmp_path / "bad" / "cifar-10-batches-py"
    shutil.copytree(tmp_path / "tv" / "cifar-10-batches-py", bad_dir)
    (bad_dir / "test_batch").write_bytes(b"not the official file")
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(bad_dir, arcname="cifar-10-batches-py")
    with pytest.raises(DataFormatError, match="test_batch is missing or not the official file"):
        load_images(f"cifar10:{bad}")
    assert {p.name: p.read_bytes() for p in cached.iterdir()} == before


def test_a_tilde_path_is_expanded_by_the_check_and_the_loader(tmp_path, monkeypatch):
    home = tmp_path / "home"
    write_cifar(home / "cif", "cifar10", monkeypatch)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)  # no ./~ folder here
    assert image_dataset_kind("cifar10:~/cif") == ("cifar10", str(home / "cif"))
    ds = load_images("cifar10:~/cif")
    assert ds.source == str(home / "cif") and ds.x_train.shape[0] == 10
    assert images.load_cifar10("~/cif").source == str(home / "cif")  # the loader alone expands it too


def test_digits_takes_no_path(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="digits takes no path"):
        load_images(f"digits:{tmp_path}")
    assert load_images("digits").name == "digits"
