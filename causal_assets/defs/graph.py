"""Stage 2, the entity and dependency graph: code (modules/classes/functions with defines/imports/calls/
inherits/references edges) or text (entities, mentions, co-mention relations, title-mention bridges,
Louvain communities), stored as `graph_nodes` / `graph_edges` and loaded back as networkx on demand."""
import time

import pandas as pd
from dagster import AutomationCondition, AssetExecutionContext, AssetOut, MetadataValue, Output, multi_asset

from causal_assets.core.checks import check_graph
from causal_assets.core.graph.store import build_graph, graph_stats, to_networkx
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import corpus_partitions

GROUP = "graph"


@multi_asset(
    partitions_def=corpus_partitions, group_name=GROUP,
    outs={"graph_nodes": AssetOut(automation_condition=AutomationCondition.eager(), kinds={"networkx", "parquet"}, description="Nodes: code symbols, or entities, text units and communities."),
          "graph_edges": AssetOut(automation_condition=AutomationCondition.eager(), kinds={"networkx", "parquet"}, description="Typed, weighted edges with evidence.")},
    check_specs=[spec("graph_edges", "graph_consistent",
                      "Unique node ids; edges join existing nodes with finite weights; chunk references exist.")],
)
def entity_graph(context: AssetExecutionContext, corpus_chunks: pd.DataFrame):
    """Build the corpus's graph from its chunks (code graph for Python sources, entity graph for text)."""
    t0 = time.perf_counter()
    nodes, edges = build_graph(corpus_chunks)
    nodes = nodes.assign(corpus=context.partition_key)
    edges = edges.assign(corpus=context.partition_key)
    stats = graph_stats(nodes, edges, to_networkx(nodes, edges))
    seconds = round(time.perf_counter() - t0, 2)
    context.log.info(f"graph: {len(nodes)} nodes, {len(edges)} edges in {seconds}s")
    yield Output(nodes, output_name="graph_nodes", metadata={
        "nodes": len(nodes), "stats": MetadataValue.json(stats), "build_seconds": seconds})
    yield Output(edges, output_name="graph_edges", metadata={
        "edges": len(edges), "by_type": MetadataValue.json(edges["edge_type"].value_counts().to_dict())})
    yield check_result("graph_edges", "graph_consistent", check_graph(nodes, edges, corpus_chunks["chunk_id"]))
