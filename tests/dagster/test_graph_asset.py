"""The entity graph asset on real code and text partitions."""
from __future__ import annotations

import pandas as pd
from dagster import materialize

from causal_assets.core.graph.store import to_networkx
from causal_assets.defs.corpus import corpus_chunks
from causal_assets.defs.graph import graph_nodes_and_edges


def test_code_graph_of_default_partition_has_real_call_edge(resources):
    result = materialize([corpus_chunks, graph_nodes_and_edges], resources=resources, partition_key="default")
    assert result.success
    base = resources["storage"].base_path
    nodes = pd.read_parquet(f"{base}/graph_nodes/default.parquet")
    edges = pd.read_parquet(f"{base}/graph_edges/default.parquet")
    G = to_networkx(nodes, edges)
    pkg = "networkx.algorithms.shortest_paths.unweighted"
    # Real source: single_source_shortest_path_length calls the private helper _single_shortest_path_length.
    assert G.has_edge(f"{pkg}.single_source_shortest_path_length", f"{pkg}._single_shortest_path_length")
    assert G.has_edge(pkg, f"{pkg}.bidirectional_shortest_path")  # module defines function
    assert {"calls", "defines", "imports"} <= set(edges["edge_type"])


def test_text_graph_of_hotpotqa_partition(resources):
    assert materialize([corpus_chunks, graph_nodes_and_edges], resources=resources, partition_key="hotpotqa").success
    base = resources["storage"].base_path
    nodes = pd.read_parquet(f"{base}/graph_nodes/hotpotqa.parquet")
    edges = pd.read_parquet(f"{base}/graph_edges/hotpotqa.parquet")
    assert {"entity", "community"} <= set(nodes["node_type"])
    assert {"mentions", "related", "title_mention"} <= set(edges["edge_type"])
