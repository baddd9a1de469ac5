"""L-GreCo's engine on tables: Algorithm 1 (budget, discretisation, DP, reconstruction), the ladders,
the comparators (uniform, CGX k-means, Accordion) and the time objective / overhead helpers.

The DP is checked against an exhaustive search written here (on the same discretised errors), on
random instances from hypothesis; the budget against its definition; the ranges against L-GreCo
Sec. 5.1's numbers; k-means against scikit-learn on separable clusters.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from gcbench.compressors.adaptive import (
    Accordion,
    bucket_priority_costs,
    cgx_kmeans_choice,
    discretise,
    error_budget,
    evaluate,
    fit_bucket_coefficients,
    fit_linear,
    kmeans,
    lgreco,
    overhead,
    powersgd_ladder,
    qsgd_ladder,
    quantization_range,
    sketchml_ladder,
    solve_dp,
    sparsification_range,
    threelc_ladder,
    time_costs,
    topk_ladder,
    uniform_choice,
)
from gcbench.compressors.adaptive.ladders import Ladder, ladder_around, ladder_for
from gcbench.compressors.errors import InvalidParameterError
from gcbench.envs.adaptive import make_policy
from gcbench.envs.workers import CodecSpec
from hypothesis import given
from hypothesis import strategies as st

# -- an independent exhaustive search ---------------------------------------------------------------


def brute_force(cells: np.ndarray, costs: np.ndarray, D: int) -> tuple[float, tuple[int, ...] | None]:
    """Least total cost over every per-layer combination with ``sum cells <= D`` (plain Python)."""
    L, K = cells.shape
    best, arg = math.inf, None
    for combo in itertools.product(range(K), repeat=L):
        e = sum(int(cells[l][j]) for l, j in enumerate(combo))
        if e > D:
            continue
        c = sum(float(costs[l][j]) for l, j in enumerate(combo))
        if c < best:
            best, arg = c, combo
    return best, arg


@st.composite
def instances(draw):
    L = draw(st.integers(1, 5))
    K = draw(st.integers(1, 4))
    D = draw(st.integers(1, 40))
    cells = np.array(draw(st.lists(st.lists(st.integers(0, D + 3), min_size=K, max_size=K), min_size=L, max_size=L)))
    costs = np.array(draw(st.lists(st.lists(st.integers(1, 1000), min_size=K, max_size=K), min_size=L, max_size=L)))
    return cells, costs, D


@given(instances())
def test_dp_equals_brute_force(inst):
    cells, costs, D = inst
    choice, cost, used = solve_dp(cells, costs, D)
    best, arg = brute_force(cells, costs, D)
    if arg is None:
        assert choice is None and math.isinf(cost)
        return
    assert choice is not None
    rows = np.arange(len(choice))
    assert cost == pytest.approx(best)
    assert float(costs[rows, choice].sum()) == pytest.approx(best)  # reconstruction gives that cost
    assert int(cells[rows, choice].sum()) == used <= D


@st.composite
def real_tables(draw):
    L = draw(st.integers(1, 4))
    K = draw(st.integers(2, 4))
    errs = draw(st.lists(st.lists(st.floats(0.0, 10.0), min_size=K, max_size=K), min_size=L, max_size=L))
    costs = draw(st.lists(st.lists(st.integers(1, 500), min_size=K, max_size=K), min_size=L, max_size=L))
    ref = draw(st.integers(0, K - 1))
    alpha = draw(st.sampled_from([1.0, 1.5, 0.7]))
    D = draw(st.sampled_from([7, 50, 10000]))
    return np.array(errs), np.array(costs), ref, alpha, D


@given(real_tables())
def test_lgreco_respects_budget_and_matches_brute_force(t):
    errors, costs, ref, alpha, D = t
    r = lgreco(errors, costs, ref, alpha=alpha, D=D, fallback_to_reference=False)
    budget = alpha * errors[np.arange(len(errors)), ref].sum()
    assert r.budget == pytest.approx(budget)
    cells = discretise(errors, budget, D)
    best, arg = brute_force(cells, costs, D)
    if arg is None:
        assert not r.feasible
        return
    assert r.feasible
    assert r.cost == pytest.approx(best)
    # ceil rounding: the real (undiscretised) error never exceeds the budget
    assert r.error <= budget * (1 + 1e-9) + 1e-12


@given(real_tables())
def test_lgreco_with_fallback_never_costs_more_than_the_reference(t):
    errors, costs, ref, alpha, D = t
    r = lgreco(errors, costs, ref, alpha=alpha, D=D)
    rows = np.arange(len(errors))
    uniform_cost = costs[rows, ref].sum()
    if alpha >= 1.0:  # the reference fits its own budget: always feasible, never worse
        assert r.feasible
        assert r.cost <= uniform_cost
        assert r.error <= r.budget * (1 + 1e-9) + 1e-12
    assert r.reference_cost == uniform_cost


def test_budget_is_alpha_times_reference_error():
    errors = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 0.5]])
    assert error_budget(errors, 1) == pytest.approx(6.0)
    assert error_budget(errors, 1, alpha=1.5) == pytest.approx(9.0)
    assert error_budget(errors, [0, 2]) == pytest.approx(3.5)  # per-layer reference (Accordion)
    with pytest.raises(InvalidParameterError):
        error_budget(errors, 3)


def test_discretisation_rules():
    e = np.array([[2.5, 0.0, 10.0, 11.0, np.nan, 2.0, 2.3, 2.7]])
    assert discretise(e, 10.0, 10).tolist() == [[3, 0, 10, 11, 11, 2, 3, 3]]  # ceil; > budget -> D + 1
    assert discretise(e, 10.0, 10, "round").tolist() == [[3, 0, 10, 11, 11, 2, 2, 3]]
    assert discretise(e, 10.0, 10, "floor").tolist() == [[2, 0, 10, 11, 11, 2, 2, 2]]
    # float noise around exact multiples does not add a cell: 0.1 * 3 / 0.3 * 10 == 10.000000000000002
    assert discretise(np.array([[0.1 * 3]]), 0.3, 10).tolist() == [[10]]
    # zero budget: only zero errors are affordable
    assert discretise(np.array([[0.0, 1e-9]]), 0.0, 10).tolist() == [[0, 11]]


def test_ceil_keeps_the_real_error_within_budget_where_round_does_not():
    # 3 layers; candidate 1 is 10x cheaper and 13% worse. Budget 10 (alpha * 9), D = 10 cells of 1.0.
    errors = np.array([[3.0, 3.4]] * 3)  # 3 cells; 3.4 -> ceil 4 / round 3
    costs = np.array([[10, 1]] * 3)
    ceil = lgreco(errors, costs, 0, alpha=10 / 9, D=10, fallback_to_reference=False)
    assert ceil.budget == pytest.approx(10.0)
    assert ceil.choice.tolist().count(1) == 1 and ceil.cost == 21 and ceil.cells == 10  # 4 + 3 + 3
    assert ceil.error <= ceil.budget
    rnd = lgreco(errors, costs, 0, alpha=10 / 9, D=10, rounding="round", fallback_to_reference=False)
    assert rnd.choice.tolist() == [1, 1, 1] and rnd.error > rnd.budget  # 10.2 > 10: overshoots


def test_uniform_is_found_when_it_is_exactly_representable():
    # errors are exact multiples of the step: uniform uses exactly D cells and is the only fit
    errors = np.array([[4.0, 2.0, 1.0], [4.0, 2.0, 1.0]])
    costs = np.array([[1, 2, 3], [1, 2, 3]])
    r = lgreco(errors, costs, 1, D=4, fallback_to_reference=False)
    assert r.choice.tolist() == [1, 1] and r.cells == 4 and r.cost == 4 and not r.fallback


def test_dp_moves_compression_to_the_insensitive_layer():
    # layer 0: large and insensitive (error barely grows); layer 1: small and sensitive
    errors = np.array([[1.0, 1.1, 1.2, 1.3], [1.0, 3.0, 6.0, 9.0]])
    costs = np.array([[1000, 500, 250, 125], [100, 50, 25, 12]])
    ref = 0
    r = lgreco(errors, costs, ref, alpha=1.2, D=1000)  # budget 2.4
    assert r.choice.tolist() == [3, 0]
    assert r.cost == 225 and r.reference_cost == 1100


def test_dp_at_200_layers_16_candidates():
    # the size of a ResNet's layer table; the DP's time is benchmarked in benchmarks/bench_stages.py (LGreCoDP)
    rng = np.random.default_rng(0)
    errors = np.sort(rng.random((200, 16)), axis=1)[:, ::-1] * rng.random((200, 1))
    costs = np.sort(rng.integers(100, 100000, (200, 16)), axis=1)
    r = lgreco(errors, costs, 8)
    assert r.feasible and not r.fallback and r.cost < r.reference_cost
    assert r.choice.shape == (200,) and r.cells <= r.D
    assert r.cost == costs[np.arange(200), r.choice].sum()


# -- ladders -------------------------------------------------------------------------------------------


def test_ranges_match_the_paper():
    # Sec. 5.1: quantization and low rank [D/2, 2D] step 1; sparsification [D/10, 10D] step D/10
    assert quantization_range(4) == [2, 3, 4, 5, 6, 7, 8]
    assert quantization_range(32) == list(range(16, 65))
    assert quantization_range(5) == list(range(2, 11))
    assert powersgd_ladder(4).values == tuple(range(2, 9))
    s = sparsification_range(0.01)
    assert len(s) == 100 and s[0] == pytest.approx(0.001) and s[-1] == pytest.approx(0.1)
    assert np.allclose(np.diff(s), 0.001) and 0.01 in s
    assert sparsification_range(0.05)[-1] == 0.5 and len(sparsification_range(0.2)) == 50  # capped at 1


def test_a_span_sets_table_4s_ranges_and_accordion_keeps_its_pair():
    # Table 4 (Sec. 5.3): rank 32 -> L-GreCo [8, 64], L-GreCo + Accordion [8, 128]
    assert quantization_range(32, span=(0.25, 2)) == list(range(8, 65))
    assert powersgd_ladder(32, span=(0.25, 4)).values == tuple(range(8, 129))
    assert powersgd_ladder(32, span=(0.25, 2)).rule == "[0.25D, 2D] step 1"
    assert powersgd_ladder(32, span=(0.5, 2)).values == powersgd_ladder(32).values
    assert qsgd_ladder(4, span=(0.5, 3)).axis_values == tuple(range(2, 13))
    for bad in [(0, 2), (0.5, 0.9), (2, 4), (0.5,), "ab", (0.5, math.inf)]:
        with pytest.raises(InvalidParameterError):
            quantization_range(8, span=bad)
    with pytest.raises(InvalidParameterError, match="span"):
        ladder_around("topk", {"ratio": 0.01}, span=(0.5, 2))
    assert ladder_around("powersgd", {"rank": 8}, span=(0.25, 4)).values == tuple(range(2, 33))
    spec = CodecSpec(name="powersgd", params={"rank": 8})
    pol = make_policy("lgreco+accordion", spec, every=5, warmup=1, span=(0.25, 4))
    assert (pol.ladder.values[0], pol.ladder.values[-1]) == (2, 32)
    assert (pol.accordion.low, pol.accordion.high) == (16, 4)  # {D/2, 2D}: low compression = rank 2D


def test_qsgd_ladder_is_in_bits():
    lad = qsgd_ladder(4)
    assert lad.axis == "bits" and lad.axis_values == (2, 3, 4, 5, 6, 7, 8)
    assert lad.values == (1, 3, 7, 15, 31, 63, 127) and lad.default == 7
    for j, b in enumerate(lad.axis_values):
        assert lad.build(j).bits == b  # the codec really packs that many bits


def test_ladders_build_raw_codecs_and_check_defaults():
    from gcbench.compressors.codecs.threelc.codec import ThreeLC

    lad = threelc_ladder()
    assert lad.values[0] == 1.0 and lad.values[-1] == pytest.approx(1.9) and len(lad) == 10
    assert type(lad.build(3)) is ThreeLC  # never the error-feedback wrapper the registry adds
    assert lad.build(3).sparsity == pytest.approx(1.3)
    sk = sketchml_ladder(256)
    assert sk.values[0] == 128 and sk.values[-1] == 512 and 256 in sk.values
    assert topk_ladder(0.01).build(9).ratio == 0.01
    assert ladder_for("powersgd", 32).values == tuple(range(16, 65))
    assert ladder_for("qsgd").default == 7
    assert powersgd_ladder(4, seed=3).params(0) == {"seed": 3, "rank": 2}
    with pytest.raises(InvalidParameterError):
        Ladder("powersgd", "rank", (2, 3), 4)
    with pytest.raises(InvalidParameterError):
        Ladder("powersgd", "rank", (3, 2), 3)
    with pytest.raises(InvalidParameterError):
        ladder_for("identity")


# -- comparators -----------------------------------------------------------------------------------------


def _blobs(seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [5.0, 20.0], [20.0, 5.0]])
    pts = np.concatenate([c + 0.3 * rng.standard_normal((15, 2)) for c in centres])
    truth = np.repeat(np.arange(6), 15)
    return pts, truth


def test_kmeans_separable_clusters_match_truth_and_sklearn():
    from sklearn.cluster import KMeans

    pts, truth = _blobs()
    labels, cents = kmeans(pts, 6, seed=1)
    # same partition as the truth up to relabelling
    pairs = set(zip(labels.tolist(), truth.tolist()))
    assert len(pairs) == 6 and len({a for a, _ in pairs}) == 6
    inertia = sum(((pts[labels == j] - cents[j]) ** 2).sum() for j in range(6))
    ref = KMeans(6, n_init=10, random_state=0).fit(pts)
    assert inertia == pytest.approx(ref.inertia_, rel=1e-9)


def test_kmeans_is_deterministic_for_a_seed():
    rng = np.random.default_rng(5)
    pts = rng.random((40, 2))
    a, ca = kmeans(pts, 6, seed=7)
    b, cb = kmeans(pts, 6, seed=7)
    assert np.array_equal(a, b) and np.array_equal(ca, cb)
    assert kmeans(pts[:3], 6)[1].shape[0] == 3  # k capped at the number of distinct points


def test_cgx_compresses_big_insensitive_layers_most():
    # 6 layer groups, separable in (size, error at the reference); candidates: cost falls with j
    sizes = np.array([1e6] * 3 + [1e3] * 3 + [5e5] * 3 + [1e6 + 1] * 3 + [2e3] * 3 + [5e5 + 1] * 3)
    ref_err = np.array([0.1] * 3 + [5.0] * 3 + [2.5] * 3 + [5.0] * 3 + [0.1] * 3 + [0.1] * 3)
    K = 11
    errors = ref_err[:, None] * np.linspace(0.5, 2.0, K)[None, :]
    costs = (sizes[:, None] * np.linspace(2.0, 0.5, K)[None, :]).astype(np.int64)
    a = cgx_kmeans_choice(errors, costs, sizes, 5, k=6, seed=0)
    b = cgx_kmeans_choice(errors, costs, sizes, 5, k=6, seed=0)
    assert np.array_equal(a.choice, b.choice)
    assert a.choice[0] == 10  # biggest, least sensitive: the most compressed setting (lowest cost)
    assert a.choice[3] == 0  # small, most sensitive: the least compressed
    assert set(a.extra["settings"].tolist()) == {0, 2, 4, 6, 8, 10}
    # within a group, one setting
    assert all(len(set(a.choice[i : i + 3].tolist())) == 1 for i in range(0, 18, 3))


def test_uniform_and_evaluate():
    errors = np.array([[3.0, 1.0], [2.0, 0.5]])
    costs = np.array([[1, 4], [2, 8]])
    u = evaluate("uniform", errors, costs, uniform_choice(2, 1))
    assert u.cost == 12 and u.error == 1.5 and u.choice.tolist() == [1, 1]


def test_accordion_switches_on_a_norm_trace():
    acc = Accordion(low=64, high=16, eta=0.5)
    trace = [[10.0, 1.0], [9.8, 0.2], [3.0, 0.19], [2.9, 0.2], [2.8, 0.21]]
    got = [acc.update(n) for n in trace]
    # first period: critical (no history); layer 0 drops 69% at period 2; layer 1 drops 80% at period 1
    assert got == [[64, 64], [16, 64], [64, 16], [16, 16], [16, 16]]
    assert acc.update([2.8, 0.21], lr_decayed=True) == [64, 64]  # a learning-rate decay is critical
    acc.reset()
    assert acc.update([1.0, 1.0]) == [64, 64]
    # exactly eta counts as critical (>=), just below does not
    acc2 = Accordion(1, 0, eta=0.5)
    acc2.update([2.0, 2.0])
    assert acc2.update([1.0, 1.0000001]) == [1, 0]


# -- time objective, bucket priority, overhead ---------------------------------------------------------


def test_fit_linear_recovers_slope_and_intercept():
    x = np.array([1e5, 2e5, 4e5, 8e5, 1.6e6])
    y = 2e-9 * x + 1e-3
    f = fit_linear(x, y)
    assert f.slope == pytest.approx(2e-9) and f.intercept == pytest.approx(1e-3) and f.r2 == pytest.approx(1.0)
    assert f.predict(1e6) == pytest.approx(3e-3)
    with pytest.raises(InvalidParameterError):
        fit_linear([1.0, 1.0], [2.0, 3.0])


def test_fit_bucket_coefficients_recovers_per_bucket_prices():
    rng = np.random.default_rng(0)
    X = rng.integers(1e4, 1e6, size=(30, 3)).astype(float)
    T = np.array([1e-9, 0.0, 4e-9])  # bucket 1 hidden behind the backward pass
    y = X @ T + 2e-3
    coef, b, r2 = fit_bucket_coefficients(X, y)
    assert np.allclose(coef, T, atol=1e-13) and b == pytest.approx(2e-3) and r2 == pytest.approx(1.0)
    noisy = y + rng.normal(0, 1e-5, y.shape)
    coef2, _, _ = fit_bucket_coefficients(X, noisy)
    assert (coef2 >= 0).all()


def test_time_objective_and_bucket_priority_change_the_choice():
    # two identical layers; in bytes they tie, so the budget goes to one of them arbitrarily;
    # with bucket 1 ten times dearer per byte, the DP compresses the layer in bucket 1
    errors = np.array([[1.0, 2.0], [1.0, 2.0]])
    costs = np.array([[100, 10], [100, 10]])
    b = [0, 1]
    tc = time_costs(costs, b, [1.0, 10.0])
    assert tc.tolist() == [[100.0, 10.0], [1000.0, 100.0]]
    r = lgreco(errors, tc, 0, alpha=1.6, D=100)
    assert r.choice.tolist() == [0, 1]
    pc = bucket_priority_costs(costs, [1, 0])
    assert pc.tolist() == [[200.0, 20.0], [100.0, 10.0]]
    assert lgreco(errors, pc, 0, alpha=1.6, D=100).choice.tolist() == [1, 0]


def test_overhead_arithmetic():
    o = overhead(tables_s=0.4, dp_s=0.1, step_time_s=0.1, every=100, accumulate_s=0.0)
    assert o.fraction == pytest.approx(0.5 / 10.5)
    assert o.error_fraction == pytest.approx(0.4 / 10.5) and o.dp_fraction == pytest.approx(0.1 / 10.5)
    with pytest.raises(InvalidParameterError):
        overhead(0.1, 0.1, 0.0, 10)
