"""wavealign.gpu_state: NVML's clocks-event bitmask decoded, the throttled rule, and the state written into a cell's
record; on a GPU, a real reading."""

import math

import pytest
import torch

from wavealign import gpu_state
from wavealign.gpu_state import GpuState
from wavealign.records import CellResult


def _state(sm_clock_mhz: float, reasons_mask: int) -> GpuState:
    return GpuState.from_nvml(sm_clock_mhz=sm_clock_mhz, mem_clock_mhz=2619.0, power_w=412.5, temperature_c=55.0,
                              reasons_mask=reasons_mask)


def test_read_on_a_cpu_device_is_none():
    assert gpu_state.read(torch.device("cpu")) is None


def test_reason_bits_decode_to_their_names_lowest_bit_first():
    assert gpu_state.reason_names(0x0) == ()
    assert gpu_state.reason_names(0x4 | 0x40 | 0x1) == ("gpu_idle", "sw_power_cap", "hw_thermal")
    assert gpu_state.reason_names(0x100 | 0x80) == ("hw_power_brake", "display_clock")


def test_unknown_reason_bits_are_left_out():
    assert gpu_state.reason_names(0x200 | 0x8) == ("hw_slowdown",)


def test_idle_application_clocks_display_clock_and_the_power_cap_are_not_throttling():
    assert not _state(1980.0, 0x1 | 0x2 | 0x100).throttled
    assert not _state(1455.0, 0x4).throttled  # a loaded H200 at its 700 W cap boosts as designed
    assert not _state(1980.0, 0x0).throttled


@pytest.mark.parametrize("bit", [0x8, 0x10, 0x20, 0x40, 0x80])
def test_thermal_slowdown_brake_and_sync_boost_reasons_are_throttling(bit):
    assert _state(1200.0, 0x2 | bit).throttled


def test_clocks_locked_follows_the_application_clocks_reason():
    assert _state(1980.0, 0x2).clocks_locked
    assert not _state(1980.0, 0x4).clocks_locked


def test_record_fills_the_before_and_after_fields():
    result = CellResult(cell_id="c", group_id="g", status="done")
    before, after = _state(1980.0, 0x0), _state(1410.0, 0x4 | 0x20)
    gpu_state.record(result, before, after)
    assert (result.gpu_sm_clock_mhz_before, result.gpu_sm_clock_mhz_after) == (1980.0, 1410.0)
    assert result.gpu_mem_clock_mhz_before == before.mem_clock_mhz
    assert result.gpu_power_w_after == after.power_w
    assert result.gpu_temperature_c_before == before.temperature_c
    assert (result.gpu_throttle_before, result.gpu_throttle_after) == ("", "sw_power_cap,sw_thermal")
    assert result.gpu_clocks_locked is False


def test_record_leaves_a_missing_reading_nan_and_none():
    result = CellResult(cell_id="c", group_id="g", status="done")
    gpu_state.record(result, None, _state(1980.0, 0x2))
    assert math.isnan(result.gpu_sm_clock_mhz_before) and math.isnan(result.gpu_power_w_before)
    assert result.gpu_throttle_before is None
    assert result.gpu_throttle_after == "applications_clocks_setting"
    assert result.gpu_clocks_locked is True
    untouched = CellResult(cell_id="c", group_id="g", status="done")
    gpu_state.record(untouched, None, None)
    assert math.isnan(untouched.gpu_temperature_c_after) and untouched.gpu_clocks_locked is None


@pytest.mark.gpu
def test_read_on_a_cuda_device_gives_plausible_clocks():
    state = gpu_state.read(torch.device("cuda"))
    assert state is not None, "NVML unreadable on a CUDA machine"
    assert state.sm_clock_mhz > 0 and state.mem_clock_mhz > 0
    assert state.power_w > 0 and state.temperature_c > 0
    assert all(reason in gpu_state.REASONS.values() for reason in state.throttle_reasons)
