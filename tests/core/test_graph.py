"""Code and text graphs on real code (installed networkx, stdlib json) and real HotpotQA data."""
from __future__ import annotations

import json
import re
import time

import networkx as nx
import pandas as pd
import pytest

from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.python_package import load_python_package
from causal_assets.core.graph.build import build_graph
from causal_assets.core.graph.code_graph import build_code_graph
from causal_assets.core.graph.code_syntax import resolve_relative
from causal_assets.core.outputs.checks import check_graph
from causal_assets.core.graph.store import (CODE_KINDS, EDGE_COLUMNS, NODE_COLUMNS, chunk_neighbors, graph_stats,
                                           to_networkx)
from causal_assets.core.graph.text_graph import build_text_graph
from causal_assets.core.text.titles import TitleMatcher, entity_key

SP = "networkx.algorithms.shortest_paths"
from tests.conftest import HOTPOT, require


def edge_set(edges, etype):
    sub = edges[edges["edge_type"] == etype]
    return set(zip(sub["source"], sub["target"]))


def check_schema(nodes, edges):
    assert list(nodes.columns) == NODE_COLUMNS and list(edges.columns) == EDGE_COLUMNS
    assert nodes["node_id"].is_unique
    ids = set(nodes["node_id"])
    assert set(edges["source"]) <= ids and set(edges["target"]) <= ids
    assert (edges["weight"] > 0).all()
    for a in nodes["attributes"].head(50):
        assert isinstance(json.loads(a), dict)


# ---------------------------------------------------------------- code graph

@pytest.fixture(scope="module")
def sp_chunks():
    chunks, _ = load_python_package("networkx", "t", subpackages=["algorithms.shortest_paths"])
    return chunks_to_frame(chunks)


@pytest.fixture(scope="module")
def sp_graph(sp_chunks):
    return build_code_graph(sp_chunks)


@pytest.fixture(scope="module")
def classes_graph():
    chunks, _ = load_python_package("networkx", "t", subpackages=["classes", "exception"])
    return build_code_graph(chunks_to_frame(chunks))


@pytest.fixture(scope="module")
def json_graph():
    chunks, _ = load_python_package("json", "t")
    return build_code_graph(chunks_to_frame(chunks))


def test_code_graph_schema_and_nodes(sp_chunks, sp_graph):
    nodes, edges = sp_graph
    check_schema(nodes, edges)
    code_nodes = nodes[nodes["node_type"] != "external"]
    # One node per chunk, linked to it; node id = FQN = chunk id.
    assert set(code_nodes["node_id"]) == set(sp_chunks["chunk_id"])
    assert (code_nodes["chunk_id"] == code_nodes["node_id"]).all()
    assert (nodes.loc[nodes["node_type"] == "external", "chunk_id"] == "").all()
    row = nodes.set_index("node_id").loc[f"{SP}.weighted.dijkstra_path"]
    attrs = json.loads(row["attributes"])
    assert row["node_type"] == "function" and row["name"] == "dijkstra_path"
    assert attrs["module"] == f"{SP}.weighted" and attrs["path"].endswith("shortest_paths/weighted.py")
    assert attrs["start_line"] < attrs["end_line"]
    assert row["rank"] > 0


def test_code_graph_defines_imports(sp_graph):
    nodes, edges = sp_graph
    defines, imports = edge_set(edges, "defines"), edge_set(edges, "imports")
    assert (f"{SP}.weighted", f"{SP}.weighted.dijkstra_path") in defines
    assert (f"{SP}.generic", f"{SP}.generic.shortest_path") in defines
    # weighted.py: `from networkx.algorithms.shortest_paths.generic import _build_paths_from_predecessors`
    assert (f"{SP}.weighted", f"{SP}.generic._build_paths_from_predecessors") in imports
    # shortest_paths/__init__.py: `from networkx.algorithms.shortest_paths.generic import *` -> module edge
    assert (SP, f"{SP}.generic") in imports
    # External import kept as an external node: weighted.py `from heapq import heappop, heappush`
    assert (f"{SP}.weighted", "heapq.heappop") in imports
    assert nodes.set_index("node_id").loc["heapq.heappop", "node_type"] == "external"


def test_code_graph_calls(sp_graph):
    _, edges = sp_graph
    calls = edges[edges["edge_type"] == "calls"].set_index(["source", "target"])
    # Same-module call: single_source_dijkstra_path returns multi_source_dijkstra_path(G, {source}, ...)
    assert (f"{SP}.weighted.single_source_dijkstra_path", f"{SP}.weighted.multi_source_dijkstra_path") in calls.index
    assert (f"{SP}.weighted._dijkstra", f"{SP}.weighted._dijkstra_multisource") in calls.index
    # Through the import alias: generic.shortest_path calls nx.bidirectional_shortest_path (line 173); with
    # only this subpackage loaded the re-export chain via networkx/__init__ is guessed.
    key = (f"{SP}.generic.shortest_path", f"{SP}.unweighted.bidirectional_shortest_path")
    assert key in calls.index
    assert "nx.bidirectional_shortest_path" in calls.loc[key, "evidence"]
    assert re.match(r"L1\d\d: ", calls.loc[key, "evidence"])
    # Called at two sites (lines 155 and 167): weight counts call sites.
    assert calls.loc[(f"{SP}.generic.shortest_path", f"{SP}.weighted.single_source_dijkstra_path"), "weight"] == 2
    # A parameter shadows everything: G.add_edge(...) etc. never become call edges.
    assert not calls["evidence"].str.match(r"L\d+: G\.").any()


def test_code_graph_self_super_and_inherits(classes_graph):
    nodes, edges = classes_graph
    check_schema(nodes, edges)
    calls, inherits = edge_set(edges, "calls"), edge_set(edges, "inherits")
    g = "networkx.classes.graph.Graph"
    assert ("networkx.classes.digraph.DiGraph", g) in inherits
    assert ("networkx.exception.NetworkXNoPath", "networkx.exception.NetworkXUnfeasible") in inherits
    # self.add_edges_from(...) in Graph.add_weighted_edges_from
    assert (f"{g}.add_weighted_edges_from", f"{g}.add_edges_from") in calls
    # DiGraph.to_undirected calls self.to_undirected_class, defined only on the base class Graph (MRO).
    assert ("networkx.classes.digraph.DiGraph.to_undirected", f"{g}.to_undirected_class") in calls
    # Class -> method defines.
    assert (g, f"{g}.add_edge") in edge_set(edges, "defines")


def test_code_graph_stdlib_json(json_graph):
    nodes, edges = json_graph
    inherits, imports, calls = edge_set(edges, "inherits"), edge_set(edges, "imports"), edge_set(edges, "calls")
    # External base kept as an external node.
    assert ("json.decoder.JSONDecodeError", "builtins.ValueError") in inherits
    assert nodes.set_index("node_id").loc["builtins.ValueError", "node_type"] == "external"
    # json/__init__.py: `from .decoder import JSONDecoder, JSONDecodeError` (relative, from a package)
    assert ("json", "json.decoder.JSONDecoder") in imports
    # json/decoder.py: `from json import scanner` -> submodule
    assert ("json.decoder", "json.scanner") in imports
    assert ("json.load", "json.loads") in calls
    assert ("json.decoder.JSONDecoder.decode", "json.decoder.JSONDecoder.raw_decode") in calls
    assert ("json.tool.main", "json.loads") in calls  # `import json` then json.loads(...)


def test_resolve_relative():
    assert resolve_relative("a.b.c", False, 1, "d") == "a.b.d"
    assert resolve_relative("a.b", True, 1, "d") == "a.b.d"
    assert resolve_relative("a.b.c", False, 2, None) == "a"


def test_code_chunk_neighbors_and_networkx(sp_graph):
    nodes, edges = sp_graph
    G = to_networkx(nodes, edges)
    assert isinstance(G, nx.MultiDiGraph)
    assert G.number_of_nodes() == len(nodes) and G.number_of_edges() == len(edges)
    stats = graph_stats(nodes, edges, G)
    assert stats["edges_by_type"]["calls"] == int((edges["edge_type"] == "calls").sum())
    assert stats["largest_components"][0] <= stats["nodes"]
    nb = chunk_neighbors(nodes, edges)
    out = nb(f"{SP}.generic.shortest_path")
    assert (f"{SP}.unweighted.bidirectional_shortest_path", "calls", 1.0) in out
    assert (f"{SP}.generic", "defined_in", 1.0) in out
    back = {(c, rel) for c, rel, _ in nb(f"{SP}.unweighted.bidirectional_shortest_path")}
    assert (f"{SP}.generic.shortest_path", "called_by") in back
    assert nb("no.such.chunk") == []


def test_full_networkx_graph_resolves_reexports():
    chunks, _ = load_python_package("networkx", "default")
    frame = chunks_to_frame(chunks)
    t0 = time.perf_counter()
    nodes, edges = build_graph(frame)  # auto -> code
    elapsed = time.perf_counter() - t0
    check_schema(nodes, edges)
    calls = edges[edges["edge_type"] == "calls"].set_index(["source", "target"])
    key = (f"{SP}.generic.shortest_path", f"{SP}.unweighted.bidirectional_shortest_path")
    # With networkx/__init__ loaded, nx.* is resolved through the real `from ... import *` chain.
    assert key in calls.index and "guessed" not in calls.loc[key, "evidence"]
    counts = edges["edge_type"].value_counts()
    assert counts["calls"] > 2000 and counts["imports"] > 1000 and counts["inherits"] > 50
    print(f"\nfull networkx: {len(frame)} chunks, build {elapsed:.2f}s, nodes "
          f"{nodes['node_type'].value_counts().to_dict()}, edges {counts.to_dict()}")


# ---------------------------------------------------------------- text graph

@pytest.fixture(scope="module")
def hotpot5():
    chunks, questions = load_hotpotqa(require(HOTPOT), "hotpot")
    qids = {q.query_id for q in questions[:5]}
    frame = chunks_to_frame(c for c in chunks if c.metadata["query_id"] in qids)
    return frame, questions[:5]


@pytest.fixture(scope="module")
def text_graph(hotpot5):
    return build_text_graph(hotpot5[0])


def chunk_by_title(frame, qid, title):
    rows = frame[(frame["title"] == title) & frame["chunk_id"].str.startswith(qid + "/")]
    assert len(rows) == 1, (qid, title)
    return rows["chunk_id"].iloc[0]


def test_text_graph_title_mentions_bridge(hotpot5, text_graph):
    frame, questions = hotpot5
    nodes, edges = text_graph
    check_schema(nodes, edges)
    tm = edges[edges["edge_type"] == "title_mention"]
    assert len(tm) > 0
    # Never across questions.
    assert (tm["source"].str.split("/").str[0] == tm["target"].str.split("/").str[0]).all()
    q = questions[0]  # "Which Canadian rock band released a song called "Counterparts" ..." -> Rush
    assert set(q.supporting_titles) == {"Nobody's Hero", "Neil Peart"}
    hero = chunk_by_title(frame, q.query_id, "Nobody's Hero")
    peart = chunk_by_title(frame, q.query_id, "Neil Peart")
    bridge = tm[(tm["source"] == f"chunk:{hero}") & (tm["target"] == f"chunk:{peart}")]
    assert len(bridge) == 1 and "Neil Peart" in bridge["evidence"].iloc[0]
    # Gold-to-gold bridges found for the bridge questions whose titles appear verbatim.
    bridged = 0
    for q in questions:
        gold = {f"chunk:{chunk_by_title(frame, q.query_id, t)}" for t in q.supporting_titles}
        bridged += any(s in gold and t in gold for s, t in zip(tm["source"], tm["target"]))
    assert bridged >= 3


def test_text_graph_entities_and_communities(text_graph):
    nodes, edges = text_graph
    by_id = nodes.set_index("node_id")
    peart = by_id.loc["entity:neil peart"]
    assert peart["name"] == "Neil Peart" and peart["rank"] > 0 and peart["description"]
    assert json.loads(peart["attributes"])["mentions"] >= 2
    # Dates and nationalities are not entities.
    assert "entity:august" not in by_id.index and "entity:canadian" not in by_id.index
    related = edges[edges["edge_type"] == "related"]
    assert len(related) > 0 and (related["weight"] >= 1).all()
    mentions = edge_set(edges, "mentions")
    assert all(s.startswith("chunk:") and t.startswith("entity:") for s, t in mentions)
    comms = nodes[nodes["node_type"] == "community"]
    assert len(comms) >= 2
    assert comms["description"].str.startswith("Top entities: ").all()
    in_comm = edges[edges["edge_type"] == "in_community"]
    members = nodes[(nodes["node_type"] == "entity") & (nodes["community"] >= 0)]
    assert set(in_comm["source"]) == set(members["node_id"])
    assert set(in_comm["target"]) == set(comms["node_id"])
    sizes = in_comm["target"].value_counts()
    assert all(sizes[f"community:{c}"] == r for c, r in zip(comms["community"], comms["rank"]))


def test_text_graph_networkx_and_neighbors(hotpot5, text_graph):
    frame, questions = hotpot5
    nodes, edges = text_graph
    G = to_networkx(nodes, edges)
    assert G.number_of_nodes() == len(nodes) and G.number_of_edges() == len(edges)
    n = G.nodes["entity:neil peart"]
    assert n["node_type"] == "entity" and isinstance(n["attributes"], dict)
    stats = graph_stats(nodes, edges, G)
    assert stats["nodes_by_type"]["chunk"] == len(frame)
    assert stats["edges_by_type"]["title_mention"] == int((edges["edge_type"] == "title_mention").sum())
    nb = chunk_neighbors(nodes, edges)
    q = questions[0]
    hero = chunk_by_title(frame, q.query_id, "Nobody's Hero")
    peart = chunk_by_title(frame, q.query_id, "Neil Peart")
    assert (peart, "title_mention") in {(c, r) for c, r, _ in nb(hero)}
    assert (hero, "title_mentioned_by") in {(c, r) for c, r, _ in nb(peart)}
    out = nb(hero)
    assert any(r == "shared_entity" for _, r, _ in out)
    assert all(c.startswith(q.query_id + "/") for c, _, _ in out)  # scoped to the question
    assert [w for _, _, w in out] == sorted((w for _, _, w in out), reverse=True)


def test_build_graph_dispatch(hotpot5):
    nodes, _ = build_graph(hotpot5[0])
    assert {"chunk", "entity"} <= set(nodes["node_type"])


def test_title_matcher_and_keys():
    m = TitleMatcher([("a", "Rush (band)"), ("b", "Neil Peart"), ("c", "It")])
    assert m.find("Neil Peart joined Rush in 1974.") == {"a", "b"}
    assert m.find("a rush of blood") == set()  # capitalised titles need a capitalised mention
    assert entity_key("Neil Peart's") == "neil peart"


def _mixed_folder(root):
    root.mkdir()
    (root / "operations.md").write_text(
        "# Operations\n\n## Retries\n\nA step that calls the LLM is retried when the failure is the "
        "infrastructure's: a dead local server, a timeout or a refused connection. Each such step is retried at most "
        "3 times, waiting 10 seconds, then 20, then 40. A request the endpoint refuses is not retried.\n")
    (root / "retries.py").write_text(
        '"""Retry policies of the steps."""\n\n\ndef retry_policy(max_retries=3, delay=10):\n'
        '    """The retry policy of a step: how many retries and the first delay."""\n'
        '    return {"max_retries": max_retries, "delay": delay}\n\n\n'
        'def infrastructure_retries(step):\n    """Retry `step` on infrastructure failures only."""\n'
        '    return retry_policy()\n')
    (root / "cache.py").write_text(
        '"""The call cache."""\n\n\nclass CallCache:\n    """Calls by key."""\n\n'
        '    def get(self, key):\n        """The call stored under `key`."""\n        return None\n\n'
        '    def history(self, key):\n        """Every attempt of a call, retries included."""\n        return []\n')
    return root


def test_a_mixed_folder_graph_holds_its_text_and_its_code(tmp_path):
    """A folder of Markdown and Python files got a code graph only: its Markdown page had no node, so causal search
    drew every source from Python files although `search` ranked the page first."""
    from causal_assets.core.corpus.folder import load_folder
    from causal_assets.core.local_search.entity_vectors import entity_nodes

    chunks, _ = load_folder(_mixed_folder(tmp_path / "docs"), "mixed")
    frame = chunks_to_frame(chunks)
    nodes, edges = build_graph(frame)
    types = set(nodes["node_type"])
    assert {"chunk", "entity", "module", "function", "class", "method"} <= types, types
    assert "chunk:operations.md#0" in set(nodes["node_id"])
    assert set(nodes.loc[nodes["chunk_id"] != "", "chunk_id"]) == set(frame["chunk_id"])   # every chunk has a node
    assert nodes["node_id"].is_unique
    assert check_graph(nodes, edges, frame["chunk_id"]).passed
    assert {"entity", "function"} <= set(entity_nodes(nodes)["node_type"])
    # a corpus of one kind keeps the graph of that kind
    assert "entity" not in set(build_graph(frame[frame["kind"] != "file_chunk"])[0]["node_type"])
    assert not set(build_graph(frame[frame["kind"] == "file_chunk"])[0]["node_type"]) & CODE_KINDS


def test_causal_search_context_of_a_mixed_folder_starts_with_the_page_that_answers(tmp_path):
    from causal_assets.core.corpus.folder import load_folder
    from causal_assets.core.index.dense import Embedder
    from causal_assets.core.local_search.context import GraphContextBuilder
    from causal_assets.core.local_search.search import LocalSearchResult

    chunks, _ = load_folder(_mixed_folder(tmp_path / "docs"), "mixed")
    frame = chunks_to_frame(chunks)
    nodes, edges = build_graph(frame)
    embedder = Embedder()
    builder = GraphContextBuilder(nodes, edges, frame, embed=embedder.encode, embed_query=embedder.encode_queries)
    question = "How many times is a step that calls the LLM retried, and how long does it wait?"
    data = builder.build_network_data(question, max_tokens=2000)
    sources = LocalSearchResult(query=question, query_id="q", created_at=0.0, response="", report="",
                                network_data=data, response_type="", model=None, n_ctx=4096,
                                network_max_tokens=2000).sources()
    assert sources[0]["id"] == "operations.md#0", [s["id"] for s in sources]
    assert "at most 3 times" in sources[0]["text"]


def test_a_corpus_is_read_as_code_when_most_of_its_chunks_are_symbols():
    """One rule for the build's and the labelling's estimates (`label --dry-run` and `mc_trials` alike)."""
    from causal_assets.core.graph.store import mostly_code

    assert mostly_code(pd.Series(["function", "class", "text", "method"]))
    assert not mostly_code(pd.Series(["function", "text"]))          # half is not most
    assert not mostly_code(pd.Series(["text", "section", "module"]))
    assert not mostly_code(pd.Series([], dtype=object))
