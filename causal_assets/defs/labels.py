"""Stages 3-4: candidate pools and Monte Carlo relevance labels (seed 001).

`candidate_pools` mixes seeded, hard-negative and random candidates per question; `mc_trials` runs the blind
solver on subsets (through the LLM resource, in the `llm` concurrency pool, with retries); `mc_labels`
re-derives the labels from the recorded trials without any LLM call (adaptive/regression and the seed's naive
rule side by side) and writes `retrieval_dataset.yaml` in seed 001's schema.
"""
import json
import time

import pandas as pd
import yaml
from dagster import (AssetCheckResult, AssetCheckSpec, AssetDep, AssetExecutionContext, AssetOut, Backoff, Config,
                     MetadataValue, Output, RetryPolicy, asset, multi_asset)

from causal_assets.core.benchmarks import load_benchmark
from causal_assets.core.checks import check_pools
from causal_assets.core.graph.store import load_chunk_neighbors
from causal_assets.core.index.search import CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, CorpusIndex
from causal_assets.core.labeling.estimators import LabelingResult
from causal_assets.core.labeling.pools import PoolConfig, build_pools
from causal_assets.core.labeling.runner import MCConfig, estimate, label_question
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import benchmark_corpus_mapping, benchmark_partitions
from causal_assets.resources import LLM, BenchmarkRegistry, Storage

GROUP = "labels"


class PoolsConfig(Config):
    max_questions: int | None = None   # default: the benchmark's monte_carlo.max_questions
    size: int | None = None            # default: the benchmark's pooling.size, else 10


@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet"},
       deps=[AssetDep(a, partition_mapping=benchmark_corpus_mapping)
             for a in (CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, "graph_nodes", "graph_edges")],
       check_specs=[spec("candidate_pools", "pools_valid", "Every candidate exists in the corpus, once per "
                         "question; every question has a pool, a question text and an answer.")])
def candidate_pools(context: AssetExecutionContext, config: PoolsConfig, storage: Storage,
                    benchmark_registry: BenchmarkRegistry):
    """Per question: C_seed (benchmark metadata + graph neighbours) ∪ hard negatives (BM25/dense) ∪ C_random."""
    spec = benchmark_registry.spec(context.partition_key)
    index = CorpusIndex.load(storage.base, spec.corpus)
    split = spec.monte_carlo.get("split", spec.splits[0])
    bench = load_benchmark(spec, split)
    limit = config.max_questions or spec.monte_carlo.get("max_questions", 20)
    qids = bench.query_ids()[:limit]
    neighbors = load_chunk_neighbors(storage.base, spec.corpus)
    pool_cfg = PoolConfig(**{**spec.pooling, **({"size": config.size} if config.size else {})})
    pools = build_pools(index, bench, qids, pool_cfg, neighbors)
    pools["aliases"] = pools["aliases"].map(json.dumps)
    yield Output(pools, metadata={
        "questions": len(qids), "split": split, "pool_size": pool_cfg.size,
        "by_origin": MetadataValue.json(pools["origin"].value_counts().to_dict()),
        "seed_recall": float(pools.groupby("question_id")["origin"].apply(lambda o: (o == "seed").any()).mean()),
    })
    yield check_result("candidate_pools", "pools_valid", check_pools(pools, index.ids))


class MonteCarloConfig(Config):
    estimator: str | None = None   # adaptive | naive (default: benchmark's monte_carlo.estimator, else adaptive)
    budget: int | None = None      # solver calls per question
    threshold: float | None = None


def mc_config(spec_mc: dict, config: MonteCarloConfig) -> MCConfig:
    base = {k: v for k, v in spec_mc.items() if k in MCConfig.__dataclass_fields__}
    overrides = {k: v for k, v in {"estimator": config.estimator, "budget": config.budget,
                                   "threshold": config.threshold}.items() if v is not None}
    return MCConfig(**{**base, **overrides})


def run_trials(context: AssetExecutionContext, spec, cfg: MCConfig, llm: LLM, pools: pd.DataFrame,
               question_ids: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str, float]:
    """Label the questions of `pools` (or only `question_ids`): (trials, calls, stop reason, seconds)."""
    solver = BlindSolver(llm.client, spec.validator)
    trials, calls, stopped = [], [], ""
    t0 = time.perf_counter()
    wanted = set(question_ids) if question_ids is not None else None
    for qid, pool in pools.groupby("question_id", sort=False):
        if wanted is not None and qid not in wanted:
            continue
        pool = pool.sort_values("position")
        first = pool.iloc[0]
        outcome = label_question(qid, first["question"], first["answer"],
                                 list(zip(pool["doc_id"], pool["title"], pool["text"])),
                                 solver, cfg, json.loads(first["aliases"]))
        trials += outcome.trials
        calls += outcome.calls
        context.log.info(f"{qid}: {len(outcome.trials)} trials, success rate "
                         f"{sum(t['success'] for t in outcome.trials) / max(1, len(outcome.trials)):.2f}, "
                         f"YES: {outcome.result.yes()}")
        if outcome.stopped:
            stopped = outcome.stopped
            context.log.warning(f"LLM budget exceeded at question {qid}: stopping, partial trials kept")
            break
    trials_df = pd.DataFrame(trials, columns=["question_id", "trial", "subset", "n_docs", "success", "score",
                                              "answer", "call_key", "cached"]).assign(benchmark=spec.name,
                                                                                      estimator=cfg.estimator)
    calls_df = pd.DataFrame(calls, columns=["question_id", "status", "error", "detail", "subset", "cached",
                                            "latency_s", "prompt_tokens", "completion_tokens", "call_key"]
                            ).assign(benchmark=spec.name)
    return trials_df, calls_df, stopped, time.perf_counter() - t0


@multi_asset(
    partitions_def=benchmark_partitions, group_name=GROUP, pool="llm",
    retry_policy=RetryPolicy(max_retries=2, delay=10, backoff=Backoff.EXPONENTIAL),
    # Checks live in the op itself: they run per partition, on the exact data just written.
    check_specs=[AssetCheckSpec("no_trial_from_errored_call", asset="mc_trials", blocking=True,
                                description="No trial was recorded from an errored call.")],
    outs={"mc_trials": AssetOut(kinds={"parquet"}, description="One row per solver trial: subset, answer, success."),
          "solver_calls": AssetOut(kinds={"parquet"}, description="Every solver call, ok or errored, with tokens and latency.")},
)
def mc_trials(context: AssetExecutionContext, config: MonteCarloConfig, llm: LLM,
              benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame):
    """Blind-solver trials on random context subsets. Errored calls are journalled, never counted as trials."""
    spec = benchmark_registry.spec(context.partition_key)
    cfg = mc_config(spec.monte_carlo, config)
    trials_df, calls_df, stopped, seconds = run_trials(context, spec, cfg, llm, candidate_pools)
    ok = calls_df[calls_df["status"] == "ok"]
    yield Output(trials_df, output_name="mc_trials", metadata={
        "questions": int(trials_df["question_id"].nunique()), "trials": len(trials_df), "estimator": cfg.estimator,
        "budget_per_question": cfg.budget, "wall_seconds": round(seconds, 1),
        "success_rate": float(trials_df["success"].mean()) if len(trials_df) else 0.0,
        "stopped": stopped or "complete", "model": llm.model})
    yield Output(calls_df, output_name="solver_calls", metadata={
        "calls": len(calls_df), "errors": int((calls_df["status"] == "error").sum()),
        "cache_hits": int(ok["cached"].sum()), "cache_hit_rate": float(ok["cached"].mean()) if len(ok) else 0.0,
        "prompt_tokens": int(ok["prompt_tokens"].fillna(0).sum()),
        "completion_tokens": int(ok["completion_tokens"].fillna(0).sum())})
    errored = set(calls_df.loc[calls_df["status"] == "error", "call_key"].dropna())
    leaked = int(trials_df["call_key"].isin(errored).sum() + trials_df["call_key"].isna().sum())
    yield AssetCheckResult(check_name="no_trial_from_errored_call", asset_key="mc_trials", passed=leaked == 0,
                           metadata={"trials_from_errored_calls": leaked, "errored_calls": len(errored)})


def _label_rows(result: LabelingResult, qid: str, estimator: str) -> list[dict]:
    return [dict(question_id=qid, doc_id=e.doc, label=e.label, delta_p=float(e.delta_p), ci_low=float(e.ci_low),
                 ci_high=float(e.ci_high), trials_used=int(e.trials_used), estimator=estimator,
                 base_success_rate=float(result.base_success_rate), success_rate=float(result.success_rate))
            for e in result.docs]


@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet", "yaml"},
       check_specs=[AssetCheckSpec("labels_sane", asset="mc_labels", blocking=True,
                                   description="Every labelled question has a base rate; ΔP and CIs lie in [-1, 1].")])
def mc_labels(context: AssetExecutionContext, config: MonteCarloConfig, storage: Storage,
              benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame, mc_trials: pd.DataFrame):
    """YES / NO / UNCERTAIN per (question, candidate) with ΔP and its confidence interval, from the trials."""
    spec = benchmark_registry.spec(context.partition_key)
    cfg = mc_config(spec.monte_carlo, config)
    rows, pairs = [], []
    for qid, pool in candidate_pools.groupby("question_id", sort=False):
        pool = pool.sort_values("position")
        trials = mc_trials[mc_trials["question_id"] == qid].to_dict("records")
        if not trials:
            continue
        doc_ids = pool["doc_id"].tolist()
        main = estimate(trials, doc_ids, cfg, "adaptive" if cfg.estimator == "adaptive" else "naive")
        label_rows = _label_rows(main, qid, cfg.estimator)
        rows += label_rows
        if cfg.estimator == "adaptive":  # the seed's rule on the same trials, for comparison
            rows += _label_rows(estimate(trials, doc_ids, cfg, "naive"), qid, "naive")
        origin = dict(zip(pool["doc_id"], pool["origin"]))
        texts = dict(zip(pool["doc_id"], pool["text"]))
        pairs.append({"id": qid, "query": pool.iloc[0]["question"], "candidates": [
            {"fqn": r["doc_id"], "text": texts[r["doc_id"]], "empirical_relevance": r["label"],
             "delta_p": round(r["delta_p"], 4), "ci": [round(r["ci_low"], 4), round(r["ci_high"], 4)],
             "trials_used": r["trials_used"], "origin": origin[r["doc_id"]]} for r in label_rows],
            "metadata": {"trials": len(trials), "base_success_rate": main.base_success_rate,
                         "success_rate": main.success_rate, "estimator": cfg.estimator}})
    labels = pd.DataFrame(rows).assign(benchmark=spec.name)
    labels = labels.merge(candidate_pools[["question_id", "doc_id", "origin"]], on=["question_id", "doc_id"], how="left")
    out = storage.reports_path.parent / "datasets" / f"retrieval_dataset_{spec.name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump({"pairs": pairs}, sort_keys=False, allow_unicode=True, width=120))
    tmp.replace(out)
    main_rows = labels[labels["estimator"] == cfg.estimator]
    yield Output(labels, metadata={
        "questions": int(labels["question_id"].nunique()) if len(labels) else 0,
        "by_label": MetadataValue.json(main_rows["label"].value_counts().to_dict() if len(labels) else {}),
        "yes_by_origin": MetadataValue.json(main_rows[main_rows.label == "YES"]["origin"].value_counts().to_dict()
                                            if len(labels) else {}),
        "dataset_yaml": MetadataValue.path(str(out)), "threshold": cfg.threshold})
    in_range = bool(labels[["delta_p", "ci_low", "ci_high"]].abs().le(1).all().all()) if len(labels) else True
    no_base = int(labels.groupby("question_id")["success_rate"].apply(lambda x: x.isna().all()).sum()) if len(labels) else 0
    yield AssetCheckResult(check_name="labels_sane", asset_key="mc_labels", passed=in_range and no_base == 0,
                           metadata={"values_in_range": in_range, "questions_without_base_rate": no_base})
