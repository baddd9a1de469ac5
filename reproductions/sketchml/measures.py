"""What the SketchML derivation computes from the runs' records, one function per quantity.

Convergence (the paper's rule and whether its band resolves a run), the training runs' modelled seconds
priced from their recorded bytes on a network profile (the broadcast as the driver's critical path
prices it) and the shares of an epoch communication takes, minimal losses over the trained epochs and
Table 2's excess losses, Table 3's epoch times and their noise, and the data-set properties Fig. 8's claims read. The workload
(:mod:`.workload`) turns each run's records into the measured quantities with them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..framework.claims import relative_gap
from .critical_path import DriverModel, epoch_comm_seconds


def source_ordered_ids(dataset: Mapping[str, Any] | None, declared: Sequence[str]) -> float | None:
    """``fig8.source_ids``: 1 where a cell's data set (its summary's ``name``) is one the spec declares, before
    any run, to keep the feature ids of its source (``[workload] source_ordered_ids``), 0 for any other; None
    where the cell records no data set. A property of the data set's definition, never of a measurement:
    the Fig. 8(d) claim on bytes per key near zero density rests on related ids sitting next to each other
    (§A.3), which a generator's shuffled ids or a vectorizer's alphabetical vocabulary do not give."""
    name = (dataset or {}).get("name")
    return None if name is None else float(name in set(declared))


def synthetic_data(dataset: Mapping[str, Any] | None) -> float | None:
    """``fig8.synthetic_data``: 1 where a cell's data set (its summary's ``name``) is the synthetic generator's,
    0 for any other; None where the cell records none. A property of the data set's definition, known
    before any run: the generator was tuned to the paper's density (~10% at batch ratio 10%) and its
    messages' size, so on its data the compression rate is the wire format's arithmetic (the consistency
    check fig8-compression-format). On other data the key bytes follow how its ids are spread and the
    fixed bucket table weighs by how many keys a message carries, so the same number is no check of the
    format (it stays in the report as information)."""
    name = (dataset or {}).get("name")
    return None if name is None else float(name == "synthetic")


def priced_epochs(epochs: Sequence[Mapping[str, Any]], link: Any, workers: int, driver: DriverModel) -> list[dict[str, Any]]:
    """A training run's epochs with every modelled second priced from what the cell recorded, its measured
    seconds and its bytes: per epoch ``iterations·2α + bytes_up/β + copies·bytes_down/β``
    (:func:`.critical_path.epoch_comm_seconds`; ``iterations`` = messages / ``workers``, ``copies`` the
    ``driver``'s broadcast copies: the spec's ``broadcast_copies`` for the training runs, ``W`` for the serial
    model). Sets ``modelled_push_s``, ``modelled_pull_s``, ``modelled_comm_s``, ``epoch_time_s``,
    ``cum_time_s``, ``cum_measured_s`` and ``cum_modelled_s``; epoch 0 (the untrained model) costs nothing."""
    out: list[dict[str, Any]] = []
    cum = cum_meas = cum_mod = 0.0
    for e in epochs:
        p = dict(e)
        if e["epoch"] > 0:
            push, pull = epoch_comm_seconds(e["messages"] / workers, e["bytes_up"], e["bytes_down"], workers,
                                            link, driver)
            p.update(modelled_push_s=push, modelled_pull_s=pull, modelled_comm_s=push + pull,
                     epoch_time_s=e["measured_s"] + push + pull)
            cum, cum_meas, cum_mod = cum + p["epoch_time_s"], cum_meas + e["measured_s"], cum_mod + push + pull
        p.update(cum_time_s=cum, cum_measured_s=cum_meas, cum_modelled_s=cum_mod)
        out.append(p)
    return out


def priced_run(result: Mapping[str, Any], link: Any, workers: int, driver: DriverModel) -> dict[str, Any]:
    """A training cell's result with its epochs priced by :func:`priced_epochs` and the summary's modelled
    means and medians over the trained epochs recomputed from them (what :func:`.train.train` summarises)."""
    epochs = priced_epochs(result["epochs"], link, workers, driver)
    trained = [e for e in epochs if e["epoch"] > 0]
    summary = dict(result.get("summary", {}))
    if trained:
        summary.update(
            mean_epoch_time_s=float(np.mean([e["epoch_time_s"] for e in trained])),
            median_epoch_time_s=float(np.median([e["epoch_time_s"] for e in trained])),
            mean_modelled_comm_s=float(np.mean([e["modelled_comm_s"] for e in trained])),
            mean_modelled_push_s=float(np.mean([e["modelled_push_s"] for e in trained])),
        )
    return {**result, "epochs": epochs, "summary": summary}


def priced_sweep_rows(rows: Sequence[Mapping[str, Any]], link: Any, workers: int, driver: DriverModel) -> list[dict[str, Any]]:
    """The Fig. 8 sweep's rows priced as :func:`priced_epochs` prices an epoch: per iteration the measured
    seconds and the bytes pushed and broadcast that the cell recorded, ``2α + push/β + copies·down/β``
    modelled; an epoch at batch ratio ``b`` is ``1/b`` such iterations. Sets ``modelled_s_per_iteration``,
    ``epoch_time_s``, ``epoch_measured_s`` and ``epoch_modelled_s``."""
    out = []
    for r in rows:
        push, pull = epoch_comm_seconds(1, r["push_bytes_per_iteration"], r["down_bytes_per_iteration"], workers,
                                        link, driver)
        per_epoch = 1.0 / r["ratio"]
        out.append({**r, "modelled_s_per_iteration": push + pull, "epoch_measured_s": per_epoch * r["measured_s_per_iteration"],
                    "epoch_modelled_s": per_epoch * (push + pull),
                    "epoch_time_s": per_epoch * (r["measured_s_per_iteration"] + push + pull)})
    return out


def cumulative_times(epochs: Sequence[Mapping[str, Any]], profile: Any, workers: int, driver: DriverModel) -> list[float]:
    """Cumulative epoch times of a training run priced under ``profile`` (a loaded network profile) by
    :func:`priced_epochs`: measured seconds as recorded, communication from the recorded bytes."""
    return [e["cum_time_s"] for e in priced_epochs(epochs, profile.link, workers, driver)]


def trained_losses(epochs: Sequence[Mapping[str, Any]]) -> list[float]:
    """The test losses of a run's trained epochs (every record after epoch 0, the untrained model), in order:
    the losses a minimal loss is taken over. The paper's minima leave the untrained model out: Table 4's
    ZipML-8bit "minimal loss after two hours" (0.6932) lies above ln 2 = 0.69315, the untrained LR's loss,
    which a minimum over it could not. Epoch 0 stays only as the reference a drop is measured from
    (:func:`excess_losses`, :func:`rule_resolves`)."""
    return [e["test_loss"] for e in epochs if e["epoch"] > 0]


def min_trained_loss(epochs: Sequence[Mapping[str, Any]]) -> float | None:
    """A run's minimal test loss: the least of :func:`trained_losses`; None without a trained epoch."""
    losses = trained_losses(epochs)
    return min(losses) if losses else None


def min_loss_within(epochs: Sequence[Mapping[str, Any]], budget_s: float) -> float | None:
    """A run's minimal test loss within a time budget (Table 4's "minimal loss after two hours"): the least
    test loss of its trained epochs whose cumulative time (``cum_time_s``) is at most ``budget_s``; None where
    no trained epoch ends within the budget."""
    return min_trained_loss([e for e in epochs if e["cum_time_s"] <= budget_s])


def excess_losses(model: str, runs: Mapping[str, Mapping[str, Any] | None], start_epoch: int = 0) -> dict[str, float]:
    """``t2.<model>.<col>.excess_loss_frac``: a method's minimal test loss above Adam's, as a fraction of
    Adam's drop from its loss at ``start_epoch`` (the untrained model): ``(min_m - min_A) / (start - min_A)``,
    each minimum over the run's trained epochs (:func:`min_trained_loss`). Negative when the method does
    better. ``runs``: Table 2 column -> training result (``adam`` needed, with a trained epoch)."""
    adam = runs.get("adam")
    best = None if adam is None else min_trained_loss(adam["epochs"])
    if adam is None or best is None:
        return {}
    drop = adam["epochs"][start_epoch]["test_loss"] - best
    out: dict[str, float] = {}
    for col, r in runs.items():
        if r is None or col == "adam" or (lo := min_trained_loss(r["epochs"])) is None:
            continue
        excess = lo - best
        out[f"t2.{model}.{col}.excess_loss_frac"] = excess / drop if drop > 0 else (math.inf if excess > 0 else 0.0)
    return out


def paper_comm_share(sketchml_epoch: float, adam_double_epoch: float) -> float:
    """The least share of Adam-double's epoch that communication takes in the paper: every method
    computes the same gradients, so SketchML's whole epoch bounds that shared compute, and the rest of
    Adam-double's (which does no coding) is communication (Table 4: 1 - 100 / 1041 = 90.4%). A run or
    model whose Adam-double spends less of its epoch communicating prices another regime than the
    paper's tables, whose orders and speed-ups come from the bytes saved."""
    return 1.0 - sketchml_epoch / adam_double_epoch


def sketchml_own_share(sketchml: Sequence[Mapping[str, Any]], adam_epoch_s: float | None) -> float | None:
    """SketchML's measured seconds per epoch (compute and its coding, no communication; the mean over the epochs
    that trained) over ``adam_epoch_s``, Adam-double's mean epoch as run or re-priced (:func:`cumulative_times`).
    The paper's SketchML epoch, coding included, is at most ``1 -`` :func:`paper_comm_share` of Adam-double's
    (100 / 1041 s). Information that explains a converged-time speed-up, never a ``testable`` flag: the share
    is SketchML's own cost, a part of the speed-up the claims judge, so a SketchML that codes slowly gets
    *differs*, not *not at this scale*. None without trained epochs or without a positive Adam epoch."""
    sk = [e["measured_s"] for e in sketchml if e["epoch"] > 0]
    if not sk or not adam_epoch_s or adam_epoch_s <= 0:
        return None
    return (sum(sk) / len(sk)) / adam_epoch_s


def comm_share(epochs: Sequence[Mapping[str, Any]]) -> float:
    """Modelled communication over the whole epoch time of a training run's epochs (those that trained)."""
    trained = [e for e in epochs if e["epoch_time_s"] > 0]
    total = sum(e["epoch_time_s"] for e in trained)
    return sum(e["modelled_comm_s"] for e in trained) / total if total > 0 else 0.0


def rule_resolves(losses: Sequence[float], tolerance: float = 0.01, share: float = 0.1) -> bool:
    """Whether :func:`converged_epoch`'s band (``tolerance`` x the minimal loss) is at most ``share`` of the
    run's whole drop (epoch 0's loss - the minimal loss): a band wider than that holds epochs far from
    convergence, and the rule's epoch says more about the band than about the method. ``losses``: the run's
    test losses by epoch, epoch 0 (the untrained model) first; the minimum is over the trained epochs."""
    if len(losses) < 2:
        return False
    lo = min(losses[1:])
    drop = losses[0] - lo
    return drop > 0 and tolerance * lo <= share * drop


def calibrated_converge_flags(measured: Mapping[str, float | None], cluster: str,
                              methods: Sequence[str] = ("adam-double", "zipml16")) -> dict[str, float]:
    """The flags of the calibrated converged-time claims, ``t2.lr.converge_time_cal_testable.<method>``:
    a converged time there is epochs to converge x the calibrated epoch, so it is tested only where both
    factors are, the calibrated epoch-time speed-up over ``method`` (``cal.<cluster>.<method>.testable``)
    and the epochs (``t2.lr.rule_resolves``); a method missing either flag gets none."""
    resolves = measured.get("t2.lr.rule_resolves")
    out: dict[str, float] = {}
    for m in methods:
        cal = measured.get(f"cal.{cluster}.{m}.testable")
        if cal is not None and resolves is not None:
            out[f"t2.lr.converge_time_cal_testable.{m}"] = min(float(cal), float(resolves))
    return out


def mean_interval_share(values: Sequence[float], level: float = 0.95) -> float:
    """Half the width of the Student t ``level`` confidence interval of the mean of ``values``
    (``t_{(1+level)/2, n-1} x s / sqrt(n)``, ``s`` the sample standard deviation), as a share of the mean:
    how far apart two means of per-epoch times must be before their order is more than this run's noise.
    ``inf`` for fewer than 2 values (no interval exists) or a mean of 0."""
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(np.mean(x)) if n else 0.0
    if n < 2 or mean == 0:
        return math.inf
    return float(t.ppf((1 + level) / 2, n - 1) * np.std(x, ddof=1) / math.sqrt(n)) / abs(mean)


def table3_epochs(runs: Sequence[Mapping[str, Any]]) -> list[float]:
    """The per-epoch times of every trained epoch of every run of one Table 3 setting (``runs``; the default
    trains twice in a run): each run's epochs after its first entry, the untrained epoch 0. The epochs both
    the setting's time (:func:`table3_epoch_time`) and that time's interval (:func:`table3_spread`) are
    taken over."""
    return [e["epoch_time_s"] for r in runs for e in r["epochs"][1:]]


def table3_epoch_time(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """A Table 3 setting's epoch time: the mean of :func:`table3_epochs` (every trained epoch of every run
    of that setting), the paper's metric (§4.1: "the average run time per epoch", over the epochs a setting
    ran). None without a trained epoch."""
    times = table3_epochs(runs)
    return float(np.mean(times)) if times else None


def table3_spread(runs: Mapping[str, Mapping[str, Any]], again: Mapping[str, Any] | None) -> float | None:
    """The noise of Table 3's claims (``t3.epoch_time_spread``): the widest :func:`mean_interval_share`
    of the variants' mean epoch times (``runs``: variant -> training run), each over the same epochs as
    the time the claims compare (:func:`table3_epochs`: the default's over both its runs, ``again`` being
    its second, after the other variants), or the gap between the default's two runs' means where that is
    wider (the machine's drift between cells, which no single run's interval sees). None without any run."""
    spreads = []
    for variant, r in runs.items():
        both = [r, again] if variant == "default" and again is not None else [r]
        spreads.append(mean_interval_share(table3_epochs(both)))
    first = runs.get("default")
    if again is not None and first is not None:  # the same computation at two moments of the run
        a, b = table3_epoch_time([first]), table3_epoch_time([again])
        if a is not None and b is not None:
            spreads.append(relative_gap(a, b))
    return max(spreads) if spreads else None


def converged_epoch(losses: Sequence[float], window: int = 5, tolerance: float = 0.01) -> int | None:
    """The paper's rule (§4.4): the first epoch ``e`` at which the losses of epochs ``e-window+1..e``
    vary by less than ``tolerance`` (``(max - min) / min``). Epoch 0 (untrained) is not in any window.
    None if the run never converges."""
    for e in range(window, len(losses)):
        win = losses[e - window + 1 : e + 1]
        lo = min(win)
        if lo > 0 and (max(win) - lo) / lo < tolerance:
            return e
    return None
