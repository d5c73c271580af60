"""Stage 6, evaluation: every configured retriever over a benchmark's queries -> metrics, runs, failure buckets
and a Markdown report with plots."""

import pandas as pd
from dagster import (AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetDep, AssetExecutionContext, AssetKey,
                     AssetOut, AssetRecordsFilter, Config, DagsterEventType, Failure, MetadataValue, Output,
                     TableColumn, TableRecord, TableSchema, multi_asset)
from pydantic import Field

from causal_assets.core.foundation.limits import MAX_DEPTH
from causal_assets.core.stored.artifacts import CorpusArtifacts
from causal_assets.core.outputs.checks import check_answers, check_metrics, check_ranked_results
from causal_assets.core.measures.metrics import warm_up
from causal_assets.core.evaluation.report import headline_table, write_report
from causal_assets.core.measures.metrics import parse_metric
from causal_assets.core.evaluation.suite import evaluate_plan, plan_evaluation
from causal_assets.core.evaluation import gate as gates
from causal_assets.core.evaluation.drilldown import per_query_table, worst_queries
from causal_assets.core.evaluation.html import write_html
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.llm import ledger
from causal_assets.core.retrievers.factory import uses_scorer
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.stored.tuned import index_fingerprint, load_tuned
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import CORPUS_ARTIFACTS, benchmark_partitions
from causal_assets.core.tuning.records import (RERANKER, TUNED, TUNED_EMBEDDINGS, adopted_reranker,
                                               tuned_embeddings_path)
from causal_assets.defs.shared import EVALUATION_GROUP, eager_tolerating_missing, ensure_view, record_cost
from causal_assets.resources import ANN, LLM, BenchmarkRegistry, Storage

GROUP = EVALUATION_GROUP
# a new tuned configuration re-runs the evaluation; a benchmark never tuned, labelled or encoder-tuned does not block it
EAGER = eager_tolerating_missing(TUNED, "mc_labels", TUNED_EMBEDDINGS, RERANKER)


class EvaluationConfig(Config):
    retrievers: list[str] | None = None  # default: the benchmark's `retrievers` (registry), with their params
    # Share of the dense score in the configured hybrid. None: the tuned hybrid's (chosen on the tune split by
    # tuned_retriever_configs), else 0.5.
    fusion_weight: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    # BM25 statistics inside each question's candidate set (corpus | candidates) of the configured bm25, hybrid and
    # rrf. None: the tuned hybrid's, else corpus.
    within_stats: str | None = None
    depth: int = Field(default=100, ge=1, le=MAX_DEPTH)   # ranks kept per question and retriever
    # Also evaluate the tuned configuration of the latest tuned_retriever_configs materialization as `<name>_tuned`.
    tuned: bool = True
    # Accept this run as the benchmark's baseline for the regression gate once it has passed it (as
    # `causal-assets accept <benchmark>` does afterwards).
    accept: bool = False


@multi_asset(
    partitions_def=benchmark_partitions, group_name=GROUP,
    deps=[*CORPUS_ARTIFACTS, AssetDep(TUNED), AssetDep("mc_labels"), AssetDep(TUNED_EMBEDDINGS), AssetDep(RERANKER)],
    # Eager: a new tuned configuration re-runs the evaluation; a benchmark never tuned does not block it.
    outs={
        "evaluation_metrics": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="Every retriever's metrics (nDCG, MAP, MRR, recall, precision, hit rate at several k) per benchmark split, against the benchmark's judgements (truth qrels) and against the Monte Carlo labels (truth mc_labels); the report with intervals and significance is in the metadata."),
        "evaluation_runs": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="Each retriever's ranked results per question (top 100)."),
        "evaluation_failures": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="Why a query found no relevant document in the top 10, per query and retriever: vocabulary mismatch, too vague a query, a distractor sharing the keywords, or other (rules in the report)."),
        "evaluation_queries": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="The evaluated questions (benchmark, split, query_id, text), to join runs and failures to their text."),
        "evaluation_qrels": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="The benchmark's judgements of the evaluated questions (benchmark, split, query_id, chunk_id, relevance)."),
        "evaluation_answers": AssetOut(automation_condition=EAGER, kinds={"parquet"}, description="Answer utility: per split, retriever (and the references @gold, @labels, @random), k and question with an answer, the solver's log-likelihood of the gold answer given the top k documents, without context, and their difference answer_gain in nats (the benchmark registry's `answers:`; empty where it is off)."),
        "evaluation_per_query": AssetOut(automation_condition=EAGER, kinds={"parquet", "html"}, description="The evaluation per question and retriever: the ranks of its gold and YES documents, nDCG/recall/MRR@10 against the judgements and nDCG@10 against the labels, its answer gain and its failure bucket; the worst questions in the metadata and the whole table, sortable, in data/reports/<benchmark>.html."),
    },
    check_specs=[spec("evaluation_metrics", "metrics_in_unit_range", "Every ranking metric value is finite and in "
                      "[0, 1]; every answer gain (truth answers, nats) is finite."),
                 spec("evaluation_answers", "answers_finite", "Finite log-likelihoods and gains; gain = with - "
                      "without context; at most k documents shown."),
                 spec("evaluation_runs", "runs_ranked", "Finite scores; ranks 1..n per (split, retriever, query); "
                      "no document twice in a ranking."),
                 AssetCheckSpec("no_regression", asset="evaluation_metrics", blocking=True,
                                description="The gated figures (the benchmark registry's `gate:`, default nDCG@10 of "
                                            "the selected tuned retriever, else bm25) did not drop below the "
                                            "accepted baseline's by more than `gate.min_drop` with p < "
                                            "`gate.alpha` (paired randomization test on the same questions).")],
)
def evaluation_tables(context: AssetExecutionContext, config: EvaluationConfig, storage: Storage,
                      benchmark_registry: BenchmarkRegistry, llm: LLM):
    """Evaluate every configured retriever on the benchmark's evaluation splits: metrics, runs, failure buckets, the
    questions and judgements, and a report (data/reports/<benchmark>.md) with intervals and significance."""
    spec = benchmark_registry.spec(context.partition_key)
    meter = ledger.Meter.start(spec.name, "evaluation", context.run_id)
    artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN)
    warm_up()
    version = tuned_version(context, spec.name) if config.tuned else None
    tuned = load_tuned(storage.reports_path / "tuned", spec.name, version) if version else None
    configured = {n: spec.retrievers.get(n, {}) for n in config.retrievers} if config.retrievers else spec.retrievers
    # `*_tuned` runs use the index they were tuned on: with the fine-tuned encoder's vectors where tuned_encoder
    # adopted one (the configured baselines keep the corpus's vectors)
    tuned_artifacts = artifacts
    encoder = tuned_embeddings_path(storage.base, spec.name) if tuned is not None else None
    if encoder is not None and tuned.content.get("index") != index_fingerprint(artifacts.index):
        tuned_artifacts = CorpusArtifacts(storage.base, spec.corpus, ANN, encoder)
    # the selected tuned retriever reranked by the cross-encoder tuned_reranker adopted, where it adopted one
    reranker = adopted_reranker(storage.base, spec.name) if tuned is not None else None
    plan = plan_evaluation(configured, tuned, index_fingerprint(tuned_artifacts.index), spec.corpus, spec.tune_split,
                           config.fusion_weight, config.within_stats, reranker)
    if config.tuned and version is None and spec.tune_split:
        plan.notes.append("no tuned config yet (materialize tuned_retriever_configs): only the configured retrievers")
    labels_path = asset_path(storage.base, "mc_labels", spec.name)
    mc_labels = read_parquet(labels_path) if labels_path.exists() else None
    primary = parse_metric(spec.tuning.get("metric") or "ndcg@10")
    # a causal run without a named answer model is measured with the LLM's likelihood where it can score prompts
    scorer = llm.scorer if any(uses_scorer(r.kind, r.params, True) for r in plan.runs) \
        and llm.scores_prompts() else None

    def answer_scorer():
        """The labels' scorer (`monte_carlo.solver`), or None where the LLM cannot score prompts."""
        return llm.scorer(spec.monte_carlo.get("solver")) if llm.scores_prompts() else None

    result = evaluate_plan(spec, artifacts, plan, mc_labels, primary, config.depth, lambda: llm.client,
                           context.log.info, scorer=scorer, tuned_artifacts=tuned_artifacts,
                           answer_scorer=answer_scorer,
                           value_metrics=tuple(parse_metric(m) for m in spec.gate_settings.metrics))
    metrics_df = result.metrics
    # The blocking checks on the tables in memory, before the report or any table is written: a failed evaluation
    # leaves the previous one in place (NaN scores wrote all six tables and the report, then failed a check).
    checks = {("evaluation_metrics", "metrics_in_unit_range"): check_metrics(metrics_df),
              ("evaluation_answers", "answers_finite"): check_answers(result.answers),
              ("evaluation_runs", "runs_ranked"): check_ranked_results(result.runs, ["split", "retriever", "query_id"])}
    failed = {f"{asset} {name}": outcome.metadata for (asset, name), outcome in checks.items() if not outcome.passed}
    if failed:
        why = "; ".join(f"{check}: " + ", ".join(f"{k} {figures.get(k)}" for k in figures["failing"].split(", "))
                        for check, figures in failed.items())
        raise Failure(f"evaluation of {spec.name!r}: check {why}; nothing was written (the previous evaluation "
                      f"stays)", metadata={k: MetadataValue.json(v) for k, v in failed.items()})
    config_version = plan.tuned.version if plan.tuned is not None else ""
    selected = plan.tuned.selected if plan.tuned is not None else None
    outcome, comparison = gate_this_run(context, storage, spec, result.values, selected, config_version,
                                        config.accept)
    cost = record_cost(context, storage, meter)
    costs = ledger.latest_by_stage(ledger.read_ledger(storage.base, spec.name))
    cost_lines = cost_section(costs)

    markdown, path = write_report(spec.name, metrics_df, result.failures, result.notes, storage.reports_path,
                                  per_query=result.per_query, queries=result.judged,
                                  n_candidates=result.n_candidates, labels=mc_labels, primary=primary,
                                  sections=[*gate_section(outcome, comparison), *cost_lines, *result.sections],
                                  answers=result.answers,
                                  answer_notes=result.answer_notes, selection=result.selection,
                                  selected=plan.tuned.selected if plan.tuned is not None else None)
    n_queries = {s: len(q) for s, q in result.judged.items()}
    headline = headline_table(metrics_df, n_candidates=result.n_candidates, n_queries=n_queries)
    drill = per_query_table(spec.name, result.values, result.runs, result.qrels, label_qrels(mc_labels),
                            result.answers, result.failures, result.queries)
    pngs = [(p.stem.replace("_", " "), p.read_bytes()) for p in sorted(storage.reports_path.glob(f"{spec.name}_*.png"))
            if p.stem.split("_")[-1] in ("curves", "answers")]
    html_path = write_html(spec.name, storage.reports_path, headline, drill, mc_labels, result.queries,
                           outcome.message, outcome.passed, gates.comparison_table(comparison) if comparison else None,
                           costs.drop(columns=["run_id", "started_at"]) if len(costs) else None, pngs)
    yield Output(metrics_df, output_name="evaluation_metrics", metadata={**cost,
        "gate": MetadataValue.md(("passed: " if outcome.passed else "FAILED: ") + outcome.message),
        "html_report": MetadataValue.path(str(html_path)),
        "report": MetadataValue.md(markdown), "report_path": MetadataValue.path(str(path)),
        "headline": table_metadata(headline), "queries_per_split": MetadataValue.json(n_queries),
        **({"headline_mc_labels": table_metadata(headline_table(metrics_df, "mc_labels",
                                                                 n_candidates=result.n_candidates))}
           if (metrics_df["truth"] == "mc_labels").any() else {}),
        "fusion_weight": plan.weight, "within_stats": plan.within_stats,
        "tuned_config_version": plan.tuned.version if plan.tuned is not None else "",
        "retrieval_seconds": MetadataValue.json(result.seconds),
        **{f"ndcg@10/{r['split']}/{r['retriever']}": float(r["ndcg@10"]) for r in headline.to_dict("records")
           if "ndcg@10" in r},
    })
    runs_df, failures_df, queries_df = result.runs, result.failures, result.queries
    yield Output(runs_df, output_name="evaluation_runs", metadata={"queries": int(runs_df["query_id"].nunique())})
    yield Output(failures_df, output_name="evaluation_failures",
                 metadata={"by_bucket": MetadataValue.json(failures_df.groupby(["retriever", "bucket"]).size()
                                                           .unstack(fill_value=0).to_dict(orient="index"))})
    yield Output(queries_df, output_name="evaluation_queries", metadata={"queries": MetadataValue.json(
        queries_df.groupby("split").size().to_dict())})
    yield Output(result.qrels, output_name="evaluation_qrels", metadata={"judgements": len(result.qrels)})
    worst = worst_queries(drill, gates.gated_retriever(spec.gate_settings, selected))
    yield Output(drill, output_name="evaluation_per_query", metadata={
        **cost, "rows": len(drill), "html_report": MetadataValue.path(str(html_path)),
        "worst_queries": MetadataValue.md(worst.to_markdown(index=False) if len(worst) else "-")})
    answers = result.answers
    yield Output(answers, output_name="evaluation_answers", metadata={
        "rows": len(answers), "questions": int(answers["query_id"].nunique()) if len(answers) else 0,
        "notes": MetadataValue.md("\n".join(f"- {n}" for n in result.answer_notes) or "-"),
        **{f"answer_gain@{k}/{s}/{r}": float(v) for (s, r, k), v in
           answers.groupby(["split", "retriever", "k"], sort=False)["answer_gain"].mean().items()}})
    for (asset, name), result_of_check in checks.items():
        yield check_result(asset, name, result_of_check)
    yield AssetCheckResult(check_name="no_regression", asset_key="evaluation_metrics", passed=outcome.passed,
                           severity=AssetCheckSeverity.ERROR, description=outcome.message,
                           metadata={"message": outcome.message, **{k: MetadataValue.json(v) if isinstance(v, list)
                                                                    else v for k, v in outcome.metadata().items()}})


def gate_this_run(context: AssetExecutionContext, storage: Storage, spec, values: pd.DataFrame,
                  selected: str | None, config_version: str, accept: bool):
    """This run's per-query values stored (its history file), held to the accepted baseline (the gate), and the
    comparison with that baseline for the report; with `accept`, the run becomes the baseline once it passed."""
    gates.write_history(storage.base, spec.name, context.run_id, values, config_version)
    ensure_view(context, storage, gates.HISTORY)
    baseline = gates.read_baseline(storage.base, spec.name)
    outcome = gates.check_gate(spec.gate_settings, values, baseline, selected, spec.eval_splits[0])
    (context.log.info if outcome.passed else context.log.error)(f"gate of {spec.name}: {outcome.message}")
    comparison = gates.compare_runs(baseline, values) if baseline is not None else []
    if accept and outcome.passed:
        gates.accept(storage.base, spec.name, context.run_id)
        ensure_view(context, storage, gates.BASELINES)
        context.log.info(f"run {context.run_id} accepted as the baseline of {spec.name}")
    return outcome, comparison


def gate_section(outcome, comparison) -> list[str]:
    lines = ["## Regression gate", "", ("- passed: " if outcome.passed else "- **FAILED**: ") + outcome.message, ""]
    if comparison:
        lines += [f"## Against the accepted baseline (run {outcome.baseline_run[:8]})", "",
                  "Δ: this run minus the baseline on the questions both scored; interval: bootstrap over those "
                  "questions; p: paired randomization test; the questions that changed most in each direction.", "",
                  gates.comparison_table(comparison).to_markdown(index=False), ""]
    return lines


def cost_section(costs: pd.DataFrame) -> list[str]:
    """The cost ledger's latest run of each stage of the benchmark, and their sum."""
    if not len(costs):
        return []
    shown = costs.drop(columns=["run_id", "started_at", "benchmark"])
    total = ledger.totals(costs)
    return ["## Cost (the latest run of each stage: LLM calls paid and from the cache, tokens, seconds)", "",
            shown.to_markdown(index=False), "",
            f"- sum: {total['calls_paid']} calls paid, {total['calls_cached']} from the cache, "
            f"{total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens, "
            f"{costs.groupby('stage')['wall_seconds'].max().sum():.0f} s wall, "
            f"{costs.groupby('stage')['cpu_seconds'].max().sum():.0f} s CPU (table `cost_ledger`)", ""]


def tuned_version(context: AssetExecutionContext, benchmark: str) -> str | None:
    """The tuned configuration version recorded by the `tuned_retriever_configs` materialization this evaluation
    follows: the one of this run when the run tuned the benchmark (a tuning run started meanwhile does not change
    what this run evaluates), else the latest one. None: never tuned, or nothing to tune. Never whatever a later
    or crashed tuning left in the store."""
    key = AssetKey(TUNED)
    ours = [r.event_log_entry.asset_materialization for r in context.instance.get_records_for_run(
        context.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records]
    ours = [m for m in ours if m is not None and m.asset_key == key and m.partition == benchmark]
    if ours:
        materialization = ours[-1]
    else:
        latest = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, asset_partitions=[benchmark]), limit=1).records
        if not latest:
            return None
        materialization = latest[0].asset_materialization
    recorded = materialization.metadata.get("config_version")
    return str(recorded.value) if recorded is not None and recorded.value else None


def table_metadata(table: pd.DataFrame) -> MetadataValue:
    """A frame as Dagster table metadata (a table in the UI, not Markdown text)."""
    kinds = {"i": "int", "f": "float", "b": "bool"}
    schema = TableSchema([TableColumn(str(c), kinds.get(t.kind, "string")) for c, t in table.dtypes.items()])

    def plain(v):
        if hasattr(v, "item"):
            v = v.item()
        return None if isinstance(v, float) and v != v else v

    return MetadataValue.table([TableRecord({str(k): plain(v) for k, v in r.items()}) for r in table.to_dict("records")],
                               schema)
