"""causal-assets: search a corpus, ask a question, label, tune and evaluate a benchmark, query the DuckDB catalog,
export labels.

`search` and `ask` build what they need the first time (the corpus index, and for `ask` the graph), saying what
and how long; `--no-build` refuses instead and names the command that builds it.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import math
import os
import sys

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.foundation.paths import DEFAULT_CORPUS, QUESTION_CORPUS
from causal_assets.core.registry.retrievers import RETRIEVERS, cli_help
from causal_assets.exit_codes import EXIT_INTERRUPTED
from causal_assets.settings import Settings

# `search --method` choices: every retriever kind (the table is pure data, so `--help` imports nothing heavy).
METHODS = RETRIEVERS
METHOD_HELP = cli_help()


def seconds(text: str) -> float:
    """A `--wait` value: a finite number of seconds, 0 or more (`inf`, `nan` and `1e400` parse as floats)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, 0 or more, not {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def build_parser(settings: Settings | None = None) -> argparse.ArgumentParser:
    """The parser, its defaults from `settings` (default: the environment's; the same settings as the code
    location's resources, read without importing Dagster)."""
    settings = settings or Settings.from_env()
    parser = _Parser(prog="causal-assets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(settings=settings)
    parser.add_argument("--base-path", default=settings.base_path,
                        help="Parquet base path or fsspec URL (default $CAUSAL_ASSETS_BASE_PATH or data/parquet)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show Dagster's run log (DEBUG), library warnings and progress bars")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("search", help="search a corpus (builds its index the first time)")
    s.add_argument("query", help="the query, or - to read it from standard input")
    s.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"a registered corpus (default: {DEFAULT_CORPUS})")
    s.add_argument("--method", "--retriever", dest="method", choices=METHODS, default=None, metavar="METHOD",
                   help=METHOD_HELP)
    s.add_argument("--params", default="{}", help="retriever params as JSON (e.g. cascade RetrievalConfig sections)")
    s.add_argument("--tuned", metavar="BENCHMARK",
                   help="the retriever tuning selected for BENCHMARK, with its tuned params (and fitted model), on "
                        "its corpus; with --method, that retriever's tuned params instead")
    s.add_argument("-k", type=int, default=10, help="number of results (default 10)")
    s.add_argument("--json", action="store_true", help="print the hits as JSON")
    s.add_argument("--no-build", action="store_true", help="refuse instead of building a missing index")
    s.set_defaults(command="search")

    a = sub.add_parser("ask", help="answer a question from a corpus graph with the local LLM, with its sources")
    a.add_argument("query")
    a.add_argument("--corpus", default=QUESTION_CORPUS, help=f"a registered corpus (default: {QUESTION_CORPUS})")
    a.add_argument("--wait", type=seconds, default=settings.pool_wait_s,
                   help="seconds to wait for a free 'llm' pool slot before giving up with exit code 3 "
                        "(default $CAUSAL_ASSETS_POOL_WAIT_S or 300)")
    a.add_argument("--no-build", action="store_true", help="refuse instead of building a missing index or graph")
    a.set_defaults(command="ask")

    for name, help_text, command in (
            ("label", "Monte Carlo labels of a benchmark's questions: which documents help the solver answer", "label"),
            ("tune", "tune the retrievers on a benchmark's tune split and store the winner", "tune"),
            ("evaluate", "evaluate every retriever on a benchmark's eval splits: metrics and a report", "evaluate"),
            ("all", "label, tune and evaluate a benchmark in one run", "all_stages")):
        c = sub.add_parser(name, help=help_text + " (builds the corpus index first when missing)")
        c.add_argument("benchmark", help="a registered benchmark ($CAUSAL_ASSETS_BENCHMARKS or the shipped registry)")
        if name in ("label", "all"):
            c.add_argument("--wait", type=seconds, default=settings.pool_wait_s,
                           help="seconds to wait for a free 'llm' pool slot before giving up with exit code 3 "
                                "(default $CAUSAL_ASSETS_POOL_WAIT_S or 300)")
        if name == "label":
            c.add_argument("--dry-run", action="store_true",
                           help="print the plan (questions x budget = solver calls, prompt tokens, minutes on this "
                                "machine) and stop: nothing built, no call")
        if name == "evaluate":
            c.add_argument("--fail-on-regression", action="store_true",
                           help="exit 4 when the regression gate finds a significant drop below the accepted "
                                "baseline (the benchmark registry's `gate:`)")
        c.add_argument("--no-build", action="store_true", help="refuse instead of building a missing index or graph")
        c.set_defaults(command=command)

    g = sub.add_parser("accept", help="accept a benchmark's latest (or a named) evaluation as the regression gate's "
                                      "baseline")
    g.add_argument("benchmark")
    g.add_argument("--run", help="a stored evaluation's run id (or its prefix) or tuned configuration version "
                                 "(default: the latest)")
    g.set_defaults(command="accept")

    m = sub.add_parser("compare", help="compare two evaluations per retriever and metric: Δ, interval, p, and the "
                                       "questions that changed most")
    m.add_argument("a", help="BENCHMARK (its accepted baseline), BENCHMARK@latest or BENCHMARK@RUN (a run id prefix "
                             "or configuration version)")
    m.add_argument("b", help="the same forms; B - A is reported")
    m.add_argument("--metric", action="append", help="metric@k to compare (repeatable; default ndcg@10 and the "
                                                     "answer gain at its largest k)")
    m.set_defaults(command="compare")

    b = sub.add_parser("build", help="build a corpus's index and graph (what search and ask need)")
    b.add_argument("corpus")
    b.add_argument("--index-only", action="store_true", help="only the corpus index (what search needs)")
    b.set_defaults(command="build")

    e = sub.add_parser("export-labels", help="write a benchmark's Monte Carlo labels as BEIR/TREC/Parquet/HF dataset")
    e.add_argument("benchmark")
    e.add_argument("--out", help="output directory (default data/datasets/BENCHMARK)")
    e.add_argument("--estimator", help="which estimator's labels (default: the labels' own, not the naive rows)")
    e.add_argument("--solver", help="the solver model, for the dataset card of labels that do not record it")
    e.add_argument("--no-hf", action="store_true", help="skip the Hugging Face dataset (hf/)")
    e.add_argument("--force", action="store_true",
                   help="export labels that decide nothing (all UNCERTAIN, or infinite intervals) all the same")
    e.set_defaults(command="export_labels")

    catalog_help = ("the catalog file (default $CAUSAL_ASSETS_CATALOG or data/causal_assets.duckdb, whose views are "
                    "over the configured base path: needed with another --base-path)")
    c = sub.add_parser("catalog", help="(re)create the DuckDB views over every materialized asset")
    c.add_argument("--catalog-path", help=catalog_help)
    c.set_defaults(command="catalog")

    q = sub.add_parser("sql", help="the SQL shell: run a query on the DuckDB catalog (read-only)")
    q.add_argument("query")
    q.add_argument("--catalog-path", help=catalog_help)
    q.set_defaults(command="sql")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        settings = Settings.from_env()
    except ConfigError as e:  # a bad variable: one line naming it, before anything else
        print(f"causal-assets: {e}", file=sys.stderr)
        return 2
    args = build_parser(settings).parse_args(argv)
    # The command modules import Dagster, pandas, DuckDB or the index (seconds): only the one that runs, and only
    # after the arguments parsed, so `--help` and argument errors stay instant.
    try:
        return importlib.import_module("causal_assets.commands").run(args)
    except KeyboardInterrupt:   # Ctrl-C while the command's modules were still being imported
        print("causal-assets: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def entry_point() -> None:
    """The `causal-assets` command: `main`, then an exit without the interpreter's teardown. The command's work is
    done and its exit handlers run (logging's flush, the LLM servers' stop), but native threads of llama.cpp and
    Arrow can still be running when Python finalizes, and a thread destroyed there aborts the process
    (`terminate called without an active exception`, exit 134, ggml's gdb backtrace; apache/arrow#34314) after an
    answer was printed. `main` itself returns its code, for callers in this process (the tests)."""
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:   # None: started with the descriptor closed (`>&-`)
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or a full disk: nothing more can be said
            pass
    os._exit(code)


if __name__ == "__main__":
    entry_point()
