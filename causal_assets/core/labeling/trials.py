"""Monte Carlo trials for the questions of a candidate-pool table: each question's pool goes to
`runner.label_question`, and its trials and calls become rows of the `mc_trials` and `solver_calls` tables.

Shared by the whole-benchmark labelling and by its question-range shards, which pay the same calls into the call
cache; the Dagster layer only supplies the solver endpoints and a logger.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from causal_assets.core.foundation import progress
from causal_assets.core.labeling.runner import LabelingParams, label_question
from causal_assets.core.foundation.progress import duration
from causal_assets.core.labeling.solver import BlindSolver, LikelihoodSolver
from causal_assets.core.llm.client import LLMClient
from causal_assets.core.llm.scoring import Scorer

TRIAL_COLUMNS = ["query_id", "trial", "subset", "n_docs", "loglik", "loglik_question", "success", "score",
                 "answer", "call_key", "cached"]
CALL_COLUMNS = ["query_id", "kind", "status", "error", "detail", "subset", "cached", "latency_s", "prompt_tokens",
                "completion_tokens", "call_key"]


@dataclass
class TrialRun:
    trials: pd.DataFrame   # TRIAL_COLUMNS + benchmark, estimator, outcome, solver
    calls: pd.DataFrame    # CALL_COLUMNS + benchmark
    stopped: str           # "" when every question was labelled, else why the run stopped (the LLM budget)
    seconds: float
    document_encoding: str = ""   # how the likelihood trials read their documents: joint | separate ("": none)

    @property
    def questions(self) -> int:
        return int(self.trials["query_id"].nunique())


def run_trials(pools: pd.DataFrame, cfg: LabelingParams, benchmark: str, validator: str, solver_name: str,
               client: LLMClient | None = None, scorer: Scorer | None = None,
               query_ids: list[str] | None = None, log: Callable[[str], None] = lambda m: None,
               warn: Callable[[str], None] | None = None) -> TrialRun:
    """Label the questions of `pools` (only `query_ids` when given), in pool order. `client` answers
    (outcomes that generate), `scorer` scores likelihoods (outcomes that score); each is needed only by the
    outcome that uses it. Stops at the first question that exceeds the LLM budget, keeping what was done."""
    if cfg.generates and client is None:
        raise ValueError(f"outcome {cfg.outcome!r} generates answers: a client is needed")
    if cfg.scores and scorer is None:
        raise ValueError(f"outcome {cfg.outcome!r} scores likelihoods: a scorer is needed")
    solver = BlindSolver(client, validator) if cfg.generates else None
    separate = cfg.separate_documents(scorer) if cfg.scores else False
    likelihood = LikelihoodSolver(scorer, validator, separate) if cfg.scores else None
    trials, calls, stopped = [], [], ""
    t0 = time.perf_counter()
    wanted = set(query_ids) if query_ids is not None else None
    todo = [(qid, pool) for qid, pool in pools.groupby("query_id", sort=False) if wanted is None or qid in wanted]
    for n, (qid, pool) in enumerate(todo, 1):
        pool = pool.sort_values("position")
        first = pool.iloc[0]
        outcome = label_question(qid, first["question"], first["answer"],
                                 list(zip(pool["chunk_id"], pool["title"], pool["text"])),
                                 solver, cfg, json.loads(first["aliases"]), scorer=likelihood)
        trials += outcome.trials
        calls += outcome.calls
        elapsed = time.perf_counter() - t0
        log(f"{qid}: {len(outcome.trials)} trials, YES: {outcome.result.yes()} | question {n}/{len(todo)}, "
            f"{elapsed / n:.1f} s per question, ETA {elapsed / n * (len(todo) - n):.0f} s")
        if progress.terminal is not None:   # the command that runs this step in its own process shows it
            left = f", about {duration(elapsed / n * (len(todo) - n))} left" if n < len(todo) else \
                f", done in {duration(elapsed)}"
            progress.terminal(f"labels of {benchmark!r}: question {n}/{len(todo)} ({n / len(todo):.0%}), "
                              f"{elapsed / n:.0f} s per question{left}")
        if outcome.stopped:
            stopped = outcome.stopped
            (warn or log)(f"LLM budget exceeded at question {qid}: stopping, partial trials kept")
            break
    trials_df = pd.DataFrame(trials, columns=TRIAL_COLUMNS).assign(
        benchmark=benchmark, estimator=cfg.estimator, outcome=cfg.outcome, solver=solver_name)
    trials_df[["loglik", "loglik_question"]] = trials_df[["loglik", "loglik_question"]].astype(float)
    trials_df["success"] = trials_df["success"].astype("boolean")
    calls_df = pd.DataFrame(calls, columns=CALL_COLUMNS).assign(benchmark=benchmark)
    return TrialRun(trials_df, calls_df, stopped, time.perf_counter() - t0,
                    ("separate" if separate else "joint") if cfg.scores else "")
