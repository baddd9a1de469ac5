"""Hugging Face ``datasets`` the gcbench way: offline unless asked, cached in gcbench's cache folder.

Every loader that reads a corpus through ``datasets`` goes through :func:`hf_datasets` (the
module, configured) and :func:`load_builder` / :func:`load_hub` here, so the policy lives in one place:

* **Nothing is downloaded unless the user asks.** ``HF_DATASETS_OFFLINE=1`` and ``HF_HUB_OFFLINE=1``
  are set before ``datasets`` is imported, each unless the user set it already. Setting
  ``HF_DATASETS_OFFLINE=0`` is how a user asks ``datasets`` to download (e.g. WMT14 once); either
  variable set to a true value keeps everything offline (:func:`downloads_allowed`).
* **The cache lives in gcbench's cache folder** (:func:`hf_home`: ``<gcbench data cache>/huggingface``),
  not the user's home, unless they set ``HF_HOME`` (or ``HF_DATASETS_CACHE``) themselves.
* A data set that is not there raises :class:`~.errors.DatasetUnavailableError` whose one-line
  message says how to get it (the CLI prints it and exits non-zero: 1 for ``gcbench data``, 2 for
  ``gcbench reproduce``).
* ``datasets``' progress bars are off: the reproductions draw their own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import DatasetUnavailableError
from .files import check_data_file, default_cache_dir

#: Environment variables that, when the user sets them, decide online/offline for ``datasets``.
OFFLINE_ENV = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
_TRUE = {"1", "ON", "YES", "TRUE"}


def hf_home() -> Path:
    """Where ``datasets`` and the Hub client keep their files: ``$HF_HOME`` when the user set it,
    else ``<gcbench data cache>/huggingface``."""
    env = os.environ.get("HF_HOME")
    return Path(env) if env else default_cache_dir() / "huggingface"


def hf_datasets_cache() -> Path:
    """The ``datasets`` cache folder (``$HF_DATASETS_CACHE``, else :func:`hf_home` / ``datasets``)."""
    env = os.environ.get("HF_DATASETS_CACHE")
    return Path(env) if env else hf_home() / "datasets"


def downloads_allowed() -> bool:
    """True only when the user set ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` to a false value and
    neither of them to a true one (an explicit offline setting is never overridden)."""
    values = [v.strip().upper() for v in (os.environ.get(name) for name in OFFLINE_ENV) if v is not None]
    return bool(values) and not any(v in _TRUE for v in values)


def hf_datasets() -> ModuleType:
    """The ``datasets`` module, configured by gcbench's policy (see the module docstring).

    The environment is set before the first import; ``datasets`` and ``huggingface_hub`` read it at
    import time, so their module flags are set too in case something imported them earlier.

    Raises:
        DatasetUnavailableError: ``datasets`` is not installed.
    """
    offline = not downloads_allowed()
    for name in OFFLINE_ENV:
        os.environ.setdefault(name, "1" if offline else "0")
    if "HF_HOME" not in os.environ:
        os.environ["HF_HOME"] = str(hf_home())
    try:
        import datasets
        import huggingface_hub.constants as hub_constants
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise DatasetUnavailableError("reading text corpora needs Hugging Face datasets: `pip install datasets==5.2.0`") from None
    datasets.config.HF_HUB_OFFLINE = offline
    datasets.config.HF_DATASETS_OFFLINE = offline
    hub_constants.HF_HUB_OFFLINE = offline
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def builder_for(path: str | os.PathLike) -> str:
    """The ``datasets`` packaged builder that reads a local file: ``json`` (``.json``, ``.jsonl``),
    ``parquet`` (``.parquet``), else ``text`` (one example per line); a ``.gz``/``.bz2``/``.xz``
    suffix is looked through (``datasets`` decompresses it)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    while suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zst"):
        suffixes.pop()
    last = suffixes[-1] if suffixes else ""
    if last in (".json", ".jsonl"):
        return "json"
    if last == ".parquet":
        return "parquet"
    return "text"


def load_builder(files: str | os.PathLike | Sequence[str | os.PathLike], builder: str | None = None, *,
                 cache_dir: str | os.PathLike | None = None, **kwargs: Any) -> Any:
    """Local files through one of ``datasets``' packaged builders (``text``, ``json``, ``parquet``) as
    one Arrow-backed ``datasets.Dataset``, cached under :func:`hf_datasets_cache` (a second load of
    unchanged files reads the Arrow cache).

    Args:
        files: one path or several (read in order, same builder).
        builder: default :func:`builder_for` of the first file.
        cache_dir: where the Arrow files go (default :func:`hf_datasets_cache`).
        kwargs: passed to ``datasets.load_dataset`` (e.g. ``columns=`` for parquet).

    Raises:
        DatasetUnavailableError: a file is missing.
        DataFormatError: a path that is not a regular file; ``datasets`` could not read the files (the
            message names them).
    """
    from .errors import DataFormatError

    paths = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    if not paths:
        raise DatasetUnavailableError("no data files given")
    for p in paths:
        check_data_file(p)
    kind = builder or builder_for(paths[0])
    ds = hf_datasets()
    try:
        return ds.load_dataset(kind, data_files={"train": [str(p.resolve()) for p in paths]}, split="train",
                               cache_dir=str(cache_dir or hf_datasets_cache()), **kwargs)
    except (ValueError, TypeError, OSError, KeyError) as err:
        raise DataFormatError(f"{', '.join(map(str, paths))}: not readable as {kind} ({type(err).__name__}: "
                              f"{' '.join(str(err).split())[:300]})") from None
    except Exception as err:  # datasets wraps parse failures of the builders in its own error types
        if type(err).__module__.startswith(("datasets", "pyarrow")):
            raise DataFormatError(f"{', '.join(map(str, paths))}: not readable as {kind} ({type(err).__name__}: "
                                  f"{' '.join(str(err).split())[:300]})") from None
        raise


def load_hub(path: str, name: str | None, *, howto: str, split: str | None = None, **kwargs: Any) -> Any:
    """``datasets.load_dataset(path, name)`` from the Hugging Face cache (or the Hub, when the user
    allowed downloads, :func:`downloads_allowed`).

    Raises:
        DatasetUnavailableError: not cached and downloads not allowed (or the Hub unreachable); the
            one-line message ends with ``howto``.
    """
    ds = hf_datasets()
    try:
        return ds.load_dataset(path, name, split=split, cache_dir=str(hf_datasets_cache()), **kwargs)
    except Exception as err:  # ConnectionError, FileNotFoundError, DatasetNotFoundError... all mean "not here"
        where = "offline: downloads not allowed" if not downloads_allowed() else f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        raise DatasetUnavailableError(f"{path}{'/' + name if name else ''} is not in the Hugging Face cache "
                                      f"{hf_datasets_cache()} ({where}). {howto}") from None
