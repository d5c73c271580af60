"""The tuning search and the versioned configuration store, without Dagster."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.tuning.context import given_model
from causal_assets.core.tuning.points import coordinate_search, flat, nested, sample_queries
from causal_assets.core.tuning.search import TuningResult, tune
from causal_assets.core.tuning.selection import repeated_folds
from causal_assets.core.tuning.strategies.learned import labels_of
from causal_assets.core.registry.tuning import TuningSpec
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


def test_a_result_without_marks_selects_by_its_figures():
    old = {"hybrid": {"value": 0.80}, "rrf": {"value": 0.78}}               # a config from before: its value
    assert TuningResult(pd.DataFrame(), old).selected == "hybrid"


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
    labels = pd.DataFrame({"query_id": ["q1", "q2", "held_out_1", "held_out_2"], "chunk_id": list("abcd"),
                           "delta_p": [0.1, 0.2, 0.9, 0.9]})
    assert set(labels_of(bench, labels)["query_id"]) == {"q1", "q2"}
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
    assert given_model({"shortlist_params": {"model_path": "/store/models/learned-1.joblib"}})
    assert given_model({"shortlist_params": {"model": object()}})
    assert not given_model({"shortlist_params": {"model_path": "@learned"}})
    assert not given_model({"shortlist": "learned"})



@pytest.mark.slow
def test_repeated_cv_averages_every_fold_dependent_figure_over_the_splits(tmp_path):
    """cv_repeats draws the folds with seeds seed, seed + 1, ...: the learned model's cv value of each point and
    every retriever's nested figure are the means of what each split alone gives (20 HotpotQA questions, where the
    splits disagree); the first split is the single-split tuning's. Fusion searches a 2 x 2 grid: what is averaged is
    the same whatever its points."""
    from causal_assets.core.registry.benchmark_loading import _gold_by_question
    from causal_assets.core.corpus.chunk import chunks_to_frame
    from causal_assets.core.corpus.hotpotqa import load_hotpotqa
    from causal_assets.core.index.build import build_index
    from tests.conftest import HOTPOT, require

    path = tmp_path / "hp20.jsonl"
    path.write_text("\n".join(require(HOTPOT).read_text(encoding="utf-8").splitlines()[:20]) + "\n")
    chunks, questions = load_hotpotqa(path, "hp20")
    index = build_index(chunks_to_frame(chunks), "hp20", cache=None)
    qrels, within = _gold_by_question([q.query_id for q in questions], chunks)
    bench = Benchmark("hp20", "train", {q.query_id: q.question for q in questions}, qrels, within)
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
