"""The SketchML workload's probe (:mod:`..framework.workload_stamp`): two epochs of :func:`.train.train`
per model and method on synthetic sparse data, one message-level iteration of the paper-scale cell
(:func:`.paperscale.run_paper_messages`) at a small size, and what they computed.

The three models (logistic regression, SVM, linear regression) train with SketchML (the paper's
preset, but with the exact quantile sketch: DataSketches' coins cannot be seeded, so its default
sketch gives other bytes on every run), ZipML-8 and Adam-double on 4 workers (parameter server, the
cells' ``sketchml-cluster2-10`` profile). Each run contributes its epochs' held-out loss and
accuracy, bytes up and down, keys and key bytes, density, modelled push and pull seconds and the
message checks, and the trained weights; measured seconds are left out.

The data are synthetic, from a generator seeded with :data:`SEED`: 400 rows of 2,000 binary
features, 12 of them set per row uniformly at random, labels the sign of a fixed random linear
function of the row (0/1); 75% of the rows train, the rest are held out (:func:`.train.train_test_split`,
seed 0, as the cells split their data). The message-level
iteration draws its own KDD-like shards (:class:`.paperscale.PaperScaleParams` at 20,000 features,
2 workers of 300 rows, seed 0) and contributes, per weight type, its messages' bytes and keys.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from .messages import MethodSpec
from .paperscale import METHODS as PAPER_METHODS
from .paperscale import PaperScaleParams, run_paper_messages
from .train import Split, TrainConfig, train, train_test_split

#: Seed of the synthetic data's generator.
SEED = 20180610
#: The probed methods (see the module docstring).
METHODS = (
    MethodSpec("sketchml", "sketchml", {"preset": "paper", "sketch": "exact"}, "float64", "SketchML (exact sketch)"),
    MethodSpec("zipml8", "zipml8", {}, "float64", "ZipML-8bit"),
    MethodSpec("adam-double", "identity", {}, "float64", "Adam-double"),
)
#: What the cells compute that this probe does not reach ("module.py" or "module.py:qualname"), and why:
#: a change there still needs the package's ``CODE_VERSION`` (``tests/test_repro_probe_reach.py`` holds
#: every other function the cells call to being reached by :func:`probe`).
UNPROBED = {
    "workload.py": "the cells' glue: a cell's configuration into a TrainConfig, the data set (loading, "
                   "generating the synthetic KDD-like rows), W&B logging and the result's assembly",
    "paperscale.py:derive_quantities": "the paper-scale cell's modelled times, logged to W&B only (the report "
                                       "derives them again from the cell's measured result)",
    "paperscale.py:iteration_times": "the same",
    "critical_path.py": "the same",
    "settings.py:SketchMLSettings.driver_models": "the same",
    "settings.py:SketchMLSettings.broadcast_copies": "the same",
}
#: The epoch records' fields kept (no measured seconds).
KEPT = ("epoch", "test_loss", "test_accuracy", "messages", "bytes_up", "bytes_raw", "bytes_down", "keys", "key_bytes",
        "density", "modelled_push_s", "modelled_pull_s", "value_rank_error", "value_rank_allowed", "sketch_exact",
        "sketch_exact_expected", "sketch_splits_unmatched", "sketch_keys_open")


def probe_split() -> Split:
    """The synthetic sparse data (see the module docstring)."""
    rng = np.random.default_rng(SEED)
    rows, dim, per_row = 400, 2000, 12
    cols = np.stack([rng.choice(dim, per_row, replace=False) for _ in range(rows)])
    X = sp.csr_matrix((np.ones(rows * per_row), (np.repeat(np.arange(rows), per_row), cols.ravel())), shape=(rows, dim))
    y = (X @ rng.standard_normal(dim) > 0).astype(np.float64)
    return train_test_split(X, y, 0.75, seed=0)


def probe() -> Iterator[tuple[str, Any]]:
    """The probe's items (see the module docstring)."""
    split = probe_split()
    for model in ("lr", "svm", "linear"):
        for method in METHODS:
            weights: list[np.ndarray] = []
            cfg = TrainConfig(model=model, method=method, workers=4, epochs=2, lr=0.05)
            result = train(split, cfg, weights_out=weights)
            yield f"{model}.{method.name}.epochs", [{k: e[k] for k in KEPT if k in e} for e in result["epochs"]]
            yield f"{model}.{method.name}.weights", weights[0]
    specs = {m.name: m for m in METHODS}
    specs.update({name: MethodSpec(name, name if name.startswith("zipml") else "identity", {},
                                   "float32" if name == "adam-float" else "float64")
                  for name in PAPER_METHODS if name not in specs})
    paper = run_paper_messages(PaperScaleParams(features=20_000, workers=2, rows_per_worker=300, seed=0), specs,
                               on_step=lambda: None)
    yield "paper_messages.workers", [{k: w[k] for k in ("rows", "nnz", "keys")} for w in paper["workers"]]
    for name, m in paper["methods"].items():
        yield f"paper_messages.{name}", {k: m[k] for k in ("push_bytes", "key_bytes", "keys", "agg_keys", "down_bytes")}
