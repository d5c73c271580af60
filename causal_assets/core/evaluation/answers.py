"""Answer utility: what a retriever's top k does to the blind solver's answer.

For one question and one ranking, the gain at k is the solver's teacher-forced log-likelihood of the gold answer
(the best of its accepted answers, as the labels score it) given the ranking's top k documents in rank order, minus
the same with no context, in nats. The prompt is the labels' (`labeling.solver.solver_prompt`), the documents are
cut as the candidate pools cut them (`document_cut`: the title, then the text whole where it fits
`pooling.max_doc_chars`, else its run of whole lines that best matches the question), and the scorer is the
labels' (the call cache's keys are shared, so a re-run pays nothing).

Reference rankings on the same questions show how far a retriever is from what helps:

* ``@gold``: the benchmark's relevant documents first (by grade), then the question's other candidates in the
  seeded random order of ``@random``;
* ``@labels``: the question's pool documents by their Monte Carlo label effect (`schemas.ranking_effect`), on the
  labelled questions only;
* ``@random``: the question's candidates (its own candidate set, else every document an evaluated retriever
  returned for it) in a random order seeded by the question id.

Cost: per question one no-context prompt plus one prompt per (ranking, k); identical prompts (two retrievers with
the same top k, a ranking shorter than k) are scored once, and each question's prompts go to the scorer as one
batch so its prefix reuse helps.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Sequence

import pandas as pd

from causal_assets.core.labeling.pools import pool_params
from causal_assets.core.labeling.solver import answer_continuations, solver_prompt
from causal_assets.core.labeling.validators import validate
from causal_assets.core.llm.errors import LLMError
from causal_assets.core.llm.scoring import ScoreRequest, Scorer
from causal_assets.core.foundation.schemas import ranking_effect
from causal_assets.core.measures.significance import bootstrap_ci, randomization_p
from causal_assets.core.registry.benchmarks import BenchmarkSpec
from causal_assets.core.registry.sections import AnswersSpec
from causal_assets.core.text.passages import fit_passage

GOLD, LABELS, RANDOM = "@gold", "@labels", "@random"
REFERENCES = (GOLD, LABELS, RANDOM)
# the registry's defaults (`answers:`), chosen there
DEFAULT_KS = tuple(AnswersSpec.model_fields["ks"].default)
DEFAULT_MAX_QUESTIONS = AnswersSpec.model_fields["max_questions"].default
TRUTH = "answers"
METRIC = "answer_gain"
ANSWER_COLUMNS = ["benchmark", "split", "retriever", "k", "query_id", "loglik", "loglik_no_context", "answer_gain",
                  "n_docs", "answer_score", "answer_passed"]
# Where the solver generates (`answers.verdicts`): the validator's verdict on its greedy answer given the top k,
# as evaluation_metrics rows of truth `answers` too (NaN in the table where it does not generate).
VERDICT_METRICS = ("answer_score", "answer_passed")


def is_reference(retriever: str) -> bool:
    return retriever.startswith("@")


@dataclass(frozen=True)
class AnswerParams:
    """A benchmark's `answers:` section with the labels' document cut (`pooling.max_doc_chars`)."""

    ks: tuple[int, ...] = DEFAULT_KS
    max_questions: int = DEFAULT_MAX_QUESTIONS
    max_doc_chars: int = 600
    seed: int = 0

    def __post_init__(self):
        if not self.ks or any(isinstance(k, bool) or int(k) != k or k < 1 for k in self.ks):
            raise ValueError(f"answers.ks must be positive whole numbers, got {list(self.ks)}")
        if self.max_questions < 1:
            raise ValueError(f"answers.max_questions must be at least 1, got {self.max_questions}")
        object.__setattr__(self, "ks", tuple(sorted({int(k) for k in self.ks})))


@dataclass
class AnswerQuestion:
    query_id: str
    text: str
    continuations: tuple[str, ...]           # `answer_continuations` of its answer and aliases
    rankings: dict[str, list[str]]           # retriever or reference -> doc ids, best first
    golds: tuple[str, ...] = ()              # the answer and its aliases, for the validator's verdict


@dataclass
class AnswerRun:
    rows: pd.DataFrame                       # ANSWER_COLUMNS without benchmark and split
    prompts: int = 0                         # distinct prompts asked (identical prompts once per question)
    scored: int = 0                          # of them, scored by the model (the rest came from the call cache)
    errors: list[str] = field(default_factory=list)   # failed scorings (their rows are left out)
    seconds: float = 0.0


def planned_calls(n_questions: int, n_rankings: int, n_ks: int) -> int:
    """Score calls at most: every (ranking, k) of every question, plus its no-context prompt."""
    return n_questions * n_rankings * n_ks + n_questions


def label_rankings(labels: pd.DataFrame | None) -> dict[str, list[str]]:
    """Per labelled question, its pool documents by label effect (largest first; the labels' own estimator, not
    the naive comparison rows)."""
    if labels is None or not len(labels):
        return {}
    main = labels[labels["estimator"] != "naive"] if "estimator" in labels and \
        (labels["estimator"] != "naive").any() else labels
    frame = pd.DataFrame({"q": main["query_id"].astype(str), "d": main["chunk_id"].astype(str),
                          "e": ranking_effect(main).fillna(-math.inf).to_numpy()})
    frame = frame.sort_values(["q", "e", "d"], ascending=[True, False, True], kind="mergesort")
    return {q: g["d"].tolist() for q, g in frame.groupby("q", sort=False)}


def reference_rankings(query_id: str, relevant: dict[str, float], candidates: Sequence[str],
                       by_label: list[str] | None, seed: int = 0) -> dict[str, list[str]]:
    """The reference rankings of one question (module docstring): `relevant` its judgements, `candidates` the
    documents it could be shown, `by_label` its pool by label effect (None: not labelled)."""
    shuffled = list(dict.fromkeys(candidates))
    random.Random(f"{seed}:{query_id}").shuffle(shuffled)
    gold = [d for d, _ in sorted(((d, v) for d, v in relevant.items() if v > 0), key=lambda x: (-x[1], x[0]))]
    out = {GOLD: gold + [d for d in shuffled if d not in set(gold)]} if gold else {}
    if by_label:
        out[LABELS] = list(by_label)
    out[RANDOM] = shuffled
    return out


def measure_answers(questions: Sequence[AnswerQuestion], doc: Callable[[str, str], tuple[str, str]],
                    scorer: Scorer, validator: str, ks: Sequence[int], log: Callable[[str], None] = lambda m: None,
                    solver: Any = None) -> AnswerRun:
    """The answer gain of every ranking of every question at every k (module docstring). `doc(id, question)`: the
    document's (title, text) as the solver sees it beside that question (`document_cut`). One `score_many` batch
    per question; a failed scoring leaves its rows out (and is listed in `errors`); when every scoring fails, the
    first failure is raised. `solver`: a generating solver (`labeling.solver.BlindSolver`): each distinct prompt's
    greedy answer is also validated (`answer_score`, `answer_passed`; a failed generation leaves them NaN and is
    listed in `errors`)."""
    t0 = time.perf_counter()
    rows, errors = [], []
    prompts = scored = ok = 0
    first_error: LLMError | None = None
    for n, q in enumerate(questions, 1):
        baseline = solver_prompt(q.text, [], validator)
        index: dict[str, int] = {baseline: 0}
        contexts: list[list[tuple[str, str]]] = [[]]   # per distinct prompt, the documents it shows
        planned = []   # (ranking, k, prompt index, documents shown)
        for name, ranking in q.rankings.items():
            for k in ks:
                shown = [doc(d, q.text) for d in ranking[:k]]
                prompt = solver_prompt(q.text, shown, validator) if shown else baseline
                if prompt not in index:
                    index[prompt] = len(index)
                    contexts.append(shown)
                planned.append((name, k, index[prompt], len(shown)))
        verdicts = verdicts_of(solver, q, contexts, validator, errors) if solver is not None else \
            [(math.nan, math.nan)] * len(contexts)
        results = scorer.score_many([ScoreRequest(p, q.continuations) for p in index])
        prompts += len(results)
        values: list[float | None] = []
        for r in results:
            if isinstance(r, BaseException):
                errors.append(f"{q.query_id}: {type(r).__name__}: {str(r)[:200]}")
                first_error = first_error or r
                values.append(None)
            else:
                scored += not r.cached
                ok += 1
                values.append(float(r.best))
        if values[0] is None:
            continue
        for name, k, i, n_docs in planned:
            if values[i] is not None:
                rows.append((name, k, q.query_id, values[i], values[0], values[i] - values[0], n_docs,
                             *verdicts[i]))
        if n % 10 == 0 or n == len(questions):
            log(f"answer utility: {n}/{len(questions)} questions, {prompts} prompts ({scored} scored, the rest "
                f"cached) in {time.perf_counter() - t0:.0f}s")
    if first_error is not None and ok == 0:
        raise first_error
    frame = pd.DataFrame(rows, columns=ANSWER_COLUMNS[2:]).astype({"k": "int64", "n_docs": "int64",
                                                                    "answer_score": float, "answer_passed": float})
    return AnswerRun(frame, prompts, scored, errors, time.perf_counter() - t0)


class AnswerJudge:
    """The answer gain at k of any ranking of one benchmark's questions, for choosing among retrievers by what helps
    the solver (the tuner's selection by answers). The prompt, document cut and scorer are the evaluation's; the
    no-context prompt is scored once per question, and rankings that agree on their top k cost one scoring (the
    call cache). A failed scoring is an infrastructure failure and is raised, never a gain of 0."""

    def __init__(self, queries: dict[str, str], answers: dict[str, str], aliases: dict[str, list[str]],
                 doc: Callable[[str, str], tuple[str, str]], scorer: Scorer, validator: str):
        self.queries, self.answers, self.aliases = queries, answers, aliases
        self.doc, self.scorer, self.validator = doc, scorer, validator
        self._without: dict[str, float] = {}
        self.prompts = self.scored = 0

    def answered(self, qids: Sequence[str]) -> list[str]:
        """Of `qids`, the questions with an answer to score, in their order."""
        return answer_questions(self.queries, self.answers, qids, len(qids))

    def gains(self, rankings: dict[str, Sequence[str]], k: int) -> dict[str, float]:
        """{question: answer gain of its ranking's top k} for the ranked questions with an answer."""
        qids = self.answered(list(rankings))
        requests, slots = [], []   # slots: (question, whether the request is its no-context prompt)
        for q in qids:
            continuations = answer_continuations(self.answers[q], self.aliases.get(q, ()))
            if q not in self._without:
                requests.append(ScoreRequest(solver_prompt(self.queries[q], [], self.validator), continuations))
                slots.append((q, True))
            shown = [self.doc(d, self.queries[q]) for d in list(rankings[q])[:k]]
            requests.append(ScoreRequest(solver_prompt(self.queries[q], shown, self.validator), continuations))
            slots.append((q, False))
        with_context: dict[str, float] = {}
        for (q, without), r in zip(slots, self.scorer.score_many(requests)):
            if isinstance(r, BaseException):
                raise r
            self.prompts += 1
            self.scored += not r.cached
            (self._without if without else with_context)[q] = float(r.best)
        return {q: with_context[q] - self._without[q] for q in qids}


def doc_chars(spec: BenchmarkSpec) -> int:
    """The labels' document cut of `spec` (`pooling.max_doc_chars`, else the pools' default): the answer utility
    shows each document as the solver saw it in the labels."""
    return pool_params(spec.pool_settings).doc_chars


def document_cut(index, max_doc_chars: int) -> Callable[[str, str], tuple[str, str]]:
    """`doc(chunk_id, question)`: a chunk of `index` as the candidate pools cut it for the solver beside that
    question (`labeling.pools.build_pools`): its title, then its text whole where it fits `max_doc_chars`, else the
    run of whole lines that best matches the question (`text.passages.fit_passage`), not the text's beginning."""
    chunks, position = index.chunks, index.position
    split = bool(getattr(index, "split_identifiers", False))

    def doc(chunk_id: str, question: str) -> tuple[str, str]:
        row = chunks.iloc[position[chunk_id]]
        return str(row["title"]), fit_passage(str(row["text"]), question, max_doc_chars, split).text

    return doc


def verdicts_of(solver: Any, q: AnswerQuestion, contexts: list[list[tuple[str, str]]], validator: str,
                errors: list[str]) -> list[tuple[float, float]]:
    """(validator score, passed as 1.0 / 0.0) of the solver's greedy answer given each context; NaN where the
    generation failed (an infrastructure failure, listed in `errors`, never a failed answer)."""
    out = []
    for r in solver.attempt_many(q.text, contexts):
        if isinstance(r, BaseException):
            errors.append(f"{q.query_id}: answer generation: {type(r).__name__}: {str(r)[:200]}")
            out.append((math.nan, math.nan))
        else:
            v = validate(validator, r.text, list(q.golds))
            out.append((float(v.score), float(v.passed)))
    return out


def answer_questions(queries: dict[str, str], answers: dict[str, str], judged: Sequence[str],
                     limit: int) -> list[str]:
    """The questions answer utility is measured on: the judged ones with an answer, in their order, at most
    `limit`."""
    return [q for q in judged if q in queries and str(answers.get(q) or "").strip()][:limit]


def build_questions(qids: Sequence[str], queries: dict[str, str], answers: dict[str, str],
                    aliases: dict[str, list[str]], runs: pd.DataFrame, qrels: dict[str, dict[str, float]],
                    within: dict[str, list[str]] | None, labels: dict[str, list[str]], seed: int = 0,
                    known: Container[str] | None = None) -> list[AnswerQuestion]:
    """`AnswerQuestion`s of `qids`: each evaluated retriever's ranking (`runs`: retriever, query_id, chunk_id, rank)
    and the references. A question's candidates are its own candidate set (`within`), else every document a
    retriever returned for it. `known`: the documents that can be shown (the index's); others are left out of every
    ranking (labels made on an earlier version of the corpus can name documents it no longer has)."""
    ranked = runs[runs["query_id"].isin(set(qids))].sort_values(["retriever", "query_id", "rank"], kind="mergesort")
    by_run: dict[str, dict[str, list[str]]] = {}
    for (retriever, q), g in ranked.groupby(["retriever", "query_id"], sort=False):
        by_run.setdefault(str(q), {})[str(retriever)] = g["chunk_id"].astype(str).tolist()
    order = list(dict.fromkeys(runs["retriever"]))
    out = []
    for q in qids:
        own = by_run.get(q, {})
        rankings = {r: own[r] for r in order if r in own}
        candidates = within[q] if within and q in within else \
            sorted({d for docs in rankings.values() for d in docs})
        rankings.update(reference_rankings(q, qrels.get(q, {}), candidates, labels.get(q), seed))
        if known is not None:
            rankings = {name: [d for d in docs if d in known] for name, docs in rankings.items()}
        out.append(AnswerQuestion(q, queries[q], answer_continuations(answers[q], aliases.get(q, ())), rankings,
                                  (str(answers[q]), *[str(a) for a in aliases.get(q, ())])))
    return out


def paired_gain(rows: pd.DataFrame, a: str, b: str, k: int) -> dict[str, float] | None:
    """Retriever `a` against `b` on answer gain at `k` (`evaluation_answers` rows of one split), on the questions
    both have: the mean difference, its 95% bootstrap interval, Fisher's paired randomization p and the number of
    questions; None where either has no row at that k."""
    wide = rows[rows["k"] == k].pivot_table(index="query_id", columns="retriever", values="answer_gain",
                                            aggfunc="first")
    if a not in wide or b not in wide:
        return None
    both = wide[[a, b]].dropna()
    diff = both[a].to_numpy() - both[b].to_numpy()
    lo, hi = bootstrap_ci(diff)
    return {"delta": float(diff.mean()), "low": lo, "high": hi,
            "p": randomization_p(both[b].to_numpy(), both[a].to_numpy()), "questions": len(diff)}


def answer_metrics(rows: pd.DataFrame) -> pd.DataFrame:
    """`evaluation_metrics` rows of the answers, truth `answers`: the mean gain per (split, retriever, k), and
    where the solver generated, the mean validator score and pass rate of its answers."""
    columns = ["split", "truth", "retriever", "metric", "k", "value"]
    if not len(rows):
        return pd.DataFrame(columns=columns)
    frames = []
    for metric in (METRIC, *VERDICT_METRICS):
        if metric not in rows or rows[metric].isna().all():
            continue
        means = rows.dropna(subset=[metric]).groupby(["split", "retriever", "k"], sort=False)[metric].mean()
        frames.append(means.reset_index().rename(columns={metric: "value"}).assign(truth=TRUTH, metric=metric))
    return pd.concat(frames, ignore_index=True)[columns]
