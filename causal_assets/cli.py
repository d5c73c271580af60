"""`causal-assets` command line: ad-hoc search over a materialized index, and DuckDB catalog refresh."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import duckdb

from causal_assets.core.catalog import DuckDBCatalog, check_analysis_sql
from causal_assets.core.errors import CausalAssetsError
from causal_assets.core.graph.store import load_chunk_neighbors
from causal_assets.core.index.search import METHODS, CorpusIndex
from causal_assets.core.retrievers.factory import RETRIEVERS, build_retriever
from causal_assets.core.causal_search.inbox import MAX_QUERY_CHARS
from causal_assets.core.storage import asset_path, read_parquet, safe_name
from causal_assets.resources import DEFAULT_BASE, DEFAULT_CATALOG


def _search(args: argparse.Namespace) -> int:
    query = sys.stdin.read() if args.query == "-" else args.query
    if not query.strip():
        raise ValueError("query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if args.k < 1:
        raise ValueError(f"-k must be at least 1 (got {args.k})")
    safe_name(args.corpus, "corpus")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as e:
        raise ValueError(f"--params is not valid JSON ({e})") from None
    index = CorpusIndex.load(args.base_path, args.corpus, dense=args.method not in ("bm25", "tfidf"))
    if args.method in METHODS:
        hits = index.search(query, k=args.k, method=args.method)
    else:
        retriever = build_retriever(args.method, index, params, load_chunk_neighbors(args.base_path, args.corpus))
        hits = retriever.retrieve_many([query], args.k)[0]
    if args.method in ("bm25", "tfidf"):
        hits = [h for h in hits if h.score > 0]  # a zero score is no match, not a result
        if not hits:
            terms = index.terms(query)
            why = (f"no chunk of corpus {args.corpus!r} contains any of the query's index terms {terms[:20]}" if terms
                   else "the query has no index terms (only stopwords, punctuation or symbols)")
            print(f"causal-assets: {why}; nothing for {args.method} to match (try --method dense)", file=sys.stderr)
            if args.json:
                print("[]")
            return 1
    if args.json:
        print(json.dumps([h.__dict__ for h in hits], indent=2))
        return 0
    for h in hits:
        snippet = " ".join(index.text(h.chunk_id).split())[:100]
        print(f"{h.rank:>3}  {h.score:8.4f}  {h.chunk_id}  [{h.kind}]  {snippet}")
    return 0


def _catalog(args: argparse.Namespace) -> int:
    status = DuckDBCatalog(args.catalog_path, lock_timeout_s=10).refresh_from_storage(args.base_path)
    for name, s in sorted(status.items()):
        print(f"{name}: {s}")
    return 1 if "deferred" in status.values() else 0


def _sql(args: argparse.Namespace) -> int:
    """Query the catalog read-only, with the base path's fsspec filesystem registered (needed for views over URLs
    DuckDB cannot read itself). Only queries (SELECT/EXPLAIN) run, and DuckDB may read nothing but the Parquet
    under the base path: no file writes, no other files, no extensions (README "Security model")."""
    check_analysis_sql(args.query)
    catalog = DuckDBCatalog(args.catalog_path, lock_timeout_s=10, base=args.base_path)
    try:
        with catalog.connect_for_analysis(args.base_path) as con:
            print(con.sql(args.query).df().to_string(index=False))
    except duckdb.Error as e:
        print(f"causal-assets: sql: {e}", file=sys.stderr)
        return 2
    return 0


POOL_WAIT_ENV = "CAUSAL_ASSETS_POOL_WAIT_S"
EXIT_POOL_BLOCKED = 3


def _pool_watchdog(instance, run_id: str, wait_s: float, pool: str) -> None:
    """Bound the in-run wait for a pool slot. Dagster's in-process execution waits for a slot without end and, while
    it waits, only records SIGINT/SIGTERM: this thread frees slots of dead runs as they appear and, when this run's
    step has waited `wait_s` (or an interrupt arrived while it waits), marks the run FAILURE, gives its place in the
    queue back and exits with a message."""
    import threading

    from dagster._utils.interrupts import check_captured_interrupt

    from causal_assets.run_health import blocked_message, pool_holders, reap_dead_runs

    def watch() -> None:
        blocked_since = None
        while True:
            time.sleep(1.0)
            try:
                pending = [p for p in instance.event_log_storage.get_concurrency_info(pool).pending_steps
                           if p.run_id == run_id and p.assigned_timestamp is None]
                if not pending:
                    blocked_since = None
                    continue
                blocked_since = blocked_since or time.monotonic()
                reap_dead_runs(instance, pool)
                waited = time.monotonic() - blocked_since
                interrupted = check_captured_interrupt()
                if waited < wait_s and not interrupted:
                    continue
                why = "interrupted" if interrupted else blocked_message(pool, pool_holders(instance, pool), waited)
                run = instance.get_run_by_id(run_id)
                if run is not None and not run.is_finished:
                    instance.report_run_failed(run, f"causal-assets ask gave up waiting for a {pool!r} slot: {why}")
                instance.event_log_storage.free_concurrency_slots_for_run(run_id)
                print(f"causal-assets: {why}\nrun {run_id} marked FAILURE", file=sys.stderr, flush=True)
                os._exit(130 if interrupted else EXIT_POOL_BLOCKED)  # the main thread sleeps inside Dagster's wait loop
            except Exception as e:  # never let the watchdog kill a healthy run
                print(f"causal-assets: pool watchdog: {e}", file=sys.stderr, flush=True)
                return

    threading.Thread(target=watch, name="pool-watchdog", daemon=True).start()


def _ask(args: argparse.Namespace) -> int:
    """Submit a query and run retrieval + causal search for it now, in this process (runs show up in the UI
    when DAGSTER_HOME is the one `dagster dev` uses). The LLM step needs a slot of the `llm` pool: slots held by dead
    runs are freed, and the wait for a slot is bounded by --wait (exit 3 with the holders named)."""
    from causal_assets.core.causal_search import inbox
    from causal_assets.core.corpus.registry import available_corpora

    # Refused before anything exists: no record, no partition, no run for a bad corpus or query.
    known = available_corpora()
    inbox.check_corpus(args.corpus, known)
    if not " ".join(args.query.split()):
        raise ValueError("query is empty")
    if len(args.query) > MAX_QUERY_CHARS:
        raise ValueError(f"query is {len(args.query)} characters; the limit is {MAX_QUERY_CHARS}")

    from dagster import DagsterInstance
    from dagster._core.utils import make_new_run_id

    from causal_assets.definitions import defs
    from causal_assets.defs.search import QUERIES_DIR, query_partitions
    from causal_assets.run_health import LLM_POOL, blocked_message, wait_for_slot

    if args.wait < 0:
        raise ValueError(f"--wait must be at least 0 seconds (got {args.wait})")
    instance = DagsterInstance.get()
    t0 = time.monotonic()
    free, holders = wait_for_slot(instance, LLM_POOL, args.wait, on_wait=lambda h: print(
        f"causal-assets: waiting up to {args.wait:.0f}s for a free {LLM_POOL!r} slot (held by "
        f"{', '.join(x.describe() for x in h)})", file=sys.stderr, flush=True))
    if not free:
        print(f"causal-assets: {blocked_message(LLM_POOL, holders, time.monotonic() - t0)}", file=sys.stderr)
        return EXIT_POOL_BLOCKED
    qid = inbox.submit(QUERIES_DIR, args.query, args.corpus, known_corpora=known)
    instance.add_dynamic_partitions(query_partitions.name, [qid])
    run_id = make_new_run_id()
    _pool_watchdog(instance, run_id, max(args.wait - (time.monotonic() - t0), 0.0), LLM_POOL)
    result = defs.resolve_job_def("search_job").execute_in_process(partition_key=qid, instance=instance, run_id=run_id)
    if not result.success:
        print(f"causal-assets: search run for {qid} failed; see the run {result.run_id} in the UI", file=sys.stderr)
        return 1
    row = read_parquet(asset_path(args.base_path, "causal_search", qid)).iloc[0]
    print(row["response"])
    print(f"\nquery id {qid}; report: {row['report_path']}; network data: {row['network_data_path']}")
    return 0


def _export_labels(args: argparse.Namespace) -> int:
    """The labels_export asset without Dagster: mc_labels + candidate_pools of a benchmark from the Parquet base."""
    from pathlib import Path

    from causal_assets.core.benchmarks import load_benchmark_registry
    from causal_assets.core.export import DatasetCard, agreement_with_seeds, export_labels, pick_estimator
    from causal_assets.resources import DEFAULT_REPORTS

    safe_name(args.benchmark, "benchmark")
    labels = read_parquet(asset_path(args.base_path, "mc_labels", args.benchmark))
    pools = read_parquet(asset_path(args.base_path, "candidate_pools", args.benchmark))
    specs = load_benchmark_registry()
    mc = dict(specs[args.benchmark].monte_carlo or {}) if args.benchmark in specs else {}
    split = specs[args.benchmark].label_split if args.benchmark in specs else "labels"
    estimator = pick_estimator(labels, args.estimator)
    budgets = {k: v for k, v in {"solver calls per question (configured)": mc.get("budget"),
                                 "label threshold": mc.get("threshold"),
                                 "questions labelled": int(labels["question_id"].nunique())}.items() if v is not None}
    card = DatasetCard(benchmark=args.benchmark, split=split, solver=args.solver, estimator=estimator,
                       budgets=budgets, quality=agreement_with_seeds(labels, estimator))
    out = args.out or str(Path(DEFAULT_REPORTS).parent / "datasets" / args.benchmark)
    result = export_labels(labels, pools, out, card, estimator=estimator, hf=not args.no_hf)
    print(f"{result.judgements} judgements ({result.questions} questions, {result.documents} documents, "
          f"grades {result.by_grade}, estimator {result.estimator}) -> {result.path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="causal-assets", description=__doc__)
    parser.add_argument("--base-path", default=DEFAULT_BASE, help="Parquet base path or fsspec URL")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("search", help="search a materialized corpus index")
    s.add_argument("query", help="the query, or - to read it from standard input")
    s.add_argument("--corpus", default="default")
    s.add_argument("--method", "--retriever", dest="method", choices=RETRIEVERS, default="bm25",
                   help="bm25 | tfidf | dense | hybrid | rrf | cascade | entity_first")
    s.add_argument("--params", default="{}", help="retriever params as JSON (e.g. cascade RetrievalConfig sections)")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_search)

    a = sub.add_parser("ask", help="causal search (seed 004) for a question, as a new `queries` partition")
    a.add_argument("query")
    a.add_argument("--corpus", default="hotpotqa", help="a corpus with a text entity graph")
    a.add_argument("--wait", type=float, default=float(os.environ.get(POOL_WAIT_ENV) or 300),
                   help=f"seconds to wait for a free 'llm' pool slot before giving up with exit code 3 "
                        f"(default ${POOL_WAIT_ENV} or 300)")
    a.set_defaults(func=_ask)

    e = sub.add_parser("export-labels", help="write a benchmark's Monte Carlo labels as BEIR/TREC/Parquet/HF dataset")
    e.add_argument("benchmark")
    e.add_argument("--out", help="output directory (default data/datasets/BENCHMARK)")
    e.add_argument("--estimator", help="which estimator's labels (default: the labels' own, not the naive rows)")
    e.add_argument("--solver", help="the solver model, for the dataset card")
    e.add_argument("--no-hf", action="store_true", help="skip the Hugging Face dataset (hf/)")
    e.set_defaults(func=_export_labels)

    c = sub.add_parser("catalog", help="(re)create the DuckDB views over every materialized asset")
    c.add_argument("--catalog-path", default=DEFAULT_CATALOG)
    c.set_defaults(func=_catalog)

    q = sub.add_parser("sql", help="run SQL on the catalog (read-only; registers fsspec base paths with DuckDB)")
    q.add_argument("query")
    q.add_argument("--catalog-path", default=DEFAULT_CATALOG)
    q.set_defaults(func=_sql)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (CausalAssetsError, ValueError) as e:
        print(f"causal-assets: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"causal-assets: {e.filename or e}: not materialized yet (run the corpus index job first)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
