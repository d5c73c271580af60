"""`causal-assets label`, `tune`, `evaluate` and `all`: a benchmark's Monte Carlo labels, tuned retrievers and
evaluation report, each a Dagster run of the right assets (in this process, on the instance of $DAGSTER_HOME, so
the runs show up in the UI), after the corpus's index and graph are built where they are missing.

Everything that can be checked without paying for it is checked first, in one line: the registries, the questions
against the corpus's chunks, that there is something to label. Then the command says what it will do and about
how long; labelling prints a line per question with the time left. Exit codes: 0 done, 1 a run failed, 2 bad
input (a labelling run planned above CAUSAL_ASSETS_LABEL_MAX_CALLS too), 3 no free `llm` slot within --wait, 4 a
regression the gate found (`evaluate --fail-on-regression`), 130 interrupted (the run is marked CANCELED).
"""
from __future__ import annotations

import os
import time

import pandas as pd
from upath import UPath

from causal_assets.commands import say
from causal_assets.commands.build import cli_instance, ensure_built, execute, failure_line, interrupt_on_sigterm
from causal_assets.core.stored import needs
from causal_assets.core.graph.store import mostly_code
from causal_assets.exit_codes import EXIT_POOL_BLOCKED, EXIT_REGRESSION
from causal_assets.core.labeling.dry_run import LabelPlan, ceiling_problem, plan_labels
from causal_assets.core.registry.benchmarks import BenchmarkSpec, load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.registry.sections import DEFAULT_BUDGET, budget_line
from causal_assets.core.outputs.checks import labels_decided_problem
from causal_assets.core.registry.corpora import require_available
from causal_assets.core.foundation.errors import CausalAssetsError
from causal_assets.core.labeling.pools import pool_params
from causal_assets.core.labeling.sizing import machine_now, shown_chars, solver_file
from causal_assets.core.foundation.progress import duration
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.run_health import LLM_POOL, wait_for_slot

JOB = "labels_and_evaluation_job"
LABEL_ASSETS = ["candidate_pools", "mc_trials", "solver_calls", "mc_labels", "label_quality"]
TUNE_ASSETS = ["tuned_encoder", "tuned_embeddings", "tuned_reranker", "tuned_retriever_configs"]
EVALUATE_ASSETS = ["evaluation_metrics", "evaluation_runs", "evaluation_failures", "evaluation_queries",
                   "evaluation_qrels", "evaluation_answers", "evaluation_per_query"]
SHOWN_RETRIEVERS = 6


def _spec(args) -> BenchmarkSpec:
    """The benchmark named on the command line, available here (its registry entry and its data), or one line
    saying why not."""
    settings = args.settings
    specs = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)
    spec = specs.get(args.benchmark)
    if spec is None:
        raise CausalAssetsError(f"unknown benchmark {args.benchmark!r} in {settings.benchmarks}; benchmarks: "
                                f"{', '.join(sorted(specs))} (CAUSAL_ASSETS_BENCHMARKS names the registry)")
    if not spec.available():
        raise CausalAssetsError(f"benchmark {spec.name!r} is registered, but its file {spec.resolved_path} does not "
                                "exist")
    require_available(spec.corpus, settings.corpora, settings.shared_data)
    return spec


def _prepare(args, spec: BenchmarkSpec, why: str) -> None:
    """The corpus's index and graph (what pools, tuning and evaluation read), built where missing."""
    ensure_built(args.base_path, spec.corpus, needs.required(dense=True, graph=True), args.no_build,
                 why=f"{why} of benchmark {spec.name!r}", verbose=args.verbose)


def _chunks(args, spec: BenchmarkSpec) -> pd.DataFrame:
    return read_parquet(asset_path(args.base_path, "corpus_chunks", spec.corpus))


def _labelling_plan(args, spec: BenchmarkSpec, built: bool = True) -> tuple[int, str, LabelPlan]:
    """(questions to label, the line saying what and how long, the plan the ceiling holds) — or one line why
    nothing can be labelled. The questions are read against the built chunks here, so a gold entry the corpus lacks
    stops before any LLM call (`built` False: the chunks where built, else the corpus's source chunked here)."""
    chunks = _chunks(args, spec) if built or asset_path(args.base_path, "corpus_chunks", spec.corpus).exists() \
        else None
    bench = load_benchmark(spec, spec.label_split, chunks)
    for split in {*spec.eval_splits, *([spec.tune_split] if spec.tune_split else [])} - {spec.label_split}:
        load_benchmark(spec, split, chunks)   # every split's gold resolved now, not in a later step
    labelable = bench.labelable_ids()
    if not labelable:
        raise CausalAssetsError(f"benchmark {spec.name!r}: none of the {len(bench.queries)} questions of split "
                                f"{spec.label_split!r} has an answer, and Monte Carlo labels score the solver's "
                                "likelihood of the answer: add answers to label them")
    n = min(len(labelable), spec.label_limit or len(labelable))
    endpoint = args.settings.llm_base_url
    separate = spec.monte_carlo.get("document_encoding") != "joint"
    doc_chars = pool_params(spec.pool_settings).doc_chars   # a dry run before the build: the budget itself
    shown = shown_chars(chunks["text"], doc_chars) if chunks is not None else doc_chars
    code = chunks is not None and mostly_code(chunks["kind"])
    stop = spec.monte_carlo_settings.get("stop_when_decided", True) and spec.estimator == "regression"
    local = spec.monte_carlo.get('solver') or args.settings.solver or 'gemma3-270m'
    machine = None if endpoint else machine_now(UPath(args.base_path), None,
                                                solver_file(local, args.settings.models_dir), separate)
    plan = plan_labels(spec.name, n, spec.budget, spec.pool_size, shown, machine=machine, remote=bool(endpoint),
                       separate=separate, code=code, stop_when_decided=stop)
    solver = f"the endpoint {endpoint}" if endpoint else f"the local solver {local} in-process"
    line = (f"labelling {n} questions of benchmark {spec.name!r} (split {spec.label_split!r}): pools of "
            f"{spec.pool_size} documents, {spec.budget} solver calls each ({plan.expected_calls} calls with {solver}); "
            + (f"about {duration(plan.seconds)} ({plan.seconds / n:.0f} s per question, from "
               f"{plan.source})" if plan.seconds is not None else "its time depends on the endpoint's latency")
            + f"; about {plan.prompt_tokens:,} prompt tokens")
    if (spec.monte_carlo_settings.get("budget") or DEFAULT_BUDGET) == "auto":
        line += f"\n{budget_line(spec.pool_size)}"
    return n, line, plan


def _within_ceiling(args, plan: LabelPlan) -> None:
    """Stop, before anything runs, a labelling planned above CAUSAL_ASSETS_LABEL_MAX_CALLS."""
    problem = ceiling_problem(plan, args.settings.label_max_calls)
    if problem:
        raise CausalAssetsError(problem)


def _wait_for_llm(args) -> float | None:
    """Wait (at most --wait) for a free `llm` slot, saying at once who holds it and how to free it; returns the
    seconds of waiting left for the run, or None when no slot came free."""
    from causal_assets.commands.build import waiting_message
    from causal_assets.run_health import blocked_message

    if args.wait < 0:
        raise ValueError(f"--wait must be at least 0 seconds (got {args.wait})")
    t0 = time.monotonic()
    free, holders = wait_for_slot(cli_instance(), LLM_POOL, args.wait,
                                  on_wait=lambda h: say(waiting_message(LLM_POOL, h, args.wait)))
    if not free:
        say(blocked_message(LLM_POOL, holders, time.monotonic() - t0))
        return None
    return max(args.wait - (time.monotonic() - t0), 0.0)


def _run(args, spec: BenchmarkSpec, assets: list[str], what: str, pool: bool = False, wait_s: float = 0.0,
         gate: bool = False):
    """The run of `assets`, or None (said) where it failed. `gate`: a run whose only failure is the regression
    gate's blocking check (every asset written) is returned, for the caller to report."""
    result = execute(JOB, spec.name, args.base_path, assets, args.verbose, pool=LLM_POOL if pool else None,
                     pool_wait_s=wait_s)
    if result.success:
        return result
    failed = [c for c in result.get_asset_check_evaluations() if not c.passed]
    written = {e.materialization.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    if gate and [c.check_name for c in failed] == ["no_regression"] and set(assets) <= written:
        return result
    decided = [c for c in failed if c.check_name == "labels_decided"]
    if decided and asset_path(args.base_path, "mc_labels", spec.name).exists():
        line = labels_decided_problem(read_parquet(asset_path(args.base_path, "mc_labels", spec.name)))
        say(f"{what} of {spec.name!r}: check labels_decided failed: {line} (run {result.run_id})")
    elif failed:
        say(f"{what} of {spec.name!r}: check {', '.join(c.check_name for c in failed)} failed "
            f"({'; '.join(str(c.metadata.get('failing').value) for c in failed if 'failing' in c.metadata)}; "
            f"run {result.run_id}; `--verbose` shows the log)")
    else:
        say(f"{what} of {spec.name!r} failed: {failure_line(result)} (run {result.run_id}; `--verbose` shows the log)")
    return None


def _label_summary(args, spec: BenchmarkSpec) -> None:
    labels = read_parquet(asset_path(args.base_path, "mc_labels", spec.name))
    main = labels[labels["estimator"] != "naive"] if (labels["estimator"] != "naive").any() else labels
    counts = main["label"].value_counts()
    shares = ", ".join(f"{lab} {int(counts.get(lab, 0))}" for lab in ("YES", "NO", "UNCERTAIN"))
    print(f"labels of {spec.name!r}: {main['query_id'].nunique()} questions, {len(main)} (question, document) "
          f"pairs: {shares}")
    quality = asset_path(args.base_path, "label_quality", spec.name)
    if quality.exists():
        q = read_parquet(quality)
        q = q[(q["source"] == "labels") & (q["estimator"] == main["estimator"].iloc[0])] if len(q) else q
        figures = {m: v for m, v in zip(q["metric"], q["value"]) if m in ("precision", "recall", "top2_precision")}
        if figures:
            bench = load_benchmark(spec, spec.label_split, _chunks(args, spec))
            files = len(set(main["query_id"].astype(str)) & bench.file_level)
            grain = f" ({files} question(s) without evidence judged by file: a file's best chunk)" if files else ""
            print("  against the gold documents: " + ", ".join(f"{m} {v:.2f}" for m, v in figures.items()) + grain)
    dataset = args.settings.reports.parent / "datasets" / f"retrieval_dataset_{spec.name}.yaml"
    print(f"  table mc_labels (`causal-assets sql \"select * from mc_labels where benchmark = '{spec.name}'\"`); "
          f"dataset {dataset}; `causal-assets export-labels {spec.name}` writes BEIR/TREC/Parquet files")


def _tune_summary(args, spec: BenchmarkSpec, result) -> None:
    meta = {}
    for event in result.get_asset_materialization_events():
        m = event.materialization
        if m.asset_key.to_user_string() == "tuned_retriever_configs":
            meta = {k: getattr(v, "value", v) for k, v in m.metadata.items()}
    if not meta.get("tuned"):
        print(f"tuning of {spec.name!r}: nothing tuned (no tune split)")
        return
    print(f"tuned on {meta.get('tune_queries')} {meta.get('tune_split')} questions by {meta.get('metric')}: selected "
          f"`{meta.get('selected')}` (configuration {meta.get('config_version')})")
    if meta.get("selection_note"):
        print(f"  {meta['selection_note']}")
    chosen = {t: n for t, n in (meta.get("selected_by") or {}).items() if n}
    if len(chosen) > 1:   # the judgements' choice and at least one other truth's
        print("  each truth's choice on the tune split: " + ", ".join(f"{t} `{n}`" for t, n in chosen.items())
              + f" (selected by {meta.get('select_by', 'qrels')})")


def _evaluation_summary(args, spec: BenchmarkSpec, result) -> None:
    metrics = read_parquet(asset_path(args.base_path, "evaluation_metrics", spec.name))
    metric = (spec.tuning.get("metric") or "ndcg@10").lower()
    name, _, k = metric.partition("@")
    rows = metrics[(metrics["metric"] == name) & (metrics["k"] == int(k or 10))]
    for (split, truth), group in rows.groupby(["split", "truth"], sort=False):
        top = group.sort_values("value", ascending=False).head(SHOWN_RETRIEVERS)
        against = "the gold documents" if truth == "qrels" else "the Monte Carlo labels"
        print(f"{metric} on `{split}` against {against}: "
              + ", ".join(f"{r} {v:.3f}" for r, v in zip(top["retriever"], top["value"])))
    gains = metrics[metrics["metric"] == "answer_gain"]
    for split, group in gains.groupby("split", sort=False):
        k = int(group["k"].max())
        top = group[group["k"] == k].sort_values("value", ascending=False).head(SHOWN_RETRIEVERS)
        print(f"answer gain at k={k} on `{split}` (nats the top {k} add to the solver's log-likelihood of the "
              f"answer): " + ", ".join(f"{r} {v:+.2f}" for r, v in zip(top["retriever"], top["value"])))
    report = args.settings.reports / f"{spec.name}.md"
    print(f"report: {report}")


def label(args) -> int:
    """Monte Carlo labels of a benchmark's questions (pools, trials, labels, label quality)."""
    interrupt_on_sigterm()
    spec = _spec(args)
    if getattr(args, "dry_run", False):   # the plan only: nothing built, no run, no call
        _, _, plan = _labelling_plan(args, spec, built=False)
        print(plan.line())
        _within_ceiling(args, plan)
        return 0
    wait_s = _wait_for_llm(args)   # first: a held slot is named at once, not after the index is built
    if wait_s is None:
        return EXIT_POOL_BLOCKED
    _prepare(args, spec, "labels")
    _, plan, cost = _labelling_plan(args, spec)
    say(plan)
    _within_ceiling(args, cost)
    t0 = time.monotonic()
    if _run(args, spec, LABEL_ASSETS, "labelling", pool=True, wait_s=wait_s) is None:
        return 1
    say(f"labelled in {duration(time.monotonic() - t0)} (load {os.getloadavg()[0]:.1f})")
    _label_summary(args, spec)
    return 0


def tune(args) -> int:
    """The tunable retrievers searched on the benchmark's tune split; the winner stored, versioned."""
    interrupt_on_sigterm()
    spec = _spec(args)
    if not spec.tune_split:
        raise CausalAssetsError(f"benchmark {spec.name!r} has no tune_split: nothing to tune on (eval splits are "
                                "never tuned on)")
    _prepare(args, spec, "tuning")
    load_benchmark(spec, spec.tune_split, _chunks(args, spec))
    say(f"tuning the retrievers of {spec.name!r} on split {spec.tune_split!r} (usually a few minutes: the learned "
        f"model's cross-validation is most of it)")
    t0 = time.monotonic()
    result = _run(args, spec, TUNE_ASSETS, "tuning")
    if result is None:
        return 1
    say(f"tuned in {duration(time.monotonic() - t0)}")
    _tune_summary(args, spec, result)
    return 0


def evaluate(args) -> int:
    """Every configured and tuned retriever on the eval splits, against the gold documents and the labels."""
    interrupt_on_sigterm()
    spec = _spec(args)
    _prepare(args, spec, "evaluation")
    chunks = _chunks(args, spec)
    for split in spec.eval_splits:
        load_benchmark(spec, split, chunks)
    say(f"evaluating {len(spec.retrievers)} configured retrievers (and the tuned ones) on "
        f"{', '.join(spec.eval_splits)} of {spec.name!r}")
    t0 = time.monotonic()
    result = _run(args, spec, EVALUATE_ASSETS, "evaluation", gate=True)
    if result is None:
        return 1
    say(f"evaluated in {duration(time.monotonic() - t0)}")
    _evaluation_summary(args, spec, result)
    regression = _regression(result)
    if regression:
        say(f"evaluation of {spec.name!r}: {regression}")
        if args.fail_on_regression:
            return EXIT_REGRESSION
    return 0


def _regression(result) -> str | None:
    """The gate's one line where the evaluation's blocking `no_regression` check failed, else None."""
    for c in result.get_asset_check_evaluations():
        if c.check_name == "no_regression" and not c.passed:
            return str(c.metadata["message"].value) if "message" in c.metadata else "the regression gate failed"
    return None


def all_stages(args) -> int:
    """Labels, tuning and evaluation of a benchmark in one run (the labels only for questions with answers)."""
    interrupt_on_sigterm()
    spec = _spec(args)
    wait_s = _wait_for_llm(args)   # first: a held slot is named at once, not after the index is built
    if wait_s is None:
        return EXIT_POOL_BLOCKED
    _prepare(args, spec, "labels, tuning and evaluation")
    try:
        _, plan, cost = _labelling_plan(args, spec)
        _within_ceiling(args, cost)
    except CausalAssetsError as e:
        if "has an answer" not in str(e):
            raise
        plan = None
        say(f"no labels: {e}")
    assets = (LABEL_ASSETS if plan else []) + (TUNE_ASSETS if spec.tune_split else []) + EVALUATE_ASSETS
    if plan:
        say(plan + "; then tuning and evaluation")
    t0 = time.monotonic()
    result = _run(args, spec, assets, "labels, tuning and evaluation", pool=bool(plan), wait_s=wait_s if plan else 0)
    if result is None:
        return 1
    say(f"done in {duration(time.monotonic() - t0)} (load {os.getloadavg()[0]:.1f})")
    if plan:
        _label_summary(args, spec)
    if spec.tune_split:
        _tune_summary(args, spec, result)
    _evaluation_summary(args, spec, result)
    return 0
