"""Edge cases of the layer-wise adaptive engine (``gcbench.compressors.adaptive``).

Boundary behaviour that the broader L-GreCo tests leave open: input validation (every bad
argument gives a typed :class:`InvalidParameterError`), the budget edges of the discretisation and
the reference fallback, the DP's tie-breaking and reconstruction, the inclusive ends of the
parameter ranges, the policies' schedule checks and received choices, Accordion's corner cases,
the CGX and global top-k comparators at their limits, and the time-objective helpers. All cases
are small hand-made tables or tensors with answers worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench.compressors.adaptive import (
    Accordion, LGreCoPolicy, cgx_kmeans_choice, discretise, error_budget, fit_bucket_coefficients, fit_linear,
    global_topk, kmeans, lgreco, overhead, powersgd_ladder, qsgd_ladder, quantization_range, sketchml_ladder,
    solve_dp, sparsification_range, time_costs,
)
from gcbench.compressors.adaptive.dp import MAX_D, MAX_TABLE
from gcbench.compressors.adaptive.ladders import Ladder, qsgd_bits_to_levels
from gcbench.compressors.adaptive.tables import accumulate
from gcbench.compressors.errors import InvalidParameterError

# -- budget and discretisation -------------------------------------------------------------------------


def test_negative_reference_indexes_are_rejected():
    """A reference index below 0 is an error, not numpy's wrap-around to the last candidate."""
    errors = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 0.5]])
    with pytest.raises(InvalidParameterError):
        error_budget(errors, -1)
    with pytest.raises(InvalidParameterError):
        lgreco(errors, np.ones((2, 3)), [0, -1])


def test_budget_multiplier_must_be_positive():
    """``alpha = 0`` (a zero budget) is rejected like a negative or infinite one."""
    errors = np.array([[3.0, 2.0]])
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InvalidParameterError):
            error_budget(errors, 0, alpha=bad)


def test_discretise_rejects_negative_errors_and_a_non_positive_cell_count():
    """Errors are norms (never negative) and the budget needs at least one cell."""
    with pytest.raises(InvalidParameterError):
        discretise(np.array([[-0.5, 1.0]]), 1.0, 10)
    with pytest.raises(InvalidParameterError):
        discretise(np.array([[0.5, 1.0]]), 1.0, 0)
    with pytest.raises(InvalidParameterError):
        discretise(np.array([[0.5, 1.0]]), 1.0, 10, rounding="nearest")


def test_cell_counts_and_cells_out_of_range_are_typed_errors_before_any_table_is_made():
    """``D`` is bounded (``MAX_D``, and ``L x (D + 1)`` by ``MAX_TABLE``): a huge one is refused, not
    allocated; negative or non-integer cells are refused by the DP itself."""
    errors, costs = np.ones((3, 2)), np.ones((3, 2))
    for bad in (MAX_D + 1, 10**10, True, 2.0):
        with pytest.raises(InvalidParameterError):
            lgreco(errors, costs, 0, D=bad)
        with pytest.raises(InvalidParameterError):
            solve_dp(np.zeros((3, 2), dtype=np.int64), costs, bad)
    with pytest.raises(InvalidParameterError, match="table"):
        solve_dp(np.zeros((MAX_TABLE // MAX_D + 1, 1), dtype=np.int64), np.ones((MAX_TABLE // MAX_D + 1, 1)), MAX_D)
    with pytest.raises(InvalidParameterError, match="non-negative"):
        solve_dp(np.array([[-3, 1]]), np.array([[1.0, 2.0]]), 10)
    with pytest.raises(InvalidParameterError, match="integer"):
        solve_dp(np.array([[0.5, 1.0]]), np.array([[1.0, 2.0]]), 10)
    assert lgreco(errors, costs, 0, D=MAX_D).feasible  # the bound itself is allowed


def test_a_reference_whose_error_is_not_finite_is_not_feasible():
    """The docstring's case: a non-finite reference error bounds nothing, so unless every layer has a
    zero-error candidate nothing is feasible, and the fallback does not call the reference feasible."""
    r = lgreco(np.array([[np.inf, 1.0], [1.0, 0.5]]), np.array([[1.0, 2.0], [1.0, 2.0]]), 0)
    assert not r.feasible and r.choice.tolist() == [0, 0]


def test_floor_rounding_absorbs_float_noise_below_a_whole_cell():
    """``0.29 / 1.0 * 100`` is 28.999999999999996 in floats; floor rounding still counts 29 cells."""
    assert discretise(np.array([[0.29]]), 1.0, 100, "floor").tolist() == [[29]]
    assert discretise(np.array([[0.29]]), 1.0, 100, "ceil").tolist() == [[29]]


# -- the dynamic programme -----------------------------------------------------------------------------


def test_equal_cost_candidates_go_to_the_lowest_index():
    """Two candidates of one layer with the same cells and cost: the first one is chosen."""
    choice, cost, used = solve_dp(np.array([[2, 2, 2]]), np.array([[5.0, 5.0, 5.0]]), 4)
    assert choice.tolist() == [0] and cost == 5.0 and used == 2


def test_among_equal_total_costs_the_least_error_wins():
    """When two settings cost the same, the one using fewer error cells is returned."""
    choice, cost, used = solve_dp(np.array([[3, 1]]), np.array([[5.0, 5.0]]), 4)
    assert choice.tolist() == [1] and cost == 5.0 and used == 1


def test_dp_handles_more_candidates_than_an_int16_index_holds():
    """40000 candidates: the cheapest one (the last) is reported with its real index."""
    K = 40000
    cells = np.zeros((1, K), dtype=np.int64)
    costs = np.arange(K, 0, -1, dtype=np.float64)[None, :]
    choice, cost, used = solve_dp(cells, costs, 1)
    assert choice.tolist() == [K - 1] and cost == 1.0 and used == 0


# -- the reference fallback ----------------------------------------------------------------------------


def _rounding_pushes_the_reference_past_the_budget():
    """Three layers whose reference errors are 1/3 each (budget 1.0, D = 10): ceil gives 4 cells each
    (12 > 10), so the DP must move one layer to the costlier candidate 1 (2 cells, 0.2 error)."""
    errors = np.array([[1 / 3, 0.2]] * 3)
    costs = np.array([[10, 20]] * 3)
    return errors, costs


def test_reference_that_exactly_uses_the_budget_is_the_fallback():
    """The reference's error equals the budget (alpha = 1): it fits, is cheaper, and is returned."""
    errors, costs = _rounding_pushes_the_reference_past_the_budget()
    r = lgreco(errors, costs, 0, D=10)
    assert r.fallback and r.feasible
    assert r.choice.tolist() == [0, 0, 0] and r.cost == 30
    assert r.cells == 12  # the reference's own discretised error, beyond D


def test_without_fallback_the_dps_choice_is_kept_even_when_dearer():
    """``fallback_to_reference=False`` returns Algorithm 1's answer alone."""
    errors, costs = _rounding_pushes_the_reference_past_the_budget()
    r = lgreco(errors, costs, 0, D=10, fallback_to_reference=False)
    assert not r.fallback and r.feasible
    assert r.choice.tolist().count(1) == 1 and r.cost == 40 and r.cells == 10


def test_no_fallback_when_the_dp_ties_the_reference():
    """At equal cost the DP's choice (here: less error) stands and no fallback is reported."""
    r = lgreco(np.array([[1.0, 0.5]]), np.array([[10, 10]]), 0, D=10)
    assert not r.fallback
    assert r.choice.tolist() == [1] and r.cost == 10 and r.error == 0.5 and r.cells == 5


def test_a_budget_below_every_setting_is_reported_infeasible():
    """With ``alpha < 1`` nothing may fit: the result says so and hands back the reference."""
    r = lgreco(np.array([[1.0, 2.0], [1.0, 3.0]]), np.array([[10, 5], [10, 5]]), 0, alpha=0.5, D=10)
    assert not r.feasible and not r.fallback
    assert r.choice.tolist() == [0, 0] and r.cost == 20 and r.error == 2.0 > r.budget == 1.0


# -- ladders -------------------------------------------------------------------------------------------


def test_axis_values_must_align_with_the_values():
    """A ladder whose paper-axis labels are fewer than its values is rejected."""
    with pytest.raises(InvalidParameterError):
        Ladder("qsgd", "levels", (1, 3, 7), 3, axis="bits", axis_values=(2, 3))


def test_a_span_of_exactly_one_keeps_that_end_of_the_range():
    """``gamma = 1`` and ``beta = 1`` are allowed: the range then starts or ends at the default."""
    assert quantization_range(4, span=(1, 1)) == [4]
    assert quantization_range(4, span=(1.0, 2.0)) == [4, 5, 6, 7, 8]
    assert quantization_range(4, span=(0.5, 1.0)) == [2, 3, 4]


def test_density_one_is_a_valid_sparsification_default():
    """Density 1 (send everything) is inside ``(0, maximum]``: ladder 0.1, 0.2, ..., 1.0."""
    s = sparsification_range(1.0)
    assert len(s) == 10 and s[0] == pytest.approx(0.1) and s[-1] == 1.0


def test_qsgd_bits_stop_at_sixteen():
    """QSGD's bit ladder is clipped to 16 bits, and 17 bits is no valid QSGD width."""
    assert qsgd_bits_to_levels(16) == 2**15 - 1
    with pytest.raises(InvalidParameterError):
        qsgd_bits_to_levels(17)
    lad = qsgd_ladder(8)
    assert lad.axis_values == tuple(range(4, 17)) and lad.values[-1] == 2**15 - 1


def test_sketchml_ladder_never_goes_below_two_buckets():
    """The smallest quantile-bucket count on a SketchML ladder is 2."""
    assert sketchml_ladder(2).values[0] == 2
    assert sketchml_ladder(3).values[0] == 2


# -- tables --------------------------------------------------------------------------------------------


def test_accumulate_requires_the_same_layers_every_step():
    """A step that adds a layer (or drops one) cannot be summed with the others."""
    a = {"w": torch.ones(2)}
    with pytest.raises(InvalidParameterError):
        accumulate([a, {"w": torch.ones(2), "extra": torch.ones(2)}])
    with pytest.raises(InvalidParameterError):
        accumulate([{"w": torch.ones(2), "extra": torch.ones(2)}, a])


# -- policies ------------------------------------------------------------------------------------------


def test_policy_schedule_parameters_are_checked():
    """``every >= 1``, ``warmup >= 0`` and ``accumulate >= 1`` are required."""
    lad = powersgd_ladder(4)
    for kw in ({"every": 0}, {"warmup": -1}, {"accumulate": 0}):
        with pytest.raises(InvalidParameterError):
            LGreCoPolicy(lad, **kw)


def test_only_the_deciding_rank_accumulates():
    """A rank other than ``src`` keeps no accumulation buffer."""
    pol = LGreCoPolicy(powersgd_ladder(4), every=4, accumulate=2, rank=1)
    for s in range(4):
        pol.step(s, {"w": torch.ones(4, 4)})
    assert pol.buffer == {} and pol.buffered_steps == 0


def test_a_received_choice_outside_the_ladder_is_rejected():
    """The broadcast may not hand out the index ``len(ladder)`` (one past the last candidate)."""
    lad = powersgd_ladder(4)
    pol = LGreCoPolicy(lad, every=2, accumulate=1, rank=1, layers=["w"])
    pol.step(1, {"w": torch.ones(4, 4)})
    with pytest.raises(InvalidParameterError):
        pol.step(2, {"w": torch.ones(4, 4)}, broadcast=lambda c: np.array([len(lad)]))


def test_a_saved_choice_outside_the_ladder_is_rejected():
    """``load_state_dict`` refuses a per-layer index equal to the ladder's length."""
    lad = powersgd_ladder(4)
    pol = LGreCoPolicy(lad, layers=["w"], rank=0)
    with pytest.raises(InvalidParameterError):
        pol.load_state_dict({"keys": ["w"], "choice": [len(lad)]})
    pol.load_state_dict({"keys": ["w"], "choice": [len(lad) - 1]})
    assert pol.values() == [lad.values[-1]]


def test_bind_rank_does_not_override_an_explicit_rank():
    """A policy built with ``rank=1`` stays rank 1 (not the deciding rank) after ``bind_rank(0)``."""
    pol = LGreCoPolicy(powersgd_ladder(4), rank=1)
    pol.bind_rank(0)
    assert pol.rank == 1 and not pol.leader
    free = LGreCoPolicy(powersgd_ladder(4))
    free.bind_rank(2)
    assert free.rank == 2


def test_priority_objective_weights_each_layer_by_its_bucket_position():
    """With ``objective="priority"`` the DP runs on bytes x (bucket + 1)."""
    torch.manual_seed(0)
    lad = powersgd_ladder(4)
    g = {"a": torch.randn(16, 16), "b": torch.randn(16, 16)}
    pol = LGreCoPolicy(lad, every=2, accumulate=1, objective="priority", rank=0)
    pol.set_buckets({0: ["a"], 3: ["b"]})
    pol.step(1, g)
    pol.step(2, g)
    t = pol.last_tables
    want = lgreco(t.errors, t.costs * np.array([[1.0], [4.0]]), lad.reference_index)
    assert pol.choice.tolist() == want.choice.tolist()
    assert pol.last_result.cost == pytest.approx(want.cost)


def test_a_layer_missing_from_the_buffer_keeps_the_current_choice():
    """If a layer never received a gradient in the accumulation window, the decision keeps the choice."""
    lad = powersgd_ladder(4)
    pol = LGreCoPolicy(lad, every=2, accumulate=1, layers=["a", "b"], rank=0)
    pol.step(1, {"a": torch.randn(8, 8)})  # "b" has no gradient this step
    out = pol.step(2, {"a": torch.randn(8, 8), "b": torch.randn(8, 8)})
    assert pol.choice.tolist() == [lad.reference_index] * 2
    assert out == {"a": lad.params(lad.reference_index), "b": lad.params(lad.reference_index)}


# -- comparators -----------------------------------------------------------------------------------------


def test_accordion_treats_a_zero_previous_norm_as_critical():
    """A layer whose previous norm was 0 has an infinite relative change: critical."""
    acc = Accordion(low=8, high=2, eta=0.5)
    acc.update([0.0, 1.0])
    assert acc.update([0.1, 1.0]) == [8, 2]


def test_accordion_restarts_when_the_layer_count_changes():
    """Norms of a different number of layers have no history to compare with: all critical."""
    acc = Accordion(low=8, high=2)
    acc.update([1.0, 1.0])
    assert acc.update([1.0, 1.0]) == [2, 2]
    assert acc.update([1.0, 1.0, 1.0]) == [8, 8, 8]


def test_accordion_threshold_must_be_positive():
    """``eta = 0`` would make every period critical: rejected."""
    with pytest.raises(InvalidParameterError):
        Accordion(1, 0, eta=0.0)


def test_kmeans_caps_the_clusters_at_the_distinct_points():
    """Six points at two locations give two clusters, not six."""
    pts = np.array([[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 3)
    labels, cents = kmeans(pts, 6, seed=0)
    assert cents.shape == (2, 2)
    assert len(set(labels[:3].tolist())) == 1 and len(set(labels[3:].tolist())) == 1 and labels[0] != labels[3]


def test_cgx_puts_identical_layers_in_one_cluster_at_the_middle_setting():
    """Layers identical in size and error form one cluster, which gets the middle candidate."""
    K = 5
    errors = np.tile(np.linspace(0.5, 2.0, K), (4, 1))
    costs = np.tile(np.linspace(200, 40, K), (4, 1)).astype(np.int64)
    a = cgx_kmeans_choice(errors, costs, [100] * 4, 2, k=6)
    assert a.choice.tolist() == [K // 2] * 4
    assert np.isfinite(a.extra["centroids"]).all()


def test_global_topk_at_density_one_sends_everything():
    """Density 1 is allowed and reconstructs every layer exactly."""
    g = {"a": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), "b": torch.randn(5)}
    r = global_topk(g, 1.0)
    assert r.counts.tolist() == [12, 5] and r.error == 0.0
    with pytest.raises(InvalidParameterError):
        global_topk(g, 1.5)


# -- timing ----------------------------------------------------------------------------------------------


def test_bucket_fit_needs_more_samples_than_buckets():
    """``buckets + 1`` unknowns (with the intercept) need at least ``buckets + 1`` samples."""
    X = np.array([[1.0, 2.0], [3.0, 1.0]])
    with pytest.raises(InvalidParameterError):
        fit_bucket_coefficients(X, [1.0, 2.0])


def test_time_costs_check_bucket_indexes():
    """A negative bucket, or one with no coefficient, is a typed error (not an IndexError)."""
    costs = np.array([[10, 5], [20, 8]])
    with pytest.raises(InvalidParameterError):
        time_costs(costs, [0, -1], [1.0, 2.0])
    with pytest.raises(InvalidParameterError):
        time_costs(costs, [0, 2], [1.0, 2.0])
    assert time_costs(costs, [0, 1], [1.0, 2.0]).tolist() == [[10.0, 5.0], [40.0, 16.0]]


def test_overhead_needs_at_least_one_step_per_decision():
    """``every = 0`` is rejected."""
    with pytest.raises(InvalidParameterError):
        overhead(0.1, 0.1, 0.1, 0)


def test_fit_linear_rejects_non_finite_samples():
    """A NaN or infinite timing sample is a typed error."""
    with pytest.raises(InvalidParameterError):
        fit_linear([1.0, 2.0, 3.0], [1.0, float("nan"), 3.0])
    with pytest.raises(InvalidParameterError):
        fit_linear([1.0, float("inf"), 3.0], [1.0, 2.0, 3.0])


def test_error_fraction_counts_the_accumulation_time():
    """Table 1's bracketed error share includes the accumulation of gradients."""
    o = overhead(tables_s=0.3, dp_s=0.1, step_time_s=0.1, every=10, accumulate_s=0.1)
    assert o.error_fraction == pytest.approx(0.4 / 1.5) and o.dp_fraction == pytest.approx(0.1 / 1.5)
