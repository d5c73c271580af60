"""Data-quality checks of the stored tables: pure functions of the frames a stage has just produced.

Each returns a `CheckOutcome` (passed + figures that explain it). The Dagster layer runs them inside the op that
wrote the partition (so a check always sees exactly the data it vouches for) and reports them as asset checks;
checks whose failure would poison downstream stages are blocking there. Kept free of Dagster so the same rules
can be run on any Parquet file from a notebook.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd


@dataclass
class CheckOutcome:
    passed: bool
    metadata: dict = field(default_factory=dict)

    @classmethod
    def of(cls, **figures) -> "CheckOutcome":
        """Passed when every figure named `bad_*` / `missing_*` / `*_violations` is 0 and every `ok_*` is True."""
        failing = [k for k, v in figures.items()
                   if (k.startswith(("bad_", "missing_")) or k.endswith("_violations")) and v
                   or k.startswith("ok_") and not v]
        return cls(not failing, {**figures, "failing": ", ".join(failing) or "none"})


def _missing(frame: pd.DataFrame, columns: Iterable[str]) -> str:
    return ", ".join(c for c in columns if c not in frame.columns)


def _non_finite(values) -> int:
    arr = np.asarray(values, dtype=np.float64)
    return int((~np.isfinite(arr)).sum())


def blank_chunks(chunks: pd.DataFrame) -> pd.Series:
    """Which chunks have neither text nor title (nothing to index)."""
    return (chunks["text"].fillna("").str.strip() == "") & (chunks["title"].fillna("").str.strip() == "")


def check_chunks(chunks: pd.DataFrame) -> CheckOutcome:
    """Non-empty corpus, unique ids, chunk_idx = 0..n-1 (the row number every index refers to), no blank chunk."""
    missing = _missing(chunks, ("chunk_id", "chunk_idx", "title", "text", "kind", "content_hash"))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    blank = blank_chunks(chunks)
    return CheckOutcome.of(
        rows=len(chunks), ok_rows=len(chunks) > 0,
        bad_duplicate_ids=int(chunks["chunk_id"].duplicated().sum()),
        ok_chunk_idx_is_row_number=bool((chunks["chunk_idx"].to_numpy() == np.arange(len(chunks))).all()),
        bad_blank_chunks=int(blank.sum()),
        bad_missing_hashes=int(chunks["content_hash"].isna().sum()))


def check_embeddings(embeddings: pd.DataFrame, chunks: pd.DataFrame) -> CheckOutcome:
    """One finite unit vector per chunk, in chunk order, embedded from the current chunk text (freshness: the
    content hashes must be the chunks' own)."""
    missing = _missing(embeddings, ("chunk_id", "content_hash", "embedding"))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    same_rows = len(embeddings) == len(chunks)
    stale = int((embeddings["content_hash"].to_numpy() != chunks["content_hash"].to_numpy()).sum()) if same_rows \
        else len(chunks)
    order = bool(same_rows and (embeddings["chunk_id"].to_numpy() == chunks["chunk_id"].to_numpy()).all())
    vectors = np.stack(embeddings["embedding"].to_numpy()) if len(embeddings) else np.zeros((0, 0))
    norms = np.linalg.norm(vectors, axis=1) if len(vectors) else np.zeros(0)
    return CheckOutcome.of(
        rows=len(embeddings), ok_one_row_per_chunk=same_rows, ok_chunk_order=order,
        bad_stale_vectors=stale, bad_non_finite=_non_finite(vectors),
        bad_not_unit_norm=int((np.abs(norms - 1) > 1e-3).sum()),
        dimension=int(vectors.shape[1]) if vectors.ndim == 2 and len(vectors) else 0)


def check_sparse(postings: pd.DataFrame, vocabulary: pd.DataFrame, n_chunks: int) -> CheckOutcome:
    """Finite positive weights, postings that point at existing chunks and terms, document frequencies that
    match the postings."""
    missing = _missing(postings, ("method", "term_id", "chunk_idx", "weight")) or \
        _missing(vocabulary, ("method", "term_id", "term", "df"))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    weights = postings["weight"].to_numpy()
    out_of_range = int(((postings["chunk_idx"] < 0) | (postings["chunk_idx"] >= n_chunks)).sum())
    df_postings = postings.groupby(["method", "term_id"]).size()
    df_vocab = vocabulary.set_index(["method", "term_id"])["df"]
    df_mismatch = int((df_postings.reindex(df_vocab.index, fill_value=0) != df_vocab).sum())
    unknown_terms = int((~df_postings.index.isin(df_vocab.index)).sum())
    return CheckOutcome.of(
        postings=len(postings), terms=len(vocabulary), methods=", ".join(sorted(postings["method"].unique())),
        ok_has_postings=len(postings) > 0, bad_non_finite_weights=_non_finite(weights),
        bad_non_positive_weights=int((weights <= 0).sum()), bad_chunk_idx_out_of_range=out_of_range,
        bad_unknown_terms=unknown_terms, bad_df_mismatch=df_mismatch,
        bad_duplicate_terms=int(vocabulary.duplicated(["method", "term"]).sum()))


def check_graph(nodes: pd.DataFrame, edges: pd.DataFrame, chunk_ids: Iterable[str]) -> CheckOutcome:
    """Unique node ids, edges between existing nodes with finite weights, node chunk references that exist."""
    ids = set(nodes["node_id"])
    dangling = int((~edges["source"].isin(ids) | ~edges["target"].isin(ids)).sum())
    chunk_ids = set(chunk_ids)
    refs = nodes["chunk_id"].dropna()
    refs = refs[refs != ""]
    return CheckOutcome.of(
        nodes=len(nodes), edges=len(edges), ok_has_nodes=len(nodes) > 0,
        bad_duplicate_node_ids=int(nodes["node_id"].duplicated().sum()), bad_dangling_edges=dangling,
        bad_non_finite_weights=_non_finite(edges["weight"]),
        bad_unknown_chunk_refs=int((~refs.isin(chunk_ids)).sum()))


def check_pools(pools: pd.DataFrame, chunk_ids: Iterable[str]) -> CheckOutcome:
    """Every pooled document exists in the corpus, at most once per question; every question has a pool, a
    question text and an answer to validate against."""
    chunk_ids = set(chunk_ids)
    per_question = pools.groupby("query_id").size() if len(pools) else pd.Series(dtype=int)
    seeded = pools.groupby("query_id")["origin"].apply(lambda o: (o == "seed").any()).mean() if len(pools) else 0.0
    return CheckOutcome.of(
        questions=int(pools["query_id"].nunique()), rows=len(pools), ok_has_questions=len(pools) > 0,
        bad_unknown_docs=int((~pools["chunk_id"].isin(chunk_ids)).sum()),
        bad_duplicate_candidates=int(pools.duplicated(["query_id", "chunk_id"]).sum()),
        bad_blank_questions=int((pools["question"].fillna("").str.strip() == "").sum()),
        bad_missing_answers=int(pools["answer"].isna().sum()),
        min_pool=int(per_question.min()) if len(per_question) else 0,
        share_of_questions_with_a_seed=round(float(seeded), 4))


def check_metrics(metrics: pd.DataFrame) -> CheckOutcome:
    """Every metric value is finite; the ranking metrics (Recall, P, MRR, nDCG, MAP, hit rate) and the answers'
    verdicts (answer_score, answer_passed) are in [0, 1], the answer gains (metric `answer_gain`) are nats, of
    either sign."""
    values = metrics["value"].to_numpy(np.float64)
    ranking = (metrics["metric"] != "answer_gain").to_numpy() if "metric" in metrics else np.ones(len(values), bool)
    return CheckOutcome.of(
        rows=len(metrics), ok_has_rows=len(metrics) > 0, bad_non_finite=_non_finite(values),
        answer_rows=int((~ranking).sum()),
        bad_out_of_unit_range=int((((values < 0) | (values > 1 + 1e-9)) & ranking).sum()))


def check_answers(answers: pd.DataFrame) -> CheckOutcome:
    """The answer utility's rows: finite log-likelihoods (at most 0: log-probabilities) and gains, each gain the
    difference of its two log-likelihoods, at most k documents shown. An empty table (answer utility off) passes."""
    missing = _missing(answers, ("k", "loglik", "loglik_no_context", "answer_gain", "n_docs"))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    if not len(answers):
        return CheckOutcome.of(rows=0)
    with_ctx, without, gain = (answers[c].to_numpy(np.float64) for c in ("loglik", "loglik_no_context", "answer_gain"))
    return CheckOutcome.of(
        rows=len(answers), bad_non_finite=_non_finite(np.concatenate([with_ctx, without, gain])),
        bad_positive_loglik=int(((with_ctx > 1e-3) | (without > 1e-3)).sum()),
        bad_gain_not_difference=int((np.abs(gain - (with_ctx - without)) > 1e-6).sum()),
        bad_more_docs_than_k=int((answers["n_docs"] > answers["k"]).sum()),
        bad_verdict_out_of_unit_range=sum(int(((answers[c] < 0) | (answers[c] > 1)).sum())
                                          for c in ("answer_score", "answer_passed") if c in answers))


def check_ranked_results(runs: pd.DataFrame, group: list[str]) -> CheckOutcome:
    """Finite scores; within each ranking (`group` columns) ranks are 1..n and no document (`chunk_id`) appears
    twice."""
    if not len(runs):
        return CheckOutcome.of(rows=0)
    ranks_ok = runs.groupby(group)["rank"].apply(lambda r: sorted(r.tolist()) == list(range(1, len(r) + 1)))
    return CheckOutcome.of(
        rows=len(runs), rankings=int(len(ranks_ok)), bad_non_finite_scores=_non_finite(runs["score"]),
        bad_rankings_with_broken_ranks=int((~ranks_ok).sum()),
        bad_duplicate_documents=int(runs.duplicated([*group, "chunk_id"]).sum()))


def check_tuning_trials(trials: pd.DataFrame, eval_splits: Iterable[str]) -> CheckOutcome:
    """Tuning saw no evaluation split, and every trial's metric is finite and in [0, 1]."""
    if not len(trials):
        return CheckOutcome.of(trials=0)
    values = trials["value"].to_numpy(np.float64)
    leaked = sorted(set(trials["split"]) & set(eval_splits))
    return CheckOutcome.of(
        trials=len(trials), splits=", ".join(sorted(set(trials["split"]))),
        bad_eval_split_tuned_on=", ".join(leaked), bad_non_finite=_non_finite(values),
        bad_out_of_unit_range=int(((values < 0) | (values > 1 + 1e-9)).sum()))


def check_trials_from_ok_calls(trials: pd.DataFrame, calls: pd.DataFrame) -> CheckOutcome:
    """`no_trial_from_errored_call`, able to fail: every trial names the ok call it was scored from. Errored calls
    are journalled with no call key, so "trial keys not among the errored keys" could never fail; here a trial
    passes only if its key is the key of an *ok* call of the same question, and no question has more trials than
    ok calls."""
    missing = _missing(trials, ("query_id", "call_key")) or _missing(calls, ("query_id", "status", "call_key"))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    ok = calls[calls["status"] == "ok"]
    ok_pairs = set(zip(ok["query_id"], ok["call_key"].dropna()))
    keyed = trials["call_key"].notna()
    not_ok = [(q, k) not in ok_pairs for q, k in zip(trials.loc[keyed, "query_id"], trials.loc[keyed, "call_key"])]
    per_q_trials = trials.groupby("query_id").size()
    per_q_ok = ok.groupby("query_id").size().reindex(per_q_trials.index, fill_value=0)
    return CheckOutcome.of(
        trials=len(trials), ok_calls=len(ok), errored_calls=int((calls["status"] != "ok").sum()),
        bad_trials_without_call_key=int((~keyed).sum()),
        bad_trials_not_from_an_ok_call=int(sum(not_ok)),
        bad_questions_with_more_trials_than_ok_calls=int((per_q_trials > per_q_ok).sum()))


LABELS = ("YES", "NO", "UNCERTAIN")


def check_labels(labels: pd.DataFrame) -> CheckOutcome:
    """`labels_sane`: labels are YES/NO/UNCERTAIN; every labelled question has a base outcome (a success rate in
    [0, 1], or a finite log-likelihood); a decided label's effect is finite and inside its interval (an UNCERTAIN
    one may have no estimate); intervals are ordered; on the probability scale (pass/fail outcomes) effects and
    intervals lie in [-1, 1], and the naive ΔP (mean outcome with the document minus without), where
    measured, always does."""
    if not len(labels):  # no question had trials (e.g. the budget stopped the run): nothing to vouch for
        return CheckOutcome.of(rows=0)
    effect = "effect" if "effect" in labels else "delta_p"
    base_col = "base_outcome" if "base_outcome" in labels else "base_success_rate"
    missing = _missing(labels, ("query_id", "label", effect, "ci_low", "ci_high", base_col))
    if missing:
        return CheckOutcome.of(missing_columns=missing)
    probability = labels["outcome"].eq("success").to_numpy() if "outcome" in labels else np.ones(len(labels), bool)
    values = labels[[effect, "ci_low", "ci_high"]].to_numpy(np.float64)
    decided = (labels["label"] != "UNCERTAIN").to_numpy()
    finite = np.isfinite(values)
    base = labels[base_col].to_numpy(np.float64)
    base_bad = ~np.isfinite(base) | (probability & ((base < 0) | (base > 1)))
    no_base = int(pd.Series(base_bad, index=labels.index).groupby(labels["query_id"]).any().sum())
    v = np.where(finite, values, 0.0)
    delta_p = labels["delta_p"].to_numpy(np.float64) if "delta_p" in labels else np.zeros(len(labels))
    return CheckOutcome.of(
        rows=len(labels), questions=int(labels["query_id"].nunique()),
        # a decided label needs a finite effect; its interval may be unbounded (the naive ΔP rule decides
        # on the point estimate, e.g. with a single trial on one side)
        bad_non_finite=int((~finite[decided, 0]).sum()),
        bad_out_of_range=int((probability[:, None] & (np.abs(v) > 1 + 1e-9)).sum()),
        bad_delta_p_out_of_range=int((np.abs(np.nan_to_num(delta_p)) > 1 + 1e-9).sum()),
        bad_ci_inverted=int((v[:, 1] > v[:, 2] + 1e-9).sum()),
        bad_effect_outside_interval=int((decided & finite.all(axis=1)
                                         & ((v[:, 0] < v[:, 1] - 1e-9) | (v[:, 0] > v[:, 2] + 1e-9))).sum()),
        bad_questions_without_base_rate=no_base,
        bad_unknown_labels=int((~labels["label"].isin(LABELS)).sum()))


def check_labels_decided(labels: pd.DataFrame) -> CheckOutcome:
    """`labels_decided`: the labels decide something. Fails when every label of the configured estimator is
    UNCERTAIN, or when a labelled question has no finite interval at all: the budget was too small for the pool
    (an infinite interval decides nothing), or the solver's outcome never moved. Such labels exported as a dataset
    are all zeros; the check is blocking, and `export-labels` refuses them unless forced."""
    if not len(labels):
        return CheckOutcome.of(rows=0)
    main = labels[labels["estimator"] != "naive"] if "estimator" in labels and (labels["estimator"] != "naive").any() \
        else labels
    uncertain = main["label"] == "UNCERTAIN"
    finite = np.isfinite(main["ci_low"].to_numpy(np.float64)) & np.isfinite(main["ci_high"].to_numpy(np.float64))
    no_interval = pd.Series(~finite, index=main.index).groupby(main["query_id"]).all()
    return CheckOutcome.of(
        rows=len(main), uncertain_share=round(float(uncertain.mean()), 4),
        infinite_interval_share=round(float((~finite).mean()), 4),
        ok_some_label_decided=bool((~uncertain).any()),
        bad_questions_without_a_finite_interval=int(no_interval.sum()))


def labels_decided_problem(labels: pd.DataFrame) -> str | None:
    """One line saying why `check_labels_decided` fails (what to change), or None when it passes."""
    check = check_labels_decided(labels)
    if check.passed:
        return None
    m = check.metadata
    why = []
    if not m.get("ok_some_label_decided", True):
        why.append(f"all {m['rows']} labels are UNCERTAIN")
    if m.get("bad_questions_without_a_finite_interval"):
        why.append(f"{m['bad_questions_without_a_finite_interval']} question(s) have no finite interval "
                   f"({m['infinite_interval_share']:.0%} of the intervals are infinite)")
    return ("; ".join(why) + ": the labels decide nothing (raise monte_carlo.budget, or make the pool smaller with "
            "pooling.size)")
