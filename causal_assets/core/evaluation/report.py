"""The Markdown evaluation report: the number of queries, headline metrics that fit the benchmark (no recall@k with k
at or above the candidates a query has), 95% intervals and paired significance against the best baseline, the
Monte Carlo label summary, metric@K plots (one style per retriever family), failure buckets with their rules and
examples of each."""
from __future__ import annotations

import base64
import io
from pathlib import Path

import pandas as pd

from causal_assets.core.evaluation.failures import BUCKET_RULES
from causal_assets.core.evaluation.answers import paired_gain
from causal_assets.core.measures.significance import compare_to_baseline, format_comparison
from causal_assets.core.registry.retrievers import BASELINES
from causal_assets.core.registry.retrievers import KINDS

HEADLINE = [("ndcg", 10), ("mrr", 10), ("map", 10), ("recall", 2), ("recall", 5), ("recall", 10), ("hit_rate", 1),
            ("hit_rate", 5), ("precision", 2), ("recall", 100)]
# At or above the number of candidates a query has, recall and hit rate are 1 by construction.
SATURATING = ("recall", "hit_rate")
FAILURE_EXAMPLES = 3

# Retriever families (`kinds.Kind.family`): one line style and marker per family, one colour per retriever; tuned
# variants dashed.
FAMILY_STYLE = {"lexical": ("-", "o"), "dense": ("-", "s"), "fusion": ("-.", "D"), "graph": (":", "^"),
                "causal": ("-", "P"), "learned": ("-", "*"), "other": ("-", "x")}


def _plot_retriever(ax, k, values, retriever: str, i: int, colours) -> None:
    """One retriever's line: its family's style and marker, dashed and hollow when tuned, the i-th colour."""
    style, marker = FAMILY_STYLE[family(retriever)]
    tuned = retriever.endswith("_tuned")
    ax.plot(k, values, linestyle="--" if tuned else style, marker=marker, markersize=5,
            color=colours[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20], linewidth=1.4,
            markerfacecolor="none" if tuned else None, label=f"{retriever} ({family(retriever)})")


def family(retriever: str) -> str:
    k = KINDS.get(retriever.removesuffix("_tuned"))
    return k.family if k is not None else "other"


def headline_columns(n_candidates: int | None) -> list[tuple[str, int]]:
    """The headline metrics that mean something when each query ranks `n_candidates` documents (None: the whole
    corpus, assumed larger than every k)."""
    if n_candidates is None:
        return list(HEADLINE)
    return [(m, k) for m, k in HEADLINE
            if k <= n_candidates and not (m in SATURATING and k >= n_candidates)]


def headline_table(metrics: pd.DataFrame, truth: str = "qrels", n_candidates: int | None = None,
                   n_queries: dict[str, int] | None = None) -> pd.DataFrame:
    """Headline metrics per (split, retriever) against one truth (`qrels` or `mc_labels`): plain columns `split`,
    `retriever` (and `n`, the queries scored, when given), then one column per metric."""
    if "truth" in metrics:
        metrics = metrics[metrics["truth"] == truth]
    rows = []
    for (split, retriever), group in metrics.groupby(["split", "retriever"], sort=False):
        row = {"split": split, "retriever": retriever}
        if n_queries is not None:
            row["n"] = n_queries.get(split)
        for m, k in headline_columns(n_candidates):
            v = group[(group.metric == m) & (group.k == k)]["value"]
            if len(v):
                row[f"{m}@{k}"] = round(float(v.iloc[0]), 4)
        rows.append(row)
    return pd.DataFrame(rows)


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


def curves_png(metrics: pd.DataFrame, split: str, title: str, n_candidates: int | None = None) -> bytes:
    data = metrics[metrics["split"] == split]
    if n_candidates is not None:
        data = data[data.k <= n_candidates]
    retrievers = list(dict.fromkeys(data["retriever"]))
    fig = _figure(figsize=(13, 3.8))
    colours = _colours("tab20")
    axes = fig.subplots(1, 3)
    for ax, metric in zip(axes, ("ndcg", "recall", "precision")):
        for i, retriever in enumerate(retrievers):
            g = data[(data.metric == metric) & (data.k > 0) & (data.retriever == retriever)].sort_values("k")
            if g.empty:
                continue
            _plot_retriever(ax, g["k"], g["value"], retriever, i, colours)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"{metric}@K")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(title)
    return _png(fig)


def _figure(**kwargs):
    """A figure outside pyplot: no global figure registry to close or leak in a long-running process, and no
    backend or display to choose (savefig renders PNG with Agg). Imported here: matplotlib costs ~0.5 s, which every
    process loading the code location would pay, for the evaluation steps' plots alone."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _colours(name: str) -> tuple:
    from matplotlib import colormaps

    return colormaps[name].colors


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def label_summary(labels: pd.DataFrame) -> list[str]:
    """Markdown lines summarising the Monte Carlo labels (the labels' own estimator, not the naive comparison)."""
    if labels is None or labels.empty:
        return []
    own = labels[labels["estimator"] != "naive"] if "estimator" in labels and (labels["estimator"] != "naive").any() \
        else labels
    counts = own["label"].value_counts()
    n = len(own)
    per_q = own.groupby("query_id")
    estimator = (f", estimator `{', '.join(sorted(own['estimator'].astype(str).unique()))}`"
                 if "estimator" in own else "")
    lines = ["## Monte Carlo labels", "",
             f"- {own['query_id'].nunique()} questions, {n} judged (question, document) pairs{estimator}",
             "- labels: " + ", ".join(f"{lab} {int(counts.get(lab, 0))} ({counts.get(lab, 0) / max(n, 1):.0%})"
                                      for lab in ("YES", "NO", "UNCERTAIN")),
             f"- YES documents per question: median {per_q['label'].apply(lambda s: (s == 'YES').sum()).median():g}"]
    if "trials_used" in own:
        lines.append(f"- solver trials per question: median {per_q['trials_used'].max().median():g}")
    if "origin" in own:
        seeds = own[own["origin"] == "seed"]
        if len(seeds):
            lines.append(f"- YES rate among the pool's seed documents (gold or their graph neighbours): "
                         f"{(seeds['label'] == 'YES').mean():.0%}; among the others: "
                         f"{(own[own['origin'] != 'seed']['label'] == 'YES').mean():.0%}")
    return lines + [""]


def failure_examples(failures: pd.DataFrame, queries: dict[str, dict[str, str]], retriever: str,
                     per_bucket: int = FAILURE_EXAMPLES) -> list[str]:
    """A few failed queries of `retriever` per bucket, with their text and why they landed there."""
    rows = failures[failures["retriever"] == retriever]
    if rows.empty:
        return []
    lines = [f"Examples (retriever `{retriever}`, up to {per_bucket} per bucket):", ""]
    for bucket, group in rows.groupby("bucket", sort=True):
        lines.append(f"- **{bucket}**")
        for r in group.head(per_bucket).to_dict("records"):
            text = queries.get(r["split"], {}).get(r["query_id"], "")
            text = (text[:140] + "…") if len(text) > 140 else text
            detail = str(r.get("detail") or "")[:160]
            lines.append(f"  - `{r['query_id']}` ({r['split']}) “{text}” — {detail}")
    return lines + [""]


def below_bm25(group: pd.DataFrame, selected: str | None, metric: str) -> list[str]:
    """A line where the selected tuned retriever scores below bm25 on these queries (`group`: retriever,
    query_id, value), with the paired difference, its interval and p; nothing where it does not."""
    name = f"{selected}_tuned" if selected else None
    if name is None or name == "bm25_tuned" or not {name, "bm25"} <= set(group["retriever"]):
        return []
    row = compare_to_baseline(group[group["retriever"].isin([name, "bm25"])], ("bm25",))
    row = row[row["retriever"] == name].iloc[0]
    if not row["delta"] < 0:
        return []
    return [f"**The selected retriever `{name}` scores below bm25 here**: {metric} Δ {row['delta']:+.3f} "
            f"(95% interval {row['delta_low']:+.3f} to {row['delta_high']:+.3f}, p = {row['p']:.2f}).", ""]


def write_report(benchmark: str, metrics: pd.DataFrame, failures: pd.DataFrame, notes: list[str],
                 out_dir: Path, per_query: pd.DataFrame | None = None, queries: dict[str, dict[str, str]] | None = None,
                 n_candidates: int | None = None, labels: pd.DataFrame | None = None,
                 primary: tuple[str, int] = ("ndcg", 10), sections: list[str] | None = None,
                 answers: pd.DataFrame | None = None, answer_notes: list[str] | None = None,
                 selection: list[str] | None = None, selected: str | None = None) -> tuple[str, Path]:
    """Write `<out_dir>/<benchmark>.md` and its plots; returns (markdown with inline images, path).

    per_query: split, retriever, query_id, value of the `primary` metric (for intervals and significance);
    queries: split -> query id -> text (failure examples); n_candidates: documents each query ranks (a fixed
    pool such as HotpotQA's 10 paragraphs), None for the whole corpus; labels: `mc_labels` for their summary;
    sections: extra Markdown lines placed after the headline table (e.g. the overfitting gauge); answers: the
    `evaluation_answers` rows and answer_notes what the answer utility says of itself (its cost, or why it was
    skipped) for the "Answer utility" section; selection: the lines of `truth_selection_section`, after it;
    selected: the retriever tuning selected (its `_tuned` run is held to bm25's figure)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    queries = queries or {}
    n_queries = {s: len(q) for s, q in queries.items()} or None
    metric_name = f"{primary[0]}@{primary[1]}"
    qrels_metrics = metrics[metrics["truth"] == "qrels"] if "truth" in metrics else metrics
    scope = f"each query ranks its own {n_candidates} candidates" if n_candidates else "each query ranks the whole corpus"
    has_gold = bool(len(qrels_metrics)) and (("truth" not in metrics) or (metrics["truth"] == "qrels").any())
    lines = [f"# Evaluation report: {benchmark}", "", *[f"- {n}" for n in notes],
             "- queries scored per split: " + (", ".join(f"`{s}` {n}" for s, n in n_queries.items()) if n_queries else "?")
             + f"; {scope}" + ("" if n_candidates is None else
                               " (recall and hit rate at k ≥ that number are 1 by construction and left out)"), "",
             *small_sample_caveat(per_query, n_queries or {}),
             *(["## Headline metrics (truth: the benchmark's judgements)", "",
                headline_table(metrics, n_candidates=n_candidates, n_queries=n_queries).to_markdown(index=False), ""]
               if has_gold else
               ["## Headline metrics", "", "This benchmark has no gold documents on its eval splits: every figure "
                "below is against the Monte Carlo labels.", ""]),
             *(sections or [])]
    if per_query is not None and len(per_query):
        lines += [f"## {metric_name}: 95% intervals and significance against the best baseline", "",
                  "Intervals: bootstrap over queries (2,000 resamples). Δ: paired difference to the best of the "
                  f"baselines ({', '.join(BASELINES)}) on the same queries; p: Fisher's paired randomization test "
                  "(ranx, 10,000 permutations); * p < 0.05.", ""]
        for split, group in per_query.groupby("split", sort=False):
            table = format_comparison(compare_to_baseline(group, BASELINES), metric_name)
            lines += [f"### `{split}`", "", table.to_markdown(index=False), "",
                      *below_bm25(group, selected, metric_name)]
    if "truth" in metrics and (metrics["truth"] == "mc_labels").any():
        lines += ["## Against the Monte Carlo labels (documents that measurably helped the solver)", "",
                  headline_table(metrics, "mc_labels", n_candidates=n_candidates).to_markdown(index=False), ""]
    lines += label_summary(labels)
    inline = list(lines)
    curves = qrels_metrics if has_gold else metrics[metrics["truth"] == "mc_labels"]
    for split in curves["split"].unique():
        png = curves_png(curves, split, f"{benchmark} / {split}" + ("" if has_gold else " (truth: mc_labels)"),
                         n_candidates)
        path = out_dir / f"{benchmark}_{split}_curves.png"
        path.write_bytes(png)
        lines += [f"![{split} curves]({path.name})", ""]
        inline += [f"![{split} curves](data:image/png;base64,{base64.b64encode(png).decode()})", ""]
    if answer_notes or (answers is not None and len(answers)):
        plain, embedded = answer_section(benchmark, answers, answer_notes or [], out_dir)
        lines += plain
        inline += embedded
    lines += selection or []
    inline += selection or []
    fail = ["## Failure buckets (queries with no relevant document in the top 10)", ""]
    if len(failures):
        counts = failures.pivot_table(index=["split", "retriever"], columns="bucket", values="query_id",
                                      aggfunc="count", fill_value=0).reset_index()
        counts.columns.name = None
        fail += [counts.to_markdown(index=False), ""]
        best = _best(curves, primary)
        if best is not None:
            fail += failure_examples(failures, queries, best)
    fail += ["Rules, tried in this order:", ""] + [f"- **{b}**: {r}" for b, r in BUCKET_RULES.items()] + [""]
    lines += fail
    inline += fail
    path = out_dir / f"{benchmark}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return "\n".join(inline), path


def answer_table(group: pd.DataFrame) -> pd.DataFrame:
    """One split's answer gains (`evaluation_answers` rows) as the report prints them: per retriever and k the mean
    gain with its 95% bootstrap interval, and the paired difference to the best retriever at that k (references
    `@...` excluded) with its interval and Fisher's randomization p, on the questions both have; where the solver
    generated, the share of its answers the validator passed."""
    out = []
    judged = "answer_passed" in group and group["answer_passed"].notna().any()
    for k, at_k in group.groupby("k", sort=True):
        passed = at_k.groupby("retriever", sort=False)["answer_passed"].mean() if judged else None
        per_query = at_k.rename(columns={"answer_gain": "value"})[["retriever", "query_id", "value"]]
        own = [r for r in per_query["retriever"].drop_duplicates() if not str(r).startswith("@")]
        table = compare_to_baseline(per_query, baselines=own, fill=None)
        for r in table.to_dict("records"):
            delta = r.get("delta")
            has_delta = delta is not None and delta == delta
            out.append({
                "retriever": r["retriever"], "k": int(k), "n": int(r["n"]), "gain (nats)": f"{r['mean']:+.3f}",
                "95% interval": f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
                "best retriever": r["baseline"] or "",
                "Δ vs best": f"{delta:+.3f}" if has_delta else "(best)" if r["retriever"] == r["baseline"] else "",
                "Δ 95% interval": f"[{r['delta_low']:+.3f}, {r['delta_high']:+.3f}]" if has_delta else "",
                "p (randomization)": (f"{r['p']:.4f}" + (" *" if r["significant"] else "")) if has_delta else "",
                **({"answers passed": f"{passed[r['retriever']]:.2f}"} if judged else {}),
            })
    return pd.DataFrame(out)


def answers_png(group: pd.DataFrame, title: str) -> bytes:
    """Mean answer gain by k, one line per retriever (the metric@K plots' styles), references in grey."""
    means = group.groupby(["retriever", "k"], sort=False)["answer_gain"].mean().reset_index()
    fig = _figure(figsize=(7, 3.8))
    colours = _colours("tab20")
    ax = fig.subplots()
    reference_style = {"@gold": ("-", "*"), "@labels": ("--", "v"), "@random": (":", "x")}
    for i, retriever in enumerate(dict.fromkeys(means["retriever"])):
        g = means[means.retriever == retriever].sort_values("k")
        if retriever in reference_style or str(retriever).startswith("@"):
            style, marker = reference_style.get(retriever, ("-.", "x"))
            ax.plot(g["k"], g["answer_gain"], linestyle=style, marker=marker, color="0.35", linewidth=1.4,
                    label=f"{retriever} (reference)")
            continue
        _plot_retriever(ax, g["k"], g["answer_gain"], retriever, i, colours)
    ax.axhline(0, color="0.6", linewidth=0.8)
    ax.set_xticks(sorted(means["k"].unique()))
    ax.set_xlabel("k (top documents shown)")
    ax.set_ylabel("answer gain (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title(title)
    return _png(fig)


REFERENCE_TEXT = {"@gold": "`@gold`, the relevant documents first, then random candidates",
                  "@labels": "`@labels`, the pool by Monte Carlo label effect (labelled questions only)",
                  "@random": "`@random`, random candidates"}


def answer_section(benchmark: str, answers: pd.DataFrame | None, notes: list[str],
                   out_dir: Path) -> tuple[list[str], list[str]]:
    """The "Answer utility" section: (lines with the plots as files beside the report, lines with them inline)."""
    title = ["## Answer utility (the solver's log-likelihood of the answer given the top k)", ""]
    listed = [*[f"- {n}" for n in notes], *([""] if notes else [])]
    if answers is None or not len(answers):
        return title + listed, title + listed
    references = [text for name, text in REFERENCE_TEXT.items() if name in set(answers["retriever"])]
    lines = [*title,
             "Gain: the blind solver's log-likelihood of the gold answer given the retriever's top k documents in "
             "rank order, minus the same with no context, in nats (higher: the documents make the right answer "
             "likelier)." + (f" References: {'; '.join(references)}." if references else "")
             + " Intervals: bootstrap over questions; Δ: paired difference to the best retriever at that k "
             "(references excluded) on the questions both have; p: Fisher's paired randomization test; * p < 0.05.",
             "", *listed]
    inline = list(lines)
    for split, group in answers.groupby("split", sort=False):
        table = answer_table(group)
        part = [f"### `{split}`", "", table.to_markdown(index=False), ""]
        png = answers_png(group, f"{benchmark} / {split}: answer gain by k")
        path = out_dir / f"{benchmark}_{split}_answers.png"
        path.write_bytes(png)
        lines += part + [f"![{split} answer gain]({path.name})", ""]
        inline += part + [f"![{split} answer gain](data:image/png;base64,{base64.b64encode(png).decode()})", ""]
    return lines, inline


# A figure is resolved to about this much: a report says when its sample cannot resolve differences this large.
RESOLUTION = 0.05
CONFIDENCE = 0.95


def small_sample_caveat(per_query: pd.DataFrame | None, n_queries: dict[str, int]) -> list[str]:
    """Markdown lines warning, per eval split, when its queries are too few for the figures to be read as exact:
    the 95% intervals are wider than `RESOLUTION` on average, or an interval of zero width (e.g. nDCG 1.0 [1, 1] on
    8 queries) stands for a sample in which every query scored the same, while the share of queries that would miss
    can still be as high as 1 - 0.05^(1/n) (the exact 95% upper bound with no miss in n; 31% for n = 8)."""
    out = []
    for split, n in n_queries.items():
        if not n:
            continue
        widths, flat = [], False
        if per_query is not None and len(per_query):
            group = per_query[per_query["split"] == split]
            if len(group):
                table = compare_to_baseline(group, BASELINES)
                widths = ((table["ci_high"] - table["ci_low"]) / 2).tolist()
                flat = bool(((table["ci_high"] - table["ci_low"]) <= 1e-12).any())
        miss_bound = 1 - (1 - CONFIDENCE) ** (1 / n)
        wide = bool(widths) and sum(widths) / len(widths) > RESOLUTION
        if not (wide or (flat and miss_bound > RESOLUTION)):
            continue
        text = (f"**Small sample: `{split}` has {n} queries.** " +
                (f"Its 95% intervals are ±{sum(widths) / len(widths):.2f} on average, so only differences larger "
                 f"than that are more than noise. " if wide else ""))
        if flat:
            text += (f"An interval of zero width means every query scored the same in this sample, not that the "
                     f"figure is exact: with {n} queries and none missing, up to {miss_bound:.0%} of such questions "
                     f"could still miss (95% upper bound). ")
        out.append(text + "More questions narrow this (about 4× the questions halve an interval).")
    return out + ([""] if out else [])


def _best(metrics: pd.DataFrame, primary: tuple[str, int]) -> str | None:
    m = metrics[(metrics.metric == primary[0]) & (metrics.k == primary[1])]
    if m.empty:
        return None
    return str(m.groupby("retriever")["value"].mean().idxmax())


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
    fig = _figure(figsize=(9, 3.6))
    ax = fig.subplots()
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


TRUTH_TEXT = {"qrels": "the judgements (the tuner's nested figure)", "mc_labels": "the Monte Carlo labels",
              "answers": "the answer gain"}


def truth_selection_section(truths: dict | None, metrics: pd.DataFrame, answers: pd.DataFrame | None,
                            primary: tuple[str, int]) -> list[str]:
    """"Which truth selects the retriever that helps": the retriever each truth selected on the tune split
    (`tuned.content["truths"]`, core/tuning/truths.py), scored on each eval split under all three truths, and the
    answer gain of the answers' choice against the judgements' choice, paired on the same questions."""
    if not truths or not truths.get("selected_by"):
        return []
    chosen = {t: n for t, n in truths["selected_by"].items() if n}
    metric, k = primary
    lines = ["## Which truth selects the retriever that helps", "",
             f"Each truth chose among the tuned retrievers on the tune split (qrels: the tuner's nested {metric}@{k}; "
             f"mc_labels: {metric}@{k} against the YES labels; answers: the mean answer gain at "
             f"k={truths.get('answer_k')}, out of fold for fitted models; questions: "
             + ", ".join(f"{t} {n}" for t, n in (truths.get("questions") or {}).items()) + "). Below, each choice "
             "is scored on the eval splits under all three truths.", ""]
    if "answers" not in chosen:
        lines += ["- answers: not measured on the tune split (it needs `answers: {enabled: true}`, an LLM that "
                  "scores prompts and train questions with an answer)", ""]
    for split in metrics["split"].drop_duplicates():
        rows = []
        for truth, name in chosen.items():
            label = f"{name}_tuned"
            row = {"truth": truth, "selects": f"`{label}`",
                   "tune-split figure": f"{truths['figures'].get(name, {}).get(truth, float('nan')):.4f}"}
            for t in ("qrels", "mc_labels"):
                hit = metrics[(metrics.split == split) & (metrics.truth == t) & (metrics.retriever == label)
                              & (metrics.metric == metric) & (metrics.k == k)]
                row[f"{t} {metric}@{k}"] = f"{hit['value'].iloc[0]:.4f}" if len(hit) else "-"
            if answers is not None and len(answers):
                own = answers[(answers.split == split) & (answers.retriever == label)]
                for kk, g in own.groupby("k", sort=True):
                    row[f"answer gain @{kk}"] = f"{g['answer_gain'].mean():+.3f}"
            rows.append(row)
        if not any(r.get(f"qrels {metric}@{k}", "-") != "-" or r.get(f"mc_labels {metric}@{k}", "-") != "-"
                   for r in rows):
            continue   # the tuned retrievers are not scored on this split (it holds the tune split)
        lines += [f"### `{split}`", "", pd.DataFrame(rows).fillna("-").to_markdown(index=False), ""]
        lines += _paired_choice(answers, split, chosen)
    return lines


def _paired_choice(answers: pd.DataFrame | None, split: str, chosen: dict[str, str]) -> list[str]:
    """The answers' choice against the judgements' choice on answer gain, per k, paired on the same questions."""
    by_answers, by_qrels = chosen.get("answers"), chosen.get("qrels")
    if answers is None or not len(answers) or not by_answers or not by_qrels:
        return []
    if by_answers == by_qrels:
        return [f"- The answer gain and the judgements select the same retriever (`{by_qrels}_tuned`): nothing to "
                f"compare.", ""]
    out = []
    here = answers[answers.split == split]
    a, q = f"{by_answers}_tuned", f"{by_qrels}_tuned"
    for kk in sorted(here["k"].unique()):
        d = paired_gain(here, a, q, kk)
        if d is None:
            continue
        verdict = ("helps the solver more" if d["delta"] > 0 else "helps the solver less") if d["p"] < 0.05 else \
            "is not distinguishable from it"
        out.append(f"- k={kk}: the answers' choice `{a}` against the judgements' choice `{q}`: answer gain Δ "
                   f"{d['delta']:+.3f} nats [{d['low']:+.3f}, {d['high']:+.3f}] on {d['questions']} questions, "
                   f"p = {d['p']:.4f} (paired randomization): it {verdict} at p < 0.05.")
    return out + [""] if out else []
