"""The report from a real (small) sweep, and figure functions that degrade to notes instead of raising."""

import base64
import inspect
import re

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from sweeps import run_test_sweep

import analysis
from analysis import figures
from analysis import report as analysis_report
from analysis.load import latest_per_configuration, with_derived_columns
from analysis.plotting import SIMULATED_LABEL
from jobs import report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


SWEEP = """# @package _global_
name: analysis-test
grid:  # simulated H100 cells (written the first way, backend sim: flex's launch): the ablation variants, adaptive
  hardware: [h100]
  backend: [sim]
  method: [planted]
  workload: [shape-4h]
  seq_k: [20]  # 157 blocks of 128: more than one H100 wave (132), so Fig. 14 has a first wave to show
  variant: [original, spatial, temporal, wavealign, adaptive]
extra_grids:
  cpu_reference:  # exact reference-kernel cells on this CPU
    hardware: [cpu]
    backend: [reference]
    method: [planted]
    workload: [shape-2h]
    seq_k: [2]
    variant: [original, wavealign, adaptive]
    reps: 1
"""


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    """A real sweep through the orchestrator (Ray, Parquet, MLflow) of the small grid ``SWEEP``."""
    root, outcome = run_test_sweep(tmp_path_factory.mktemp("sweep"), "analysis_test", SWEEP)
    assert outcome.counts == {"done": 8}
    return root


@pytest.fixture(scope="module")
def written_report(run_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert report.main(["--run-root", str(run_root), "--out", str(out)]) == 0
    return out


def _texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + " ".join(
        t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())


def test_preset_rows_written_before_cells_named_their_generator_read_as_the_cluster_generators():
    frame = pd.DataFrame({"model": ["wan2.1-14b", "wan2.1-14b", "wan2.1-14b", None],
                          "captured": [None, None, "qkv.npz", None], "generator": [None, "scene", None, None]})
    assert with_derived_columns(frame)["generator"].fillna("none").tolist() == ["clusters", "scene", "none", "none"]


def test_load_returns_one_row_per_cell_of_the_sweep(run_root):
    frame = analysis.load(run_root)
    assert len(frame) == frame["cell_id"].nunique() == 5 + 3
    assert set(frame["status"]) == {"done"}
    assert (frame["seq_k"] == frame["seq_len_tokens"] / 1000).all()


def test_load_by_mlflow_experiment_name_finds_the_sweeps_run_root(run_root):
    by_root = analysis.load(run_root)
    by_experiment = analysis.load("wavealign", tracking_uri=f"sqlite:///{run_root / 'mlflow.db'}")
    assert sorted(by_experiment["cell_id"]) == sorted(by_root["cell_id"])


def _drawn(report_dir) -> list[str]:
    return [name for name in figures.FIGURES if (report_dir / f"{name}.png").exists()]


def test_report_writes_every_figure_with_data_as_a_valid_png_and_names_the_others_once(written_report):
    page = (written_report / "report.html").read_text()
    assert len(_drawn(written_report)) >= 6
    for name in _drawn(written_report):
        assert (written_report / f"{name}.png").read_bytes().startswith(PNG_SIGNATURE), name
    left_out = [name for name in figures.FIGURES if name not in _drawn(written_report)]
    assert ("Figures left out" in page) == bool(left_out)
    assert page.count("Figures left out") <= 1


def test_report_html_embeds_every_drawn_figure_and_the_tables_without_nan(written_report):
    page = (written_report / "report.html").read_text()
    for name in _drawn(written_report):
        encoded = base64.b64encode((written_report / f"{name}.png").read_bytes()).decode("ascii")
        assert f"data:image/png;base64,{encoded}" in page, name
    text = re.sub(r"base64,[A-Za-z0-9+/=]*", "", page)
    assert "NaN" not in text and "nan<" not in text
    for name in analysis.TABLES:
        assert name in page and (written_report / f"{name}.csv").is_file()


def test_report_is_logged_to_the_sweeps_mlflow_parent_run(run_root, written_report):
    client = MlflowClient(tracking_uri=f"sqlite:///{run_root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("wavealign")
    parents = client.search_runs([experiment.experiment_id], "tags.`wavealign.kind` = 'sweep'")
    assert len(parents) == 1
    logged = {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
    assert "report/report.html" in logged
    assert {f"report/{name}.png" for name in _drawn(written_report)} <= logged


def test_simulated_cells_are_labelled_simulated_and_measured_ones_are_not(run_root):
    fig = figures.kernel_latency(analysis.load(run_root))
    simulated_panel = next(ax for ax in fig.axes if ax.get_title().startswith("h100 / flex"))
    measured_panel = next(ax for ax in fig.axes if ax.get_title().startswith("cpu / reference"))
    assert any(SIMULATED_LABEL in t.get_text() for t in simulated_panel.get_legend().get_texts())
    assert not any(SIMULATED_LABEL in t.get_text() for t in measured_panel.get_legend().get_texts())
    plt.close(fig)


def test_mask_picture_shows_one_head_before_and_after_in_full_and_one_wave(run_root):
    fig = figures.mask_pictures(analysis.load(run_root))
    assert sum(len(ax.images) for ax in fig.axes) == 4
    assert "wavealign.inputs.build" in fig.get_suptitle()
    first_wave = fig.axes[2].images[0].get_array()
    assert first_wave.shape[0] == 132 < fig.axes[0].images[0].get_array().shape[0]  # a wave, not the whole mask
    plt.close(fig)


def test_each_variant_has_one_colour_in_every_figure(run_root):
    frame = analysis.load(run_root)
    colours: dict[str, set] = {}
    for draw in (figures.kernel_latency, figures.ablation):
        fig = draw(frame)
        for ax in fig.axes:
            for bars in ax.containers:
                name = bars.get_label()
                if name and not name.startswith("_") and "reorder overhead" not in name:
                    key = name.replace(" (simulated)", "")
                    colours.setdefault(key, set()).update(p.get_facecolor()[:3] for p in bars.patches)
        plt.close(fig)
    same = {"wavealign": "O+S1+S2", "spatial": "O+S1", "temporal": "O+S2", "original": "Original"}
    for variant, stage in same.items():
        if variant in colours and stage in colours:
            assert colours[variant] == colours[stage], (variant, colours[variant], colours[stage])
    assert colours and all(len(c) == 1 for c in colours.values()), colours


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_figure_on_a_frame_lacking_columns_shows_a_note(name):
    frame = pd.DataFrame({"hardware": ["h100"], "method": ["xattention"], "status": ["done"]})
    fig = figures.FIGURES[name](frame)
    assert "lack column" in _texts(fig)
    plt.close(fig)


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_figure_on_a_sweep_without_finished_cells_shows_a_note(run_root, name):
    frame = analysis.load(run_root).assign(status="failed")
    fig = figures.FIGURES[name](frame)
    assert "no finished cells" in _texts(fig)
    plt.close(fig)


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_figure_rows_take_the_results_frame_as_frame(name):
    rows = figures.FIGURES[name].rows
    assert next(iter(inspect.signature(rows).parameters)) == "frame"
    assert "lack column" in rows(frame=pd.DataFrame({"hardware": ["h100"]}))[figures.NOTE][0]


def test_panel_without_a_dense_baseline_says_how_to_get_one(run_root):
    fig = figures.speedup_vs_bound(analysis.load(run_root))
    assert "dense_baseline" in _texts(fig)
    plt.close(fig)


@pytest.mark.parametrize("name", list(analysis.TABLES))
def test_table_on_a_frame_lacking_columns_is_a_note(name):
    table = analysis.TABLES[name](pd.DataFrame({"hardware": ["h100"]}))
    assert list(table.columns) == ["note"] and "lack column" in table["note"][0]


def test_table2_compares_every_launch_order_with_its_original(run_root):
    table = analysis.table2(analysis.load(run_root))
    h100 = table[table["hardware"] == "h100"]
    assert set(h100["order"]) == {"Original", "WaveAlign S1", "O+S2", "WaveAlign"}
    assert (h100["speedup_with_overhead"] <= h100["speedup"]).all()
    assert (h100[h100["order"] == "Original"]["speedup"] == 1.0).all()


def test_table2_figure_draws_one_bar_per_launch_order_per_method():
    base = {"hardware": "h200", "backend": "fa4", "status": "done", "simulated": False, "num_heads": 40}
    rows = [{**base, "method": m, "group_id": m, "stages": st, "reorderer": r, "kernel_ms_median": ms,
             "reorder_ms": 1.0}
            for m in ("xattention", "random")
            for st, r, ms in (("none", "identity", 100.0), ("spatial", "lsh", 98.0), ("both", "lsh", 90.0),
                              ("both", "wavealign", 88.0))]
    fig = figures.reorderer_comparison(pd.DataFrame(rows))
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["LSH", "LSH+S2", "WaveAlign"]
        assert len(ax.patches) == 3
    plt.close(fig)


def test_table2_names_baselines_with_and_without_stage2_and_keeps_head_counts_apart():
    base = {"hardware": "h200", "backend": "fa4", "method": "xattention", "status": "done", "simulated": False,
            "reorder_ms": 0.0}
    rows = [{**base, "group_id": "g40", "num_heads": 40, "stages": "none", "reorderer": "identity",
             "kernel_ms_median": 100.0},
            {**base, "group_id": "g40", "num_heads": 40, "stages": "spatial", "reorderer": "minhash",
             "kernel_ms_median": 95.0, "reorder_ms": 5.0},
            {**base, "group_id": "g40", "num_heads": 40, "stages": "both", "reorderer": "minhash",
             "kernel_ms_median": 80.0, "reorder_ms": 5.0},
            {**base, "group_id": "g4", "num_heads": 4, "stages": "none", "reorderer": "identity",
             "kernel_ms_median": 10.0},
            {**base, "group_id": "g4", "num_heads": 4, "stages": "both", "reorderer": "hypergraph",
             "kernel_ms_median": 8.0, "reorder_ms": 2000.0, "ncu_l2_hit_pct": 90.0}]
    table = analysis.table2(pd.DataFrame(rows)).set_index(["num_heads", "order"])
    assert table.loc[(40, "MinHash"), "speedup"] == pytest.approx(100 / 95)
    assert table.loc[(40, "MinHash+S2"), "speedup_with_overhead"] == pytest.approx(100 / 85)
    assert table.loc[(4, "Hypergraph+S2"), "speedup_with_overhead"] == pytest.approx(10 / 2008)
    assert table.loc[(4, "Hypergraph+S2"), "l2_hit_pct"] == 90.0
    assert list(table.loc[40].index) == ["Original", "MinHash", "MinHash+S2"]


def test_table_one_takes_measured_l2_where_present_and_simulated_elsewhere():
    cell = {"hardware": "h200", "backend": "triton", "method": "xattention", "stages": "none", "status": "done",
            "density": 0.25, "simulated": False}
    frame = pd.DataFrame([{**cell, "ncu_l2_hit_pct": 30.0, "l2_hit_pct": None},   # measured by Nsight Compute
                          {**cell, "ncu_l2_hit_pct": None, "l2_hit_pct": 50.0}])  # its simulated twin only
    table = analysis.ncu_characterisation(frame)
    assert table["l2_hit_pct"].tolist() == [40.0]


def test_load_keeps_the_newest_row_of_a_configuration_re_measured_under_a_new_id(run_root):
    frame = analysis.load(run_root, latest_only=False)
    row = frame.iloc[[0]].copy()
    newer = row.assign(cell_id="re-measured-after-a-code-change", kernel_ms_median=123.0,
                       recorded_at=row["recorded_at"] + pd.Timedelta(seconds=1))
    kept = latest_per_configuration(pd.concat([frame, newer], ignore_index=True))
    assert len(kept) == len(frame)
    assert kept.loc[kept["cell_id"] == "re-measured-after-a-code-change", "kernel_ms_median"].tolist() == [123.0]


def test_report_draws_fig14_for_each_cell_asked_and_refuses_an_unknown_one(run_root, tmp_path):
    cells = analysis.load(run_root)
    chosen = cells[cells["stages"] == "both"].iloc[0]
    assert report.main(["--run-root", str(run_root), "--out", str(tmp_path), "--no-mlflow",
                        "--mask-cell", chosen["cell_id"]]) == 0
    picture = tmp_path / f"fig14_{chosen['method']}_{chosen['cell_id']}.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="--mask-cell nope is not a cell of these results"):
        report.main(["--run-root", str(run_root), "--out", str(tmp_path), "--no-mlflow", "--mask-cell", "nope"])


def test_kernel_latency_draws_variants_in_one_order_and_no_empty_panel():
    base = {"hardware": "h100", "backend": "sim", "status": "done", "simulated": True, "seq_len_tokens": 4096,
            "seq_k": 4.096, "reorder_ms": 1.0, "kernel_ms_median": 10.0}
    rows = [{**base, "method": "planted", "workload": "a", "variant": v, "stages": v, "group_id": "g1"}
            for v in ("wavealign", "temporal", "original", "spatial")]
    rows += [{**base, "method": "random", "workload": "b", "variant": v, "stages": v, "group_id": "g2"}
             for v in ("spatial", "original")]
    fig = figures.kernel_latency(pd.DataFrame(rows))
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2  # one panel per (row, method) that has cells; the grid's spare axis is hidden
    legend = [t.get_text() for t in visible[0].get_legend().get_texts() if "overhead" not in t.get_text()]
    assert [t.split(" ")[0] for t in legend] == ["original", "spatial", "temporal", "wavealign"]
    plt.close(fig)


@pytest.mark.parametrize(("value", "text"), [
    (1350.0, "1,350"), (363600, "363,600"), (96.94, "96.94"), (1.1811, "1.181"), (0.0123, "0.012"),
    (0.0, "0"), (1e-5, "0.000010"), (float("nan"), "-"), ("fa4", "fa4"),
])
def test_report_numbers_read_without_exponents(value, text):
    assert analysis_report.readable(value) == text


@pytest.mark.parametrize(("column", "label"), [
    ("kernel_ms", "kernel (ms)"), ("hbm_sol_pct", "HBM SOL (%)"), ("seq_len_tokens", "sequence length (tokens)"),
    ("effective_tflops", "effective TFLOP/s"), ("num_heads", "heads"), ("speedup_with_overhead",
                                                                        "speedup with overhead"),
])
def test_report_columns_read_with_units(column, label):
    assert analysis_report.column_label(column) == label


def test_report_page_titles_its_tables_and_figures_and_prints_no_snake_case_or_exponent(written_report):
    import re

    page = (written_report / "report.html").read_text()
    text = re.sub(r"base64,[A-Za-z0-9+/=]+", "", page)
    headings = re.findall(r"<h2[^>]*>([^<]*)</h2>", text)
    assert "Table II: reorderers compared (kernel and reorder time, speedups, HBM SOL, L2 hit)" in headings
    assert "Kernel latency with reorder overhead stacked (Fig. 9 / 10)" in headings
    headers = re.findall(r"<th>([^<]*)</th>", text)
    assert headers and not [h for h in headers if "_" in h]
    cells = re.findall(r"<td>([^<]*)</td>", text)
    assert cells and not [c for c in cells if re.fullmatch(r"-?[\d.]+e[+-]\d+", c)]


def test_cache_figures_omit_panels_without_figures_and_say_so_once():
    base = {"backend": "sim", "status": "done", "skip": "force", "method": "planted", "kernel_ms_median": 10.0}
    rows = [{**base, "hardware": "h100", "simulated": True, "group_id": "g", "stages": st, "l2_hit_pct": l2,
             "hbm_read_bytes": hbm} for st, l2, hbm in (("none", 20.0, 100.0), ("both", 90.0, 10.0))]
    rows += [{**base, "hardware": "cpu", "backend": "reference", "simulated": False, "group_id": "c", "stages": st}
             for st in ("none", "both")]
    fig = figures.cache_behaviour(pd.DataFrame(rows))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["h100: L2 hit %", "h100: HBM read ÷ original"]  # no cpu row of empty panels
    notes = [t.get_text() for t in fig.texts]
    assert any("not drawn, no figures: cpu L2 hit %, cpu HBM read ÷ original" in n for n in notes)
    plt.close(fig)


def test_ablation_bars_of_a_gpu_with_two_of_the_four_stages_sit_centred_on_their_method_labels():
    base = {"hardware": "cpu", "backend": "reference", "status": "done", "skip": "force", "simulated": False}
    rows = [{**base, "method": m, "group_id": m, "stages": st, "kernel_ms_median": ms}
            for m in ("planted", "random") for st, ms in (("none", 10.0), ("both", 8.0))]
    fig = figures.ablation(pd.DataFrame(rows))
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    centres = sorted(p.get_x() + p.get_width() / 2 for p in ax.patches)
    assert len(centres) == 4
    for tick, pair in zip(ax.get_xticks(), (centres[:2], centres[2:]), strict=True):
        assert sum(pair) / 2 == pytest.approx(tick)  # the two bars either side of the label, no empty slots
        assert pair[1] - pair[0] == pytest.approx(0.4)
    plt.close(fig)


def test_log_axes_read_plain_numbers():
    fig, ax = plt.subplots()
    ax.plot([0.6, 0.9], [0.6, 0.9])
    figures.common.log_scale(ax, "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels() if t.get_text()]
    assert labels and not [t for t in labels if "10^" in t or "times" in t or "×" in t]
    plt.close(fig)


def test_legends_do_not_cover_bars():
    base = {"hardware": "h100", "backend": "sim", "status": "done", "simulated": True, "seq_len_tokens": 4096,
            "seq_k": 4.096, "reorder_ms": 5.0, "method": "planted", "workload": "a", "group_id": "g"}
    rows = [{**base, "variant": v, "stages": v, "kernel_ms_median": ms}
            for v, ms in (("original", 100.0), ("spatial", 99.0), ("temporal", 98.0), ("wavealign", 97.0))]
    fig = figures.kernel_latency(pd.DataFrame(rows))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_height() > 0]
    assert bars and not any(legend.overlaps(bar) for bar in bars)
    plt.close(fig)


def test_fig2_draws_methods_with_a_dense_baseline_and_names_the_others_once():
    base = {"hardware": "h100", "backend": "sim", "status": "done", "simulated": True, "variant": "original",
            "seq_len_tokens": 4096, "seq_k": 4.096, "workload": "w"}
    rows = [{**base, "method": "dense", "density": 1.0, "kernel_ms_median": 100.0},
            {**base, "method": "planted", "density": 0.25, "kernel_ms_median": 40.0},
            {**base, "method": "xattention", "workload": "other", "density": 0.3, "kernel_ms_median": 50.0}]
    fig = figures.speedup_vs_bound(pd.DataFrame(rows))
    assert [ax.get_title() for ax in fig.axes] == ["planted"]
    assert any("not drawn: xattention" in t.get_text() for t in fig.texts)
    plt.close(fig)
