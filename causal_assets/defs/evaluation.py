"""Stage 6, evaluation: every configured retriever over a benchmark's queries -> metrics, runs, failure buckets
and a Markdown report with plots."""

import pandas as pd
from dagster import (AssetDep, AssetExecutionContext, AssetOut, Config, MetadataValue, Output, TableColumn,
                     TableRecord, TableSchema, multi_asset)

from causal_assets.core.benchmarks import load_benchmark
from causal_assets.core.checks import check_metrics, check_ranked_results
from causal_assets.core.evaluation.failures import classify_failures
from causal_assets.core.evaluation.metrics import warm_up
from causal_assets.core.evaluation.report import headline_table, overfitting_gauge, write_report
from causal_assets.core.evaluation.metrics import evaluate, evaluate_per_query
from causal_assets.core.evaluation.runner import metric_value, parse_metric, run_benchmark, score_run
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.index.search import CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, CorpusIndex
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.graph.store import load_chunk_neighbors, load_graph
from causal_assets.core.storage import asset_path, read_parquet
from causal_assets.core.tuning import best_weight
from causal_assets.core.tuning.fusion import choose_within_stats
from causal_assets.core.tuning.store import index_fingerprint, load_tuned
from causal_assets.defs.tuning import TUNED, eager_tolerating_missing
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import benchmark_corpus_mapping, benchmark_partitions
from causal_assets.resources import ANN, LLM, BenchmarkRegistry, Storage

GROUP = "evaluation"
FAILURE_K = 10
WITHIN_STATS_BASELINES = ("bm25", "hybrid", "rrf")   # the configured retrievers the chosen BM25 statistics apply to


class EvaluationConfig(Config):
    retrievers: list[str] | None = None  # default: the benchmark's `retrievers` (registry), with their params
    # Share of the dense score in the hybrid. None: chosen on the benchmark's tune split (never on an eval split).
    fusion_weight: float | None = None
    # BM25 statistics inside each question's candidate set (corpus | candidates). None: chosen on the tune split.
    within_stats: str | None = None
    depth: int = 100
    # Also evaluate the current tuned configuration (tuned_retriever_configs) as `<name>_tuned`.
    tuned: bool = True


@multi_asset(
    partitions_def=benchmark_partitions, group_name=GROUP,
    deps=[*(AssetDep(a, partition_mapping=benchmark_corpus_mapping)
            for a in (CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, "graph_nodes", "graph_edges")),
          AssetDep(TUNED), AssetDep("mc_labels")],
    # Eager: a new tuned configuration re-runs the evaluation; a benchmark never tuned does not block it.
    outs={
        "evaluation_metrics": AssetOut(automation_condition=eager_tolerating_missing(TUNED, "mc_labels"), kinds={"parquet"}, description="Every retriever's metrics (nDCG, MAP, MRR, recall, precision, hit rate at several k) per benchmark split, against the benchmark's judgements (truth qrels) and against the Monte Carlo labels (truth mc_labels); the report with intervals and significance is in the metadata."),
        "evaluation_runs": AssetOut(automation_condition=eager_tolerating_missing(TUNED, "mc_labels"), kinds={"parquet"}, description="Each retriever's ranked results per question (top 100)."),
        "evaluation_failures": AssetOut(automation_condition=eager_tolerating_missing(TUNED, "mc_labels"), kinds={"parquet"}, description="Why a query found no relevant document in the top 10, per query and retriever: vocabulary mismatch, too vague a query, a distractor sharing the keywords, or other (rules in the report)."),
        "evaluation_queries": AssetOut(automation_condition=eager_tolerating_missing(TUNED, "mc_labels"), kinds={"parquet"}, description="The evaluated questions (benchmark, split, query_id, text), to join runs and failures to their text."),
        "evaluation_qrels": AssetOut(automation_condition=eager_tolerating_missing(TUNED, "mc_labels"), kinds={"parquet"}, description="The benchmark's judgements of the evaluated questions (benchmark, split, query_id, chunk_id, relevance)."),
    },
    check_specs=[spec("evaluation_metrics", "metrics_in_unit_range", "Every metric value is finite and in [0, 1]."),
                 spec("evaluation_runs", "runs_ranked", "Finite scores; ranks 1..n per (split, retriever, query); "
                      "no document twice in a ranking.")],
)
def evaluation_report(context: AssetExecutionContext, config: EvaluationConfig, storage: Storage,
                      benchmark_registry: BenchmarkRegistry, llm: LLM):
    """Evaluate every configured retriever on the benchmark's evaluation splits: metrics, runs, failure buckets, the
    questions and judgements, and a report (data/reports/<benchmark>.md) with intervals and significance."""
    spec = benchmark_registry.spec(context.partition_key)
    index = CorpusIndex.load(storage.base, spec.corpus, ann_config=ANN)
    warm_up()
    retrievers = {n: spec.retrievers.get(n, {}) for n in config.retrievers} if config.retrievers else spec.retrievers
    neighbors = load_chunk_neighbors(storage.base, spec.corpus)
    notes = [f"corpus `{spec.corpus}`: {len(index.ids)} chunks; runs kept to depth {config.depth}"]

    weight = config.fusion_weight
    within_stats = config.within_stats or "corpus"
    if spec.tune_split and (weight is None or config.within_stats is None):
        # BM25 statistics inside each question's candidates (corpus | candidates) and the hybrid weight, chosen
        # together on the tune split (ties keep corpus); benchmarks without candidate sets always use corpus.
        tune_bench = load_benchmark(spec, spec.tune_split)
        grid = [weight] if weight is not None else None
        chosen, chosen_weight, sweep = choose_within_stats(index, tune_bench, grid=grid)
        within_stats = config.within_stats or chosen
        if tune_bench.within:
            by = {st: sweep[sweep["within_stats"] == st]["value"].max() for st in sweep["within_stats"].unique()}
            notes.append(f"BM25 inside each question's candidates uses `{within_stats}` statistics (bm25, hybrid, rrf)"
                         + (f", chosen on `{spec.tune_split}` by the hybrid's nDCG@10 (" +
                            ", ".join(f"{st} {v:.4f}" for st, v in by.items()) + ")"
                            if config.within_stats is None else " (configured)"))
        sweep = sweep[sweep["within_stats"] == within_stats]
    if weight is None and spec.tune_split:
        weight = best_weight(sweep)
        notes.append(f"hybrid fusion weight {weight} (dense share) chosen on `{spec.tune_split}` by nDCG@10 "
                     f"({sweep['value'].max():.4f} there); grid " + ", ".join(f"{w:g}" for w in sweep["weight"]))
    elif weight is None:
        weight = 0.5
        notes.append("hybrid fusion weight 0.5: this benchmark has no tune split, and eval splits are never tuned on")
    else:
        notes.append(f"hybrid fusion weight {weight} (configured)")

    # (label, retriever kind, params): the configured retrievers, then the tuned configuration's.
    def configured(n: str, p: dict) -> dict:
        p = {"weight": weight, **p} if n == "hybrid" else dict(p)
        return {"within_stats": within_stats, **p} if n in WITHIN_STATS_BASELINES and within_stats != "corpus" else p

    plan = [(n, n, configured(n, p)) for n, p in retrievers.items()]
    tuned = load_tuned(storage.reports_path / "tuned", spec.name) if config.tuned else None
    tuned_version = ""
    if tuned is not None and tuned.content.get("index") != index_fingerprint(index):
        notes.append(f"tuned config `{tuned.version}` was tuned on another index of `{spec.corpus}`: not evaluated "
                     f"(re-materialize tuned_retriever_configs)")
    elif tuned is not None:
        tuned_version = tuned.version
        plan += [(f"{n}_tuned", n, tuned.params(n)) for n in tuned.retrievers]
        figures = ", ".join(f"{n} {b['value']:.4f} ({b['evaluation']})" for n, b in tuned.retrievers.items())
        notes.append(f"`*_tuned`: tuned config `{tuned.version}`, searched on `{tuned.content['tune_split']}` only "
                     f"by {tuned.content['metric']} ({figures}); selected there: `{tuned.selected}_tuned`")
    elif config.tuned:
        notes.append("no tuned config yet (materialize tuned_retriever_configs): only the configured retrievers")
    # The graph frames feed the learned model's graph feature and the causal chains. A tuned retriever gets them
    # only if it was tuned with them (a model trained without the graph feature must not see it switched on).
    graph = load_graph(storage.base, spec.corpus) if any(k in ("learned", "causal") for _, k, _ in plan) else None
    tuned_graph = graph if tuned_version and tuned.content.get("graph") else None

    # A tuned retriever is scored only on eval splits that share no query with the split it was tuned on
    # (HotpotQA's `dev` contains its `train` half).
    tuned_on = set(load_benchmark(spec, tuned.content["tune_split"]).queries) if tuned_version else set()

    labels_path = asset_path(storage.base, "mc_labels", spec.name)
    mc_labels = read_parquet(labels_path) if labels_path.exists() else None
    label_truth_n = {}

    primary = parse_metric(spec.tuning.get("metric") or "ndcg@10")
    metrics, runs, failures, timings, per_query, questions, judgements = [], [], [], {}, [], [], []
    queries_by_split: dict[str, dict[str, str]] = {}
    n_candidates = None
    for split in spec.eval_splits:
        bench = load_benchmark(spec, split)
        judged = [q for q, labels in bench.qrels.items() if any(v > 0 for v in labels.values())]
        queries_by_split[split] = {q: bench.queries[q] for q in judged if q in bench.queries}
        questions.append(pd.DataFrame({"split": split, "query_id": list(bench.queries),
                                       "text": list(bench.queries.values())}))
        judgements.append(pd.DataFrame([(split, q, d, float(v)) for q, labels in bench.qrels.items()
                                        for d, v in labels.items()],
                                       columns=["split", "query_id", "chunk_id", "relevance"]))
        if bench.within:
            n_candidates = max(n_candidates or 0, max(len(ids) for ids in bench.within.values()))
        overlap = len(tuned_on & set(bench.queries))
        if overlap:
            notes.append(f"`*_tuned` not scored on `{split}`: {overlap} of its queries are in the tune split")
        by_labels = label_qrels(mc_labels, bench.queries)
        label_truth_n[split] = len(by_labels)
        doc_texts = {c: index.text(c) for c in index.ids} if not bench.within else \
            {c: index.text(c) for ids in bench.within.values() for c in ids}
        for name, kind, params in plan:
            if overlap and name.endswith("_tuned"):
                continue
            # The LLM (and the local server) is only touched by LLM-backed options such as llm_entities.
            uses_llm = bool(params.get("llm_entities")) or params.get("answer_model") == "llm"
            retriever = build_retriever(kind, index, params, neighbors, llm.client if uses_llm else None,
                                        tuned_graph if name.endswith("_tuned") else graph)
            rr = run_benchmark(retriever, bench, config.depth, name)
            timings[f"{split}/{name}"] = round(rr.seconds, 2)
            metrics.append(score_run(bench, rr).assign(split=split, truth="qrels"))
            pq = evaluate_per_query(bench.qrels, rr.run, ks=(primary[1],), map_k=primary[1])
            per_query.append(pq[(pq.metric == primary[0]) & (pq.k == primary[1])].assign(split=split, retriever=name))
            if by_labels:
                metrics.append(evaluate(by_labels, rr.run, ks=(1, 2, 3, 5, 10, 20, 100))
                               .assign(retriever=name, split=split, truth="mc_labels"))
            runs.append(rr.frame.assign(split=split, retriever=name))
            failures.append(classify_failures(bench.queries, bench.qrels, rr.run, doc_texts, FAILURE_K, index.terms)
                            .assign(split=split, retriever=name))
            context.log.info(f"{split}/{name}: nDCG@10 {metric_value(metrics[-1], 'ndcg', 10):.4f} in {rr.seconds:.1f}s")

    def finish(frames: list[pd.DataFrame], first: list[str]) -> pd.DataFrame:
        df = pd.concat(frames, ignore_index=True).assign(benchmark=spec.name)
        return df[first + [c for c in df.columns if c not in first]]

    if label_truth_n:
        notes.append("truth `mc_labels`: the Monte Carlo labels' YES documents, graded by their effect, on the "
                     "labelled questions of each split (" + ", ".join(f"{s}: {n}" for s, n in label_truth_n.items())
                     + " questions with a YES label)")
    metrics_df = finish(metrics, ["benchmark", "split", "truth", "retriever", "metric", "k", "value"])
    runs_df = finish(runs, ["benchmark", "split", "retriever", "query_id", "doc_id", "rank", "score"])
    failures_df = finish(failures, ["benchmark", "split", "retriever", "query_id", "bucket"])
    failures_df = failures_df[failures_df["bucket"] != "none"]
    sections = []
    if {"dev", "test"} <= set(metrics_df["split"]):
        # Overfitting gauge: the shared dev sample (which holds the tune half) against the held-out test half.
        tuning_metric = tuned.content["metric"] if tuned_version else "map@10"
        train = {f"{n}_tuned": b["value"] for n, b in tuned.retrievers.items()} if tuned_version else {}
        gauge = overfitting_gauge(metrics_df, tuning_metric, train, ("precision@2",) if bench.within else ())
        sections = ["## Overfitting gauge (shared dev vs held-out test half)", "",
                    f"`*_tuned` rows: the tuning figure on `{tuned.content['tune_split'] if tuned_version else '-'}` "
                    "(cross-validated for learned) in place of dev, which contains the tune half.", "",
                    gauge.to_markdown(index=False), ""]
    queries_df = finish(questions, ["benchmark", "split", "query_id", "text"])
    qrels_df = finish(judgements, ["benchmark", "split", "query_id", "chunk_id", "relevance"])
    markdown, path = write_report(spec.name, metrics_df, failures_df, notes, storage.reports_path,
                                  per_query=pd.concat(per_query, ignore_index=True) if per_query else None,
                                  queries=queries_by_split, n_candidates=n_candidates, labels=mc_labels,
                                  primary=primary, sections=sections)
    n_queries = {s: len(q) for s, q in queries_by_split.items()}
    headline = headline_table(metrics_df, n_candidates=n_candidates, n_queries=n_queries)
    yield Output(metrics_df, output_name="evaluation_metrics", metadata={
        "report": MetadataValue.md(markdown), "report_path": MetadataValue.path(str(path)),
        "headline": table_metadata(headline), "queries_per_split": MetadataValue.json(n_queries),
        **({"headline_mc_labels": table_metadata(headline_table(metrics_df, "mc_labels", n_candidates=n_candidates))}
           if (metrics_df["truth"] == "mc_labels").any() else {}),
        "fusion_weight": weight,
        "tuned_config_version": tuned_version,
        "retrieval_seconds": MetadataValue.json(timings),
        **{f"ndcg@10/{r['split']}/{r['retriever']}": float(r["ndcg@10"]) for r in headline.to_dict("records")
           if "ndcg@10" in r},
    })
    yield Output(runs_df, output_name="evaluation_runs", metadata={"queries": int(runs_df["query_id"].nunique())})
    yield Output(failures_df, output_name="evaluation_failures",
                 metadata={"by_bucket": MetadataValue.json(failures_df.groupby(["retriever", "bucket"]).size()
                                                           .unstack(fill_value=0).to_dict(orient="index"))})
    yield Output(queries_df, output_name="evaluation_queries", metadata={"queries": MetadataValue.json(
        queries_df.groupby("split").size().to_dict())})
    yield Output(qrels_df, output_name="evaluation_qrels", metadata={"judgements": len(qrels_df)})
    yield check_result("evaluation_metrics", "metrics_in_unit_range", check_metrics(metrics_df))
    yield check_result("evaluation_runs", "runs_ranked", check_ranked_results(runs_df, ["split", "retriever", "query_id"]))


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
