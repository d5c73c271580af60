"""Scale-out of the embedding stage: `embedding_shards`, partitioned corpus x shard, so one corpus is embedded by
many processes or machines at once (a backfill over its shard partitions; with a Kubernetes run launcher or
executor, one pod per shard).

A chunk's shard is a stable hash bucket of its content hash, so a shard's membership never depends on the other
chunks, on chunk order or on which machine runs it. Each shard encodes only its own chunks that are not in the
embedding cache yet and writes them to its own cache file (`<corpus>.shard-<i>-of-<n>.parquet`), so concurrent
shard writers never touch the same file. `corpus_embeddings` is unchanged: its cache lookup reads every file of
the model, finds everything the shards encoded, and only assembles the vectors (0 texts embedded).

The number of shards is configuration (`CAUSAL_ASSETS_EMBEDDING_SHARDS`, default 4). Changing it re-buckets the
chunks but loses nothing: the cache is keyed by content hash, not by shard.
"""
import time
import warnings

import pandas as pd
from dagster import (AssetExecutionContext, AssetIn, BetaWarning, MaterializeResult, MultiPartitionsDefinition,
                     MultiToSingleDimensionPartitionMapping, StaticPartitionsDefinition, asset, define_asset_job)

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import EmbeddingCache, embed_incremental
from causal_assets.defs.corpus import EmbeddingConfig
from causal_assets.defs.partitions import corpus_partitions
from causal_assets.resources import SETTINGS, Storage

GROUP = "scale_out"


def shard_of(content_hash: str, shards: int) -> int:
    """Stable bucket of a chunk: its content hash (sha256 hex) modulo the shard count."""
    return int(content_hash[:12], 16) % shards


def shard_cache_name(corpus: str, shard: int, shards: int) -> str:
    return f"{corpus}.shard-{shard}-of-{shards}"


SHARDS = SETTINGS.embedding_shards
embedding_shard_partitions = MultiPartitionsDefinition({
    "corpus": corpus_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(SHARDS)]),
})
# every shard of a corpus reads that corpus's chunks (the mapping class is marked beta in dagster 1.13)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", BetaWarning)
    shards_to_corpus = MultiToSingleDimensionPartitionMapping(partition_dimension_name="corpus")


@asset(partitions_def=embedding_shard_partitions, group_name=GROUP, kinds={"pytorch", "parquet"},
       ins={"corpus_chunks": AssetIn(partition_mapping=shards_to_corpus)})
def embedding_shards(context: AssetExecutionContext, config: EmbeddingConfig, storage: Storage,
                     corpus_chunks: pd.DataFrame) -> MaterializeResult:
    """Embeds the chunks of one hash bucket of one corpus into the embedding cache (its own file), so that
    `corpus_embeddings` of that corpus finds them cached."""
    keys = context.partition_key.keys_by_dimension
    corpus, shard = keys["corpus"], int(keys["shard"])
    t0 = time.perf_counter()
    mine = corpus_chunks[[shard_of(h, SHARDS) == shard for h in corpus_chunks["content_hash"]]]
    texts, hashes = chunk_texts(mine), mine["content_hash"].tolist()
    embedder = config.embedder()
    cache = EmbeddingCache.for_embedder(storage.cache_dir("embeddings"), embedder)
    _, stats = embed_incremental(texts, hashes, embedder, cache, shard_cache_name(corpus, shard, SHARDS),
                                 log=context.log.info)
    context.log.info(f"{corpus} shard {shard}/{SHARDS}: {len(mine)} of {len(corpus_chunks)} chunks, {stats}")
    return MaterializeResult(metadata={
        "corpus": corpus, "shard": shard, "shards": SHARDS, "chunks": len(mine), "corpus_chunks": len(corpus_chunks),
        "newly_embedded": stats["embedded"], "cache_hits": stats["cache_hits"],
        "embed_seconds": round(stats["embed_s"], 3), "total_seconds": round(time.perf_counter() - t0, 3),
        "cache_file": str(cache.dir / f"{shard_cache_name(corpus, shard, SHARDS)}.parquet")})


# One run per shard partition; a backfill over all shards of a corpus runs them in parallel (as many at once as the
# run queue allows: locally the QueuedRunCoordinator's max_concurrent_runs, on Kubernetes one pod per run).
embedding_shards_job = define_asset_job("embedding_shards_job", selection=[embedding_shards],
                                        partitions_def=embedding_shard_partitions,
                                        description="Embed one hash bucket of one corpus into the embedding cache.")
