"""core/labeling/pools.py: a question's candidate pool holds its judged paragraphs, their graph neighbours, the
best-ranked non-relevant hits of BM25 and dense, and random fill; it is seeded per question and shuffled."""
from __future__ import annotations

from collections import Counter

from causal_assets.core.labeling.pools import POOL_COLUMNS, PoolParams, build_pool, build_pools
from tests.core.tiny_corpus import PARAGRAPHS, QUESTIONS, tiny_benchmark, tiny_index

# A graph neighbourhood given as data: (neighbour, relation, weight), strongest first.
GRAPH = {"gustave_eiffel": [("eiffel_tower", "mentions", 1.0), ("liberty", "mentions", 0.5)],
         "seine": [("eiffel_tower", "related", 0.4)]}


def neighbors(chunk_id: str) -> list[tuple[str, str, float]]:
    return GRAPH.get(chunk_id, [])


def test_pool_is_seeds_their_neighbours_hard_negatives_and_random_fill():
    index, bench = tiny_index(), tiny_benchmark()
    params = PoolParams(size=6, max_seed_neighbors=1, hard_negatives=2, seed=3)
    pool = dict(build_pool(index, bench, "q2", params, neighbors))
    assert len(pool) == 6
    assert pool["gustave_eiffel"] == "seed"
    assert pool["eiffel_tower"] == "seed_neighbor"            # the strongest neighbour only (max_seed_neighbors=1)
    assert pool.get("liberty") != "seed_neighbor"
    origins = Counter(pool.values())
    assert origins == {"seed": 1, "seed_neighbor": 1, "hard_negative": 2, "random": 2}
    # the hard negatives: BM25's best hit outside the pool so far, then dense's
    question = QUESTIONS["q2"][0]
    bm25_first = next(h.chunk_id for h in index.search(question, k=12, method="bm25")
                      if h.chunk_id not in ("gustave_eiffel", "eiffel_tower"))
    dense_first = next(h.chunk_id for h in index.search(question, k=12, method="dense")
                       if h.chunk_id not in ("gustave_eiffel", "eiffel_tower", bm25_first))
    assert pool[bm25_first] == pool[dense_first] == "hard_negative"


def test_pool_is_seeded_per_question_and_shuffled():
    index, bench = tiny_index(), tiny_benchmark()
    params = PoolParams(size=8, hard_negatives=2)
    first = build_pool(index, bench, "q1", params)
    assert build_pool(index, bench, "q1", params) == first
    # another seed draws other random fill or another order
    assert build_pool(index, bench, "q1", PoolParams(size=8, hard_negatives=2, seed=1)) != first
    # a question's pool does not depend on which other questions are pooled
    alone = build_pools(index, bench, ["q1"], params)
    together = build_pools(index, bench, ["q5", "q1"], params)
    assert together[together["question_id"] == "q1"].reset_index(drop=True).equals(alone)
    # shuffled: over the questions the relevant paragraph is not always in the same position
    positions = {build_pool(index, bench, q, params).index((doc, "seed")) for q, (_, doc) in QUESTIONS.items()}
    assert len(positions) > 1


def test_within_bounds_every_candidate():
    index = tiny_index()
    within = {q: ["seine", "thames", "danube", "python", "bfs", doc] for q, (_, doc) in QUESTIONS.items()}
    within = {q: list(dict.fromkeys(w)) for q, w in within.items()}
    bench = tiny_benchmark(within=within)
    for q in QUESTIONS:
        pool = build_pool(index, bench, q, PoolParams(size=4, hard_negatives=2), neighbors)
        assert len(pool) == 4 and {d for d, _ in pool} <= set(within[q])


def test_pools_frame_carries_question_answer_and_clipped_text():
    index, bench = tiny_index(), tiny_benchmark(["q3", "q7"])
    frame = build_pools(index, bench, ["q3", "q7"], PoolParams(size=5, hard_negatives=2, max_doc_chars=20))
    assert list(frame.columns) == POOL_COLUMNS and len(frame) == 10
    assert set(frame["benchmark"]) == {"tiny"}
    for q, rows in frame.groupby("question_id"):
        assert rows["position"].tolist() == list(range(5))
        assert set(rows["question"]) == {QUESTIONS[q][0]}
        assert set(rows["answer"]) == {PARAGRAPHS[QUESTIONS[q][1]][0]}
    for doc, title, text in zip(frame["doc_id"], frame["title"], frame["text"]):
        assert title == PARAGRAPHS[doc][0] and text == PARAGRAPHS[doc][1][:20]


def test_a_repeated_id_in_within_is_ranked_once():
    index = tiny_index()
    within = ["seine", "thames", "seine", "danube", "seine"]
    for method in ("bm25", "dense"):
        hits = index.search("Which river flows through Paris?", k=5, method=method, within=within)
        ids = [h.chunk_id for h in hits]
        assert sorted(ids) == ["danube", "seine", "thames"], (method, ids)
        assert ids[0] == "seine"


def test_top_candidates_are_the_retrievers_top_hits_gold_or_not():
    """A questions file may have no gold: its pools take the retrievers' top hits (BM25 and dense in turn) after the
    seeds, so the labels judge what a retriever would show for the question."""
    from dataclasses import replace

    index, bench = tiny_index(), tiny_benchmark()
    question = QUESTIONS["q2"][0]
    bm25 = [h.chunk_id for h in index.search(question, k=12, method="bm25")]
    dense = [h.chunk_id for h in index.search(question, k=12, method="dense")]
    expected = list(dict.fromkeys(d for pair in zip(bm25, dense) for d in pair if d != "gustave_eiffel"))[:3]
    pool = dict(build_pool(index, bench, "q2", PoolParams(size=8, hard_negatives=1, top_candidates=3)))
    assert pool["gustave_eiffel"] == "seed" and [d for d, o in pool.items() if o == "top_candidate"] != []
    assert {d for d, o in pool.items() if o == "top_candidate"} == set(expected)
    no_gold = replace(bench, qrels={})
    pool = dict(build_pool(index, no_gold, "q2", PoolParams(size=8, hard_negatives=1, top_candidates=3)))
    tops = list(dict.fromkeys(d for pair in zip(bm25, dense) for d in pair))[:3]
    assert {d for d, o in pool.items() if o == "top_candidate"} == set(tops) and "seed" not in pool.values()
    # 0 (every loader but questions files by default): the pools are what they were
    assert "top_candidate" not in dict(build_pool(index, bench, "q2", PoolParams(size=8))).values()
