"""The CLI as a new user meets it: instant help, one-line errors naming what to do, no heavy imports on
the way to a BM25 search, snippets that show text."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from causal_assets.cli import METHODS, build_parser
from tests.conftest import HOTPOT, require
from tests.helpers.endpoint import FakeEndpoint, status

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("dagster", "torch", "sklearn", "sentence_transformers", "openai", "llama_cpp", "duckdb", "matplotlib",
         "ranx")


def run_cli(*args: str, env: dict | None = None, probe: bool = False) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter as the `causal-assets` command runs (`cli.entry_point`: exit handlers,
    then no interpreter teardown, where native threads can abort the process); with `probe`, also print which
    heavy modules it imported."""
    code = ("import atexit, sys, json\n"
            + (f"atexit.register(lambda: print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), "
               "file=sys.stderr))\n" if probe else "")
            + "from causal_assets.cli import entry_point\nentry_point()\n")
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=300)


def run_main(monkeypatch, capsys, *args: str, env: dict | None = None) -> tuple[int, str]:
    """The CLI in this process (no interpreter start, ~3 s less than `run_cli`): its exit code and stderr. The
    variables the commands set for their runs (base path, catalog) are restored after the test."""
    from causal_assets.cli import main

    for name in ("CAUSAL_ASSETS_BASE_PATH", "CAUSAL_ASSETS_CATALOG"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def test_method_choices_are_every_retriever_and_all_are_in_the_help():
    from causal_assets.core.registry.retrievers import KINDS

    assert tuple(METHODS) == tuple(KINDS)
    search = build_parser()._subparsers._group_actions[0].choices["search"]
    help_text = search.format_help()
    assert all(m in help_text for m in METHODS), help_text


def test_help_imports_nothing_heavy():
    out = run_cli("--help", probe=True)
    assert out.returncode == 0 and "search" in out.stdout
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []


def test_unknown_method_is_one_line_listing_the_choices():
    out = run_cli("search", "x", "--method", "bm52")
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "invalid choice: 'bm52'" in line and all(m in line for m in METHODS)


def test_unknown_corpus_is_one_line_naming_the_known_ones(tmp_path):
    require(HOTPOT)  # hotpotqa is a known corpus only where the shared data is
    out = run_cli("--base-path", str(tmp_path / "pq"), "search", "x", "--corpus", "defualt")
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert "unknown corpus 'defualt'" in line and "default" in line and "hotpotqa" in line
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command", [["search", "x", "--method", "dense", "--corpus", "musique"],
                                     ["ask", "Who?", "--no-build", "--corpus", "musique"], ["build", "musique"]])
def test_a_registered_corpus_without_its_source_says_so(tmp_path, monkeypatch, capsys, command):
    """With the shared data elsewhere (a clone not beside it), the registered corpora were "unknown corpus"."""
    code, err = run_main(monkeypatch, capsys, "--base-path", str(tmp_path / "pq"), *command,
                         env={"CAUSAL_ASSETS_SHARED_DATA": str(tmp_path / "elsewhere"),
                              "DAGSTER_HOME": str(tmp_path / "h")})
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert (f"corpus 'musique' is registered, but its source {tmp_path}/elsewhere/musique/" in line
            and "does not exist" in line and "set CAUSAL_ASSETS_SHARED_DATA" in line), line


@pytest.mark.slow
def test_no_build_refuses_naming_the_command(tmp_path):
    out = run_cli("--base-path", str(tmp_path / "pq"), "search", "drummer", "--corpus", "default", "--no-build")
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "run `causal-assets build default --index-only`" in line, line
    out = run_cli("--base-path", str(tmp_path / "pq"), "ask", "Who?", "--corpus", "default", "--no-build",
                  env={"DAGSTER_HOME": str(tmp_path / "home")})
    assert out.returncode == 2 and "run `causal-assets build default`" in out.stderr.strip().splitlines()[-1]


def _tiny_index(base: Path) -> None:
    from causal_assets.core.index.build import build_sparse, sparse_frames
    from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, compute_fingerprint
    from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic

    texts = ["networkx.shortest_path\n@nx._dispatchable\ndef shortest_path(G, source, target):\n"
             "    Compute shortest paths in the graph between two nodes.",
             "networkx.pagerank\ndef pagerank(G): Rank the nodes of a graph by the structure of incoming links."]
    chunks = pd.DataFrame({"chunk_idx": [0, 1], "chunk_id": ["networkx.shortest_path", "networkx.pagerank"],
                           "corpus": "default", "source": "networkx", "path": "", "kind": "function",
                           "title": ["networkx.shortest_path", "networkx.pagerank"], "text": texts,
                           "start_line": 1, "end_line": 3, "content_hash": ["a", "b"], "metadata": "{}",
                           "index_options": json.dumps({"split_identifiers": True})})
    chunks[FINGERPRINT] = compute_fingerprint(chunks)   # as the corpus_chunks asset writes it
    write_parquet_atomic(chunks, asset_path(base, "corpus_chunks", "default"))
    postings, vocab = sparse_frames(build_sparse(chunks, True)[0], "default", chunks_fingerprint(chunks))
    write_parquet_atomic(postings, asset_path(base, "sparse_postings", "default"))
    write_parquet_atomic(vocab, asset_path(base, "sparse_vocabulary", "default"))


def test_bm25_search_imports_no_dagster_torch_or_sklearn_and_shows_text(tmp_path):
    _tiny_index(tmp_path / "pq")
    out = run_cli("--base-path", str(tmp_path / "pq"), "search", "shortest path between two nodes", "-k", "1",
                  probe=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []  # nothing heavy, and nothing else on stderr
    first, snippet = out.stdout.splitlines()[:2]
    assert "networkx.shortest_path" in first
    assert "Compute shortest paths" in snippet and "networkx.shortest_path" not in snippet and "@nx" not in snippet
    # fewer matches than -k: said, not left to be guessed (a zero BM25 score is no match)
    out = run_cli("--base-path", str(tmp_path / "pq"), "search", "shortest path", "-k", "5")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 2, out.stdout
    assert "only 1 chunk(s) of corpus 'default' contain a term of the query" in out.stderr


def test_snippet_drops_what_the_other_columns_show():
    from causal_assets.commands.search import snippet

    assert snippet("Neil Peart\nNeil Ellwood Peart was a drummer.", "hotpotqa/12/Neil Peart", "Neil Peart") == \
        "Neil Ellwood Peart was a drummer."
    long = snippet("x " * 200, "id", "t", width=20)
    assert len(long) == 20 and long.endswith("…")


@pytest.mark.slow
def test_build_finishes_a_multi_asset_a_kill_left_half_written_under_its_base_path(tmp_path):
    """`build` in a fresh process, as a user runs it: a corpus whose sparse index lost one of its two files (a run
    killed between the multi-asset's writes) is built again whole, under --base-path, instead of failing on a subset
    Dagster refuses (and the runs had written to the configured base path while the command read --base-path). The
    configured catalog, whose views are over the configured base path, is left alone (its views had been re-pointed
    at --base-path: the suite did it to the checkout's catalog)."""
    base, configured_catalog = tmp_path / "pq", tmp_path / "configured.duckdb"
    _tiny_index(base)
    postings, vocabulary = (base / name / "default.parquet" for name in ("sparse_postings", "sparse_vocabulary"))
    vocabulary.unlink()
    out = run_cli("--base-path", str(base), "build", "default", "--index-only",
                  env={"DAGSTER_HOME": str(tmp_path / "home"), "CAUSAL_ASSETS_CATALOG": str(configured_catalog)})
    assert out.returncode == 0, out.stderr
    assert "sparse_postings, sparse_vocabulary" in out.stderr and vocabulary.exists() and postings.exists()
    assert pd.read_parquet(vocabulary)["build_id"].nunique() == 1 == \
        len(set(pd.read_parquet(vocabulary)["build_id"]) | set(pd.read_parquet(postings)["build_id"]))
    assert not configured_catalog.exists()


@pytest.mark.slow
def test_search_builds_a_missing_index_under_its_base_path(tmp_path):
    """`--base-path X search` on a corpus whose index is not built under X builds it under X, rather than failing
    with "this process's code location writes to ..., not X: run the command in a new process"."""
    base, configured_catalog = tmp_path / "pq", tmp_path / "configured.duckdb"
    _tiny_index(base)
    (base / "sparse_vocabulary" / "default.parquet").unlink()
    out = run_cli("--base-path", str(base), "search", "shortest path between two nodes", "-k", "1",
                  env={"DAGSTER_HOME": str(tmp_path / "home"), "CAUSAL_ASSETS_CATALOG": str(configured_catalog)})
    assert out.returncode == 0, out.stderr
    assert "networkx.shortest_path" in out.stdout.splitlines()[0], out.stdout
    assert (base / "sparse_vocabulary" / "default.parquet").exists() and not configured_catalog.exists()


def test_the_configured_catalog_keeps_its_views_over_the_configured_base_path(tmp_path, monkeypatch, capsys):
    """`--base-path X catalog` re-pointed the configured catalog's views at X; it now needs --catalog-path."""
    from causal_assets.cli import main
    from causal_assets.core.outputs.catalog import DuckDBCatalog

    _tiny_index(tmp_path / "pq")
    _tiny_index(tmp_path / "configured")
    monkeypatch.setenv("CAUSAL_ASSETS_CATALOG", str(tmp_path / "configured.duckdb"))
    monkeypatch.setenv("CAUSAL_ASSETS_BASE_PATH", str(tmp_path / "configured"))
    assert main(["--base-path", str(tmp_path / "pq"), "catalog"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"holds the views over the configured base path {tmp_path / 'configured'}" in line and \
        "give --catalog-path FILE" in line, line
    assert not (tmp_path / "configured.duckdb").exists()
    assert main(["--base-path", str(tmp_path / "pq"), "catalog", "--catalog-path", str(tmp_path / "x.duckdb")]) == 0
    assert main(["--base-path", str(tmp_path / "configured") + "/", "catalog"]) == 0  # the configured base: its own
    with DuckDBCatalog(tmp_path / "configured.duckdb").connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone() == (2,)


def _failure_line_of(fail, retries: int = 0) -> str:
    """`failure_line` of a real run whose one step calls `fail`."""
    from dagster import RetryPolicy, job, op

    from causal_assets.commands.build import failure_line

    @op(retry_policy=RetryPolicy(max_retries=retries) if retries else None)
    def the_step():
        fail()

    @job
    def once():
        the_step()

    return failure_line(once.execute_in_process(raise_on_error=False))


def test_the_failure_line_is_the_steps_cause():
    """Not Dagster's wrappers: "DagsterExecutionStepExecutionError: Error occurred while executing op ..." (a
    build's duplicate chunk ids), nor "Exceeded max_retries of 2" (an LLM step whose endpoint was down)."""
    from causal_assets.core.foundation.errors import CorpusError

    def duplicate_ids():
        raise CorpusError("corpus 'clash': duplicate chunk ids, e.g. 'utils.parse'")

    def endpoint_down():
        raise ConnectionError("LLM endpoint http://127.0.0.1:9/v1 refused the connection")

    assert _failure_line_of(duplicate_ids) == ("step the_step failed: causal_assets.core.foundation.errors.CorpusError: corpus "
                                               "'clash': duplicate chunk ids, e.g. 'utils.parse'")
    assert _failure_line_of(endpoint_down, retries=1) == ("step the_step failed: ConnectionError: LLM "
                                                          "endpoint http://127.0.0.1:9/v1 refused the connection")


def test_the_failure_line_of_a_failed_write_or_read_is_its_cause():
    """A full disk while the IO manager writes an output: the failure line names the cause, not only Dagster's
    "Error occurred while handling output ..." wrapper, which ends with a colon; the same for loading an input."""
    from dagster import In, IOManager, io_manager, job, op

    from causal_assets.commands.build import failure_line

    class FullDisk(IOManager):
        def handle_output(self, context, obj):
            if obj == "write":
                raise OSError(28, "No space left on device")

        def load_input(self, context):
            raise OSError(5, "Input/output error")

    @op
    def produce():
        return "write"

    @op
    def fine():
        return "ok"

    @op(ins={"x": In()})
    def consume(x):
        return "ok"

    @job(resource_defs={"io_manager": io_manager(lambda _: FullDisk())})
    def writes():
        produce()

    @job(resource_defs={"io_manager": io_manager(lambda _: FullDisk())})
    def reads():
        consume(fine())

    assert failure_line(writes.execute_in_process(raise_on_error=False)) == \
        "step produce failed: OSError: [Errno 28] No space left on device"
    assert failure_line(reads.execute_in_process(raise_on_error=False)) == \
        "step consume failed: OSError: [Errno 5] Input/output error"


def test_a_reader_that_goes_away_stops_search_quietly(tmp_path):
    """`causal-assets search ... | head -1`: the pipe closes before the results are written; no traceback. Run
    through the command's own entry point, as the installed script does: `main` alone leaves the process to Python's
    teardown, where a native thread still alive aborts it (exit 134) on a busy machine."""
    _tiny_index(tmp_path / "pq")
    proc = subprocess.Popen([sys.executable, "-c", "from causal_assets.cli import entry_point; entry_point()",
                             "--base-path", str(tmp_path / "pq"), "search", "shortest path", "-k", "2"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()   # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_command_exits_without_the_interpreters_teardown():
    """`ask` printed its answer, then aborted in Python's finalization (exit 134, a gdb backtrace) on a native
    thread still running. The command skips the teardown (here: a thread it would wait 600 s for), while its
    exit handlers still run and the exit code is the command's."""
    import time

    assert 'causal-assets = "causal_assets.cli:entry_point"' in (ROOT / "pyproject.toml").read_text()
    code = ("import atexit, sys, threading, time\n"
            "atexit.register(lambda: print('exit handlers ran', flush=True))\n"
            "threading.Thread(target=time.sleep, args=(600,)).start()\n"
            "sys.argv = ['causal-assets', 'search', ' ']\n"
            "from causal_assets.cli import entry_point\nentry_point()\n")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (2, "exit handlers ran"), out.stderr
    assert "query is empty" in out.stderr and time.monotonic() - started < 60



def test_params_giving_a_key_twice_are_refused_naming_it(tmp_path, monkeypatch, capsys):
    """`--params '{"weight": 0.5, "weight": 0.9}'` searched with 0.9 (JSON keeps the last), silently."""
    code, err = run_main(monkeypatch, capsys, "--base-path", str(tmp_path / "pq"), "search", "x", "--method",
                         "hybrid", "--params", '{"weight": 0.5, "weight": 0.9}')
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--params: key 'weight' given twice in one object" in err, err
    assert not (tmp_path / "pq").exists()


@pytest.mark.parametrize("params, message", [
    ('{"weight": NaN}', "--params: NaN is not a JSON value"),
    ('{"weight": 1e999}', "--params: weight is inf: numbers must be finite"),
    ('{"members": {"hybrid": {"weight": -Infinity}}}', "--params: -Infinity is not a JSON value"),
    ('{"members": {"hybrid": {"weight": -1e400}}}', "--params: members.hybrid.weight is -inf: numbers must be finite"),
])
def test_params_with_a_number_that_is_not_finite_are_refused(tmp_path, monkeypatch, capsys, params, message):
    """`--params '{"weight": NaN}'` (or 1e999, read as infinity) returned NaN scores with exit code 0."""
    code, err = run_main(monkeypatch, capsys, "--base-path", str(tmp_path / "pq"), "search", "x", "--method",
                         "hybrid", "--params", params)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert message in err, err
    assert not (tmp_path / "pq").exists()


@pytest.mark.parametrize("method, params, message", [
    ("hybrid", '{"weight": 7}', "--params weight: must be a number in [0, 1] (value: 7)"),
    ("rrf", '{"depth": 0}', "--params depth: must be a whole number from 1 to 10,000 (value: 0)"),
    ("fusion", '{"members": {"bm25": {}}, "c": 1e6}', "--params c: must be a number from 0 to 10,000"),
    ("causal", '{"shortlist": "dense"}', "--params shortlist: unknown shortlist 'dense'; known: bm25, hybrid"),
])
def test_params_outside_their_bounds_are_refused_before_the_index_loads(tmp_path, monkeypatch, capsys, method,
                                                                        params, message):
    """`--params '{"weight": 7}'` ranked by seven times the dense score minus six times BM25's, with exit code 0."""
    code, err = run_main(monkeypatch, capsys, "--base-path", str(tmp_path / "pq"), "search", "x", "--method", method,
                         "--params", params)
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "pq").exists()


def test_learned_without_a_model_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    """`search --method learned` with no benchmark over the corpus having fitted one says how to get it (tune a
    benchmark, or name its model), in one line, before loading anything; `--tuned` of an untuned benchmark too."""
    env = {"CAUSAL_ASSETS_REPORTS": str(tmp_path / "reports"), "CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "pq")}
    code, err = run_main(monkeypatch, capsys, "search", "x", "--method", "learned", env=env)
    assert code == 2 and "--method learned needs a fitted model: no benchmark over corpus 'default' has tuned one " \
                         "here (`causal-assets tune BENCHMARK`)" in err, err
    assert len(err.strip().splitlines()) == 1
    code, err = run_main(monkeypatch, capsys, "search", "x", "--tuned", "default", env=env)
    assert code == 2 and "--tuned: benchmark 'default' has no tuned retriever here (run `causal-assets tune " \
                         "default` first)" in err, err


def test_an_unusable_dagster_home_is_one_line(tmp_path, monkeypatch, capsys):
    """A read-only DAGSTER_HOME (here: one whose history/ is a file, as root ignores file modes) gave `ask` a
    70-line traceback from the instance's storage."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "history").write_text("not a directory")
    code, err = run_main(monkeypatch, capsys, "--base-path", str(tmp_path / "pq"), "ask", "Who?", "--corpus",
                         "default", "--no-build", env={"DAGSTER_HOME": str(home)})
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert line.startswith(f"causal-assets: Dagster instance {home} (DAGSTER_HOME) cannot be used: ") and \
        line.endswith("it must be a writable directory"), line


@pytest.mark.parametrize("redirect, code", [(">&-", 0), ("> /dev/full", 1)])
def test_results_to_a_closed_or_full_output_end_in_one_line(tmp_path, redirect, code):
    """With stdout closed, the exit's flush met `sys.stdout is None` (a traceback, exit 1); on a full disk the
    results' write was an OSError traceback."""
    _tiny_index(tmp_path / "pq")
    script = ("import sys; sys.argv = ['causal-assets', '--base-path', sys.argv[1], 'search', 'shortest path', "
              "'-k', '1']; from causal_assets.cli import entry_point; entry_point()")
    out = subprocess.run(["bash", "-c", f'"$0" -c "$1" "$2" {redirect}', sys.executable, script, str(tmp_path / "pq")],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == code and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == (["causal-assets: No space left on device"] if code else []), out.stderr


@pytest.mark.slow
def test_build_rebuilds_index_parts_built_from_older_chunks(tmp_path):
    """`build` of a corpus whose chunks were re-materialized alone (a file added to its folder) said "already
    built", and search served the old index for the new chunks; now it names the parts and rebuilds them."""
    import yaml
    from dagster import DagsterInstance, materialize

    from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
    from causal_assets.resources import CorpusRegistry, ParquetIOManagerFactory, Storage

    docs, base = tmp_path / "docs", tmp_path / "pq"
    docs.mkdir()
    (docs / "a.md").write_text("# Dijkstra\n\nDijkstra's algorithm finds shortest paths in weighted graphs.\n")
    (docs / "b.md").write_text("# Kruskal\n\nKruskal's algorithm builds a minimum spanning tree.\n")
    registry = tmp_path / "corpora.yaml"
    registry.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "folder", "path": str(docs)}]}))
    storage = Storage(base_path=str(base), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    resources = {"storage": storage, "corpus_registry": CorpusRegistry(path=str(registry)),
                 "io_manager": ParquetIOManagerFactory(storage=storage)}
    assets = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary]
    with DagsterInstance.ephemeral() as instance:
        assert materialize(assets, resources=resources, partition_key="default", instance=instance).success
        (docs / "c.md").write_text("# Greedy colouring\n\nGreedy colouring gives each vertex the lowest free colour.\n")
        assert materialize(assets, resources=resources, partition_key="default", instance=instance,
                           selection=["corpus_chunks"]).success
    env = {"DAGSTER_HOME": str(tmp_path / "home"), "CAUSAL_ASSETS_CORPORA": str(registry),
           "CAUSAL_ASSETS_CATALOG": str(tmp_path / "catalog.duckdb")}
    out = run_cli("--base-path", str(base), "search", "greedy colouring", "--no-build", env=env)
    assert out.returncode == 2 and "(built from older chunks: sparse_postings, sparse_vocabulary)" in out.stderr, \
        out.stderr
    out = run_cli("--base-path", str(base), "build", "default", "--index-only", env=env)
    assert out.returncode == 0, out.stderr
    assert ("sparse_postings, sparse_vocabulary, corpus_embeddings were built from another version of its chunks; "
            "rebuilding them") in out.stderr, out.stderr
    for method in ("bm25", "dense"):
        out = run_cli("--base-path", str(base), "search", "greedy colouring of a vertex", "-k", "1", "--method",
                      method, "--no-build", "--json", env=env)
        assert out.returncode == 0 and json.loads(out.stdout)[0]["chunk_id"] == "c.md#0", (method, out.stderr)


def test_quiet_terminal_drops_log_records_the_command_reports_as_its_error_line():
    """The LLM client logs each failure it then raises; without --verbose the terminal showed it as an `ERROR:`
    line (once per attempt of a retried step) before the command's own error line. Other libraries' errors stay."""
    code = ("import logging\nfrom causal_assets.commands import quiet\nquiet()\n"
            "logging.getLogger('causal_assets.core.llm.client').error('llm chat call failed after 1 attempt(s)')\n"
            "logging.getLogger('causal_assets.core.llm.client').critical('llm client cannot go on')\n"
            "logging.getLogger('some.library').error('a library error')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["CRITICAL:causal_assets.core.llm.client:llm client cannot go on",
                                       "ERROR:some.library:a library error"], out.stderr


@pytest.mark.slow
def test_ask_whose_llm_call_fails_prints_one_error_line(tmp_path):
    import shutil

    import yaml

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Dijkstra\n\nDijkstra's algorithm was published by Edsger Dijkstra in 1959. "
                               "Edsger Dijkstra worked in Amsterdam.\n")
    (docs / "b.md").write_text("# Kruskal\n\nKruskal's algorithm was published by Joseph Kruskal in 1956. "
                               "Joseph Kruskal worked at Bell Labs.\n")
    registry = tmp_path / "corpora.yaml"
    registry.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "folder", "path": str(docs)}]}))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "data" / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    # an endpoint that answers every request 400 (a model it does not have)
    with FakeEndpoint(status(400, "model does not exist")) as endpoint:
        out = run_cli("ask", "Who published Dijkstra's algorithm?", "--corpus", "default", env={
            "DAGSTER_HOME": str(home), "CAUSAL_ASSETS_CORPORA": str(registry), "CAUSAL_ASSETS_CATALOG": "none",
            "CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "pq"), "CAUSAL_ASSETS_QUERIES": str(tmp_path / "queries"),
            "CAUSAL_ASSETS_REPORTS": str(tmp_path / "reports"), "CAUSAL_ASSETS_LLM_CACHE": str(tmp_path / "llm.sqlite"),
            "CAUSAL_ASSETS_LLM_BASE_URL": endpoint.url})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and all(line.startswith("causal-assets: ") for line in lines), out.stderr
    assert lines[-1].startswith("causal-assets: answering failed: step causal_search failed: ") and \
        "Error code: 400 - model does not exist" in lines[-1], out.stderr
    # the status said once (a whole number: the question id, a port or a rate may hold the digits 400)
    assert sum(bool(re.search(r"(?<!\d)400(?!\d)", line)) for line in lines) == 1, out.stderr


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-1", "soon"])
@pytest.mark.parametrize("command", [["ask", "Who wrote it?", "--corpus", "nope"], ["label", "nope"],
                                     ["all", "nope"]])
def test_a_wait_that_is_no_finite_number_of_seconds_is_refused_in_one_line(capsys, command, value):
    """`--wait inf` (or `1e400`, `nan`) parsed as a float and reached the wait for a pool slot: a traceback (a
    deadline of inf), or a wait that never ends. Refused with the arguments, before anything else."""
    from causal_assets.cli import main

    with pytest.raises(SystemExit) as e:
        main([*command, "--wait", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"argument --wait: expected a finite number of seconds, 0 or more, not {value!r}" in err, err
