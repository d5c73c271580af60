"""The documentation site builds with `mkdocs build --strict`: every page in the nav exists, every page is in the
nav, and every link and anchor between pages resolves (mkdocs.yml's `validation` turns each into a warning, and
strict mode into an error). Doc text other branches leave in docs/_incoming/ is not part of the site."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}   # material's notice about MkDocs 2.0, printed on every build
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_documentation_builds_strictly(tmp_path):
    done = mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)["nav"]
    for entry in nav:
        page = next(iter(entry.values()))
        html = tmp_path / "site" / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert html.is_file(), f"{page} of the nav was not built"


def test_a_broken_link_fails_the_build(tmp_path):
    """The check can fail: a copy of the docs with one link to a page that does not exist does not build."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_incoming"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [a page that is not there](no-such-page.md).\n")
    done = mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr, done.stderr[-4000:]


def test_incoming_doc_text_is_not_part_of_the_site(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_incoming"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "docs" / "_incoming").mkdir()
    (tmp_path / "docs" / "_incoming" / "helper.md").write_text("# Notes\n\nA [link](nowhere.md) not in the nav.\n")
    done = mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    assert not (tmp_path / "site" / "_incoming").exists()
