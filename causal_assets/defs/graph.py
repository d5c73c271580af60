"""Stage 2, the entity and dependency graph: code (modules/classes/functions with defines/imports/calls/
inherits/references edges) or text (entities, mentions, co-mention relations, title-mention bridges,
Louvain communities), stored as `graph_nodes` / `graph_edges` and loaded back as networkx on demand."""
import time

import pandas as pd
from dagster import (AutomationCondition, AssetExecutionContext, AssetOut, MetadataValue, Output, asset,
                     multi_asset)

from causal_assets.core.outputs.checks import check_graph
from causal_assets.core.graph.build import build_graph
from causal_assets.core.graph.store import graph_stats, to_networkx
from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, recorded_fingerprint
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder
from causal_assets.core.local_search.entity_vectors import embed_entities, entity_vector_cache
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import corpus_partitions
from causal_assets.defs.shared import GRAPH_GROUP
from causal_assets.resources import Storage

GROUP = GRAPH_GROUP


@multi_asset(
    partitions_def=corpus_partitions, group_name=GROUP,
    outs={"graph_nodes": AssetOut(automation_condition=AutomationCondition.eager(), kinds={"networkx", "parquet"}, description="Nodes: code symbols, or entities, text units and communities."),
          "graph_edges": AssetOut(automation_condition=AutomationCondition.eager(), kinds={"networkx", "parquet"}, description="Typed, weighted edges with evidence.")},
    check_specs=[spec("graph_edges", "graph_consistent",
                      "Unique node ids; edges join existing nodes with finite weights; chunk references exist.")],
)
def graph_nodes_and_edges(context: AssetExecutionContext, corpus_chunks: pd.DataFrame):
    """Build the corpus's graph from its chunks (code graph for Python sources, entity graph for text)."""
    t0 = time.perf_counter()
    nodes, edges = build_graph(corpus_chunks)
    # the chunks they were built from: a graph of other chunks is refused where it is loaded (`provenance`)
    built_from = {FINGERPRINT: chunks_fingerprint(corpus_chunks)}
    nodes = nodes.assign(corpus=context.partition_key, **built_from)
    edges = edges.assign(corpus=context.partition_key, **built_from)
    stats = graph_stats(nodes, edges, to_networkx(nodes, edges))
    seconds = round(time.perf_counter() - t0, 2)
    context.log.info(f"graph: {len(nodes)} nodes, {len(edges)} edges in {seconds}s")
    yield Output(nodes, output_name="graph_nodes", metadata={
        "nodes": len(nodes), "stats": MetadataValue.json(stats), "build_seconds": seconds})
    yield Output(edges, output_name="graph_edges", metadata={
        "edges": len(edges), "by_type": MetadataValue.json(edges["edge_type"].value_counts().to_dict())})
    yield check_result("graph_edges", "graph_consistent", check_graph(nodes, edges, corpus_chunks["chunk_id"]))


@asset(partitions_def=corpus_partitions, group_name=GROUP, kinds={"sentence_transformers", "parquet"},
       automation_condition=AutomationCondition.eager())
def graph_entity_embeddings(context: AssetExecutionContext, storage: Storage, graph_nodes: pd.DataFrame) -> Output[pd.DataFrame]:
    """One vector per graph entity (text entities, or code symbols), from `name: description`: what on-demand
    causal search compares a question with. Built here, with progress in the log, rather than on the first
    question; written to the embedding cache every few hundred texts, so a stopped build resumes where it was."""
    t0 = time.perf_counter()
    embedder = Embedder()
    frame, stats = embed_entities(graph_nodes, embedder.encode, entity_vector_cache(storage.cache_dir("embeddings")),
                                  f"{context.partition_key}_entities", emit=context.log.info)
    seconds = round(time.perf_counter() - t0, 1)
    frame = frame.assign(corpus=context.partition_key)
    built_from = recorded_fingerprint(graph_nodes.get(FINGERPRINT))
    if built_from:   # the chunks of the graph it embeds (a graph from before fingerprints records none, nor does this)
        frame[FINGERPRINT] = built_from
    return Output(frame, metadata={
        **{k: v for k, v in stats.items() if k != "progress"}, "seconds": seconds, "model": DEFAULT_MODEL,
        "progress": stats["progress"]})
