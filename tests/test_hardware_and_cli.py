"""Hardware descriptions, block-mask formats and the console script."""

import re
import subprocess
import sys

import pytest
import torch

from jobs import cli
from wavealign import blockmask, hardware, kernels


def test_paper_gpus_have_the_papers_wave_sizes():
    assert kernels.get("fa4").wave_size("h100") == 132
    assert kernels.get("flashinfer").wave_size("a40") == 168
    assert hardware.get("H200").l2_bytes == 60 << 20


@pytest.mark.parametrize(("device_name", "expected"), [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A40", "a40"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", None), ("NVIDIA RTX A4000", None),
    ("NVIDIA H100 PCIe", None), ("NVIDIA GH200 480GB", None), ("NVIDIA H100 80GB HBM3", "h100"),
])
def test_device_names_map_to_hardware_ids(device_name, expected):
    found = hardware.from_device_name(device_name)
    assert (found.name if found else None) == expected


def test_kv_index_form_round_trips_through_the_dense_mask():
    mask = torch.rand(3, 7, 9) < 0.4
    counts, indices = blockmask.to_kv_indices(mask)
    assert torch.equal(counts, mask.sum(-1, dtype=torch.int32))
    assert torch.equal(blockmask.from_kv_indices(counts, indices), mask)


def test_kv_indices_out_of_range_are_rejected():
    counts = torch.tensor([[2]], dtype=torch.int32)
    with pytest.raises(ValueError, match="kv_indices must lie in"):
        blockmask.from_kv_indices(counts, torch.tensor([[[0, 5]]], dtype=torch.int32), num_kv_blocks=4)


def test_kv_lists_trimmed_to_the_longest_row_are_told_to_state_nb():
    counts = torch.tensor([[2, 1]], dtype=torch.int32)
    trimmed = torch.tensor([[[0, 5], [3, 0]]], dtype=torch.int32)  # NB = 8, but only 2 columns kept
    with pytest.raises(ValueError, match="trimmed to the longest row need num_kv_blocks"):
        blockmask.as_dense((counts, trimmed))
    assert blockmask.from_kv_indices(counts, trimmed, num_kv_blocks=8).shape == (1, 2, 8)


def test_cli_lists_commands_and_rejects_unknown_ones(capsys):
    assert cli.main([]) == 0
    assert "demo" in capsys.readouterr().out
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench-reorder", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["bench-reorder", "--device", "gpu"], "--device 'gpu': expected a torch device"),
])
def test_benchmark_commands_refuse_bad_arguments_before_any_work(argv, needle, capsys):
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_refused_with_the_way_out(capsys):
    assert cli.main(["bench-reorder", "--device", "cuda"]) == 2
    assert "this machine has no CUDA GPU" in capsys.readouterr().err


def test_a_library_argument_error_is_one_line_naming_the_command_not_a_traceback(capsys, monkeypatch):
    monkeypatch.delenv("WAVEALIGN_TRACEBACK", raising=False)
    assert cli.main(["demo", "--heads", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wavealign demo: heads must be >= 1, got 0") and "Traceback" not in err
    monkeypatch.setenv("WAVEALIGN_TRACEBACK", "1")
    with pytest.raises(ValueError, match="heads must be >= 1"):
        cli.main(["demo", "--heads", "0"])


def test_sync_mlflow_refuses_a_run_root_without_results_and_creates_nothing(tmp_path, capsys):
    root = tmp_path / "typo"
    assert cli.main(["sync-mlflow", f"run_root={root}"]) == 2
    assert "has no results/ folder" in capsys.readouterr().err and not root.exists()


def test_demo_command_reports_a_smaller_union_and_exactness():
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "demo", "--q-blocks", "300", "--heads", "2"],
                            capture_output=True, text=True, check=True)
    assert "bitwise: True" in result.stdout
    # the planted mask's waves touch fewer K/V blocks once reordered: the "both" row's ratio to the original < 1
    ratio = re.search(r"both\s*\S\s*[\d.]+\s*\S\s*([\d.]+)x", result.stdout)
    assert ratio and float(ratio.group(1)) < 1, result.stdout
