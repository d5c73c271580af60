"""The evaluation's self-contained HTML report in headless Chromium: the page renders (a screenshot with the gate's
verdict in its colour), and its inline script sorts the per-query table by the column the address names."""
from __future__ import annotations

import io
import re
import subprocess

import pytest
from dagster import DagsterInstance, materialize

from tests.conftest import require_system
from tests.dagster.test_evaluation_gate import INDEX, default_benchmark, evaluate
from tests.e2e.test_report_screenshots import chromium_shot, out_dir

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
PASS_GREEN = (0x1A, 0x7F, 0x37)   # html.STYLE's `.pass` colour: the gate's verdict line


def dump_dom(chromium: str, url: str, profile) -> str:
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=240, start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_html_report_renders_and_sorts_in_chromium(resources, tmp_path):
    chromium = require_system("chromium")
    default_benchmark(resources)
    instance = DagsterInstance.ephemeral()
    assert materialize(INDEX, resources=resources, partition_key="default", instance=instance).success
    assert evaluate(resources, instance).success
    page = resources["storage"].reports_path / "default.html"

    shot = out_dir() / "evaluation_report_default_html.png"
    data = chromium_shot(chromium, page.as_uri(), shot, tmp_path / "profile", size="1400,1600")
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    colours = {c for _, c in image.getcolors(maxcolors=1 << 20)}
    assert any(all(abs(a - b) <= 12 for a, b in zip(c, PASS_GREEN)) for c in colours), "no gate verdict rendered"
    assert len(colours) > 50   # text, tables and the plots, not a blank page

    dom = dump_dom(chromium, page.as_uri() + "#sort=-ndcg_10", tmp_path / "profile2")
    assert 'data-sorted="-ndcg_10"' in dom   # the script ran and sorted
    table = dom.split('id="per_query"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>", 1)[1])
    ndcg = [float(re.findall(r"<td[^>]*>([^<]*)</td>", r)[4] or "nan") for r in rows]
    values = [v for v in ndcg if v == v]
    assert len(values) > 20 and values == sorted(values, reverse=True)
