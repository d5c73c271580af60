"""The Markdown evaluation report: metric tables, failure buckets with their rules, metric@K plots."""
from __future__ import annotations

import base64
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers
import matplotlib.pyplot as plt
import pandas as pd

from causal_assets.core.evaluation.failures import BUCKET_RULES

HEADLINE = [("ndcg", 10), ("mrr", 10), ("map", 10), ("recall", 10), ("hit_rate", 1), ("hit_rate", 5),
            ("precision", 2), ("recall", 100)]


def headline_table(metrics: pd.DataFrame, truth: str = "qrels") -> pd.DataFrame:
    """Headline metrics per (split, retriever) against one truth (`qrels` or `mc_labels`)."""
    if "truth" in metrics:
        metrics = metrics[metrics["truth"] == truth]
    rows = {}
    for (split, retriever), group in metrics.groupby(["split", "retriever"], sort=False):
        values = {f"{m}@{k}": group[(group.metric == m) & (group.k == k)]["value"] for m, k in HEADLINE}
        rows[(split, retriever)] = {name: round(float(v.iloc[0]), 4) for name, v in values.items() if len(v)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["split", "retriever"])


def overfitting_gauge(metrics: pd.DataFrame, metric: str, tuned_train: dict[str, float] | None = None,
                      extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per retriever, `metric` (and each of `extra`, e.g. 'precision@2') on the shared `dev` sample beside the
    held-out `test` half: a retriever whose figure falls from dev (where its heuristics or defaults were developed,
    which contains the tune half) to test fits what it saw. `tuned_train`: the tuning figure of each `*_tuned`
    retriever on the tune split (cross-validated for `learned`), which stands in for dev (not scored there)."""
    if "truth" in metrics:
        metrics = metrics[metrics["truth"] == "qrels"]
    rows = []
    for name in [metric, *extra]:
        m, _, k = name.partition("@")
        sel = metrics[(metrics["metric"] == m) & (metrics["k"] == int(k))]
        values = sel.pivot_table(index="retriever", columns="split", values="value", aggfunc="first", sort=False)
        for retriever, row in values.iterrows():
            dev, test = row.get("dev", float("nan")), row.get("test", float("nan"))
            seen = (tuned_train or {}).get(retriever) if name == metric else None
            rows.append({"retriever": retriever, "metric": name, "tune split (tuning figure)": seen,
                         "dev": dev, "test": test,
                         "fall to test": round((seen if seen is not None else dev) - test, 4)})
    return pd.DataFrame(rows).round(4)


def curves_png(metrics: pd.DataFrame, split: str, title: str) -> bytes:
    data = metrics[metrics["split"] == split]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, metric in zip(axes, ("ndcg", "recall", "precision")):
        for retriever, g in data[(data.metric == metric) & (data.k > 0)].groupby("retriever", sort=False):
            g = g.sort_values("k")
            ax.plot(g["k"], g["value"], marker="o", label=retriever)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"{metric}@K")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return _png(fig)


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def write_report(benchmark: str, metrics: pd.DataFrame, failures: pd.DataFrame, notes: list[str],
                 out_dir: Path, sections: list[str] | None = None) -> tuple[str, Path]:
    """Write `<out_dir>/<benchmark>.md` and its plots; returns (markdown with inline images, path). `sections`:
    extra Markdown lines placed after the headline table (e.g. the overfitting gauge)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# Evaluation report: {benchmark}", "", *[f"- {n}" for n in notes], "",
             "## Headline metrics (truth: the benchmark's judgements)", "", headline_table(metrics).to_markdown(), "",
             *(sections or [])]
    if "truth" in metrics and (metrics["truth"] == "mc_labels").any():
        lines += ["## Against the Monte Carlo labels (documents that measurably helped the solver)", "",
                  headline_table(metrics, "mc_labels").to_markdown(), ""]
    inline = list(lines)
    if "truth" in metrics:
        metrics = metrics[metrics["truth"] == "qrels"]
    for split in metrics["split"].unique():
        png = curves_png(metrics, split, f"{benchmark} / {split}")
        path = out_dir / f"{benchmark}_{split}_curves.png"
        path.write_bytes(png)
        lines += [f"![{split} curves]({path.name})", ""]
        inline += [f"![{split} curves](data:image/png;base64,{base64.b64encode(png).decode()})", ""]
    fail = ["## Failure buckets (queries with no relevant document in the top 10)", ""]
    if len(failures):
        counts = failures.pivot_table(index=["split", "retriever"], columns="bucket", values="query_id",
                                      aggfunc="count", fill_value=0)
        fail += [counts.to_markdown(), ""]
    fail += ["Rules, tried in this order:", ""] + [f"- **{b}**: {r}" for b, r in BUCKET_RULES.items()] + [""]
    lines += fail
    inline += fail
    path = out_dir / f"{benchmark}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return "\n".join(inline), path


def quality_png(summaries: dict[str, dict], title: str) -> bytes:
    """Bars per estimator: YES precision / recall / F1, top-2 precision and ROC AUC of the effect ranking, beside
    the "contains the answer" heuristic on the same candidates."""
    names = ["YES precision", "YES recall", "YES F1", "top-2 precision", "ROC AUC"]
    series = {}
    for est, s in summaries.items():
        lab, rk = s.get("labels", {}), s.get("ranking", {})
        series[f"labels ({est})"] = [lab.get("precision"), lab.get("recall"), lab.get("f1"),
                                     rk.get("top2_precision"), rk.get("auc")]
    if summaries:
        s = next(iter(summaries.values()))
        c, cr = s.get("containment", {}), s.get("containment_ranking", {})
        series["contains the answer"] = [c.get("precision"), c.get("recall"), c.get("f1"), cr.get("top2_precision"),
                                         cr.get("auc")]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(names))], [v if v == v and v is not None else 0 for v in values],
               width, label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(names))], names)
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _png(fig)
