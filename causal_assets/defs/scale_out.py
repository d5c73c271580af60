"""Scale-out (the `scale_out` asset group): the two expensive stages split into shards that run as separate runs,
processes or pods, each handing its work over through a cache so that the stage's own asset only assembles it.

`embedding_shards` (corpus x shard, a chunk's shard a stable hash bucket of its content hash) embeds the chunks not
yet cached into a cache file of its own; `corpus_embeddings` then finds them all and embeds nothing. `mc_trial_shards`
(benchmark x question range) runs the blind solver per range, bounded by the `llm` pool; `mc_trials` assembles every
trial from the LLM call cache without paying a call again. Shard counts are configuration
(`CAUSAL_ASSETS_EMBEDDING_SHARDS`, `CAUSAL_ASSETS_LABEL_SHARDS`). See docs/operations.md ("Scaling").
"""
import os
import socket
import time
import warnings

import pandas as pd
from dagster import (AssetExecutionContext, AssetIn, BetaWarning, MaterializeResult,
                     MultiToSingleDimensionPartitionMapping, asset)

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import EmbeddingCache, embed_incremental
from causal_assets.core.labeling.shards import shard_questions, shard_slice
from causal_assets.defs.partitions import (EMBEDDING_SHARDS, LABEL_SHARDS, embedding_shard_partitions,
                                           label_shard_partitions)
from causal_assets.defs.shared import SCALE_OUT_GROUP, EmbeddingConfig, MonteCarloConfig, mc_config, trials_of
from causal_assets.retries import LLM_RETRY, infrastructure_retries
from causal_assets.resources import LLM, BenchmarkRegistry, Storage

GROUP = SCALE_OUT_GROUP


def shard_of(content_hash: str, shards: int) -> int:
    """Stable bucket of a chunk: its content hash (sha256 hex) modulo the shard count."""
    return int(content_hash[:12], 16) % shards


def where_it_ran() -> dict:
    """The host and process that computed a shard: under the Celery executor a worker, which the metadata names."""
    return {"worker_host": socket.gethostname(), "worker_pid": os.getpid()}


def shard_cache_name(corpus: str, shard: int, shards: int) -> str:
    return f"{corpus}.shard-{shard}-of-{shards}"


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
        "cache_file": str(cache.dir / f"{shard_cache_name(corpus, shard, EMBEDDING_SHARDS)}.parquet"),
        **where_it_ran()})


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
    query_ids = list(dict.fromkeys(candidate_pools["query_id"]))
    mine = shard_questions(query_ids, shard, LABEL_SHARDS)
    start, stop = shard_slice(len(query_ids), shard, LABEL_SHARDS)
    cfg = mc_config(spec.monte_carlo_settings, config)
    run = trials_of(context, spec, cfg, llm, candidate_pools, mine)
    trials, calls, stopped, seconds = run.trials, run.calls, run.stopped, run.seconds
    ok = calls[calls["status"] == "ok"]
    return MaterializeResult(metadata={
        "benchmark": spec.name, "shard": shard, "shards": LABEL_SHARDS,
        "question_range": f"[{start}, {stop}) of {len(query_ids)}", "questions": len(mine),
        "trials": len(trials), "calls": len(calls), "errors": int((calls["status"] == "error").sum()),
        "cache_hits": int(ok["cached"].sum()), "wall_seconds": round(seconds, 1),
        "stopped": stopped or "complete", "model": llm.model, **where_it_ran()})
