"""Stages 3-4: candidate pools and Monte Carlo relevance labels.

`candidate_pools` mixes seeded, hard-negative and random candidates per question; `mc_trials` runs the blind
solver on subsets (through the LLM resource, in the `llm` concurrency pool, with retries); `mc_labels`
re-derives the labels from the recorded trials without any LLM call (the configured estimator and the naive
in-minus-out difference side by side) and writes `retrieval_dataset.yaml` (question, gold answer and each
candidate's label with its effect and interval), the labels as a portable dataset file.
"""
import base64
import json

import pandas as pd
import yaml
from dagster import (AssetCheckSpec, AssetExecutionContext, AssetOut, Config, Failure, MetadataValue, Output,
                     asset, multi_asset)
from pydantic import Field

from causal_assets.core.foundation.limits import MAX_POOL_SIZE, MAX_QUESTIONS
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.graph.store import mostly_code
from causal_assets.core.registry.sections import budget_line
from causal_assets.core.stored.artifacts import CorpusArtifacts
from causal_assets.core.outputs.checks import (check_labels, check_labels_decided, check_pools, check_trials_from_ok_calls,
                                      labels_decided_problem)
from causal_assets.core.labeling.pools import build_pools, pool_params
from causal_assets.core.labeling.quality import label_quality_rows, per_question_from_tables, quality_table, summarize
from causal_assets.core.evaluation.report import quality_png
from causal_assets.core.labeling.runner import label_table
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import CORPUS_ARTIFACTS, benchmark_partitions
from causal_assets.core.labeling.sizing import machine_now, solver_file
from causal_assets.core.labeling.dry_run import ceiling_problem, plan_labels
from causal_assets.core.llm import ledger
from causal_assets.defs.shared import LABELS_GROUP, MonteCarloConfig, mc_config, record_cost, trials_of
from causal_assets.retries import LLM_RETRY, infrastructure_retries
from causal_assets.run_health import LLM_POOL, blocked_message, pool_holders, pool_limit, reap_dead_runs
from causal_assets.resources import ANN, LLM, SETTINGS, BenchmarkRegistry, Storage

GROUP = LABELS_GROUP


class PoolsConfig(Config):
    # default: the benchmark's monte_carlo.max_questions (every answered question of a questions file; else 20)
    max_questions: int | None = Field(default=None, ge=1, le=MAX_QUESTIONS)
    size: int | None = Field(default=None, ge=1, le=MAX_POOL_SIZE)   # default: the benchmark's pooling.size, else 10


@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet"},
       deps=CORPUS_ARTIFACTS,
       check_specs=[spec("candidate_pools", "pools_valid", "Every candidate exists in the corpus, once per "
                         "question; every question has a pool, a question text and an answer.")])
def candidate_pools(context: AssetExecutionContext, config: PoolsConfig, storage: Storage,
                    benchmark_registry: BenchmarkRegistry):
    """Per question, the documents the labels judge: its gold documents and their graph neighbours, hard negatives
    (top BM25 and dense results that are not gold) and random documents, shuffled."""
    spec = benchmark_registry.spec(context.partition_key)
    artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN)
    split = spec.label_split
    bench = artifacts.benchmark(spec, split)
    limit = config.max_questions or spec.label_limit
    # questions with an answer to score (a questions file's question without one is evaluated only)
    qids = bench.labelable_ids()[:limit]
    pool_cfg = pool_params(spec.pool_settings, size=config.size)
    warn_if_llm_pool_is_held(context)
    pools = build_pools(artifacts.index, bench, qids, pool_cfg, artifacts.neighbors)
    pools["aliases"] = pools["aliases"].map(json.dumps)
    yield Output(pools, metadata={
        "questions": len(qids), "split": split, "pool_size": pool_cfg.size,
        # what the solver reads of each document: whole where it fits, else the lines that best match the question
        "doc_chars": pool_cfg.doc_chars,
        "documents_whole": int((pools["kept_end"] - pools["kept_start"] == pools["doc_chars"]).sum()),
        "documents_shortened": int((pools["kept_end"] - pools["kept_start"] < pools["doc_chars"]).sum()),
        "by_origin": MetadataValue.json(pools["origin"].value_counts().to_dict()),
        "seed_recall": float(pools.groupby("query_id")["origin"].apply(lambda o: (o == "seed").any()).mean()),
    })
    yield check_result("candidate_pools", "pools_valid", check_pools(pools, artifacts.index.ids))


def warn_if_llm_pool_is_held(context: AssetExecutionContext) -> None:
    """Before the LLM step of this run waits for the `llm` pool: free the slots of dead runs, and say at WARNING
    which live run holds every slot and how to free it (the wait itself is logged by Dagster at DEBUG only)."""
    try:
        reap_dead_runs(context.instance)
        limit = pool_limit(context.instance, LLM_POOL)
        holders = [h for h in pool_holders(context.instance, LLM_POOL) if h.run_id != context.run_id]
    except Exception as e:   # an instance without pools or pids: nothing to say, the run goes on
        context.log.debug(f"llm pool not inspected: {e}")
        return
    if limit is not None and len(holders) >= limit:
        context.log.warning(f"mc_trials will wait: {blocked_message(LLM_POOL, holders, 0).split(chr(10), 1)[1]}")


def code_corpus(storage: Storage, corpus: str) -> bool:
    """What `label --dry-run` reads as a code corpus (`mostly_code`), from the corpus's stored chunks."""
    path = asset_path(storage.base, "corpus_chunks", corpus)
    return path.exists() and mostly_code(read_parquet(path, columns=["kind"])["kind"])


@multi_asset(
    partitions_def=benchmark_partitions, group_name=GROUP, pool="llm",
    retry_policy=LLM_RETRY,
    # Checks live in the op itself: they run per partition, on the exact data just written.
    check_specs=[AssetCheckSpec("no_trial_from_errored_call", asset="mc_trials", blocking=True,
                                description="No trial was recorded from an errored call.")],
    outs={"mc_trials": AssetOut(kinds={"parquet"}, description="One row per solver trial: the subset shown (in the "
                                "order the solver read it), the gold answer's log-likelihood and/or the generated "
                                "answer and its success."),
          "solver_calls": AssetOut(kinds={"parquet"}, description="Every solver call (scoring or generating), ok "
                                   "or errored, with tokens and latency.")},
)
@infrastructure_retries
def mc_trials(context: AssetExecutionContext, config: MonteCarloConfig, llm: LLM, storage: Storage,
              benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame):
    """Blind-solver trials on random context subsets. Errored calls are journalled, never counted as trials."""
    spec = benchmark_registry.spec(context.partition_key)
    meter = ledger.Meter.start(spec.name, "mc_trials", context.run_id)
    cfg = mc_config(spec.monte_carlo_settings, config)
    largest = int(candidate_pools.groupby("query_id").size().max()) if len(candidate_pools) else 0
    if len(candidate_pools):   # what the run will cost, said (and held to the ceiling) before its first call
        if cfg.budget == "auto":
            context.log.info(budget_line(largest))
        separate = spec.monte_carlo.get("document_encoding") != "joint"
        machine = None if llm.base_url else machine_now(
            storage.base, None, solver_file(spec.monte_carlo.get("solver") or llm.solver, llm.models_dir), separate)
        plan = plan_labels(spec.name, int(candidate_pools["query_id"].nunique()), cfg.budget_for(largest),
                           largest,
                           float(candidate_pools["text"].astype(str).str.len().mean()),   # what the pools show
                           code=code_corpus(storage, spec.corpus),
                           stop_when_decided=cfg.stop_when_decided and cfg.estimator == "regression",
                           remote=llm.base_url is not None, separate=separate, machine=machine)
        context.log.info(plan.line())
        problem = ceiling_problem(plan, SETTINGS.label_max_calls)
        if problem:
            raise Failure(problem)
    if len(candidate_pools):   # before any solver call: a budget that cannot decide these pools (run config too)
        try:
            cfg.check_budget(largest)
        except ValueError as e:
            raise Failure(f"{spec.name}: {e} (the largest pool has {largest} documents); no solver call made") \
                from None
    run = trials_of(context, spec, cfg, llm, candidate_pools)
    trials_df, calls_df, stopped, seconds = run.trials, run.calls, run.stopped, run.seconds
    ok = calls_df[calls_df["status"] == "ok"]
    n_questions = int(trials_df["query_id"].nunique())
    history = getattr(llm.scorer(spec.monte_carlo.get("solver")), "thread_history", None) if cfg.scores else None
    threads = {"llama_threads": ", ".join(f"{n} from {t:g} s" for t, n in history)} if history else {}
    cost = record_cost(context, storage, meter)
    yield Output(trials_df, output_name="mc_trials", metadata={**threads, **cost,
        "questions": n_questions, "trials": len(trials_df), "estimator": cfg.estimator, "outcome": cfg.outcome,
        "budget_per_question": cfg.budget_for(largest), "budget_setting": str(cfg.budget), "trials_per_question": round(len(trials_df) / max(1, n_questions), 2),
        "wall_seconds": round(seconds, 1),
        "seconds_per_question": round(seconds / max(1, n_questions), 2),
        "mean_loglik": float(trials_df["loglik"].mean()) if trials_df["loglik"].notna().any() else None,
        "success_rate": float(trials_df["success"].dropna().mean()) if trials_df["success"].notna().any() else None,
        "stopped": stopped or "complete",
        **({"document_encoding": run.document_encoding} if run.document_encoding else {}),
        "solver": str(trials_df["solver"].iloc[0]) if len(trials_df) else ""})
    yield Output(calls_df, output_name="solver_calls", metadata={**cost,
        "calls": len(calls_df), "errors": int((calls_df["status"] == "error").sum()),
        "cache_hits": int(ok["cached"].sum()), "cache_hit_rate": float(ok["cached"].mean()) if len(ok) else 0.0,
        "prompt_tokens": int(ok["prompt_tokens"].fillna(0).sum()),
        "completion_tokens": int(ok["completion_tokens"].fillna(0).sum())})
    yield check_result("mc_trials", "no_trial_from_errored_call", check_trials_from_ok_calls(trials_df, calls_df))


@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet", "yaml"},
       check_specs=[AssetCheckSpec("labels_sane", asset="mc_labels", blocking=True,
                                   description="Every labelled question has a base outcome; effects are finite and "
                                               "inside their intervals; ΔP lies in [-1, 1]."),
                    AssetCheckSpec("labels_decided", asset="mc_labels", blocking=True,
                                   description="The labels decide something: not every label is UNCERTAIN, and "
                                               "every labelled question has finite intervals (else the budget was "
                                               "too small for the pool).")])
def mc_labels(context: AssetExecutionContext, config: MonteCarloConfig, storage: Storage,
              benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame, mc_trials: pd.DataFrame):
    """YES / NO / UNCERTAIN per (question, candidate): the candidate's effect on the solver's outcome (the gold
    answer's log-likelihood in nats, or the success probability) with its confidence interval, from the trials."""
    spec = benchmark_registry.spec(context.partition_key)
    cfg = mc_config(spec.monte_carlo_settings, config)
    labels, pairs = label_table(candidate_pools, mc_trials, cfg)
    labels = labels.assign(benchmark=spec.name,
                           solver=str(mc_trials["solver"].iloc[0]) if "solver" in mc_trials and len(mc_trials) else "")
    check = check_labels(labels)
    if not check.passed:
        # nothing half-written: neither the Parquet nor the dataset file of labels that fail their check
        raise Failure(f"mc_labels of {spec.name!r} fail labels_sane ({check.metadata['failing']}); nothing written",
                      metadata=check.metadata)
    out = storage.reports_path.parent / "datasets" / f"retrieval_dataset_{spec.name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump({"pairs": pairs}, sort_keys=False, allow_unicode=True, width=120))
    tmp.replace(out)
    main_rows = labels[labels["estimator"] == cfg.estimator]
    yield Output(labels, metadata={
        "questions": int(labels["query_id"].nunique()) if len(labels) else 0,
        "outcome": cfg.label_outcome, "threshold": cfg.label_threshold,
        **({"question_weight": cfg.question_weight} if cfg.label_outcome == "qa_likelihood" else {}),
        "by_label": MetadataValue.json(main_rows["label"].value_counts().to_dict() if len(labels) else {}),
        "yes_by_origin": MetadataValue.json(main_rows[main_rows.label == "YES"]["origin"].value_counts().to_dict()
                                            if len(labels) else {}),
        "dataset_yaml": MetadataValue.path(str(out))})
    yield check_result("mc_labels", "labels_sane", check)
    decided = check_labels_decided(labels)
    if not decided.passed:
        context.log.error(f"{spec.name}: {labels_decided_problem(labels)}")
    yield check_result("mc_labels", "labels_decided", decided)


@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet"})
def label_quality(context: AssetExecutionContext, config: MonteCarloConfig, storage: Storage,
                  benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame,
                  mc_labels: pd.DataFrame) -> Output:
    """How far the Monte Carlo labels agree with the benchmark's own gold documents, per estimator: precision,
    recall and F1 of the YES labels, top-2 precision and ROC AUC of the ranking by effect size, beside the
    heuristic "the document contains the answer string" on the same candidates."""
    spec = benchmark_registry.spec(context.partition_key)
    cfg = mc_config(spec.monte_carlo_settings, config)
    bench = CorpusArtifacts(storage.base, spec.corpus).benchmark(spec, spec.label_split)
    if not set(bench.qrels) & set(mc_labels["query_id"].astype(str) if len(mc_labels) else ()):
        # a questions file without gold: the labels are the only truth, there is nothing to compare them with
        context.log.info(f"{spec.name}: no labelled question has gold documents: label quality not measured")
        return Output(pd.DataFrame(columns=["source", "metric", "value", "estimator", "benchmark", "outcome",
                                            "solver"]),
                      metadata={"questions": 0, "note": "no gold documents to compare the labels with"})
    frames, summaries = [], {}
    for estimator in sorted(mc_labels["estimator"].unique()) if len(mc_labels) else []:
        summary = summarize(label_quality_rows(per_question_from_tables(
            mc_labels, candidate_pools, bench.qrels, estimator, bench.file_level, bench.file_of)))
        summaries[estimator] = summary
        frames.append(quality_table(summary).assign(estimator=estimator))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["source", "metric", "value",
                                                                                       "estimator"])
    table = table.assign(benchmark=spec.name, outcome=cfg.label_outcome,
                         solver=str(mc_labels["solver"].iloc[0]) if "solver" in mc_labels and len(mc_labels) else "")
    png = quality_png(summaries, f"{spec.name}: Monte Carlo labels vs gold")
    path = storage.reports_path / f"{spec.name}_label_quality.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    main = summaries.get(cfg.estimator, {})
    judged = set(mc_labels["query_id"].astype(str)) & set(bench.qrels)
    return Output(table, metadata={
        "questions": int(main.get("questions", 0)),
        # the grain of the gold the labels are held to (`registry.gold`): files are judged by their best chunk
        "questions_at_file_level": len(judged & bench.file_level),
        "yes_f1": float(main.get("labels", {}).get("f1", float("nan"))),
        "containment_f1": float(main.get("containment", {}).get("f1", float("nan"))),
        "top2_precision": float(main.get("ranking", {}).get("top2_precision", float("nan"))),
        "auc": float(main.get("ranking", {}).get("auc", float("nan"))),
        "uncertain_share": float(main.get("labels", {}).get("uncertain_share", float("nan"))),
        "plot": MetadataValue.md(f"![label quality](data:image/png;base64,{base64.b64encode(png).decode()})"),
        "plot_path": MetadataValue.path(str(path))})
