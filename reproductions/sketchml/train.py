"""The simulated Spark job of SketchML §4: W workers, one driver, key-value gradients on the wire.

One process plays every role, in the order an iteration of the released code runs
(``GeneralizedLinearModel.computeGradient`` / ``aggregateAndUpdate``):

1. each worker computes its mini-batch gradient (its share of 10% of the training set; batch mean
   plus lazy ℓ2 on its keys, :func:`glm.sparse_gradient`) and encodes it into a message
   (:class:`messages.MessageCodec`: real bytes);
2. the driver parses every message, sums the decoded gradients, divides by W and encodes the sum
   again with the same method (the code's ``Gradient.compress(sum, conf)``);
3. the driver broadcasts that message; every worker decodes it and takes an Adam step on the keys it
   holds (its model replica; all replicas stay identical, so one is kept). The paper's text says the
   driver "broadcasts the updated model"; the released code broadcasts the compressed aggregate, which
   is what we do.

Times are kept apart and labelled:

* *measured* on this machine with :data:`CLOCK`, the CPU seconds of the thread doing the work (one
  thread: torch is set to one, numpy/scipy use one), which other processes on a shared machine do
  not inflate as they inflate wall-clock seconds: the slowest worker's gradient + encode
  (workers run in parallel on a cluster), the driver's decode + sum + encode, and one worker's
  decode + update. Test-loss evaluation is not counted (the paper: "we do not count the time used
  for data loading and result outputting").
* *modelled* communication: step 1's messages (push to the driver) and step 3's broadcast (pull)
  turned into seconds by the α–β network model under the named cluster profile (:mod:`.netmodel`).
  An epoch records its bytes (``bytes_up``, ``bytes_down``) and the serial model's seconds (the
  broadcast sent to each of the W workers); the derivation and the report price every epoch again
  from those bytes with the spec's ``broadcast_copies``, as the driver's critical path prices Spark's
  broadcast (:func:`.measures.priced_run`), so the serial model's seconds stay in the cell for
  comparison only.

An epoch is one pass over the training set: ``round(1 / batch_ratio)`` iterations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from . import glm
from .messages import MessageCodec, MethodSpec, warm_up
from .measures import min_trained_loss
from .netmodel import iteration_time
from .valuecheck import message_checks

#: The clock of every *measured* second: CPU time of the calling thread (user + system).
CLOCK = time.thread_time


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run depends on (also its cell config)."""

    model: str
    method: MethodSpec
    workers: int
    epochs: int
    lr: float
    l2: float = 0.01
    batch_ratio: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    seed: int = 0
    profile: str = "sketchml-cluster2-10"
    topology: str = "parameter_server"

    def as_config(self) -> dict[str, Any]:
        """JSON-able form."""
        d = dict(self.__dict__)
        d["method"] = self.method.as_config()
        return d


@dataclass
class Split:
    """Training and test data."""

    X_train: sp.csr_matrix
    y_train: np.ndarray
    X_test: sp.csr_matrix
    y_test: np.ndarray


def train_test_split(X: sp.csr_matrix, y: np.ndarray, train_fraction: float, seed: int) -> Split:
    """Shuffle rows with ``seed`` and split ``train_fraction`` / rest (SketchML: 75/25)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(X.shape[0])
    n_train = int(round(train_fraction * X.shape[0]))
    tr, te = np.sort(order[:n_train]), np.sort(order[n_train:])
    return Split(X[tr], y[tr], X[te], y[te])


def worker_shards(n_rows: int, workers: int, seed: int) -> list[np.ndarray]:
    """Partition the training rows among the workers (as Spark partitions a data set)."""
    rng = np.random.default_rng(seed + 1)
    return [np.sort(s) for s in np.array_split(rng.permutation(n_rows), workers)]


@dataclass
class EpochRecord:
    """What one epoch measured (times in seconds, bytes summed over the epoch's messages)."""

    epoch: int
    test_loss: float
    test_accuracy: float
    train_loss: float | None = None
    messages: int = 0
    bytes_up: int = 0
    bytes_raw: int = 0  # the same gradients as Adam-double messages (int32 keys + float64 values)
    keys: int = 0
    key_bytes: int = 0
    density: float = 0.0  # mean nnz(gradient) / dim over the epoch's messages
    compute_s: float = 0.0
    encode_s: float = 0.0
    decode_s: float = 0.0  # the driver's decode + sum + re-encode
    update_s: float = 0.0  # a worker's decode of the broadcast + Adam step
    measured_s: float = 0.0
    modelled_push_s: float = 0.0  # workers -> driver (what the methods compress)
    modelled_pull_s: float = 0.0  # driver -> workers (the broadcast aggregate, same codec; the serial model's W copies)
    modelled_comm_s: float = 0.0
    epoch_time_s: float = 0.0
    cum_time_s: float = 0.0
    cum_measured_s: float = 0.0
    cum_modelled_s: float = 0.0
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        d = dict(self.__dict__)
        d.update(d.pop("extra"))
        return d


@dataclass
class Iteration:
    """One iteration's messages and measured seconds (see the module docstring, steps 1-3)."""

    push: list  # the workers' Message objects
    down: Any  # the driver's broadcast Message
    keys: np.ndarray  # decoded broadcast keys
    values: np.ndarray  # decoded broadcast values
    raw_bytes: int  # the workers' gradients as Adam-double messages
    compute_s: float
    encode_s: float
    slowest_worker_s: float
    driver_s: float
    worker_decode_s: float
    value_check: tuple[float, float] | None = None  # SketchML: (sum of rank errors, allowed), :mod:`.valuecheck`
    sketch_check: tuple[float, ...] | None = None  # SketchML: (exact keys, expected, unmatched, keys left out), ditto


def run_iteration(model: str, X: sp.csr_matrix, y: np.ndarray, rows: list, w: np.ndarray, l2: float,
                  codec: MessageCodec, raw_codec: MessageCodec | None) -> Iteration:
    """Steps 1-2 and the broadcast decode of step 3 (the Adam step is the caller's)."""
    D = X.shape[1]
    msgs, slowest, compute, encode, raw = [], 0.0, 0.0, 0.0, 0
    sent, received = [], []  # SketchML: each message's true pairs and the driver's decode of its bytes
    check = codec.native and hasattr(codec.codec, "buckets")
    for r in rows:
        t0 = CLOCK()
        keys, vals = glm.sparse_gradient(model, X[r], y[r], w, l2)
        t1 = CLOCK()
        msg = codec.encode(keys, vals)
        t2 = CLOCK()
        compute += t1 - t0
        encode += t2 - t1
        slowest = max(slowest, t2 - t0)
        msgs.append(msg)
        if check:
            sent.append((keys, vals))
        raw += raw_codec.encode(keys, vals).nbytes if raw_codec is not None else msg.nbytes
    t0 = CLOCK()
    g = np.zeros(D)
    present = np.zeros(D, dtype=bool)
    for msg in msgs:
        k, v = codec.decode(msg.data)
        g[k] += v
        present[k] = True
        if check:
            received.append((k, v))
    agg_keys = np.flatnonzero(present)
    down = codec.encode(agg_keys, g[agg_keys] / len(rows))
    t1 = CLOCK()
    k, v = codec.decode(down.data)
    t2 = CLOCK()
    value_check = exact_check = None
    if check:  # outside the measured seconds
        checks = [message_checks(m.data, *pairs, *got, codec.codec) for m, pairs, got in zip(msgs, sent, received)]
        value_check = tuple(sum(rank[i] for rank, _ in checks) for i in range(2))
        exact_check = tuple(sum(exact[i] for _, exact in checks) for i in range(4))
    return Iteration(msgs, down, k, v, raw, compute, encode, slowest, t1 - t0, t2 - t1, value_check, exact_check)


def train(
    split: Split,
    cfg: TrainConfig,
    *,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    profile_data: Any = None,
    weights_out: list | None = None,
) -> dict[str, Any]:
    """Run ``cfg.epochs`` epochs and return ``{"epochs": [records...], "summary": {...}}``.

    Epoch 0 is the untrained model (time 0). The data order comes from ``cfg.seed`` and ZipML's
    rounding from its ``seed`` parameter; SketchML's quantile sketch (DataSketches) flips unseedable
    coins, so its runs vary slightly from run to run (see ``compressors/codecs/sketchml/codec.py``).
    ``weights_out``, when given, receives the trained weight vector.
    """
    X, y = split.X_train, split.y_train
    n, D = X.shape
    codec = MessageCodec(cfg.method, D)
    raw_codec = MessageCodec(MethodSpec("adam-double", "identity", {}, "float64"), D)
    warm_up(codec)  # first-call costs (lazy imports) are not part of epoch 1
    warm_up(raw_codec)
    shards = worker_shards(n, cfg.workers, cfg.seed)
    n_batches = max(1, int(round(1.0 / cfg.batch_ratio)))
    rng = np.random.default_rng(cfg.seed + 2)
    w = np.zeros(D)
    opt = glm.Adam(D, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps)

    def evaluate(rec: EpochRecord) -> None:
        rec.test_loss = glm.test_loss(cfg.model, split.X_test, split.y_test, w)
        rec.test_accuracy = glm.accuracy(cfg.model, split.X_test, split.y_test, w)
        rec.extra["test_objective"] = glm.objective(cfg.model, split.X_test, split.y_test, w, cfg.l2)

    records: list[EpochRecord] = []
    rec0 = EpochRecord(0, 0.0, 0.0)
    evaluate(rec0)
    records.append(rec0)
    if on_epoch:
        on_epoch(rec0)
    cum = cum_meas = cum_mod = 0.0
    for epoch in range(1, cfg.epochs + 1):
        rec = EpochRecord(epoch, 0.0, 0.0)
        rec.extra["bytes_down"] = 0
        batches = [np.array_split(rng.permutation(s), n_batches) for s in shards]
        density_sum = 0.0
        for it in range(n_batches):
            rows = [np.sort(b[it]) for b in batches]
            res = run_iteration(cfg.model, X, y, rows, w, cfg.l2, codec,
                                None if cfg.method.name == "adam-double" else raw_codec)
            t0 = CLOCK()
            opt.step_sparse(w, res.keys, res.values)
            update = CLOCK() - t0
            msgs, down = res.push, res.down
            for msg in msgs:
                rec.keys += msg.n_keys
                rec.key_bytes += msg.key_nbytes
                density_sum += msg.n_keys / D
            rec.bytes_raw += res.raw_bytes
            rec.compute_s += res.compute_s
            rec.encode_s += res.encode_s
            rec.decode_s += res.driver_s
            rec.update_s += res.worker_decode_s + update
            push = [m.nbytes for m in msgs]
            it_time, push_s, pull_s = iteration_time(
                cfg.profile, cfg.topology, push, down.nbytes, slowest_worker_s=res.slowest_worker_s, driver_s=res.driver_s,
                worker_back_s=res.worker_decode_s + update, profile_data=profile_data,
            )
            it_measured = it_time.measured_s
            if res.value_check is not None:
                rec.extra["value_rank_error"] = rec.extra.get("value_rank_error", 0.0) + res.value_check[0]
                rec.extra["value_rank_allowed"] = rec.extra.get("value_rank_allowed", 0.0) + res.value_check[1]
            if res.sketch_check is not None:
                for name, x in zip(("sketch_exact", "sketch_exact_expected", "sketch_splits_unmatched", "sketch_keys_open"),
                                   res.sketch_check):
                    rec.extra[name] = rec.extra.get(name, 0) + x
            rec.messages += len(msgs)
            rec.bytes_up += sum(push)
            rec.extra["bytes_down"] += down.nbytes
            rec.measured_s += it_measured
            rec.modelled_push_s += push_s
            rec.modelled_pull_s += pull_s
            rec.modelled_comm_s += push_s + pull_s
        rec.density = density_sum / max(rec.messages, 1)
        rec.epoch_time_s = rec.measured_s + rec.modelled_comm_s
        cum += rec.epoch_time_s
        cum_meas += rec.measured_s
        cum_mod += rec.modelled_comm_s
        rec.cum_time_s, rec.cum_measured_s, rec.cum_modelled_s = cum, cum_meas, cum_mod
        evaluate(rec)
        records.append(rec)
        if on_epoch:
            on_epoch(rec)
    if weights_out is not None:
        weights_out.append(w)
    trained = records[1:]
    epochs = [r.as_dict() for r in records]
    summary = {
        "min_test_loss": min_trained_loss(epochs),  # over the trained epochs: epoch 0 is the untrained model
        "final_test_loss": records[-1].test_loss,
        "final_test_accuracy": records[-1].test_accuracy,
        "mean_epoch_time_s": float(np.mean([r.epoch_time_s for r in trained])) if trained else 0.0,
        # the mean is the paper's metric (§4.1: "the average run time per epoch"); the medians are information
        "median_epoch_time_s": float(np.median([r.epoch_time_s for r in trained])) if trained else 0.0,
        "mean_measured_s": float(np.mean([r.measured_s for r in trained])) if trained else 0.0,
        "median_measured_s": float(np.median([r.measured_s for r in trained])) if trained else 0.0,
        "bytes_up_per_epoch": float(np.mean([r.bytes_up for r in trained])) if trained else 0.0,
        "bytes_down_per_epoch": float(np.mean([r.extra.get("bytes_down", 0) for r in trained])) if trained else 0.0,
        "mean_modelled_comm_s": float(np.mean([r.modelled_comm_s for r in trained])) if trained else 0.0,
        "mean_modelled_push_s": float(np.mean([r.modelled_push_s for r in trained])) if trained else 0.0,
        "mean_message_bytes": sum(r.bytes_up for r in trained) / max(sum(r.messages for r in trained), 1),
        "mean_raw_message_bytes": sum(r.bytes_raw for r in trained) / max(sum(r.messages for r in trained), 1),
        "key_bytes_per_key": (sum(r.key_bytes for r in trained) / max(sum(r.keys for r in trained), 1))
        if all(r.key_bytes >= 0 for r in trained) else None,
        "mean_density": float(np.mean([r.density for r in trained])) if trained else 0.0,
    }
    allowed = sum(r.extra.get("value_rank_allowed", 0.0) for r in trained)
    if allowed > 0:  # SketchML: the pushed values' mean rank error over what its construction allows (.valuecheck)
        summary["value_rank_error_share"] = sum(r.extra.get("value_rank_error", 0.0) for r in trained) / allowed
    expected = sum(r.extra.get("sketch_exact_expected", 0.0) for r in trained)
    if expected > 0:  # SketchML: keys its MinMaxSketch answered exactly over the definition's expectation (.valuecheck)
        summary["sketch_exact_ratio"] = sum(r.extra.get("sketch_exact", 0.0) for r in trained) / expected
        summary["sketch_splits_unmatched"] = sum(r.extra.get("sketch_splits_unmatched", 0) for r in trained)
        summary["sketch_keys_open_share"] = sum(r.extra.get("sketch_keys_open", 0) for r in trained) / max(
            sum(r.keys for r in trained), 1)
    return {"epochs": epochs, "summary": summary}
