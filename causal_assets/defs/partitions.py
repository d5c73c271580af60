"""Partition definitions shared by the stage modules and the jobs."""
from dagster import (AssetDep, DynamicPartitionsDefinition, MultiPartitionsDefinition, StaticPartitionMapping,
                     StaticPartitionsDefinition)

from causal_assets.core.index.search import CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY
from causal_assets.resources import SETTINGS, BenchmarkRegistry, CorpusRegistry

# The registries the settings name (the resources' defaults).
_corpora, _benchmarks = CorpusRegistry(), BenchmarkRegistry()

# One partition per registered corpus whose data is present; `default` is always there.
corpus_partitions = StaticPartitionsDefinition(_corpora.available())

# One partition per registered benchmark whose data (and corpus) is present.
benchmark_partitions = StaticPartitionsDefinition(
    [b for b, s in _benchmarks.specs().items() if s.available() and s.corpus in corpus_partitions.get_partition_keys()])

# One partition per submitted query (added by the inbox sensor or `causal-assets ask`).
query_partitions = DynamicPartitionsDefinition(name="queries")


def benchmark_to_corpus() -> dict[str, str]:
    specs = _benchmarks.specs()
    return {b: specs[b].corpus for b in benchmark_partitions.get_partition_keys()}


def corpus_to_benchmarks(b2c: dict[str, str]) -> dict[str, set[str]]:
    """Invert benchmark -> corpus into corpus -> {benchmarks}: Dagster's `StaticPartitionMapping` takes the
    *downstream* keys of each *upstream* key, and several benchmarks may share one corpus."""
    out: dict[str, set[str]] = {}
    for benchmark, corpus in b2c.items():
        out.setdefault(corpus, set()).add(benchmark)
    return out


def benchmark_corpus_partition_mapping(b2c: dict[str, str]) -> StaticPartitionMapping:
    """The mapping from corpus partitions (upstream) to the benchmark partitions (downstream) evaluated on them."""
    return StaticPartitionMapping(corpus_to_benchmarks(b2c))


# Benchmark-partitioned stages read the index and graph of the benchmark's corpus.
benchmark_corpus_mapping = benchmark_corpus_partition_mapping(benchmark_to_corpus())

# What pools, tuning and evaluation read of their benchmark's corpus (core.stored.artifacts.CorpusArtifacts): its index
# and its graph.
CORPUS_ARTIFACTS = [AssetDep(a, partition_mapping=benchmark_corpus_mapping)
                    for a in (CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, "graph_nodes", "graph_edges")]

# The scale-out shards (scale_out.py): corpus x hash bucket of a chunk's content, benchmark x question range; the
# counts are configuration (CAUSAL_ASSETS_EMBEDDING_SHARDS, CAUSAL_ASSETS_LABEL_SHARDS).
EMBEDDING_SHARDS = SETTINGS.embedding_shards
embedding_shard_partitions = MultiPartitionsDefinition({
    "corpus": corpus_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(EMBEDDING_SHARDS)]),
})
LABEL_SHARDS = SETTINGS.label_shards
label_shard_partitions = MultiPartitionsDefinition({
    "benchmark": benchmark_partitions,
    "shard": StaticPartitionsDefinition([str(i) for i in range(LABEL_SHARDS)]),
})
