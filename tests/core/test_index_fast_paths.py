"""The index's fast paths agree with the plain computations they replace: the compiled BM25/TF-IDF top k, the
one-query NumPy path, the blockwise dense moments, the ANN index (exact re-scored cosines) and shortlist fusion at ANN scale."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.index import search as search_module
from causal_assets.core.index.ann import AnnConfig, AnnIndex, exact_top_k, recall_at_k
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.index.sparse import build_bm25, build_tfidf
from causal_assets.core.retrievers.similarity import HybridRetriever

WORDS = [f"w{i}" for i in range(60)]


def corpus(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    # Zipf-like term frequencies: common terms touch most chunks (the scan path), rare ones few (the postings path)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    tokens = [list(rng.choice(WORDS, rng.integers(3, 30), p=p / p.sum())) for _ in range(n)]
    tokens[7] = []  # an empty chunk
    return tokens


def ranking(scores: np.ndarray, k: int) -> np.ndarray:
    return np.lexsort((np.arange(len(scores)), -scores))[:k]


@pytest.mark.parametrize("build", [build_bm25, build_tfidf])
def test_top_k_many_and_top_k_equal_sorting_every_score(build):
    index = build(corpus())
    rng = np.random.default_rng(1)
    queries = [list(rng.choice(WORDS, rng.integers(1, 8))) for _ in range(60)]
    queries += [[], ["not-a-term"], ["w0", "not-a-term", "w0"], ["w59"]]  # empty, unknown, repeats, one rare term
    for k in (1, 10, 400, 500):
        top = index.top_k_many(queries, k, moments=True)
        for q, terms in enumerate(queries):
            scores = index.score(terms)
            order = ranking(scores, k)
            assert top.positions[q].tolist() == order.tolist()
            assert np.array_equal(top.scores[q], scores[order])
            one_positions, one_scores = index.top_k(terms, k)  # the NumPy path of a single query
            assert one_positions.tolist() == order.tolist()
            assert np.array_equal(one_scores, scores[order])
            mean, std = top.mean_std(q)
            assert mean == pytest.approx(float(scores.astype(np.float64).mean()), abs=1e-6)
            assert std == pytest.approx(float(scores.astype(np.float64).std()), abs=1e-5)


def test_one_query_top_k_breaks_a_tie_cut_by_k_in_chunk_order():
    # 30 identical chunks around two better ones: the 3rd..5th places are a tie among 30, won by the lowest positions
    tokens = [["a", "b", "c"]] * 12 + [["a"]] + [["a", "b", "c"]] * 18 + [["a", "a"]] + [["z"]] * 3
    index = build_bm25(tokens)
    positions, _ = index.top_k(["a"], 5)
    assert positions.tolist() == ranking(index.score(["a"]), 5).tolist()
    assert positions.tolist()[:2] == [12, 31] or positions.tolist()[:2] == [31, 12]
    assert positions.tolist()[2:] == [0, 1, 2]
    assert index.top_k(["a"], 40)[0].tolist()[-3:] == [32, 33, 34]  # no shared term: last, in chunk order


def test_dense_moments_in_blocks(monkeypatch):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 8)).astype(np.float32)
    chunks = pd.DataFrame({"chunk_id": [str(i) for i in range(1000)], "title": "", "kind": "x"})
    monkeypatch.setattr(search_module, "MOMENTS_BLOCK", 300)  # blocks of unequal size
    mean, second = CorpusIndex("x", chunks, {}, vectors).dense_moments()
    e = vectors.astype(np.float64)
    assert np.allclose(mean, e.mean(axis=0), atol=1e-12)
    assert np.allclose(second, e.T @ e / len(e), atol=1e-12)


def clustered(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    v = centres[rng.integers(0, 20, n)] + 0.6 * rng.standard_normal((n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_ann_calibrated_recall_and_exact_scores():
    data = clustered(5100)
    vectors, queries = data[:5000], data[5000:]  # queries from the corpus's own distribution
    ann = AnnIndex.build(vectors, AnnConfig(min_chunks=0, target_recall=0.95))
    positions, scores = ann.search(queries, 10)
    assert recall_at_k(positions, exact_top_k(vectors, queries, 10)) >= 0.9
    assert np.allclose(scores, np.einsum("qkd,qd->qk", vectors[positions], queries), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-7).all()  # best first


def test_hybrid_at_ann_scale_equals_exact_fusion_when_the_shortlist_is_everything():
    n = 300
    tokens = corpus(n, seed=2)
    chunks = pd.DataFrame({"chunk_id": [f"c{i}" for i in range(n)], "title": "", "kind": "x",
                           "text": [" ".join(t) for t in tokens]})
    vectors = clustered(n, seed=3)

    class Queries:
        model_name = "fixed"

        def encode_queries(self, queries):
            return clustered(len(queries), seed=4)[: len(queries)]

    sparse = {"bm25": build_bm25(tokens)}
    exact = CorpusIndex("x", chunks, sparse, vectors, embedder=Queries(), ann_config=AnnConfig(min_chunks=10 ** 9))
    scaled = CorpusIndex("x", chunks, sparse, vectors, embedder=Queries(),
                         ann_config=AnnConfig(min_chunks=0, nlist=16, nprobe=16))  # every list: exact candidates
    query = ["w1 w5 w9"]
    a = HybridRetriever(exact, weight=0.7).retrieve_many(query, 10)[0]
    b = HybridRetriever(scaled, weight=0.7, shortlist=n).retrieve_many(query, 10)[0]
    assert [h.chunk_id for h in a] == [h.chunk_id for h in b]
    assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)


def test_each_query_is_encoded_once_and_the_cache_is_bounded(monkeypatch):
    """The retrievers of an evaluation (and a tuning run's trials) ask for the same queries' vectors: the model
    sees each query once, the vectors come back in the asked order, and only the latest QUERY_CACHE are kept."""
    from causal_assets.core.index import dense

    encoded: list[list[str]] = []

    def fake(self, queries):
        encoded.append(list(queries))
        return np.array([[float(len(q)), float(ord(q[0]))] for q in queries], dtype=np.float32)

    monkeypatch.setattr(dense.Embedder, "_encode_queries", fake)
    monkeypatch.setattr(dense, "QUERY_CACHE", 3)
    emb = dense.Embedder()
    first = emb.encode_queries(["ab", "c", "ab"])
    again = emb.encode_queries(["c", "ab", "dddd"])
    assert encoded == [["ab", "c"], ["dddd"]]
    assert first.dtype == np.float32 and first.tolist() == [[2, 97], [1, 99], [2, 97]]
    assert again.tolist() == [[1, 99], [2, 97], [4, 100]]
    emb.encode_queries(["e"])          # evicts the least recently asked ("c")
    emb.encode_queries(["c", "ab"])
    assert encoded[-2:] == [["e"], ["c"]]
