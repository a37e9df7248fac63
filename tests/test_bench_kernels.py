"""bench-kernels is the sweep ``sweep=kernels`` plus its kernel table: checked end to end on the CPU (real local
Ray, real Parquet), with the reference backend standing in for the GPU kernels and SDPA as the dense baseline."""

import pandas as pd
import pytest
import torch

from analysis.tables import kernel_benchmark
from jobs import bench_kernels
from orchestrator import config, grid
from wavealign import kernels, masks

CPU_BENCH = ["grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random,planted]",
             "grid.workload=[shape-2h]", "grid.seq_k=[0.512]", "grid.variant=[original,wavealign]", "grid.reps=1",
             "grid.warmup=0", "extra_grids.dense.hardware=[cpu]", "extra_grids.dense.backend=[reference,sdpa]",
             "extra_grids.dense.workload=[shape-2h]", "extra_grids.dense.seq_k=[0.512]", "extra_grids.dense.reps=1",
             "extra_grids.dense.warmup=0", "mlflow.enabled=false", "progress=false", "ray.num_cpus=2"]


def test_the_kernels_sweep_pairs_every_backend_with_its_dense_cell():
    expanded = grid.expand(config.load(["sweep=kernels"]))
    sparse = {(c.attention.backend, c.inputs.seq_len_tokens) for c in expanded.cells if c.inputs.method != "dense"}
    dense = {(c.attention.backend, c.inputs.seq_len_tokens) for c in expanded.cells if c.inputs.method == "dense"}
    assert sparse and sparse <= dense
    assert {c.attention.backend for c in expanded.cells if c.inputs.method == "dense"} >= {"sdpa"}
    sparse_stages = {c.attention.stages for c in expanded.cells if c.inputs.method != "dense"}
    assert sparse_stages == {"none", "spatial", "temporal", "both"}


def test_bench_kernels_runs_its_sweep_and_writes_the_kernel_table(tmp_path, capsys):
    assert bench_kernels.main([*CPU_BENCH, f"run_root={tmp_path}"]) == 0
    [folder] = (tmp_path / "sweeps").iterdir()
    table = pd.read_csv(folder / "kernels.csv")
    assert "kernel table" in capsys.readouterr().out
    sparse = table[table["method"] != "dense"]
    assert set(zip(sparse["method"], sparse["stages"], strict=True)) == {
        (m, s) for m in ("random", "planted") for s in ("Original", "O+S1+S2")}
    originals = sparse[sparse["stages"] == "Original"]
    assert (originals["net_speedup_vs_original"] == 1.0).all()
    # every sparse reference cell has the reference's own dense cell to read its 1/rho gap against
    assert sparse["gap_to_bound"].notna().all() and (sparse["effective_tflops"] > 0).all()
    assert set(table.loc[table["method"] == "dense", "backend"]) == {"reference", "sdpa"}
    assert (folder / "kernels.md").read_text().startswith("wavealign bench-kernels")


def test_the_kernel_table_says_what_is_missing_from_an_empty_frame():
    assert list(kernel_benchmark(pd.DataFrame()).columns) == ["note"]


def test_sdpa_computes_the_dense_reference_and_refuses_a_sparse_mask():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    full = masks.get("dense").for_shape(2, 5, 5)
    sdpa = kernels.get("sdpa")
    torch.testing.assert_close(sdpa(q, k, v, full, block_size=8),
                               kernels.get("reference")(q, k, v, full, block_size=8), rtol=1e-5, atol=1e-5)
    sparse = full.clone()
    sparse[:, :, 0] = False
    with pytest.raises(ValueError, match=r"must select every block \(method 'dense'\), got density 0\.800"):
        sdpa(q, k, v, sparse, block_size=8)
