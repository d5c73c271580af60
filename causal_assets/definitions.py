"""The one Definitions object: every asset, check, job, schedule, sensor and resource of causal_assets."""
from dagster import AssetSelection, Definitions, define_asset_job

from causal_assets.defs import corpus, evaluation, graph
from causal_assets.resources import BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage

storage = Storage()

corpus_index_job = define_asset_job("corpus_index_job", selection=AssetSelection.groups(corpus.GROUP),
                                    description="Chunk, embed and sparse-index one corpus partition.")
# The main job: the whole default lineage (grows as stages are added).
default_lineage_job = define_asset_job("default_lineage_job", selection=AssetSelection.groups(corpus.GROUP, graph.GROUP),
                                       description="Materialize the default lineage for one corpus partition.")
evaluation_job = define_asset_job("evaluation_job", selection=AssetSelection.groups(evaluation.GROUP),
                                  description="Evaluate every configured retriever on one benchmark partition.")

defs = Definitions(
    assets=[corpus.corpus_chunks, corpus.corpus_embeddings, corpus.sparse_index, graph.entity_graph,
            evaluation.evaluation_report],
    jobs=[corpus_index_job, default_lineage_job, evaluation_job],
    resources={"storage": storage, "corpus_registry": CorpusRegistry(),
               "benchmark_registry": BenchmarkRegistry(), "io_manager": ParquetIOManagerFactory(storage=storage)},
)
