"""Answers are grounded or say they are not: no evidence -> no LLM call and a plain "no evidence"
answer; terms the evidence does not contain are flagged; code graphs give causal search their symbols as entities."""
from __future__ import annotations

import numpy as np
import pandas as pd

from causal_assets.core.graph.build import build_graph
from causal_assets.core.llm.client import LLMResult
from causal_assets.core.local_search.context import GraphContextBuilder
from causal_assets.core.local_search.grounding import check_grounding, distinctive_terms
from causal_assets.core.local_search.search import LocalSearch, render_report
from tests.core.test_causal_search import hash_embed


class CountingClient:
    model = "fake"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), 0

    def chat(self, messages, **kw):
        self.calls += 1
        return LLMResult(text=self.replies.pop(0), prompt_tokens=1, completion_tokens=1, latency_s=0.0,
                         cached=False, finish_reason="stop")


def code_graph():
    from causal_assets.core.corpus.python_package import load_python_package
    from causal_assets.core.corpus.chunk import chunks_to_frame

    chunks, _ = load_python_package("networkx", "default", subpackages=["algorithms.shortest_paths.unweighted"])
    frame = chunks_to_frame(chunks)
    nodes, edges = build_graph(frame)
    return frame, nodes, edges


def test_terms_not_in_the_evidence_are_flagged():
    g = check_grounding("The answer is `get_shortest_path`.", "Which function computes shortest paths?",
                        ["networkx.shortest_path: Compute shortest paths in the graph."])
    assert not g.grounded and g.unsupported == ["get_shortest_path"] and "get_shortest_path" in g.note()
    ok = check_grounding("The Canadian band Rush released Counterparts.", "Which band released Counterparts?",
                         ["Counterparts is the fifteenth album by Canadian rock band Rush."])
    assert ok.grounded and ok.note() == ""
    assert "Rush" in distinctive_terms("It was Rush, in 1993.") and "1993" in distinctive_terms("in 1993.")
    assert distinctive_terms("Dijkstra's algorithm") == ["Dijkstra"]


def test_an_answer_of_plain_words_is_checked_against_the_evidence_too():
    """A mixed folder's `ask` had reported "answer supported by the retrieved evidence" for an answer the sources
    did not hold: its words were lower-case, so there was nothing for the name check to miss."""
    evidence = ["def parse_config(path): reads the settings file and returns a dict"]
    off = check_grounding("the cache is flushed every hour by a background thread", "How often is the cache flushed?",
                          evidence)
    assert not off.grounded and {"hour", "background", "thread"} <= set(off.unsupported), off
    assert "not supported by the retrieved evidence" in off.note()
    on = check_grounding("it reads the settings file and returns a dict", "What does parse_config do?", evidence)
    assert on.grounded and on.note() == "", on
    nothing = check_grounding("Yes.", "Is the cache flushed?", evidence)
    assert not nothing.grounded and not nothing.checked and nothing.note().startswith("not checked")


def test_no_evidence_means_no_llm_call_and_a_plain_answer():
    nodes = pd.DataFrame(columns=["corpus", "node_id", "node_type", "name", "chunk_id", "description", "rank",
                                  "community", "attributes"])
    edges = pd.DataFrame(columns=["corpus", "source", "target", "edge_type", "weight", "evidence"])
    client = CountingClient([])
    builder = GraphContextBuilder(nodes, edges, None, embed=hash_embed)
    result = LocalSearch(client, builder, max_tokens=64, n_ctx=2048, corpus="mydocs").search("Who wrote it?")
    assert client.calls == 0
    assert result.response.startswith("No evidence in corpus 'mydocs'")
    assert result.grounding["evidence_items"] == 0 and not result.grounding["grounded"]
    assert "## Sources" in render_report(result) and "(none)" in render_report(result)


def test_code_graph_symbols_are_entities_with_their_own_chunk_as_text_unit():
    frame, nodes, edges = code_graph()
    builder = GraphContextBuilder(nodes, edges, frame, embed=hash_embed)
    assert set(builder.entity_table["node_type"]) <= {"module", "class", "function", "method"}
    ctx = builder.build_context("bidirectional shortest path between source and target")
    assert ctx.entities and ctx.text_units
    units = {u["id"]: u for u in ctx.text_units}
    assert set(units) <= set(frame["chunk_id"])
    some = next(iter(units.values()))
    assert some["text"] == frame.set_index("chunk_id").loc[some["id"], "text"]
    client = CountingClient(["## 1. Introduction\nreport", "bidirectional_shortest_path computes it."])
    result = LocalSearch(client, builder, max_tokens=64, n_ctx=2048, network_max_tokens=600,
                         corpus="default").search("Which function finds a shortest path from both ends?")
    assert client.calls == 2 and result.sources() and result.grounding["evidence_items"] > 0


def test_precomputed_entity_vectors_are_used():
    frame, nodes, edges = code_graph()
    builder = GraphContextBuilder(nodes, edges, frame, embed=hash_embed)
    vectors = {n: v for n, v in zip(builder.entity_table["node_id"], builder.entity_vectors)}

    def refuse(texts):
        raise AssertionError("entity descriptions embedded again")

    again = GraphContextBuilder(nodes, edges, frame, embed=refuse, embed_query=hash_embed, entity_vectors=vectors)
    assert np.allclose(again.entity_vectors, builder.entity_vectors)


def test_entities_the_question_names_come_first():
    rows = [("entity:counterparts", "Counterparts", "an album"), ("entity:canada", "Canada", "a country"),
            ("entity:rush", "Rush", "a band")]
    nodes = pd.DataFrame({"corpus": "c", "node_id": [r[0] for r in rows], "node_type": "entity",
                          "name": [r[1] for r in rows], "chunk_id": "", "description": [r[2] for r in rows],
                          "rank": 1, "community": -1, "attributes": "{}"})
    edges = pd.DataFrame(columns=["corpus", "source", "target", "edge_type", "weight", "evidence"])

    def canada_first(texts):  # an embedding that prefers the wrong entity
        return np.asarray([[1.0, 0.0] if "Canad" in t else [0.0, 1.0] for t in texts], dtype=np.float32)

    builder = GraphContextBuilder(nodes, edges, None, embed=canada_first)
    entities, _ = builder.map_query_to_entities("Which Canadian band released the song Counterparts?", 2)
    assert entities[0]["node_id"] == "entity:counterparts"
