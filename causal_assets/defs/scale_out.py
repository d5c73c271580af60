"""Scale-out (the `scale_out` asset group): the two expensive stages split into shards that run as separate runs,
processes or pods, each handing its work over through a cache so that the stage's own asset only assembles it.

Embeddings: `embedding_shards`, partitioned corpus x shard, so one corpus is embedded by many processes or machines at
once (a backfill over its shard partitions; with a Kubernetes run launcher or executor, one pod per shard). A chunk's
shard is a stable hash bucket of its content hash, so a shard's membership never depends on the other chunks, on
chunk order or on which machine runs it. Each shard encodes only its own chunks that are not in the embedding cache
yet and writes them to its own cache file (`<corpus>.shard-<i>-of-<n>.parquet`), so concurrent shard writers never
touch the same file. `corpus_embeddings` is unchanged: its cache lookup reads every file of the model, finds
everything the shards encoded, and only assembles the vectors (0 texts embedded). The number of shards is
configuration (`CAUSAL_ASSETS_EMBEDDING_SHARDS`, default 4); changing it re-buckets the chunks but loses nothing: the
cache is keyed by content hash, not by shard.

Monte Carlo labels: `mc_trial_shards`, partitioned benchmark x question-range shard. Labelling is the expensive stage
(one LLM call per trial). A backfill over the shard partitions of one benchmark (UI: Materialize -> select
partitions; CLI: `dagster asset materialize --select mc_trial_shards --partition 'hotpotqa|3'`) runs the blind solver
for each question range in its own run, bounded by the `llm` concurrency pool; a failed shard is retried alone.
Every call lands in the LLM call cache/journal, so `mc_trials` of the benchmark then assembles all trials from the
cache without paying a call again (its `solver_calls` metadata reports the cache hit rate). The shards record no
Parquet of their own: the trials are defined once, by `mc_trials`, and the cache is the hand-over. The shard count is
configuration (`CAUSAL_ASSETS_LABEL_SHARDS`, default 4); shards are contiguous slices of the benchmark's labelling
questions (core.labeling.shards), in the candidate pools' order.
"""
import time
import warnings

import pandas as pd
from dagster import (AssetExecutionContext, AssetIn, BetaWarning, MaterializeResult,
                     MultiPartitionsDefinition, MultiToSingleDimensionPartitionMapping, StaticPartitionsDefinition,
                     asset)

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import EmbeddingCache, embed_incremental
from causal_assets.core.labeling.shards import shard_questions, shard_slice
from causal_assets.defs.corpus import EmbeddingConfig
from causal_assets.defs.labels import MonteCarloConfig, mc_config, trials_of
from causal_assets.defs.partitions import benchmark_partitions, corpus_partitions
from causal_assets.retries import LLM_RETRY, infrastructure_retries
from causal_assets.resources import LLM, SETTINGS, BenchmarkRegistry, Storage

GROUP = "scale_out"


def shard_of(content_hash: str, shards: int) -> int:
    """Stable bucket of a chunk: its content hash (sha256 hex) modulo the shard count."""
    return int(content_hash[:12], 16) % shards


def shard_cache_name(corpus: str, shard: int, shards: int) -> str:
    return f"{corpus}.shard-{shard}-of-{shards}"


EMBEDDING_SHARDS = SETTINGS.embedding_shards
embedding_shard_partitions = MultiPartitionsDefinition({
    "corpus": corpus_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(EMBEDDING_SHARDS)]),
})
# every shard reads its whole corpus's (or benchmark's) input (the mapping class is marked beta in dagster 1.13)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", BetaWarning)
    shards_to_corpus = MultiToSingleDimensionPartitionMapping(partition_dimension_name="corpus")
    shards_to_benchmark = MultiToSingleDimensionPartitionMapping(partition_dimension_name="benchmark")


@asset(partitions_def=embedding_shard_partitions, group_name=GROUP, kinds={"pytorch", "parquet"},
       ins={"corpus_chunks": AssetIn(partition_mapping=shards_to_corpus)})
def embedding_shards(context: AssetExecutionContext, config: EmbeddingConfig, storage: Storage,
                     corpus_chunks: pd.DataFrame) -> MaterializeResult:
    """Embeds the chunks of one hash bucket of one corpus into the embedding cache (its own file), so that
    `corpus_embeddings` of that corpus finds them cached."""
    keys = context.partition_key.keys_by_dimension
    corpus, shard = keys["corpus"], int(keys["shard"])
    t0 = time.perf_counter()
    mine = corpus_chunks[[shard_of(h, EMBEDDING_SHARDS) == shard for h in corpus_chunks["content_hash"]]]
    texts, hashes = chunk_texts(mine), mine["content_hash"].tolist()
    embedder = config.embedder()
    cache = EmbeddingCache.for_embedder(storage.cache_dir("embeddings"), embedder)
    _, stats = embed_incremental(texts, hashes, embedder, cache, shard_cache_name(corpus, shard, EMBEDDING_SHARDS),
                                 log=context.log.info)
    context.log.info(f"{corpus} shard {shard}/{EMBEDDING_SHARDS}: {len(mine)} of {len(corpus_chunks)} chunks, {stats}")
    return MaterializeResult(metadata={
        "corpus": corpus, "shard": shard, "shards": EMBEDDING_SHARDS, "chunks": len(mine),
        "corpus_chunks": len(corpus_chunks),
        "newly_embedded": stats["embedded"], "cache_hits": stats["cache_hits"],
        "embed_seconds": round(stats["embed_s"], 3), "total_seconds": round(time.perf_counter() - t0, 3),
        "cache_file": str(cache.dir / f"{shard_cache_name(corpus, shard, EMBEDDING_SHARDS)}.parquet")})


LABEL_SHARDS = SETTINGS.label_shards
label_shard_partitions = MultiPartitionsDefinition({
    "benchmark": benchmark_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(LABEL_SHARDS)]),
})


@asset(partitions_def=label_shard_partitions, group_name=GROUP, pool="llm", kinds={"openai"},
       ins={"candidate_pools": AssetIn(partition_mapping=shards_to_benchmark)},
       retry_policy=LLM_RETRY)
@infrastructure_retries
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
