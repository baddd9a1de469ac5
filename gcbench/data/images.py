"""Image classification data sets for the CNN reproductions (3LC, L-GreCo), read without unpickling anything.

Five sources, all returning an :class:`ImageDataset` (uint8 ``(N, C, H, W)`` images, int64 labels,
a name and a one-line description every report prints):

* **Fashion-MNIST** (Xiao, Rasul, Vollgraf 2017: 60,000 + 10,000 grayscale 28x28 images of 10
  clothing classes), in the IDX format of MNIST (:func:`read_idx`, plain or gzip-compressed). It
  ships in Debian's ``dataset-fashion-mnist`` package (``apt-get install dataset-fashion-mnist`` puts
  ``*-idx*-ubyte.gz`` under ``/usr/share/datasets/fashion-mnist/``); :func:`find_fashion_mnist`
  looks in ``$GCBENCH_FASHION_MNIST``, ``<gcbench data cache>/fashion-mnist`` and that folder.
* **CIFAR-10, binary version** (Krizhevsky 2009; ``cifar-10-binary.tar.gz`` from the CIFAR page):
  ``data_batch_1..5.bin`` and ``test_batch.bin``, each record 1 label byte + 3,072 pixel bytes
  (1,024 red, 1,024 green, 1,024 blue, row-major 32x32). Read from the extracted folder or straight
  from the ``.tar.gz`` (members are read in memory, nothing is extracted). The *python* version of
  CIFAR-10 is a set of pickles: it is refused with a message, because unpickling a downloaded file
  can run arbitrary code.
* **CIFAR-100, binary version** (``cifar-100-binary.tar.gz``): ``train.bin`` and ``test.bin``, each
  record 1 coarse label byte (0..19) + 1 fine label byte (0..99) + 3,072 pixel bytes as in
  CIFAR-10 (:func:`load_cifar100`; fine labels by default). The pickle version is refused.
* **ImageNet-style folders** (``root/train/<class>/*.jpg|png...``, ``root/val/<class>/...``),
  decoded with Pillow to RGB ``size`` x ``size`` (shorter side resized, centre crop;
  :func:`load_image_folder`), for users who have ImageNet or any such folder.
* **scikit-learn's digits** (1,797 8x8 images bundled in the sklearn wheel): always available, the
  fallback of small runs when Fashion-MNIST is not installed (reports name it).

Every parser checks sizes before it allocates (the header's dimensions against the bytes really
present, with a hard cap), label ranges and image/label counts, and raises
:class:`~gcbench.data.errors.DataFormatError` naming the file; a data set that is simply not there
raises :class:`~gcbench.data.errors.DatasetUnavailableError` saying how to get it.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from .digits import DIGITS_DESCRIPTION, load_digits_tensors
from .errors import DataFormatError, DatasetUnavailableError
from .files import default_cache_dir, open_maybe_gzip

#: Environment variable naming a folder of Fashion-MNIST IDX files.
FASHION_ENV = "GCBENCH_FASHION_MNIST"
#: Environment variable naming a CIFAR-10 binary folder or ``cifar-10-binary.tar.gz``.
CIFAR10_ENV = "GCBENCH_CIFAR10"
#: Where Debian's ``dataset-fashion-mnist`` package installs the files.
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch.bin"
CIFAR10_RECORD = 1 + 3 * 32 * 32
#: Largest payload (bytes) an IDX header may declare: 4 GiB, far above any MNIST-style file.
MAX_IDX_BYTES = 1 << 32
#: IDX type code -> big-endian numpy dtype (the IDX format of LeCun et al.'s MNIST page).
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

FASHION_HOWTO = (
    "Fashion-MNIST is not installed. On Debian/Ubuntu: `apt-get install dataset-fashion-mnist` "
    f"(files under {DEBIAN_FASHION_DIR}); or put the four *-idx*-ubyte[.gz] files in a folder and set "
    f"${FASHION_ENV} to it (or copy them to <gcbench data cache>/fashion-mnist)."
)


@dataclass(frozen=True)
class ImageDataset:
    """An image classification data set (10 classes for Fashion-MNIST, CIFAR-10 and digits).

    Attributes:
        name: short name for reports (``fashion-mnist``, ``cifar10``, ``cifar100``, ``imagefolder``, ``digits``).
        description: one line: where the data come from.
        x_train, x_test: uint8 ``(N, C, H, W)``.
        y_train, y_test: int64 ``(N,)`` in ``0..classes-1``.
        classes: class names.
        source: the files (or package) read.
    """

    name: str
    description: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]
    source: str

    def summary(self) -> dict[str, Any]:
        """JSON-ready description for reports."""
        return {
            "name": self.name,
            "description": self.description,
            "train": int(self.x_train.shape[0]),
            "test": int(self.x_test.shape[0]),
            "shape": list(self.x_train.shape[1:]),
            "classes": len(self.classes),
            "source": self.source,
        }


# -- IDX (MNIST / Fashion-MNIST) ----------------------------------------------------------------


def _read_exact(fh: IO[bytes], n: int, path: Path, what: str) -> bytes:
    """Read exactly ``n`` bytes in chunks (never one allocation sized by a header field)."""
    chunks = []
    left = n
    while left > 0:
        try:
            chunk = fh.read(min(left, 1 << 24))
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise DataFormatError(f"{path}: corrupt gzip stream while reading {what} ({err})") from None
        if not chunk:
            raise DataFormatError(f"{path}: truncated: {what} needs {n} bytes, the file has {n - left}")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (plain or gzip) into a numpy array of its declared type and shape.

    Header: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D
    float32, 0x0E float64), the number of dimensions, then each dimension as a big-endian uint32;
    then the data, big-endian, row-major.

    Raises:
        DataFormatError: bad magic, unknown type code, zero dimensions, a declared size above
            :data:`MAX_IDX_BYTES`, a truncated file or trailing bytes, a corrupt gzip stream.
        DatasetUnavailableError: the file does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetUnavailableError(f"{p}: no such file")
    with open_maybe_gzip(p) as fh:
        head = _read_exact(fh, 4, p, "the IDX magic number")
        if head[0] != 0 or head[1] != 0:
            raise DataFormatError(f"{p}: not an IDX file (magic bytes {head[:2].hex()} instead of 0000)")
        code, ndim = head[2], head[3]
        if code not in IDX_TYPES:
            raise DataFormatError(f"{p}: unknown IDX type code 0x{code:02x}; known: {', '.join(f'0x{c:02x}' for c in IDX_TYPES)}")
        if ndim == 0:
            raise DataFormatError(f"{p}: IDX header declares 0 dimensions")
        dims = np.frombuffer(_read_exact(fh, 4 * ndim, p, "the IDX dimensions"), dtype=">u4").astype(np.int64)
        dtype = np.dtype(IDX_TYPES[code])
        count = 1
        for d in dims.tolist():
            count *= int(d)
        nbytes = count * dtype.itemsize
        if nbytes > MAX_IDX_BYTES:
            raise DataFormatError(f"{p}: IDX header declares {tuple(dims.tolist())} ({nbytes} bytes), above the {MAX_IDX_BYTES}-byte limit")
        data = _read_exact(fh, nbytes, p, f"{tuple(dims.tolist())} values")
        try:
            extra = fh.read(1)
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise DataFormatError(f"{p}: corrupt gzip stream after the data ({err})") from None
        if extra:
            raise DataFormatError(f"{p}: trailing bytes after the {tuple(dims.tolist())} values the header declares")
    return np.frombuffer(data, dtype=dtype).reshape(tuple(dims.tolist())).astype(dtype.newbyteorder("="))


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _labels(arr: np.ndarray, path: Path, classes: int) -> torch.Tensor:
    if arr.ndim != 1:
        raise DataFormatError(f"{path}: labels must be 1-D, got shape {arr.shape}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= classes):
        raise DataFormatError(f"{path}: labels must be in 0..{classes - 1}, found {int(arr.min())}..{int(arr.max())}")
    return torch.from_numpy(arr.astype(np.int64))


def load_idx_pair(images: str | os.PathLike, labels: str | os.PathLike, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``(N, 1, H, W)`` uint8 and labels ``(N,)`` int64 from two IDX files.

    Raises:
        DataFormatError: images not 3-D uint8, labels out of range, or counts that differ.
    """
    ip, lp = Path(images), Path(labels)
    x = read_idx(ip)
    if x.ndim != 3 or x.dtype != np.uint8:
        raise DataFormatError(f"{ip}: images must be a 3-D uint8 IDX array (N, H, W), got {x.dtype} {x.shape}")
    y = _labels(read_idx(lp), lp, classes)
    if x.shape[0] != y.shape[0]:
        raise DataFormatError(f"{ip} holds {x.shape[0]} images but {lp} holds {y.shape[0]} labels")
    return torch.from_numpy(x.copy()).unsqueeze(1), y


def find_fashion_mnist(root: str | os.PathLike | None = None) -> Path | None:
    """The first folder holding the four Fashion-MNIST IDX files: ``root``, ``$GCBENCH_FASHION_MNIST``,
    ``<gcbench data cache>/fashion-mnist``, ``/usr/share/datasets/fashion-mnist``; None if none does."""
    candidates = [Path(root)] if root is not None else []
    if os.environ.get(FASHION_ENV):
        candidates.append(Path(os.environ[FASHION_ENV]))
    candidates += [default_cache_dir() / "fashion-mnist", DEBIAN_FASHION_DIR]
    for c in candidates:
        if all(_idx_file(c, stem) is not None for stem in FASHION_FILES.values()):
            return c
    return None


def load_fashion_mnist(root: str | os.PathLike | None = None) -> ImageDataset:
    """Fashion-MNIST from IDX files (see :func:`find_fashion_mnist` for where it looks).

    Raises:
        DatasetUnavailableError: not found (the message says how to install it).
        DataFormatError: a file is malformed.
    """
    folder = find_fashion_mnist(root)
    if folder is None:
        where = f" in {root}" if root is not None else ""
        raise DatasetUnavailableError(f"Fashion-MNIST IDX files not found{where}. {FASHION_HOWTO}")
    f = {k: _idx_file(folder, stem) for k, stem in FASHION_FILES.items()}
    x_tr, y_tr = load_idx_pair(f["train_images"], f["train_labels"])  # type: ignore[arg-type]
    x_te, y_te = load_idx_pair(f["test_images"], f["test_labels"])  # type: ignore[arg-type]
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise DataFormatError(f"{folder}: train images are {tuple(x_tr.shape[1:])}, test images {tuple(x_te.shape[1:])}")
    return ImageDataset(
        name="fashion-mnist",
        description=(f"Fashion-MNIST (Xiao et al. 2017), {x_tr.shape[0]:,} train + {x_te.shape[0]:,} test grayscale "
                     f"{x_tr.shape[2]}x{x_tr.shape[3]} images, 10 classes, IDX files from {folder}"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=FASHION_CLASSES, source=str(folder),
    )


# -- CIFAR-10 binary ------------------------------------------------------------------------------


def parse_cifar10_records(data: bytes, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Records of the CIFAR-10 binary format -> images ``(N, 3, 32, 32)`` uint8, labels int64.

    Raises:
        DataFormatError: a size that is not a positive multiple of 3,073 bytes, or a label above 9.
    """
    if len(data) == 0 or len(data) % CIFAR10_RECORD:
        raise DataFormatError(f"{where}: {len(data)} bytes is not a whole number of {CIFAR10_RECORD}-byte CIFAR-10 records")
    rec = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR10_RECORD)
    labels = rec[:, 0]
    if int(labels.max()) > 9:
        bad = int(np.argmax(labels > 9))
        raise DataFormatError(f"{where}: record {bad} has label {int(labels[bad])}; CIFAR-10 labels are 0..9")
    x = torch.from_numpy(rec[:, 1:].copy()).reshape(-1, 3, 32, 32)
    return x, torch.from_numpy(labels.astype(np.int64))


def _cifar_dir(root: Path) -> Path:
    for c in (root, root / "cifar-10-batches-bin"):
        if (c / CIFAR10_TEST_FILE).is_file():
            return c
    if (root / "data_batch_1").is_file() or (root / "cifar-10-batches-py").is_dir():
        raise DatasetUnavailableError(
            f"{root} holds the *python* (pickle) version of CIFAR-10; gcbench does not unpickle downloaded files. "
            "Use the binary version (cifar-10-binary.tar.gz: data_batch_*.bin, test_batch.bin)."
        )
    raise DatasetUnavailableError(f"{root}: no CIFAR-10 binary files (data_batch_1..5.bin, test_batch.bin) here or in cifar-10-batches-bin/")


def _read_tar_members(
    p: Path,
    names: Sequence[str],
    *,
    max_bytes: int,
    what: str,
    pickle_marker: tuple[str, str],
    pickle_msg: str,
    hint: str = "",
    small: Sequence[str] = (),
) -> dict[str, bytes]:
    """The members ``names`` (matched by base name) of the tar archive ``p`` as bytes, plus each
    member of ``small`` that is present and under 64 KiB.

    An archive holding ``pickle_marker[0]`` but not ``pickle_marker[1]`` is the python (pickle)
    version of the data set: refused with ``pickle_msg``, never unpickled.

    Raises:
        DatasetUnavailableError: the pickle version, or a member of ``names`` missing (``hint`` appended).
        DataFormatError: a member over ``max_bytes`` (too large for ``what``), or an unreadable archive.
    """
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(p, "r:*") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            if pickle_marker[0] in members and pickle_marker[1] not in members:
                raise DatasetUnavailableError(f"{p} is {pickle_msg}")
            wanted = [(n, members.get(n)) for n in names]
            for n, m in wanted:
                if m is None:
                    raise DatasetUnavailableError(f"{p}: no member {n}{hint}")
                if m.size > max_bytes:
                    raise DataFormatError(f"{p}: member {n} is {m.size} bytes, too large for {what}")
            wanted += [(n, members[n]) for n in small if n in members and members[n].size < 1 << 16]
            for n, m in wanted:
                fh = tar.extractfile(m)
                assert fh is not None
                out[n] = fh.read()
    except (tarfile.TarError, EOFError, OSError) as err:
        raise DataFormatError(f"{p}: not a readable tar archive ({err})") from None
    return out


def load_cifar10(root: str | os.PathLike | None = None, *, train_files: int = 5) -> ImageDataset:
    """CIFAR-10, binary version, from a folder or from ``cifar-10-binary.tar.gz`` (read in memory).

    Args:
        root: the folder (or its parent holding ``cifar-10-batches-bin/``) or the ``.tar.gz``;
            default ``$GCBENCH_CIFAR10``.
        train_files: how many of ``data_batch_1..5.bin`` to read (all five by default).

    Raises:
        DatasetUnavailableError: no path given, missing files, or the pickle version.
        DataFormatError: malformed records.
    """
    if root is None:
        root = os.environ.get(CIFAR10_ENV)
        if not root:
            raise DatasetUnavailableError(
                f"CIFAR-10 is not bundled (no download here): get cifar-10-binary.tar.gz from "
                f"https://www.cs.toronto.edu/~kriz/cifar.html and pass its path (dataset 'cifar10:PATH') or set ${CIFAR10_ENV}."
            )
    if not 1 <= train_files <= 5:
        raise ValueError(f"train_files must be in 1..5, got {train_files}")
    p = Path(root)
    names = CIFAR10_TRAIN_FILES[:train_files]
    blobs: dict[str, bytes] = {}
    if p.is_file():
        blobs = _read_tar_members(
            p, (*names, CIFAR10_TEST_FILE), max_bytes=6 * 10000 * CIFAR10_RECORD, what="a CIFAR-10 batch",
            pickle_marker=("data_batch_1", CIFAR10_TEST_FILE),
            pickle_msg="the *python* (pickle) version of CIFAR-10; use cifar-10-binary.tar.gz",
        )
        source = str(p)
    else:
        if not p.is_dir():
            raise DatasetUnavailableError(f"{p}: no such file or folder")
        folder = _cifar_dir(p)
        for n in (*names, CIFAR10_TEST_FILE):
            fp = folder / n
            if not fp.is_file():
                raise DatasetUnavailableError(f"{folder}: missing {n}")
            blobs[n] = fp.read_bytes()
        source = str(folder)
    parts = [parse_cifar10_records(blobs[n], f"{source}:{n}") for n in names]
    x_te, y_te = parse_cifar10_records(blobs[CIFAR10_TEST_FILE], f"{source}:{CIFAR10_TEST_FILE}")
    x_tr = torch.cat([x for x, _ in parts])
    y_tr = torch.cat([y for _, y in parts])
    return ImageDataset(
        name="cifar10",
        description=f"CIFAR-10 (Krizhevsky 2009), binary version, {x_tr.shape[0]:,} train + {x_te.shape[0]:,} test 32x32 RGB images from {source}",
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=CIFAR10_CLASSES, source=source,
    )


# -- digits (always available) ------------------------------------------------------------------------


def load_digits_images(n_train: int = 1500) -> ImageDataset:
    """scikit-learn's bundled digits as ``(N, 1, 8, 8)`` uint8 images (intensities 0..16 scaled to 0..255);
    the first ``n_train`` for training, the rest (297 by default) for testing, as ``gcbench train`` splits them."""
    d = load_digits_tensors()
    x = (d.intensities.to(torch.float32) * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)
    return ImageDataset(
        name="digits", description=DIGITS_DESCRIPTION + f"; first {n_train} train, last {x.shape[0] - n_train} test",
        x_train=x[:n_train], y_train=d.y[:n_train].clone(), x_test=x[n_train:], y_test=d.y[n_train:].clone(),
        classes=tuple(str(i) for i in range(10)), source="sklearn.datasets.load_digits",
    )


# -- CIFAR-100 binary ------------------------------------------------------------------------------------

CIFAR100_ENV = "GCBENCH_CIFAR100"
CIFAR100_RECORD = 2 + 3 * 32 * 32
CIFAR100_FILES = ("train.bin", "test.bin")
#: Largest CIFAR-100 member/file accepted (bytes): the real train.bin is 50,000 records.
CIFAR100_MAX_BYTES = 60_000 * CIFAR100_RECORD


def parse_cifar100_records(data: bytes, where: str, *, label: str = "fine") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Records of the CIFAR-100 binary format -> images ``(N, 3, 32, 32)`` uint8, the chosen labels and
    the other labels (int64).

    A record is 1 coarse label byte (0..19), 1 fine label byte (0..99), then 3,072 pixel bytes laid
    out as in CIFAR-10 (1,024 red, 1,024 green, 1,024 blue, row-major 32x32).

    Args:
        label: ``"fine"`` (100 classes, the usual benchmark) or ``"coarse"`` (20 superclasses).

    Raises:
        DataFormatError: a size that is not a positive multiple of 3,074 bytes, or a label out of range.
    """
    if label not in ("fine", "coarse"):
        raise ValueError(f"label must be 'fine' or 'coarse', got {label!r}")
    if len(data) == 0 or len(data) % CIFAR100_RECORD:
        raise DataFormatError(f"{where}: {len(data)} bytes is not a whole number of {CIFAR100_RECORD}-byte CIFAR-100 records")
    rec = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR100_RECORD)
    coarse, fine = rec[:, 0], rec[:, 1]
    for name, lab, top in (("coarse", coarse, 19), ("fine", fine, 99)):
        if int(lab.max()) > top:
            bad = int(np.argmax(lab > top))
            raise DataFormatError(f"{where}: record {bad} has {name} label {int(lab[bad])}; CIFAR-100 {name} labels are 0..{top}")
    x = torch.from_numpy(rec[:, 2:].copy()).reshape(-1, 3, 32, 32)
    c = torch.from_numpy(coarse.astype(np.int64))
    f = torch.from_numpy(fine.astype(np.int64))
    return (x, f, c) if label == "fine" else (x, c, f)


def _class_names(text: str | None, count: int) -> tuple[str, ...]:
    """Names from a ``*_label_names.txt`` file (one per line) when it holds ``count``; else ``"0".."count-1"``."""
    if text is not None:
        names = tuple(n.strip() for n in text.splitlines() if n.strip())
        if len(names) == count:
            return names
    return tuple(str(i) for i in range(count))


def load_cifar100(root: str | os.PathLike | None = None, *, label: str = "fine") -> ImageDataset:
    """CIFAR-100, binary version (``cifar-100-binary.tar.gz``: ``train.bin``, ``test.bin``, and the
    optional ``fine_label_names.txt``/``coarse_label_names.txt``), from the folder (or its parent
    holding ``cifar-100-binary/``) or straight from the ``.tar.gz`` (read in memory).

    Args:
        root: the folder or the archive; default ``$GCBENCH_CIFAR100``.
        label: ``"fine"`` (100 classes) or ``"coarse"`` (20).

    Raises:
        DatasetUnavailableError: no path given, missing files, or the python (pickle) version.
        DataFormatError: malformed records, an unreadable archive.
    """
    if root is None:
        root = os.environ.get(CIFAR100_ENV)
        if not root:
            raise DatasetUnavailableError(
                "CIFAR-100 is not bundled (no download here): get cifar-100-binary.tar.gz from "
                f"https://www.cs.toronto.edu/~kriz/cifar.html and pass its path (dataset 'cifar100:PATH') or set ${CIFAR100_ENV}."
            )
    pickle_msg = ("the *python* (pickle) version of CIFAR-100; gcbench does not unpickle downloaded files. "
                  "Use the binary version (cifar-100-binary.tar.gz: train.bin, test.bin).")
    names_file = f"{label}_label_names.txt"
    p = Path(root)
    blobs: dict[str, bytes] = {}
    names_text: str | None = None
    if p.is_file():
        blobs = _read_tar_members(
            p, CIFAR100_FILES, max_bytes=CIFAR100_MAX_BYTES, what="CIFAR-100", pickle_marker=("train", "train.bin"),
            pickle_msg=pickle_msg, hint=" (is this cifar-100-binary.tar.gz?)", small=(names_file,),
        )
        if names_file in blobs:
            names_text = blobs.pop(names_file).decode("utf-8", "replace")
        source = str(p)
    else:
        if not p.is_dir():
            raise DatasetUnavailableError(f"{p}: no such file or folder")
        folder = next((c for c in (p, p / "cifar-100-binary") if (c / "test.bin").is_file() or (c / "train.bin").is_file()), None)
        if folder is None:
            if (p / "train").is_file() or (p / "cifar-100-python").is_dir():
                raise DatasetUnavailableError(f"{p} holds {pickle_msg}")
            raise DatasetUnavailableError(f"{p}: no CIFAR-100 binary files (train.bin, test.bin) here or in cifar-100-binary/")
        for n in CIFAR100_FILES:
            fp = folder / n
            if not fp.is_file():
                raise DatasetUnavailableError(f"{folder}: missing {n}")
            if fp.stat().st_size > CIFAR100_MAX_BYTES:
                raise DataFormatError(f"{fp}: {fp.stat().st_size} bytes, too large for CIFAR-100")
            blobs[n] = fp.read_bytes()
        if (folder / names_file).is_file() and (folder / names_file).stat().st_size < 1 << 16:
            names_text = (folder / names_file).read_text(encoding="utf-8", errors="replace")
        source = str(folder)
    x_tr, y_tr, _ = parse_cifar100_records(blobs["train.bin"], f"{source}:train.bin", label=label)
    x_te, y_te, _ = parse_cifar100_records(blobs["test.bin"], f"{source}:test.bin", label=label)
    count = 100 if label == "fine" else 20
    return ImageDataset(
        name="cifar100",
        description=(f"CIFAR-100 (Krizhevsky 2009), binary version, {label} labels ({count} classes), "
                     f"{x_tr.shape[0]:,} train + {x_te.shape[0]:,} test 32x32 RGB images from {source}"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=_class_names(names_text, count), source=source,
    )


# -- ImageNet-style folders (Pillow) -------------------------------------------------------------------

#: File name endings read as images in an image folder (case-insensitive).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")
#: Largest image (pixels) decoded from an image folder; larger ones are refused as corrupt/hostile.
MAX_IMAGE_PIXELS = 64 * 1024 * 1024
IMAGEFOLDER_TRAIN = ("train",)
IMAGEFOLDER_VAL = ("val", "validation", "test")


def _image_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)


def decode_image(path: str | os.PathLike, size: int) -> np.ndarray:
    """One image file -> uint8 ``(3, size, size)``: RGB, the shorter side resized to ``size``
    (bilinear, antialiased), then the centre ``size`` x ``size`` crop (the usual ImageNet
    evaluation transform).

    Raises:
        DataFormatError: not an image Pillow can read, truncated or corrupt, or larger than
            :data:`MAX_IMAGE_PIXELS` (checked from the header before decoding).
    """
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    try:
        with Image.open(p) as im:
            w, h = im.size
            if w < 1 or h < 1 or w * h > MAX_IMAGE_PIXELS:
                raise DataFormatError(f"{p}: image is {w}x{h} pixels, outside 1..{MAX_IMAGE_PIXELS} pixels")
            im.draft("RGB", (size, size))  # JPEG: decode at a reduced scale when that is enough
            rgb = im.convert("RGB")
            w, h = rgb.size
            scale = size / min(w, h)
            nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
            rgb = rgb.resize((nw, nh), Image.BILINEAR, reducing_gap=None)
            left, top = (nw - size) // 2, (nh - size) // 2
            rgb = rgb.crop((left, top, left + size, top + size))
            arr = np.asarray(rgb, dtype=np.uint8)
    except DataFormatError:
        raise
    except UnidentifiedImageError:
        raise DataFormatError(f"{p}: not an image Pillow can read") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise DataFormatError(f"{p}: corrupt or truncated image ({err})") from None
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def _read_split(folder: Path, classes: list[str] | None, size: int, max_per_class: int | None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    subdirs = sorted(d.name for d in folder.iterdir() if d.is_dir())
    if classes is None:
        if not subdirs:
            if _image_files(folder):
                raise DataFormatError(f"{folder}: images but no class folders; expected {folder}/<class>/<image>")
            raise DatasetUnavailableError(f"{folder}: no class folders")
        classes = subdirs
    else:
        unknown = [d for d in subdirs if d not in classes]
        if unknown:
            raise DataFormatError(f"{folder}: class folder(s) {unknown[:5]} not among the training classes")
        if not subdirs and _image_files(folder):
            raise DataFormatError(
                f"{folder}: images but no class folders (ImageNet's validation images come flat: sort them into "
                f"<class>/ folders first, e.g. with the valprep.sh script of the PyTorch ImageNet example)"
            )
    files: list[Path] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        d = folder / c
        found = _image_files(d) if d.is_dir() else []
        if max_per_class is not None:
            found = found[:max_per_class]
        files += found
        labels += [i] * len(found)
    if not files:
        raise DataFormatError(f"{folder}: no image files ({', '.join(IMAGE_SUFFIXES)}) in its class folders")
    x = np.empty((len(files), 3, size, size), dtype=np.uint8)
    for j, f in enumerate(files):  # one decode per file (Pillow), not per element
        x[j] = decode_image(f, size)
    return torch.from_numpy(x), torch.tensor(labels, dtype=torch.int64), classes


def load_image_folder(root: str | os.PathLike, *, size: int = 32, max_per_class: int | None = None) -> ImageDataset:
    """An ImageNet-style folder: ``root/train/<class>/*.jpg|png|...`` and ``root/val/<class>/...``
    (``validation/`` or ``test/`` also accepted), decoded with Pillow to RGB ``size`` x ``size``
    (:func:`decode_image`). Classes are the training sub-folders in sorted order (labels 0..C-1);
    the validation folders must be among them (a class may be absent there).

    Args:
        root: the folder holding ``train/`` and ``val/``.
        size: side of the decoded images.
        max_per_class: read at most this many images of each class per split (sorted by file
            name), e.g. for a quick run on ImageNet; None reads all of them.

    Raises:
        DatasetUnavailableError: no such folder, no ``train/`` or ``val/``.
        DataFormatError: a corrupt image (the message names it), images outside class folders,
            a validation class unknown to training, an empty split.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if max_per_class is not None and max_per_class < 1:
        raise ValueError(f"max_per_class must be >= 1 or None, got {max_per_class}")
    p = Path(root)
    if not p.is_dir():
        raise DatasetUnavailableError(f"{p}: no such folder (an image folder needs {p}/train/<class>/ and {p}/val/<class>/)")
    train = next((p / n for n in IMAGEFOLDER_TRAIN if (p / n).is_dir()), None)
    val = next((p / n for n in IMAGEFOLDER_VAL if (p / n).is_dir()), None)
    if train is None or val is None:
        raise DatasetUnavailableError(f"{p}: an image folder needs train/<class>/ and val/<class>/ (or validation/, test/)")
    x_tr, y_tr, classes = _read_split(train, None, size, max_per_class)
    x_te, y_te, _ = _read_split(val, classes, size, max_per_class)
    return ImageDataset(
        name="imagefolder",
        description=(f"image folder {p} ({len(classes)} classes, {x_tr.shape[0]:,} train + {x_te.shape[0]:,} "
                     f"{val.name} images, decoded with Pillow to RGB {size}x{size}: shorter side resized, centre crop)"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=tuple(classes), source=str(p),
    )


# -- one entry point --------------------------------------------------------------------------------------


def load_images(spec: str, *, image_side: int = 32) -> ImageDataset:
    """``"fashion-mnist"`` / ``"fashion-mnist:FOLDER"``, ``"cifar10"`` / ``"cifar10:PATH"``,
    ``"cifar100"`` / ``"cifar100:PATH"`` (fine labels), ``"imagefolder:PATH"`` (decoded to
    ``image_side`` x ``image_side``), or ``"digits"``.

    Raises:
        DatasetUnavailableError: unknown name, or the data are not here (with instructions).
        DataFormatError: malformed files.
    """
    name, _, arg = spec.partition(":")
    name = name.strip().lower()
    if name in ("fashion-mnist", "fashion_mnist", "fmnist"):
        return load_fashion_mnist(arg or None)
    if name in ("cifar10", "cifar-10"):
        return load_cifar10(arg or None)
    if name in ("cifar100", "cifar-100"):
        return load_cifar100(arg or None)
    if name in ("imagefolder", "image-folder", "imagenet-folder"):
        if not arg:
            raise DatasetUnavailableError("imagefolder needs a path: 'imagefolder:PATH' (PATH/train/<class>/, PATH/val/<class>/)")
        return load_image_folder(arg, size=image_side)
    if name == "digits":
        return load_digits_images()
    raise DatasetUnavailableError(
        f"unknown image data set {spec!r}: use 'fashion-mnist[:FOLDER]', 'cifar10[:PATH]', 'cifar100[:PATH]', "
        "'imagefolder:PATH' or 'digits'"
    )


def to_float(x: torch.Tensor, size: int | None = None, *, mean: torch.Tensor | None = None,
             std: torch.Tensor | None = None, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 images -> float32 in [0, 1], average-pooled to ``size`` x ``size`` (an integer divisor of
    the side; None keeps it), normalised per channel.

    Returns:
        ``(x, mean, std)``: the images and the per-channel statistics used (computed from ``x``
        unless given, so test images reuse the training statistics).
    """
    h = x.shape[-1]
    if size is not None and (size <= 0 or h % size):
        raise ValueError(f"image side {h} is not a multiple of {size}")
    k = 1 if size is None else h // size
    out = []
    for i in range(0, x.shape[0], chunk):  # chunks bound the float temporary, not a loop over images
        xb = x[i : i + chunk].to(torch.float32).div_(255.0)
        if k > 1:
            xb = torch.nn.functional.avg_pool2d(xb, k)
        out.append(xb)
    xf = torch.cat(out) if out else torch.empty(0, x.shape[1], h // k, h // k)
    if mean is None or std is None:
        mean = xf.mean(dim=(0, 2, 3))
        std = xf.std(dim=(0, 2, 3)).clamp_min(1e-6)
    xf = (xf - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
    return xf, mean, std
