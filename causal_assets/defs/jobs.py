"""Every job of causal_assets, in one place: what each runs and over which partitions. Sensors and schedules
(automation.py, search.py) start them; the CLI starts them by name.

- `default_lineage_job`: the whole default lineage for one partition (README command 1).
- `corpus_index_job`: chunk, embed and sparse-index one corpus (started by `corpus_change_sensor`).
- `corpus_build_job`: index one corpus and build its graph: what `causal-assets search` / `ask` need (`build`).
- `labels_and_evaluation_job`: top up the Monte Carlo labels, tune and evaluate one benchmark (the nightly schedule).
- `evaluation_job`: tune and evaluate one benchmark.
- `search_job`: retrieval and causal search of one submitted query (the inbox sensor, `ask`).
- `embedding_shards_job`, `label_shards_job`: the scale-out backfills (scale_out.py).
"""
import warnings

from dagster import AssetSelection, define_asset_job

from causal_assets.defs.partitions import (benchmark_partitions, corpus_partitions, embedding_shard_partitions,
                                           label_shard_partitions, query_partitions)
from causal_assets.defs.shared import CORPUS_GROUP, EVALUATION_GROUP, GRAPH_GROUP, LABELS_GROUP, TUNING_GROUP


def lineage_selection() -> AssetSelection:
    """The whole lineage for one partition. An asset job needs one partitions definition, and the corpus stages
    are partitioned by corpus, the benchmark stages by benchmark: with the shipped registries both have the same
    keys. A registry with a corpus that has no benchmark of the same name (a user's folder corpus) must not break
    the whole code location, so the job then covers the corpus stages only; labels_and_evaluation_job runs the
    benchmark stages."""
    corpus_stages = AssetSelection.groups(CORPUS_GROUP, GRAPH_GROUP)
    if set(corpus_partitions.get_partition_keys()) == set(benchmark_partitions.get_partition_keys()):
        return corpus_stages | AssetSelection.groups(LABELS_GROUP, TUNING_GROUP, EVALUATION_GROUP)
    warnings.warn("corpus and benchmark partitions differ: default_lineage_job covers the corpus stages only "
                  "(run labels_and_evaluation_job for the benchmark stages)")
    return corpus_stages


# The main job: the whole default lineage.
default_lineage_job = define_asset_job("default_lineage_job", selection=lineage_selection(),
                                       description="Materialize the default lineage for one corpus partition.")
corpus_index_job = define_asset_job("corpus_index_job", selection=AssetSelection.groups(CORPUS_GROUP),
                                    partitions_def=corpus_partitions,
                                    description="Chunk, embed and sparse-index one corpus partition.")
# What `causal-assets search` / `ask` build for a corpus they find missing (`causal-assets build CORPUS`).
corpus_build_job = define_asset_job("corpus_build_job", partitions_def=corpus_partitions,
                                    selection=AssetSelection.assets("corpus_chunks", "corpus_embeddings",
                                                                    "sparse_postings", "sparse_vocabulary",
                                                                    "graph_nodes", "graph_edges",
                                                                    "graph_entity_embeddings"),
                                    description="Index one corpus and build its graph: what search and ask need.")
labels_and_evaluation_job = define_asset_job(
    "labels_and_evaluation_job", selection=AssetSelection.groups(LABELS_GROUP, TUNING_GROUP, EVALUATION_GROUP),
    partitions_def=benchmark_partitions, description="Top up Monte Carlo labels and re-evaluate one benchmark.")
evaluation_job = define_asset_job("evaluation_job", selection=AssetSelection.groups(TUNING_GROUP, EVALUATION_GROUP),
                                  description="Tune and evaluate the retrievers of one benchmark partition.")
search_job = define_asset_job("search_job", selection=["retrieval_results", "causal_search"],
                              partitions_def=query_partitions)

# One run per shard partition; a backfill over all shards of a corpus runs them in parallel (as many at once as the
# run queue allows: locally the QueuedRunCoordinator's max_concurrent_runs, on Kubernetes one pod per run).
embedding_shards_job = define_asset_job("embedding_shards_job", selection=["embedding_shards"],
                                        partitions_def=embedding_shard_partitions,
                                        description="Embed one hash bucket of one corpus into the embedding cache.")

# A backfill over benchmark x shard: UI (Jobs -> label_shards_job -> Backfill) or CLI
# `dagster job backfill -m causal_assets.definitions -j label_shards_job --partitions 'hotpotqa|0,hotpotqa|1' --noprompt`.
label_shards_job = define_asset_job("label_shards_job", selection=["mc_trial_shards"],
                                    partitions_def=label_shard_partitions,
                                    description="Pay the Monte Carlo solver calls of question-range shards into the call cache.")
