"""Embedding shards: two shard partitions of one corpus embedded by two real `dagster asset materialize` processes at
once; `corpus_embeddings` then embeds nothing and its vectors equal the unsharded encoding."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from dagster import materialize

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder, EmbeddingCache
from causal_assets.core.foundation.storage import read_parquet
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings
from causal_assets.defs.scale_out import shard_cache_name, shard_of
from tests.conftest import SCIFACT, make_beir_subset, require
from tests.dagster.procs import project_env, start_materialize

SHARDS = 2
N_DOCS = 40   # real SciFact abstracts: ~20 per shard, each embedded three times (a shard, then the reference)


@pytest.fixture(scope="module")
def scifact_small(tmp_path_factory):
    """This module's `scifact` partition (through the `resources` fixture): fewer abstracts than the session's 120,
    enough for two non-empty hash buckets; what costs here is embedding them."""
    return make_beir_subset(require(SCIFACT), tmp_path_factory.mktemp("scifact_scale_out"), N_DOCS)


@pytest.mark.slow
def test_two_shards_in_parallel_processes_then_corpus_embeddings_embeds_nothing(resources, tmp_path):
    assert materialize([corpus_chunks], resources=resources, partition_key="scifact").success
    base = resources["storage"].base_path
    chunks = pd.read_parquet(f"{base}/corpus_chunks/scifact.parquet")
    env = project_env(resources, tmp_path / "dagster_home", CAUSAL_ASSETS_EMBEDDING_SHARDS=str(SHARDS))

    t0 = time.monotonic()
    procs = {s: start_materialize("embedding_shards", f"scifact|{s}", env, log_path=tmp_path / f"shard{s}.log")
             for s in range(SHARDS)}
    codes = {s: p.wait(timeout=300) for s, p in procs.items()}
    wall = time.monotonic() - t0
    logs = {s: (tmp_path / f"shard{s}.log").read_text() for s in procs}
    assert codes == {0: 0, 1: 0}, logs
    assert all("RUN_SUCCESS" in log for log in logs.values())

    # Each shard wrote its own cache file with exactly its hash bucket; together they cover the corpus.
    cache = EmbeddingCache(resources["storage"].cache_dir("embeddings"), DEFAULT_MODEL)
    per_shard = {s: read_parquet(cache.dir / f"{shard_cache_name('scifact', s, SHARDS)}.parquet") for s in procs}
    for s, frame in per_shard.items():
        assert len(frame) > 0 and all(shard_of(h, SHARDS) == s for h in frame["content_hash"])
    assert sorted(pd.concat(per_shard.values())["content_hash"]) == sorted(chunks["content_hash"])
    assert not [p.name for p in cache.dir.iterdir() if p.name.endswith(".tmp")]

    result = materialize([corpus_chunks, corpus_embeddings], resources=resources, partition_key="scifact",
                         selection=[corpus_embeddings])
    assert result.success
    meta = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["newly_embedded"] == 0 and meta["cache_hits"] == len(chunks) == N_DOCS

    sharded = pd.read_parquet(f"{base}/corpus_embeddings/scifact.parquet").sort_values("chunk_idx")
    unsharded = Embedder().encode(chunk_texts(chunks.sort_values("chunk_idx")))
    assert np.allclose(np.stack(sharded["embedding"].to_numpy()), unsharded, atol=1e-5)
    print(f"2 shards in parallel processes: {wall:.1f}s wall; sizes {[len(f) for f in per_shard.values()]}")
