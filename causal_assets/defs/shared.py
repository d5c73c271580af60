"""Names the modules of defs/ share, so that no stage module imports another: the asset groups (which jobs and
sensors select by name), the automation condition that tolerates missing upstreams, and the run configurations
two stages accept (the embedding of `corpus_embeddings` and its shards, the Monte Carlo trials of `mc_trials` and
theirs)."""
import pandas as pd
from dagster import AssetExecutionContext, AssetSelection, AutomationCondition, Config, MetadataValue
from pydantic import Field

from causal_assets.core.foundation.limits import MAX_BATCH, MAX_BUDGET, MAX_THREADS

from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder
from causal_assets.core.labeling.runner import LabelingParams
from causal_assets.core.labeling.trials import TrialRun, run_trials
from causal_assets.core.foundation.errors import CatalogError
from causal_assets.core.llm import ledger
from causal_assets.resources import DEFAULT_EMBEDDING_BACKEND, DEFAULT_MODELS_DIR, LLM, SETTINGS

# The asset groups, one per stage module.
CORPUS_GROUP, GRAPH_GROUP, LABELS_GROUP = "corpus_index", "graph", "labels"
TUNING_GROUP, EVALUATION_GROUP, SEARCH_GROUP = "tuning", "evaluation", "search"
SCALE_OUT_GROUP, EXPORT_GROUP = "scale_out", "export"


def eager_tolerating_missing(*keys: str) -> AutomationCondition:
    """`eager()`, except that the given upstream assets may be missing: an update of theirs still triggers a
    re-run, but their absence does not block one (MC labels cost LLM calls; a benchmark may never be tuned)."""
    return AutomationCondition.eager().replace(
        "any_deps_missing", AutomationCondition.any_deps_missing().ignore(AssetSelection.assets(*keys)))


class EmbeddingConfig(Config):
    model: str = DEFAULT_MODEL  # the packaged all-MiniLM-L6-v2, or a local model directory
    batch_size: int = Field(default=64, ge=1, le=MAX_BATCH)
    # torch (fp32 PyTorch), onnx (fp32 ONNX Runtime) or onnx-int8; default $CAUSAL_ASSETS_EMBEDDING_BACKEND or the
    # measured default (docs/decisions.md, "Performance and engineering"). Part of the cache key: vectors of
    # different backends never mix.
    backend: str = DEFAULT_EMBEDDING_BACKEND
    # ONNX backends: texts encoded at once, one a thread; 0 = every core (threads do not spin-wait)
    threads: int = Field(default=0, ge=0, le=MAX_THREADS)
    models_dir: str = DEFAULT_MODELS_DIR  # where the ONNX export is cached (by model hash)
    device: str = SETTINGS.embedding_device  # torch backend: cpu, or cuda on a GPU worker (deploy/k8s/executor.yaml)

    def embedder(self) -> Embedder:
        return Embedder(self.model, self.batch_size, self.backend, self.models_dir, self.threads, self.device)


class MonteCarloConfig(Config):
    estimator: str | None = None   # adaptive | regression | naive (default: the benchmark's monte_carlo.estimator)
    outcome: str | None = None     # qa_likelihood | likelihood | success | both (default: the benchmark's, else LabelingParams')
    budget: int | None = Field(default=None, ge=1, le=MAX_BUDGET)   # solver calls per question
    # finite (LabelingParams checks their ranges): a NaN threshold made every label UNCERTAIN
    threshold: float | None = Field(default=None, allow_inf_nan=False)
    threshold_nats: float | None = Field(default=None, allow_inf_nan=False)
    question_weight: float | None = Field(default=None, allow_inf_nan=False)
    document_encoding: str | None = None   # auto | joint | separate (default: the benchmark's, else auto)


def mc_config(spec_mc: dict, config: MonteCarloConfig) -> LabelingParams:
    return LabelingParams.from_settings(spec_mc, estimator=config.estimator, outcome=config.outcome,
                                        budget=config.budget, threshold=config.threshold,
                                        threshold_nats=config.threshold_nats, question_weight=config.question_weight,
                                        document_encoding=config.document_encoding)


def trials_of(context: AssetExecutionContext, spec, cfg: LabelingParams, llm: LLM, pools: pd.DataFrame,
              query_ids: list[str] | None = None) -> TrialRun:
    """`run_trials` with this step's LLM: the client (and the local server) only for outcomes that generate, the
    scorer only for outcomes that score."""
    local = spec.monte_carlo.get("solver")
    return run_trials(pools, cfg, spec.name, spec.validator, llm.solver_name(local, cfg.outcome),
                      client=llm.client if cfg.generates else None,
                      scorer=llm.scorer(local) if cfg.scores else None,
                      query_ids=query_ids, log=context.log.info, warn=context.log.warning)


def ensure_view(context: AssetExecutionContext, storage, name: str) -> None:
    """The catalog's view over a table a stage writes beside its assets (`cost_ledger`, `evaluation_history`,
    `evaluation_baselines`: a folder of Parquet files under the storage base)."""
    catalog = storage.catalog()
    if catalog is None:
        return
    try:
        catalog.ensure_views({name: catalog.view_source(storage.base, name, partitioned=True)})
    except CatalogError as e:   # derived data: the Parquet is written, so the run goes on
        context.log.warning(str(e))


def record_cost(context: AssetExecutionContext, storage, meter: ledger.Meter) -> dict:
    """The stage's cost-ledger rows since `meter` started, added to the `cost_ledger` table; returns the asset
    metadata that says it (`cost`: the sums; a failure to write the ledger is a warning, never the stage's)."""
    rows = meter.rows()
    try:
        ledger.append(storage.base, rows)
    except OSError as e:
        context.log.warning(f"cost ledger not written: {e}")
    else:
        ensure_view(context, storage, ledger.LEDGER)
    total = ledger.totals(rows)
    context.log.info(f"cost of {meter.stage}: {total['calls_paid']} LLM calls paid, {total['calls_cached']} from the "
                     f"cache, {total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens "
                     f"({total['models']}); {total['wall_seconds']:.0f} s wall, {total['cpu_seconds']:.0f} s CPU")
    return {"cost": MetadataValue.json(total)}
