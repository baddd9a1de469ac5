"""Sketched-SGD sized as the paper sizes it (§5.3), the authors' top-k baseline, biases sent
uncompressed (§5.1), the accumulator norm, and divergence as a result."""

from __future__ import annotations

import math

import pytest
import torch
from gcbench.compressors.errors import InvalidParameterError
from gcbench.compressors.methods.sizing import paper_sizing
from gcbench.compressors.methods.sketched_sgd import AccumulatedTopK
from gcbench.reproductions.sketched_sgd.methods import MethodConfig, MethodRun, codec_ratio, k_for, overall_compression
from gcbench.reproductions.sketched_sgd.models import FlatParams
from torch import nn

# -- the sizing rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d, k, target, dense, P, columns, paper, upload",
    [
        # budget 2d/20 = 100,000 floats: P = floor(99,000 / 2,000) = 49, |S| = 100,000 - 49,000 - 1,000 = 50,000
        (1_000_000, 1000, 20.0, 0, 49, 10_000, 20.0, 1e6 / 99_000),
        # budget 50,000: P = floor(49,000 / 2,000) = 24, |S| = 50,000 - 24,000 - 1,000 = 25,000
        (1_000_000, 1000, 40.0, 0, 24, 5_000, 40.0, 1e6 / 49_000),
        # budget 1,234.5: P = floor(1,220.5 / 28) = 43, |S| <= 1,234.5 - 602 - 14 = 618.5 -> 123 columns (615)
        (12_345, 14, 20.0, 0, 43, 123, 24_690 / 1_231, 12_345 / 1_217),
        # 100 dense floats each way: budget 2 * 10,100 / 20 - 200 = 810, P = floor(800 / 20) = 40, |S| = 400
        (10_000, 10, 20.0, 100, 40, 80, 20_200 / 1_010, 10_100 / 900),
    ],
)
def test_paper_sizing_against_hand_computed_values(d, k, target, dense, P, columns, paper, upload):
    sz = paper_sizing(d, k, target, rows=5, dense=dense)
    assert (sz.P, sz.columns, sz.sketch_size, sz.rows, sz.k, sz.dense) == (P, columns, 5 * columns, 5, k, dense)
    assert sz.paper_compression == pytest.approx(paper, rel=1e-12)
    assert sz.upload_compression == pytest.approx(upload, rel=1e-12)
    # |S| ~ Pk (at least Pk, less than Pk + 2k + rows), and the paper's count never below the target
    assert P * k <= sz.sketch_size < P * k + 2 * k + 5
    assert sz.paper_compression >= target


def test_paper_sizing_derives_p_from_the_budget():
    # k / d as the paper's transformer (100,000 of 90M): P about 44 at 20x, 22 at 40x, never a constant
    assert paper_sizing(900_000, 1000, 20.0).P == 44
    assert paper_sizing(900_000, 1000, 40.0).P == 22
    with pytest.raises(InvalidParameterError):
        paper_sizing(100, 10, 20.0)  # a budget of 10 floats cannot hold 3k
    with pytest.raises(InvalidParameterError):
        paper_sizing(100, 1, 1.0)


# -- the authors' top-k baseline ------------------------------------------------------------------------


def _naive_topk_steps(grads: list[list[float]], k: int, rho: float) -> list[list[float]]:
    """The authors' top-k, one coordinate at a time in plain Python: u <- rho u + g, v += u, apply
    v at the k largest |v|, zero u and v there."""
    n = len(grads[0])
    u, v, out = [0.0] * n, [0.0] * n, []
    for g in grads:
        u = [rho * a + b for a, b in zip(u, g)]
        v = [a + b for a, b in zip(v, u)]
        top = sorted(range(n), key=lambda i: -abs(v[i]))[:k]
        upd = [0.0] * n
        for i in top:
            upd[i] = v[i]
            v[i] = 0.0
            u[i] = 0.0
        out.append(upd)
    return out


def test_accumulated_topk_zeroes_momentum_at_sent_coordinates_like_a_naive_implementation():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(12, generator=gen, dtype=torch.float64) for _ in range(6)]
    acc = AccumulatedTopK(3, momentum=0.9)
    ours = [acc.step(g) for g in grads]
    want = _naive_topk_steps([g.tolist() for g in grads], 3, 0.9)
    for a, b in zip(ours, want):
        assert int(torch.count_nonzero(a)) == 3
        torch.testing.assert_close(a, torch.tensor(b, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # by hand: with rho = 0.5 and k = 1 on [3, 1] then [0, 2]: step 1 sends 3 (u, v zeroed there), leaves
    # u = v = [0, 1]; step 2: u = [0, 2.5], v = [0, 3.5] -> sends 3.5 at coordinate 1
    acc = AccumulatedTopK(1, momentum=0.5)
    assert acc.step(torch.tensor([3.0, 1.0])).tolist() == [3.0, 0.0]
    assert acc.step(torch.tensor([0.0, 2.0])).tolist() == [0.0, 3.5]
    assert acc.state_dict()["u"].tolist() == [0.0, 0.0] and acc.state_dict()["v"].tolist() == [0.0, 0.0]


class _Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(12, 64)
        self.norm = nn.LayerNorm(64)
        self.b = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.norm(self.a(x))))


def _mean_grads(model: FlatParams, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gs, ds = [], []
    for w in range(x.shape[0]):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[w]), y[w]).backward()
        gs.append(model.flat.grad.clone())
        ds.append(model.dense.grad.clone())
    return sum(gs) / len(gs), sum(ds) / len(ds)


def test_method_run_true_topk_is_the_authors_baseline_with_dense_biases():
    model = FlatParams(_Toy(), dense_1d=True)
    assert model.dense is not None and model.dense.numel() == 64 + 64 + 64 + 4  # biases and LayerNorm gain/bias
    d = model.flat.numel()
    k = k_for(d, 0.05)
    run = MethodRun(MethodConfig("topk", "true_topk", k_fraction=0.05, dense_1d=True), model, 3, momentum=0.9)
    ref = AccumulatedTopK(k, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(3, 8, 12, generator=gen), torch.randint(0, 4, (3, 8), generator=gen)
        g, dense = _mean_grads(model, x, y)
        model.zero_grad()
        run.backward(lambda w: nn.functional.cross_entropy(model(x[w]), y[w]))
        torch.testing.assert_close(model.flat.grad, ref.step(g), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(model.dense.grad, dense, rtol=1e-6, atol=1e-8)  # the biases: all of it, every step
        assert run.accumulator_norm() == pytest.approx(ref.accumulator_norm(), rel=1e-5)
    opt = run.optimizer(0.1, 0.9)
    assert [grp["momentum"] for grp in opt.param_groups] == [0.0, 0.9]  # momentum inside for the top-k, heavy-ball for biases


def test_sketched_sgd_sends_biases_uncompressed_byte_for_byte():
    model = FlatParams(_Toy(), dense_1d=True)
    d, n_dense = model.flat.numel(), model.dense.numel()
    m = MethodConfig("sketched20", "sketched", k_fraction=0.02, ratio=4.0, dense_1d=True)
    sz = m.size_for(d)  # the sketch's budget: the compressed parameters only
    assert (m.P, m.columns) == (sz.P, sz.columns) and sz.P >= 1
    W = 3
    run = MethodRun(m, model, W, momentum=0.9)
    gen = torch.Generator().manual_seed(2)
    for step in range(3):
        x, y = torch.randn(W, 8, 12, generator=gen), torch.randint(0, 4, (W, 8), generator=gen)
        _, dense = _mean_grads(model, x, y)
        model.zero_grad()
        run.backward(lambda w: nn.functional.cross_entropy(model(x[w]), y[w]))
        torch.testing.assert_close(model.dense.grad, dense, rtol=1e-6, atol=1e-8)
        assert int(torch.count_nonzero(model.flat.grad)) <= k_for(d, 0.02)
        log = run.traffic
        sketch = log.message_bytes(step=step, kind="round1") + log.message_bytes(step=step, kind="round2")
        assert sketch == W * 4 * (sz.sketch_size + sz.P * sz.k)  # the rule's floats, on the wire
        if step:  # step 0 carries one-off checks
            assert log.message_bytes(step=step) - sketch == W * 4 * n_dense  # the biases: fp32, uncompressed
            up = log.message_bytes(step=step) / W
            assert 4 * d / (up - 4 * n_dense) == pytest.approx(sz.upload_compression, rel=1e-12)
            down = 4 * (sz.k + n_dense)
            assert 2 * 4 * (d + n_dense) / (up + down) == pytest.approx(overall_compression(sz, n_dense), rel=1e-12)
        norm = run.accumulator_norm()
        assert norm is not None and math.isfinite(norm) and norm > 0


def test_divergence_of_the_authors_topk_is_a_result_not_a_crash():
    from gcbench.reproductions.sketched_sgd.translation import prepare_data, train_translation
    from gcbench.data.text import ParallelCorpus

    pairs = [(f"w{i} a b c", f"x{i} d e f") for i in range(30)]
    data = prepare_data(ParallelCorpus(pairs, "toy", "toy", {}), None, {"held_out": 4, "max_len": 6, "min_count": 1}, seed=0)
    res = train_translation(
        data, model_kind="transformer", model_params={"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_len": 10, "dropout": 0.0},
        method=MethodConfig("topk", "true_topk", k_fraction=0.05, dense_1d=True), workers=2, steps=40, batch=4,
        lr=1e12, momentum=0.9, seed=0, eval_every=0, eval_pairs=None,
    )
    assert res["diverged_at"] is not None and 0 < res["diverged_at"] < 40
    assert len(res["accumulator_norms"]) == res["diverged_at"] and all(math.isfinite(x) for x in res["accumulator_norms"])
    assert res["dense_parameters"] > 0 and res["compressed_parameters"] + res["dense_parameters"] == res["parameters"]


def test_image_runs_report_the_accumulator_norm_per_step():
    """The image runs' ``||sum_i v_i|| / W`` reaches the per-step results and the ``on_step`` hook
    (W&B) for every step, as the translation runs' does; vanilla accumulates nothing and reports none."""
    from gcbench.reproductions.sketched_sgd.vision import load_image_data, run_images

    data = load_image_data("digits", {"train_images": 64, "test_images": 16})
    params = {"channels": 4, "blocks": 1}
    for kind, ratio, k_fraction in (("sketched", 20.0, 0.01), ("true_topk", 0.0, 0.01), ("vanilla", 0.0, 0.0)):
        m = MethodConfig(kind, kind, k_fraction=k_fraction, ratio=ratio, rows=5)
        if kind == "sketched":
            m.P, m.columns = 2, 16  # a tiny model: the paper's rule leaves no room for 3k here
        seen: list[tuple[int, float]] = []
        res = run_images(data, model_params=params, method=m, workers=2, steps=3, batch=4, lr=0.05, momentum=0.9, seed=0,
                         on_step=lambda s, rec: seen.append((s, rec["accumulator_norm"])))
        norms = [r.get("accumulator_norm") for r in res["per_step"]]
        if kind == "vanilla":
            assert seen == [] and norms == [None] * 3
        else:
            assert seen == [(s + 1, n) for s, n in enumerate(norms)]
            assert all(n is not None and math.isfinite(n) and n > 0 for n in norms)


def test_report_states_the_geometry_from_the_recorded_sizing():
    """The report's geometry line against hand-computed values: d_c = 357,376 at 40x leaves a budget of
    2 * 357,376 / 40 = 17,868.8 floats; k = 357,376 // 900 = 397, P = floor(17,471.8 / 794) = 22,
    columns = floor((17,868.8 - 8,734 - 397) / 5) = 1,747 = 4.40 k; overall with 4,844 dense floats each way:
    2 * 362,220 / (8,735 + 8,734 + 397 + 9,688) = 26.29x."""
    from gcbench.reproductions.sketched_sgd.report import budget_shares
    from gcbench.reproductions.sketched_sgd.geometry import sketch_geometry

    m = MethodConfig("sketched40", "sketched", d_per_k=900, ratio=40.0, rows=5)
    cal = sketch_geometry(m, 357_376, 4_844)
    assert (cal["k"], cal["P"], cal["columns"]) == (397, 22, 1_747) and (m.P, m.columns) == (22, 1_747)
    assert cal["overall_compression"] == pytest.approx(2 * 362_220 / (8_735 + 8_734 + 397 + 9_688), rel=1e-12)
    lines = budget_shares({("transformer", "sketched40"): {"calibration": cal}, ("transformer", "vanilla"): {}})
    assert lines == ["transformer Sketched 40x (362,220 parameters, 4,844 of them 1-D): P = 22, 1,747 columns x 5 rows = 4.40 k "
                     "for k = 397; the sketch's own count 40.01x, overall 26.29x"]


# -- the paper's geometry -------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio, P, columns_per_k", [(20.0, 44, 9.0), (40.0, 22, 4.4)])
def test_the_rule_gives_the_papers_geometry_at_the_papers_size(ratio, P, columns_per_k):
    """d = 90M, k = 100,000, 5 rows (§5.3): B = 2d / c; P = floor((B - k) / 2k); columns = (B - Pk - k) / 5."""
    sz = paper_sizing(90_000_000, 100_000, ratio, rows=5)
    assert sz.P == P and sz.columns / sz.k == pytest.approx(columns_per_k, abs=1e-9)
    # with k = d // 900 the same geometry holds at any size above ~82,000 compressed parameters
    for d in (82_800, 100_003, 357_376, 1_042_432, 5_000_111):
        m = MethodConfig("s", "sketched", d_per_k=900, ratio=ratio, rows=5)
        small = m.size_for(d)
        assert small.k == d // 900 and small.P == P, d
        assert small.columns / small.k == pytest.approx(columns_per_k, abs=0.03), d
        assert small.paper_compression == pytest.approx(ratio, rel=2e-3) and small.paper_compression >= ratio


@pytest.mark.parametrize("d", [1, 7, 900, 82_800, 357_376, 1_042_432, 90_000_000])
def test_codec_ratio_makes_the_codec_apply_exactly_k(d):
    from gcbench.compressors.methods.sketched_sgd import SketchedSGD

    for k in sorted({1, max(1, d // 900), max(1, d // 2), d}):
        assert SketchedSGD(ratio=codec_ratio(k, d)).k_for(d) == k == k_for(d, codec_ratio(k, d))
    with pytest.raises(ValueError):
        codec_ratio(0, d)


def test_every_claims_scale_cell_has_the_papers_geometry():
    """Every translation cell the claims scale plans: k = d_c // 900 for top-k and Sketched-SGD, and
    Sketched-SGD's P = 44 / 22 and columns / k = 9.0 / 4.4 at 20x / 40x with 5 rows (the paper's at 90M
    parameters and k = 100,000), the 1-D parameters outside the sketch's budget and the overall ratio
    below the sketch's own. Vocabularies at the preset's cap plus the specials (the dict-de-en split
    fills it; the geometry does not depend on it above ~82,000 compressed parameters)."""
    from gcbench.reproductions.framework.runner import RunContext
    from gcbench.reproductions.sketched_sgd.geometry import translation_geometry
    from gcbench.reproductions.sketched_sgd.workload import workload

    from gcbench.data.text import SPECIALS

    wl = workload()
    preset = wl.spec.scale("claims")
    ctx = RunContext(wl.spec, "claims", preset, ["1", "cifar", "ddp"], None, None, None, options={"device": "cpu"})
    cells = [c for c in wl.plan(ctx, {}) if c.config["kind"] == "translation"]
    tr = preset["translation"]
    vocab = len(SPECIALS) + int(tr["vocab_size"])
    assert len(cells) == 8 and {c.config["seed"] for c in cells} == {0, 1}
    assert all("device" not in c.config for c in cells)  # CPU cells keep their keys
    want = {20.0: (44, 9.0, 3_574), 40.0: (22, 4.4, 1_747)}
    seen = set()
    for cell in cells:
        m = MethodConfig.from_config(cell.config["method"])
        cal, d = translation_geometry(cell.config, m, vocab, vocab)
        if m.kind == "vanilla":
            assert cal is None and m.d_per_k == 0
            continue
        assert m.d_per_k == 900 and m.dense_1d
        if m.kind == "true_topk":
            continue
        P, cpk, columns = want[m.ratio]
        d_c = cal["d"]
        assert d == 362_220 and d_c == 357_376 and cal["dense"] == d - d_c == 4_844
        assert cal["k"] == d_c // 900 == 397 and cal["rows"] == 5
        assert cal["P"] == P and cal["columns"] == columns and cal["columns_per_k"] == pytest.approx(cpk, abs=0.01)
        assert cal["paper_compression"] == pytest.approx(m.ratio, rel=1e-3)
        assert cal["overall_compression"] < cal["paper_compression"]
        seen.add(m.ratio)
    assert seen == {20.0, 40.0}


def test_the_device_is_part_of_a_cell_key_only_off_the_cpu():
    from gcbench.reproductions.framework.runner import RunContext
    from gcbench.reproductions.sketched_sgd.workload import workload

    wl = workload()
    preset = wl.spec.scale("micro")
    plans = {}
    for dev in ("cpu", "cuda:0"):
        ctx = RunContext(wl.spec, "micro", preset, ["1", "cifar", "ddp"], None, None, None, options={"device": dev})
        plans[dev] = {c.name: c.config for c in wl.plan(ctx, {})}
    assert plans["cpu"].keys() == plans["cuda:0"].keys()
    for name, cfg in plans["cpu"].items():
        assert "device" not in cfg and plans["cuda:0"][name] == {**cfg, "device": "cuda:0"}


# -- how close Sketched-SGD's update is to true top-k ----------------------------------------------------


_TOY_P = 4  # P of the toy below: budget 2d / 10 = 10 k, P = floor(9 k / 2 k)


def _recovery(columns_scale: float = 1.0, steps: int = 4) -> list[float]:
    """Sketched-SGD on a toy model, 3 workers: the per-step top-k mass recovery."""
    torch.manual_seed(0)
    model = FlatParams(_Toy(), dense_1d=True)
    d = model.flat.numel()
    m = MethodConfig("s", "sketched", d_per_k=50, ratio=10.0, rows=5, dense_1d=True)
    assert m.size_for(d).P == _TOY_P
    m.columns = max(1, int(m.columns * columns_scale))
    run = MethodRun(m, model, 3, momentum=0.9)
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x, y = torch.randn(3, 8, 12, generator=gen), torch.randint(0, 4, (3, 8), generator=gen)
        model.zero_grad()
        run.backward(lambda w: nn.functional.cross_entropy(model(x[w]), y[w]))
    return run.recovery


def _one_step(seed: int = 0) -> tuple[MethodRun, MethodConfig, FlatParams, torch.Tensor]:
    """One Sketched-SGD step of the toy, 3 workers, no momentum (hash seed ``seed``): the run, its method,
    the model and ``sum_i v_i`` before the step (the first step's summed gradient)."""
    torch.manual_seed(0)
    model = FlatParams(_Toy(), dense_1d=True)
    m = MethodConfig("s", "sketched", d_per_k=50, ratio=10.0, rows=5, dense_1d=True, seed=seed)
    m.size_for(model.flat.numel())
    W = 3
    run = MethodRun(m, model, W, momentum=0.0)
    gen = torch.Generator().manual_seed(4)
    x, y = torch.randn(W, 8, 12, generator=gen), torch.randint(0, 4, (W, 8), generator=gen)
    g, _ = _mean_grads(model, x, y)
    model.zero_grad()
    run.backward(lambda w: nn.functional.cross_entropy(model(x[w]), y[w]))
    return run, m, model, (g * W).double()


def test_topk_recovery_against_a_naive_count():
    """The recovery equals its definition computed by hand from the workers' accumulators: the mass of
    sum_i v_i (before the step) at the applied coordinates over its mass at the true top-k."""
    run, m, model, before = _one_step()
    k = m.k(model.flat.numel())
    applied = model.flat.grad != 0
    assert int(applied.sum()) == k
    want = float(before[applied].square().sum() / before.abs().topk(k).values.square().sum())
    assert run.recovery == [pytest.approx(want, rel=1e-6)]


def test_other_hash_recovery_is_an_independent_sketchs_selection_on_the_same_accumulation():
    """The other-hash share is Algorithm 2's lines 8-9 run by a sketch of the run's size seeded one past the
    run's (its P k largest estimates, then the k largest exact values among them), computed by hand on the
    first step's summed gradient; it is measured beside training and changes nothing the run applies."""
    from gcbench.compressors import get
    from gcbench.compressors.methods.sketched_sgd import select_candidates

    run, m, model, before = _one_step(seed=3)
    k = m.k(model.flat.numel())
    codec = get("countsketch", rows=m.rows, columns=m.columns, seed=4)
    cand = select_candidates(codec.encode(before.float()), m.P * k, codec=codec)
    got = before[cand].abs().topk(k).values.square().sum()
    want = float(got / before.abs().topk(k).values.square().sum())
    assert len(run.recovery_other_hash) == 1 and run.recovery_other_hash[0] == pytest.approx(want, rel=1e-6)
    own = get("countsketch", rows=m.rows, columns=m.columns, seed=3)
    own_cand = select_candidates(own.encode(before.float()), m.P * k, codec=own)
    assert not torch.equal(cand, own_cand)  # another sketch's candidates, not the run's


def _train_toy(steps: int, measure: bool = True) -> tuple[torch.Tensor, list[float], MethodRun]:
    """Sketched-SGD on the toy, 3 workers, momentum 0.9, ``steps`` optimizer steps: the final parameters,
    the accumulator norm after each step and the run."""
    torch.manual_seed(0)
    model = FlatParams(_Toy(), dense_1d=True)
    m = MethodConfig("s", "sketched", d_per_k=50, ratio=10.0, rows=5, dense_1d=True)
    m.size_for(model.flat.numel())
    run = MethodRun(m, model, 3, momentum=0.9, measure=measure)
    opt = run.optimizer(0.1, 0.9)
    gen = torch.Generator().manual_seed(3)
    norms = []
    for _ in range(steps):
        x, y = torch.randn(3, 8, 12, generator=gen), torch.randint(0, 4, (3, 8), generator=gen)
        opt.zero_grad()
        run.backward(lambda w: nn.functional.cross_entropy(model(x[w]), y[w]))
        opt.step()
        norms.append(run.accumulator_norm())
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), norms, run


def test_other_hash_recovery_changes_nothing_the_run_applies(monkeypatch):
    """Measured only: the same steps with the measurement switched off leave the same parameters, bit for
    bit, and the same run's own shares."""
    with_it, _, run = _train_toy(5)
    monkeypatch.setattr(MethodRun, "other_hash_recovery", lambda self: float("nan"))
    without, _, run_off = _train_toy(5)
    assert torch.equal(with_it, without) and run.recovery == run_off.recovery


def test_a_run_without_measurements_trains_the_same_and_takes_none():
    """``measure=False`` (the image runs, which record none of them): the same parameters bit for bit and the
    same accumulator norms as a measured run, and no recovery, guard share, hash statistics or measurement
    time; a measured run counts the time its measurements took."""
    measured, norms, run = _train_toy(4)
    plain, plain_norms, bare = _train_toy(4, measure=False)
    assert torch.equal(measured, plain) and norms == plain_norms
    assert len(run.recovery) == len(run.error_share_other_hash) == 4 and run.hash_statistics is not None
    assert run.measure_s > 0
    assert bare.recovery == bare.recovery_other_hash == bare.error_share_other_hash == []
    assert bare.hash_statistics is None and bare.measure_s == 0.0


def test_translation_train_time_leaves_the_sketch_measurements_out(monkeypatch):
    """``train_s`` counts the training steps only: measurements made a known 0.15 s slower per step show in
    ``measure_s`` (at least 0.15 s x steps) and not in ``train_s`` (train + measurements within the wall);
    the methods that take no measurements record none."""
    import time

    from gcbench.data.text import ParallelCorpus
    from gcbench.reproductions.sketched_sgd.translation import prepare_data, train_translation

    slow, steps = 0.15, 3
    real = MethodRun.other_hash_recovery

    def slower(self):
        time.sleep(slow)
        return real(self)

    monkeypatch.setattr(MethodRun, "other_hash_recovery", slower)
    pairs = [(f"w{i} a b c", f"x{i} d e f") for i in range(30)]
    data = prepare_data(ParallelCorpus(pairs, "toy", "toy", {}), None, {"held_out": 4, "max_len": 6, "min_count": 1}, seed=0)
    kw = dict(model_kind="transformer", model_params={"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_len": 10, "dropout": 0.0},
              workers=2, steps=steps, batch=4, lr=0.1, momentum=0.9, seed=0, eval_every=0, eval_pairs=None)
    t0 = time.perf_counter()
    res = train_translation(data, method=MethodConfig("sketched", "sketched", k_fraction=0.05, rows=3, columns=64), **kw)
    wall = time.perf_counter() - t0
    assert res["measure_s"] >= slow * steps
    assert res["train_s"] > 0 and res["train_s"] + res["measure_s"] <= wall
    assert len(res["topk_recovery"]) == steps
    assert train_translation(data, method=MethodConfig("topk", "true_topk", k_fraction=0.05), **kw)["measure_s"] is None


def test_topk_recovery_falls_when_the_method_is_broken(monkeypatch):
    """The measurement reacts to the method: lower with a sketch a quarter of the size, and lower when the
    second round's candidates are cut to the k the sketch's estimates rank highest (P = 1: the exact
    values then only order what the sketch picked)."""
    from gcbench.compressors.methods import sketched_sgd as ssgd

    good = _recovery()
    assert all(0.0 < x <= 1.0 + 1e-9 for x in good)
    small = _recovery(columns_scale=0.25)
    assert sum(small) < 0.75 * sum(good)
    real = ssgd.select_candidates
    monkeypatch.setattr(ssgd, "select_candidates", lambda summed, num, **kw: real(summed, num // _TOY_P, **kw))
    skipped = _recovery()
    assert sum(skipped) < 0.75 * sum(good)


def test_bleu_interval_brackets_the_score_and_is_seeded():
    from gcbench.reproductions.sketched_sgd.translation import bleu_interval

    from gcbench.data.text import corpus_bleu

    refs = [f"das ist satz nummer {i} hier" for i in range(60)]
    hyps = [r if i % 3 else "das ist ein anderer satz" for i, r in enumerate(refs)]
    lo, hi = bleu_interval(hyps, refs, 100, seed=0)
    assert lo <= corpus_bleu(hyps, refs) <= hi and lo < hi
    assert (lo, hi) == bleu_interval(hyps, refs, 100, seed=0)
    with pytest.raises(ValueError):
        bleu_interval(hyps, refs, 0)
