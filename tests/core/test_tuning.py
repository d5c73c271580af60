"""The tuning search and the versioned configuration store, without Dagster."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from causal_assets.core.benchmarks import Benchmark
from causal_assets.core.tuning.search import (FoldChoices, TuningResult, _given_model, compare_nested,
                                             coordinate_search, flat,
                                             fold_groups, labels_of, nested, nested_scores, repeated_folds,
                                             sample_queries, tune)
from causal_assets.core.tuning.spec import TUNABLE, TuningSpec
from causal_assets.core.stored import tuned as store
from causal_assets.core.index.dense import Embedder
from causal_assets.core.stored.tuned import (benchmark_digest, code_version, content_hash, frame_digest, index_digest,
                                             inputs_version, intact_tuned, load_tuned, save_tuned)
from tests.core.tiny_corpus import tiny_index


def test_coordinate_search_climbs_and_scores_each_point_once():
    space = {"a": [0, 1, 2, 3], "b": [0, 1, 2]}
    calls = []

    def score(p):
        calls.append(dict(p))
        return -(p["a"] - 2) ** 2 - (p["b"] - 1) ** 2   # maximum at a=2, b=1

    points = coordinate_search(space, {"a": 0, "b": 0}, score, passes=3)
    best = max(points, key=lambda pv: pv[1])[0]
    assert best == {"a": 2, "b": 1}
    keys = [tuple(sorted(p.items())) for p, _ in points]
    assert len(keys) == len(set(keys)) == len(calls)          # no point scored twice
    assert points[0][0] == {"a": 0, "b": 0}                   # the start (the defaults) is trial 0


def test_coordinate_search_keeps_the_start_on_ties():
    points = coordinate_search({"x": [1, 2, 3]}, {"x": 2}, lambda p: 0.5, passes=2)
    assert max(points, key=lambda pv: pv[1])[0] == {"x": 2} and len(points) == 3


def test_the_nested_figure_does_not_reward_a_lucky_choice():
    """Point 1 beats the steady point 0 on the whole train set by two queries it happens to get right; chosen on
    the other folds, each held-out query is scored by whichever point did best without it."""
    steady = {"a": 0.6, "b": 0.6, "c": 0.6, "d": 0.6}
    lucky = {"a": 1.0, "b": 1.0, "c": 0.2, "d": 0.3}
    folds = [["a"], ["b"], ["c"], ["d"]]
    assert sum(lucky.values()) / 4 > sum(steady.values()) / 4            # the best train figure: lucky, 0.625
    # a, b held out: steady wins on the rest (0.6 vs 0.5); c, d held out: lucky wins (0.767, 0.733) and scores low
    assert nested_scores([steady, lucky], folds) == pytest.approx({"a": 0.6, "b": 0.6, "c": 0.2, "d": 0.3})
    assert nested_scores([lucky], folds) == pytest.approx(lucky)          # nothing chosen: the figure itself
    assert nested_scores([steady, lucky], [["a", "x"], ["c"]]) == pytest.approx({"a": 0.6, "c": 0.2})


def test_selection_compares_nested_figures_on_the_queries_both_were_scored_on():
    """pairwise beats learned on all four queries; causal, scored on a sample of two, beats pairwise there but not
    learned: the best on every query is kept. Only a sampled retriever that beats every fully scored one on its
    sample is selected over them."""
    best = {"pairwise": {"value": 0.927, "trials": 11}, "learned": {"value": 0.913, "trials": 3},
            "causal": {"value": 0.921, "trials": 18}}
    nested_scores_of = {"pairwise": {"a": 0.9, "b": 0.9, "c": 0.9, "d": 0.9},
                        "learned": {"a": 1.0, "b": 1.0, "c": 0.8, "d": 0.7},
                        "causal": {"a": 0.95, "b": 0.95}}                   # scored on a sample of two
    compare_nested(best, nested_scores_of)
    assert {n: b["selection_value"] for n, b in best.items()} == pytest.approx(
        {"pairwise": 0.9, "learned": 0.875, "causal": 0.95})
    assert best["causal"]["selection_evaluation"].endswith("on 2 train queries (a sample)")
    assert best["learned"]["selection_evaluation"].endswith("on 4 train queries")
    assert TuningResult(pd.DataFrame(), best).selected == "pairwise"
    # a sample on which causal beats both: causal
    compare_nested(best, {**nested_scores_of, "causal": {"a": 1.0, "b": 1.0, "c": 1.0}})
    assert TuningResult(pd.DataFrame(), best).selected == "causal" and not best["pairwise"].get("selected")
    old = {"hybrid": {"value": 0.80}, "rrf": {"value": 0.78}}               # a config from before: its value
    assert TuningResult(pd.DataFrame(), old).selected == "hybrid"


def test_a_combination_is_selected_only_beyond_the_noise_of_what_it_is_built_on():
    """pairwise (over fusion, over learned + hybrid) wins the nested figure by a few lucky queries: within one
    standard error of the paired difference to learned, so learned is selected; a combination that gains on every
    query over every ingredient is selectable."""
    learned = {q: 0.8 for q in "abcdefgh"}
    hybrid = {q: 0.6 for q in "abcdefgh"}
    fusion = {**learned, "a": 0.9}                                    # +0.0125: one query of eight
    pairwise = {**fusion, "b": 1.0, "c": 0.7}                         # +0.025 over fusion, +0.0375 over learned
    best = {"learned": {"value": 0.8, "trials": 3, "params": {"model_path": "@learned"}},
            "hybrid": {"value": 0.6, "trials": 9, "params": {"weight": 0.5}},
            "fusion": {"value": 0.81, "trials": 5, "params": {"members": {"learned": {}, "hybrid": {}}}},
            "pairwise": {"value": 0.84, "trials": 7, "params": {"base": {"fusion": {}}}}}
    compare_nested(best, {"learned": learned, "hybrid": hybrid, "fusion": fusion, "pairwise": pairwise})
    assert best["pairwise"]["selection_value"] > best["learned"]["selection_value"]
    assert not best["pairwise"]["selectable"] and not best["fusion"]["selectable"]
    assert "not beyond the noise of" in best["pairwise"]["selection_margin"]
    assert "over fusion" in best["pairwise"]["selection_margin"] and "over learned" in best["pairwise"]["selection_margin"]
    assert best["learned"]["selectable"] and "selection_margin" not in best["learned"]
    assert TuningResult(pd.DataFrame(), best).selected == "learned"
    # a steady gain on every query is beyond the noise: the combination is selected
    steady = {q: v + 0.05 + 0.01 * (i % 2) for i, (q, v) in enumerate(learned.items())}
    best["pairwise"]["params"] = {"base": {"learned": {}}}
    compare_nested(best, {"learned": learned, "hybrid": hybrid, "fusion": fusion, "pairwise": steady})
    assert best["pairwise"]["selectable"] and TuningResult(pd.DataFrame(), best).selected == "pairwise"


def test_a_winner_within_the_noise_of_the_robust_default_gives_way_to_it():
    """A small question file (23 MuSiQue train questions) selected entity_first by 0.006 nested MAP@10, and it lost
    to learned by 0.08 on unseen questions. The winner must beat the robust default beyond one standard error of
    their paired difference; the note says how far the selection can be trusted."""
    default = {q: 0.70 + 0.1 * (i % 3) for i, q in enumerate("abcdefghij")}
    lucky = {**default, "a": default["a"] + 0.06}                     # +0.006: one query of ten
    best = {"learned": {"value": 0.8, "trials": 3, "params": {}}, "entity_first": {"value": 0.81, "trials": 9,
                                                                                 "params": {}}}
    note = compare_nested(best, {"learned": default, "entity_first": lucky}, robust_default="learned")
    assert TuningResult(pd.DataFrame(), best).selected == "learned" and not best["entity_first"].get("selected")
    assert note.startswith("`learned` selected, the robust default: the best nested train figure, `entity_first`'s, "
                           "is +0.0060 over it on 10 train queries (1 SE 0.0060), within the noise"), note
    # beyond the noise (a gain on every query): the winner stands, and the note says by how much
    steady = {q: v + 0.05 for q, v in default.items()}
    note = compare_nested(best, {"learned": default, "entity_first": steady}, robust_default="learned")
    assert TuningResult(pd.DataFrame(), best).selected == "entity_first"
    assert note.startswith("`entity_first` selected: +0.0500 over the robust default `learned` on 10 train queries")
    assert note.endswith("beyond the noise")
    # the default wins: the note says how far ahead of the next best it is
    note = compare_nested(best, {"learned": steady, "entity_first": default}, robust_default="learned")
    assert TuningResult(pd.DataFrame(), best).selected == "learned"
    assert "the robust default, +0.0500 over the next best `entity_first`" in note
    # one train query: nothing can be told apart, the default is selected
    note = compare_nested(best, {"learned": {"a": 0.1}, "entity_first": {"a": 0.9}}, robust_default="learned")
    assert TuningResult(pd.DataFrame(), best).selected == "learned" and "(1 SE inf), within the noise" in note
    # a registry can turn it off, or name another default
    assert compare_nested(best, {"learned": default, "entity_first": lucky}) == ""
    assert TuningResult(pd.DataFrame(), best).selected == "entity_first"
    assert TuningSpec().robust_default in TUNABLE
    with pytest.raises(ValueError, match="robust_default 'bm99' is not a tunable retriever"):
        TuningSpec(robust_default="bm99")


def test_the_causal_retriever_must_beat_the_shortlist_it_reranks_beyond_the_noise():
    """The causal retriever re-ranks a tuned retriever's shortlist with LLM measures per candidate: like a
    combination it is taken only where it beats that retriever by more than one standard error."""
    learned = {q: 0.8 for q in "abcdef"}
    best = {"learned": {"value": 0.8, "trials": 6, "params": {"model_path": "@learned"}},
            "causal": {"value": 0.85, "trials": 46, "params": {"shortlist": "learned", "answer_model": "likelihood"}}}
    compare_nested(best, {"learned": learned, "causal": {**learned, "a": 1.0}})     # one query of six
    assert not best["causal"]["selectable"] and "over learned" in best["causal"]["selection_margin"]
    assert TuningResult(pd.DataFrame(), best).selected == "learned"
    best["causal"]["params"]["shortlist"] = "bm25"                                  # not a tuned retriever
    compare_nested(best, {"learned": learned, "causal": {**learned, "a": 1.0}})
    assert best["causal"]["selectable"] and TuningResult(pd.DataFrame(), best).selected == "causal"


def test_a_combination_does_not_inherit_the_train_optimism_of_its_ingredients():
    """pairwise at its zero weights is its base (fusion) itself. Fusion's best train point is lucky (two queries), so
    fusion's nested figure is below its train figure; pairwise, whose base is that point chosen on every train query,
    must score what fusion scores nested, not fusion's train figure (the HotpotQA case: 0.9290 vs 0.9218)."""
    steady = {"a": 0.6, "b": 0.6, "c": 0.6, "d": 0.6}
    lucky = {"a": 1.0, "b": 1.0, "c": 0.2, "d": 0.3}
    folds = [["a"], ["b"], ["c"], ["d"]]
    fusion_points = [{"c": 60, "members": {"learned": {}}}, {"c": 1, "members": {"learned": {}}}]
    choices = FoldChoices(folds)
    choices.add("fusion", fusion_points, [steady, lucky])
    assert choices.chosen_without("fusion", 0) == fusion_points[0]          # without a: steady (0.6 vs 0.5)
    assert choices.chosen_without("fusion", 2) == fusion_points[1]          # without c: lucky (0.767 vs 0.6)
    runs = []

    def run(params):                                                        # pairwise at 0/0 = its base's ranking
        runs.append(params)
        return steady if params["base"]["fusion"]["c"] == 60 else lucky

    chosen = fusion_points[1]                                              # the best train figure: lucky, 0.625
    choices.add("pairwise", [{"coverage_weight": 0.0, "base": {"fusion": chosen}}], [lucky])
    figure = choices.nested("pairwise", run)
    assert figure == pytest.approx(nested_scores([steady, lucky], folds))  # = fusion's own nested figure
    assert sum(figure.values()) / 4 < sum(lucky.values()) / 4
    assert len(runs) == 2                            # folds a, b moved the base and re-ran; c, d kept the run
    assert choices.at_fold({"members": {"learned": {"m": 1}, "fusion": chosen}}, 0) == \
        {"members": {"learned": {"m": 1}, "fusion": fusion_points[0]}}     # a retriever not searched is kept


def test_cv_groups_chooses_what_a_fold_keeps_together():
    bench = Benchmark("b", "train", {"q1": "a", "q2": "b"}, {"q1": {"d": 1.0}, "q2": {"d": 1.0}})
    assert fold_groups(TuningSpec(), bench) is bench.qrels                      # default: shared documents
    assert fold_groups(TuningSpec(cv_groups="queries"), bench) is None
    with pytest.raises(ValueError, match="cv_groups"):
        TuningSpec(cv_groups="documents")


def test_tuning_records_the_nested_figure_of_every_retriever():
    from tests.core.tiny_corpus import tiny_benchmark, tiny_index

    result = tune(tiny_index(), tiny_benchmark(), TuningSpec(retrievers=["hybrid", "rrf"], metric="mrr@10"), {})
    for name in ("hybrid", "rrf"):
        b = result.best[name]
        assert b["selection_evaluation"] == f"nested cv over {b['trials']} points, on 8 train queries"
        assert 0 <= b["selection_value"] <= 1   # not bounded by `value`: each fold may take another point


def test_nested_and_flat_are_inverse_up_to_the_space():
    space = {"graph.max_hops": [0, 1], "weights": [{"a": 1}]}
    params = {"graph": {"max_hops": 1, "min_edge_weight": 0.3}, "weights": {"a": 1.0}, "k": 2}
    f = flat(params, space)
    assert f == {"graph.max_hops": 1, "graph.min_edge_weight": 0.3, "weights": {"a": 1.0}, "k": 2}
    assert nested(f) == params


def test_spec_resolves_retrievers():
    spec = TuningSpec()
    listed = ["bm25", "dense", "hybrid", "cascade", "entity_first"]
    assert spec.resolved_retrievers(listed, has_within=True) == ["hybrid", "cascade", "entity_first", "learned"]
    assert "entity_first" not in spec.resolved_retrievers(listed, has_within=False)
    with pytest.raises(ValueError, match="cannot tune"):
        TuningSpec(retrievers=["bm25"]).resolved_retrievers(listed, True)


def _bench(split="train"):
    qs = {f"q{i}": f"question {i}" for i in range(10)}
    return Benchmark("b", split, qs, {q: {"d": 1.0} for q in qs})


def test_tune_refuses_an_eval_split():
    with pytest.raises(ValueError, match="refusing to tune"):
        tune(None, _bench("test"), TuningSpec(), {}, forbidden=("test",))


def test_mc_labels_of_other_splits_never_reach_the_tuner():
    bench = _bench()
    labels = pd.DataFrame({"question_id": ["q1", "q2", "held_out_1", "held_out_2"], "doc_id": list("abcd"),
                           "delta_p": [0.1, 0.2, 0.9, 0.9]})
    assert set(labels_of(bench, labels)["question_id"]) == {"q1", "q2"}
    assert labels_of(bench, None) is None


def test_sample_queries_is_seeded_and_a_subset():
    bench = _bench()
    a, b = sample_queries(bench, 4, seed=1), sample_queries(bench, 4, seed=1)
    assert a.query_ids() == b.query_ids() and len(a.query_ids()) == 4
    assert set(a.query_ids()) <= set(bench.query_ids())
    assert sample_queries(bench, None) is bench


def test_store_versions_by_content(tmp_path):
    from sklearn.dummy import DummyClassifier

    def content(weight):
        return {"benchmark": "b", "tune_split": "train", "metric": "ndcg@10", "selected": "learned",
                "retrievers": {"hybrid": {"params": {"weight": weight}, "value": 0.7},
                               "learned": {"params": {"depth": 100, "model_path": "@learned"}, "value": 0.8},
                               "causal": {"params": {"shortlist": "learned",
                                                     "shortlist_params": {"model_path": "@learned"}},
                                          "value": 0.6}}}

    model = DummyClassifier().fit([[0], [1]], [0, 1])
    first = save_tuned(tmp_path, "b", content(0.7), {"learned": model})
    assert first.version == content_hash(first.content)
    assert save_tuned(tmp_path, "b", content(0.7), {"learned": model}).version == first.version  # same content
    second = save_tuned(tmp_path, "b", content(0.6), {"learned": model})
    assert second.version != first.version and (tmp_path / "b" / f"{first.version}.yaml").exists()
    assert not (tmp_path / "b" / "current.yaml").exists()   # no pointer: the asset's materialization names the version
    current = load_tuned(tmp_path, "b", second.version)
    assert current.version == second.version and current.params("hybrid") == {"weight": 0.6}
    learned = current.params("learned")["model_path"]
    assert learned.startswith(str(tmp_path)) and learned.endswith(".joblib")
    assert current.params("causal")["shortlist_params"]["model_path"] == learned
    assert load_tuned(tmp_path, "b", first.version).params("hybrid") == {"weight": 0.7}
    with pytest.raises(FileNotFoundError, match="never_tuned"):
        load_tuned(tmp_path, "never_tuned", first.version)
    # a file edited by hand is refused, and the same content saved again writes it again
    path = tmp_path / "b" / f"{first.version}.yaml"
    path.write_text(path.read_text().replace("weight: 0.7", "weight: 0.9"))
    with pytest.raises(ValueError, match="does not match its version"):
        load_tuned(tmp_path, "b", first.version)
    assert save_tuned(tmp_path, "b", content(0.7), {"learned": model}).version == first.version
    assert load_tuned(tmp_path, "b", first.version).params("hybrid") == {"weight": 0.7}


def test_models_present_names_a_missing_model_file(tmp_path):
    from sklearn.dummy import DummyClassifier

    content = {"benchmark": "b", "selected": "learned",
               "retrievers": {"learned": {"params": {"depth": 100}, "value": 0.8},
                              "causal": {"params": {"shortlist_params": {"model_path": "@learned"}}, "value": 0.6}}}
    stored = save_tuned(tmp_path, "b", content, {"learned": DummyClassifier().fit([[0], [1]], [0, 1])})
    assert stored.models_present() and intact_tuned(tmp_path, "b", stored.version).content == stored.content
    Path(stored.params("learned")["model_path"]).unlink()
    assert not load_tuned(tmp_path, "b", stored.version).models_present()
    assert intact_tuned(tmp_path, "b", stored.version) is None and intact_tuned(tmp_path, "b", "0" * 12) is None


def test_the_inputs_version_moves_with_every_input_and_nothing_else():
    """tuned_retriever_configs keeps the last tuning of the same inputs: each digest must see a change of content
    and be the same in every process (no Python hash, no object identity)."""
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"], "c": [{"k": 1}, None]})
    assert frame_digest(frame) == frame_digest(frame.copy()) and frame_digest(None) == ""
    assert len({frame_digest(frame), frame_digest(frame.assign(b=["x", "z"])), frame_digest(frame[::-1]),
                frame_digest(frame.rename(columns={"a": "d"}))}) == 4
    bench = Benchmark("b", "train", {"q": "a question"}, {"q": {"d": 1}})
    assert benchmark_digest(bench) == benchmark_digest(Benchmark("b", "train", {"q": "a question"}, {"q": {"d": 1}}))
    assert len({benchmark_digest(bench), benchmark_digest(Benchmark("b", "train", {"q": "a question"}, {"q": {"e": 1}})),
                benchmark_digest(Benchmark("b", "train", {"q": "a question"}, {"q": {"d": 1}}, {"q": ["d", "e"]})),
                benchmark_digest(Benchmark("b", "train", {"q": "a question"}, {"q": {"d": 1}}, answers={"q": "x"}))}) == 4
    parts = {"index": {"content": "1"}, "llm": None}
    assert inputs_version(parts) == inputs_version(dict(reversed(parts.items())))
    assert inputs_version(parts) != inputs_version({**parts, "llm": {"model": "other"}})
    assert len(code_version()) == 12


def test_the_index_digest_sees_the_chunks_content_and_the_query_backend():
    index = tiny_index()
    digest = index_digest(index)
    assert index_digest(tiny_index()) == digest
    hashes = index.chunks["content_hash"].where(index.chunks.index != 0, "edited")
    assert index_digest(replace(index, chunks=index.chunks.assign(content_hash=hashes)))["content"] != digest["content"]
    other = "onnx" if index.embedder.backend == "torch" else "torch"
    assert index_digest(replace(index, embedder=Embedder(index.embedder.model_name, backend=other))) != digest


def test_the_code_version_reads_the_core_package(tmp_path, monkeypatch):
    (tmp_path / "core" / "index").mkdir(parents=True)
    (tmp_path / "core" / "index" / "search.py").write_text("A = 1\n")
    monkeypatch.setattr(store, "CORE", tmp_path / "core")
    before = code_version()
    (tmp_path / "core" / "index" / "search.py").write_text("A = 2\n")
    assert code_version() != before
    (tmp_path / "core" / "index" / "search.py").write_text("A = 1\n")
    assert code_version() == before


def test_a_learned_shortlist_model_given_by_the_caller_is_used_not_replaced():
    """The causal retriever tuned alone (e.g. the gate's likelihood row) keeps the stored model it was handed; only
    the placeholder `@learned` (or nothing) waits for a model the same tuning run trains."""
    assert _given_model({"shortlist_params": {"model_path": "/store/models/learned-1.joblib"}})
    assert _given_model({"shortlist_params": {"model": object()}})
    assert not _given_model({"shortlist_params": {"model_path": "@learned"}})
    assert not _given_model({"shortlist": "learned"})



def test_repeated_cv_averages_every_fold_dependent_figure_over_the_splits(tmp_path):
    """cv_repeats draws the folds with seeds seed, seed + 1, ...: the learned model's cv value of each point and
    every retriever's nested figure are the means of what each split alone gives (20 HotpotQA questions, where the
    splits disagree); the first split is the single-split tuning's. Fusion searches a 2 x 2 grid: what is averaged is
    the same whatever its points."""
    from causal_assets.core.benchmarks import _gold_by_question
    from causal_assets.core.corpus.chunk import chunks_to_frame
    from causal_assets.core.corpus.hotpotqa import load_hotpotqa
    from causal_assets.core.index.build import build_index
    from tests.conftest import HOTPOT, require

    path = tmp_path / "hp20.jsonl"
    path.write_text("\n".join(require(HOTPOT).read_text(encoding="utf-8").splitlines()[:20]) + "\n")
    chunks, questions = load_hotpotqa(path, "hp20")
    index = build_index(chunks_to_frame(chunks), "hp20", cache=None)
    qrels, within = _gold_by_question([q.question_id for q in questions], chunks)
    bench = Benchmark("hp20", "train", {q.question_id: q.question for q in questions}, qrels, within)
    spec = TuningSpec(retrievers=["hybrid", "learned", "fusion"], fusion_members=["learned", "hybrid"],
                      metric="map@10", cv_folds=3, spaces={"fusion": {"c": [1, 60], "weights.learned": [1.0, 2.0]}})
    alone = [tune(index, bench, spec.model_copy(update={"seed": s}), {}) for s in (0, 1)]
    repeated = tune(index, bench, spec.model_copy(update={"cv_repeats": 2}), {})
    splits = repeated_folds(spec.model_copy(update={"cv_repeats": 2}), bench)
    assert splits[0] == repeated_folds(spec, bench)[0] and splits[0] != splits[1]
    learned = [r.trials[r.trials["retriever"] == "learned"]["value"].to_numpy() for r in alone]
    assert not learned[0] == pytest.approx(learned[1])        # the two splits disagree here
    assert repeated.trials[repeated.trials["retriever"] == "learned"]["value"].to_numpy() == \
        pytest.approx((learned[0] + learned[1]) / 2)
    for name in ("hybrid", "learned"):
        figures = [r.best[name]["selection_value"] for r in alone]
        assert figures[0] != pytest.approx(figures[1])
        assert repeated.best[name]["selection_value"] == pytest.approx(sum(figures) / 2)
    assert repeated.best["fusion"]["selection_evaluation"].endswith(", the mean over 2 fold splits")
    assert "fold splits" not in alone[0].best["fusion"]["selection_evaluation"]
    assert repeated.trials[repeated.trials["retriever"] == "learned"]["evaluation"].eq("cv3 x 2 fold splits").all()
