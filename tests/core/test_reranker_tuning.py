"""core/tuning/reranker and retrievers/cross_encoder: a cross-encoder fitted on a tune split's judged pairs from the
packaged MiniLM's weights, its held-out decision, and the reranking it does (the real model, fitted for a few steps
on the tiny corpus)."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from causal_assets.core.measures.metrics import named_metric_per_query
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.evaluation.suite import plan_evaluation
from causal_assets.core.index.dense import Embedder, model_dir
from causal_assets.core.retrievers.cross_encoder import (CrossEncoder, CrossEncoderEnsemble, CrossEncoderReranker,
                                                        load_cross_encoder, member_dirs)
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.retrievers.similarity import HybridRetriever, zscore
from causal_assets.core.tuning import reranker
from causal_assets.core.tuning.encoder import held_out_split, tune_encoder
from causal_assets.core.tuning.reranker import TUNE_SPLIT, reranker_versions, training_groups, tune_reranker
from causal_assets.core.registry.tuning import EncoderSpec, RerankerSpec, TuningSpec
from causal_assets.core.stored.tuned import TunedConfig, index_fingerprint, save_tuned
from tests.core.tiny_corpus import QUESTIONS, tiny_benchmark, tiny_index

pytestmark = pytest.mark.usefixtures("torch_on_free_cores")


@pytest.fixture(scope="module")
def untrained():
    """The packaged MiniLM under a fresh one-logit head: a real cross-encoder, if not yet a useful one. The head is
    drawn from a fixed seed: its logits are a few hundredths apart, and an unseeded draw once put two documents'
    within 0.00001 of each other."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return CrossEncoder(model_dir(), max_length=64)


def test_training_groups_hold_the_judged_document_and_the_hybrids_unjudged_hits():
    index, bench = tiny_index(), tiny_benchmark()
    groups = training_groups(index, bench, ["q1", "q2"], 0.5, pool=5)
    assert [(q, d) for q, d, _ in groups] == [(QUESTIONS["q1"][0], "seine"), (QUESTIONS["q2"][0], "gustave_eiffel")]
    for (_, gold, negatives), q in zip(groups, ["q1", "q2"]):
        hybrid = run_benchmark(HybridRetriever(index, 0.5), tiny_benchmark([q]), 5).run[q]
        assert set(negatives) == set(hybrid) - {gold} and gold not in negatives and len(negatives) == 4
    # inside each question's candidates: the negatives are candidates
    within = {q: ["seine", "danube", "thames"] for q in QUESTIONS}
    [(_, gold, negatives)] = training_groups(index, tiny_benchmark(["q1"], within=within), ["q1"], 0.5, pool=5)
    assert gold == "seine" and set(negatives) == {"danube", "thames"}


def test_the_reranker_reorders_the_bases_top_depth_by_the_mixed_z_scores(untrained):
    index, bench = tiny_index(), tiny_benchmark()
    base = HybridRetriever(index, 0.5)
    queries = [bench.queries[q] for q in bench.query_ids()]
    plain = base.retrieve_many(queries, 10)
    assert [[h.chunk_id for h in hits] for hits in CrossEncoderReranker(index, base, untrained, 0.0, 4)
            .retrieve_many(queries, 10)] == [[h.chunk_id for h in hits] for hits in plain]
    for query, hits, reranked in zip(queries, plain, CrossEncoderReranker(index, base, untrained, 1.0, 4)
                                     .retrieve_many(queries, 10)):
        head = [h.chunk_id for h in hits[:4]]
        logits = untrained.score(query, index, head)
        mixed = zscore(np.array([h.score for h in hits[:4]])) + zscore(logits)
        assert [h.chunk_id for h in reranked[:4]] == [head[i] for i in np.argsort(-mixed, kind="stable")]
        assert [h.chunk_id for h in reranked[4:]] == [h.chunk_id for h in hits[4:10]]   # the tail keeps its order
        assert [h.rank for h in reranked] == list(range(1, 11))
        assert all(a.score > b.score for a, b in zip(reranked, reranked[1:]))
    # the scores are the model's own: the same pair scores the same from the cache as from a fresh model
    fresh = CrossEncoder(model_dir(), max_length=64)
    fresh.model.load_state_dict(untrained.model.state_dict())
    assert np.allclose(fresh.score(queries[0], index, ["seine", "thames"]),
                       untrained.score(queries[0], index, ["seine", "thames"]), atol=1e-5)


def test_the_factory_builds_the_cross_encoder_over_a_named_base(untrained, tmp_path):
    index = tiny_index()
    untrained.model.save_pretrained(tmp_path)
    untrained.tokenizer.save_pretrained(tmp_path)
    built = build_retriever("cross_encoder", index, {"base": {"hybrid": {"weight": 0.8}}, "model_path": str(tmp_path),
                                                    "weight": 0.5, "depth": 5, "max_length": 64})
    assert isinstance(built, CrossEncoderReranker) and built.base.weight == 0.8 and built.depth == 5
    assert len(built.retrieve_many(["Which river flows through Paris?"], 3)[0]) == 3
    with pytest.raises(ValueError, match="needs model_path"):
        build_retriever("cross_encoder", index, {"base": {"hybrid": {}}})
    with pytest.raises(ValueError, match="needs base"):
        build_retriever("cross_encoder", index, {"model_path": str(tmp_path)})
    with pytest.raises(ValueError, match="depth must be >= 2"):
        CrossEncoderReranker(index, built.base, untrained, 0.5, 1)


def test_a_query_longer_than_max_length_is_cut_to_fit_beside_each_document(untrained):
    """A 3,000-character query is far over the pair's 64 tokens: the pair is cut from the longer text, so every
    document still scores with its own share of the tokens (cutting only the document could not fit the pair)."""
    index = tiny_index()
    query = ("Which river flows through Paris, and which of its bridges did Gustave Eiffel build? " * 40)[:3000]
    ids = ["seine", "thames", "danube", "gustave_eiffel"]
    logits = untrained.score(query, index, ids)
    assert len(query) == 3000 and logits.shape == (4,) and np.isfinite(logits).all()
    assert len(set(logits.tolist())) == 4        # each document read: four different inputs, four different scores
    batch = untrained.tokenizer([query], [index.text("seine")], truncation="longest_first",
                                max_length=untrained.max_length)
    assert len(batch["input_ids"][0]) == untrained.max_length
    # the reranker and the fit's loss go through the same pairs
    hits = CrossEncoderReranker(index, HybridRetriever(index, 0.5), untrained, 1.0, 4).retrieve_many([query], 5)[0]
    assert len(hits) == 5
    assert torch.isfinite(untrained.logits([query, "Which river flows through Paris?"],
                                           [index.text("seine"), index.text("seine")])).all()


@pytest.mark.slow
def test_the_fits_run_torch_on_the_cores_other_processes_leave_free(tmp_path):
    """`threads: 0` (the default): torch's intra-op threads are the cores other processes leave free when the fit
    starts, whatever torch's own setting (its default, every core, made a fit 10-16 times slower beside other work).
    Here every core but one spins in another process: the fit runs on one thread, and torch's setting comes back."""
    cores = os.cpu_count() or 1
    spin = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"
    loops = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
             for _ in range(max(1, cores - 1))]
    seen: list[tuple[str, int]] = []
    before = torch.get_num_threads()
    try:
        assert all(p.stdout.readline().strip() == "spinning" for p in loops)
        torch.set_num_threads(cores)
        spec = RerankerSpec(held_out=0.25, epochs=1, batch_size=6, negatives=2, pool=6, max_length=32, depth=6,
                            mix=[1.0])
        tune_reranker(tiny_index(), tiny_benchmark(), spec, "ndcg@10", tmp_path / "fit", seed=0,
                      log=lambda m: seen.append((m, torch.get_num_threads())))
        after = torch.get_num_threads()
        tune_encoder(tiny_index(), tiny_benchmark(), EncoderSpec(held_out=0.25, batch_size=6, epochs=1),
                     "ndcg@10", tmp_path / "encoder", seed=0, log=lambda m: seen.append((m, torch.get_num_threads())))
    finally:
        for p in loops:
            p.kill()
            p.wait()
        torch.set_num_threads(before)
    fitted = [(m.split(":")[0], n) for m, n in seen if "fitted on" in m]
    assert fitted == [("reranker", 1), ("encoder", 1)], seen
    assert "reranker: fitting and scoring on 1 torch thread(s)" in [m for m, _ in seen]
    assert any(m.startswith("encoder: fitted on") and "on 1 torch thread(s)" in m for m, _ in seen)
    assert after == cores


@pytest.mark.slow
def test_tune_reranker_fits_its_members_on_the_rest_and_decides_on_the_held_out_queries(tmp_path):
    index, bench = tiny_index(), tiny_benchmark()
    # lr 5e-4: six steps at the default 5e-5 leave the loss at chance (~ln 3), where whether it falls by the last
    # epoch is rounding noise that differs between CPUs (member-1: 1.0938 -> 1.0966); at 5e-4 both fall by ~0.15
    # one torch thread: a fit repeated bit for bit needs the same thread count (the default follows the free cores,
    # which change between the fits under a loaded machine, and torch's sums with them)
    spec = RerankerSpec(held_out=0.25, epochs=2, batch_size=2, negatives=2, pool=6, max_length=64, depth=6,
                        mix=[0.5, 1.0], members=2, lr=5e-4, threads=1)
    result = tune_reranker(index, bench, spec, "ndcg@10", tmp_path / "fit", seed=0)
    fit, held = held_out_split(list(bench.queries), 0.25, 0)
    assert (result.fit_queries, result.held_out_queries, result.groups) == (len(fit), len(held), len(fit)) == (6, 2, 6)
    assert set(result.by_mix) == {0.0, 0.5, 1.0} and result.weight in (0.5, 1.0)
    assert result.base_weight in (0.5, 0.65, 0.8) and result.by_mix[0.0] == result.base[result.base_weight]
    # the gain is the chosen weight's paired difference over the hybrid alone, adopted beyond one standard error
    assert result.gain == pytest.approx(result.by_mix[result.weight] - result.by_mix[0.0], abs=1e-3)
    assert result.adopted == (result.gain > result.gain_se)
    # two members saved, each fitted from its own seed; the directory loads as their ensemble, scoring the mean logit
    assert [d.name for d in member_dirs(tmp_path / "fit")] == ["member-0", "member-1"]
    ensemble = load_cross_encoder(tmp_path / "fit", 64)
    assert isinstance(ensemble, CrossEncoderEnsemble) and len(ensemble.members) == 2
    query, ids = bench.queries[held[0]], ["seine", "thames", "danube"]
    first, second = (m.score(query, index, ids) for m in ensemble.members)
    assert not np.allclose(first, second) and np.allclose(ensemble.score(query, index, ids), (first + second) / 2)
    # the held-out figures are the saved ensemble's, and each member's alone, reranking the hybrid via run_benchmark
    held_bench = tiny_benchmark(held)
    hybrid = HybridRetriever(index, result.base_weight)
    for model, figures in [(ensemble, result.by_mix), *zip(ensemble.members, result.by_member)]:
        for a in (0.5, 1.0):
            run = run_benchmark(CrossEncoderReranker(index, hybrid, model, a, 6), held_bench).run
            per = named_metric_per_query(held_bench.qrels, run, "ndcg@10")
            assert figures[a] == round(float(np.mean([per.get(q, 0.0) for q in held])), 4)
    # every member learned: its loss fell
    assert list(result.losses) == ["member-0", "member-1"]
    assert all(last < first - 0.05 for first, last in result.losses.values()), result.losses
    assert result.model == "" and result.tune_split_queries == 0   # not asked to fit again on the whole split
    # one member is the first member of the ensemble: the same seed, the same fit, saved as member-0
    single = tune_reranker(index, bench, spec.model_copy(update={"members": 1}), "ndcg@10", tmp_path / "one", seed=0)
    assert single.losses == {"member-0": result.losses["member-0"]} and single.by_member == []
    assert isinstance(load_cross_encoder(tmp_path / "one", 64), CrossEncoder)
    # the same fit under a threshold it cannot pass is not adopted, with the same figures (that the fit is seeded
    # is checked above and below: member-0 and member-1 fitted again equal the ensemble's; here the member saved
    # is read from a copy, not fitted a third time)
    shutil.copytree(tmp_path / "one", tmp_path / "strict")
    strict = tune_reranker(index, bench, spec.model_copy(update={"members": 1, "min_gain": 1.0}), "ndcg@10",
                           tmp_path / "strict", seed=0)
    assert not strict.adopted and strict.by_mix == single.by_mix and strict.losses == {}
    # decided again with the saved members (another depth and mix): nothing fitted, the same figures where the
    # settings are the same, a figure of the new weight computed
    again = tune_reranker(index, bench, spec.model_copy(update={"mix": [1.0, 2.0]}), "ndcg@10", tmp_path / "fit",
                          seed=0)
    assert again.losses == {} and again.seconds["fit"] == 0.0 and again.groups == result.groups
    assert again.by_mix[1.0] == result.by_mix[1.0] and again.by_member[0][1.0] == result.by_member[0][1.0]
    assert set(again.by_mix) == {0.0, 1.0, 2.0}
    deeper = tune_reranker(index, bench, spec.model_copy(update={"depth": 3}), "ndcg@10", tmp_path / "fit", seed=0)
    run = run_benchmark(CrossEncoderReranker(index, hybrid, ensemble, 0.5, 3), held_bench).run
    per = named_metric_per_query(held_bench.qrels, run, "ndcg@10")
    assert deeper.by_mix[0.5] == round(float(np.mean([per.get(q, 0.0) for q in held])), 4)
    # a count raised over one member already saved fits only the new member, the fit a fresh ensemble makes
    raised = tune_reranker(index, bench, spec, "ndcg@10", tmp_path / "one", seed=0)
    assert raised.losses == {"member-1": result.losses["member-1"]} and raised.by_mix == result.by_mix
    assert raised.by_member == result.by_member
    member = member_dirs(tmp_path / "one")[1]
    assert np.allclose(CrossEncoder(str(member), 64).score(query, index, ids), second)
    # a lowered count reads the first members only
    fewer = tune_reranker(index, bench, spec.model_copy(update={"members": 1}), "ndcg@10", tmp_path / "fit", seed=0)
    assert fewer.losses == {} and fewer.by_mix == single.by_mix
    with pytest.raises(ValueError, match="no fitted cross-encoder"):
        load_cross_encoder(tmp_path)


@pytest.mark.slow
def test_an_adopted_reranker_is_fitted_again_on_the_whole_tune_split(tmp_path):
    index, bench = tiny_index(), tiny_benchmark()
    # adopted whatever the figures; batches of 4: two steps an epoch (the path, not the quality)
    # one torch thread: the refit is compared with a fit of its own, equal only at one thread count
    spec = RerankerSpec(held_out=0.25, epochs=2, batch_size=4, negatives=2, pool=6, max_length=64, depth=6,
                        mix=[0.5, 1.0], min_gain=-1.0, standard_errors=0.0, threads=1)
    decided = tune_reranker(index, bench, spec, "ndcg@10", tmp_path / "fit", seed=0)
    assert decided.adopted and decided.model == "" and not (tmp_path / "fit" / TUNE_SPLIT).exists()
    # asked for: the decision's member is read and decided on as before, then fitted again on all 8 queries
    whole_spec = spec.model_copy(update={"refit_on_tune_split": True})
    whole = tune_reranker(index, bench, whole_spec, "ndcg@10", tmp_path / "fit", seed=0)
    assert whole.by_mix == decided.by_mix and whole.weight == decided.weight and whole.adopted
    assert (whole.model, whole.tune_split_queries, list(whole.losses)) == (TUNE_SPLIT, 8, ["tune-split/member-0"])
    [saved] = member_dirs(tmp_path / "fit" / TUNE_SPLIT)
    # the recipe of member 0 (its seed, the hybrid's negatives at the decided dense share), on every judged query
    fit, held = held_out_split(list(bench.queries), 0.25, 0)
    torch.manual_seed(0)
    expected = CrossEncoder(model_dir(), 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as the spec fits
    try:
        losses = reranker.fit(expected, training_groups(index, bench, fit + held, whole.base_weight, 6), index,
                              whole_spec, 0)
    finally:
        torch.set_num_threads(threads)
    assert whole.losses["tune-split/member-0"] == (losses[0], losses[-1])
    query, ids = bench.queries[held[0]], ["seine", "thames", "danube"]
    refitted = CrossEncoder(str(saved), 64).score(query, index, ids)
    assert np.allclose(refitted, expected.score(query, index, ids), atol=1e-5)
    assert not np.allclose(refitted, CrossEncoder(str(member_dirs(tmp_path / "fit")[0]), 64).score(query, index, ids))
    # read again, not fitted again; not adopted: nothing fitted again (the decision's member read from a copy)
    assert tune_reranker(index, bench, whole_spec, "ndcg@10", tmp_path / "fit", seed=0).losses == {}
    shutil.copytree(member_dirs(tmp_path / "fit")[0], tmp_path / "strict" / "member-0")
    strict = tune_reranker(index, bench, whole_spec.model_copy(update={"min_gain": 1.0}), "ndcg@10",
                           tmp_path / "strict", seed=0)
    assert not strict.adopted and strict.model == "" and not (tmp_path / "strict" / TUNE_SPLIT).exists()
    assert strict.losses == {} and strict.by_mix == decided.by_mix


def test_the_reranker_version_changes_with_what_decides_the_fit(monkeypatch):
    index, bench = tiny_index(), tiny_benchmark()
    spec = RerankerSpec()
    fit, version = reranker_versions(index, bench, spec, 0)
    assert reranker_versions(tiny_index(), tiny_benchmark(), RerankerSpec(), 0) == (fit, version) and version != fit
    fewer = tiny_benchmark(list(bench.queries)[:-1])
    within = tiny_benchmark(within={q: ["seine", "danube"] for q in QUESTIONS})
    fitted_otherwise = [(index, bench, spec, 1), (index, fewer, spec, 0), (index, within, spec, 0),
                        *((index, bench, spec.model_copy(update=u), 0)
                          for u in ({"max_length": 320}, {"weights": [0.8]}, {"held_out": 0.3}))]
    versions = [reranker_versions(*a) for a in fitted_otherwise]
    assert len({fit, *(f for f, _ in versions)}) == len({version, *(v for _, v in versions)}) == 1 + len(versions)
    # what only decides, and the member count, change the version, not the fit's: the members saved are decided on
    # again, not fitted again, and a raised count fits only the new ones
    decided_otherwise = [spec.model_copy(update=u) for u in ({"depth": 30}, {"mix": [1.0]}, {"min_gain": 0.01},
                                                              {"standard_errors": 2.0}, {"members": 3},
                                                              {"refit_on_tune_split": True})]
    versions = [reranker_versions(index, bench, s, 0) for s in decided_otherwise]
    assert {f for f, _ in versions} == {fit} and len({version, *(v for _, v in versions)}) == 7
    monkeypatch.setattr(reranker, "recipe", lambda: "other code")
    assert all(a != b for a, b in zip(reranker_versions(index, bench, spec, 0), (fit, version)))


def test_a_fit_version_names_the_tuned_encoder_as_its_table_does_not_where_it_lies():
    """A data directory copied or moved as a whole keeps its fits: the tuned encoder's vectors table names the
    encoder relative to itself; the resolved absolute path differs in every copy."""
    index, bench, spec = tiny_index(), tiny_benchmark(), RerankerSpec()
    relative = "../../reports/tuned/tiny/encoder-0123456789ab"

    def tuned_at(data_dir: str, reference: str = relative, backend: str = "onnx-int8"):
        model = f"{data_dir}/reports/tuned/tiny/{reference.rsplit('/', 1)[-1]}"
        return dataclasses.replace(index, embedder=Embedder(model, backend=backend, reference=reference))

    def fit_of(*args) -> str:
        return reranker_versions(*args)[0]

    here = fit_of(tuned_at("/data/one"), bench, spec, 0)
    assert fit_of(tuned_at("/mnt/copy/of/one"), bench, spec, 0) == here
    assert fit_of(tuned_at("/data/one", relative.replace("0123", "4567")), bench, spec, 0) != here
    assert fit_of(tuned_at("/data/one", backend="torch"), bench, spec, 0) != here


def test_tune_reranker_refuses_too_few_queries(tmp_path):
    with pytest.raises(ValueError, match="none left to fit on"):
        tune_reranker(tiny_index(), tiny_benchmark(["q1"]), RerankerSpec(), "ndcg@10", tmp_path)


def test_reranker_spec_is_validated_in_the_tuning_section():
    assert TuningSpec.model_validate({}).reranker is None
    assert TuningSpec.model_validate({"reranker": {}}).reranker == RerankerSpec()
    with pytest.raises(ValueError, match="depth"):
        TuningSpec.model_validate({"reranker": {"depth": 1}})
    with pytest.raises(ValueError, match="negative"):
        TuningSpec.model_validate({"reranker": {"negative": 2}})   # a misspelt key is an error, not ignored


def test_the_evaluation_plan_reranks_the_selected_retriever_only_with_an_adopted_reranker(tmp_path):
    index = tiny_index()
    content = {"benchmark": "tiny", "corpus": "tiny", "tune_split": "train", "metric": "ndcg@10",
               "index": index_fingerprint(index), "graph": False, "selected": "hybrid",
               "retrievers": {"hybrid": {"params": {"weight": 0.8}, "value": 0.7, "evaluation": "train"},
                              "rrf": {"params": {"c": 10}, "value": 0.6, "evaluation": "train"}}}
    tuned = save_tuned(tmp_path, "tiny", content, {})
    assert isinstance(tuned, TunedConfig)
    reranker_params = {"model_path": "/models/ce", "weight": 0.5, "depth": 20, "max_length": 160, "version": "abc"}
    plan = plan_evaluation({"bm25": {}}, tuned, index_fingerprint(index), "tiny", "train", reranker=reranker_params)
    [run] = [r for r in plan.runs if r.kind == "cross_encoder"]
    assert run.label == "cross_encoder_tuned" and run.tuned
    assert run.params == {"base": {"hybrid": {"weight": 0.8}}, "model_path": "/models/ce", "weight": 0.5,
                          "depth": 20, "max_length": 160}
    assert any("`cross_encoder_tuned`: the selected `hybrid_tuned`" in n for n in plan.notes)
    without = plan_evaluation({"bm25": {}}, tuned, index_fingerprint(index), "tiny", "train")
    assert [r.label for r in without.runs] == [r.label for r in plan.runs if r.kind != "cross_encoder"]
