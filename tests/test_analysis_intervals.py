"""The report shows each speedup's interval and verdict: error bars in the figures, marks beside same/ambiguous
cells, hatched simulated cells, and the interval and verdict columns beside each speedup in the tables' CSVs."""

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from analysis import figures, plotting, report, tables
from wavealign import metrics


def _row(hardware: str, stages: str, reorderer: str, kernel_ms: float, reorder_ms: float, simulated: bool,
         net: tuple[float, float, float], kernel: tuple[float, float, float]) -> dict:
    """One finished cell whose speedups over its group's original are ``kernel`` and ``net`` (point, low, high)."""
    if simulated:  # a prediction: no interval, its point decides
        kernel, net = (kernel[0], math.nan, math.nan), (net[0], math.nan, math.nan)
    return {"hardware": hardware, "backend": "reference", "method": "planted", "num_heads": 2,
            "seq_len_tokens": 2048, "density": 0.3, "status": "done", "simulated": simulated,
            "group_id": hardware, "stages": stages, "reorderer": reorderer, "skip": "force",
            "kernel_ms_median": kernel_ms, "reorder_ms": reorder_ms, "total_ms": kernel_ms + reorder_ms,
            "speedup_vs_original": kernel[0], "speedup_ci_low": kernel[1], "speedup_ci_high": kernel[2],
            "verdict": metrics.verdict(kernel[1], kernel[2], point=kernel[0]),
            "net_speedup_vs_original": net[0], "net_speedup_ci_low": net[1], "net_speedup_ci_high": net[2],
            "net_verdict": metrics.verdict(net[1], net[2], point=net[0])}


@pytest.fixture
def frame() -> pd.DataFrame:
    """A measured CPU group (random: not significant, ambiguous; WaveAlign: faster) and a simulated H100 group."""
    one = (1.0, math.nan, math.nan)
    return pd.DataFrame([
        _row("cpu", "none", "identity", 10.0, 0.0, False, one, one),
        _row("cpu", "both", "random", 10.1, 0.1, False, (0.98, 0.94, 1.03), (0.99, 0.95, 1.04)),
        _row("cpu", "both", "wavealign", 8.0, 0.2, False, (1.20, 1.15, 1.26), (1.25, 1.2, 1.3)),
        _row("h100", "none", "identity", 5.0, 0.0, True, one, one),
        _row("h100", "both", "random", 5.1, 0.1, True, (0.96, 0, 0), (0.98, 0, 0)),
        _row("h100", "both", "wavealign", 4.0, 0.2, True, (1.19, 0, 0), (1.25, 0, 0)),
    ])


def _error_segments(ax) -> list:
    """The error bar segments drawn in ``ax`` (one per point with an interval)."""
    return [seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()]


def test_table2_carries_each_speedups_interval_and_verdict_beside_it_and_none_for_a_prediction(frame):
    table = tables.table2(frame).set_index(["hardware", "order"])
    columns = list(table.columns)
    for prefix, point in (("", "speedup"), ("net_", "speedup_with_overhead")):
        at = columns.index(point)
        assert columns[at + 1:at + 4] == [f"{prefix}speedup_ci_low", f"{prefix}speedup_ci_high", f"{prefix}verdict"]
    assert table.loc[("cpu", "Random+S2"), ["net_speedup_ci_low", "net_verdict"]].tolist() == [0.94, "ambiguous"]
    assert table.loc[("cpu", "WaveAlign"), "speedup"] == 1.25  # the record's paired speedup, not a ratio of medians
    simulated = table.loc[("h100", "WaveAlign")]
    assert math.isnan(simulated["speedup_ci_low"]) and simulated["verdict"] == "faster" + metrics.PREDICTED


def test_table2_figure_draws_intervals_marks_an_ambiguous_bar_and_hatches_simulated_panels(frame):
    fig = figures.reorderer_comparison(frame)
    measured, simulated = (ax for ax in fig.axes if ax.get_visible())
    assert "simulated" not in measured.get_title() and "simulated" in simulated.get_title()
    assert len(_error_segments(measured)) == 4  # net and kernel interval of both reordered orders
    assert _error_segments(simulated) == []  # a prediction has no spread to draw
    (mark,) = measured.texts  # random's bar, not WaveAlign's: its mark, right of where its whisker ends
    assert mark.get_text() == "?" and mark.xy[0] == pytest.approx(1.03)
    assert plotting.VERDICT_KEY in [t.get_text() for t in fig.texts][-1]  # what "?" means, said once under it
    assert all(p.get_hatch() for p in simulated.patches) and not any(p.get_hatch() for p in measured.patches)
    random_bar = measured.patches[[t.get_text() for t in measured.get_yticklabels()].index("Random+S2")]
    low, high = sorted(seg[:, 0].tolist() for seg in _error_segments(measured) if seg[0, 1] == random_bar.get_y()
                       + random_bar.get_height() / 2)[0]
    assert (low, high) == pytest.approx((0.94, 1.03))
    plt.close(fig)


def test_adaptive_skip_draws_the_net_speedups_interval_as_latency_over_the_original(frame):
    fig = figures.adaptive_skip(frame)
    segments = [seg for ax in fig.axes for seg in _error_segments(ax)]
    spans = [y for span in sorted(sorted(seg[:, 1].tolist()) for seg in segments) for y in span]
    expected = sorted([[1 / 1.03, 1 / 0.94], [1 / 1.26, 1 / 1.15]] * 2)  # two panels (length, density) of the CPU
    assert spans == pytest.approx([y for span in expected for y in span])
    marks = [t for ax in fig.axes for t in ax.texts if t.get_text() == "?"]
    assert len(marks) == 2 and all(t.xy[1] == pytest.approx(1 / 0.94) for t in marks)  # above the whisker's top
    plt.close(fig)


def test_a_latency_bar_s_whiskers_are_its_median_s_95_percent_interval_as_every_speedup_s_are():
    """Ten reps: the 2nd and 9th smallest bound the median at 95 % (P(Binomial(10, 1/2) < 2) = 11/1024 <= 2.5 %,
    P(< 3) = 56/1024 > 2.5 %); five reps are too few for a 95 % interval (2/32 > 5 %), so none is drawn."""
    reps = [10.0, 3.0, 7.0, 1.0, 9.0, 2.0, 8.0, 4.0, 6.0, 5.0]
    assert figures.median_interval(reps) == (5.5, 2.0, 9.0)
    median, low, high = figures.median_interval([3.0, 1.0, 2.0, 5.0, 4.0])
    assert median == 3.0 and math.isnan(low) and math.isnan(high)
    row = _row("cpu", "none", "identity", 5.5, 0.0, False, (1.0, math.nan, math.nan), (1.0, math.nan, math.nan))
    rows = figures.kernel_latency_rows(pd.DataFrame([{**row, "variant": "original", "kernel_ms_reps": reps}]))
    assert rows[["kernel_ms", "kernel_ms_ci_low", "kernel_ms_ci_high"]].values.tolist() == [[5.5, 2.0, 9.0]]
    assert "95 % CI" in figures.LATENCY_AXIS


def _skip_frame() -> pd.DataFrame:
    """A CPU group and a simulated H100 group, each an original and an always-reordered cell the h100 profile would
    have skipped (``skip_reorder`` False), the CPU's under its ``cpu_profile``, h100."""
    one = (1.0, math.nan, math.nan)
    cells = []
    for hardware, simulated, net in (("cpu", False, (1.02, 0.95, 1.09)), ("h100", True, (0.97, 0, 0))):
        for stages, speedup in (("none", one), ("both", net)):
            cell = _row(hardware, stages, "wavealign", 10.0, 0.1, simulated, speedup, speedup)
            cells.append({**cell, "profile_hardware": "h100", "skip_reorder": stages == "none"})
    return pd.DataFrame(cells)


def test_fig13_applies_no_gpu_skip_profile_to_cpu_points():
    rows = figures.adaptive_skip_rows(_skip_frame()).set_index("hardware")
    assert not rows.loc["cpu", "skipped"] and rows.loc["cpu", "skip_profiles"] == ""
    assert rows.loc["h100", "skipped"] and rows.loc["h100", "skip_profiles"] == "h100"
    fig = figures.draw_adaptive_skip(rows.reset_index())
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("cpu (no skip profile") for t in titles)
    assert any(t.startswith("h100 (skip profile: h100)") for t in titles)
    plt.close(fig)


def test_a_log_axis_across_a_narrow_range_labels_ticks_above_1_too():
    fig = figures.draw_adaptive_skip(figures.adaptive_skip_rows(_skip_frame()))
    fig.canvas.draw()
    cpu = next(ax for ax in fig.axes if ax.get_title().startswith("cpu"))
    labelled = [float(t.get_text()) for t in cpu.get_yticklabels() if t.get_text()]
    low, high = cpu.get_ylim()
    assert any(value > 1 for value in labelled) and any(value < 1 for value in labelled), labelled
    assert all(low <= value <= high for value in labelled)
    plt.close(fig)


def test_report_csv_shows_a_dash_where_a_prediction_has_no_interval(frame, tmp_path):
    files = report.write_report(frame, tmp_path)
    csv = pd.read_csv(files.tables["table2_reorderer_comparison"], keep_default_na=False)
    simulated = csv[csv["simulated"].astype(str) == "True"]
    assert set(simulated["net_speedup_ci_high"]) == {report.NO_VALUE}
    measured = csv[(csv["simulated"].astype(str) == "False") & (csv["order"] == "WaveAlign")]
    assert measured[["net_speedup_ci_low", "net_verdict"]].values.tolist() == [["1.15", "faster"]]
    assert "net speedup ci low" in files.html.read_text()


def test_table2_row_of_several_cells_shows_the_one_rule_s_mean_interval_and_verdict_not_mixed(frame):
    cpu = frame[frame["hardware"] == "cpu"]
    again = cpu.assign(group_id="cpu-seed1", speedup_vs_original=cpu["speedup_vs_original"] * 0.9)
    again["verdict"] = [metrics.verdict(lo, hi, point=p) for lo, hi, p in
                        zip(again["speedup_ci_low"], again["speedup_ci_high"], again["speedup_vs_original"],
                            strict=True)]
    table = tables.table2(pd.concat([cpu, again], ignore_index=True)).set_index("order")
    expected = metrics.aggregate([1.25, 1.25 * 0.9], [1.2, 1.2], [1.3, 1.3])
    row = table.loc["WaveAlign"]
    assert row["cells"] == 2 and row["speedup"] == pytest.approx(expected.point)
    assert (row["speedup_ci_low"], row["speedup_ci_high"]) == pytest.approx((expected.low, expected.high))
    assert row["verdict"] == expected.verdict == "ambiguous"
    assert table.loc["Original", "verdict"] == metrics.BASELINE
