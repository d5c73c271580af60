"""The common graph schema (`graph_nodes`, `graph_edges`), conversion to networkx, statistics, and the
chunk-to-chunk neighbourhood that the cascade retriever's graph expansion walks.

Both graph builders (`code_graph.build_code_graph`, `text_graph.build_text_graph`, chosen by `build.build_graph`)
return frames in this schema, so storage and retrieval never need to know which kind of corpus a graph came from.
Nodes: corpus, node_id, node_type, name, chunk_id ("" when none), description, rank (degree), community (-1 when
none), attributes (JSON). Edges: corpus, source, target, edge_type, weight (occurrences; 1.0 for structural edges),
evidence (the line or sentence it was read from). See docs/pipeline.md ("Graph").
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Callable

import networkx as nx
import pandas as pd

from causal_assets.core.index.provenance import FINGERPRINT, require_current
from causal_assets.core.foundation.storage import asset_path, read_parquet

NODE_COLUMNS = ["corpus", "node_id", "node_type", "name", "chunk_id", "description", "rank", "community",
                "attributes"]
EDGE_COLUMNS = ["corpus", "source", "target", "edge_type", "weight", "evidence"]
NODE_DTYPES = {"corpus": "object", "node_id": "object", "node_type": "object", "name": "object",
               "chunk_id": "object", "description": "object", "rank": "int64", "community": "int64",
               "attributes": "object"}
EDGE_DTYPES = {"corpus": "object", "source": "object", "target": "object", "edge_type": "object",
               "weight": "float64", "evidence": "object"}

CODE_KINDS = frozenset({"module", "class", "function", "method"})


def mostly_code(kinds: pd.Series) -> bool:
    """A corpus whose chunks are mostly code symbols (more than half of `kinds`, its chunks' `kind`): what the
    estimates of a build or a labelling run read as code (other rates, more tokens a character)."""
    return bool(len(kinds) and kinds.isin(CODE_KINDS).mean() > 0.5)


# How an edge reads from its target's side, for chunk neighbours reached against the edge direction.
REVERSE_NAMES = {"calls": "called_by", "imports": "imported_by", "defines": "defined_in",
                 "inherits": "inherited_by", "references": "referenced_by",
                 "title_mention": "title_mentioned_by", "has_part": "part_of"}


def nodes_frame(rows: list[dict], corpus: str = "") -> pd.DataFrame:
    """Rows (dicts with any subset of NODE_COLUMNS; `attributes` may be a dict) as a schema-exact frame."""
    out = []
    for r in rows:
        attrs = r.get("attributes") or {}
        out.append({
            "corpus": r.get("corpus") or corpus, "node_id": r["node_id"], "node_type": r["node_type"],
            "name": r.get("name") or r["node_id"], "chunk_id": r.get("chunk_id") or "",
            "description": r.get("description") or "", "rank": int(r.get("rank") or 0),
            "community": int(r.get("community", -1) if r.get("community") is not None else -1),
            "attributes": attrs if isinstance(attrs, str) else json.dumps(attrs, sort_keys=True, default=str),
        })
    return pd.DataFrame(out, columns=NODE_COLUMNS).astype(NODE_DTYPES)


def edges_frame(rows: list[dict], corpus: str = "") -> pd.DataFrame:
    out = [{"corpus": r.get("corpus") or corpus, "source": r["source"], "target": r["target"],
            "edge_type": r["edge_type"], "weight": float(r.get("weight", 1.0)),
            "evidence": r.get("evidence") or ""} for r in rows]
    return pd.DataFrame(out, columns=EDGE_COLUMNS).astype(EDGE_DTYPES)


def with_degree_rank(nodes: pd.DataFrame, edges: pd.DataFrame) -> pd.DataFrame:
    """`rank` = number of edges touching the node, wherever the builder left it 0."""
    deg = pd.concat([edges["source"], edges["target"]]).value_counts()
    degree = nodes["node_id"].map(deg).fillna(0).astype("int64")
    nodes = nodes.copy()
    nodes["rank"] = nodes["rank"].where(nodes["rank"] > 0, degree).astype("int64")
    return nodes


def to_networkx(nodes: pd.DataFrame, edges: pd.DataFrame) -> nx.MultiDiGraph:
    """A MultiDiGraph with every node column as a node attribute (attributes decoded from JSON) and one
    edge per row, keyed by edge_type, carrying weight and evidence."""
    G = nx.MultiDiGraph()
    for r in nodes.to_dict("records"):
        attrs = {k: v for k, v in r.items() if k not in ("node_id", "attributes")}
        attrs["attributes"] = json.loads(r["attributes"] or "{}")
        G.add_node(r["node_id"], **attrs)
    G.add_edges_from(
        (r["source"], r["target"], r["edge_type"], {"edge_type": r["edge_type"], "weight": r["weight"],
                                                    "evidence": r["evidence"]})
        for r in edges.to_dict("records"))
    return G


def graph_stats(nodes: pd.DataFrame, edges: pd.DataFrame, G: nx.MultiDiGraph | None = None) -> dict:
    """Counts by node and edge type, the three largest weakly connected components, degree summary."""
    G = to_networkx(nodes, edges) if G is None else G
    components = sorted((len(c) for c in nx.weakly_connected_components(G)), reverse=True)
    degrees = [d for _, d in G.degree()]
    return {
        "nodes": int(G.number_of_nodes()), "edges": int(G.number_of_edges()),
        "nodes_by_type": {str(k): int(v) for k, v in nodes["node_type"].value_counts().items()},
        "edges_by_type": {str(k): int(v) for k, v in edges["edge_type"].value_counts().items()},
        "weakly_connected_components": len(components),
        "largest_components": components[:3],
        "degree_mean": float(statistics.fmean(degrees)) if degrees else 0.0,
        "degree_max": int(max(degrees)) if degrees else 0,
        "degree_median": float(statistics.median(degrees)) if degrees else 0.0,
    }


def chunk_neighbors(nodes: pd.DataFrame, edges: pd.DataFrame, max_entity_chunks: int = 50,
                    ) -> Callable[[str], list[tuple[str, str, float]]]:
    """A lookup chunk_id -> [(neighbour chunk_id, relationship, weight)], heaviest first.

    - An edge whose two ends both belong to (different) chunks links those chunks: code calls, imports,
      defines, inherits, references; text title_mention. The relationship is the edge type when the
      neighbour is the edge's target, and its reverse name (called_by, imported_by, defined_in, ...) when
      the neighbour is the source. Weight is the edge weight, summed over edges between the same nodes.
    - Chunks that mention the same entity are linked as "shared_entity" with weight = number of shared
      entities. Entities mentioned by more than `max_entity_chunks` chunks are hubs and do not link (they
      would link everything to everything). When chunk nodes carry a `scope` attribute (HotpotQA
      query_id), only chunks of the same scope are linked.
    """
    chunk_of = dict(zip(nodes["node_id"], nodes["chunk_id"]))
    scope_of: dict[str, str] = {}
    chunk_nodes = nodes[nodes["node_type"] == "chunk"]
    for nid, attrs in zip(chunk_nodes["node_id"], chunk_nodes["attributes"]):
        scope = json.loads(attrs or "{}").get("scope")
        if scope is not None:
            scope_of[nid] = str(scope)

    acc: dict[str, dict[tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))
    mentions: dict[str, list[str]] = defaultdict(list)
    for src, dst, etype, w in zip(edges["source"], edges["target"], edges["edge_type"], edges["weight"]):
        if etype == "mentions":
            mentions[dst].append(src)
            continue
        a, b = chunk_of.get(src) or "", chunk_of.get(dst) or ""
        if not a or not b or a == b:
            continue
        acc[a][(b, etype)] += float(w)
        acc[b][(a, REVERSE_NAMES.get(etype, f"{etype}_by"))] += float(w)

    for entity, srcs in mentions.items():
        srcs = sorted(set(srcs))
        if len(srcs) < 2 or len(srcs) > max_entity_chunks:
            continue
        for i, s in enumerate(srcs):
            for t in srcs[i + 1:]:
                a, b = chunk_of.get(s) or "", chunk_of.get(t) or ""
                if not a or not b or a == b or scope_of.get(s) != scope_of.get(t):
                    continue
                acc[a][(b, "shared_entity")] += 1.0
                acc[b][(a, "shared_entity")] += 1.0

    index = {cid: sorted(((n, rel, w) for (n, rel), w in rels.items()), key=lambda t: (-t[2], t[0], t[1]))
             for cid, rels in acc.items()}

    def neighbors(chunk_id: str) -> list[tuple[str, str, float]]:
        return list(index.get(chunk_id, ()))

    return neighbors


def load_chunk_neighbors(base, corpus: str, fingerprint: str | None = None,
                         **kw) -> Callable[[str], list[tuple[str, str, float]]] | None:
    """`chunk_neighbors` of a materialized graph (`<base>/graph_nodes|graph_edges/<corpus>.parquet`), or None when
    the corpus has no graph yet: graph stages then simply do not expand. With `fingerprint` (the chunks'), a graph
    built from other chunks is refused (`provenance.StaleIndexError`)."""
    graph = load_graph(base, corpus, fingerprint)
    return None if graph is None else chunk_neighbors(*graph, **kw)


def load_graph(base, corpus: str, fingerprint: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The materialized (graph_nodes, graph_edges) frames of a corpus, or None when it has no graph yet; with
    `fingerprint` (the chunks' the caller serves), refused when built from other chunks."""
    nodes = asset_path(base, "graph_nodes", corpus)
    if not nodes.exists():
        return None
    nodes, edges = read_parquet(nodes), read_parquet(asset_path(base, "graph_edges", corpus))
    if fingerprint is not None:
        require_current(corpus, fingerprint, {"graph_nodes": nodes.get(FINGERPRINT),
                                              "graph_edges": edges.get(FINGERPRINT)})
    return nodes, edges
