"""tuned_retriever_configs, materialized for real on a small real SciFact subset: it tunes on train only, records
every trial, stores a content-versioned configuration, and the evaluation report scores that configuration on
the held-out split. Plus the automation wiring: a new tuned configuration re-triggers the evaluation."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path


from causal_assets.core.outputs.catalog import DuckDBCatalog
import pandas as pd
import pytest
import yaml
from dagster import (AssetKey, AssetMaterialization, AssetSelection, DagsterInstance, evaluate_automation_conditions,
                     materialize)

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.index.dense import Embedder, resolve_model_reference
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.cross_encoder import member_dirs
from causal_assets.core.retrievers.learned.retriever import grid_for
from causal_assets.core.stored.tuned import content_hash, index_fingerprint, load_tuned, save_tuned
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.core.foundation.storage import asset_path
from causal_assets.core.stored.reuse import reuse_or_fit
from causal_assets.core.tuning.records import ENCODER_COLUMNS, adopted_reranker, kept_encoder
from causal_assets.defs.tuning import tuned_encoder, tuned_reranker, tuned_retriever_configs
from causal_assets.resources import LLM
from tests.conftest import SCIFACT, make_beir_subset, require
from tests.helpers.endpoint import chat_only

INDEX = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary]


@pytest.fixture(scope="module")
def scifact_small(tmp_path_factory) -> Path:
    """This module's SciFact subset (the `resources` fixture's registry points at it): the first 40 documents, with
    the 8 train and 2 test claims judged on them. Every path the tests check runs on it as on the suite's 120
    documents (19 train, 4 test claims), and each tuning, fit and index build here costs a fraction."""
    return make_beir_subset(require(SCIFACT), tmp_path_factory.mktemp("scifact_40"), 40)


@pytest.fixture(scope="module")
def scifact_index(tmp_path_factory, scifact_small) -> Path:
    """The subset's index (`INDEX`: chunks, embeddings, sparse postings) materialized for real once for the module,
    its Parquet directory for `copy_index`: the three tests that tune tune on the same index, and each built it."""
    from causal_assets.resources import CorpusRegistry, ParquetIOManagerFactory, Storage

    root = tmp_path_factory.mktemp("scifact_index")
    registry = root / "corpora.yaml"   # the entries of the `resources` fixture's registry that this one reads
    registry.write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "scifact", "loader": "beir", "path": str(scifact_small)}]}))
    storage = Storage(base_path=str(root / "parquet"), catalog_path=str(root / "catalog.duckdb"),
                      reports_dir=str(root / "reports"))
    assert materialize(INDEX, resources={"storage": storage, "corpus_registry": CorpusRegistry(path=str(registry)),
                                         "io_manager": ParquetIOManagerFactory(storage=storage)},
                       partition_key="scifact", instance=DagsterInstance.ephemeral()).success
    return root / "parquet"


def copy_index(scifact_index: Path, resources) -> None:
    """The module's materialized index, copied where the test's `resources` keep their Parquet (the test writes
    beside it, and may move or edit it)."""
    shutil.copytree(scifact_index, resources["storage"].base_path)


def _events(result, asset):
    return [e.materialization for e in result.get_asset_materialization_events()
            if e.materialization.asset_key.path[-1] == asset]


@pytest.mark.slow
def test_tuning_on_train_only_versioned_and_evaluated(resources, scifact_index, monkeypatch):
    # The learned model's CV on 2 folds (the path, not the estimate): each of the five tunings below fits 15 models
    # instead of 36.
    registry_path = Path(resources["benchmark_registry"].path)
    registry = yaml.safe_load(registry_path.read_text())
    [scifact] = [b for b in registry["benchmarks"] if b["name"] == "scifact"]
    scifact["tuning"] = {"cv_folds": 2}
    registry_path.write_text(yaml.safe_dump(registry))
    # One instance for every run: the evaluation finds the tuned version in the tuning's recorded materialization.
    instance = DagsterInstance.ephemeral()
    copy_index(scifact_index, resources)
    spec = load_benchmark_registry(resources["benchmark_registry"].path)["scifact"]
    train, test = load_benchmark(spec, "train"), load_benchmark(spec, "test")
    assert train.query_ids() and test.query_ids()

    # Every query text that reaches an index during tuning: sparse scoring goes through CorpusIndex.terms, dense
    # scoring through the embedder.
    seen: list[str] = []
    terms, encode = CorpusIndex.terms, Embedder.encode_queries
    monkeypatch.setattr(CorpusIndex, "terms", lambda self, q: (seen.append(q), terms(self, q))[1])
    monkeypatch.setattr(Embedder, "encode_queries", lambda self, qs: (seen.extend(qs), encode(self, qs))[1])
    result = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                         selection=[tuned_retriever_configs], instance=instance)
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "tuned_on_train_only" and check.passed, check.metadata
    monkeypatch.undo()
    seen_set = set(seen)
    assert set(train.queries.values()) <= seen_set          # every train query was scored ...
    assert not seen_set & set(test.queries.values())       # ... and no test query ever reached the tuner

    base = resources["storage"].base_path
    trials = pd.read_parquet(f"{base}/tuned_retriever_configs/scifact.parquet")
    assert set(trials["retriever"]) == {"hybrid", "rrf", "cascade", "learned"}
    assert (trials["split"] == "train").all() and trials["value"].between(0, 1).all()
    assert trials.groupby("retriever")["best"].sum().eq(1).all()      # one winner per retriever
    assert len(trials[trials.retriever == "hybrid"]) == 21             # the whole weight grid
    assert len(trials[trials.retriever == "cascade"]) > 6              # a search, not one point
    assert len(trials[trials.retriever == "learned"]) == len(grid_for("qrels"))   # the grid x target qrels (no MC labels)
    assert (trials[trials.retriever == "learned"]["evaluation"] == "cv2").all()      # the folds configured
    for _, t in trials[trials.best].iterrows():                        # the winner is the best trial it scored
        assert t["value"] == trials[trials.retriever == t["retriever"]]["value"].max()
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        assert con.execute("select count(*) from tuned_retriever_configs where benchmark = 'scifact'"
                           ).fetchone()[0] == len(trials)

    meta = _events(result, "tuned_retriever_configs")[0].metadata
    version = meta["config_version"].value
    assert trials["config_version"].eq(version).all()
    tuned_dir = resources["storage"].reports_path / "tuned" / "scifact"
    doc = yaml.safe_load((tuned_dir / f"{version}.yaml").read_text())
    assert content_hash(doc["content"]) == version and doc["content"]["tune_split"] == "train"
    content = doc["content"]
    assert content["selected"] in content["retrievers"]
    hybrid_best = trials[(trials.retriever == "hybrid") & trials.best].iloc[0]
    assert content["retrievers"]["hybrid"]["params"] == json.loads(hybrid_best["params"])
    model_file = tuned_dir / content["retrievers"]["learned"]["params"]["model_path"]
    assert model_file.exists() and content["retrievers"]["learned"]["model_sha256"] in model_file.name

    # The same inputs again (a job selecting the whole group): the tuning is kept, not run, with the same table
    # and data version, so nothing downstream turns stale; no query reaches the tuner.
    assert meta["reused"].value is False and trials["inputs_version"].eq(meta["inputs_version"].value).all()
    seen.clear()
    monkeypatch.setattr(CorpusIndex, "terms", lambda self, q: (seen.append(q), terms(self, q))[1])
    again = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                        selection=[tuned_retriever_configs], instance=instance)
    monkeypatch.undo()
    [kept] = _events(again, "tuned_retriever_configs")
    assert kept.metadata["reused"].value is True and kept.metadata["config_version"].value == version
    assert kept.tags["dagster/data_version"] == version and not seen
    assert kept.metadata["best_by_retriever"].value == meta["best_by_retriever"].value
    pd.testing.assert_frame_equal(pd.read_parquet(f"{base}/tuned_retriever_configs/scifact.parquet"), trials)
    assert load_tuned(tuned_dir.parent, "scifact", version).version == version
    # `retune: true` tunes again (the same outcome, so the same version); a missing model file does too
    retuned = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                          selection=[tuned_retriever_configs], instance=instance,
                          run_config={"ops": {"tuned_retriever_configs": {"config": {"retune": True}}}})
    [retuned_meta] = [e.metadata for e in _events(retuned, "tuned_retriever_configs")]
    assert retuned_meta["reused"].value is False and retuned_meta["config_version"].value == version
    model_file.unlink()
    rebuilt = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                          selection=[tuned_retriever_configs], instance=instance)
    assert _events(rebuilt, "tuned_retriever_configs")[0].metadata["reused"].value is False and model_file.exists()

    evaluated = materialize([evaluation_tables, tuned_retriever_configs, *INDEX], resources=resources,
                            partition_key="scifact", selection=[evaluation_tables], instance=instance)
    assert evaluated.success
    metrics = pd.read_parquet(f"{base}/evaluation_metrics/scifact.parquet")
    names = set(metrics["retriever"])
    assert {"hybrid_tuned", "rrf_tuned", "cascade_tuned", "learned_tuned"} <= names
    assert {"bm25", "dense", "hybrid", "cascade"} <= names             # next to the defaults and baselines
    assert set(metrics["split"]) == {"test"}
    ndcg = metrics[(metrics.metric == "ndcg") & (metrics.k == 10)].set_index("retriever")["value"]
    assert ndcg["learned_tuned"] > 0.5
    eval_meta = _events(evaluated, "evaluation_metrics")[0].metadata
    assert eval_meta["tuned_config_version"].value == version
    assert f"tuned config `{version}`" in eval_meta["report"].value

    edited = tuned_dir / f"{version}.yaml"
    edited.write_text(edited.read_text().replace("tune_split: train", "tune_split: test"))
    with pytest.raises(ValueError, match="does not match its version"):
        load_tuned(tuned_dir.parent, "scifact", version)
    # an edited configuration is not kept: the same inputs are tuned again and the file written again
    restored = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                           selection=[tuned_retriever_configs], instance=instance)
    assert _events(restored, "tuned_retriever_configs")[0].metadata["reused"].value is False
    assert load_tuned(tuned_dir.parent, "scifact", version).content == content
    # another input (here the benchmark's tuning section) is another tuning
    scifact["tuning"]["passes"] = 1
    registry_path.write_text(yaml.safe_dump(registry))
    other = materialize([tuned_retriever_configs, *INDEX], resources=resources, partition_key="scifact",
                        selection=[tuned_retriever_configs], instance=instance)
    other_meta = _events(other, "tuned_retriever_configs")[0].metadata
    assert other_meta["reused"].value is False and other_meta["inputs_version"].value != meta["inputs_version"].value


def _tuning_run_config(retrievers: list[str]) -> dict:
    return {"ops": {"tuned_retriever_configs": {"config": {"retrievers": retrievers}}}}


@pytest.mark.slow
def test_evaluation_reads_the_tuned_version_its_upstream_materialization_recorded(resources, scifact_index,
                                                                                  monkeypatch):
    """Two tunings of one benchmark: the evaluation of the first run evaluates the first version even though the
    second tuning finished while that run was between its tuning and its evaluation; an evaluation on its own
    follows the latest recorded tuning; configuration files no materialization recorded (a tuning that crashed
    after writing them) are never evaluated."""
    instance = DagsterInstance.ephemeral()
    copy_index(scifact_index, resources)
    everything = [evaluation_tables, tuned_retriever_configs, *INDEX]
    second: list = []

    def tune_again_meanwhile():
        # Runs when the first run's evaluation step starts: a second tuning (other retrievers) materializes.
        if not second:
            second.append(materialize(everything, resources=resources, partition_key="scifact", instance=instance,
                                      selection=[tuned_retriever_configs],
                                      run_config=_tuning_run_config(["hybrid", "rrf"])))

    monkeypatch.setattr("causal_assets.defs.evaluation.warm_up", tune_again_meanwhile)
    first = materialize(everything, resources=resources, partition_key="scifact", instance=instance,
                        selection=[tuned_retriever_configs, evaluation_tables],
                        run_config=_tuning_run_config(["hybrid"]))
    assert first.success and second and second[0].success
    v1 = _events(first, "tuned_retriever_configs")[0].metadata["config_version"].value
    v2 = _events(second[0], "tuned_retriever_configs")[0].metadata["config_version"].value
    assert v1 != v2
    evaluated_first = _events(first, "evaluation_metrics")[0].metadata
    assert evaluated_first["tuned_config_version"].value == v1
    evaluated = set(pd.read_parquet(f"{resources['storage'].base_path}/evaluation_metrics/scifact.parquet")["retriever"])
    assert "hybrid_tuned" in evaluated and "rrf_tuned" not in evaluated     # v1 tuned the hybrid only
    monkeypatch.undo()

    # An evaluation run on its own follows the latest recorded tuning ...
    alone = materialize(everything, resources=resources, partition_key="scifact", instance=instance,
                        selection=[evaluation_tables])
    assert _events(alone, "evaluation_metrics")[0].metadata["tuned_config_version"].value == v2
    # ... and files that no materialization recorded change nothing.
    tuned_root = resources["storage"].reports_path / "tuned"
    stray = save_tuned(tuned_root, "scifact", {**load_tuned(tuned_root, "scifact", v1).content, "selected": None}, {})
    assert stray.version not in (v1, v2)
    again = materialize(everything, resources=resources, partition_key="scifact", instance=instance,
                        selection=[evaluation_tables])
    assert _events(again, "evaluation_metrics")[0].metadata["tuned_config_version"].value == v2


def test_a_new_tuned_config_re_triggers_the_evaluation():
    """Declarative automation: the evaluation is eager on tuned_retriever_configs, and a benchmark that was never
    tuned does not block it."""
    require(SCIFACT)  # the tuned benchmark
    from causal_assets.definitions import defs

    evaluation = [AssetKey(k) for k in ("evaluation_metrics", "evaluation_runs", "evaluation_failures")]
    upstream = ["corpus_chunks", "corpus_embeddings", "sparse_postings", "sparse_vocabulary", "graph_nodes",
                "graph_edges"]
    with DagsterInstance.ephemeral() as instance:
        def report(*assets):
            for a in assets:
                instance.report_runless_asset_event(AssetMaterialization(a, partition="scifact"))

        def requested(cursor):
            result = evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=AssetSelection.assets(*evaluation),
                                                    cursor=cursor)
            keys = {(k.path[-1], p) for k in evaluation for p in result.get_requested_partitions(k)}
            return keys, result.cursor

        report(*upstream, *(k.path[-1] for k in evaluation))
        _, cursor = requested(None)
        report(*upstream)   # the index changed, no tuned config exists: the evaluation still follows
        keys, cursor = requested(cursor)
        assert ("evaluation_metrics", "scifact") in keys
        report(*(k.path[-1] for k in evaluation))
        keys, cursor = requested(cursor)
        assert not keys
        report("tuned_retriever_configs")   # a new tuned configuration: re-evaluate
        keys, cursor = requested(cursor)
        assert ("evaluation_metrics", "scifact") in keys


def test_the_llm_resource_knows_a_chat_only_endpoint_cannot_score(tmp_path):
    """The tuning asks `scores_prompts()` before tuning the causal retriever with the answer likelihood, and falls
    back to the lexical model (named in its log and metadata) against an endpoint like this one."""
    with chat_only() as server:
        llm = LLM(base_url=server.url, model="gpt-chat-only", api_key="none", max_retries=0,
                  cache_path=str(tmp_path / "c.db"))
        assert llm.scores_prompts() is False
    assert LLM(cache_path=str(tmp_path / "c.db")).scores_prompts() is True   # the packaged model, in-process


@pytest.mark.slow   # fits MiniLM twice, then one-step cross-encoders (4 member fits in all)
@pytest.mark.usefixtures("torch_on_free_cores")
def test_an_adopted_tuned_encoder_feeds_the_tuning_and_the_tuned_evaluation_runs(resources, scifact_index):
    """Not asked for: a record saying so and no vectors. Asked for (and adopted whatever the held-out figures say,
    min_gain -1, so the path is certain): the model directory and the corpus's vectors under it, the tuned
    configuration made on that index, and its `*_tuned` runs evaluated on it while the baselines keep the corpus's."""
    instance = DagsterInstance.ephemeral()
    base = resources["storage"].base_path
    copy_index(scifact_index, resources)
    encoder_assets = [tuned_encoder, *INDEX]
    assert materialize(encoder_assets, resources=resources, partition_key="scifact", selection=[tuned_encoder],
                       instance=instance).success
    record = pd.read_parquet(f"{base}/tuned_encoder/scifact.parquet")
    assert not record["adopted"].iloc[0] and "not asked for" in record["reason"].iloc[0]
    assert pd.read_parquet(f"{base}/tuned_embeddings/scifact.parquet").empty

    registry_path = Path(resources["benchmark_registry"].path)
    registry = yaml.safe_load(registry_path.read_text())
    [scifact] = [b for b in registry["benchmarks"] if b["name"] == "scifact"]
    # the reranker too, adopted whatever the held-out figures say (one short epoch: the path, not the quality; each
    # fit one step, every fit pair in one batch; the encoder fitted on half the 8 train claims, its costly part)
    scifact["tuning"] = {"retrievers": ["hybrid", "cascade"],
                         "encoder": {"held_out": 0.5, "batch_size": 16, "min_gain": -1.0},
                         "reranker": {"held_out": 0.25, "epochs": 1, "batch_size": 16, "negatives": 1,
                                      "max_length": 64, "depth": 5, "mix": [0.5], "min_gain": -1.0}}
    registry_path.write_text(yaml.safe_dump(registry))
    everything = [tuned_encoder, tuned_reranker, tuned_retriever_configs, evaluation_tables, *INDEX]
    result = materialize(everything, resources=resources, partition_key="scifact", instance=instance,
                         selection=[tuned_encoder, tuned_reranker, tuned_retriever_configs, evaluation_tables])
    assert result.success
    reranker = pd.read_parquet(f"{base}/tuned_reranker/scifact.parquet")
    assert reranker["adopted"].iloc[0] and reranker["weight"].iloc[0] == 0.5
    assert "beyond the margin" in reranker["reason"].iloc[0]
    ce_dir = resolve_model_reference(reranker["model"].iloc[0], f"{base}/tuned_reranker/scifact.parquet")
    # named by the members' fit version (`reranker_versions`), which the decision's settings and count are not
    # part of
    assert re.fullmatch(r"reranker-[0-9a-f]{12}", Path(ce_dir).name) and reranker["version"].iloc[0] not in ce_dir
    assert [d.name for d in member_dirs(ce_dir)] == ["member-0"] and reranker["members"].iloc[0] == 1
    record = pd.read_parquet(f"{base}/tuned_encoder/scifact.parquet")
    assert record["adopted"].iloc[0] and record["held_out_queries"].iloc[0] >= 1
    # the decision's paired gain and its standard error are recorded, and the margin they were held to named
    gain, se = record["held_out_gain"].iloc[0], record["held_out_gain_se"].iloc[0]
    assert gain > -1.0 + se and f"{gain:+.4f} per query, beyond the margin" in record["reason"].iloc[0]
    # named relative to the table (both tables sit at the same depth), found beside the tuned configurations
    model = record["model"].iloc[0]
    model_dir = resolve_model_reference(model, f"{base}/tuned_encoder/scifact.parquet")
    assert model.startswith("../") and Path(model_dir).parent == (resources["storage"].reports_path / "tuned" /
                                                                  "scifact").resolve()
    assert Path(model_dir, "config.json").exists() and not list(Path(model_dir).parent.glob("*.partial*"))
    vectors = pd.read_parquet(f"{base}/tuned_embeddings/scifact.parquet")
    chunks = pd.read_parquet(f"{base}/corpus_chunks/scifact.parquet")
    assert vectors["chunk_id"].tolist() == chunks["chunk_id"].tolist() and set(vectors["model"]) == {model}
    [tuning] = _events(result, "tuned_retriever_configs")
    assert tuning.metadata["encoder"].value == f"tuned ({model_dir})"
    version = tuning.metadata["config_version"].value
    tuned = load_tuned(resources["storage"].reports_path / "tuned", "scifact", version)
    assert tuned.content["index"]["embedding_model"] == model
    metrics = pd.read_parquet(f"{base}/evaluation_metrics/scifact.parquet")
    # the tuned runs were not refused as off-index, and cascade embeds with the index's model; the selected one is
    # also evaluated reranked by the adopted cross-encoder
    assert {"hybrid", "hybrid_tuned", "cascade_tuned", "cross_encoder_tuned"} <= set(metrics["retriever"])
    report = (resources["storage"].reports_path / "scifact.md").read_text()
    assert "embed with the encoder fine-tuned on `train`" in report
    assert f"`cross_encoder_tuned`: the selected `{tuned.selected}_tuned`" in report
    runs = pd.read_parquet(f"{base}/evaluation_runs/scifact.parquet")
    reranked, selected = (runs[runs["retriever"] == r] for r in ("cross_encoder_tuned", f"{tuned.selected}_tuned"))
    # the same documents below the reranked top 5, in the same order
    for q, g in list(reranked.groupby("query_id"))[:5]:
        s = selected[selected["query_id"] == q].sort_values("rank")
        g = g.sort_values("rank")
        assert set(g["chunk_id"].iloc[:5]) == set(s["chunk_id"].iloc[:5])
        assert g["chunk_id"].iloc[5:].tolist() == s["chunk_id"].iloc[5:len(g)].tolist()
    def reranker_event(reranker_spec: dict | None = None, **kwargs):
        """`tuned_reranker` materialized alone (after the registry's reranker spec is updated), its event."""
        if reranker_spec:
            scifact["tuning"]["reranker"].update(reranker_spec)
            registry_path.write_text(yaml.safe_dump(registry))
        [event] = _events(materialize([tuned_reranker, tuned_encoder, *INDEX], resources=resources,
                                      partition_key="scifact", selection=[tuned_reranker], instance=instance,
                                      **kwargs), "tuned_reranker")
        return event

    kept = reranker_event()
    assert kept.metadata["reused"].value is True
    assert kept.tags["dagster/data_version"] == reranker["version"].iloc[0]
    # a record whose held-out figures are not JSON (not one this asset wrote) is decided again, not failed on; its
    # members are intact and of the same fit version, so they are read, not fitted again
    member_files = {f: f.stat().st_mtime_ns for f in Path(ce_dir).rglob("*") if f.is_file()}
    reranker.assign(held_out_by_mix="{not json").to_parquet(f"{base}/tuned_reranker/scifact.parquet")
    decided = reranker_event()
    assert decided.metadata["reused"].value is False and decided.metadata["members_fitted"].value == 0
    assert decided.metadata["members_read"].value == 1
    assert decided.metadata["held_out_by_mix"].value == json.loads(reranker["held_out_by_mix"].iloc[0])
    timings = ["fit_seconds", "held_out_seconds"]
    decided_record = pd.read_parquet(f"{base}/tuned_reranker/scifact.parquet")
    assert decided_record.drop(columns=timings).equals(reranker.drop(columns=timings))
    assert decided_record["fit_seconds"].iloc[0] == 0.0 < reranker["fit_seconds"].iloc[0]
    # another mix (a setting that only decides): a new version, decided with the same members, nothing refitted
    decided = reranker_event({"mix": [0.5, 1.0]})
    assert decided.metadata["members_fitted"].value == 0 and decided.tags["dagster/data_version"] != \
        reranker["version"].iloc[0]
    assert set(decided.metadata["held_out_by_mix"].value) == {"0.0", "0.5", "1.0"}
    assert decided.metadata["held_out_by_mix"].value["0.5"] == json.loads(reranker["held_out_by_mix"].iloc[0])["0.5"]
    assert {f: f.stat().st_mtime_ns for f in Path(ce_dir).rglob("*") if f.is_file()} == member_files
    # a raised count fits the new member only, beside the first one's files as they were
    raised = reranker_event({"members": 2})
    assert (raised.metadata["members_fitted"].value, raised.metadata["members_read"].value) == (1, 1)
    assert list(raised.metadata["loss_first_last"].value) == ["member-1"] and raised.metadata["model"].value == ce_dir
    assert [d.name for d in member_dirs(ce_dir)] == ["member-0", "member-1"]
    assert {f: f.stat().st_mtime_ns for f in Path(ce_dir, "member-0").rglob("*") if f.is_file()} == member_files
    assert adopted_reranker(resources["storage"].base, "scifact")["model_path"] == ce_dir
    # lowered again: decided on the first member alone, the directory holding what the adopted record names
    lowered = reranker_event({"members": 1})
    assert (lowered.metadata["members_fitted"].value, lowered.metadata["members_read"].value) == (0, 1)
    assert lowered.metadata["held_out_by_mix"].value == decided.metadata["held_out_by_mix"].value
    assert [d.name for d in member_dirs(ce_dir)] == ["member-0"]
    refit = reranker_event(run_config={"ops": {"tuned_reranker": {"config": {"refit": True}}}})
    assert refit.metadata["members_fitted"].value == 1
    # fitted again on the whole tune split once adopted: the decision's member read and decided on as before, the
    # member the evaluation reranks with fitted on every train query, in the fit's directory
    whole = reranker_event({"refit_on_tune_split": True})
    assert (whole.metadata["members_fitted"].value, whole.metadata["members_read"].value) == (1, 1)
    assert list(whole.metadata["loss_first_last"].value) == ["tune-split/member-0"]
    assert whole.metadata["held_out_by_mix"].value == refit.metadata["held_out_by_mix"].value
    whole_record = pd.read_parquet(f"{base}/tuned_reranker/scifact.parquet")
    assert whole_record["tune_split_queries"].iloc[0] == \
        whole_record["fit_queries"].iloc[0] + whole_record["held_out_queries"].iloc[0]
    assert "fitted again on all" in whole_record["reason"].iloc[0]
    assert adopted_reranker(resources["storage"].base, "scifact")["model_path"] == str(Path(ce_dir, "tune-split"))
    assert [d.name for d in member_dirs(ce_dir)] == ["member-0"]
    assert whole.metadata["model"].value == str(Path(ce_dir, "tune-split"))
    assert reranker_event().metadata["reused"].value is True   # both sets intact: kept
    # no longer asked for: decided again on the same member, the fit's directory without the refitted one
    back = reranker_event({"refit_on_tune_split": False})
    assert (back.metadata["members_fitted"].value, back.metadata["members_read"].value) == (0, 1)
    assert back.metadata["model"].value == ce_dir and not Path(ce_dir, "tune-split").exists()

    # the same version again (a job selecting the whole group): kept, not fitted again; `refit: true` fits again
    again = materialize(encoder_assets, resources=resources, partition_key="scifact", selection=[tuned_encoder],
                        instance=instance)
    [kept] = _events(again, "tuned_encoder")
    assert kept.metadata["reused"].value is True and kept.metadata["model"].value == model_dir
    assert kept.metadata["held_out_gain_se"].value == pytest.approx(se)
    assert kept.metadata["held_out_by_weight"].value == json.loads(record["held_out_by_weight"].iloc[0])
    assert kept.tags["dagster/data_version"] == record["version"].iloc[0]   # readers are not made stale
    assert pd.read_parquet(f"{base}/tuned_encoder/scifact.parquet").equals(record)
    assert pd.read_parquet(f"{base}/tuned_embeddings/scifact.parquet").equals(vectors)
    refit = materialize(encoder_assets, resources=resources, partition_key="scifact", selection=[tuned_encoder],
                        instance=instance, run_config={"ops": {"tuned_encoder": {"config": {"refit": True}}}})
    [fitted] = _events(refit, "tuned_encoder")
    assert fitted.metadata["reused"].value is False and fitted.metadata["version"].value == record["version"].iloc[0]
    assert json.loads(pd.read_parquet(f"{base}/tuned_encoder/scifact.parquet")["held_out_by_weight"].iloc[0]) == \
        fitted.metadata["held_out_by_weight"].value
    # a record this asset did not write (its per-weight figures are not JSON) is no previous fit, so the asset fits
    # again (the path `refit` just took) rather than fail on it; checked on the decision, not with a third fit
    def kept_fit():
        record_path = asset_path(resources["storage"].base, "tuned_encoder", "scifact")
        vectors_path = asset_path(resources["storage"].base, "tuned_embeddings", "scifact")
        kept, reused = reuse_or_fit(record_path, record["version"].iloc[0], lambda: None,
                                    lambda table: kept_encoder(table, record_path, vectors_path, Path(model_dir),
                                                               len(chunks)), columns=ENCODER_COLUMNS)
        return kept if reused else None
    assert kept_fit() is not None
    record.assign(held_out_by_weight="{not json").to_parquet(f"{base}/tuned_encoder/scifact.parquet")
    assert kept_fit() is None

    # the data directory moved as a whole (another checkout, a container's mount): the tuned index still loads its
    # encoder, from the new place, and still matches the configuration tuned on it
    base_dir = Path(base).parent
    moved = base_dir / "moved"
    moved.mkdir()
    for part in ("parquet", "reports"):
        shutil.copytree(base_dir / part, moved / part)
    shutil.rmtree(model_dir)
    index = CorpusIndex.load(moved / "parquet", "scifact", vectors=moved / "parquet/tuned_embeddings/scifact.parquet")
    assert Path(index.embedder.model_name).is_relative_to(moved)
    assert index_fingerprint(index) == tuned.content["index"]
    assert index.embedder.encode_queries(["a claim"]).shape == (1, vectors["embedding"].iloc[0].shape[0])

    # a table whose rows are not the corpus's chunks is refused by name, not silently misaligned
    vectors.iloc[:-1].to_parquet(f"{base}/tuned_embeddings/scifact.parquet")
    with pytest.raises(ValueError, match="tuned_embeddings/scifact.parquet: .* do not match"):
        CorpusIndex.load(base, "scifact", vectors=f"{base}/tuned_embeddings/scifact.parquet")
