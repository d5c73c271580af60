"""The evaluation report as one self-contained HTML page (`data/reports/<benchmark>.html`, beside the Markdown
one): the headline, the gate and the comparison with the accepted baseline, the cost, the plots inline (base64 PNG),
a per-query table sortable by any column (a few lines of inline JavaScript: no network, no library), and each
question's Monte Carlo labels with their intervals. `#sort=<column>` in the address sorts on load (ascending;
`#sort=-<column>` descending)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from causal_assets.core.evaluation.drilldown import format_ranks

STYLE = """body{font-family:sans-serif;max-width:1500px;margin:20px;font-size:13px;color:#222}
table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
td.t,th.t{text-align:left}th{background:#f2f2f2}th.s{cursor:pointer}th.s:after{content:" \\2195";color:#999}
tr.miss td{background:#fff1f0}.pass{color:#1a7f37}.fail{color:#cf222e;font-weight:bold}img{max-width:1400px}
details{margin:2px 0}summary{cursor:pointer}"""

SCRIPT = """function sortBy(table, col, desc){
 const body = table.tBodies[0], rows = Array.from(body.rows);
 const key = r => {const c = r.cells[col]; const v = c.dataset.v !== undefined ? c.dataset.v : c.textContent;
   const n = parseFloat(v); return isNaN(n) ? v.toLowerCase() : n;};
 rows.sort((a, b) => {const x = key(a), y = key(b);
   const o = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
   return desc ? -o : o;});
 rows.forEach(r => body.appendChild(r)); table.dataset.sorted = (desc ? '-' : '') + table.tHead.rows[0].cells[col].dataset.c;
}
document.querySelectorAll('table.sortable').forEach(t => {
 Array.from(t.tHead.rows[0].cells).forEach((th, i) => th.addEventListener('click', () => {
   const desc = t.dataset.sorted === th.dataset.c; sortBy(t, i, desc);}));
 const m = location.hash.match(/sort=(-?)([\\w@]+)/);
 if (m) { const i = Array.from(t.tHead.rows[0].cells).findIndex(th => th.dataset.c === m[2]);
   if (i >= 0) sortBy(t, i, m[1] === '-'); }
});"""

PER_QUERY = [("split", "split"), ("retriever", "retriever"), ("query_id", "query"), ("text", "text"),
             ("ndcg_10", "nDCG@10"), ("recall_10", "recall@10"), ("mrr_10", "MRR@10"),
             ("labels_ndcg_10", "nDCG@10 (labels)"), ("answer_gain", "answer gain"), ("gold_ranks", "gold ranks"),
             ("yes_ranks", "YES ranks"), ("bucket", "failure bucket")]


def _cell(value, text_column: bool = False) -> str:
    if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and not isinstance(value, str)):
        ranks = list(value)
        best = min([int(r) for r in ranks if int(r) > 0], default=10 ** 6)
        return f"<td class='t' data-v='{best}'>{html.escape(format_ranks(ranks))}</td>"
    if isinstance(value, float):
        return "<td data-v=''></td>" if value != value else f"<td>{value:.4f}</td>"
    return f"<td class='{'t' if text_column else ''}'>{html.escape('' if value is None else str(value))}</td>"


def table_html(frame: pd.DataFrame, sortable: bool = False, columns: list[tuple[str, str]] | None = None,
               css_id: str = "") -> str:
    columns = columns or [(c, str(c)) for c in frame.columns]
    columns = [(c, h) for c, h in columns if c in frame.columns]
    head = "".join(f"<th class='{'s ' if sortable else ''}{'t' if frame[c].dtype == object else ''}' "
                   f"data-c='{html.escape(c)}'>{html.escape(h)}</th>" for c, h in columns)
    rows = []
    for record in frame.to_dict("records"):
        miss = record.get("bucket") not in (None, "", "none") and "bucket" in record
        cells = "".join(_cell(record[c], frame[c].dtype == object) for c, _ in columns)
        rows.append(f"<tr{' class=miss' if miss else ''}>{cells}</tr>")
    return (f"<table{f' id={css_id}' if css_id else ''}{' class=sortable' if sortable else ''}><thead><tr>{head}"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def labels_html(labels: pd.DataFrame | None, queries: pd.DataFrame) -> str:
    """Each labelled question's documents: label, effect and its interval, best effect first."""
    if labels is None or not len(labels):
        return "<p>No Monte Carlo labels for this benchmark.</p>"
    own = labels[labels["estimator"] != "naive"] if (labels["estimator"] != "naive").any() else labels
    texts = dict(zip(queries["query_id"].astype(str), queries["text"])) if len(queries) else {}
    parts = []
    for qid, group in own.groupby("query_id", sort=True):
        group = group.sort_values("effect", ascending=False)
        yes = int((group["label"] == "YES").sum())
        rows = "".join(
            f"<tr><td class='t'>{html.escape(str(r['chunk_id']))}</td><td class='t'>{r['label']}</td>"
            f"<td>{r['effect']:+.3f}</td><td>[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]</td></tr>"
            for r in group.to_dict("records"))
        parts.append(f"<details><summary><b>{html.escape(str(qid))}</b> {html.escape(texts.get(str(qid), '')[:120])}"
                     f" — {yes} YES of {len(group)}</summary><table><thead><tr><th class='t'>document</th>"
                     f"<th class='t'>label</th><th>effect</th><th>interval</th></tr></thead><tbody>{rows}</tbody>"
                     f"</table></details>")
    return "".join(parts)


def write_html(benchmark: str, out_dir: Path, headline: pd.DataFrame, per_query: pd.DataFrame,
               labels: pd.DataFrame | None, queries: pd.DataFrame, gate_line: str, gate_passed: bool,
               comparison: pd.DataFrame | None, cost: pd.DataFrame | None, pngs: list[tuple[str, bytes]]) -> Path:
    """Write `<out_dir>/<benchmark>.html` (atomically) and return its path."""
    plots = "".join(f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' "
                    f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>" for title, png in pngs)
    body = [f"<h1>Evaluation: {html.escape(benchmark)}</h1>",
            f"<h2>Regression gate</h2><p class='{'pass' if gate_passed else 'fail'}' id='gate'>"
            f"{'passed' if gate_passed else 'FAILED'}: {html.escape(gate_line)}</p>",
            "<h2>Headline (truth: qrels)</h2>", table_html(headline)]
    if comparison is not None and len(comparison):
        body += ["<h2>Against the accepted baseline</h2>", table_html(comparison)]
    if cost is not None and len(cost):
        body += ["<h2>Cost (LLM calls and seconds, latest run of each stage)</h2>", table_html(cost)]
    body += ["<h2>Plots</h2>", plots or "<p>No plots.</p>",
             f"<h2>Per query ({len(per_query)} rows)</h2><p>Click a column to sort; rows in red missed every "
             "relevant document in the top 10. Ranks: each gold / YES document's rank in the retriever's top 100, "
             "best first, - where it is not there.</p>",
             table_html(per_query, sortable=True, columns=PER_QUERY, css_id="per_query"),
             "<h2>Monte Carlo labels per question (effect and its interval)</h2>", labels_html(labels, queries)]
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(benchmark)} evaluation</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}<script>{SCRIPT}</script></body></html>")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{benchmark}.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
