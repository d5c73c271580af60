"""The documentation as a new user follows it: every command of the blocks marked `<!-- readme-walkthrough` in
README.md and in docs/*.md runs exactly as written, from the checkout, after README command 1 (the default
lineage); the commands that need more data (HotpotQA) build it themselves, as the pages say. Each page is a shell of
its own (its `export` lines hold for its later commands only), README.md first, then the docs pages by name. Exit
codes and outputs are checked: 0, or the code a command's comment names (`# exits 4: ...`, the regression gate of
docs/gate.md).

Also `ask` on `default` and `hotpotqa` from a fresh data directory (nothing built): opt-in with
CAUSAL_ASSETS_FRESH_ASK=1, since it embeds both corpora and HotpotQA's 14,596 entities (about 10 min on 2 idle
cores, much longer under load)."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import COMMAND_1_OUTPUT, in_ci

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Long-running servers: started and checked by tests/e2e/test_ui.py (dagster dev) and tests/deploy/test_dg.py (dg dev).
SERVERS = re.compile(r"(^|[\s/])(dg|dagster) dev\b")


def walkthrough_commands(text: str) -> list[str]:
    """The commands of every ```bash block preceded by a `<!-- readme-walkthrough` marker, in order."""
    commands = []
    for block in re.findall(r"<!-- readme-walkthrough[^\n]*-->\n```bash\n(.*?)```", text, re.DOTALL):
        commands += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def expected_exit(command: str) -> int:
    """The exit code a command's own comment names (`... --fail-on-regression   # exits 4: ...`), else 0."""
    found = re.search(r"#\s*exits (\d+)\b", command)
    return int(found.group(1)) if found else 0


def documented_pages(docs: Path = DOCS) -> list[Path]:
    """README.md, then every page of the documentation site by name (docs/_incoming/ is not part of it)."""
    return [README, *sorted(docs.glob("*.md"))]


def walkthrough_by_page(docs: Path = DOCS) -> list[tuple[Path, list[str]]]:
    return [(page, cmds) for page in documented_pages(docs) if (cmds := walkthrough_commands(page.read_text()))]


def test_the_walkthrough_blocks_are_found():
    pages = dict(walkthrough_by_page())
    commands = [c for cmds in pages.values() for c in cmds]
    assert README in pages and len(pages) > 1, sorted(p.name for p in pages)  # the README and the docs pages
    assert sum(bool(SERVERS.search(c)) for c in commands) == 2  # dg dev, dagster dev: not run here
    assert any("causal-assets ask" in c and "hotpotqa" in c for c in commands)
    assert any("causal-assets sql" in c for c in commands) and not any(c.startswith("duckdb ") for c in commands)
    assert any("causal-assets search" in c for c in pages[README])


def test_marked_blocks_of_the_docs_pages_are_collected_and_incoming_text_is_not(tmp_path):
    (tmp_path / "_incoming").mkdir()
    block = "<!-- readme-walkthrough -->\n```bash\n# a comment\n.venv/bin/causal-assets {}\n```\n"
    (tmp_path / "b.md").write_text("text\n\n" + block.format("--help") + "\n```bash\n.venv/bin/not-marked\n```\n")
    (tmp_path / "a.md").write_text(block.format("sql 'select 1'"))
    (tmp_path / "_incoming" / "notes.md").write_text(block.format("incoming"))
    pages = walkthrough_by_page(tmp_path)
    assert [p.name for p, _ in pages] == ["README.md", "a.md", "b.md"]
    assert pages[1][1] == [".venv/bin/causal-assets sql 'select 1'"] and pages[2][1] == [".venv/bin/causal-assets --help"]


def test_a_command_s_comment_names_the_exit_code_it_must_end_with():
    assert expected_exit(".venv/bin/causal-assets evaluate default --fail-on-regression   # exits 4: the gate") == 4
    assert expected_exit(".venv/bin/causal-assets evaluate default   # the report's path") == 0
    gate = dict(walkthrough_by_page())[DOCS / "gate.md"]
    assert [expected_exit(c) for c in gate if "--fail-on-regression" in c] == [4, 0], gate


def run(command: str, exports: list[str], timeout: float = 3600) -> subprocess.CompletedProcess:
    script = "\n".join([*exports, command])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's code, whichever install .venv points at
    for name in ("DAGSTER_HOME", "CAUSAL_ASSETS_BASE_PATH", "CAUSAL_ASSETS_CATALOG", "CAUSAL_ASSETS_REPORTS",
                 "CAUSAL_ASSETS_QUERIES", "CAUSAL_ASSETS_LLM_CACHE"):
        env.pop(name, None)  # as a user's shell: the README's own settings only
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def require_command_1(what: str, *outputs: Path) -> None:
    """Skip `what` until README command 1 (the install and the default lineage) has run in this checkout. `.ci/run`
    does not run the lineage: under CI=true the test fails instead only where CAUSAL_ASSETS_README_TEST is set (a
    documented opt-in, docs/configuration.md)."""
    missing = [str(p.relative_to(ROOT)) for p in (COMMAND_1_OUTPUT, ROOT / ".venv" / "bin" / "python", *outputs)
               if not p.exists()]
    if missing:
        message = (f"README command 1 has not been run in this checkout ({', '.join(missing)} missing): it comes "
                   f"before {what}")
        if in_ci() and os.environ.get("CAUSAL_ASSETS_README_TEST"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def test_readme_walkthrough_runs_as_written():
    require_command_1("the walkthrough")
    inbox_file = ROOT / "data" / "queries" / "inbox" / "q1.txt"
    had_inbox_file = inbox_file.exists()
    report = []
    try:
        for page, commands in walkthrough_by_page():
            exports = []   # a page is read on its own: its exports hold for its own later commands
            report.append(f"--- {page.relative_to(ROOT)}")
            for command in commands:
                if command.startswith("export "):
                    exports.append(command)
                    continue
                if SERVERS.search(command):
                    report.append(f"(server, see test_ui/test_dg) {command}")
                    continue
                t0 = time.monotonic()
                done = run(command, exports)
                took = time.monotonic() - t0
                report.append(f"{took:7.1f}s rc={done.returncode} {command}")
                assert done.returncode == expected_exit(command), (
                    f"{page.name}: {command}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
                assert "Traceback" not in done.stderr, done.stderr[-3000:]
                check_output(command, done)
    finally:
        if not had_inbox_file:
            inbox_file.unlink(missing_ok=True)
        print("\n" + "\n".join(report) + f"\n(load {os.getloadavg()[0]:.1f})")


def check_output(command: str, done: subprocess.CompletedProcess) -> None:
    out, err = done.stdout, done.stderr
    words = shlex.split(command, comments=True)
    if "search" in words and "--json" in words:
        hits = json.loads(out)
        assert hits and all("chunk_id" in h for h in hits), out
    elif "search" in words:
        lines = out.splitlines()
        assert len(lines) >= 2 and lines[0].split()[0] == "1", out
        hit_id = lines[0].split()[2]
        assert hit_id not in lines[1], f"the snippet repeats the id:\n{out}"  # it shows text
        assert not [ln for ln in err.splitlines() if not ln.startswith("causal-assets: ")], err  # no stray output
    elif "ask" in words:
        assert "Sources" in out and "question id" in out and "report:" in out, out
        assert not [ln for ln in err.splitlines() if not ln.startswith("causal-assets: ")], err
    elif "sql" in words:
        assert len(out.strip().splitlines()) >= 2, out
        if "duckdb_columns" in command:
            assert "chunk_id" in out and "corpus_chunks.chunk_id" in out, out
    elif "duckdb.connect" in command:
        assert re.search(r"\d", out), out
    elif "evaluate" in words and "--fail-on-regression" in words:
        regression = [ln for ln in err.splitlines() if ": regression: " in ln]
        if done.returncode == 4:   # the gate's one line: retriever, metric, the drop with its interval and p
            assert len(regression) == 1 and re.search(r"fell [\d.]+ -> [\d.]+: Δ -[\d.]+ \[.*\], p [\d.]+",
                                                      regression[0]), err
        else:
            assert not regression and "report:" in out, err
    elif "accept" in words:
        assert "as its baseline" in err and re.fullmatch(r"[0-9a-f-]{36}", out.strip()), (out, err)
    elif "compare" in words:
        assert "| retriever" in out and "Δ 95% interval" in out and "worse most:" in out, out
    elif "export-labels" in words:
        assert "judgements" in out and "->" in out, out
    elif "mkdocs" in words[0]:
        site = Path(words[words.index("--site-dir") + 1])
        assert (site / "index.html").is_file() and (site / "concepts" / "index.html").is_file(), err


def test_ask_from_a_fresh_data_dir(tmp_path):
    if not os.environ.get("CAUSAL_ASSETS_FRESH_ASK"):
        pytest.skip("opt-in (CAUSAL_ASSETS_FRESH_ASK=1): builds default and hotpotqa from nothing, ~10 min quiet")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "data" / "dagster_home" / "dagster.yaml").read_text())
    exports = [f"export DAGSTER_HOME={home} CAUSAL_ASSETS_BASE_PATH={tmp_path / 'parquet'} "
               f"CAUSAL_ASSETS_CATALOG={tmp_path / 'catalog.duckdb'} CAUSAL_ASSETS_REPORTS={tmp_path / 'reports'} "
               f"CAUSAL_ASSETS_QUERIES={tmp_path / 'queries'} CAUSAL_ASSETS_LLM_CACHE={tmp_path / 'llm.sqlite'}"]
    python = ROOT / ".venv" / "bin" / "python"
    python = python if python.exists() else Path(os.sys.executable)
    report = []
    for corpus, question in (("default", "Which function computes the shortest path between two nodes?"),
                             ("hotpotqa", "Which Canadian rock band released the song Counterparts?")):
        t0 = time.monotonic()
        done = run(f"{python} -m causal_assets.cli ask {shlex.quote(question)} --corpus {corpus}", exports)
        report.append(f"{corpus}: rc={done.returncode} in {time.monotonic() - t0:.0f}s\n{done.stderr}{done.stdout}")
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"corpus {corpus!r}: building" in done.stderr and "built in" in done.stderr
        assert "Sources" in done.stdout
    print("\n" + "\n".join(report) + f"\n(load {os.getloadavg()[0]:.1f})")
