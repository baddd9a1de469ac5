"""Image classification data sets for the CNN reproductions (3LC, L-GreCo, Sketched-SGD), through
``torchvision.datasets`` with ``download=False``.

Every loader returns an :class:`ImageDataset` (uint8 ``(N, C, H, W)`` images, int64 labels, a name and
a one-line description every report prints). The files are read by torchvision, in its standard
layout under a *root* folder; gcbench only puts files there (:func:`prepare_fashion_mnist`,
:func:`prepare_cifar`) and never downloads anything:

* **Fashion-MNIST** (Xiao, Rasul, Vollgraf 2017: 60,000 + 10,000 grayscale 28x28 images, 10 classes):
  ``torchvision.datasets.FashionMNIST`` reads ``root/FashionMNIST/raw/*-idx?-ubyte``. Debian's
  ``dataset-fashion-mnist`` package installs the four gzip files under
  ``/usr/share/datasets/fashion-mnist/``; the first load (or ``gcbench data fashion-mnist``)
  decompresses them into ``<gcbench data cache>/torchvision/FashionMNIST/raw``. ``$GCBENCH_FASHION_MNIST``
  or ``fashion-mnist:FOLDER`` names another folder of those four files (prepared into its own root
  under the cache), ``fashion-mnist:ROOT`` a torchvision root that already holds ``FashionMNIST/raw``.
* **CIFAR-10 / CIFAR-100** (Krizhevsky 2009), the *python* version torchvision reads
  (``root/cifar-10-batches-py``, ``root/cifar-100-python``). torchvision checks every file against
  the official MD5 sums before it unpickles anything, so only the published files are unpickled. A
  user's ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz`` is extracted into the cache once
  (:func:`prepare_cifar`; tarfile's ``data`` filter, nothing outside the data set's folder); later
  loads of the same archive check the cached files' MD5 sums and extract nothing.
* **ImageNet-style folders** (``root/train/<class>/*``, ``root/val/<class>/*``) through
  ``torchvision.datasets.ImageFolder``, resized (shorter side) and centre-cropped with
  ``torchvision.transforms.v2``.
* **scikit-learn's digits** (1,797 8x8 images bundled in the sklearn wheel): always available, the
  fallback of small runs when Fashion-MNIST is not installed (reports name it).

A data set that is not there raises :class:`~gcbench.data.errors.DatasetUnavailableError` saying
how to get it; files torchvision cannot read raise :class:`~gcbench.data.errors.DataFormatError`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import tarfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .digits import DIGITS_DESCRIPTION, N_TRAIN, load_digits_tensors
from .errors import DataFormatError, DatasetUnavailableError, UnknownDatasetError
from .files import check_data_file, default_cache_dir, staging_folder

#: Environment variable naming a folder of the four Fashion-MNIST IDX files (plain or ``.gz``).
FASHION_ENV = "GCBENCH_FASHION_MNIST"
#: Environment variables naming a CIFAR root folder or a ``cifar-10[0]-python.tar.gz``.
CIFAR10_ENV = "GCBENCH_CIFAR10"
CIFAR100_ENV = "GCBENCH_CIFAR100"
#: Where Debian's ``dataset-fashion-mnist`` package installs the files.
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
#: The raw file names torchvision's FashionMNIST expects (decompressed).
FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
#: Largest decompressed IDX file accepted when preparing (the real train images are 47 MB).
MAX_IDX_BYTES = 1 << 28
#: Largest CIFAR archive member accepted when extracting (a real batch is 31 MB; CIFAR-100's train is 155 MB).
MAX_CIFAR_MEMBER = 1 << 28
#: Largest image (pixels) an image folder may hold; larger ones are refused as corrupt/hostile.
MAX_IMAGE_PIXELS = 64 * 1024 * 1024
IMAGEFOLDER_TRAIN = ("train",)
IMAGEFOLDER_VAL = ("val", "validation", "test")

FASHION_HOWTO = (
    "Fashion-MNIST is not installed. On Debian/Ubuntu: `apt-get install dataset-fashion-mnist` "
    f"(files under {DEBIAN_FASHION_DIR}); or put the four *-idx*-ubyte[.gz] files in a folder and set "
    f"${FASHION_ENV} to it, or pass a torchvision root holding FashionMNIST/raw/ ('fashion-mnist:ROOT')."
)
CIFAR_HOWTO = (
    "{name} is not bundled (no download here): get the python version ({tar}) from "
    "https://www.cs.toronto.edu/~kriz/cifar.html and pass it or a torchvision root holding {folder}/ "
    "('{key}:PATH'), set ${env}, or run `gcbench data {key}:PATH` once to extract it into the cache."
)


@dataclass(frozen=True)
class ImageDataset:
    """An image classification data set.

    Attributes:
        name: short name for reports (``fashion-mnist``, ``cifar10``, ``cifar100``, ``imagefolder``, ``digits``).
        description: one line: where the data come from.
        x_train, x_test: uint8 ``(N, C, H, W)``.
        y_train, y_test: int64 ``(N,)`` in ``0..classes-1``.
        classes: class names.
        source: the folder (or package) read.
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


def image_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The torchvision root in gcbench's data cache: ``<cache>/torchvision``, the cache being
    ``cache_dir`` or :func:`~gcbench.data.files.default_cache_dir` (``$GCBENCH_DATA``)."""
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "torchvision"


def _open_torchvision(cls: Any, root: Path, what: str, hint: str = "", **kwargs: Any) -> Any:
    """``cls(root, download=False, **kwargs)``, torchvision's errors turned into :class:`DataFormatError`."""
    try:
        return cls(str(root), download=False, **kwargs)
    except (RuntimeError, ValueError, AssertionError, OSError, EOFError, IndexError, KeyError, TypeError) as err:
        msg = str(err).replace(" You can use download=True to download it", "")  # gcbench never downloads
        raise DataFormatError(f"{root}: torchvision could not read {what} ({type(err).__name__}: {msg}){hint}") from None


def _checked_labels(targets: Any, count: int, n: int, where: str) -> torch.Tensor:
    y = torch.as_tensor(targets, dtype=torch.int64).reshape(-1)
    if y.numel() != n:
        raise DataFormatError(f"{where}: {n} images but {y.numel()} labels")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= count):
        raise DataFormatError(f"{where}: labels must be in 0..{count - 1}, found {int(y.min())}..{int(y.max())}")
    return y


# -- Fashion-MNIST ------------------------------------------------------------------------------------


def _fashion_ready(root: Path) -> bool:
    return all((root / "FashionMNIST" / "raw" / n).is_file() for n in FASHION_FILES)


def _idx_source_files(folder: Path) -> dict[str, Path] | None:
    """The four IDX files in ``folder`` (``NAME`` or ``NAME.gz``), or None if one is missing."""
    found = {}
    for n in FASHION_FILES:
        f = next((folder / c for c in (n, n + ".gz") if (folder / c).is_file()), None)
        if f is None:
            return None
        found[n] = f
    return found


def _check_idx(path: Path, source: Path, ndim: int) -> int:
    """Check an IDX file's header against its size (magic ``0 0 8 ndim``: unsigned bytes, then
    ``ndim`` big-endian int32 sizes, then exactly their product of bytes); return its item count.

    Raises:
        DataFormatError: naming ``source``, the file it was prepared from.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4 + 4 * ndim)
    if len(head) < 4 + 4 * ndim or head[:4] != bytes((0, 0, 8, ndim)):
        raise DataFormatError(f"{source}: not an IDX file of {ndim}-dimensional unsigned bytes (bad header)")
    dims = [int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    if len(head) + math.prod(dims) != size:
        raise DataFormatError(f"{source}: IDX header declares {'x'.join(map(str, dims))} bytes of data, "
                              f"the file holds {size - len(head)}")
    return dims[0]


def prepare_fashion_mnist(source: str | os.PathLike | None = None, root: str | os.PathLike | None = None) -> Path:
    """Put the four Fashion-MNIST IDX files of ``source`` (default ``$GCBENCH_FASHION_MNIST``, else
    Debian's folder) into ``root/FashionMNIST/raw`` (default :func:`image_root`), decompressed, as
    torchvision expects them. All four are decompressed into a temporary folder and checked (IDX
    headers against sizes, as many labels as images) before any replaces the copy there, and each is
    renamed into place, so a bad source leaves that copy as it was and ranks that prepare at once
    never see half a file. Returns ``root``.

    Raises:
        DatasetUnavailableError: ``source`` lacks one of the four files (the message says how to get them).
        DataFormatError: a corrupt gzip stream, a file larger than :data:`MAX_IDX_BYTES`, or not an IDX file.
    """
    if source is None:
        source = os.environ.get(FASHION_ENV) or DEBIAN_FASHION_DIR
    src = Path(source).expanduser()
    files = _idx_source_files(src)
    if files is None:
        raise DatasetUnavailableError(f"Fashion-MNIST IDX files not found in {src}. {FASHION_HOWTO}")
    dest_root = Path(root).expanduser() if root is not None else image_root()
    raw = dest_root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    with staging_folder(raw, ".prepare-") as tmp:
        for name, f in files.items():
            try:
                with open(tmp / name, "wb") as out, (gzip.open(f, "rb") if f.suffix == ".gz" else open(f, "rb")) as inp:
                    left = MAX_IDX_BYTES
                    while chunk := inp.read(1 << 20):  # chunks bound memory; the cap bounds a gzip bomb
                        left -= len(chunk)
                        if left < 0:
                            raise DataFormatError(f"{f}: more than {MAX_IDX_BYTES} bytes decompressed; not a Fashion-MNIST file")
                        out.write(chunk)
            except (OSError, EOFError, gzip.BadGzipFile) as err:
                raise DataFormatError(f"{f}: unreadable or corrupt ({err})") from None
        for split in ("train", "t10k"):
            n_img = _check_idx(tmp / f"{split}-images-idx3-ubyte", files[f"{split}-images-idx3-ubyte"], 3)
            n_lab = _check_idx(tmp / f"{split}-labels-idx1-ubyte", files[f"{split}-labels-idx1-ubyte"], 1)
            if n_img != n_lab:
                raise DataFormatError(f"{src}: {split} has {n_img} images but {n_lab} labels")
        for name in files:
            os.replace(tmp / name, raw / name)
    return dest_root


def _prepared(source: Path, cache_dir: str | os.PathLike | None) -> Path:
    """The torchvision root holding ``source``'s four IDX files, prepared once: Debian's copy goes to
    :func:`image_root`, any other folder to ``image_root()/prepared/<hash of its path>`` (so a folder
    passed once never replaces the default copy). Prepared again when a source file's size or
    modification time changed since (a stamp beside ``raw/`` records them)."""
    files = _idx_source_files(source)
    assert files is not None
    base = image_root(cache_dir)
    resolved = source.resolve()
    dest = base if resolved == DEBIAN_FASHION_DIR.resolve() else base / "prepared" / hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    stamp = json.dumps({"source": str(resolved), "files": {n: [f.stat().st_size, f.stat().st_mtime_ns] for n, f in files.items()}})
    stamp_file = dest / "FashionMNIST" / "gcbench-source.json"
    if not (_fashion_ready(dest) and stamp_file.is_file() and stamp_file.read_text() == stamp):
        prepare_fashion_mnist(source, dest)
        tmp = stamp_file.with_name(f".{stamp_file.name}.{os.getpid()}")
        tmp.write_text(stamp)
        os.replace(tmp, stamp_file)
    return dest


def find_fashion_mnist(root: str | os.PathLike | None = None, *, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The torchvision root to read Fashion-MNIST from, or None.

    With ``root``: a folder of the four IDX files (e.g. Debian's), prepared into the cache
    (:func:`_prepared`), or a torchvision root holding ``FashionMNIST/raw/``, read in place; never
    another copy. Without: ``$GCBENCH_FASHION_MNIST`` or Debian's package, prepared into the cache;
    else the cache's root when it holds ``FashionMNIST/raw/`` (put there by the user)."""
    if root is not None:
        p = Path(root).expanduser()
        if _idx_source_files(p) is not None:
            return _prepared(p, cache_dir)
        return p if _fashion_ready(p) else None
    env = os.environ.get(FASHION_ENV)
    source = Path(env).expanduser() if env else DEBIAN_FASHION_DIR
    if _idx_source_files(source) is not None:
        return _prepared(source, cache_dir)
    return image_root(cache_dir) if _fashion_ready(image_root(cache_dir)) else None


def load_fashion_mnist(root: str | os.PathLike | None = None) -> ImageDataset:
    """Fashion-MNIST through ``torchvision.datasets.FashionMNIST`` (see :func:`find_fashion_mnist`).

    Raises:
        DatasetUnavailableError: not found (the message says how to install it).
        DataFormatError: a file torchvision cannot read, or labels outside 0..9.
    """
    from torchvision.datasets import FashionMNIST

    folder = find_fashion_mnist(root)
    if folder is None:
        if root is not None:
            raise DatasetUnavailableError(
                f"Fashion-MNIST not found in {root}: it holds neither the four *-idx?-ubyte[.gz] files nor "
                "FashionMNIST/raw/ (a torchvision root); no other copy is used when a path is given"
            )
        raise DatasetUnavailableError(f"Fashion-MNIST not found. {FASHION_HOWTO}")
    tr = _open_torchvision(FashionMNIST, folder, "FashionMNIST", train=True)
    te = _open_torchvision(FashionMNIST, folder, "FashionMNIST", train=False)
    x_tr, x_te = tr.data.unsqueeze(1), te.data.unsqueeze(1)
    if x_tr.dtype != torch.uint8 or x_tr.dim() != 4 or x_tr.shape[1:] != x_te.shape[1:]:
        raise DataFormatError(f"{folder}: FashionMNIST images must be uint8 (N, H, W) of one size, got {x_tr.dtype} "
                              f"{tuple(x_tr.shape)} and {tuple(x_te.shape)}")
    y_tr = _checked_labels(tr.targets, 10, x_tr.shape[0], f"{folder} (train)")
    y_te = _checked_labels(te.targets, 10, x_te.shape[0], f"{folder} (test)")
    return ImageDataset(
        name="fashion-mnist",
        description=(f"Fashion-MNIST (Xiao et al. 2017), {x_tr.shape[0]:,} train + {x_te.shape[0]:,} test grayscale "
                     f"{x_tr.shape[2]}x{x_tr.shape[3]} images, 10 classes, torchvision.datasets.FashionMNIST from {folder}"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=tuple(tr.classes), source=str(folder),
    )


# -- CIFAR-10 / CIFAR-100 (python version) -------------------------------------------------------------

#: Folder each CIFAR python archive unpacks to (torchvision's ``base_folder``).
CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
_BINARY_FOLDERS = ("cifar-10-batches-bin", "cifar-100-binary")


def _cifar_class(key: str) -> Any:
    from torchvision.datasets import CIFAR10, CIFAR100

    return CIFAR10 if key == "cifar10" else CIFAR100


def _bad_cifar_file(key: str, folder: Path) -> str | None:
    """The first file torchvision reads from CIFAR ``key``'s ``folder`` that is missing or whose MD5
    differs from the sums its dataset class lists (``train_list``, ``test_list``, ``meta``); None when
    every one is the published file."""
    from torchvision.datasets.utils import check_integrity

    cls = _cifar_class(key)
    for name, md5 in [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]:
        if not check_integrity(str(folder / name), md5):
            return name
    return None


#: The file in a cached CIFAR folder naming the archive it was extracted from (path, size, modification time).
CIFAR_STAMP = "gcbench-source.json"


def _write_stamp(folder: Path, stamp: str) -> None:
    """Write :data:`CIFAR_STAMP` into ``folder`` atomically (a reader sees the old one or the new one)."""
    tmp = folder / f".{CIFAR_STAMP}.{os.getpid()}"
    tmp.write_text(stamp)
    os.replace(tmp, folder / CIFAR_STAMP)


def _extracted_before(dest: Path, stamp: str, keys: list[str]) -> str | None:
    """The key of the CIFAR folder under ``dest`` extracted from the archive ``stamp`` names, all its files official; or None."""
    for key in keys:
        folder = dest / CIFAR_FOLDERS[key]
        try:
            same = (folder / CIFAR_STAMP).read_text() == stamp
        except (OSError, UnicodeDecodeError):
            continue
        if same and _bad_cifar_file(key, folder) is None:
            return key
    return None


def _install_cifar(key: str, new: Path, target: Path, stamp: str, aside: Path) -> None:
    """Put the checked folder ``new`` in place as ``target``, never leaving a good ``target`` missing: one that holds
    the official files is kept (the same bytes; its stamp replaced), and only a broken one is moved to ``aside`` first."""
    if target.is_dir() and _bad_cifar_file(key, target) is None:
        _write_stamp(target, stamp)
        return
    if target.exists() or target.is_symlink():
        os.replace(target, aside)  # missing or corrupt files: no reader can use it as it is
    try:
        os.replace(new, target)
    except OSError:  # another process put its copy there first: keep it if it is good
        if not target.is_dir() or _bad_cifar_file(key, target) is not None:
            raise
        _write_stamp(target, stamp)


def prepare_cifar(archive: str | os.PathLike, root: str | os.PathLike | None = None, *,
                  expect: str | None = None) -> tuple[str, Path]:
    """Extract a CIFAR python archive (``cifar-10-python.tar.gz`` or ``cifar-100-python.tar.gz``) into
    ``root`` (default :func:`image_root`): only the members under its data folder, through tarfile's
    ``data`` filter (no links out, no absolute paths), into a temporary folder beside the cached copy.
    The extracted files are checked against torchvision's official MD5 sums before they go in place
    (:func:`_install_cifar`: renamed into place, never leaving a moment without a good cached copy), so
    a bad archive leaves the cache as it was. Extracted once: the cached folder records the archive
    (:data:`CIFAR_STAMP`: path, size, modification time), and a later call with the same archive only
    checks the cached files' MD5 sums. Returns ``(key, root)`` with key ``cifar10`` or ``cifar100``.

    Args:
        expect: ``"cifar10"`` or ``"cifar100"``: refuse (before extracting anything) an archive of the other one.

    Raises:
        DatasetUnavailableError: this Python cannot extract archives safely (no extraction filters), no
            such archive, or a cache folder the files cannot be put in.
        DataFormatError: not a regular file; an unreadable archive; not a CIFAR python archive (the binary version is named
            as such) or not the ``expect`` one; a member above :data:`MAX_CIFAR_MEMBER` bytes; or files
            that are not the official ones. The archive was named by its user, so a wrong one is bad
            input, not a data set missing here.
    """
    p = Path(archive).expanduser()
    dest = Path(root).expanduser() if root is not None else image_root()
    if not hasattr(tarfile, "data_filter"):  # extraction filters: Python 3.10.12+, 3.11.4+
        raise DatasetUnavailableError(f"{p}: this Python's tarfile has no extraction filters; extract it yourself and pass the folder")
    check_data_file(p, "a CIFAR archive is a .tar.gz file")
    st = p.stat()
    stamp = json.dumps({"archive": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    done = _extracted_before(dest, stamp, [expect] if expect in CIFAR_FOLDERS else list(CIFAR_FOLDERS))
    if done is not None:
        return done, dest
    with ExitStack() as stack:
        try:
            tar = stack.enter_context(tarfile.open(p, "r:*"))
            members = tar.getmembers()
            tops = {Path(m.name).parts[0] for m in members if Path(m.name).parts}
            key = next((k for k, f in CIFAR_FOLDERS.items() if f in tops), None)
            if key is None:
                if tops & set(_BINARY_FOLDERS):
                    raise DataFormatError(f"{p} is the *binary* version of CIFAR; torchvision reads the python "
                                          "version (cifar-10-python.tar.gz / cifar-100-python.tar.gz)")
                raise DataFormatError(f"{p}: no {' or '.join(CIFAR_FOLDERS.values())}/ folder in this archive")
            if expect is not None and key != expect:
                raise DataFormatError(f"{p} holds {key}, not {expect}")
            folder = CIFAR_FOLDERS[key]
            wanted = [m for m in members if Path(m.name).parts[:1] == (folder,)]
            big = next((m for m in wanted if m.size > MAX_CIFAR_MEMBER), None)
            if big is not None:
                raise DataFormatError(f"{p}: member {big.name} is {big.size} bytes, too large for CIFAR")
            dest.mkdir(parents=True, exist_ok=True)
            tmp = stack.enter_context(staging_folder(dest, f".{folder}."))
            tar.extractall(tmp, members=wanted, filter="data")
        except (tarfile.TarError, EOFError, OSError) as err:
            why = (str(err).strip().splitlines() or [type(err).__name__])[0].rstrip(":")  # tarfile lists each method tried
            raise DataFormatError(f"{p}: not a readable tar archive ({why})") from None
        bad = _bad_cifar_file(key, tmp / folder)
        if bad is not None:
            raise DataFormatError(f"{p}: {folder}/{bad} is missing or not the official file (its MD5 differs from "
                                  f"torchvision.datasets.{_cifar_class(key).__name__}'s); nothing was replaced")
        try:
            _write_stamp(tmp / folder, stamp)
            _install_cifar(key, tmp / folder, dest / folder, stamp, tmp / "old")
        except OSError as err:  # the cache, not the archive: e.g. a folder that cannot be written
            raise DatasetUnavailableError(f"{dest / folder}: cannot put {p}'s files there ({err.strerror or err})") from None
    return key, dest


def _cifar_root(key: str, path: str | os.PathLike | None, env: str) -> Path:
    """The torchvision root of CIFAR ``key``: ``path`` (a root, the data folder itself, or an archive,
    extracted into the cache), else ``$env``, else the cache's root."""
    folder = CIFAR_FOLDERS[key]
    name = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}[key]
    howto = CIFAR_HOWTO.format(name=name, tar=f"{key.replace('cifar', 'cifar-')}-python.tar.gz", folder=folder, key=key, env=env)
    given = path if path is not None else os.environ.get(env) or None
    if given is None:
        if (image_root() / folder).is_dir():
            return image_root()
        raise DatasetUnavailableError(f"{name} not found in {image_root()}. {howto}")
    p = Path(given).expanduser()
    if p.is_file():
        return prepare_cifar(p, expect=key)[1]
    if p.name == folder and p.is_dir():
        return p.parent
    if (p / folder).is_dir():
        return p
    if any((p / b).is_dir() for b in _BINARY_FOLDERS) or p.name in _BINARY_FOLDERS:
        raise DataFormatError(f"{p} holds the *binary* version of CIFAR; torchvision reads the python version. {howto}")
    raise DatasetUnavailableError(f"{p}: no {folder}/ here. {howto}")


def _load_cifar(key: str, root: str | os.PathLike | None, env: str) -> ImageDataset:
    cls, count = _cifar_class(key), (10 if key == "cifar10" else 100)
    r = _cifar_root(key, root, env)
    sets = []
    for train in (True, False):
        ds = _open_torchvision(cls, r, cls.__name__, hint=" (torchvision unpickles only files with the official MD5 sums)", train=train)
        x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()  # (N, 32, 32, 3) -> (N, 3, 32, 32)
        sets.append((x, _checked_labels(ds.targets, count, x.shape[0], f"{r} ({'train' if train else 'test'})"), ds.classes))
    (x_tr, y_tr, classes), (x_te, y_te, _) = sets
    name = "CIFAR-10" if key == "cifar10" else "CIFAR-100 (fine labels)"
    return ImageDataset(
        name=key,
        description=(f"{name} (Krizhevsky 2009), python version, {x_tr.shape[0]:,} train + {x_te.shape[0]:,} test "
                     f"32x32 RGB images, {count} classes, torchvision.datasets.{cls.__name__} from {r}"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=tuple(classes), source=str(r),
    )


def load_cifar10(root: str | os.PathLike | None = None) -> ImageDataset:
    """CIFAR-10 through ``torchvision.datasets.CIFAR10`` (torchvision checks the official MD5 sums
    before unpickling). ``root``: a torchvision root, the ``cifar-10-batches-py`` folder, or
    ``cifar-10-python.tar.gz``; default ``$GCBENCH_CIFAR10``, else the cache.

    Raises:
        DatasetUnavailableError: not found.
        DataFormatError: the binary version, an archive of the other CIFAR or none, or files torchvision
            refuses (e.g. not the official ones) or cannot read.
    """
    return _load_cifar("cifar10", root, CIFAR10_ENV)


def load_cifar100(root: str | os.PathLike | None = None) -> ImageDataset:
    """CIFAR-100 (fine labels, 100 classes) through ``torchvision.datasets.CIFAR100``; ``root`` as
    :func:`load_cifar10` (``cifar-100-python``, ``cifar-100-python.tar.gz``, ``$GCBENCH_CIFAR100``).

    Raises:
        DatasetUnavailableError, DataFormatError: as :func:`load_cifar10`.
    """
    return _load_cifar("cifar100", root, CIFAR100_ENV)


# -- ImageNet-style folders -----------------------------------------------------------------------------


def _load_rgb(path: str) -> Any:
    """ImageFolder's loader: Pillow, the size checked from the header before decoding, RGB."""
    from PIL import Image

    with Image.open(path) as im:
        w, h = im.size
        if w < 1 or h < 1 or w * h > MAX_IMAGE_PIXELS:
            raise DataFormatError(f"{path}: image is {w}x{h} pixels, outside 1..{MAX_IMAGE_PIXELS} pixels")
        return im.convert("RGB")


def _folder_split(folder: Path, size: int, classes: list[str] | None, max_per_class: int | None) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    from PIL import Image, UnidentifiedImageError
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    # the usual ImageNet evaluation transform: shorter side to `size` (antialiased bilinear), centre crop
    tf = v2.Compose([v2.PILToTensor(), v2.Resize(size, antialias=True), v2.CenterCrop(size)])
    if not any(d.is_dir() for d in folder.iterdir()):
        flat = " (ImageNet's validation images come flat: sort them into <class>/ folders first, e.g. with the " \
               "valprep.sh script of the PyTorch ImageNet example)" if classes is not None else ""
        raise DataFormatError(f"{folder}: no class folders; expected {folder}/<class>/<image>{flat}")
    try:
        ds = ImageFolder(str(folder), transform=tf, loader=_load_rgb, allow_empty=classes is not None)
    except FileNotFoundError as err:
        raise DataFormatError(f"{folder}: {err} (expected {folder}/<class>/<image>)") from None
    if classes is None:
        classes = list(ds.classes)
    unknown = [c for c in ds.classes if c not in classes]
    if unknown:
        raise DataFormatError(f"{folder}: class folder(s) {unknown[:5]} not among the training classes")
    picked: list[tuple[int, int]] = []  # (index in ds, label in the training classes)
    seen: dict[int, int] = {}
    for i, (_, t) in enumerate(ds.samples):  # samples are sorted by class, then file name
        seen[t] = seen.get(t, 0) + 1
        if max_per_class is None or seen[t] <= max_per_class:
            picked.append((i, classes.index(ds.classes[t])))
    if not picked:
        raise DataFormatError(f"{folder}: no image files in its class folders")
    images = []
    for i, _ in picked:  # one decode per file (Pillow), not per element
        try:
            images.append(ds[i][0])
        except DataFormatError:
            raise
        except UnidentifiedImageError:
            raise DataFormatError(f"{ds.samples[i][0]}: not an image Pillow can read") from None
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise DataFormatError(f"{ds.samples[i][0]}: corrupt or truncated image ({err})") from None
    x = torch.stack([torch.as_tensor(im) for im in images])
    return x, torch.tensor([t for _, t in picked], dtype=torch.int64), classes


def load_image_folder(root: str | os.PathLike, *, size: int = 32, max_per_class: int | None = None) -> ImageDataset:
    """An ImageNet-style folder through ``torchvision.datasets.ImageFolder``: ``root/train/<class>/*``
    and ``root/val/<class>/*`` (``validation/`` or ``test/`` also accepted), decoded to RGB ``size`` x
    ``size`` (shorter side resized, centre crop: ``torchvision.transforms.v2``). Classes are the
    training folders in sorted order; the validation classes must be among them.

    Args:
        root: the folder holding ``train/`` and ``val/``.
        size: side of the decoded images.
        max_per_class: read at most this many images of each class per split (by file name); None: all.

    Raises:
        DatasetUnavailableError: no such folder, no ``train/`` or ``val/``.
        DataFormatError: a corrupt image (the message names it), no class folders, an unknown
            validation class, an empty split.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if max_per_class is not None and max_per_class < 1:
        raise ValueError(f"max_per_class must be >= 1 or None, got {max_per_class}")
    p = Path(root).expanduser()
    if not p.is_dir():
        raise DatasetUnavailableError(f"{p}: no such folder (an image folder needs {p}/train/<class>/ and {p}/val/<class>/)")
    train = next((p / n for n in IMAGEFOLDER_TRAIN if (p / n).is_dir()), None)
    val = next((p / n for n in IMAGEFOLDER_VAL if (p / n).is_dir()), None)
    if train is None or val is None:
        raise DatasetUnavailableError(f"{p}: an image folder needs train/<class>/ and val/<class>/ (or validation/, test/)")
    x_tr, y_tr, classes = _folder_split(train, size, None, max_per_class)
    x_te, y_te, _ = _folder_split(val, size, classes, max_per_class)
    return ImageDataset(
        name="imagefolder",
        description=(f"image folder {p} ({len(classes)} classes, {x_tr.shape[0]:,} train + {x_te.shape[0]:,} {val.name} "
                     f"images, torchvision.datasets.ImageFolder, RGB {size}x{size}: shorter side resized, centre crop)"),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, classes=tuple(classes), source=str(p),
    )


# -- digits (always available) ------------------------------------------------------------------------


def load_digits_images(n_train: int = N_TRAIN) -> ImageDataset:
    """scikit-learn's bundled digits as ``(N, 1, 8, 8)`` uint8 images (intensities 0..16 scaled to 0..255);
    the first ``n_train`` (by default :data:`~.digits.N_TRAIN`) for training, the rest (297 by default) for
    testing, as ``gcbench train`` splits them."""
    d = load_digits_tensors()
    x = (d.intensities.to(torch.float32) * (255.0 / 16.0)).round().to(torch.uint8).unsqueeze(1)
    return ImageDataset(
        name="digits", description=DIGITS_DESCRIPTION + f"; first {n_train} train, last {x.shape[0] - n_train} test",
        x_train=x[:n_train], y_train=d.y[:n_train].clone(), x_test=x[n_train:], y_test=d.y[n_train:].clone(),
        classes=tuple(str(i) for i in range(10)), source="sklearn.datasets.load_digits",
    )


# -- one entry point --------------------------------------------------------------------------------------


#: Each image data set's accepted names (the first is the one the messages use).
IMAGE_DATASET_NAMES = {
    "fashion-mnist": ("fashion-mnist", "fashion_mnist", "fmnist"),
    "cifar10": ("cifar10", "cifar-10"),
    "cifar100": ("cifar100", "cifar-100"),
    "imagefolder": ("imagefolder", "image-folder", "imagenet-folder"),
    "digits": ("digits",),
}


def image_dataset_kind(spec: str) -> tuple[str, str]:
    """``(data set, PATH or "")`` named by ``spec`` (a key of :data:`IMAGE_DATASET_NAMES`), without
    loading anything, so that a command can refuse a bad name before it starts.

    A PATH starting with ``~`` is returned expanded (:meth:`pathlib.Path.expanduser`), the path the
    existence check looked at.

    Raises:
        UnknownDatasetError: an unknown name (a :class:`DatasetUnavailableError`).
        DatasetUnavailableError: ``imagefolder`` without its path, ``digits`` with one (the digits are
            bundled with scikit-learn), or a PATH that does not exist.
    """
    name, _, arg = spec.partition(":")
    name = name.strip().lower()
    kind = next((k for k, names in IMAGE_DATASET_NAMES.items() if name in names), None)
    if kind is None:
        raise UnknownDatasetError(
            f"unknown image data set {spec!r}: use 'fashion-mnist[:PATH]', 'cifar10[:PATH]', 'cifar100[:PATH]', "
            "'imagefolder:PATH' or 'digits'"
        )
    if kind == "imagefolder" and not arg:
        raise DatasetUnavailableError("imagefolder needs a path: 'imagefolder:PATH' (PATH/train/<class>/, PATH/val/<class>/)")
    if kind == "digits" and arg:
        raise DatasetUnavailableError(f"image data set {spec!r}: digits takes no path (the digits are bundled with "
                                      "scikit-learn): use 'digits'")
    if arg:
        path = Path(arg).expanduser()
        if not path.exists():
            raise DatasetUnavailableError(f"image data set {spec!r}: {arg} does not exist (a path given is never replaced by another copy)")
        arg = str(path)
    return kind, arg


def load_images(spec: str, *, image_side: int = 32) -> ImageDataset:
    """``"fashion-mnist"`` / ``"fashion-mnist:PATH"``, ``"cifar10"`` / ``"cifar10:PATH"``,
    ``"cifar100"`` / ``"cifar100:PATH"`` (fine labels), ``"imagefolder:PATH"`` (decoded to
    ``image_side`` x ``image_side``), or ``"digits"``. A PATH that does not hold the data set is an
    error, never a fallback to another copy.

    Raises:
        DatasetUnavailableError: unknown name, or the data are not here (with instructions).
        DataFormatError: malformed files.
    """
    kind, arg = image_dataset_kind(spec)
    if kind == "fashion-mnist":
        return load_fashion_mnist(arg or None)
    if kind == "cifar10":
        return load_cifar10(arg or None)
    if kind == "cifar100":
        return load_cifar100(arg or None)
    if kind == "imagefolder":
        return load_image_folder(arg, size=image_side)
    return load_digits_images()


def to_float(x: torch.Tensor, size: int | None = None, *, mean: torch.Tensor | None = None,
             std: torch.Tensor | None = None, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 images -> float32 in [0, 1] (``transforms.v2.ToDtype``), average-pooled to ``size`` x
    ``size`` (an integer divisor of the side; None keeps it), normalised per channel
    (``transforms.v2.Normalize``).

    The pooling is a box filter (``avg_pool2d``), not ``v2.Resize``: the smoke/claims scales' measured
    numbers were taken with 2x2 average pooling, which v2's bilinear/antialiased filters do not reproduce.

    Returns:
        ``(x, mean, std)``: the images and the per-channel statistics used (computed from ``x``
        unless given, so test images reuse the training statistics).
    """
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    h = x.shape[-1]
    if size is not None and (size <= 0 or h % size):
        raise ValueError(f"image side {h} is not a multiple of {size}")
    k = 1 if size is None else h // size
    to_unit = v2.ToDtype(torch.float32, scale=True)
    out = []
    for i in range(0, x.shape[0], chunk):  # chunks bound the float temporary, not a loop over images
        xb = to_unit(tv_tensors.Image(x[i : i + chunk])).as_subclass(torch.Tensor)
        if k > 1:
            xb = torch.nn.functional.avg_pool2d(xb, k)
        out.append(xb)
    xf = torch.cat(out) if out else torch.empty(0, x.shape[1], h // k, h // k)
    if mean is None or std is None:
        mean = xf.mean(dim=(0, 2, 3))
        std = xf.std(dim=(0, 2, 3)).clamp_min(1e-6)
    xf = v2.Normalize(mean.tolist(), std.tolist())(tv_tensors.Image(xf)).as_subclass(torch.Tensor)
    return xf, mean, std
