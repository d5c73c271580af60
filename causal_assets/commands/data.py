"""`causal-assets catalog`, `sql` (the SQL shell over the DuckDB catalog) and `export-labels`."""
from __future__ import annotations

import re
from pathlib import Path

import duckdb

from causal_assets.commands import say
from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.sections import DEFAULT_BUDGET
from causal_assets.core.outputs.catalog import READONLY_PROTOCOL, DuckDBCatalog, check_analysis_sql
from causal_assets.core.outputs.checks import labels_decided_problem
from causal_assets.core.foundation.errors import CausalAssetsError
from causal_assets.core.outputs.export import DatasetCard, agreement_with_seeds, labels_solver, pick_estimator
from causal_assets.core.outputs.export import export_labels as export
from causal_assets.core.foundation.storage import asset_path, read_parquet, safe_name


def catalog_path(args) -> str:
    """--catalog-path, else the configured catalog, whose views are over the configured base path only (the runs of
    a command given another --base-path leave it alone too)."""
    if args.catalog_path:
        return args.catalog_path
    settings = args.settings
    configured = settings.catalog_for(args.base_path)
    if configured is not None:
        return str(configured)
    if settings.catalog is None:
        why = "no catalog is configured (CAUSAL_ASSETS_CATALOG=none)"
    else:
        why = f"the catalog {settings.catalog} holds the views over the configured base path {settings.base_path}"
    raise CausalAssetsError(f"{why}: give --catalog-path FILE for a catalog of {args.base_path}")


def catalog(args) -> int:
    status = DuckDBCatalog(catalog_path(args), lock_timeout_s=10).refresh_from_storage(args.base_path)
    for name, s in sorted(status.items()):
        print(f"{name}: {s}")
    return 1 if "deferred" in status.values() else 0


def sql(args) -> int:
    """Query the catalog's views (or `base://<asset>/*.parquet`) on a connection that can read the Parquet under the
    base path and write nothing (`DuckDBCatalog.connect_for_analysis`). Statements other than queries
    (SELECT/EXPLAIN) are refused up front, with the statement named; whatever gets past that still cannot write.
    Several statements (`select 1; select 2`) print each result, in order, a blank line between them."""
    statements = check_analysis_sql(args.query)
    path = catalog_path(args)
    if not Path(path).exists():
        say(f"{path}: no catalog yet; it is created by the first materialization, or run `causal-assets catalog`")
        return 2
    cat = DuckDBCatalog(path, lock_timeout_s=10, base=args.base_path)
    try:
        with cat.connect_for_analysis(args.base_path) as con:
            for i, statement in enumerate(statements):
                result = con.sql(statement).df().to_string(index=False)
                print(("\n" if i else "") + result)
    except RuntimeError as e:
        if "interrupted" not in str(e).lower():
            raise
        raise KeyboardInterrupt from None   # DuckDB's answer to Ctrl-C: the CLI's "interrupted", exit 130
    except duckdb.Error as e:
        say(f"sql: {sql_error_line(e)}")
        return 2
    return 0


def sql_error_line(e: Exception) -> str:
    """DuckDB's error in one line: the exception line of an error raised inside the read-only file system (DuckDB
    passes on its Python traceback), and where to read from when a path on the local disk was named."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()] or [type(e).__name__]
    line = lines[0]
    if lines[0].startswith("Traceback") or lines[0].endswith("Traceback (most recent call last):"):
        # the exception's own line, not the caret under the query that DuckDB appends after it
        raised = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b", ln)]
        line = raised[-1] if raised else lines[-1]
    if "LocalFileSystem has been disabled" in line:
        line += (f"; causal-assets sql reads the catalog's views, or the base path's Parquet as "
                 f"'{READONLY_PROTOCOL}://<asset>/*.parquet'")
    return line


def export_labels(args) -> int:
    """The labels_export asset without Dagster: mc_labels + candidate_pools of a benchmark from the Parquet base."""
    safe_name(args.benchmark, "benchmark")
    labels_path = asset_path(args.base_path, "mc_labels", args.benchmark)
    if not labels_path.exists():
        raise CausalAssetsError(
            f"no Monte Carlo labels of benchmark {args.benchmark!r} under {args.base_path}: make them with "
            f"`causal-assets label {args.benchmark}`")
    labels = read_parquet(labels_path)
    problem = labels_decided_problem(labels)
    if problem and not args.force:   # an all-UNCERTAIN label set exports as a dataset of zeros
        raise CausalAssetsError(f"labels of benchmark {args.benchmark!r}: {problem}; `--force` exports them anyway")
    if problem:
        say(f"exporting anyway (--force): {problem}")
    pools = read_parquet(asset_path(args.base_path, "candidate_pools", args.benchmark))
    specs = load_benchmark_registry(args.settings.benchmarks, args.settings.shared_data, args.settings.corpora)
    mc = dict(specs[args.benchmark].monte_carlo or {}) if args.benchmark in specs else {}
    split = specs[args.benchmark].label_split if args.benchmark in specs else "labels"
    estimator = pick_estimator(labels, args.estimator)
    budgets = {k: v for k, v in {"solver calls per question (configured)": mc.get("budget") or DEFAULT_BUDGET,
                                 "label threshold": mc.get("threshold"),
                                 "questions labelled": int(labels["query_id"].nunique())}.items() if v is not None}
    recorded = labels_solver(labels)
    if args.solver and recorded and args.solver != recorded:   # the card would name a model that did not answer
        raise ValueError(f"--solver {args.solver!r}: these labels record their solver, {recorded!r}")
    card = DatasetCard(benchmark=args.benchmark, split=split, solver=recorded or args.solver, estimator=estimator,
                       budgets=budgets, quality=agreement_with_seeds(labels, estimator))
    out = args.out or str(args.settings.reports.parent / "datasets" / args.benchmark)
    result = export(labels, pools, out, card, estimator=estimator, hf=not args.no_hf)
    print(f"{result.judgements} judgements ({result.questions} questions, {result.documents} documents, "
          f"grades {result.by_grade}, estimator {result.estimator}) -> {result.path}")
    return 0
