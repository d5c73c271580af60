"""Multi-hop sources as registered corpora and benchmarks, BM25 statistics inside a question's candidates
(`within_stats`), title-less corpora through the learned model, and the entity-first heuristics as tunable fields."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.registry.benchmarks import BenchmarkSpec
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.corpus.multihop import CorpusWarning
from causal_assets.core.registry.corpora import CorpusSpec, load_corpus
from causal_assets.core.foundation.errors import CorpusError
from tests.conftest import HOTPOT, SHARED, require

MUSIQUE = SHARED / "musique" / "musique_ans_dev_40.jsonl"
TWOWIKI = SHARED / "2wiki" / "2wiki_dev_40.jsonl"
COSQA = SHARED / "cosqa"


def _bench_spec(name: str, path) -> BenchmarkSpec:
    return BenchmarkSpec(name=name, loader="multihop", corpus=name, path=str(path), splits=["dev", "train", "test"],
                         eval_splits=["dev", "test"], tune_split="train", validator="answer_f1")


# -- multi-hop sources -------------------------------------------------------------------------------------------

def test_musique_duplicate_titles_gold_is_the_is_supporting_count():
    raw = [json.loads(line) for line in require(MUSIQUE).read_text().splitlines() if line.strip()]
    assert any(len({p["title"] for p in r["paragraphs"]}) < len(r["paragraphs"]) for r in raw)  # titles repeat
    chunks, report = load_corpus(CorpusSpec(name="musique", loader="multihop", path=str(MUSIQUE)))
    supporting = sum(p["is_supporting"] for r in raw for p in r["paragraphs"])
    assert len({c.chunk_id for c in chunks}) == len(chunks) == sum(len(r["paragraphs"]) for r in raw)
    assert sum(c.metadata["supporting"] for c in chunks) == report["gold_paragraphs"] == supporting
    bench = load_benchmark(_bench_spec("musique", MUSIQUE), "dev")
    assert sum(len(g) for g in bench.qrels.values()) == supporting
    # A question whose gold title also names a distractor: only the is_supporting paragraph is gold.
    for r in raw:
        gold_titles = {p["title"] for p in r["paragraphs"] if p["is_supporting"]}
        if sum(p["title"] in gold_titles for p in r["paragraphs"]) > len(gold_titles):
            assert len(bench.qrels[r["id"]]) == sum(p["is_supporting"] for p in r["paragraphs"])
            break
    else:
        pytest.fail("the sample has no question whose gold title repeats")
    # halves partition dev; each question ranks only its own 20 paragraphs
    halves = [load_benchmark(_bench_spec("musique", MUSIQUE), s) for s in ("train", "test")]
    assert not set(halves[0].queries) & set(halves[1].queries)
    assert len(halves[0].queries) + len(halves[1].queries) == len(bench.queries) == 40
    assert all(len(w) == 20 and set(bench.qrels[q]) <= set(w) for q, w in bench.within.items())


def test_2wiki_corpus_joins_sentences_with_a_space():
    raw = [json.loads(line) for line in require(TWOWIKI).read_text().splitlines() if line.strip()]
    chunks, report = load_corpus(CorpusSpec(name="w", loader="multihop", path=str(TWOWIKI)))
    text = {c.chunk_id: c.text for c in chunks}
    joined = 0
    for r in raw:
        for pos, (_, sentences) in enumerate(r.get("context") or []):
            para = text[f"{r['_id']}/{pos}"]
            for a, b in zip(sentences, sentences[1:]):
                assert f"{a} {b}" in para
                joined += 1
    assert joined > 50 and report["skipped_without_paragraphs"] == 0


def test_a_record_without_context_is_skipped_counted_and_warned(tmp_path):
    rec = json.loads(require(TWOWIKI).read_text().splitlines()[0])
    path = tmp_path / "w.jsonl"
    bare = {k: v for k, v in rec.items() if k != "context"} | {"_id": "no-context"}
    path.write_text(json.dumps(rec) + "\n" + json.dumps(bare) + "\n")
    with pytest.warns(CorpusWarning, match="1 record"):
        chunks, report = load_corpus(CorpusSpec(name="w", loader="multihop", path=str(path)))
    assert report["skipped_without_paragraphs"] == 1 and report["skipped_records"] == [f"{path}:2"]
    assert {c.metadata["query_id"] for c in chunks} == {rec["_id"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(load_benchmark(_bench_spec("w", path), "dev").queries) == [rec["_id"]]
    with pytest.raises(CorpusError, match="record has no paragraphs"):
        load_corpus(CorpusSpec(name="w", loader="multihop", path=str(path), options={"strict": True}))


def test_registered_multihop_benchmarks():
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.registry.corpora import load_corpus_registry

    benches, corpora = load_benchmark_registry(), load_corpus_registry()
    for name in ("musique", "2wiki"):
        assert benches[name].loader == corpora[name].loader == "multihop"
        assert benches[name].tune_split == "train" and "test" in benches[name].eval_splits


# -- BM25 statistics inside a question's candidates ---------------------------------------------------------------

class _FixedEmbedder:
    """Stands in for MiniLM: every query embeds to the same unit vector (dense scores = a fixed per-chunk value)."""
    model_name = "fixed"

    def encode_queries(self, queries):
        v = np.zeros((len(queries), 2), np.float32)
        v[:, 0] = 1.0
        return v


def _toy_index(lean: int = 1):
    from causal_assets.core.index.build import build_index

    # "paris" is rare in the corpus but in both candidates; "river" is common in the corpus but in one candidate.
    texts = {"a": "paris paris france", "b": "paris london river"}
    texts |= {f"x{i}": f"river bank number {i}" for i in range(40)}
    chunks = [Chunk(chunk_id=c, corpus="toy", source="t", path="", title="", text=t, kind="document")
              for c, t in texts.items()]
    index = build_index(chunks_to_frame(chunks), "toy", dense=False)
    index.embeddings = np.tile(np.array([[0.0, 1.0]], np.float32), (len(texts), 1))
    index.embeddings[lean] = [0.1, 0.995]   # dense leans to b (1) or a (0)
    index.embedder = _FixedEmbedder()
    return index


def test_within_stats_both_ways():
    from causal_assets.core.retrievers.factory import build_retriever
    from causal_assets.core.retrievers.similarity import candidate_bm25

    index = _toy_index()
    q, within = "paris river", [["a", "b"]]
    # over the whole corpus, candidate statistics are the corpus's: the small index reproduces the stored one
    everything = np.arange(len(index.ids))
    assert np.allclose(candidate_bm25(index, q, everything), index.scores(q, "bm25"), atol=1e-5)
    # dense leans to b: a fusion follows whichever BM25 breaks the tie
    top = {stats: [h.chunk_id for h in build_retriever(name, index, {"within_stats": stats}).retrieve_many(
        [q], 2, within)[0]] for stats in ("corpus", "candidates") for name in ("bm25",)}
    assert top == {"corpus": ["a", "b"], "candidates": ["b", "a"]}
    for name in ("hybrid", "rrf"):
        got = {s: build_retriever(name, index, {"within_stats": s}).retrieve_many([q], 2, within)[0][0].chunk_id
               for s in ("corpus", "candidates")}
        assert got == {"corpus": "a", "candidates": "b"}, name
    with pytest.raises(ValueError, match="within_stats"):
        build_retriever("bm25", index, {"within_stats": "question"})


def test_within_stats_is_chosen_on_the_tune_split():
    from causal_assets.core.registry.benchmarks import Benchmark
    from causal_assets.core.tuning.search import tune
    from causal_assets.core.registry.tuning import TuningSpec

    index = _toy_index(lean=0)   # dense prefers a: only candidate statistics put b first, at a low dense weight
    bench = Benchmark("toy", "train", {"q1": "paris river", "q2": "river paris"},
                      {"q1": {"b": 1.0}, "q2": {"b": 1.0}}, {"q1": ["a", "b"], "q2": ["a", "b"]})
    spec = TuningSpec(retrievers=["hybrid"], metric="precision@1")
    result = tune(index, bench, spec, {})
    assert result.best["hybrid"]["params"]["within_stats"] == "candidates"
    trials = result.trials[result.trials.retriever == "hybrid"]
    assert {json.loads(p)["within_stats"] for p in trials["params"]} == {"corpus", "candidates"}
    # gold = a, which corpus statistics rank first: corpus wins
    flipped = Benchmark("toy", "train", bench.queries, {"q1": {"a": 1.0}, "q2": {"a": 1.0}}, bench.within)
    assert tune(index, flipped, spec, {}).best["hybrid"]["params"]["within_stats"] == "corpus"
    # without candidate sets there is nothing to choose
    plain = tune(index, Benchmark("toy", "train", bench.queries, bench.qrels), spec, {})
    assert "within_stats" not in plain.best["hybrid"]["params"]


# -- entity-first heuristics are tunable fields -------------------------------------------------------------------

def test_every_entity_first_search_value_is_a_valid_field():
    from causal_assets.core.retrievers.entity_first.retriever import EntityFirstRetriever
    from causal_assets.core.registry.retrievers import KINDS
    from causal_assets.core.tuning.points import nested

    index = _toy_index()
    space, start = KINDS["entity_first"].space, KINDS["entity_first"].start
    assert set(start) == set(space)
    for key, values in space.items():
        for v in values:
            EntityFirstRetriever(index, **nested({**start, key: v}))
    with pytest.raises(ValueError, match="title_match"):
        EntityFirstRetriever(index, title_match={"alais": 0.9})


def test_overfitting_gauge_rows():
    from causal_assets.core.evaluation.report import overfitting_gauge

    rows = [("dev", "entity_first", "map", 10, 0.9), ("test", "entity_first", "map", 10, 0.8),
            ("test", "entity_first_tuned", "map", 10, 0.85), ("dev", "entity_first", "precision", 2, 0.86),
            ("test", "entity_first", "precision", 2, 0.79)]
    metrics = pd.DataFrame(rows, columns=["split", "retriever", "metric", "k", "value"]).assign(truth="qrels")
    gauge = overfitting_gauge(metrics, "map@10", {"entity_first_tuned": 0.88}, ("precision@2",))
    untuned = gauge[(gauge.retriever == "entity_first") & (gauge.metric == "map@10")].iloc[0]
    assert untuned["fall to test"] == pytest.approx(0.1) and untuned["dev"] == 0.9
    tuned = gauge[(gauge.retriever == "entity_first_tuned") & (gauge.metric == "map@10")].iloc[0]
    assert tuned["fall to test"] == pytest.approx(0.03) and tuned["tune split (tuning figure)"] == 0.88
    assert gauge[(gauge.retriever == "entity_first") & (gauge.metric == "precision@2")]["fall to test"].iloc[0] \
        == pytest.approx(0.07)


# -- title-less corpus through the learned model ------------------------------------------------------------------

def test_a_corpus_without_titles_through_the_learned_model_and_the_causal_retriever():
    from causal_assets.core.registry.benchmarks import Benchmark
    from causal_assets.core.corpus.beir import load_beir_corpus, load_beir_qrels, load_beir_queries
    from causal_assets.core.index.build import build_index
    from causal_assets.core.retrievers.factory import build_retriever
    from causal_assets.core.tuning.search import tune
    from causal_assets.core.registry.tuning import TuningSpec

    folder = require(COSQA)
    queries = load_beir_queries(folder)
    qrels = load_beir_qrels(folder, "dev", query_ids=set(queries))
    qids = sorted(qrels)[:24]
    gold = {d for q in qids for d in qrels[q]}
    chunks = load_beir_corpus(folder, "cosqa_titleless")
    keep = [c for c in chunks if c.chunk_id in gold] + [c for c in chunks if c.chunk_id not in gold][:40]
    assert not any(c.title for c in keep)      # CoSQA's functions have no titles
    index = build_index(chunks_to_frame(keep), "cosqa_titleless", split_identifiers=True, cache=None)
    bench = Benchmark("cosqa", "train", {q: queries[q] for q in qids}, {q: qrels[q] for q in qids})
    result = tune(index, bench, TuningSpec(retrievers=["hybrid", "learned"], metric="mrr@10", cv_folds=2), {})
    model = result.models["learned"]
    learned = build_retriever("learned", index, {"model": model})
    hits = learned.retrieve_many([queries[q] for q in qids], 10)
    assert all(len(h) == 10 for h in hits)
    mrr = np.mean([next((1 / h.rank for h in hs if h.chunk_id in qrels[q]), 0.0) for q, hs in zip(qids, hits)])
    assert mrr > 0.3
    causal = build_retriever("causal", index, {"shortlist": "learned", "shortlist_params": {"model": model}})
    assert all(causal.retrieve_many([queries[q] for q in qids[:3]], 5))


def test_fusion_of_tuned_retrievers_is_tuned_stored_and_rebuilt(tmp_path):
    from causal_assets.core.registry.benchmarks import Benchmark
    from causal_assets.core.retrievers.factory import build_retriever
    from causal_assets.core.tuning.search import tune
    from causal_assets.core.registry.tuning import TuningSpec
    from causal_assets.core.stored.tuned import load_tuned, save_tuned

    index = _toy_index(lean=0)
    bench = Benchmark("toy", "train", {"q1": "paris river", "q2": "river paris"},
                      {"q1": {"b": 1.0}, "q2": {"b": 1.0}}, {"q1": ["a", "b"], "q2": ["a", "b"]})
    result = tune(index, bench, TuningSpec(retrievers=["hybrid", "rrf", "fusion", "pairwise"],
                                           fusion_members=["hybrid", "rrf"], metric="precision@1"), {})
    assert result.best["pairwise"]["params"]["base"] == {"fusion": result.best["fusion"]["params"]}
    params = result.best["fusion"]["params"]
    assert set(params["members"]) == {"hybrid", "rrf"}
    assert params["members"]["hybrid"] == result.best["hybrid"]["params"]
    stored = save_tuned(tmp_path, "toy", {"benchmark": "toy", "tune_split": "train", "metric": "precision@1",
                                          "selected": "fusion", "retrievers": result.best}, result.models)
    fusion = build_retriever("fusion", index, load_tuned(tmp_path, "toy", stored.version).params("fusion"))
    assert stored.version and [h.chunk_id for h in fusion.retrieve_many(["paris river"], 2, [["a", "b"]])[0]] \
        == ["b", "a"]
    with pytest.raises(ValueError, match="members"):
        build_retriever("fusion", index, {})
    # zero pair weights: the base ranking unchanged
    base = {"bm25": {"within_stats": "candidates"}}
    same = build_retriever("pairwise", index, {"base": base, "coverage_weight": 0, "link_weight": 0})
    assert [h.chunk_id for h in same.retrieve_many(["paris river"], 2, [["a", "b"]])[0]] == ["b", "a"]


def test_learned_trains_on_other_benchmarks_tune_splits_but_is_scored_on_its_own():
    from causal_assets.core.registry.benchmarks import Benchmark
    from causal_assets.core.tuning.search import tune
    from causal_assets.core.registry.tuning import TuningSpec

    index = _toy_index(lean=0)
    within = {"q1": ["a", "b"], "q2": ["a", "b"], "q3": ["a", "b"]}
    bench = Benchmark("toy", "train", {"q1": "paris river", "q2": "river paris", "q3": "paris france"},
                      {"q1": {"b": 1.0}, "q2": {"b": 1.0}, "q3": {"a": 1.0}}, within)
    other = Benchmark("other", "train", {"q1": "paris river", "x2": "france paris"}, {"q1": {"b": 1.0}, "x2": {"a": 1.0}},
                      {"q1": ["a", "b"], "x2": ["a", "b"]})
    asked = []

    def sources(name):
        asked.append(name)
        return (index, other, None) if name == "other" else None

    spec = TuningSpec(retrievers=["hybrid", "learned", "fusion"], learned_extra=["other", "missing"], cv_folds=3,
                      metric="precision@1", fusion_members=["learned", "hybrid"])
    result = tune(index, bench, spec, {}, extra_sources=sources)
    model = result.models["learned"]
    assert asked == ["other", "missing"]
    assert model.metadata["extra_train"] == {"other/train": 2}
    assert model.metadata["train_queries"] == 5     # own 3 + other 2 (the shared id "q1" kept apart)
    assert result.best["learned"]["queries"] == 3   # the CV figure is on the benchmark's own questions
    # the fusion's learned member is stored as a reference to the model, scored out-of-fold while tuning
    assert result.best["fusion"]["params"]["members"]["learned"]["model_path"] == "@learned"


@pytest.mark.parametrize("loader, path", [("multihop", MUSIQUE), ("multihop", TWOWIKI),
                                          ("hotpotqa", HOTPOT)])
def test_benchmark_questions_keep_the_files_order(loader, path):
    """qrels and candidate sets are keyed in the file's question order, as the queries are. They were keyed by a
    set, whose order changes with each process's string hashing: the tuner's means summed the same per-query
    figures in another order, grid points that tie broke the other way, and the selected retriever's nested
    figures moved between two runs of the same inputs (HotpotQA fusion 0.9248 / 0.9280 by PYTHONHASHSEED)."""
    raw = [json.loads(line) for line in require(path).read_text().splitlines() if line.strip()]
    ids = [str(r.get("_id", r.get("id"))) for r in raw if r.get("context", r.get("paragraphs"))]
    spec = _bench_spec(path.parent.name, path).model_copy(update={"loader": loader})
    for split in ("dev", "train"):
        bench = load_benchmark(spec, split)
        order = [q for q in ids if q in bench.queries]
        assert len(order) == len(bench.queries) > 15
        assert list(bench.queries) == list(bench.qrels) == order
        assert list(bench.within) == order
