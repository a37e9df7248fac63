"""wavealign.metrics: the speedup, its interval and verdict, and the FLOP figures, each defined once."""

import math

import numpy as np
import pytest

from wavealign import metrics


def test_paired_ratio_of_constant_ratios_is_that_ratio_with_no_width():
    r = metrics.paired_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert r.point == pytest.approx(2.0) and r.low == pytest.approx(2.0) and r.high == pytest.approx(2.0)
    assert r.samples == 3 and r.outliers == 0


def test_paired_ratio_interval_is_student_t_on_log_ratios():
    ratios = np.array([1.10, 1.12, 1.08, 1.11, 1.09])
    r = metrics.paired_ratio(list(ratios), [1.0] * 5)
    logs = np.log(ratios)
    reach = 2.776 * logs.std(ddof=1) / math.sqrt(5)  # t_{0.975, 4}
    assert r.point == pytest.approx(math.exp(logs.mean()))
    assert (r.low, r.high) == pytest.approx((math.exp(logs.mean() - reach), math.exp(logs.mean() + reach)))
    assert r.low < r.point < r.high


def test_paired_ratio_cancels_drift_that_falls_on_both_launches_of_a_rep():
    drift = np.linspace(1.0, 1.3, 20)  # the clock sagging over the run: both launches of a rep slow alike
    r = metrics.paired_ratio(list(1.1 * drift), list(drift))
    assert r.point == pytest.approx(1.1) and r.half_width_pct == pytest.approx(0.0, abs=1e-9)


def test_an_outlying_rep_is_dropped_and_counted():
    base = [1.0] * 9 + [3.0]  # one rep hit by a context switch
    r = metrics.paired_ratio(base, [1.0 + 0.001 * i for i in range(10)])
    assert r.outliers == 1 and r.samples == 9 and r.point < 1.0


def test_net_ratio_counts_the_extra_cost_on_every_rep():
    assert metrics.paired_ratio([3.0, 3.0], [1.0, 1.0], extra_ms=0.5).point == pytest.approx(2.0)


def test_one_pair_gives_a_point_without_an_interval():
    r = metrics.paired_ratio([2.0], [1.0])
    assert r.point == 2.0 and math.isnan(r.low) and math.isnan(r.high)


def test_independent_ratio_is_the_ratio_of_geometric_means_with_welch_interval():
    a, b = [2.0, 2.2, 1.8, 2.1], [1.0, 1.1, 0.9, 1.05]
    r = metrics.independent_ratio(a, b)
    assert r.point == pytest.approx(math.exp(np.log(a).mean() - np.log(b).mean()))
    assert r.low < r.point < r.high
    # the interval is wider than a paired one on the same numbers would be: the two samples' spreads add
    assert (r.high - r.low) > (metrics.paired_ratio(a, b).high - metrics.paired_ratio(a, b).low)


@pytest.mark.parametrize(("low", "high", "expected"), [
    (1.02, 1.05, "faster"), (0.95, 0.98, "slower"), (0.995, 1.004, "same"),
    (1.005, 1.03, "ambiguous"), (0.97, 1.0, "ambiguous"), (0.9, 1.1, "ambiguous")])
def test_verdict_rule(low, high, expected):
    assert metrics.verdict(low, high, tolerance=0.01) == expected


def test_a_prediction_is_judged_on_its_point_and_says_so():
    assert metrics.verdict(math.nan, math.nan, point=1.2) == "faster" + metrics.PREDICTED
    assert metrics.verdict(math.nan, math.nan) == "-"


def test_bad_inputs_are_refused_with_the_value():
    with pytest.raises(ValueError, match="tolerance"):
        metrics.verdict(1.0, 1.0, tolerance=1.5)
    with pytest.raises(ValueError, match="> 0"):
        metrics.paired_ratio([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="equal"):
        metrics.paired_ratio([1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="density"):
        metrics.attention_flops(8, 8, 4, 2, density=1.5)


def test_t_quantile_meets_the_normal_quantile_from_the_table_on():
    assert metrics.t_quantile(4) == 2.776
    assert metrics.t_quantile(31) == pytest.approx(2.0395, abs=2e-3)
    assert metrics.t_quantile(10_000) == pytest.approx(1.96, abs=1e-3)


def test_flops_and_tflops_take_arrays_as_well_as_floats():
    assert metrics.attention_flops(1024, 1024, 128, 40, density=0.25) == 4.0 * 1024 * 1024 * 128 * 40 * 0.25
    flops = metrics.attention_flops(np.array([1024, 2048]), np.array([1024, 2048]), 128, 1)
    assert metrics.tflops(flops, np.array([1.0, 4.0])) == pytest.approx(flops / 1e-3 / 1e12 / np.array([1.0, 4.0]))
    assert metrics.gap_to_bound(10.0, 5.0, 0.25) == pytest.approx(2.0)
    assert metrics.operational_intensity(1e12, 4e9) == 250.0


def test_interval_text():
    assert metrics.interval_text(1.1, 1.05, 1.15) == "1.100 [1.050, 1.150]"
    assert metrics.interval_text(1.1, math.nan, math.nan) == "1.100"
    assert metrics.interval_text(math.nan, math.nan, math.nan) == "-"


NAN = math.nan


def test_one_cell_shows_its_own_interval_and_the_verdict_it_gives():
    shown = metrics.aggregate([1.1], [1.08], [1.12])
    assert (shown.point, shown.low, shown.high, shown.verdict, shown.cells) == (1.1, 1.08, 1.12, "faster", 1)


def test_several_cells_show_their_geometric_mean_with_a_t_interval_across_their_logs():
    points = [1.10, 1.12, 1.14]
    shown = metrics.aggregate(points, [1.0, 1.0, 1.0], [1.3, 1.3, 1.3])  # the cells' own intervals play no part
    logs = np.log(points)
    reach = 4.303 * logs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert shown.point == pytest.approx(math.exp(logs.mean()))
    assert (shown.low, shown.high) == pytest.approx((math.exp(logs.mean() - reach), math.exp(logs.mean() + reach)))
    assert shown.verdict == metrics.verdict(shown.low, shown.high) == "faster" and shown.cells == 3


def test_cells_that_each_are_clear_but_disagree_are_ambiguous_together_and_none_is_dropped():
    shown = metrics.aggregate([1.2, 0.9, 1.2, 1.2, 1.2], [1.18, 0.88, 1.18, 1.18, 1.18],
                              [1.22, 0.92, 1.22, 1.22, 1.22])
    assert shown.cells == 5 and shown.verdict == "ambiguous"


def test_a_measured_cell_without_an_interval_has_no_verdict_and_a_prediction_is_judged_by_its_point():
    assert metrics.aggregate([1.3], [NAN], [NAN]).verdict == metrics.NO_VERDICT
    predicted = metrics.aggregate([1.2, 1.3], [NAN, NAN], [NAN, NAN], predicted=True)
    assert predicted.point == pytest.approx(math.sqrt(1.2 * 1.3)) and math.isnan(predicted.low)
    assert predicted.verdict == "faster" + metrics.PREDICTED


def test_the_baseline_s_cells_show_their_point_and_no_verdict_of_their_own():
    shown = metrics.aggregate([1.0, 1.0], [NAN, NAN], [NAN, NAN], baseline=True)
    assert (shown.point, shown.verdict) == (1.0, metrics.BASELINE) and math.isnan(shown.high)


def test_cells_without_a_point_are_left_out_and_none_left_means_no_verdict():
    assert metrics.aggregate([NAN, 1.1], [NAN, 1.05], [NAN, 1.15]).verdict == "faster"
    empty = metrics.aggregate([NAN], [NAN], [NAN])
    assert (empty.cells, empty.verdict) == (0, metrics.NO_VERDICT) and math.isnan(empty.point)


def test_the_recorded_tolerance_is_the_first_finite_one_else_the_default():
    assert metrics.recorded_tolerance([None, NAN, 0.02, 0.05]) == 0.02
    assert metrics.recorded_tolerance([None]) == metrics.TOLERANCE


def test_a_cell_s_verdict_is_ambiguous_where_its_reps_spread_past_the_limit_whatever_its_interval_says():
    assert metrics.verdict(1.10, 1.20) == "faster"
    assert metrics.verdict(1.10, 1.20, spreads_pct=(metrics.SPREAD_LIMIT_PCT + 1, 5.0)) == "ambiguous"
    assert metrics.verdict(1.10, 1.20, spreads_pct=(metrics.SPREAD_LIMIT_PCT - 1, math.nan)) == "faster"
    # a prediction has no reps: its point decides
    assert metrics.verdict(math.nan, math.nan, point=1.2, spreads_pct=(99.0,)) == "faster" + metrics.PREDICTED


def test_a_sweep_row_s_verdict_follows_the_spread_rule():
    from wavealign.pipeline import _speedups
    from wavealign.records import AttentionSpec, Cell, CellResult, InputSpec, LaunchGeometry, MeasurerSpec

    def cell(variant: str) -> Cell:
        return Cell(cell_id=variant, group_id="g", hardware="cpu",
                    inputs=InputSpec(workload="w", method="random", seq_len_tokens=256, num_heads=1, head_dim=32),
                    attention=AttentionSpec(variant=variant, stages="none" if variant == "original" else "both",
                                            skip="force", backend="reference",
                                            geometry=LaunchGeometry("h100", 128, 132)),
                    measurer=MeasurerSpec())

    calm = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95]
    bursts = [10.0, 15.0, 10.1, 15.2, 9.9, 14.9]  # a busy host: both launches of a round slowed alike
    for original, scale, expected in ((calm, 0.9, "faster"), (bursts, 0.9, "ambiguous")):
        # the paired ratio is 1.11 in every round either way: a tight interval; only the spread tells them apart
        results = [CellResult(cell_id=v, group_id="g", status="done", kernel_ms_median=float(np.median(r)),
                              kernel_ms_reps=r, paired=True, reorder_ms=0.0)
                   for v, r in (("original", original), ("wavealign", [t * scale for t in original]))]
        _speedups([cell("original"), cell("wavealign")], results)
        assert results[1].speedup_ci_low > 1.1
        assert results[1].verdict == expected
