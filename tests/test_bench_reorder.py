"""``wavealign bench-reorder`` on a CPU: every repetition's wall time recorded, no GPU span where there is no GPU,
and a parameter it does not know refused before any plan."""

import json

import pytest

from jobs import bench_reorder


def test_a_cpu_run_records_each_plans_wall_time_and_no_gpu_span(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert bench_reorder.main(["--heads", "2", "--blocks", "64", "--repeats", "3", "--mask", "planted",
                               "--wave-size", "8", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert len(record["plan_ms"]) == 3 and all(t > 0 for t in record["plan_ms"])
    assert record["median_ms"] == sorted(record["plan_ms"])[1]
    assert record["gpu_ms"] == [] and record["gpu_median_ms"] is None
    assert "GPU span" not in capsys.readouterr().out


def test_a_parameter_without_a_value_is_refused(capsys):
    with pytest.raises(ValueError, match="--param 'iters': expected NAME=VALUE"):
        bench_reorder.main(["--heads", "2", "--blocks", "64", "--param", "iters"])
