"""core/labeling/pools.py: a question's candidate pool holds its judged paragraphs, their graph neighbours, the
best-ranked non-relevant hits of BM25 and dense, and random fill; it is seeded per question and shuffled."""
from __future__ import annotations

from collections import Counter

from causal_assets.core.labeling.pools import POOL_COLUMNS, PoolParams, build_pool, build_pools, pool_params
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
    assert together[together["query_id"] == "q1"].reset_index(drop=True).equals(alone)
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
    for q, rows in frame.groupby("query_id"):
        assert rows["position"].tolist() == list(range(5))
        assert set(rows["question"]) == {QUESTIONS[q][0]}
        assert set(rows["answer"]) == {PARAGRAPHS[QUESTIONS[q][1]][0]}
    for doc, title, text in zip(frame["chunk_id"], frame["title"], frame["text"]):
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


# ------------------------------------------------------------------------------------------------ gold files
# A questions file's gold names files of a folder corpus; a long file's answer sits deep inside it.

TOPICS = ["compression", "logging", "scheduling", "encryption", "mirrors", "quotas", "tracing", "locks", "proxies",
          "sockets", "caches", "signals"]


def _long_page(name: str, n: int, fact_at: int, fact: str) -> str:
    paras = [f"Section {i} of {name}. The {TOPICS[i % len(TOPICS)]} settings of {name} take a value per host; "
             f"each one is read at start-up, checked against the schema and logged once. " * 2 for i in range(n)]
    paras[fact_at] = fact
    return "\n\n".join(paras) + "\n"


def _folder_benchmark(tmp_path, records):
    import json

    import yaml

    from causal_assets.core.corpus.chunk import chunks_to_frame
    from causal_assets.core.index.build import build_index
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.registry.benchmark_loading import load_benchmark
    from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry

    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": "pages", "loader": "folder", "path": "docs", "options": {"chunk_chars": 400, "overlap_chars": 0}}]}))
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "mine", "loader": "questions", "corpus": "pages", "path": "questions.jsonl"}]}))
    spec = load_benchmark_registry(tmp_path / "benchmarks.yaml", corpora=tmp_path / "corpora.yaml")["mine"]
    chunks = chunks_to_frame(load_corpus(load_corpus_registry(tmp_path / "corpora.yaml")["pages"])[0])
    return spec, build_index(chunks, "pages"), load_benchmark(spec, "dev", chunks)


def test_a_long_gold_files_answer_chunk_is_pooled_and_read_whole(tmp_path):
    """The answer sits in the 40th chunk of a 60-chunk page: the page's chunks are ranked by the question and its
    answer, so that chunk is pooled (not the page's first chunks), read whole, and other files keep their room."""


    docs = tmp_path / "docs"
    docs.mkdir()
    fact = "When a transfer fails, the retry delay doubles after each attempt until it reaches 17 minutes."
    (docs / "transfer.txt").write_text(_long_page("transfer", 60, 40, fact))
    for name in ("backup", "restore", "mirror"):
        (docs / f"{name}.txt").write_text(_long_page(name, 8, 3, f"The {name} command keeps its state per host."))
    spec, index, bench = _folder_benchmark(tmp_path, [
        {"id": "delay", "question": "What is the longest delay between two retries of a failed transfer?",
         "answer": ["17 minutes"], "gold": ["transfer.txt"]}])
    page = [c for c in index.ids if str(c).startswith("transfer.txt#")]
    assert len(page) >= 50
    answer_chunk = next(c for c in page if "17 minutes" in index.text(c))
    assert int(answer_chunk.split("#")[1]) >= 35
    params = pool_params(spec.pool_settings)
    pools = build_pools(index, bench, ["delay"], params)
    row = pools[pools["chunk_id"] == answer_chunk]
    assert len(row) == 1 and row["origin"].iloc[0] == "seed"
    # read whole: the solver's text is the chunk's, and the pool says so
    assert row["text"].iloc[0] == index.chunks["text"].iloc[index.position[answer_chunk]]
    assert row["kept_start"].iloc[0] == 0 and row["kept_end"].iloc[0] == row["doc_chars"].iloc[0]
    # at most `per_file` chunks of the page, and documents of other files beside them
    assert (pools["chunk_id"].str.startswith("transfer.txt#")).sum() <= params.per_file + params.top_candidates
    assert (~pools["chunk_id"].str.startswith("transfer.txt#")).sum() >= params.size - params.gold_room - \
        params.top_candidates


def test_a_two_file_question_pools_both_files_best_chunks(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "copy.txt").write_text(_long_page("copy", 30, 21, "The -Z flag of copy passes compression on to the "
                                                               "tunnel program."))
    (docs / "tunnel.txt").write_text(_long_page("tunnel", 30, 9, "The tunnel program compresses with the zlib "
                                                                 "algorithm when compression is on."))
    (docs / "other.txt").write_text(_long_page("other", 10, 2, "Nothing here."))
    spec, index, bench = _folder_benchmark(tmp_path, [
        {"id": "algo", "question": "Which algorithm does the -Z flag of copy compress with?",
         "answer": ["zlib"], "gold": ["copy.txt", "tunnel.txt"]}])
    pools = build_pools(index, bench, ["algo"], pool_params(spec.pool_settings))
    holding = {c for c in index.ids if "-Z flag of copy passes" in index.text(c) or "with the zlib" in index.text(c)}
    assert {c.split("#")[0] for c in holding} == {"copy.txt", "tunnel.txt"}
    assert holding <= set(pools["chunk_id"])


def test_a_long_gold_file_is_scored_at_file_level(tmp_path):
    """Without evidence a gold file is the truth: a ranking is scored by each file's best chunk, and the labels by
    each file's best label, so a 60-chunk page counts once, not 60 times."""
    import pandas as pd

    from causal_assets.core.evaluation.runner import run_benchmark
    from causal_assets.core.labeling.quality import per_question_from_tables, summarize, label_quality_rows
    from causal_assets.core.measures.metrics import named_metric_per_query
    from causal_assets.core.retrievers.factory import build_retriever

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "transfer.txt").write_text(_long_page("transfer", 60, 40, "The retry delay reaches 17 minutes."))
    (docs / "backup.txt").write_text(_long_page("backup", 8, 3, "Backups are kept per host."))
    spec, index, bench = _folder_benchmark(tmp_path, [
        {"id": "delay", "question": "What is the longest retry delay of a transfer?", "answer": "17 minutes",
         "gold": ["transfer.txt"]}])
    assert bench.file_level == {"delay"} and bench.qrels == {"delay": {"transfer.txt": 1.0}}
    run = run_benchmark(build_retriever("bm25", index, {}), bench).run
    assert set(run["delay"]) == {"transfer.txt", "backup.txt"}          # one entry per file, its best chunk's
    assert named_metric_per_query(bench.qrels, run, "ndcg@10")["delay"] == 1.0
    pools = build_pools(index, bench, ["delay"], PoolParams(size=8, top_candidates=2, per_file=3))
    labels = pd.DataFrame({"query_id": "delay", "chunk_id": pools["chunk_id"], "estimator": "regression",
                           "label": ["YES" if "17 minutes" in t else "NO" for t in pools["text"]],
                           "effect": [5.0 if "17 minutes" in t else 0.0 for t in pools["text"]],
                           "average_effect": 0.0})
    pools = pools.assign(aliases="[]")
    per_q = per_question_from_tables(labels, pools, bench.qrels, "regression", bench.file_level, bench.file_of)
    assert sorted(per_q[0]["labels"]) == ["NO", "YES"] and len(per_q[0]["effects"]) == 2
    summary = summarize(label_quality_rows(per_q))
    assert summary["labels"]["precision"] == summary["labels"]["recall"] == 1.0


def test_answer_holders_name_the_pool_members_a_label_shares_the_answer_with():
    import json

    import pandas as pd

    from causal_assets.core.labeling.runner import answer_holders

    pool = pd.DataFrame({"chunk_id": ["a", "b", "c"], "answer": "17 minutes", "aliases": json.dumps(["17 min"]),
                         "text": ["waits 17 minutes at most", "up to 17 min between tries", "no delay here"]})
    assert answer_holders(pool) == ["a", "b"]
