"""Issue 39 (round 3), items 5, 8, 11, 12 and 13: a crafted file is refused by a bounded reader before it is parsed;
a signal at start-up ends in one line and a known status; a name cannot lead out of its folder; a size past what
the machine holds is refused before any work; and where one stderr line is promised there is no traceback. Every
crafted file is made by its test."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
import tracemalloc
from pathlib import Path

import lab_studies
import pytest
import torch
from test_reliability_runs import _parent_status, _sweep, _until

from jobs import cli
from orchestrator import config, dataset, plan, stop, watchdog
from wavealign import bounded, kernels, launch_order, masks, sim, workloads
from wavealign.masks import synthetic

# a small CPU-only grid (2 cells) the config cases start from
CPU_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]
WORKLOAD = "name: {name}\nnum_heads: 2\nhead_dim: 16\n"


def one_line(argv: list[str], capsys) -> str:
    """``wavealign <argv>`` refuses with exit 2 and one stderr line (no traceback); that line."""
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"wavealign {argv[0]}: "), err
    return err


def config_root(tmp_path: Path, **workloads_yaml: str) -> Path:
    """A config root (``conf_dirs``) holding ``conf/workload/<name>.yaml`` for each keyword."""
    folder = tmp_path / "conf" / "workload"
    folder.mkdir(parents=True)
    for name, text in workloads_yaml.items():
        (folder / f"{name}.yaml").write_text(text)
    return tmp_path / "conf"


def alias_bomb(levels: int = 9) -> str:
    """A YAML "billion laughs": each level a list of nine aliases of the one before, 9^levels strings in all."""
    lines = ["name: bomb", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def peak_bytes(call) -> int:
    """The most Python memory ``call`` held at once (it raises, as a refusal does)."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- item 5: crafted files are refused by bounded readers, before they are parsed ---

def test_a_yaml_alias_bomb_in_a_config_root_is_refused_before_its_aliases_are_expanded(tmp_path):
    conf = config_root(tmp_path, bomb=alias_bomb())
    assert len((conf / "workload" / "bomb.yaml").read_bytes()) < 500  # 387 million strings once expanded
    with pytest.raises(config.ConfigError, match=r"bomb\.yaml' expands to more than 100,000 values .* aliases"):
        config.group_entry("workload", "bomb", [conf])
    assert peak_bytes(lambda: config.group_entry("workload", "bomb", [conf])) < 4 * 2**20


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system", "!!python/name:os.system", "!custom"])
def test_a_yaml_tag_that_is_not_plain_yaml_is_refused_naming_it(tmp_path, tag):
    marker = tmp_path / "ran"
    conf = config_root(tmp_path, tagged=f"name: tagged\nnum_heads: {tag} ['touch {marker}']\n")
    with pytest.raises(config.ConfigError, match=r"the tag '.*(python|custom).*' is not allowed"):
        config.group_entry("workload", "tagged", [conf])
    assert not marker.exists()


def test_a_yaml_tag_in_a_command_line_value_is_one_line(capsys):
    err = one_line(["bench-reorder", "--blocks", "8", "--param", "iters=!!python/name:os.system"], capsys)
    assert "--param 'iters=!!python/name:os.system'" in err and "is not allowed" in err


def test_a_safetensors_header_nested_deep_is_refused_not_a_recursion_error(tmp_path):
    header = b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    path = tmp_path / "deep.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ValueError, match=r"deep\.safetensors is not a safetensors file \(its header nests JSON arrays "
                                         r"and objects 100,001 deep; expected at most 64\)"):
        workloads.read_header(path)
    assert peak_bytes(lambda: workloads.read_header(path)) < 16 * 2**20


def test_a_results_file_made_to_expand_is_quarantined_from_its_footer_unread(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "results" / "hardware=cpu" / "method=random"
    folder.mkdir(parents=True)
    crafted = folder / "part-crafted.parquet"
    batch = pa.table({"cell_json": ["x" * 200] * 100_000})  # one value, run-length encoded: 1,000,000 rows, 200 MB
    with pq.ParquetWriter(crafted, batch.schema, write_page_checksum=True) as writer:
        for _ in range(10):
            writer.write_table(batch)
    assert crafted.stat().st_size < 100_000
    assert dataset.trusted_files(tmp_path) == []
    moved = tmp_path / "results" / dataset.QUARANTINE / crafted.relative_to(tmp_path / "results")
    reason = moved.with_name(moved.name + dataset.REASON_SUFFIX).read_text()
    assert "1,000,000 rows in" in reason and "under 8 bytes a row" in reason


def test_json_depth_counts_the_brackets_outside_strings_only():
    assert bounded.json_depth(b'["[[[", {"a": "\\"[[", "b": [1, {"c": "]]]\\\\"}]}]') == 4
    assert bounded.json_depth(b'"\\\\"') == 0 and bounded.json_depth(b"") == 0


@pytest.mark.parametrize("kind", ["fifo", "device", "large"])
def test_a_text_file_is_read_only_when_it_is_a_regular_file_of_bounded_size(tmp_path, kind):
    path = tmp_path / "x.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block for ever
    elif kind == "device":
        path = Path("/dev/zero")  # reading it would never end
    else:
        path.write_bytes(b"a: 1\n" * (bounded.MAX_YAML_BYTES // 5 + 1))
    expected = "is larger than" if kind == "large" else "is not a regular file"
    with pytest.raises(ValueError, match=expected):
        bounded.load_yaml(path, "config")


# --- item 8: every signal at start-up ends in one line and a known exit status ---

def test_a_signal_that_lands_in_an_import_is_raised_once_the_import_is_whole(tmp_path, monkeypatch):
    (tmp_path / "slow_to_import.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.2)\nWHOLE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with stop.handling(), pytest.raises(KeyboardInterrupt):
        import slow_to_import  # noqa: F401
        for _ in range(1000):  # the interrupt is delivered here, after the import
            time.sleep(0.01)
    assert sys.modules["slow_to_import"].WHOLE and stop.requested == "SIGTERM" and stop.count == 1
    monkeypatch.delitem(sys.modules, "slow_to_import")


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT])
def test_sighup_and_sigquit_stop_a_starting_sweep_in_one_line_with_128_plus_their_number(tmp_path, signum):
    proc = _sweep(tmp_path / "runs")
    time.sleep(1.0)  # the command is starting: finding its extras, importing, composing its config
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, out[-2000:]
    assert out.strip().splitlines()[-1].startswith(f"wavealign sweep: stopped by {signum.name}")
    assert "Traceback" not in out


def test_a_stop_that_a_library_s_clean_up_turns_into_another_error_still_ends_in_one_line(monkeypatch, capsys):
    # SIGQUIT landing in Hydra's config reader: its `finally: f.close()` raised UnboundLocalError over the stop
    def phase(argv: list[str]) -> int:
        stop.note("SIGQUIT")
        try:
            raise KeyboardInterrupt
        finally:
            raise UnboundLocalError("cannot access local variable 'f' where it is not associated with a value")

    monkeypatch.setattr(cli, "_run", phase)
    stop.reset()
    try:
        code = cli.main(["sweep"])
    finally:
        stop.reset()
    assert code == 128 + signal.SIGQUIT
    assert capsys.readouterr().err.strip().splitlines() == ["wavealign sweep: stopped by SIGQUIT"]


def test_sighup_during_a_sweep_ends_it_as_any_interrupt_does(tmp_path):
    runs = tmp_path / "runs"
    proc = _sweep(runs)
    _until(proc, lambda: list(runs.glob("mlartifacts/*/artifacts/config.yaml")), "mlflow set-up")
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 129, out[-3000:]
    assert "interrupted: finished cells are recorded" in out and "Traceback" not in out
    assert list(runs.glob("sweeps/*/run-*.json")) and _parent_status(runs) == "KILLED"


def test_a_killed_watchdog_is_named_and_replaced(caplog):
    guard = watchdog.start()
    first = guard.process
    with caplog.at_level(logging.WARNING, logger=watchdog.__name__):
        first.kill()
        deadline = time.monotonic() + 60
        while guard.process is first and time.monotonic() < deadline:
            time.sleep(0.05)
    replaced = guard.process
    assert replaced is not first and replaced.poll() is None
    assert f"the watchdog (pid {first.pid})" in caplog.text and "ended (killed by SIGKILL)" in caplog.text
    guard.release()
    assert replaced.returncode == 0  # released: it ends without killing anything


# --- item 11: names cannot lead out of their folder, nor print what they name ---

@pytest.mark.parametrize("name", ["../../outside", "/tmp/outside", "sub/outside", ".hidden"])
def test_a_workload_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    conf = config_root(tmp_path)
    (tmp_path / "outside.yaml").write_text(WORKLOAD.format(name=name))
    with pytest.raises(config.ConfigError, match=re.escape(f"workload {name!r} is not a name")):
        config.group_entry("workload", name, [conf])


def test_an_interpolation_in_a_config_root_entry_is_refused_without_resolving_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_TEST_SECRET", "s3cr3t-token-4711")
    conf = config_root(tmp_path, leaky="name: leaky\nmodel: ${oc.env:WAVEALIGN_TEST_SECRET}\n")
    with pytest.raises(config.ConfigError) as refused:
        config.load([*CPU_GRID, "grid.workload=[leaky]", f"conf_dirs=[{conf}]"])
    assert "model='${oc.env:WAVEALIGN_TEST_SECRET}' is an interpolation" in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


@pytest.mark.parametrize("name", ["'[/x]'", "'[bold]x'", "'a b'"])
def test_a_sweep_name_that_is_not_a_plain_label_is_one_line_before_the_run_root_is_made(tmp_path, capsys, name):
    err = one_line(["sweep", *CPU_GRID, f"name={name}", f"run_root={tmp_path / 'runs'}"], capsys)
    assert "expected a label of letters, digits" in err and not (tmp_path / "runs").exists()


# --- item 12: every size a user sets is bounded by what the machine holds, before any work ---

SMALL_MASK = synthetic.random_mask(2, 8, 8, 0.5, seed=0)


@pytest.mark.parametrize(("argument", "call"), [
    ("RowOrder.identity", lambda: launch_order.RowOrder.identity(10**6, 10**6)),
    ("dense mask", lambda: masks.get("dense").for_shape(10**4, 10**4, 10**4)),
    ("synthetic mask", lambda: synthetic.random_mask(10**3, 10**5, 10**5, 0.5)),
    ("iters", lambda: launch_order.plan(SMALL_MASK, wave_size=4, iters=10**9)),
    ("wave_size", lambda: sim.simulate(SMALL_MASK, hardware="h100", backend="flex", wave_size=10**9)),
    ("row_jitter", lambda: sim.simulate(SMALL_MASK, hardware="h100", backend="flex", row_jitter=1e6)),
    ("head_dim", lambda: sim.simulate(SMALL_MASK, hardware="h100", backend="flex", head_dim=10**9)),
], ids=["identity", "dense", "synthetic", "iters", "sim-wave", "sim-jitter", "sim-head-dim"])
def test_a_library_size_past_what_the_machine_holds_is_refused_naming_it(argument, call):
    with pytest.raises(ValueError, match=re.escape(argument)):
        call()


@pytest.mark.parametrize("argv", [
    ["demo", "--q-blocks", "1000000"],
    ["bench-reorder", "--blocks", "1000000"],
    ["bench-reorder", "--blocks", "8", "--iters", "1000000000"],
], ids=["demo", "bench-reorder-blocks", "bench-reorder-iters"])
def test_a_command_given_a_size_past_the_machine_is_one_line(capsys, argv):
    err = one_line(argv, capsys)
    assert "more than the" in err or "iters must be" in err


def test_a_lab_study_given_a_size_past_the_machine_is_one_line(tmp_path, capsys):
    err = lab_studies.refusal("sim_paper", ["--blocks", "1000000", "--out", str(tmp_path / "out")], capsys)
    assert "more than the" in err


@pytest.mark.parametrize(("overrides", "message"), [
    (["grid.block_size=1", "grid.seq_k=[364]"], "a cell of workload 'shape-2h' (2 heads x 364,000 tokens x 128, "
                                                "block_size 1) needs"),
    (["grid.workload=[huge]", "conf_dirs=[{conf}]"], "a cell of workload 'huge' (100000000 heads"),
    (["+grid.reorderer_params.wavealign.iters=[1000000000]"], "iters must be >= 1 and <= 1000"),
    (["ray.object_store_mb=1000000000"], "ray.object_store_mb needs"),
], ids=["block_size=1", "num_heads=1e8", "iters=1e9", "object_store_mb=1e9"])
def test_a_sweep_size_past_the_machine_is_refused_when_the_config_loads(tmp_path, overrides, message):
    conf = config_root(tmp_path, huge="name: huge\nnum_heads: 100000000\nhead_dim: 128\n")
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.load([*CPU_GRID, *(o.format(conf=conf) for o in overrides)])


def test_a_grid_this_machine_cannot_plan_is_refused_before_it_is_enumerated():
    axis, lengths = (",".join(str(i) for i in range(1, n + 1)) for n in (1000, 100))
    cfg = config.load([*CPU_GRID, f"grid.seed=[{axis}]", f"grid.wave_size=[{axis}]", f"grid.seq_k=[{lengths}]",
                       "max_cells=10000000000"])  # 2 variants x 1,000 x 1,000 x 100 lengths
    with pytest.raises(config.ConfigError, match=r"the sweep's 200,000,000 cells \(max_cells=10000000000\) needs"):
        plan.check_size(cfg)


# --- item 13: one line where a traceback was, and no value taken silently ---

OUTPUT_FOLDERS = pytest.mark.parametrize("out", ["/dev/null", "/proc/wavealign-test", "{file}"],
                                         ids=["dev-null", "proc", "a-file"])


@OUTPUT_FOLDERS
def test_an_output_folder_that_cannot_be_one_is_one_line_before_any_work(tmp_path, capsys, out):
    existing = tmp_path / "existing.csv"
    existing.write_text("a,b\n")
    given = out.format(file=existing)
    err = one_line(["report", "--out", given], capsys)
    assert f"--out '{given}'" in err and "expected a" in err and "folder" in err


@OUTPUT_FOLDERS
@pytest.mark.parametrize("argv", [
    ["sim_paper", "--blocks", "8", "--heads", "1"],
    ["mask_fidelity", "--heads", "1"],
    ["validate_sim", "{file}"],
], ids=["sim_paper", "mask_fidelity", "validate_sim"])
def test_a_lab_study_s_output_folder_that_cannot_be_one_is_one_line_before_any_work(tmp_path, capsys, argv, out):
    existing = tmp_path / "existing.csv"
    existing.write_text("a,b\n")
    given = out.format(file=existing)
    err = lab_studies.refusal(argv[0], [a.format(file=existing) for a in argv[1:]] + ["--out", given], capsys)
    assert f"--out '{given}'" in err and "expected a" in err and "folder" in err


@pytest.mark.parametrize("out", ["/proc/wavealign-test/x.json", "{folder}"], ids=["proc", "a-folder"])
def test_an_output_file_that_cannot_be_written_is_one_line_before_any_work(tmp_path, capsys, out):
    err = one_line(["bench-reorder", "--blocks", "8", "--out", out.format(folder=tmp_path)], capsys)
    assert "--out" in err and "expected" in err


def test_an_output_file_may_be_dev_null(capsys):
    assert cli.main(["bench-reorder", "--heads", "1", "--blocks", "8", "--repeats", "1", "--out", "/dev/null"]) == 0


def test_a_tracking_uri_of_a_scheme_mlflow_has_no_store_for_is_one_line(capsys):
    err = one_line(["report", "--tracking-uri", "ftp://alice:pw@x/y"], capsys)
    assert "'ftp://alice:***@x/y'" in err and "pw" not in err.replace("ftp", "")


@pytest.mark.parametrize(("override", "message"), [
    ("resume=2", "resume=2: resume is a switch; expected resume=true or resume=false"),
    ("progress=7", "progress is a switch"),
    ("ray.prefetch_inputs=2", "ray.prefetch_inputs is a switch"),
    ("hydra.run.dir=/tmp/elsewhere", "hydra.run.dir=/tmp/elsewhere: Hydra's own settings do not apply"),
    ("plugins=[../../x]", "plugins has '../../x'; expected the dotted name of an importable module"),
])
def test_a_value_the_config_would_take_silently_or_as_a_path_is_refused(override, message):
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.load([*CPU_GRID, override])


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
def test_meta_tensors_are_refused_naming_them(backend):
    q = torch.empty(1, 2, 256, 16, device="meta")
    with pytest.raises(ValueError, match=r"^q is on the meta device"):
        kernels.get(backend)(q, q, q, SMALL_MASK[:, :2, :2], block_size=128)
    with pytest.raises(ValueError, match=r"^mask is on the meta device"):
        launch_order.plan(torch.ones(2, 4, 4, dtype=torch.bool, device="meta"), wave_size=2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine runs flex")
def test_a_gpu_backend_asked_to_run_on_the_cpu_is_refused_before_it_compiles():
    q = torch.randn(1, 2, 256, 16)
    with pytest.raises(ValueError, match=r"^backend 'flex' runs on a CUDA GPU; q/k/v are on cpu"):
        kernels.get("flex")(q, q, q, SMALL_MASK[:, :2, :2], block_size=128)

