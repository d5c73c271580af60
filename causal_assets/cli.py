"""`causal-assets` command line: ad-hoc search over a materialized index, and DuckDB catalog refresh."""
from __future__ import annotations

import argparse
import json
import sys

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


def _ask(args: argparse.Namespace) -> int:
    """Submit a query and run retrieval + causal search for it now, in this process (runs show up in the UI
    when DAGSTER_HOME is the one `dagster dev` uses)."""
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

    from causal_assets.definitions import defs
    from causal_assets.defs.search import QUERIES_DIR, query_partitions

    qid = inbox.submit(QUERIES_DIR, args.query, args.corpus, known_corpora=known)
    instance = DagsterInstance.get()
    instance.add_dynamic_partitions(query_partitions.name, [qid])
    result = defs.resolve_job_def("search_job").execute_in_process(partition_key=qid, instance=instance)
    if not result.success:
        print(f"causal-assets: search run for {qid} failed; see the run {result.run_id} in the UI", file=sys.stderr)
        return 1
    row = read_parquet(asset_path(args.base_path, "causal_search", qid)).iloc[0]
    print(row["response"])
    print(f"\nquery id {qid}; report: {row['report_path']}; network data: {row['network_data_path']}")
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
    a.set_defaults(func=_ask)

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
