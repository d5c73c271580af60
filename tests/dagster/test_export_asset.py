"""labels_export as a Dagster asset: reads mc_labels and candidate_pools of a benchmark partition through the IO
manager and writes the dataset under <reports>/../datasets/<benchmark>/, with the labelling run's solver and budget
taken from the latest mc_trials materialization."""
from __future__ import annotations

import datasets
import ranx
from dagster import AssetKey, AssetMaterialization, DagsterInstance, materialize

from causal_assets.defs.export import labels_export
from causal_assets.defs.labels import candidate_pools, mc_labels, mc_trials
from causal_assets.resources import LLM, BenchmarkRegistry, ParquetIOManagerFactory, Storage
from tests.core.test_export import make_labels, make_pools


def test_labels_export_asset(tmp_path):
    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    for name, frame in (("mc_labels", make_labels().assign(benchmark="default")),
                        ("candidate_pools", make_pools().assign(benchmark="default"))):
        (tmp_path / "parquet" / name).mkdir(parents=True)
        frame.to_parquet(tmp_path / "parquet" / name / "default.parquet", index=False)
    instance = DagsterInstance.ephemeral()
    instance.report_runless_asset_event(AssetMaterialization(
        "mc_trials", partition="default", metadata={"solver": "local/gemma3-270m", "budget_per_question": 24,
                                                    "trials": 48, "stopped": "complete"}))
    result = materialize([candidate_pools, mc_trials, mc_labels, labels_export], partition_key="default", instance=instance,
                         selection=["labels_export"],
                         resources={"storage": storage, "benchmark_registry": BenchmarkRegistry(),
                                    "io_manager": ParquetIOManagerFactory(storage=storage),
                                    # lazy: nothing in the selection calls it
                                    "llm": LLM(cache_path=str(tmp_path / "calls.sqlite"))})
    assert result.success
    meta = result.asset_materializations_for_node("labels_export")[0].metadata
    assert meta["judgements"].value == 8 and meta["estimator"].value == "adaptive"
    assert meta["solver"].value == "local/gemma3-270m"
    out = tmp_path / "datasets" / "default"
    assert str(out) == meta["path"].value
    card = (out / "README.md").read_text()
    assert "| solver calls per question (configured) | 24 |" in card and "| split | dev |" in card
    assert datasets.load_from_disk(str(out / "hf"))["labels"].num_rows == 8
    qrels = ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec")
    assert set(qrels.to_dict()) == {"q1", "q2"}
    # Nothing is written through the IO manager for the export itself.
    assert not (tmp_path / "parquet" / "labels_export").exists()
    assert instance.get_latest_materialization_event(AssetKey("labels_export")) is not None
