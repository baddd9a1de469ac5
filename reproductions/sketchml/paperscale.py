"""SketchML's messages at the paper's size: encode/decode *measured*, transfer *modelled*.

The paper's speed-ups (Table 4, Fig. 9(a)) come from KDD12-size gradients (54M features) crossing the
driver's one link. A full training run at that size does not fit this machine, but one iteration
does, so this module builds one iteration's messages at that size and times everything a Spark
iteration does with them:

1. *data*: each of the ``W`` executors holds its share of a 10% mini-batch, ``rows_per_worker`` rows
   of a KDD-like synthetic shard (:func:`kdd_like_shard`, named as synthetic with its parameters);
2. *compute* (measured): the worker's LR gradient, :func:`.glm.sparse_gradient` (batch mean + lazy
   ℓ2), at a fixed model (the generating weights halved: a model part-way to the data's optimum);
3. *encode* (measured): each worker's gradient into a real message with each method's codec
   (:class:`.messages.MessageCodec`; bytes = ``len(message)``);
4. *push* (modelled): the driver receives the ``W`` messages over its one link (incast),
   ``α + Σ_w bytes_w / β`` (:mod:`.netmodel`);
5. *driver* (measured): decode every message, sum, divide by ``W``, re-encode the aggregate;
6. *broadcast* (modelled): the aggregate message over the same link, ``α + copies·b / β`` (the critical
   path's broadcast copies: 1 under Spark's TorrentBroadcast, ``W`` in the serial model);
7. *update* (measured): one worker decodes the broadcast and takes the Adam step on its keys.

Measured seconds are CPU seconds of the working thread (:data:`.train.CLOCK`). Iteration time =
max over workers of (compute + encode) + push + driver + broadcast + update, where the driver's
decodes and the broadcast's copies overlap as :mod:`.critical_path` models them;
an epoch is ``1 / batch_ratio`` (10) such iterations, every one of them assumed to cost what the
measured one did (the model is fixed, so the iterations of an epoch differ only in their rows).
The worker gradients are computed once and shared by every method (the same gradients, different
codecs); memory stays at a few ``D``-length vectors plus one gradient per worker.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from gcbench.envs.network import load_profile

from . import critical_path, glm
from .calibration import Fit, Row, fit, passes_held_out, speedup_ceiling
from .critical_path import SERIAL, DriverModel
from .messages import MessageCodec, MethodSpec, warm_up
from .train import CLOCK

#: Methods of Table 4, in the paper's order (fastest first).
METHODS = ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double")


@dataclass(frozen=True)
class PaperScaleParams:
    """The message-level experiment (every field is printed in the report).

    Attributes:
        features: key space ``D`` (KDD12: 54M, Table 1).
        workers: executors ``W`` (§4.3.1: ten on KDD12).
        rows_per_worker: rows in one executor's share of a mini-batch (KDD12: 149M rows x 75% train x
            10% batch / 10 executors = 1.12M).
        nnz_per_row: mean ids drawn per row (Poisson, at least 1).
        exponent: power-law exponent of feature popularity (rank ``r`` drawn with probability ∝ ``r^-a``).
        signal: standard deviation of the generating margin (logistic labels).
        batch_ratio: the mini-batch share of the training set (§4.1: 10%): 1 / iterations per epoch.
        model: GLM whose gradient travels (``lr``).
        l2: ℓ2 coefficient added to each worker's keys (§4.1: 0.01).
        seed: seed of the shards, labels and weights.
    """

    features: int = 54_000_000
    workers: int = 10
    rows_per_worker: int = 1_117_000
    nnz_per_row: float = 12.1
    exponent: float = 0.9
    signal: float = 2.0
    batch_ratio: float = 0.1
    model: str = "lr"
    l2: float = 0.01
    seed: int = 0

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "PaperScaleParams":
        """Build from a preset's ``paper_messages`` table (unknown keys are an error)."""
        unknown = set(m) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"paper_messages: unknown field(s) {sorted(unknown)}")
        return cls(**dict(m))

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _coprime_stride(n: int) -> int:
    """An odd stride near ``0.618 n`` that is coprime with ``n`` (an affine bijection of ``0..n-1``)."""
    a = max(1, int(0.6180339887 * n)) | 1
    while math.gcd(a, n) != 1:
        a += 2
    return a


def power_law_ranks(rng: np.random.Generator, size: int, features: int, exponent: float) -> np.ndarray:
    """``size`` popularity ranks in ``0..features-1`` with ``P(rank r) ∝ (r+1)^-exponent``, by inverting
    the continuous power law's CDF (no ``features``-length table)."""
    u = rng.random(size)
    top = float(features + 1)
    if abs(exponent - 1.0) < 1e-9:
        r = np.exp(u * math.log(top))
    else:
        e = 1.0 - exponent
        r = (1.0 + u * (top**e - 1.0)) ** (1.0 / e)
    return np.minimum(r.astype(np.int64) - 1, features - 1)


def kdd_like_shard(params: PaperScaleParams, worker: int, weights: np.ndarray, margin_scale: float | None = None
                   ) -> tuple[sp.csr_matrix, np.ndarray, float]:
    """One executor's rows: synthetic KDD-like binary features and logistic labels.

    Each row draws ``Poisson(nnz_per_row)`` (at least 1) ids from the power law of
    :func:`power_law_ranks`, placed at ids by the affine bijection ``id = (a·rank + b) mod D``
    (popular ids spread over the key space, as shuffled ids); an id drawn twice in a row merges.
    Labels: ``y ~ Bernoulli(sigmoid(margin))``, ``margin = s·(x·weights)``; ``s = margin_scale``, or when
    None the scale giving this shard's margins standard deviation ``signal`` (returned as the third value).
    """
    D = params.features
    rng = np.random.default_rng([params.seed, worker])
    n = params.rows_per_worker
    counts = np.maximum(rng.poisson(params.nnz_per_row, size=n), 1)
    ranks = power_law_ranks(rng, int(counts.sum()), D, params.exponent)
    ids = (ranks * _coprime_stride(D) + 12345) % D
    del ranks
    flat = np.repeat(np.arange(n, dtype=np.int64), counts)
    flat *= D
    flat += ids
    del ids
    flat = np.unique(flat)
    r, c = np.divmod(flat, D)
    del flat
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    del r
    X = sp.csr_matrix((np.ones(c.size), c.astype(np.int32), indptr), shape=(n, D))
    margin = X @ weights
    if margin_scale is None:
        margin_scale = params.signal / (float(margin.std()) or 1.0)
    margin *= margin_scale
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-margin))).astype(np.float64)
    return X, y, margin_scale


@dataclass
class WorkerGradient:
    """One worker's gradient (keys stored as int32 to halve the memory) and what it cost."""

    keys: np.ndarray
    values: np.ndarray
    rows: int
    nnz: int
    compute_s: float


def worker_gradients(params: PaperScaleParams, *, on_worker: Callable[[int], None] | None = None
                     ) -> tuple[list[WorkerGradient], np.ndarray, dict[str, Any]]:
    """Every worker's gradient at the fixed model, with the measured compute time.

    Returns ``(gradients, w, info)``: ``w`` is the model (float64, ``D``), ``info`` the generation's
    description (margin scale, seconds spent generating, which are not part of any iteration).
    """
    D = params.features
    rng = np.random.default_rng([params.seed, 10**6])
    w = rng.standard_normal(D)  # the generating weights w*, turned in place into the model below
    grads: list[WorkerGradient] = []
    scale: float | None = None
    gen_s = 0.0
    for k in range(params.workers):
        t0 = CLOCK()
        X, y, s = kdd_like_shard(params, k, w, scale)
        gen_s += CLOCK() - t0
        if scale is None:  # the model: the margin-scaled generating weights, halved; later shards'
            margin_scale = s  # labels use it with scale 2 (the same generating margins)
            w *= 0.5 * s
            scale = 2.0
        t0 = CLOCK()
        keys, vals = glm.sparse_gradient(params.model, X, y, w, params.l2)
        dt = CLOCK() - t0
        grads.append(WorkerGradient(keys.astype(np.int32), vals, X.shape[0], int(X.nnz), dt))
        del X, y, keys
        if on_worker:
            on_worker(k)
    return grads, w, {"margin_scale": margin_scale, "generate_s": gen_s}


def measure_method(method: MethodSpec, grads: Sequence[WorkerGradient], w: np.ndarray, opt: glm.Adam,
                   acc: np.ndarray, present: np.ndarray) -> dict[str, Any]:
    """Steps 3, 5 and 7 of the module docstring for one method; ``acc``/``present`` are the driver's
    ``D``-length buffers and ``opt`` an Adam whose state is only timed, not studied. All three are
    zeroed here, before any clock starts: every method's step starts from the same state, and none
    pays the first touch of a buffer's pages (the first method measured would otherwise count them)."""
    D = w.size
    codec = MessageCodec(method, D)
    warm_up(codec)
    acc[:] = 0.0
    present[:] = False
    opt.reset()
    enc, dec, push, key_bytes, n_keys = [], [], [], [], []
    for g in grads:
        t0 = CLOCK()
        msg = codec.encode(g.keys.astype(np.int64), g.values)
        t1 = CLOCK()
        enc.append(t1 - t0)
        push.append(msg.nbytes)
        key_bytes.append(msg.key_nbytes)
        n_keys.append(msg.n_keys)
        t0 = CLOCK()
        k, v = codec.decode(msg.data)
        acc[k] += v
        present[k] = True
        dec.append(CLOCK() - t0)
        del msg, k, v
    t0 = CLOCK()
    agg_keys = np.flatnonzero(present)
    down = codec.encode(agg_keys, acc[agg_keys] / len(grads))
    agg_encode = CLOCK() - t0
    del agg_keys
    t0 = CLOCK()
    k, v = codec.decode(down.data)
    agg_decode = CLOCK() - t0
    t0 = CLOCK()
    opt.step_sparse(w, k, v)
    update = CLOCK() - t0
    return {
        "method": method.as_config(),
        "encode_s": enc,
        "decode_s": dec,
        "push_bytes": push,
        "key_bytes": key_bytes,
        "keys": n_keys,
        "agg_keys": int(k.size),
        "agg_encode_s": agg_encode,
        "agg_decode_s": agg_decode,
        "update_s": update,
        "down_bytes": down.nbytes,
    }


def run_paper_messages(params: PaperScaleParams, methods: Mapping[str, MethodSpec], *,
                       on_step: Callable[[], None] | None = None) -> dict[str, Any]:
    """The whole experiment: gradients once, then each method's messages. JSON-able result."""
    grads, w, info = worker_gradients(params, on_worker=(lambda k: on_step()) if on_step else None)
    D = params.features
    opt = glm.Adam(D, 1e-3)
    acc = np.zeros(D)
    present = np.zeros(D, dtype=bool)
    out: dict[str, Any] = {}
    for name in METHODS:
        out[name] = measure_method(methods[name], grads, w, opt, acc, present)
        if on_step:
            on_step()
    return {
        "params": params.as_dict(),
        "workers": [{"rows": g.rows, "nnz": g.nnz, "keys": int(g.keys.size), "compute_s": g.compute_s} for g in grads],
        "methods": out,
        **info,
    }


def iteration_times(result: Mapping[str, Any], method: str, profile: str, *, profile_data: Any = None,
                    driver: DriverModel = SERIAL) -> dict[str, float]:
    """One iteration's and one epoch's seconds for ``method`` under ``profile``, on the driver's
    critical path of :mod:`.critical_path` (``driver``; the default is the serial model).

    Keys: ``worker_s`` (slowest compute + encode), ``compute_s``, ``encode_s`` (that worker's), ``push_s``
    and ``pull_s`` (modelled), ``driver_s`` (decodes over the driver's cores + re-encode), ``update_s``
    (decode the broadcast + Adam step), ``coding_s`` (encode + driver + broadcast decode: the codec's share
    of the critical path, with the driver's sum), ``measured_s``, ``modelled_s``, ``iteration_s``,
    ``epoch_s``, ``link_bytes`` (bytes on the driver's link per iteration) and the per-epoch
    ``epoch_coding_s`` and ``epoch_link_bytes``.
    """
    m = result["methods"][method]
    workers = result["workers"]
    per_worker = [w["compute_s"] + e for w, e in zip(workers, m["encode_s"])]
    slow = int(np.argmax(per_worker))
    update = float(m["agg_decode_s"] + m["update_s"])
    prof = profile_data if profile_data is not None else load_profile(profile)
    st, push_s, pull_s, driver_s = critical_path.iteration(
        per_worker, m["decode_s"], m["agg_encode_s"], update, m["push_bytes"], m["down_bytes"], prof.link, driver)
    measured, modelled, it = st.measured_s, st.modelled_comm_s, st.total_s
    per_epoch = round(1.0 / float(result["params"]["batch_ratio"]))
    coding = m["encode_s"][slow] + driver_s + m["agg_decode_s"]
    nbytes = critical_path.link_bytes(m["push_bytes"], m["down_bytes"], driver)
    return {
        "worker_s": per_worker[slow], "compute_s": workers[slow]["compute_s"], "encode_s": m["encode_s"][slow],
        "push_s": push_s, "pull_s": pull_s, "driver_s": driver_s, "update_s": update, "coding_s": coding,
        "measured_s": measured, "modelled_s": modelled, "iteration_s": it, "epoch_s": per_epoch * it,
        "link_bytes": float(nbytes), "epoch_coding_s": per_epoch * coding, "epoch_link_bytes": float(per_epoch * nbytes),
    }


def derive_quantities(result: Mapping[str, Any], profiles: Mapping[str, str],
                      drivers: Mapping[str, DriverModel] | None = None) -> dict[str, float]:
    """The quantities the claims use, ``msg.<tag>.<method>.<what>`` for each ``tag -> profile`` (priced on
    the driver's critical path ``drivers[tag]``, default the serial model), plus message sizes
    (``msg.<method>.message_mb``), the compression rate against Adam-double, SketchML's coding and
    communication shares of its iteration (``msg.<tag>.sketchml.coding_share`` / ``comm_share``), and the nominal
    model's ceiling of SketchML's speed-up over each other method ``m`` (``msg.<tag>.ceiling.<m>``): ``m``'s
    modelled transfer per iteration over SketchML's. An iteration is measured seconds ``M`` plus modelled
    transfer ``X``, so ``(M_m + X_m) / (M_s + X_s) <= max(M_m / M_s, X_m / X_s)``: the speed-up exceeds the
    transfer ratio only where ``m``'s measured seconds exceed SketchML's by more than that ratio, which the same
    gradient and Adam step, with SketchML's coding on top, do not give."""
    drivers = drivers or {}
    out: dict[str, float] = {}
    for m, r in result["methods"].items():
        out[f"msg.{m}.message_mb"] = float(np.mean(r["push_bytes"])) / 1e6
        out[f"msg.{m}.broadcast_mb"] = r["down_bytes"] / 1e6
    out["msg.compression_rate"] = out["msg.adam-double.message_mb"] / out["msg.sketchml.message_mb"]
    sk = result["methods"]["sketchml"]
    kb = sum(sk["key_bytes"])
    out["msg.key_bytes_per_key"] = kb / max(sum(sk["keys"]), 1) if kb >= 0 else math.nan
    D = result["params"]["features"]
    out["msg.density"] = float(np.mean([w["keys"] for w in result["workers"]])) / D
    out["msg.agg_density"] = sk["agg_keys"] / D
    out["msg.compute_s"] = float(np.mean([w["compute_s"] for w in result["workers"]]))
    for tag, profile in profiles.items():
        prof = load_profile(profile)
        drv = drivers.get(tag, SERIAL)
        for m in result["methods"]:
            t = iteration_times(result, m, profile, profile_data=prof, driver=drv)
            for k in ("iteration_s", "epoch_s", "measured_s", "modelled_s", "coding_s", "epoch_coding_s", "epoch_link_bytes"):
                out[f"msg.{tag}.{m}.{k}"] = t[k]
            serial = iteration_times(result, m, profile, profile_data=prof)
            out[f"msg.{tag}.{m}.serial_epoch_s"] = serial["epoch_s"]
        t = iteration_times(result, "sketchml", profile, profile_data=prof, driver=drv)
        for m in result["methods"]:  # the ratio of the two methods' modelled transfer (see the docstring)
            if m != "sketchml" and t["modelled_s"] > 0:
                out[f"msg.{tag}.ceiling.{m}"] = out[f"msg.{tag}.{m}.modelled_s"] / t["modelled_s"]
        out[f"msg.{tag}.sketchml.coding_share"] = t["coding_s"] / t["iteration_s"]
        out[f"msg.{tag}.sketchml.coding_pct"] = 100.0 * t["coding_s"] / t["iteration_s"]
        out[f"msg.{tag}.sketchml.comm_share"] = t["modelled_s"] / t["iteration_s"]
    return out


def calibration_rows(result: Mapping[str, Any], profile: str, driver: DriverModel,
                     paper_epoch_s: Mapping[str, float]) -> list[Row]:
    """One :class:`.calibration.Row` per method of ``result``: our bytes on the driver's link and codec
    seconds on the critical path per epoch (``driver``), beside the paper's epoch time when it has one."""
    prof = load_profile(profile)
    rows = []
    for m in result["methods"]:
        t = iteration_times(result, m, profile, profile_data=prof, driver=driver)
        rows.append(Row(m, t["epoch_link_bytes"], t["epoch_coding_s"], paper_epoch_s.get(m)))
    return rows


def calibrated_quantities(rows: Sequence[Row], tag: str, fit_on: Sequence[str], reverse_on: Sequence[str],
                          test_on: Sequence[str] = (), test_tolerance: float | None = None
                          ) -> tuple[dict[str, float], dict[str, Fit]]:
    """``cal.<tag>.*`` quantities (fit on ``fit_on``) and ``cal.<tag>.rev.*`` (the reverse fit on
    ``reverse_on``): C, β in Gbps, every method's predicted epoch seconds and misfit, the fit's
    ceiling of SketchML's speed-up over each other method (``cal.<tag>.ceiling.<m>``,
    :func:`.calibration.speedup_ceiling`) and, with ``test_on``, whether the fit passes its held-out
    test on those rows within ``test_tolerance`` (``cal.<tag>.model_holds``,
    :func:`.calibration.passes_held_out`); with the fits."""
    out: dict[str, float] = {}
    fits = {"fit": fit(rows, fit_on), "reverse": fit(rows, reverse_on)}
    for kind, f in fits.items():
        pre = f"cal.{tag}" if kind == "fit" else f"cal.{tag}.rev"
        out[f"{pre}.C_s"] = f.C_s
        out[f"{pre}.beta_gbps"] = f.beta_gbps
        for m, v in f.predicted_s.items():
            out[f"{pre}.{m}.epoch_s"] = v
        for m, v in f.misfit.items():
            out[f"{pre}.{m}.misfit"] = v
    for m in fits["fit"].predicted_s:  # the calibrated model's ceiling of SketchML's speed-up over each method
        if m != "sketchml":
            out[f"cal.{tag}.ceiling.{m}"] = speedup_ceiling(fits["fit"], rows, m)
    if test_on:
        holds = passes_held_out(fits["fit"], test_on, float(test_tolerance))  # type: ignore[arg-type]
        if holds is not None:
            out[f"cal.{tag}.model_holds"] = float(holds)
    return out, fits
