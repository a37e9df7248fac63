"""What users see, in a real headless Chromium: the report page of a smoke sweep with every figure loaded, and the
MLflow UI's runs table listing the sweep's cells. Skipped where Chromium or Playwright is missing
(``apt install chromium``; ``pip install 'wavealign[browser]'``). With ``WAVEALIGN_SCREENSHOTS=DIR`` set, the two
pages are saved there as PNGs (``docs/screenshots/`` holds one run's)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console

from analysis.figures import FIGURES
from jobs import report
from orchestrator import config, sweep, tracking

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="pip install 'wavealign[browser]'")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (apt install chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``make run``'s sweep and ``wavealign report`` on it, in a fresh run root."""
    root = tmp_path_factory.mktemp("smoke") / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")
        cfg = config.load([f"run_root={root}", "progress=false", "ray.num_cpus=2"])
        outcome = sweep.run(cfg, Console(quiet=True))
    assert report.main(["--run-root", str(root), "--no-mlflow"]) == 0
    return root, outcome


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def screenshot(page, name: str) -> None:
    folder = os.environ.get("WAVEALIGN_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=name.startswith("report"))


def test_the_report_page_shows_every_figure_loaded(smoke, browser):
    root, _ = smoke
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto((root / "report" / "report.html").resolve().as_uri())
    widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
    # every figure is drawn and loaded, or named once among those left out (the smoke sweep has no dense cell for
    # Fig. 2's bound)
    left_out = page.eval_on_selector_all("#left-out + ul li", "lis => lis.map(li => li.textContent)")
    assert len(widths) + len(left_out) == len(FIGURES) and len(widths) >= len(FIGURES) - 1 and min(widths) > 0
    headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.textContent)")
    assert "Kernel latency with reorder overhead stacked (Fig. 9 / 10)" in headings
    assert "Adaptive skip: latency with and without the skip (Fig. 13)" in headings
    screenshot(page, "report.png")


def test_the_mlflow_ui_lists_the_sweep_s_cells(smoke, browser, tmp_path):
    root, outcome = smoke
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                               f"sqlite:///{root / 'mlflow.db'}", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "mlflow ui did not come up"
                time.sleep(0.5)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(tracking.experiment_address(base, outcome.experiment_id))
        cells = outcome.counts["done"]
        # the sweep's parent run and its cells: the table counts them all
        page.wait_for_selector(f"text={cells + 1} matching runs", timeout=60_000)
        # open the parent run's row (the button in its Run Name cell): the cells are listed by name,
        # method length order hardware/backend id (tracking.run_name)
        page.locator('[role=gridcell][col-id*="Run Name"] button').first.click()
        page.wait_for_selector("text=/^planted [0-9,]+ /", timeout=30_000)
        listed = page.locator("text=/^[a-z0-9_-]+ [0-9,]+ \\S+ (h100|a40|cpu)\\//").count()
        assert listed >= min(cells, 10), f"the runs table shows {listed} of {cells} cell runs"  # the rows in view
        screenshot(page, "mlflow-runs.png")
        # the sweep's parent run opens as an ordinary run (its params), not on GenAI's Evaluations tab
        client = tracking.MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
        [parent] = client.search_runs([outcome.experiment_id], f"tags.`{tracking.TAG}kind` = 'sweep'")
        page.goto(f"{base}/#/experiments/{outcome.experiment_id}/runs/{parent.info.run_id}")
        page.wait_for_selector("text=Parameters", timeout=30_000)
        assert "evaluations" not in page.url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
