"""The Monte Carlo labels as a dataset other tools can read: BEIR files, TREC qrels, Parquet and a Hugging Face
`datasets` dataset with a dataset card, under `data/datasets/<benchmark>/` (beside the reports). The logic is
`core/outputs/export.py`; this module only gathers its inputs (labels, pools, solver and budgets of the labelling run)."""

import importlib.util

import pandas as pd
from dagster import (AssetDep, AssetExecutionContext, AssetKey, AssetRecordsFilter, Config, Failure,
                     MaterializeResult, MetadataValue, asset)

from causal_assets.core.outputs.checks import labels_decided_problem

from causal_assets.core.outputs.export import DatasetCard, agreement_with_seeds, export_labels, labels_solver, pick_estimator
from causal_assets.defs.partitions import benchmark_partitions
from causal_assets.defs.shared import EXPORT_GROUP
from causal_assets.resources import BenchmarkRegistry, Storage

GROUP = EXPORT_GROUP  # not in default_lineage_job: exporting is a choice, not a lineage stage


class ExportConfig(Config):
    estimator: str | None = None   # default: the labels' own estimator (adaptive over the naive comparison rows)
    out_dir: str | None = None     # default: <reports>/../datasets/<benchmark>
    hf: bool = True                # also save a Hugging Face DatasetDict (skipped with a warning without `datasets`)
    force: bool = False            # export labels that decide nothing (all UNCERTAIN, or infinite intervals) anyway


def _labelling_metadata(context: AssetExecutionContext) -> dict:
    """The metadata of the latest `mc_trials` materialization of this partition (model, budget, trials), or {}."""
    try:
        records = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("mc_trials"), asset_partitions=[context.partition_key]), limit=1).records
    except Exception as e:  # an instance without the record (e.g. labels copied in) still exports
        context.log.warning(f"no mc_trials materialization metadata: {e}")
        return {}
    if not records:
        return {}
    meta = records[0].asset_materialization.metadata if records[0].asset_materialization else {}
    return {k: getattr(v, "value", v) for k, v in meta.items()}


# After the evaluation where a run makes both: a run whose evaluation fails its blocking regression gate
# (`no_regression`) exports nothing.
@asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"parquet", "huggingface"},
       owners=["team:labels"], tags={"stage": "export"}, deps=[AssetDep("evaluation_metrics")],
       description="The Monte Carlo labels as BEIR qrels (graded) + queries/corpus, TREC qrels, Parquet and a "
                   "Hugging Face dataset with a dataset card.")
def labels_export(context: AssetExecutionContext, config: ExportConfig, storage: Storage,
                  benchmark_registry: BenchmarkRegistry, mc_labels: pd.DataFrame,
                  candidate_pools: pd.DataFrame) -> MaterializeResult:
    spec = benchmark_registry.spec(context.partition_key)
    problem = labels_decided_problem(mc_labels)
    if problem and not config.force:   # an all-UNCERTAIN label set exports as a dataset of zeros
        raise Failure(f"labels of {spec.name!r}: {problem}; run config force: true exports them anyway")
    mc = dict(spec.monte_carlo or {})
    labelled = _labelling_metadata(context)
    estimator = pick_estimator(mc_labels, config.estimator)
    budgets = {k: v for k, v in {
        "solver calls per question (configured)": labelled.get("budget_per_question", mc.get("budget")),
        "label threshold": mc.get("threshold"),
        "questions labelled": int(mc_labels["query_id"].nunique()),
        "trials recorded": labelled.get("trials"),
        "labelling wall seconds": labelled.get("wall_seconds"),
        "labelling run stopped": labelled.get("stopped"),
    }.items() if v is not None}
    card = DatasetCard(benchmark=spec.name, split=spec.label_split,
                       solver=labels_solver(mc_labels) or labelled.get("solver"), estimator=estimator, budgets=budgets,
                       quality=agreement_with_seeds(mc_labels, estimator))
    out = config.out_dir or str(storage.reports_path.parent / "datasets" / spec.name)
    hf = config.hf
    if hf and importlib.util.find_spec("datasets") is None:
        context.log.warning("the `datasets` package is not installed: hf/ skipped (pip install datasets)")
        hf = False
    result = export_labels(mc_labels, candidate_pools, out, card, estimator=estimator, hf=hf)
    context.log.info(f"exported {result.judgements} judgements of {result.questions} questions to {result.path}")
    return MaterializeResult(metadata={
        "path": MetadataValue.path(str(result.path)), "questions": result.questions,
        "documents": result.documents, "judgements": result.judgements, "estimator": result.estimator,
        "by_grade": MetadataValue.json({str(k): v for k, v in result.by_grade.items()}),
        "files": MetadataValue.json(result.files), "solver": card.solver or "not recorded",
        "label_quality": MetadataValue.json(card.quality)})
