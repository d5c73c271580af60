"""Cascade retriever on a small real corpus: the first 200 SciFact documents, indexed in memory with the
project's TF-IDF and the packaged MiniLM model."""
import json
import threading

import numpy as np
import pytest

from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.index.build import build_sparse
from causal_assets.core.index.dense import Embedder
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.cascade import CascadeRetriever, EntropyCalculator, GraphExpander, RetrievalResult
from causal_assets.core.retrievers.cascade_config import EntropyConfig, GraphConfig, RetrievalConfig
from causal_assets.core.retrievers.metadata_filter import MetadataFilter
from tests.conftest import SCIFACT, require

SCIFACT_CORPUS = SCIFACT / "corpus.jsonl"
N_DOCS = 200


def _metadata(i: int, doc: dict) -> dict:
    """Hand-made metadata on the real documents (SciFact has none): a number, a date string, a group; every
    10th document lacks the date, to exercise missing keys."""
    md = {"n_words": len(doc["text"].split()), "group": ["a", "b", "c"][i % 3]}
    if i % 10:
        md["date"] = f"20{i % 25:02d}-01-01"
    return md


@pytest.fixture(scope="module")
def index() -> CorpusIndex:
    require(SCIFACT_CORPUS)
    with SCIFACT_CORPUS.open(encoding="utf-8") as f:
        docs = [json.loads(next(f)) for _ in range(N_DOCS)]
    chunks = chunks_to_frame(
        Chunk(chunk_id=d["_id"], corpus="scifact", source="beir", path=str(SCIFACT_CORPUS), title=d["title"],
              text=d["text"], kind="document" if i % 4 else "abstract", metadata=_metadata(i, d))
        for i, d in enumerate(docs))
    chunks["chunk_idx"] = range(len(chunks))
    sparse, _ = build_sparse(chunks, False)
    embedder = Embedder()
    texts = (chunks["title"] + "\n" + chunks["text"]).tolist()
    return CorpusIndex("scifact", chunks, sparse, embedder.encode(texts), False, embedder)


def cfg(**sections) -> RetrievalConfig:
    return RetrievalConfig.model_validate(sections)


def bounded(fn, seconds: float = 60.0):
    """Run fn in a daemon thread: a regression of the unbounded loop fails the test instead of hanging it."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "retrieval loop did not terminate"
    return box["value"]


# --- Configuration ----------------------------------------------------------------------------------------

def test_config_defaults_and_validation():
    c = RetrievalConfig()
    assert (c.tfidf.initial_k, c.embedding.similarity_top_k, c.embedding.similarity_cutoff) == (100, 20, 0.6)
    assert (c.graph.max_hops, c.graph.max_nodes, c.graph.score_decay_factor) == (2, 50, 0.8)
    assert (c.entropy.threshold, c.entropy.max_iterations, c.entropy.min_documents, c.entropy.max_documents,
            c.entropy.window_size) == (0.05, 5, 5, 100, 3)
    assert c.entropy.use_normalized_entropy and c.entropy.terminate_on_decreasing_entropy
    with pytest.raises(ValueError, match="min_documents"):
        cfg(entropy={"min_documents": 60, "max_documents": 50})
    with pytest.raises(ValueError):
        cfg(tfidf={"initial_kk": 3})          # typos are rejected, not ignored
    with pytest.raises(ValueError):
        cfg(embedding={"similarity_cutoff": 1.5})


@pytest.mark.parametrize("name", ["config.json", "config.yaml", "retriever_data"])
def test_save_load_round_trip(tmp_path, index, name):
    c = cfg(tfidf={"initial_k": 7}, embedding={"similarity_top_k": 3, "similarity_cutoff": None},
            graph={"relationship_types": ["cites"], "min_edge_weight": 0.1},
            entropy={"max_iterations": 4, "window_size": 2})
    r = CascadeRetriever(index, c)
    written = r.save(tmp_path / name)
    assert written.exists()
    if name == "retriever_data":
        assert written == tmp_path / name / "cascade_config.json"
    assert RetrievalConfig.load(tmp_path / name) == c
    fresh = CascadeRetriever(index).load(tmp_path / name)
    assert fresh.config == c


def test_config_that_cannot_be_honoured(index):
    with pytest.raises(ValueError, match="embedded with"):
        CascadeRetriever(index, cfg(embedding={"embedding_model": "text-embedding-ada-002"}))
    with pytest.warns(UserWarning, match="prebuilt"):
        CascadeRetriever(index, cfg(tfidf={"max_features": 20000, "ngram_range": [1, 3]}))


# --- Termination: regression tests for the seed's unbounded loop ------------------------------------------

def test_should_terminate_checks_max_iterations_before_min_documents():
    calc = EntropyCalculator(EntropyConfig(min_documents=50, max_iterations=3))
    docs = ["cell growth in tumours", "protein folding"]
    assert not calc.should_terminate(docs, 1)
    assert not calc.should_terminate(docs, 2)
    assert calc.should_terminate(docs, 3)      # the seed returned False here, forever
    assert calc.last_reason == "max_iterations"


@pytest.mark.parametrize("initial_k, reason", [(1, "no_new_documents"), (100, "candidates_exhausted")])
def test_impossible_cutoff_terminates(index, initial_k, reason):
    # The seed's scenario: nothing passes the cutoff, so min_documents is never reached.
    r = CascadeRetriever(index, cfg(tfidf={"initial_k": initial_k}, embedding={"similarity_cutoff": 0.99},
                                    entropy={"min_documents": 50, "max_iterations": 1000}))
    result = bounded(lambda: r.retrieve("vitamin D deficiency and bone density"))
    assert result.documents == []
    assert result.metadata["iterations"] <= 2
    assert result.metadata["termination_reason"] == reason


def test_loop_stops_at_max_iterations_while_documents_still_grow(index):
    # One new document per iteration, never reaching min_documents: only max_iterations can stop it.
    r = CascadeRetriever(index, cfg(tfidf={"initial_k": 1}, embedding={"similarity_top_k": 1, "similarity_cutoff": None},
                                    entropy={"min_documents": 50, "max_iterations": 4}))
    result = bounded(lambda: r.retrieve("cells"))
    assert result.metadata["iterations"] == 4
    assert result.metadata["termination_reason"] == "max_iterations"
    assert len(result.documents) == 4
    assert len(result.metadata["entropy_history"]) == 4


def test_loop_stops_when_candidates_are_exhausted(index):
    r = CascadeRetriever(index, cfg(embedding={"similarity_cutoff": None, "similarity_top_k": 500},
                                    entropy={"min_documents": 50, "max_documents": 500, "max_iterations": 100,
                                             "threshold": 0.0, "terminate_on_decreasing_entropy": False}))
    result = bounded(lambda: r.retrieve("cell"))
    assert result.metadata["termination_reason"] == "candidates_exhausted"
    assert result.metadata["iterations"] <= 2


# --- Retrieval --------------------------------------------------------------------------------------------

def test_known_item_query_finds_its_document(index):
    r = CascadeRetriever(index)
    for i in (3, 57, 150):
        result = r.retrieve(index.chunks.at[i, "title"])
        assert result.documents[0].chunk_id == index.chunks.at[i, "chunk_id"]
        assert result.documents[0].rank == 1


def test_result_and_metadata(index):
    r = CascadeRetriever(index, cfg(embedding={"similarity_cutoff": 0.2}))
    result = r.retrieve("T cell response to infection", max_documents=8)
    assert isinstance(result, RetrievalResult) and 0 < len(result) <= 8
    md = result.get_metadata()
    for key in ("iterations", "tfidf_time", "embedding_time", "graph_time", "entropy_time", "total_time",
                "final_entropy", "termination_reason", "entropy_history"):
        assert key in md
    assert md["total_time"] >= md["tfidf_time"] + md["embedding_time"] + md["graph_time"] + md["entropy_time"]
    assert 0.0 < md["final_entropy"] <= 1.0 and md["final_entropy"] == md["entropy_history"][-1]
    assert 1 <= md["iterations"] <= r.config.entropy.max_iterations
    assert result.scores == [h.score for h in result.documents]
    assert result.scores == sorted(result.scores, reverse=True)
    assert [h.rank for h in result.documents] == list(range(1, len(result) + 1))
    assert all(s >= 0.2 for s in result.scores)                    # no graph: all pass the cutoff
    assert md["sources"] == ["embedding"] * len(result)


def test_empty_query_is_rejected(index):
    with pytest.raises(ValueError, match="empty"):
        CascadeRetriever(index).retrieve("  ")


def test_retrieve_many_implements_the_protocol(index):
    r = CascadeRetriever(index)
    queries = ["insulin resistance in obesity", "stem cell differentiation"]
    deep, shallow = r.retrieve_many(queries, 50), r.retrieve_many(queries, 10)
    assert r.name == "cascade"
    for d, s in zip(deep, shallow):
        assert len(d) == 50 and len({h.chunk_id for h in d}) == 50   # padded to k, no duplicates
        assert [h.rank for h in d] == list(range(1, 51))
        assert [h.chunk_id for h in s] == [h.chunk_id for h in d[:10]]   # depth does not change the prefix
    within = list(index.ids[:12])
    [hits] = r.retrieve_many(["insulin resistance"], 20, [within])
    assert len(hits) == 12 and {h.chunk_id for h in hits} == set(within)


# --- Filters ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flt, expected", [
    ({"kind": "abstract"}, lambda c, m: c["kind"] == "abstract"),
    ({"group": "b"}, lambda c, m: m["group"] == "b"),
    ({"metadata.group": {"$in": ["a", "c"]}}, lambda c, m: m["group"] in ("a", "c")),
    ({"n_words": {"$gte": 200}}, lambda c, m: m["n_words"] >= 200),
    ({"n_words": {"$gt": 150, "$lt": 220}}, lambda c, m: 150 < m["n_words"] < 220),
    ({"n_words": {"$lte": 100}}, lambda c, m: m["n_words"] <= 100),
    ({"date": {"$gte": "2010-01-01"}}, lambda c, m: "date" in m and m["date"] >= "2010-01-01"),
    ({"date": {"$ne": "2003-01-01"}}, lambda c, m: m.get("date") != "2003-01-01"),   # missing matches $ne
    ({"group": {"$nin": ["a"]}, "kind": "document"}, lambda c, m: m["group"] != "a" and c["kind"] == "document"),
    ({"corpus": "scifact"}, lambda c, m: True),
    ({"corpus": {"$ne": "scifact"}}, lambda c, m: False),
    ({"title": {"$in": ["nope"]}}, lambda c, m: False),
    ({"missing_key": 1}, lambda c, m: False),
])
def test_filter_operators(index, flt, expected):
    mask = MetadataFilter(index.chunks, index.corpus).mask(flt)
    rows = index.chunks.to_dict("records")
    want = np.array([expected(c, json.loads(c["metadata"])) for c in rows])
    assert (mask == want).all()


def test_filter_errors(index):
    f = MetadataFilter(index.chunks, index.corpus)
    with pytest.raises(ValueError, match="unknown operator"):
        f.mask({"n_words": {"$regex": "x"}})
    with pytest.raises(ValueError, match="needs a list"):
        f.mask({"group": {"$in": "a"}})


def test_retrieve_with_filter_returns_only_matching_documents(index):
    r = CascadeRetriever(index, cfg(embedding={"similarity_cutoff": None}))
    flt = {"group": "a", "n_words": {"$gte": 150}}
    result = r.retrieve("cancer cells", filter_dict=flt)
    allowed = set(index.ids[MetadataFilter(index.chunks).mask(flt)])
    assert result.documents and {h.chunk_id for h in result.documents} <= allowed
    unfiltered = {h.chunk_id for h in r.retrieve("cancer cells").documents}
    assert not unfiltered <= allowed


# --- Graph expansion --------------------------------------------------------------------------------------

GRAPH = {
    "A": [("B", "references", 1.0), ("D", "references", 0.2), ("E", "contains", 0.9), ("X", "mentions", 1.0)],
    "B": [("C", "references", 0.5), ("A", "references", 1.0)],
    "X": [("F", "mentions", 1.0)],
    "C": [("G", "references", 1.0)],
}


def neighbors(node):
    return GRAPH.get(node, [])


def expand(**graph):
    expander = GraphExpander(GraphConfig(**graph), neighbors)
    hits = expander.expand(["A"], [1.0], is_document=lambda n: n != "X")
    return {h.chunk_id: (round(h.score, 6), h.hop) for h in hits}


def test_graph_expansion_hops_decay_and_weights():
    assert expand() == {"B": (0.8, 1), "E": (0.72, 1), "C": (0.32, 2), "F": (0.64, 2)}
    assert expand(max_hops=1) == {"B": (0.8, 1), "E": (0.72, 1)}
    assert expand(max_hops=3)["G"] == (0.256, 3)
    assert expand(max_hops=0) == {}
    assert "D" in expand(min_edge_weight=0.1)                       # weight 0.2 followed only below it


def test_graph_expansion_filters_and_bounds():
    assert expand(relationship_types=["references"]) == {"B": (0.8, 1), "C": (0.32, 2)}
    assert "F" not in expand(include_entity_nodes=False)            # reached only through entity node X
    assert expand(max_nodes=1) == {"B": (0.8, 1)}
    assert expand(max_nodes=3) == {"B": (0.8, 1), "E": (0.72, 1), "F": (0.64, 2)}   # best first
    assert GraphExpander(GraphConfig(), None).expand(["A"], [1.0]) == []


def test_retriever_graph_stage(index):
    ids = [str(i) for i in index.ids]
    c = cfg(embedding={"similarity_cutoff": None, "similarity_top_k": 1}, entropy={"max_iterations": 1})
    query = index.chunks.at[10, "title"]
    seed = CascadeRetriever(index, c).retrieve(query).documents[0]
    assert seed.chunk_id == ids[10]
    linked, far = ids[150], ids[199]

    def nb(node):
        return [(linked, "cites", 0.5), (ids[0], "other", 1.0)] if node == seed.chunk_id else \
            [(far, "cites", 1.0)] if node == linked else []

    result = CascadeRetriever(index, c, neighbors=nb).retrieve(query)
    got = {h.chunk_id: (h.score, src) for h, src in zip(result.documents, result.metadata["sources"])}
    assert got[seed.chunk_id] == (seed.score, "embedding")
    assert got[linked][1] == "graph" and got[linked][0] == pytest.approx(seed.score * 0.8 * 0.5)
    assert got[far][0] == pytest.approx(seed.score * 0.8 * 0.5 * 0.8)
    assert ids[0] in got                                              # all relationship types by default
    only_cites = CascadeRetriever(index, c.model_copy(deep=True), neighbors=nb)
    only_cites.config.graph.relationship_types = ["cites"]
    assert ids[0] not in {h.chunk_id for h in only_cites.retrieve(query).documents}
    flt = {"group": {"$ne": _metadata(150, {"text": ""})["group"]}}  # excludes `linked`, still traversed
    filtered = {h.chunk_id for h in CascadeRetriever(index, c, neighbors=nb).retrieve(query, filter_dict=flt).documents}
    assert seed.chunk_id in filtered and linked not in filtered and far in filtered


# --- Entropy ----------------------------------------------------------------------------------------------

def test_entropy_values_and_history(index):
    calc = EntropyCalculator(EntropyConfig(use_normalized_entropy=False, window_size=2), index.sparse["tfidf"].matrix.tocsr())
    assert calc.calculate_entropy([]) == 0.0
    assert calc.calculate_entropy(["alpha beta", "alpha gamma"]) == pytest.approx(1.5)   # p = 1/2, 1/4, 1/4
    rows = [0, 1, 2, 3]
    h = calc.calculate_entropy(rows)
    assert h == pytest.approx(calc.calculate_entropy([index.text(c) for c in index.ids[rows]]), rel=1e-6)
    norm = EntropyCalculator(EntropyConfig(), calc.term_matrix)
    assert 0 < norm.calculate_entropy(rows) <= 1
    assert norm.calculate_entropy_change([0]) is None
    norm.calculate_entropy_change([0, 1])
    change = norm.calculate_entropy_change([0, 1, 2])
    assert change == pytest.approx(norm.history[-1] - np.mean(norm.history[-4:-1]))
