"""The evaluation per query (`evaluation_per_query`): one row per (split, retriever, question) with where its gold
and its YES documents ranked, its metric values, its answer gain and its failure bucket, so a figure of the
report can be followed down to the questions that make it."""
from __future__ import annotations

import pandas as pd

from causal_assets.core.measures.metrics import Qrels

COLUMNS = ["benchmark", "split", "retriever", "query_id", "text", "gold_ranks", "yes_ranks", "ndcg_10", "recall_10",
           "mrr_10", "labels_ndcg_10", "answer_gain", "answer_k", "bucket"]
# (column, truth, metric, k) of the values table
VALUE_COLUMNS = [("ndcg_10", "qrels", "ndcg", 10), ("recall_10", "qrels", "recall", 10), ("mrr_10", "qrels", "mrr", 10),
                 ("labels_ndcg_10", "mc_labels", "ndcg", 10)]


def _ranks(relevant: pd.DataFrame, runs: pd.DataFrame, keys: pd.DataFrame) -> pd.Series:
    """Per (split, retriever, query_id) of `keys`: the ranks of its `relevant` documents (split, query_id, chunk_id)
    in the retriever's ranking, best first, 0 for one not in it."""
    if not len(relevant):
        return pd.Series([[] for _ in range(len(keys))], index=pd.MultiIndex.from_frame(keys), dtype=object)
    wanted = keys.merge(relevant, on=["split", "query_id"], how="left")
    found = wanted.merge(runs[["split", "retriever", "query_id", "chunk_id", "rank"]], how="left",
                         on=["split", "retriever", "query_id", "chunk_id"])
    found["rank"] = found["rank"].fillna(0).astype(int)
    found = found[found["chunk_id"].notna()]

    def order(ranks):
        return sorted((int(r) for r in ranks), key=lambda r: (r == 0, r))

    grouped = found.groupby(["split", "retriever", "query_id"], sort=False)["rank"].agg(order)
    return grouped.reindex(pd.MultiIndex.from_frame(keys)).map(lambda v: v if isinstance(v, list) else [])


def per_query_table(benchmark: str, values: pd.DataFrame, runs: pd.DataFrame, qrels: pd.DataFrame,
                    yes: Qrels, answers: pd.DataFrame, failures: pd.DataFrame,
                    queries: pd.DataFrame) -> pd.DataFrame:
    """`values`: the run's per-query values (gate.VALUE_COLUMNS); `runs`, `qrels`, `answers`, `failures`,
    `queries`: the evaluation's tables; `yes`: the YES labels by question."""
    keys = values[["split", "retriever", "query_id"]].drop_duplicates().reset_index(drop=True)
    if not len(keys):
        return pd.DataFrame(columns=COLUMNS)
    out = keys.copy()
    for column, truth, metric, k in VALUE_COLUMNS:
        sel = values[(values["truth"] == truth) & (values["metric"] == metric) & (values["k"] == k)]
        out = out.merge(sel[["split", "retriever", "query_id", "value"]].rename(columns={"value": column}),
                        how="left", on=["split", "retriever", "query_id"])
    gold = qrels[qrels["relevance"] > 0][["split", "query_id", "chunk_id"]]
    out["gold_ranks"] = _ranks(gold, runs, keys).to_numpy()
    labelled = pd.DataFrame([(q, d) for q, docs in yes.items() for d in docs], columns=["query_id", "chunk_id"])
    labelled = keys[["split", "query_id"]].drop_duplicates().merge(labelled, on="query_id")
    out["yes_ranks"] = _ranks(labelled, runs, keys).to_numpy()
    if answers is not None and len(answers):
        top = answers[answers["k"] == answers["k"].max()]
        out = out.merge(top[["split", "retriever", "query_id", "answer_gain", "k"]].rename(columns={"k": "answer_k"}),
                        how="left", on=["split", "retriever", "query_id"])
    else:
        out["answer_gain"], out["answer_k"] = float("nan"), pd.NA
    out["answer_k"] = out["answer_k"].astype("Int64")
    missed = failures[["split", "retriever", "query_id", "bucket"]] if len(failures) else \
        pd.DataFrame(columns=["split", "retriever", "query_id", "bucket"])
    out = out.merge(missed, how="left", on=["split", "retriever", "query_id"])
    # a judged question not among the misses found a relevant document in the top 10
    out["bucket"] = out["bucket"].where(out["bucket"].notna(), out["ndcg_10"].map(lambda v: "none" if v == v else ""))
    out = out.merge(queries[["split", "query_id", "text"]], how="left", on=["split", "query_id"])
    return out.assign(benchmark=benchmark, text=out["text"].fillna(""))[COLUMNS]


def worst_queries(table: pd.DataFrame, retriever: str | None, n: int = 10) -> pd.DataFrame:
    """The `n` questions `retriever` (default: all) does worst on by nDCG@10 (else against the labels), as the
    asset's metadata shows them."""
    rows = table if retriever is None or retriever not in set(table["retriever"]) else \
        table[table["retriever"] == retriever]
    column = "ndcg_10" if rows["ndcg_10"].notna().any() else "labels_ndcg_10"
    rows = rows.sort_values([column, "query_id"], kind="stable").head(n)
    return pd.DataFrame({"split": rows["split"], "retriever": rows["retriever"], "query": rows["query_id"],
                         "text": rows["text"].str.slice(0, 80), column: rows[column].round(4),
                         "gold ranks": rows["gold_ranks"].map(format_ranks),
                         "YES ranks": rows["yes_ranks"].map(format_ranks), "bucket": rows["bucket"]})


def format_ranks(ranks) -> str:
    return ", ".join("-" if int(r) == 0 else str(int(r)) for r in (ranks if ranks is not None else []))
