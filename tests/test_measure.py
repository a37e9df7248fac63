"""Measurement: parsing Nsight Compute's CSV (format captured from a real run on the H200), the ncu
command line, timing summaries and the derived figures."""

import csv
import io

import pytest
import torch

from wavealign.instruments import ncu, timing

# `ncu --import R --csv --page raw --print-units base` on the H200 (ncu 2025.3, driver 580.159.04), trimmed
# to the identity columns and the collected metrics (the real page also carries ~300 device__attribute_*
# columns). Every field is quoted and integers carry thousands separators. Rows: the triton kernel and
# flex's kernel at 75,600 tokens x 2 heads.
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "device__attribute_display_name", "lts__t_sector_hit_rate.pct",
          "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
          "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
          "launch__occupancy_limit_warps", "launch__registers_per_thread",
          "sm__warps_active.avg.pct_of_peak_sustained_active"]
UNITS = [""] * 12 + ["%", "byte", "byte", "%", "%", "ns", "block", "block", "block", "block", "register/thread", "%"]
ROWS = [
    ["0", "828", "python3.12", "127.0.0.1", "_block_sparse_attn_fwd", "1", "7", "(256, 1, 1)", "(591, 2, 1)", "0",
     "9.0", "NVIDIA H200", "87.26", "662,599,936", "37,442,816", "4.14", "39.34", "3,509,760", "32", "1", "1", "8",
     "164", "12.50"],
    ["4", "828", "python3.12", "127.0.0.1", "triton_tem_fused_flex_attention_0", "1", "7", "(256, 1, 1)",
     "(591, 1, 2)", "0", "9.0", "NVIDIA H200", "87.07", "732,609,280", "38,248,448", "4.68", "40.25", "3,424,320",
     "32", "1", "1", "8", "198", "12.50"],
]


def _csv(header=HEADER, units=UNITS, rows=ROWS) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([header, units, *rows])
    return out.getvalue()


CAPTURED = _csv()


def test_captured_csv_gives_one_record_per_kernel_in_order():
    records = ncu.parse_raw_csv(CAPTURED)
    assert [r.kernel_name for r in records] == ["_block_sparse_attn_fwd", "triton_tem_fused_flex_attention_0"]


def test_thousands_separators_and_base_units_are_read():
    first = ncu.parse_raw_csv(CAPTURED)[0]
    assert first.dram_read_bytes == 662_599_936
    assert first.duration_ms == pytest.approx(3.50976)
    assert first.l2_hit_pct == pytest.approx(87.26)


def test_residency_is_the_least_occupancy_limit():
    records = ncu.parse_raw_csv(CAPTURED)
    assert [r.ctas_per_sm for r in records] == [1, 1]
    assert records[1].registers_per_thread == 198


def test_residency_is_absent_without_occupancy_metrics():
    keep = [i for i, name in enumerate(HEADER) if name not in ncu.OCCUPANCY_METRICS.values()]
    text = _csv([HEADER[i] for i in keep], [UNITS[i] for i in keep], [[r[i] for i in keep] for r in ROWS])
    assert ncu.parse_raw_csv(text)[0].ctas_per_sm is None


def test_scaled_units_are_converted_to_the_record_units():
    text = CAPTURED.replace('"byte","byte"', '"Gbyte","byte"').replace('"ns"', '"msecond"')
    text = text.replace('"662,599,936"', '"0.5"').replace('"3,509,760"', '"2.5"')
    first = ncu.parse_raw_csv(text)[0]
    assert (first.dram_read_bytes, first.duration_ms) == (0.5e9, 2.5)


def test_an_unknown_unit_is_rejected_rather_than_read_unscaled():
    with pytest.raises(ValueError, match="unknown unit 'fortnight'"):
        ncu.parse_raw_csv(CAPTURED.replace('"ns"', '"fortnight"'))


def test_csv_without_the_metrics_is_rejected():
    with pytest.raises(ValueError, match="lacks the columns"):
        ncu.parse_raw_csv('"ID","Kernel Name"\n"",""\n"0","k"\n')


def test_text_that_is_not_a_report_is_rejected():
    with pytest.raises(ValueError, match="'ID' header"):
        ncu.parse_raw_csv("==ERROR== Failed to profile\n")


def test_unreadable_counter_values_are_rejected_not_zeroed():
    with pytest.raises(ValueError):
        ncu.parse_raw_csv(CAPTURED.replace('"87.26"', '"n/a"'))


def test_command_keeps_clocks_and_profiles_only_marked_regions():
    cmd = ncu.ncu_command(["python3", "x.py"], "rep", kernel_regex="attn", nvtx_include="cell/")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:attn"
    assert cmd[cmd.index("--nvtx-include") + 1] == "cell/"
    assert cmd[-2:] == ["python3", "x.py"]


def test_missing_ncu_is_reported_as_unavailable(tmp_path):
    result, _ = ncu.collect(["true"], tmp_path / "r", ncu="ncu-that-does-not-exist")
    assert isinstance(result, ncu.NcuUnavailable)
    assert "not on PATH" in result.reason


def test_summary_gives_median_and_quartiles():
    t = timing.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (t.median_ms, t.p25_ms, t.p75_ms, t.min_ms, t.iqr_ms) == (3.0, 2.0, 4.0, 1.0, 2.0)


def test_summary_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="samples_ms"):
        timing.summarize([])


# ---- several cells in one profiled program: split at the marker kernel, then summarize each cell

def _record(name: str, ms: float, hit: float = 50.0, read: float = 1e6) -> ncu.NcuRecord:
    return ncu.NcuRecord(name, hit, read, 0.0, 10.0, 20.0, ms)


def test_records_split_at_each_marker_without_the_markers():
    m = _record(ncu.MARKER_KERNEL, 0.001)
    groups = ncu.split_at_markers([m, _record("a", 1), m, _record("b", 1), _record("b", 2), m])
    assert [[r.kernel_name for r in g] for g in groups] == [["a"], ["b", "b"], []]


def test_records_before_the_first_marker_are_refused():
    with pytest.raises(ValueError, match="not the marker"):
        ncu.split_at_markers([_record("a", 1), _record(ncu.MARKER_KERNEL, 0.001)])


def test_summary_adds_up_every_launch_of_the_attention_kernel_and_weights_ratios_by_time():
    # two heads of a sequential launch (1 ms at 90 %, 3 ms at 50 %) and a short helper kernel
    summary = ncu.summarize([_record("attn", 1.0, hit=90.0, read=2e6), _record("attn", 3.0, hit=50.0, read=6e6),
                             _record("merge", 0.5, hit=10.0, read=1e6)])
    assert summary.kernel_ms == 4.0 and summary.kernels == 3
    assert summary.l2_hit_pct == pytest.approx((90 * 1 + 50 * 3) / 4)
    assert summary.dram_read_bytes == 9e6  # every launch's bytes


def test_summary_of_no_launch_is_an_error():
    with pytest.raises(ValueError, match="no profiled launch"):
        ncu.summarize([])


def test_paired_rounds_alternate_and_reverse_every_other_round_warm_ups_first():
    calls = []
    rounds = timing.time_rounds([lambda: calls.append("a"), lambda: calls.append("b")], device=torch.device("cpu"),
                                reps=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert rounds.paired and [len(s) for s in rounds.samples_ms] == [3, 3] and rounds.timer == "wall_clock"


def test_blocked_timing_takes_each_launch_in_its_own_block():
    calls = []
    rounds = timing.time_rounds([lambda: calls.append("a"), lambda: calls.append("b")], device=torch.device("cpu"),
                                reps=2, warmup=0, paired=False)
    assert calls == ["a", "a", "b", "b"] and not rounds.paired


def test_rounds_go_on_until_the_speedup_is_stable_or_the_budget_is_spent():
    calls = []
    rounds = timing.time_rounds([lambda: calls.append("a"), lambda: calls.append("b")], device=torch.device("cpu"),
                                reps=2, warmup=0, baseline=0, stable_pct=1e-9, budget_s=0.0)
    assert len(rounds.samples_ms[0]) == 2  # no budget left after the minimum: it stops there
    unstable = iter(range(1, 10_000))  # a launch whose time keeps changing: never stable within 1e-9 %

    def drifting():
        busy = next(unstable)
        sum(range(busy * 50))

    rounds = timing.time_rounds([lambda: None, drifting], device=torch.device("cpu"), reps=2, warmup=0, baseline=0,
                                stable_pct=1e-9, budget_s=0.05)
    assert len(rounds.samples_ms[0]) > 2 and len(rounds.samples_ms[0]) == len(rounds.samples_ms[1])


def test_rounds_taken_while_throttled_are_dropped_and_counted_at_most_reps_of_them():
    flags = iter([True, False, False, False])
    rounds = timing.time_rounds([lambda: None], device=torch.device("cpu"), reps=3, warmup=0,
                                throttled=lambda: next(flags))
    assert rounds.throttled_rounds == 1 and len(rounds.samples_ms[0]) == 3
    always = timing.time_rounds([lambda: None], device=torch.device("cpu"), reps=2, warmup=0, throttled=lambda: True)
    assert always.throttled_rounds == 2 and len(always.samples_ms[0]) == 2  # kept once reps rounds were dropped

