"""core/retrievers/learned: query-time features of first-stage candidates, the causal-relevance model fitted on
them, and the learned retriever (also built through the factory)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.graph.store import edges_frame, nodes_frame
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.retrievers.learned.features import (BRIDGE_FEATURES, FEATURES, KINDS, FeatureExtractor,
                                                            GraphProximity, query_entities)
from causal_assets.core.retrievers.learned.retriever import (CausalRelevanceModel, LearnedRetriever, attach_target,
                                                             candidate_table, cross_validate, fit_model, grid_for,
                                                             _sharing_units, is_ranker, query_folds)
from tests.core.tiny_corpus import PARAGRAPHS, QUESTIONS, tiny_benchmark, tiny_index

# Small data: shallow trees with small leaves, so a few dozen rows can be fitted.
PARAMS = {"learning_rate": 0.2, "max_leaf_nodes": 4, "min_samples_leaf": 2, "max_iter": 40}


def _graph():
    """Paragraph nodes joined through entity nodes: seine - Paris - eiffel_tower - Eiffel Tower - gustave_eiffel,
    and a community node that would shortcut everything if it counted."""
    nodes = nodes_frame([{"node_id": f"chunk:{c}", "node_type": "text_unit", "name": c, "chunk_id": c}
                         for c in ("seine", "eiffel_tower", "gustave_eiffel", "python")]
                        + [{"node_id": "entity:paris", "node_type": "entity", "name": "Paris"},
                           {"node_id": "entity:eiffel_tower", "node_type": "entity", "name": "Eiffel Tower"},
                           {"node_id": "community:0", "node_type": "community", "name": "community 0"}])
    edges = edges_frame([{"source": "chunk:seine", "target": "entity:paris", "edge_type": "mentions"},
                         {"source": "chunk:eiffel_tower", "target": "entity:paris", "edge_type": "mentions"},
                         {"source": "chunk:eiffel_tower", "target": "entity:eiffel_tower", "edge_type": "mentions"},
                         {"source": "entity:eiffel_tower", "target": "chunk:gustave_eiffel", "edge_type": "mentions"},
                         {"source": "community:0", "target": "chunk:python", "edge_type": "member"},
                         {"source": "community:0", "target": "entity:paris", "edge_type": "member"}])
    return nodes, edges


def test_query_entities_are_named_spans_and_code_identifiers():
    found = query_entities("How does shortest_path in nx.algorithms relate to getValue and the Eiffel Tower?")
    assert {"shortest_path", "nx.algorithms", "getValue"} <= set(found)
    assert any("Eiffel Tower" in e for e in found)
    assert len(found) == len(set(found))
    assert query_entities("which river flows through the city") == []


def test_graph_proximity_is_one_over_hops_without_community_shortcuts():
    nodes, edges = _graph()
    near = GraphProximity(nodes, edges, max_hops=3)
    chunks = ["seine", "eiffel_tower", "gustave_eiffel", "python", "thames"]
    assert near.proximity(["Paris"], chunks).tolist() == [1.0, 1.0, pytest.approx(1 / 3), 0.0, 0.0]
    assert near.proximity(["Eiffel Tower"], chunks).tolist() == [pytest.approx(1 / 3), 1.0, 1.0, 0.0, 0.0]
    assert GraphProximity(nodes, edges, max_hops=2).proximity(["Paris"], chunks)[2] == 0.0   # 3 hops away
    assert near.proximity(["Tokyo"], chunks).tolist() == [0.0] * 5                         # no entry node


def test_candidate_features_follow_the_first_stage_and_describe_each_candidate():
    index = tiny_index()
    extractor = FeatureExtractor(index, _graph(), weight=0.5, depth=6)
    question = QUESTIONS["q2"][0]
    qv = index.embedder.encode_queries([question])[0]
    c = extractor.candidates(question, qv)
    assert list(c.features.columns) == list(FEATURES) and len(c.positions) == len(c.features) == 6
    f = c.features
    assert (np.diff(f["prior"].to_numpy()) <= 1e-12).all()              # best first by the fused prior
    assert f["prior_rank"].tolist() == pytest.approx(np.log1p(np.arange(6)).tolist())
    assert f["redundancy"].iloc[0] == 0.0 and (f["redundancy"].iloc[1:] > 0).all()
    assert (f[[f"kind_{k}" for k in KINDS]].sum(axis=1) == 1).all() and (f["kind_paragraph"] == 1).all()
    assert (f[list(BRIDGE_FEATURES)] == 0).all().all()                  # whole-corpus search: no bridges
    assert f["query_terms"].nunique() == 1 and f["query_terms"].iloc[0] > 0
    ids = [str(index.ids[p]) for p in c.positions]
    by_id = f.assign(doc=ids).set_index("doc")
    # the question names the Eiffel Tower: that title matches, and the paragraphs naming it cover the entity
    assert by_id.at["eiffel_tower", "title_match"] > 0.5 > by_id.drop(["eiffel_tower"])["title_match"].max()
    assert by_id.at["eiffel_tower", "entity_coverage"] > 0 and by_id.at["gustave_eiffel", "entity_coverage"] > 0
    assert by_id.at["eiffel_tower", "graph_proximity"] == by_id.at["gustave_eiffel", "graph_proximity"] == 1.0
    assert by_id["term_coverage"].between(0, 1).all() and by_id["term_coverage"].max() > 0
    assert extractor.settings() == {"weight": 0.5, "depth": 6, "prf_weight": 0.7, "prf_docs": 3, "sparse": "bm25",
                                    "within_stats": "corpus", "max_hops": 3, "question_likelihood": False}


def test_bridge_features_link_candidates_that_name_each_other():
    index = tiny_index()
    extractor = FeatureExtractor(index)
    question = QUESTIONS["q2"][0]
    within = ["eiffel_tower", "gustave_eiffel", "seine", "big_ben"]
    c = extractor.candidates(question, index.embedder.encode_queries([question])[0], within)
    f = c.features.assign(doc=[str(index.ids[p]) for p in c.positions]).set_index("doc")
    assert sorted(f.index) == sorted(within)
    tower = f.at["eiffel_tower", "title_match"]
    # the tower's paragraph names Gustave Eiffel (the second hop of a question naming the tower), and his
    # paragraph names the tower back
    assert f.at["gustave_eiffel", "bridge_from_named"] == pytest.approx(tower) and tower > 0
    assert f.at["gustave_eiffel", "mentions_named"] == pytest.approx(tower)
    assert f.at["seine", "bridge_from_named"] == f.at["big_ben", "bridge_from_named"] == 0.0
    # in-question statistics: the question names one title, which ranks first by title match
    assert (f["named_count"] == float((f["title_match"] >= 0.9).sum())).all() and f["named_count"].iloc[0] >= 1
    assert f.at["eiffel_tower", "title_match_rank"] == 0.0 < f.at["seine", "title_match_rank"]
    assert len(extractor.candidates(question, np.zeros(index.embeddings.shape[1]), ["not-a-chunk"]).positions) == 0


def _table(index, query_ids):
    extractor = FeatureExtractor(index, depth=12)
    queries = {q: QUESTIONS[q][0] for q in query_ids}
    return extractor, candidate_table(extractor, queries, index.embedder.encode_queries(list(queries.values())))


def test_targets_from_qrels_and_from_monte_carlo_labels():
    index = tiny_index()
    _, table = _table(index, ["q1", "q2"])
    assert len(table) == 24 and list(table.columns[:3]) == ["query_id", "chunk_id", "rank"]
    qrels = {"q1": {"seine": 1.0}}
    y = attach_target(table, "qrels", qrels).set_index(["query_id", "chunk_id"])["target"]
    assert y[("q1", "seine")] == 1.0 and y.loc["q1"].sum() == 1.0 and y.loc["q2"].isna().all()   # q2 unjudged
    labels = pd.DataFrame({"query_id": ["q1", "q1", "q1"], "chunk_id": ["seine", "seine", "danube"],
                           "estimator": ["naive", "adaptive", "adaptive"], "effect": [0.1, 2.5, -0.3]})
    dp = attach_target(table, "delta_p", mc_labels=labels).set_index(["query_id", "chunk_id"])["target"]
    assert dp[("q1", "seine")] == 2.5 and dp[("q1", "danube")] == -0.3          # the configured estimator's row
    assert dp.notna().sum() == 2
    with pytest.raises(ValueError, match="needs qrels"):
        attach_target(table, "qrels")
    with pytest.raises(ValueError, match="unknown target"):
        attach_target(table, "clicks", qrels)


def test_the_fitted_model_ranks_its_judged_paragraphs_first_and_round_trips(tmp_path):
    index = tiny_index()
    bench = tiny_benchmark()
    extractor, table = _table(index, list(QUESTIONS))
    model = fit_model(attach_target(table, "qrels", bench.qrels), "qrels", PARAMS, extractor.settings())
    assert model.metadata == {"train_queries": 8, "train_rows": 96, "positives": 8}
    scores = model.predict(table)
    relevant = np.array([bench.qrels[q].get(d, 0) > 0 for q, d in zip(table["query_id"], table["chunk_id"])])
    assert scores[relevant].min() > np.median(scores[~relevant])
    # saved and loaded: the same predictions and fingerprint; the factory builds the retriever from the file
    path = model.save(tmp_path / "models" / "learned.joblib")
    loaded = CausalRelevanceModel.load(path)
    assert np.allclose(loaded.predict(table), scores) and loaded.fingerprint() == model.fingerprint()
    retriever = build_retriever("learned", index, {"model_path": str(path)})
    assert isinstance(retriever, LearnedRetriever) and retriever.name == "learned"
    hits = retriever.retrieve_many([QUESTIONS[q][0] for q in QUESTIONS], 3)
    assert sum(h[0].chunk_id == doc for h, (_, doc) in zip(hits, QUESTIONS.values())) >= 7
    assert all([h.rank for h in hs] == [1, 2, 3] and hs[0].score >= hs[1].score >= hs[2].score for hs in hits)
    assert hits[0][0].title == PARAGRAPHS[hits[0][0].chunk_id][0]
    # rerank: only the given candidates; shortlist: the causal retriever's callable, same ranking
    reranked = retriever.rerank(QUESTIONS["q1"][0], ["thames", "seine", "python"])
    assert sorted(h.chunk_id for h in reranked) == ["python", "seine", "thames"] and reranked[0].chunk_id == "seine"
    assert [h.chunk_id for h in retriever.shortlist(QUESTIONS["q1"][0], 3)] == [h.chunk_id for h in hits[0]]
    assert len(build_retriever("learned", index, {"model": model, "depth": 2}).retrieve_many(["river"], 5)[0]) == 2
    with pytest.raises(ValueError, match="model_path"):
        build_retriever("learned", index, {})
    (tmp_path / "other.joblib").write_bytes(b"not a model")
    with pytest.raises(Exception):
        CausalRelevanceModel.load(tmp_path / "other.joblib")


def test_lambdamart_ranks_each_query_with_its_candidates_grouped_and_round_trips(tmp_path):
    """The listwise grid points (LightGBM's LambdaMART) fit the qrels target with each query's candidates as one
    group, whatever order the table's rows come in, and persist like the pointwise model; ΔP is fitted pointwise."""
    index = tiny_index()
    bench = tiny_benchmark()
    extractor, table = _table(index, list(QUESTIONS))
    ranker = {"objective": "lambdarank", "learning_rate": 0.1, "num_leaves": 4, "min_child_samples": 1,
              "n_estimators": 30, "reg_lambda": 1.0}
    assert ranker in [dict(p, min_child_samples=1, n_estimators=30) for p in grid_for("qrels") if is_ranker(p)]
    assert not any(is_ranker(p) for p in grid_for("delta_p")) and len(grid_for("qrels")) > len(grid_for("delta_p"))
    target = attach_target(table, "qrels", bench.qrels)
    shuffled = target.sample(frac=1.0, random_state=3)          # queries interleaved: the fit must group them
    model = fit_model(shuffled, "qrels", ranker, extractor.settings())
    scores = model.predict(table)
    relevant = np.array([bench.qrels[q].get(d, 0) > 0 for q, d in zip(table["query_id"], table["chunk_id"])])
    top = pd.Series(scores).groupby(table["query_id"].to_numpy()).idxmax()
    assert relevant[top.to_numpy()].sum() >= 7                 # its judged paragraph first for 7 of 8 questions
    loaded = CausalRelevanceModel.load(model.save(tmp_path / "ranker.joblib"))
    assert np.allclose(loaded.predict(table), scores)
    with pytest.raises(ValueError, match="LambdaMART fits graded relevance"):
        fit_model(attach_target(table, "delta_p", mc_labels=pd.DataFrame(
            {"query_id": ["q1", "q2"], "chunk_id": ["seine", "danube"], "effect": [1.0, 0.5]})), "delta_p", ranker, {})


def test_fitting_refuses_what_it_cannot_learn_from():
    index = tiny_index()
    _, table = _table(index, ["q1", "q2"])
    with pytest.raises(ValueError, match="too few labelled queries"):
        fit_model(attach_target(table, "qrels", {"q1": {"seine": 1.0}}), "qrels", PARAMS, {})
    with pytest.raises(ValueError, match="single class"):
        fit_model(attach_target(table, "qrels", {"q1": {}, "q2": {}}), "qrels", PARAMS, {})


def test_queries_that_share_a_relevant_document_stay_in_one_fold():
    """Otherwise a held-out query's gold document is a training positive, and the CV rewards remembering it."""
    ids = [f"q{i}" for i in range(12)]
    qrels = {"q0": {"d1": 1.0}, "q1": {"d1": 1.0, "d2": 1.0}, "q2": {"d2": 2.0},      # q0-q1-q2 through d1, d2
             "q3": {"d3": 1.0}, "q4": {"d3": 1.0}, "q5": {"d3": 0.0, "d9": 1.0},    # q5's d3 is not relevant
             **{q: {f"own{q}": 1.0} for q in ids[6:]}}
    folds = query_folds(ids, 3, seed=0, qrels=qrels)
    fold_of = {q: i for i, f in enumerate(folds) for q in f}
    assert sorted(fold_of) == sorted(ids) and len(folds) == 3
    assert fold_of["q0"] == fold_of["q1"] == fold_of["q2"] and fold_of["q3"] == fold_of["q4"]
    assert max(map(len, folds)) - min(map(len, folds)) <= 2             # balanced up to a unit's size
    units = _sharing_units(ids, qrels)                                   # q5 shares only a non-relevant d3
    assert ["q0", "q1", "q2"] in units and ["q3", "q4"] in units and ["q5"] in units and len(units) == 9
    # nothing shared: the plain folds, as without qrels
    own = {q: {f"own{q}": 1.0} for q in ids}
    assert query_folds(ids, 3, seed=0, qrels=own) == query_folds(ids, 3, seed=0)


def test_query_folds_partition_the_queries_and_cross_validation_scores_held_out_queries():
    ids = [f"q{i}" for i in range(10)] * 3
    folds = query_folds(ids, 4, seed=1)
    assert len(folds) == 4 and sorted(q for f in folds for q in f) == sorted(set(ids))
    assert folds == query_folds(ids, 4, seed=1) and folds != query_folds(ids, 4, seed=2)
    index = tiny_index()
    bench = tiny_benchmark()
    _, table = _table(index, list(QUESTIONS))
    judged = {q: bench.qrels[q] for q in ["q1", "q2", "q3", "q4", "q5", "q6"]}   # q7, q8: outside the evaluation
    value, oof, _ = cross_validate(attach_target(table, "qrels", bench.qrels), "qrels", PARAMS, judged,
                                   "ndcg@10", query_folds(list(judged), 3))
    assert 0 < value <= 1
    held = table["query_id"].isin(judged).to_numpy()
    assert np.isfinite(oof[held]).all() and np.isnan(oof[~held]).all()
