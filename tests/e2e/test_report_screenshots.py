"""Screenshots of what a retrieval engineer looks at: the evaluation asset's page in the Dagster UI (its
metadata: the headline table, queries per split, the report) and the evaluation report rendered as HTML, both with
headless Chromium, from this checkout's data after README command 1. Written to data/reports/ui/ (or
$CAUSAL_ASSETS_UI_SCREENSHOT_DIR)."""
from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from causal_assets.core.llm.server import free_port
from tests.conftest import require_system
from tests.dagster.procs import DAGSTER, ROOT, shutdown_grace_s, stop_group
from tests.e2e.test_readme import require_command_1
from tests.e2e.test_ui import STARTUP_TIMEOUT_S, _location_status

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

DATA = ROOT / "data"
REPORT = DATA / "reports" / "default.md"


def chromium_shot(chromium: str, url: str, out: Path, profile: Path, size: str = "1600,1200") -> bytes:
    out.unlink(missing_ok=True)
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", f"--window-size={size}", "--virtual-time-budget=25000",
                           f"--screenshot={out}", url], capture_output=True, text=True, timeout=240,
                          start_new_session=True)
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, f"{out}: blank page?"
    return data


def render_report_html(markdown_path: Path, out: Path) -> Path:
    """The report as a page: Markdown (GitHub tables) to HTML with markdown-it (a dependency of the installed
    stack), the plots referenced beside it."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown_path.read_text(encoding="utf-8"))
    style = ("body{font-family:sans-serif;max-width:1500px;margin:20px;font-size:13px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:1400px}")
    out.write_text(f"<html><head><meta charset='utf-8'><style>{style}</style></head><body>{body}</body></html>",
                   encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def chromium():
    path = require_system("chromium")
    require_command_1("the report's screenshots", REPORT)
    return path


def out_dir() -> Path:
    path = Path(os.environ.get("CAUSAL_ASSETS_UI_SCREENSHOT_DIR") or DATA / "reports" / "ui")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_rendered_report(chromium, tmp_path):
    html = render_report_html(REPORT, REPORT.with_suffix(".html"))  # beside the report: its plots load
    text = html.read_text()
    assert "<table>" in text and "95% interval" in text and "queries scored per split" in text
    shot = out_dir() / "evaluation_report_default.png"
    chromium_shot(chromium, html.as_uri(), shot, tmp_path / "chromium", size="1600,2400")
    print(f"\n{shot}")


def test_evaluation_asset_page(chromium, tmp_path):
    home = DATA / "dagster_home"
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "dagster_dev.log", "w")
    proc = subprocess.Popen([DAGSTER, "dev", "-h", "127.0.0.1", "-p", str(port)], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while _location_status(url)[0] != "LOADED":
            assert proc.poll() is None, (tmp_path / "dagster_dev.log").read_text()[-3000:]
            assert time.monotonic() - t0 < STARTUP_TIMEOUT_S, "dagster dev not up"
            time.sleep(1)
        with urllib.request.urlopen(f"{url}/server_info", timeout=10) as resp:
            assert resp.status == 200
        shot = out_dir() / "evaluation_asset_page.png"
        chromium_shot(chromium, f"{url}/assets/evaluation_metrics?partition=default", shot, tmp_path / "chromium")
        print(f"\n{shot}")
    finally:
        stop_group(proc, shutdown_grace_s())
        log.close()
