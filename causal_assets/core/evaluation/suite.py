"""The evaluation of one benchmark: which retrievers run with which parameters (the plan), every run scored
against the benchmark's judgements and against the Monte Carlo labels, failure buckets, and the report's notes.

Parameters are chosen in one place, `tuned_retriever_configs`: the configured baselines (bm25, hybrid, rrf) take
the BM25 statistics and the hybrid weight its hybrid search chose on the tune split, and the tuned retrievers
run as `<name>_tuned`. A tuned retriever is scored only on eval splits that share no question with the split it
was tuned on (HotpotQA's `dev` holds its `train` half).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import pandas as pd

from causal_assets.core.stored.artifacts import CorpusArtifacts
from causal_assets.core.registry.benchmarks import Benchmark, BenchmarkSpec
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.evaluation.answers import (ANSWER_COLUMNS, REFERENCES, AnswerParams, answer_metrics,
                                                   answer_questions, build_questions, doc_chars,
                                                   document_cut, label_rankings, measure_answers,
                                                   planned_calls)
from causal_assets.core.evaluation.failures import CorpusTerms, classify_failures
from causal_assets.core.measures.metrics import evaluate, evaluate_per_query
from causal_assets.core.evaluation.report import overfitting_gauge, truth_selection_section
from causal_assets.core.evaluation.runner import metric_value, run_benchmark, score_run
from causal_assets.core.evaluation.truth import label_qrels
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.core.llm.scoring import Scorer
from causal_assets.core.retrievers.factory import build_retriever, uses_scorer
from causal_assets.core.registry.retrievers import FIRST_STAGE, KINDS
from causal_assets.core.stored.tuned import TunedConfig

FAILURE_K = 10
LABEL_KS = (1, 2, 3, 5, 10, 20, 100)
# The cut-offs of the per-query values every run stores (the gate, `compare` and the drill-down read them)
VALUE_KS = (1, 3, 5, 10, 20, 100)
DEFAULT_WEIGHT, DEFAULT_WITHIN_STATS = 0.5, "corpus"


@dataclass(frozen=True)
class PlannedRun:
    label: str                 # the retriever's row in the report: `hybrid`, `hybrid_tuned`
    kind: str                  # the retriever factory's name
    params: dict[str, Any]

    @property
    def tuned(self) -> bool:
        return self.label.endswith("_tuned")


@dataclass
class EvaluationPlan:
    runs: list[PlannedRun]
    tuned: TunedConfig | None           # the tuned configuration evaluated (None: none, or tuned on another index)
    weight: float                        # the hybrid's dense share used by the configured hybrid
    within_stats: str                    # BM25 statistics of the configured bm25/hybrid/rrf
    notes: list[str] = field(default_factory=list)


def plan_evaluation(configured: dict[str, dict[str, Any]], tuned: TunedConfig | None, fingerprint: dict[str, Any],
                    corpus: str, tune_split: str | None, weight: float | None = None,
                    within_stats: str | None = None, reranker: dict[str, Any] | None = None) -> EvaluationPlan:
    """The runs of an evaluation: each configured retriever, then each retriever of `tuned` as `<name>_tuned`, then
    the selected one reranked by `reranker` as `cross_encoder_tuned` (`reranker`: the adopted cross-encoder's
    params and `version`, tuned_reranker). `fingerprint`: the index evaluated on (a configuration tuned on another
    index is not evaluated). `weight` / `within_stats`: explicit choices for the configured baselines; None takes
    the tuned hybrid's."""
    notes: list[str] = []
    if tuned is not None and tuned.content.get("index") != fingerprint:
        notes.append(f"tuned config `{tuned.version}` was tuned on another index of `{corpus}`: not evaluated "
                     f"(re-materialize tuned_retriever_configs)")
        tuned = None
    chosen = tuned.params(FIRST_STAGE) if tuned is not None and FIRST_STAGE in tuned.retrievers else {}
    source = (f"chosen by tuned_retriever_configs on `{tuned.content['tune_split']}` ({tuned.content['metric']} "
              f"{tuned.retrievers[FIRST_STAGE]['value']:.4f} there)") if chosen else ""
    missing = "no tuned hybrid for this index" if tune_split else \
        "this benchmark has no tune split, and eval splits are never tuned on"

    def pick(key: str, given: Any, default: Any, what: Callable[[Any], str], note_default: bool = True) -> Any:
        """An explicit value, else the tuned hybrid's, else the default; the report says which."""
        value, why = (given, "configured") if given is not None else \
            (chosen[key], source) if key in chosen else (default, f"the default: {missing}")
        if note_default or value != default:
            notes.append(f"{what(value)} ({why})")
        return value

    weight = float(pick("weight", weight, DEFAULT_WEIGHT, lambda v: f"hybrid fusion weight {v} (dense share)"))
    within_stats = str(pick("within_stats", within_stats, DEFAULT_WITHIN_STATS,
                            lambda v: f"BM25 inside each question's candidates uses `{v}` statistics (bm25, hybrid, "
                                      f"rrf)", note_default=False))

    def baseline(name: str, params: dict[str, Any]) -> dict[str, Any]:
        takes = KINDS[name].takes_tuned if name in KINDS else ()   # the tuned first stage's choices it takes
        params = {"weight": weight, **params} if "weight" in takes else dict(params)
        if "within_stats" in takes and within_stats != DEFAULT_WITHIN_STATS:
            params = {"within_stats": within_stats, **params}
        return params

    runs = [PlannedRun(n, n, baseline(n, p)) for n, p in configured.items()]
    if tuned is not None:
        runs += [PlannedRun(f"{n}_tuned", n, tuned.params(n)) for n in tuned.retrievers]
        figures = ", ".join(f"{n} {b['value']:.4f} ({b['evaluation']})" for n, b in tuned.retrievers.items())
        notes.append(f"`*_tuned`: tuned config `{tuned.version}`, searched on `{tuned.content['tune_split']}` only "
                     f"by {tuned.content['metric']} ({figures}); selected there: `{tuned.selected}_tuned`")
        if tuned.content.get("selection_note"):   # how far the train questions separate the selection
            notes.append(f"how far the selection can be trusted: {tuned.content['selection_note']}")
        if reranker is not None and tuned.selected:
            params = {k: v for k, v in reranker.items() if k != "version"}
            runs.append(PlannedRun("cross_encoder_tuned", "cross_encoder",
                                   {"base": {tuned.selected: tuned.params(tuned.selected)}, **params}))
            notes.append(f"`cross_encoder_tuned`: the selected `{tuned.selected}_tuned`, its top "
                         f"{params['depth']} reranked by the cross-encoder `{reranker['version']}` (tuned_reranker: "
                         f"fitted on the tune split, adopted and weighted {params['weight']} on its held-out queries)")
    return EvaluationPlan(runs, tuned, weight, within_stats, notes)


@dataclass
class EvaluationResult:
    metrics: pd.DataFrame        # benchmark, split, truth, retriever, metric, k, value
    runs: pd.DataFrame           # benchmark, split, retriever, query_id, chunk_id, rank, score
    failures: pd.DataFrame       # benchmark, split, retriever, query_id, bucket, ... (misses only)
    queries: pd.DataFrame        # benchmark, split, query_id, text
    qrels: pd.DataFrame          # benchmark, split, query_id, chunk_id, relevance
    per_query: pd.DataFrame | None   # the primary metric per (split, retriever, query), for significance
    judged: dict[str, dict[str, str]]   # split -> {query id: text} of the judged queries
    notes: list[str]
    sections: list[str]          # extra Markdown sections of the report (the overfitting gauge)
    seconds: dict[str, float]    # "<split>/<retriever>" -> retrieval seconds
    n_candidates: int | None     # the largest per-question candidate set (None: whole-corpus ranking)
    # the answer utility: benchmark, split, retriever, k, query_id, loglik, loglik_no_context, answer_gain, n_docs
    answers: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ANSWER_COLUMNS))
    answer_notes: list[str] = field(default_factory=list)   # its cost, or why it was not measured
    selection: list[str] = field(default_factory=list)      # the report's "which truth selects" lines
    # per (split, truth, retriever, query): every metric at VALUE_KS (and the answer gain per k): gate.VALUE_COLUMNS
    values: pd.DataFrame = field(default_factory=pd.DataFrame)


def evaluate_plan(spec: BenchmarkSpec, artifacts: CorpusArtifacts, plan: EvaluationPlan,
                  mc_labels: pd.DataFrame | None, primary: tuple[str, int], depth: int = 100,
                  llm_client: Callable[[], Any] | None = None,
                  log: Callable[[str], None] = lambda m: None,
                  scorer: Callable[[], Any] | None = None,
                  tuned_artifacts: CorpusArtifacts | None = None,
                  answer_scorer: Callable[[], Scorer | None] | None = None,
                  value_metrics: tuple[tuple[str, int], ...] = ()) -> EvaluationResult:
    """Run `plan` on every eval split of `spec`; the `*_tuned` runs on `tuned_artifacts`' index (the one they were
    tuned on: another encoder's vectors of the same chunks), else on `artifacts`'.

    `answer_scorer()`: the labels' scorer for the answer utility (`spec.answers`), or None when the LLM cannot
    score prompts (then the report says so); asked for only when some evaluated question has an answer and the
    registry leaves the answer utility on. None: no answer utility.

    `llm_client()` is asked for only by LLM-backed options
    (`llm_entities`, `answer_model: llm`) and `scorer()` only by the causal retriever's likelihood model (named, or
    its default when a scorer is given), so an evaluation without them starts no LLM server and loads no model.

    `value_metrics`: (metric, k) stored per query beside every metric at VALUE_KS (the gated ones)."""
    index = artifacts.index
    tuned_index = tuned_artifacts.index if tuned_artifacts is not None else index
    notes = [f"corpus `{spec.corpus}`: {len(index.ids)} chunks; runs kept to depth {depth}", *plan.notes]
    if tuned_index is not index and plan.tuned is not None:
        notes.append(f"`*_tuned` runs embed with the encoder fine-tuned on `{plan.tuned.content['tune_split']}` "
                     f"(tuned_encoder: `{tuned_index.embedder.model_name}`); the other runs with the corpus's")
    tuned = plan.tuned
    # The graph frames feed the learned model's graph feature and the causal chains. A tuned retriever gets them
    # only if it was tuned with them (a model trained without the graph feature must not see it switched on).
    graph = artifacts.graph if any("graph" in KINDS[r.kind].needs for r in plan.runs if r.kind in KINDS) else None
    tuned_graph = graph if tuned is not None and tuned.content.get("graph") else None
    tuned_on = set(artifacts.benchmark(spec, tuned.content["tune_split"]).queries) if tuned is not None else set()

    metrics, runs, failures, per_query, questions, judgements, values = [], [], [], [], [], [], []
    answer_inputs: list[tuple[str, Benchmark, list[str]]] = []   # split, bench, evaluated question ids
    seconds: dict[str, float] = {}
    judged_by_split: dict[str, dict[str, str]] = {}
    label_questions: dict[str, int] = {}
    n_candidates = None
    # Every eval split is checked before anything runs: a split with nothing to score wrote all-NaN metrics and a
    # NaN report before its check failed.
    benches = {split: artifacts.benchmark(spec, split) for split in spec.eval_splits}
    for split, bench in benches.items():
        gold = [q for q, labels in bench.qrels.items() if any(v > 0 for v in labels.values())]
        if not gold and not label_qrels(mc_labels, bench.queries):
            labelled = "" if mc_labels is None else ", and none of them has a YES label"
            raise CorpusError(f"benchmark {spec.name!r}: eval split {split!r} has nothing to evaluate: "
                              f"{len(bench.queries)} questions, none with gold documents{labelled}"
                              + ("" if mc_labels is not None or not bench.labelable_ids() else
                                 f" (label them first: `causal-assets label {spec.name}`)")
                              + "; nothing written")
    for split in spec.eval_splits:
        bench = benches[split]
        by_labels = label_qrels(mc_labels, bench.queries)
        judged = [q for q, labels in bench.qrels.items() if any(v > 0 for v in labels.values())]
        # without gold on this split the labels are the only truth: the runs and the failure buckets use them
        truth = bench.qrels if judged else by_labels
        if not judged:
            notes.append(f"`{split}`: no question has gold documents; its figures are against the Monte Carlo "
                         f"labels only ({len(by_labels)} questions with a YES label)")
        # every question with gold or with a YES label is run (the labels' questions may have no gold)
        run_bench = replace(bench, qrels={q: bench.qrels.get(q) or by_labels.get(q, {}) for q in bench.queries
                                          if q in bench.qrels or q in by_labels})
        judged_by_split[split] = {q: bench.queries[q] for q in (judged or by_labels) if q in bench.queries}
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
        label_questions[split] = len(by_labels)
        answer_inputs.append((split, bench, list(judged_by_split[split])))
        corpus_terms = CorpusTerms.of({c: index.text(c) for c in index.ids} if not bench.within else
                                      {c: index.text(c) for ids in bench.within.values() for c in ids}, index.terms)
        for run in plan.runs:
            if overlap and run.tuned:
                continue
            uses_llm = bool(run.params.get("llm_entities")) or run.params.get("answer_model") == "llm"
            scores = uses_scorer(run.kind, run.params, scorer is not None)
            retriever = build_retriever(run.kind, tuned_index if run.tuned else index, run.params, artifacts.neighbors,
                                        llm_client() if uses_llm and llm_client else None,
                                        tuned_graph if run.tuned else graph,
                                        scorer() if scores and scorer else None)
            rr = run_benchmark(retriever, run_bench, depth, run.label,
                               progress=log if KINDS[run.kind].progress else None)
            seconds[f"{split}/{run.label}"] = round(rr.seconds, 2)
            if judged:
                metrics.append(score_run(bench, rr).assign(split=split, truth="qrels"))
            pq = evaluate_per_query(truth, rr.run, ks=(primary[1],), map_k=primary[1])
            per_query.append(pq[(pq.metric == primary[0]) & (pq.k == primary[1])]
                             .assign(split=split, retriever=run.label))
            if by_labels:
                metrics.append(evaluate(by_labels, rr.run, ks=LABEL_KS)
                               .assign(retriever=run.label, split=split, truth="mc_labels"))
            for name, qrels in (("qrels", bench.qrels if judged else {}), ("mc_labels", by_labels)):
                if qrels:
                    values.append(query_values(qrels, rr.run, value_metrics)
                                  .assign(split=split, truth=name, retriever=run.label))
            runs.append(rr.frame.assign(split=split, retriever=run.label))
            failures.append(classify_failures(run_bench.queries, truth, rr.run, corpus_terms, FAILURE_K)
                            .assign(split=split, retriever=run.label))
            log(f"{split}/{run.label}: nDCG@10 {metric_value(metrics[-1], 'ndcg', 10):.4f} in {rr.seconds:.1f}s")

    def finish(frames: list[pd.DataFrame], first: list[str]) -> pd.DataFrame:
        df = pd.concat(frames, ignore_index=True).assign(benchmark=spec.name)
        return df[first + [c for c in df.columns if c not in first]]

    if any(label_questions.values()):   # a benchmark without labels says nothing about labels
        notes.append("truth `mc_labels`: the Monte Carlo labels' YES documents, graded by their effect, on the "
                     "labelled questions of each split (" + ", ".join(f"{s}: {n}" for s, n in label_questions.items())
                     + " questions with a YES label)")
    elif mc_labels is not None and len(mc_labels):
        notes.append(f"the Monte Carlo labels ({mc_labels['query_id'].nunique()} questions) have no YES label on a "
                     f"question of the eval splits: no figures against them")
    answers, answer_notes = pd.DataFrame(columns=ANSWER_COLUMNS), []
    if answer_scorer is not None and runs:
        every_run = pd.concat(runs, ignore_index=True)
        answers, answer_notes = answer_utility(
            spec, artifacts, [(split, bench, judged, every_run[every_run["split"] == split])
                              for split, bench, judged in answer_inputs], mc_labels, answer_scorer, log, llm_client)
        if len(answers):
            metrics.append(answer_metrics(answers))
            values.append(answers.rename(columns={"answer_gain": "value"})
                          .assign(truth="answers", metric="answer_gain")
                          [["split", "truth", "retriever", "query_id", "metric", "k", "value"]])
    metrics_df = finish(metrics, ["benchmark", "split", "truth", "retriever", "metric", "k", "value"])
    failures_df = finish(failures, ["benchmark", "split", "retriever", "query_id", "bucket"])
    sections: list[str] = []
    if {"dev", "test"} <= set(metrics_df["split"]):
        # Overfitting gauge: the shared dev sample (which holds the tune half) against the held-out test half.
        train = {f"{n}_tuned": b["value"] for n, b in tuned.retrievers.items()} if tuned is not None else {}
        gauge = overfitting_gauge(metrics_df, tuned.content["metric"] if tuned is not None else "map@10", train,
                                  ("precision@2",) if n_candidates else ())
        sections = ["## Overfitting gauge (shared dev vs held-out test half)", "",
                    f"`*_tuned` rows: the tuning figure on `{tuned.content['tune_split'] if tuned else '-'}` "
                    "(cross-validated for learned) in place of dev, which contains the tune half.", "",
                    gauge.to_markdown(index=False), ""]
    return EvaluationResult(
        metrics=metrics_df,
        runs=finish(runs, ["benchmark", "split", "retriever", "query_id", "chunk_id", "rank", "score"]),
        failures=failures_df[failures_df["bucket"] != "none"],
        queries=finish(questions, ["benchmark", "split", "query_id", "text"]),
        qrels=finish(judgements, ["benchmark", "split", "query_id", "chunk_id", "relevance"]),
        per_query=pd.concat(per_query, ignore_index=True) if per_query else None,
        judged=judged_by_split, notes=notes, sections=sections, seconds=seconds, n_candidates=n_candidates,
        answers=answers, answer_notes=answer_notes,
        values=finish(values, ["benchmark", "split", "truth", "retriever", "query_id", "metric", "k", "value"])
        if values else pd.DataFrame(columns=["benchmark", "split", "truth", "retriever", "query_id", "metric", "k",
                                             "value"]),
        selection=truth_selection_section(tuned.content.get("truths") if tuned is not None else None, metrics_df,
                                          answers, primary))


def query_values(qrels, run, extra: tuple[tuple[str, int], ...] = ()) -> pd.DataFrame:
    """query_id, metric, k, value of every metric at VALUE_KS and of `extra` (MAP at a cut-off other than 10 too)."""
    frames = [evaluate_per_query(qrels, run, ks=sorted({*VALUE_KS, *(k for _, k in extra)}), map_k=10)]
    frames += [evaluate_per_query(qrels, run, ks=(k,), map_k=k).query("metric == 'map'")
               for k in sorted({k for m, k in extra if m == "map" and k != 10})]
    return pd.concat(frames, ignore_index=True)


def answer_utility(spec: BenchmarkSpec, artifacts: CorpusArtifacts,
                   splits: list[tuple[str, Benchmark, list[str], pd.DataFrame]], mc_labels: pd.DataFrame | None,
                   answer_scorer: Callable[[], Scorer | None], log: Callable[[str], None] = lambda m: None,
                   llm_client: Callable[[], Any] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The answer utility of every evaluated run (`core/evaluation/answers.py`) on each eval split: its rows
    (ANSWER_COLUMNS) and the report's notes on it. `splits`: (split, benchmark, evaluated question ids, its runs).
    `llm_client()`: the chat endpoint whose greedy answers are validated where `answers.verdicts` asks (asked for
    only then). Off, or with no evaluated question that has an answer: no rows (and no word unless `answers.enabled` was
    asked for by name: a benchmark whose questions carry no answers says nothing of them)."""
    empty = pd.DataFrame(columns=ANSWER_COLUMNS).astype({"k": "int64", "n_docs": "int64", "loglik": float,
                                                         "loglik_no_context": float, "answer_gain": float,
                                                         "answer_score": float, "answer_passed": float})
    settings = spec.answer_settings
    todo = {split: answer_questions(bench.queries, bench.answers, judged, settings.max_questions)
            for split, bench, judged, _ in splits}
    if not settings.enabled:
        return empty, (["off (`answers: {enabled: true}` in the benchmark registry measures it)"]
                       if any(todo.values()) else [])
    if not any(todo.values()):   # a word only where the registry asked for it by name
        return empty, (["not measured: no evaluated question has an answer to score"]
                       if spec.answers.get("enabled") else [])
    scorer = answer_scorer()
    if scorer is None:
        return empty, ["not measured: the configured LLM returns no prompt log-probabilities (a local model, or an "
                       "endpoint with `prompt_logprobs` or `echo`, measures it)"]
    params = AnswerParams(tuple(settings.ks), settings.max_questions, doc_chars(spec))
    doc, position = document_cut(artifacts.index, params.max_doc_chars), artifacts.index.position
    by_label = label_rankings(mc_labels)
    planned = []   # (split, questions, planned calls): every split's cost is logged before the first call
    for split, bench, _, runs in splits:
        if not todo[split]:
            continue
        questions = build_questions(todo[split], bench.queries, bench.answers, bench.aliases, runs, bench.qrels,
                                    bench.within, by_label, params.seed, position)
        retrievers = list(dict.fromkeys(runs["retriever"]))
        references = [r for r in REFERENCES if any(r in q.rankings for q in questions)]
        calls = planned_calls(len(questions), len(retrievers) + len(references), len(params.ks))
        log(f"answer utility on `{split}`: {len(questions)} questions × ({len(retrievers)} retrievers + "
            f"{len(references)} references) × {len(params.ks)} k + {len(questions)} without context = {calls} "
            f"score calls at most (identical prompts once, cached ones free), by `{scorer.model_id}`")
        planned.append((split, questions, calls))
    frames, notes = [], []
    solver = BlindSolver(llm_client(), spec.validator) \
        if planned and llm_client is not None and settings.generates(spec.monte_carlo.get("outcome")) else None
    for split, questions, calls in planned:
        run = measure_answers(questions, doc, scorer, spec.validator, params.ks, log, solver)
        frames.append(run.rows.assign(benchmark=spec.name, split=split)[ANSWER_COLUMNS])
        notes.append(f"`{split}`: {len(questions)} questions with an answer (at most `answers.max_questions` "
                     f"{params.max_questions}), k in {list(params.ks)}, documents cut as the pools cut them (at "
                     f"most {params.max_doc_chars} characters, the lines best matching the question); "
                     f"{run.prompts} distinct prompts of at most {calls}, {run.scored} scored by "
                     f"`{scorer.model_id}` (the rest from the call cache) in {run.seconds:.0f} s"
                     + (f"; each prompt's greedy answer judged by `{spec.validator}` (answer_score, answer_passed)"
                        if solver is not None else "")
                     + (f"; {len(run.errors)} scorings failed and are left out (first: {run.errors[0]})"
                        if run.errors else ""))
    return (pd.concat(frames, ignore_index=True) if frames else empty), notes

