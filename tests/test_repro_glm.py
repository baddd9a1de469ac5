"""SketchML workload pieces: GLM gradients (vs autograd), Adam (vs torch / a naive loop), messages, network model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gcbench.compressors import Payload
from gcbench.compressors.errors import CorruptPayloadError, PayloadError
from gcbench.reproductions.sketchml import glm
from gcbench.reproductions.sketchml.messages import MessageCodec, MethodSpec
from gcbench.reproductions.sketchml.netmodel import comm_seconds, profile_info
from gcbench.reproductions.sketchml.measures import converged_epoch, mean_interval_share, rule_resolves, table3_spread

from claim_verdicts import verdicts

METHODS = {
    "sketchml": MethodSpec("sketchml", "sketchml", {"preset": "paper"}),
    "adam-float": MethodSpec("adam-float", "identity", {}, "float32"),
    "adam-double": MethodSpec("adam-double", "identity", {}, "float64"),
    "zipml8": MethodSpec("zipml8", "zipml8", {}),
    "zipml16": MethodSpec("zipml16", "zipml16", {}),
}


def problem(seed: int, n: int = 40, d: int = 60):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.15, random_state=seed, format="csr", data_rvs=lambda k: rng.uniform(-1, 1, k))
    y = (rng.random(n) < 0.5).astype(float)
    w = rng.normal(0, 0.7, d)
    return X, y, w


def torch_losses(model: str, m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    if model == "lr":
        return torch.nn.functional.softplus(-s * m)
    if model == "svm":
        return torch.relu(1.0 - s * m)
    return 0.5 * (m - s) ** 2


@pytest.mark.parametrize("model", glm.MODELS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_gradient_matches_autograd(model, seed):
    X, y, w = problem(seed)
    l2 = 0.01
    keys, vals = glm.sparse_gradient(model, X, y, w, l2)
    wt = torch.tensor(w, requires_grad=True)
    s = torch.tensor(2 * y - 1)
    m = torch.tensor(X.toarray()) @ wt
    torch_losses(model, m, s).mean().backward()
    ref = wt.grad.numpy()
    # keys: features present in rows with a non-zero derivative (naive loops)
    margins = X @ w
    expected_keys = set()
    for i in range(X.shape[0]):
        active = model != "svm" or (2 * y[i] - 1) * margins[i] <= 1.0
        if active:
            expected_keys.update(X.indices[X.indptr[i]:X.indptr[i + 1]].tolist())
    assert keys.tolist() == sorted(expected_keys)
    np.testing.assert_allclose(vals, ref[keys] + l2 * w[keys], rtol=1e-10, atol=1e-12)
    # no gradient is lost off the keys
    off = np.setdiff1d(np.arange(X.shape[1]), keys)
    np.testing.assert_allclose(ref[off], 0.0, atol=1e-12)


@pytest.mark.parametrize("model", glm.MODELS)
def test_losses_and_accuracy_against_naive(model):
    X, y, w = problem(5)
    dense = X.toarray()
    total, right = 0.0, 0
    for i in range(len(y)):
        m = float(dense[i] @ w)
        s = 2 * y[i] - 1
        total += {"lr": math.log1p(math.exp(-s * m)), "svm": max(0.0, 1 - s * m), "linear": 0.5 * (m - s) ** 2}[model]
        right += (m > 0) == (y[i] > 0.5)
    assert glm.test_loss(model, X, y, w) == pytest.approx(total / len(y), rel=1e-12)
    assert glm.accuracy(model, X, y, w) == right / len(y)
    assert glm.objective(model, X, y, w, 0.01) == pytest.approx(total / len(y) + 0.005 * w @ w, rel=1e-12)
    # untrained model: LR loss is ln 2, SVM 1, linear 1/2
    zero = np.zeros_like(w)
    assert glm.test_loss(model, X, y, zero) == pytest.approx({"lr": math.log(2), "svm": 1.0, "linear": 0.5}[model])


def test_lr_derivative_is_stable_for_huge_margins():
    d = glm.dloss_dmargin("lr", np.array([-1e4, 1e4, 0.0]), np.array([1.0, 1.0, 0.0]))
    assert np.all(np.isfinite(d))
    np.testing.assert_allclose(d, [-1.0, 0.0, 0.5])


def test_dense_adam_matches_torch():
    rng = np.random.default_rng(0)
    w = rng.normal(size=20)
    wt = torch.tensor(w.copy(), requires_grad=True)
    ours = glm.Adam(20, lr=0.01)
    ref = torch.optim.Adam([wt], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(5):
        g = rng.normal(size=20)
        ours.step(w, g)
        wt.grad = torch.tensor(g)
        ref.step()
    np.testing.assert_allclose(w, wt.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_sparse_adam_updates_only_its_keys():
    rng = np.random.default_rng(1)
    D = 10
    w = rng.normal(size=D)
    w0 = w.copy()
    opt = glm.Adam(D, lr=0.1)
    m, v = np.zeros(D), np.zeros(D)
    ref = w.copy()
    for t, keys in enumerate([np.array([1, 3]), np.array([3, 7, 9])], start=1):
        g = rng.normal(size=len(keys))
        opt.step_sparse(w, keys, g)
        for k, gk in zip(keys, g):  # naive loop reference
            m[k] = 0.9 * m[k] + 0.1 * gk
            v[k] = 0.999 * v[k] + 0.001 * gk * gk
            ref[k] -= 0.1 * (m[k] / (1 - 0.9**t)) / (math.sqrt(v[k] / (1 - 0.999**t)) + 1e-8)
    np.testing.assert_allclose(w, ref, rtol=1e-12)
    untouched = [0, 2, 4, 5, 6, 8]
    np.testing.assert_array_equal(w[untouched], w0[untouched])


def sample_gradient(seed=0, n=3000, D=50_000):
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(D, n, replace=False)).astype(np.int64)
    vals = rng.standard_normal(n) * 1e-3
    return keys, vals, D


@pytest.mark.parametrize("name", sorted(METHODS))
def test_message_round_trip(name):
    keys, vals, D = sample_gradient()
    codec = MessageCodec(METHODS[name], D)
    msg = codec.encode(keys, vals)
    k, v = codec.decode(msg.data)
    np.testing.assert_array_equal(k, keys)  # keys are lossless for every method
    assert msg.nbytes == len(msg.data) and msg.n_keys == len(keys)
    if name == "adam-double":
        np.testing.assert_array_equal(v, vals)
    elif name == "adam-float":
        np.testing.assert_array_equal(v, vals.astype(np.float32).astype(np.float64))
    elif name.startswith("zipml"):
        step = (vals.max() - vals.min()) / (2 ** int(name[5:]) - 1)
        assert np.abs(v - vals).max() <= step * 1.001
    else:  # SketchML never flips a sign and never exceeds the largest magnitude
        assert np.all(np.sign(v) == np.sign(vals))
        assert np.abs(v).max() <= np.abs(vals).max() * (1 + 1e-6)
    if name != "sketchml":
        # container: 16-byte header + 4-byte keys + the values' own payload
        tail = Payload.from_bytes(msg.data[16 + 4 * len(keys):])
        assert msg.nbytes == 16 + 4 * len(keys) + tail.nbytes
        assert msg.key_nbytes == 4 * len(keys)
    else:
        payload = Payload.from_bytes(msg.data)
        assert msg.key_nbytes == payload.sections[2].numel()
        assert len(keys) <= msg.key_nbytes <= 4.25 * len(keys) + 8


def test_message_sizes_order_as_the_paper_says():
    keys, vals, D = sample_gradient(n=20_000, D=200_000)
    size = {n: MessageCodec(m, D).encode(keys, vals).nbytes for n, m in METHODS.items()}
    assert size["sketchml"] < size["zipml8"] < size["zipml16"] < size["adam-float"] < size["adam-double"]
    assert size["adam-double"] == pytest.approx(12 * 20_000, rel=0.01)  # "the original size 12d" (§3.5)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b"XXXX" + b[4:], "not a GKV1"),
        (lambda b: b[:10], "shorter than its header"),
        (lambda b: b[:20], "too short"),
        (lambda b: b[:16] + b[20:24] + b[16:20] + b[24:], "ascending"),
        (lambda b: b[:-3], "header says"),
    ],
)
def test_corrupt_kv_message_is_refused(mutate, match):
    keys, vals, D = sample_gradient(n=50, D=1000)
    codec = MessageCodec(METHODS["adam-double"], D)
    data = codec.encode(keys, vals).data
    with pytest.raises(PayloadError, match=match):
        codec.decode(mutate(data))


def test_kv_message_of_another_key_space_is_refused():
    keys, vals, _ = sample_gradient(n=50, D=1000)
    data = MessageCodec(METHODS["adam-double"], 1000).encode(keys, vals).data
    with pytest.raises(CorruptPayloadError, match="key space"):
        MessageCodec(METHODS["adam-double"], 2000).decode(data)


def test_network_model_by_hand():
    from gcbench.envs.network import load_profile

    p = load_profile("sketchml-cluster2-10")
    alpha, beta = p.link.latency_s, p.link.bandwidth_Bps
    assert beta == pytest.approx(10e9 / 8)
    push, pull = comm_seconds("sketchml-cluster2-10", "parameter_server", [1000, 3000, 2000], 500)
    assert push == pytest.approx(alpha + 6000 / beta)
    assert pull == pytest.approx(alpha + 3 * 500 / beta)  # the driver sends the broadcast to each of 3 workers
    slow, _ = comm_seconds("sketchml-cluster1", "parameter_server", [1000, 3000, 2000], 500)
    assert slow > push
    assert profile_info("sketchml-cluster1")["bandwidth_gbps"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        comm_seconds("sketchml-cluster2-10", "ring", [1], 1)
    with pytest.raises(Exception, match="no profile"):
        profile_info("nowhere")


@pytest.mark.parametrize(
    "losses, expected",
    [
        # losses[e] is epoch e; the window of epoch e is epochs e-4..e, and (max - min) / min must stay under 1%.
        # Epoch 5 (0.8..0.687) varies 16%, epoch 6 (0.7..0.6869) 1.9%, epoch 7 (0.69..0.6868) 0.47%: epoch 7.
        ([1.0, 0.8, 0.7, 0.69, 0.688, 0.687, 0.6869, 0.6868], 7),
        ([1.0, 0.5, 0.5, 0.5, 0.5, 0.5], 5),
        # flat from the start: still epoch 5, as epoch 0 (untrained) is in no window, so epoch 4's window is short
        ([0.5, 0.5, 0.5, 0.5, 0.5, 0.5], 5),
        ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], None),
        ([1.0, 0.5, 0.5], None),
    ],
)
def test_convergence_rule(losses, expected):
    assert converged_epoch(losses, window=5, tolerance=0.01) == expected


@pytest.mark.parametrize("losses, expected", [
    ([0.6931, 0.67, 0.665, 0.6607], False),  # band 0.0066 is 20% of the 0.0324 drop: the rule fires on its band
    ([0.6931, 0.6900, 0.6885], False),  # the paper's LR (ln 2 -> 0.6885): a drop below the band itself
    ([2.0, 1.0, 0.5, 0.4], True),  # band 0.004 is 0.25% of the 1.6 drop
    ([0.5, 0.5, 0.5], False),  # no drop at all
    ([0.5, 0.6, 0.7], False),  # a rising loss
])
def test_the_convergence_rule_resolves_only_where_its_band_is_small_against_the_drop(losses, expected):
    assert rule_resolves(losses, tolerance=0.01, share=0.1) is expected


def test_sketchml_claims_at_the_papers_definitions():
    from gcbench.reproductions.sketchml import load

    spec = load()
    claims = {c.id: c for c in spec.claims}
    # Table 4's second row claims the minimum only: SketchML against the best of the other four
    assert claims["t4-budget-best"].quantities == ("t4.sketchml.min_loss_budget", "t4.others.min_loss_budget")
    assert verdicts(spec, "t4-budget-best", {"t4.sketchml.min_loss_budget": 0.660, "t4.others.min_loss_budget": 0.6615,
                                             "t4.budget_testable": 1.0},
                    {"t4.sketchml.min_loss_budget": 0.6698}, {"t4.budget_testable": 0.0}) == [
        "reproduced", "differs", "not at this scale"]
    # bytes per key at 1% density: the order of the data's ids, so only data declared to keep its source's order tests it
    assert claims["fig8-key-bytes-sparse"].testable == "fig8.source_ids"
    assert verdicts(spec, "fig8-key-bytes-sparse", {"fig8.key_bytes.sparse": 1.27, "fig8.source_ids": 1.0},
                    {"fig8.key_bytes.sparse": 1.83}, {"fig8.source_ids": 0.0}) == ["reproduced", "differs", "not at this scale"]
    # the paper's CPU usage from cluster monitoring is another quantity than our coding share
    assert claims["msg-fig8-cpu-overhead"].meaningful_at == () and claims["msg-fig8-cpu-overhead"].scale_reason
    # Table 3's order of three mean epoch times, closer than this run's own spread of them: not testable
    t3 = {"t3.default.epoch_time_s": 0.50, "t3.col_half.epoch_time_s": 0.51, "t3.row_4.epoch_time_s": 0.53,
          "t3.epoch_time_spread": 0.01}
    assert claims["t3-rows-cols-cost"].noise == "t3.epoch_time_spread"
    assert verdicts(spec, "t3-rows-cols-cost", t3, {"t3.col_half.epoch_time_s": 0.45}, {"t3.epoch_time_spread": 0.04},
                    {"t3.epoch_time_spread": math.nan}) == ["reproduced", "differs", "not at this scale", "not run"]
    # quan_256 against default, the same means: within 5% only where the spread cannot reach across 5%
    same = {"t3.quan_256.epoch_time_s": 0.49, "t3.default.epoch_time_s": 0.50, "t3.epoch_time_spread": 0.01}
    assert claims["t3-quan256-same"].noise == "t3.epoch_time_spread"
    assert verdicts(spec, "t3-quan256-same", same, {"t3.quan_256.epoch_time_s": 0.45}, {"t3.epoch_time_spread": 0.0488},
                    {"t3.epoch_time_spread": math.nan}) == ["reproduced", "differs", "not at this scale", "not run"]


def test_epoch_time_claims_are_testable_only_where_communication_bounds_the_epoch_as_in_the_paper():
    """Table 4 and Fig. 9(a): SketchML's 100 s epoch bounds the compute every method shares, so at least
    1 - 100 / 1041 of Adam-double's epoch is communication; a run or model below that share orders the
    coding costs, and the orders and speed-ups say *not at this scale* there (never *differs*)."""
    from gcbench.reproductions.sketchml import load
    from gcbench.reproductions.sketchml.measures import comm_share, paper_comm_share

    spec = load()
    assert paper_comm_share(spec.value("t4.sketchml.epoch_time").value,
                            spec.value("t4.adam-double.epoch_time").value) == pytest.approx(1 - 100 / 1041)
    epochs = [{"epoch_time_s": 0.0, "modelled_comm_s": 0.0}, {"epoch_time_s": 1.0, "modelled_comm_s": 0.9},
              {"epoch_time_s": 3.0, "modelled_comm_s": 2.7}]
    assert comm_share(epochs) == pytest.approx(0.9) and comm_share(epochs[:1]) == 0.0
    claims = {c.id: c for c in spec.claims}
    # the budget's claim also needs every compared run to reach the budget (tests/test_sketchml_budget_testable.py)
    flags = {"t4-epoch-order": "t4.comm_dominated", "t4-budget-best": "t4.budget_testable",
             "fig9-epoch-lr": "t2.lr.comm_dominated", "msg-t4-epoch-order": "msg.c2.comm_dominated",
             "msg-t4-speedup-zipml16": "msg.c2.comm_dominated",
             # Cluster-1's prices have no paper number (Table 4 ran on Cluster-2): information at every scale
             "msg-t4-epoch-order-cluster1": ""}
    assert {cid: claims[cid].testable for cid in flags} == flags
    # converged times are epochs x epoch times: the epoch must be communication-bound; the epochs to
    # converge compare methods only where §4.4's rule can tell them apart (its band against the drop)
    converge = {"t2-converge-lr": "t2.lr.converge_time_testable", "t2-converge-speedup-adam": "t2.lr.converge_time_testable",
                "t2-converge-speedup-zipml": "t2.lr.converge_time_testable",
                "t2-converge-speedup-adam-cluster1": "",
                "t2-epochs-lr": "t2.lr.rule_resolves",
                # the calibrated ones are their epoch-time siblings' speed-ups times an epoch ratio: the
                # siblings' flags (the model's held-out test and its ceiling from the paper's row) with the
                # epochs' (the rule resolves), together
                "t2-converge-speedup-adam-cal": "t2.lr.converge_time_cal_testable.adam-double",
                "t2-converge-speedup-zipml-cal": "t2.lr.converge_time_cal_testable.zipml16"}
    assert {cid: claims[cid].testable for cid in converge} == converge
    names = ("sketchml", "zipml8", "zipml16", "adam-float", "adam-double")
    slow = {f"t4.{m}.epoch_time_s": t for m, t in zip(names, (0.66, 0.25, 0.27, 0.25, 0.32))}
    paper_like = {f"t4.{m}.epoch_time_s": t for m, t in zip(names, (100, 231, 278, 725, 1041))}
    assert verdicts(spec, "t4-epoch-order", {**slow, "t4.comm_dominated": 1.0}, {"t4.comm_dominated": 0.0},
                    {**paper_like, "t4.comm_dominated": 1.0}, {"t4.comm_dominated": None}) == [
        "differs", "not at this scale", "reproduced", "not run"]
    fig9 = {"t2.lr.sketchml.epoch_time_s": 3.0, "t2.lr.zipml.epoch_time_s": 0.4, "t2.lr.adam.epoch_time_s": 0.5}
    assert verdicts(spec, "fig9-epoch-lr", {**fig9, "t2.lr.comm_dominated": 1.0}, {"t2.lr.comm_dominated": 0.0}) == [
        "differs", "not at this scale"]


def test_table3_spread_is_the_widest_interval_of_every_variant_or_the_drift():
    def run(times):  # epoch 0 pays for warming up and is left out
        return {"epochs": [{"epoch_time_s": t} for t in [99.0, *times]], "summary": {"mean_epoch_time_s": float(np.mean(times))}}

    steady, noisy = [1.0] * 10, [1.0, 1.4] * 5
    runs = {"default": run(steady), "col_half": run(steady), "row_4": run(steady), "quan_256": run(noisy)}
    # quan_256's interval counts: t3-quan256-same compares its mean too
    assert table3_spread(runs, None) == mean_interval_share(noisy) > 0
    assert table3_spread({k: v for k, v in runs.items() if k != "quan_256"}, None) == 0.0
    # the default's second run, 10% slower: the drift between cells decides where it is wider
    assert table3_spread({"default": run(steady)}, run([1.1] * 10)) == pytest.approx(0.1 / 1.1)
    assert table3_spread({}, None) is None


def test_mean_interval_share_is_the_t_interval_of_the_mean():
    from scipy.stats import t

    x = np.arange(1.0, 60.0)  # 59 values, mean 30
    assert mean_interval_share(x) == pytest.approx(t.ppf(0.975, 58) * np.std(x, ddof=1) / np.sqrt(59) / 30)
    assert mean_interval_share(np.full(40, 2.0)) == 0.0
    assert mean_interval_share([1.0]) == math.inf  # one value holds no interval
    # wider spread per epoch, wider interval
    rng = np.random.default_rng(1)
    assert mean_interval_share(1 + 0.2 * rng.random(59)) > mean_interval_share(1 + 0.02 * rng.random(59))


def test_each_models_convergence_rule_uses_the_specs_share_whatever_lr_measured():
    """The derivation of one model's ``rule_resolves`` does not depend on another model's runs: the
    logistic regression's communication share (computed in the same loop) must not replace the
    spec's ``convergence_resolve_share`` for the models after it."""
    from types import SimpleNamespace

    from gcbench.reproductions.sketchml.workload import workload
    from gcbench.reproductions.sketchml.measures import rule_resolves

    wl = workload()

    def run(losses, comm):  # no bytes: the transfer is the latencies alone
        epochs = [{"epoch": i, "test_loss": x, "epoch_time_s": float(i > 0), "measured_s": float(i > 0) * (1 - comm),
                   "modelled_comm_s": float(i > 0) * comm, "cum_time_s": float(i), "messages": 10, "bytes_up": 0,
                   "bytes_down": 0} for i, x in enumerate(losses)]
        return {"epochs": epochs, "summary": {"mean_epoch_time_s": 1.0, "median_epoch_time_s": 1.0}}

    falling = [1.0, 0.6, 0.5, 0.45, 0.42, 0.41, 0.405, 0.404, 0.4035, 0.4033, 0.4032]
    share = float(wl.spec.workload["convergence_resolve_share"])
    assert rule_resolves(falling, 0.01, share) and not rule_resolves(falling, 0.01, 0.0)
    results = {f"train-{model}-{m}": run(falling, 0.0) for model in ("lr", "svm") for m in ("sketchml", "adam-double", "zipml16")}
    ctx = SimpleNamespace(options={}, preset=wl.spec.scale("smoke"), tables=["2"], scale="smoke")
    out = wl.derive(ctx, results)
    assert out["t2.lr.adam.comm_share"] < 1e-3  # such a share used as the rule's share would resolve nothing
    assert out["t2.lr.rule_resolves"] == out["t2.svm.rule_resolves"] == 1.0
    assert out["t2.lr.comm_dominated"] == out["t2.lr.converge_time_testable"] == 0.0


def test_sketchmls_own_share_of_adams_epoch_is_information_not_a_flag():
    """The paper's SketchML epoch, coding included, is 100 of Adam-double's 1041 s; SketchML's measured share of
    Adam's epoch is derived beside the converged times, and their flags read Adam's share alone."""
    from types import SimpleNamespace

    from gcbench.envs.network import load_profile
    from gcbench.reproductions.sketchml.workload import workload
    from gcbench.reproductions.sketchml.measures import cumulative_times, sketchml_own_share
    from sketchml_priced import link_bytes

    wl = workload()

    def run(measured, comm):
        epochs = [{"epoch": i, "test_loss": x, "epoch_time_s": float(i > 0) * (measured + comm),
                   "measured_s": float(i > 0) * measured, "modelled_comm_s": float(i > 0) * comm,
                   "cum_time_s": float(i) * (measured + comm), "messages": 10, **link_bytes(comm, messages=10, workers=4)}
                  for i, x in enumerate([1.0, 0.6, 0.5, 0.45, 0.42, 0.41, 0.405, 0.404, 0.4035, 0.4033, 0.4032])]
        return {"epochs": epochs, "summary": {"mean_epoch_time_s": measured + comm, "median_epoch_time_s": measured + comm}}

    adam = run(0.05, 0.95)
    assert sketchml_own_share(run(0.08, 0.1)["epochs"], 1.0) == pytest.approx(0.08)  # Adam's epoch: 0.05 + 0.95 s
    assert sketchml_own_share([], 1.0) is None and sketchml_own_share(run(0.08, 0.1)["epochs"], None) is None
    c1 = load_profile(wl.spec.workload["profile_fig8"])
    priced = sketchml_own_share(run(0.08, 0.1)["epochs"], cumulative_times(adam["epochs"], c1, 4, wl.training_driver())[-1] / 10)
    assert 0 < priced < 0.08  # Adam's epoch re-priced at 1 Gbps is longer than as run
    ctx = SimpleNamespace(options={}, preset=wl.spec.scale("smoke"), tables=["2"], scale="smoke")
    for own in (0.08, 0.5):  # within 9.6% of Adam's epoch, then far beyond it: the flags do not move
        results = {f"train-{model}-{m}": run(own if m == "sketchml" else 0.05, 0.95 if m != "sketchml" else 0.1)
                   for model in ("lr", "svm") for m in ("sketchml", "adam-double", "zipml16")}
        out = wl.derive(ctx, results)
        assert out["t2.lr.comm_dominated"] == out["t2.lr.rule_resolves"] == 1.0  # the second as information
        assert out["t2.lr.sketchml.own_share"] == pytest.approx(own)
        assert out["t2.lr.converge_time_testable"] == 1.0
        assert out["t2.lr.converge_time_c1_testable"] == float(out["t2.lr.adam.comm_share_c1"] >= 1 - 100 / 1041)
