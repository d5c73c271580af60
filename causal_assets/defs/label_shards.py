"""Scale-out of the Monte Carlo labels: `mc_trial_shards`, partitioned benchmark x question-range shard.

Labelling is the expensive stage (one LLM call per trial). A backfill over the shard partitions of one benchmark
(UI: Materialize -> select partitions; CLI: `dagster asset materialize --select mc_trial_shards --partition
'hotpotqa|3'`) runs the blind solver for each question range in its own run, bounded by the `llm` concurrency
pool; a failed shard is retried alone. Every call lands in the LLM call cache/journal, so `mc_trials` of the
benchmark then assembles all trials from the cache without paying a call again (its `solver_calls` metadata
reports the cache hit rate). The shards record no Parquet of their own: the trials are defined once, by
`mc_trials`, and the cache is the hand-over.

The shard count is configuration (`CAUSAL_ASSETS_LABEL_SHARDS`, default 4); shards are contiguous slices of the
benchmark's labelling questions (core.labeling.shards), in the candidate pools' order.
"""
import warnings

import pandas as pd
from dagster import (AssetExecutionContext, AssetIn, Backoff, BetaWarning, MaterializeResult,
                     MultiPartitionsDefinition, MultiToSingleDimensionPartitionMapping, RetryPolicy,
                     StaticPartitionsDefinition, asset, define_asset_job)

from causal_assets.core.labeling.shards import shard_questions, shard_slice
from causal_assets.defs.labels import MonteCarloConfig, mc_config, trials_of
from causal_assets.defs.partitions import benchmark_partitions
from causal_assets.resources import LLM, SETTINGS, BenchmarkRegistry

GROUP = "scale_out"


LABEL_SHARDS = SETTINGS.label_shards
label_shard_partitions = MultiPartitionsDefinition({
    "benchmark": benchmark_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(LABEL_SHARDS)]),
})
with warnings.catch_warnings():   # the mapping class is marked beta in dagster 1.13
    warnings.simplefilter("ignore", BetaWarning)
    shards_to_benchmark = MultiToSingleDimensionPartitionMapping(partition_dimension_name="benchmark")


@asset(partitions_def=label_shard_partitions, group_name=GROUP, pool="llm", kinds={"openai"},
       ins={"candidate_pools": AssetIn(partition_mapping=shards_to_benchmark)},
       retry_policy=RetryPolicy(max_retries=2, delay=10, backoff=Backoff.EXPONENTIAL))
def mc_trial_shards(context: AssetExecutionContext, config: MonteCarloConfig, llm: LLM,
                    benchmark_registry: BenchmarkRegistry, candidate_pools: pd.DataFrame) -> MaterializeResult:
    """Blind-solver trials for one question range of one benchmark, paid into the LLM call cache."""
    keys = context.partition_key.keys_by_dimension
    spec = benchmark_registry.spec(keys["benchmark"])
    shard = int(keys["shard"])
    question_ids = list(dict.fromkeys(candidate_pools["question_id"]))
    mine = shard_questions(question_ids, shard, LABEL_SHARDS)
    start, stop = shard_slice(len(question_ids), shard, LABEL_SHARDS)
    cfg = mc_config(spec.monte_carlo, config)
    run = trials_of(context, spec, cfg, llm, candidate_pools, mine)
    trials, calls, stopped, seconds = run.trials, run.calls, run.stopped, run.seconds
    ok = calls[calls["status"] == "ok"]
    return MaterializeResult(metadata={
        "benchmark": spec.name, "shard": shard, "shards": LABEL_SHARDS,
        "question_range": f"[{start}, {stop}) of {len(question_ids)}", "questions": len(mine),
        "trials": len(trials), "calls": len(calls), "errors": int((calls["status"] == "error").sum()),
        "cache_hits": int(ok["cached"].sum()), "wall_seconds": round(seconds, 1),
        "stopped": stopped or "complete", "model": llm.model})


# A backfill over benchmark x shard: UI (Jobs -> label_shards_job -> Backfill) or CLI
# `dagster job backfill -m causal_assets.definitions -j label_shards_job --partitions 'hotpotqa|0,hotpotqa|1' --noprompt`.
label_shards_job = define_asset_job("label_shards_job", selection=[mc_trial_shards], partitions_def=label_shard_partitions,
                                    description="Pay the Monte Carlo solver calls of question-range shards into the call cache.")
