"""The one Definitions object: every asset, check, job, schedule, sensor and resource of causal_assets."""
from dagster import Definitions

from causal_assets.defs import automation, corpus, evaluation, export, graph, labels, scale_out, search, tuning
from causal_assets.defs.jobs import JOBS
from causal_assets.resources import (SETTINGS, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage,
                                     llm_from_settings)
from causal_assets.execution import executor_from_env
from causal_assets.run_health import cancel_on_interrupt, home_instance, reap_at_load

# Slots of dead runs (a labelling run killed with SIGKILL) are freed before this process queues any step for them,
# and a run of this process that Ctrl-C interrupts ends CANCELED, not FAILURE.
_home = home_instance()
reap_at_load(_home)
cancel_on_interrupt(_home)

storage = Storage()
# Local llama.cpp server by default; CAUSAL_ASSETS_LLM_BASE_URL (+ _MODEL, + the key in CAUSAL_ASSETS_LLM_API_KEY,
# read through EnvVar so it never enters config or logs) points every LLM call elsewhere.
llm = llm_from_settings(SETTINGS)

defs = Definitions(
    # Where steps run is configuration: CAUSAL_ASSETS_EXECUTOR=multiprocess (default) | in_process | k8s | docker.
    executor=executor_from_env(settings=SETTINGS),
    assets=[corpus.corpus_chunks, corpus.corpus_embeddings, corpus.sparse_postings_and_vocabulary,
            graph.graph_nodes_and_edges, graph.graph_entity_embeddings,
            labels.candidate_pools, labels.mc_trials, labels.mc_labels, labels.label_quality,
            tuning.tuned_encoder, tuning.tuned_reranker, tuning.tuned_retriever_configs,
            evaluation.evaluation_tables,
            search.retrieval_results, search.causal_search,
            scale_out.embedding_shards, scale_out.mc_trial_shards,
            export.labels_export],
    jobs=JOBS,
    schedules=[automation.nightly_labels_and_evaluation],
    sensors=[automation.corpus_change_sensor, automation.automation_sensor, automation.heavy_automation_sensor,
             search.queries_inbox_sensor],
    resources={"storage": storage, "corpus_registry": CorpusRegistry(),
               "benchmark_registry": BenchmarkRegistry(),
               "llm": llm, "io_manager": ParquetIOManagerFactory(storage=storage)},
)
