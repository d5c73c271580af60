"""The one Definitions object: every asset, check, job, schedule, sensor and resource of causal_assets."""
import warnings

from dagster import AssetSelection, Definitions, define_asset_job

from causal_assets.defs import automation, corpus, evaluation, export, graph, labels, scale_out, search, tuning
from causal_assets.defs.partitions import benchmark_partitions, corpus_partitions
from causal_assets.resources import (SETTINGS, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage,
                                     llm_from_settings)
from causal_assets.execution import executor_from_env

storage = Storage()
# Local llama.cpp server by default; CAUSAL_ASSETS_LLM_BASE_URL (+ _MODEL, + the key in CAUSAL_ASSETS_LLM_API_KEY,
# read through EnvVar so it never enters config or logs) points every LLM call elsewhere.
llm = llm_from_settings(SETTINGS)



def lineage_selection() -> AssetSelection:
    """The whole lineage for one partition. An asset job needs one partitions definition, and the corpus stages
    are partitioned by corpus, the benchmark stages by benchmark: with the shipped registries both have the same
    keys. A registry with a corpus that has no benchmark of the same name (a user's folder corpus) must not break
    the whole code location, so the job then covers the corpus stages only; labels_and_evaluation_job runs the
    benchmark stages."""
    corpus_stages = AssetSelection.groups(corpus.GROUP, graph.GROUP)
    if set(corpus_partitions.get_partition_keys()) == set(benchmark_partitions.get_partition_keys()):
        return corpus_stages | AssetSelection.groups(labels.GROUP, tuning.GROUP, evaluation.GROUP)
    warnings.warn("corpus and benchmark partitions differ: default_lineage_job covers the corpus stages only "
                  "(run labels_and_evaluation_job for the benchmark stages)")
    return corpus_stages


# The main job: the whole default lineage.
default_lineage_job = define_asset_job("default_lineage_job", selection=lineage_selection(),
                                       description="Materialize the default lineage for one corpus partition.")
# What `causal-assets search` / `ask` build for a corpus they find missing (`causal-assets build CORPUS`).
corpus_build_job = define_asset_job("corpus_build_job", partitions_def=corpus_partitions,
                                    selection=AssetSelection.assets("corpus_chunks", "corpus_embeddings",
                                                                    "sparse_postings", "sparse_vocabulary",
                                                                    "graph_nodes", "graph_edges",
                                                                    "graph_entity_embeddings"),
                                    description="Index one corpus and build its graph: what search and ask need.")
evaluation_job = define_asset_job("evaluation_job", selection=AssetSelection.groups(tuning.GROUP, evaluation.GROUP),
                                  description="Tune and evaluate the retrievers of one benchmark partition.")

defs = Definitions(
    # Where steps run is configuration: CAUSAL_ASSETS_EXECUTOR=multiprocess (default) | in_process | k8s | docker.
    executor=executor_from_env(settings=SETTINGS),
    assets=[corpus.corpus_chunks, corpus.corpus_embeddings, corpus.sparse_postings_and_vocabulary,
            graph.graph_nodes_and_edges, graph.graph_entity_embeddings,
            labels.candidate_pools, labels.mc_trials, labels.mc_labels, labels.label_quality,
            tuning.tuned_retriever_configs,
            evaluation.evaluation_tables,
            search.retrieval_results, search.causal_search,
            scale_out.embedding_shards, scale_out.mc_trial_shards,
            export.labels_export],
    jobs=[automation.corpus_index_job, automation.labels_and_evaluation_job, default_lineage_job, corpus_build_job,
          evaluation_job, search.search_job, scale_out.embedding_shards_job, scale_out.label_shards_job],
    schedules=[automation.nightly_labels_and_evaluation],
    sensors=[automation.corpus_change_sensor, automation.automation_sensor, search.queries_inbox_sensor],
    resources={"storage": storage, "corpus_registry": CorpusRegistry(),
               "benchmark_registry": BenchmarkRegistry(),
               "llm": llm, "io_manager": ParquetIOManagerFactory(storage=storage)},
)
