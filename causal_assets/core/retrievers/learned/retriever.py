"""The learned causal-relevance model: scores (query, document) pairs from query-time features (`features.py`) and
reranks a first stage (the z-score hybrid) with them. It is the `learned` retriever and the `rerank` stage other
retrievers use (the causal retriever's `shortlist: learned`).

Targets: `delta_p`, the Monte Carlo labels' effect (causal relevance measured by intervention; only labelled pairs
are trained on), or `qrels`, the judgements of the training split (a proxy, said so in the metadata, where a
benchmark has no labels). Models: scikit-learn's histogram gradient boosting (a regressor for `delta_p`, a
classifier for binary qrels) or, for qrels, LightGBM's LambdaMART; the grouped cross-validation on the benchmark's
own metric (`cross_validate`) chooses per benchmark. Why trees, and the measured choice between the families:
docs/decisions.md ("Retrievers and tuning").
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from threadpoolctl import threadpool_limits
from upath import UPath

from causal_assets.core.measures.metrics import Qrels, named_metric_per_query
from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.llm.scoring import Scorer
from causal_assets.core.retrievers.learned.features import FEATURES, QUESTION_LIKELIHOOD, FeatureExtractor
from causal_assets.core.foundation.schemas import ranking_effect

TARGETS = ("qrels", "delta_p")
# Hyperparameter candidates, chosen among by grouped CV. The first suits tens of thousands of rows (SciFact
# train: 809 queries x 100 candidates); the last suits a few hundred labelled pairs (30 MC questions x 10).
# The LambdaMART points mirror the same three capacities (LightGBM's names), for the `qrels` target only. Ties go to
# the earlier point (`_tune_learned`), so a CV that cannot tell them apart (2Wiki's 19 train questions score 1.0 at
# nearly every point) keeps the pointwise choice. Larger trees (31 leaves, 300 rounds) were tried and left out: with
# folds by query they won SciFact's CV (0.7886) by remembering which abstracts were gold for other claims
# (`query_folds`); with folds by shared gold document they are the worst points (0.7295 pointwise, 0.7331 LambdaMART).
PARAM_GRID: tuple[dict[str, Any], ...] = (
    {"learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 50, "max_iter": 200, "l2_regularization": 1.0},
    {"learning_rate": 0.05, "max_leaf_nodes": 7, "min_samples_leaf": 20, "max_iter": 150, "l2_regularization": 1.0},
    {"learning_rate": 0.1, "max_leaf_nodes": 4, "min_samples_leaf": 5, "max_iter": 60, "l2_regularization": 1.0},
    {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 15, "min_child_samples": 50,
     "n_estimators": 200, "reg_lambda": 1.0},
    {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 7, "min_child_samples": 20,
     "n_estimators": 150, "reg_lambda": 1.0},
    {"objective": "lambdarank", "learning_rate": 0.1, "num_leaves": 4, "min_child_samples": 5,
     "n_estimators": 60, "reg_lambda": 1.0},
)


def is_ranker(params: dict[str, Any]) -> bool:
    """A LambdaMART grid point (listwise, LightGBM), as opposed to a pointwise scikit-learn one."""
    return params.get("objective") == "lambdarank"


def grid_for(target: str) -> list[dict[str, Any]]:
    """The grid points that can fit `target`: LambdaMART needs graded relevance (qrels), not a continuous effect."""
    return [p for p in PARAM_GRID if target == "qrels" or not is_ranker(p)]


def candidate_table(extractor: FeatureExtractor, queries: dict[str, str], vectors: np.ndarray,
                    within: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per (query, first-stage candidate): query_id, chunk_id, first-stage rank, the extractor's features."""
    frames = []
    for qv, (qid, text) in zip(vectors, queries.items()):
        c = extractor.candidates(text, qv, within.get(qid) if within else None)
        f = c.features.copy()
        f.insert(0, "rank", np.arange(1, len(c.positions) + 1))
        f.insert(0, "chunk_id", extractor.index.ids[c.positions].astype(str))
        f.insert(0, "query_id", qid)
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else \
        pd.DataFrame(columns=["query_id", "chunk_id", "rank", *extractor.features])


def attach_target(table: pd.DataFrame, target: str, qrels: Qrels | None = None,
                  mc_labels: pd.DataFrame | None = None) -> pd.DataFrame:
    """`table` with a `target` column (NaN where the pair has no label: not trained on)."""
    if target == "qrels":
        if qrels is None:
            raise ValueError("target qrels needs qrels")
        judged = table["query_id"].isin(qrels)
        y = [float(qrels.get(q, {}).get(d, 0.0) > 0) for q, d in zip(table["query_id"], table["chunk_id"])]
        return table.assign(target=np.where(judged, y, np.nan))
    if target == "delta_p":
        if mc_labels is None or not len(mc_labels):
            raise ValueError("target delta_p needs mc_labels")
        labels = mc_labels
        if "estimator" in labels:
            # The configured estimator's rows (adaptive / regression) where a question has them, else the naive ones.
            labels = labels.sort_values("estimator", key=lambda s: s.eq("naive")) \
                .drop_duplicates(["query_id", "chunk_id"])
        # the effect size labels are ranked by (answer log-likelihood or success probability); older tables: ΔP
        dp = dict(zip(zip(labels["query_id"], labels["chunk_id"]), ranking_effect(labels)))
        return table.assign(target=[dp.get((q, d), np.nan) for q, d in zip(table["query_id"], table["chunk_id"])])
    raise ValueError(f"unknown target {target!r}; known: {TARGETS}")


def single_thread():
    """One OpenMP thread for the trees. Measured on 2 shared cores under load: a 1,500-row fit took 13 s with
    the default threads (they spin-wait on each other) and 0.6 s with one; 65,000 rows 24 s vs 2.5 s."""
    return threadpool_limits(1, user_api="openmp")


def _estimator(target: str, params: dict[str, Any]):
    if is_ranker(params):
        if target != "qrels":
            raise ValueError(f"LambdaMART fits graded relevance (target qrels), not {target!r}")
        # optional heavy dependency, as scikit-learn below: only fitting needs it, not a search
        from lightgbm import LGBMRanker

        return LGBMRanker(random_state=0, n_jobs=1, verbose=-1, **params)
    # optional heavy dependency: scikit-learn takes seconds to import; only fitting needs it, not a search
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    cls = HistGradientBoostingClassifier if target == "qrels" else HistGradientBoostingRegressor
    return cls(random_state=0, early_stopping=False, **params)


@dataclass
class CausalRelevanceModel:
    """A fitted model plus everything needed to rebuild its features at query time."""
    estimator: Any
    target: str
    params: dict[str, Any]
    extractor_settings: dict[str, Any]
    features: tuple[str, ...] = FEATURES
    metadata: dict[str, Any] = field(default_factory=dict)

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        x = features[list(self.features)].to_numpy(np.float64)
        if not len(x):
            return np.zeros(0)
        with single_thread():
            if self.target == "qrels" and not is_ranker(self.params):
                return self.estimator.predict_proba(x)[:, 1]
            return self.estimator.predict(x)   # ΔP, or a LambdaMART score (comparable within a query only)

    def save(self, path: str | UPath) -> UPath:
        import joblib  # scikit-learn's persistence (0.2 s to import): only when a model is saved or loaded

        path = UPath(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        joblib.dump(self, buf)
        path.write_bytes(buf.getvalue())
        return path

    @classmethod
    def load(cls, path: str | UPath) -> "CausalRelevanceModel":
        """Loads a pickle: only ever from the project's own storage (it executes code on load)."""
        import joblib  # scikit-learn's persistence (0.2 s to import): only when a model is saved or loaded

        model = joblib.load(io.BytesIO(UPath(path).read_bytes()))
        if not isinstance(model, cls):
            raise TypeError(f"{path}: not a CausalRelevanceModel")
        return model

    def fingerprint(self) -> str:
        blob = json.dumps({"target": self.target, "params": self.params, "extractor": self.extractor_settings,
                           "metadata": self.metadata}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def fit_model(table: pd.DataFrame, target: str, params: dict[str, Any], extractor_settings: dict[str, Any],
              metadata: dict[str, Any] | None = None) -> CausalRelevanceModel:
    # the optional features the table carries (an extractor with `question_likelihood` adds them)
    features = (*FEATURES, *(f for f in QUESTION_LIKELIHOOD if f in table.columns))
    if "question_likelihood" in extractor_settings and \
            bool(extractor_settings["question_likelihood"]) != (len(features) > len(FEATURES)):
        raise ValueError("the extractor settings and the table disagree on the question-likelihood feature")
    train = table.dropna(subset=["target"])
    if train["query_id"].nunique() < 2:
        raise ValueError(f"too few labelled queries to train on ({train['query_id'].nunique()})")
    y = train["target"].to_numpy()
    if target == "qrels" and len(set(y)) < 2:
        raise ValueError("qrels target has a single class among the candidates: nothing to learn")
    with single_thread():
        if is_ranker(params):
            # LambdaMART's groups: each query's candidates in consecutive rows
            train = train.sort_values("query_id", kind="stable")
            y = train["target"].to_numpy()
            est = _estimator(target, params).fit(train[list(features)].to_numpy(np.float64), y.astype(int),
                                                 group=train.groupby("query_id", sort=False).size().to_numpy())
        else:
            est = _estimator(target, params).fit(train[list(features)].to_numpy(np.float64), y)
    meta = {"train_queries": int(train["query_id"].nunique()), "train_rows": int(len(train)),
            "positives": int((y > 0).sum()), **(metadata or {})}
    return CausalRelevanceModel(est, target, dict(params), dict(extractor_settings), features, meta)


def query_folds(query_ids: Sequence[str], n_folds: int, seed: int = 0,
                qrels: Qrels | None = None) -> list[list[str]]:
    """Queries split into `n_folds` groups (all candidates of a query stay in one fold). With `qrels`, queries that
    share a relevant document stay in one fold too: otherwise a held-out query's gold document was a positive of
    the training folds, and a model that remembers *which documents* were relevant (trees split finely enough on
    document-level values to recognise one) is rewarded by the CV for a memory, not for ranking. Measured on SciFact,
    where 538 of 809 train claims share a gold abstract: folds by query chose 31-leaf LambdaMART (CV nDCG@10 0.7886
    vs 0.7697 at 15 leaves), whose test gain was all memory: 0.773 -> 0.837 on the 196 test claims whose gold
    abstract is gold in train, 0.752 -> 0.746 on the other 104. Where no two queries share a relevant document (the
    multi-hop sets: gold paragraphs are per question) the folds are the plain ones."""
    ids = sorted(set(query_ids))
    rng = np.random.default_rng(seed)
    units = _sharing_units(ids, qrels) if qrels else [[q] for q in ids]
    if all(len(u) == 1 for u in units):
        perm = rng.permutation(len(ids))
        return [[ids[i] for i in part] for part in np.array_split(perm, n_folds) if len(part)]
    folds: list[list[str]] = [[] for _ in range(n_folds)]
    for i in rng.permutation(len(units)):   # each unit to the smallest fold so far (ties: the first)
        min(folds, key=len).extend(units[i])
    return [f for f in folds if f]


def _sharing_units(ids: list[str], qrels: Qrels) -> list[list[str]]:
    """The queries of `ids` grouped by shared relevant documents: the connected components of the query-document
    graph of `qrels`' positive judgements, each in `ids` order, in the order of their first query."""
    docs: dict[str, int] = {}
    edges = [(i, len(ids) + docs.setdefault(d, len(docs))) for i, q in enumerate(ids)
             for d, grade in (qrels.get(q) or {}).items() if grade > 0]
    n = len(ids) + len(docs)
    rows, cols = zip(*edges) if edges else ((), ())
    _, label = connected_components(sp.coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(n, n)), directed=False)
    units: dict[int, list[str]] = {}
    for i, q in enumerate(ids):
        units.setdefault(int(label[i]), []).append(q)
    return list(units.values())


def run_from_scores(table: pd.DataFrame, scores: np.ndarray) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for q, d, s in zip(table["query_id"], table["chunk_id"], scores):
        run.setdefault(q, {})[d] = float(s)
    return run


def cross_validate(table: pd.DataFrame, target: str, params: dict[str, Any], eval_qrels: Qrels,
                   metric: str, folds: Sequence[Sequence[str]]) -> tuple[float, np.ndarray, dict[str, float]]:
    """K-fold over `folds` (query ids, e.g. `query_folds`' grouped folds): each fold's queries are scored by a model
    trained on the labelled pairs of every query outside it (queries in no fold always train). Returns (metric of the
    out-of-fold ranking against `eval_qrels`, out-of-fold scores (NaN for rows of queries outside the folds or
    `eval_qrels`), that metric per judged query)."""
    oof = np.full(len(table), np.nan)
    for fold in folds:
        held = table["query_id"].isin(fold).to_numpy()
        model = fit_model(table[~held], target, params, {})
        oof[held] = model.predict(table[held])
    oof[~table["query_id"].isin(eval_qrels).to_numpy()] = np.nan
    mask = ~np.isnan(oof)
    run = run_from_scores(table[mask], oof[mask])
    per_query = named_metric_per_query({q: eval_qrels[q] for q in run}, run, metric)
    return (float(np.mean(list(per_query.values()))) if per_query else float("nan")), oof, per_query


class LearnedRetriever:
    """First stage (the extractor's hybrid, `depth` candidates or `within`) reranked by the model's score.
    Retriever protocol: `name = "learned"`. Candidates beyond the first stage are not returned (k > depth
    returns depth hits)."""

    name = "learned"

    def __init__(self, index: CorpusIndex, model: CausalRelevanceModel,
                 graph: tuple[pd.DataFrame, pd.DataFrame] | None = None, depth: int | None = None,
                 scorer: Scorer | None = None):
        settings = {k: v for k, v in model.extractor_settings.items() if v is not None}
        if depth is not None:
            settings["depth"] = depth
        self.index, self.model = index, model
        # `scorer`: the log-probability scorer, for a model that uses the question-likelihood feature
        self.extractor = FeatureExtractor(index, graph, scorer=scorer, **settings)

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        vectors = self.index.embedder.encode_queries(queries)
        return [self._rank(q, qv, within[i] if within else None, k) for i, (q, qv) in enumerate(zip(queries, vectors))]

    def rerank(self, query: str, chunk_ids: Sequence[str], k: int | None = None) -> list[Hit]:
        """A reranking stage over any candidate list (z-scores are then taken over that list)."""
        qv = self.index.embedder.encode_queries([query])[0]
        return self._rank(query, qv, list(chunk_ids), k or len(chunk_ids))

    def shortlist(self, query: str, n: int, within: Sequence[str] | None = None) -> list[Hit]:
        """The causal retriever's shortlist callable `(query, n, within) -> [Hit]`."""
        return self.retrieve_many([query], n, [list(within)] if within is not None else None)[0]

    def _rank(self, query: str, qv: np.ndarray, within: list[str] | None, k: int) -> list[Hit]:
        c = self.extractor.candidates(query, qv, within)
        if not len(c.positions):
            return []
        scores = self.model.predict(c.features)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]  # ties keep first-stage order
        rows = self.index.chunks
        return [Hit(str(self.index.ids[p]), float(scores[i]), r + 1, str(rows.at[p, "title"]), str(rows.at[p, "kind"]))
                for r, (i, p) in enumerate((i, c.positions[i]) for i in order)]
