"""Monte Carlo labels as a dataset other tools can read (no Dagster here).

From the `mc_labels` table (one row per question x candidate: label YES/NO/UNCERTAIN, effect size, CI, trials) and
the `candidate_pools` table (question text, candidate title and text) this writes, into one directory:

    beir/corpus.jsonl, beir/queries.jsonl, beir/qrels/<split>.tsv   BEIR layout (graded integer qrels, 3 columns, so
                                                                      any BEIR loader, ours included, reads it)
    qrels.trec                                                        the same judgements as TREC qrels (ranx, trec_eval)
    labels.jsonl                                                      every label row with its effect size, CI, trials
    data/{labels,queries,corpus}.parquet                              Parquet, the files the dataset card's configs name
    hf/                                                               a Hugging Face `datasets.DatasetDict` (save_to_disk)
    README.md                                                         dataset card: solver, estimator, budgets, quality
    causal_assets_export.json                                         the marker: product, benchmark, time written; a
                                                                      later export replaces only a directory with it

The mapping from one label row to a graded relevance lives in `relevance_grade` and nowhere else. The line formats
(`qrels.trec`, `beir/`) write every id through `line_id`, which percent-encodes what would split or break a line.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import pandas as pd
import yaml

from causal_assets.core.foundation.errors import CausalAssetsError, naming_file

# Effect size at or above which a YES label is graded 2 ("strongly helps"), per outcome the effect is measured on:
# 'success' -> ΔP in [-1, 1], three times the 0.1 YES threshold; likelihood outcomes -> nats, twice the 2-nat YES
# threshold (a YES interval lies wholly above 2 nats, so a 1-nat cut would grade every YES 2).
STRONG_EFFECT = {"success": 0.3, "likelihood": 4.0, "qa_likelihood": 4.0}
DEFAULT_OUTCOME = "success"
GRADES = {0: "not shown to help (NO, UNCERTAIN)", 1: "helps (YES)",
          2: "helps strongly (YES with effect >= the outcome's STRONG_EFFECT)"}


def relevance_grade(row: Mapping[str, Any]) -> int:
    """Graded relevance of one label row: 0 unless the labeller said YES; YES is 1, or 2 when its effect size
    reaches STRONG_EFFECT for the row's outcome (`outcome` column, 'success' when absent; the effect is the
    `effect` column when present, else `delta_p`). The one place to adapt when the labels change."""
    if str(row.get("label", "")).upper() != "YES":
        return 0
    outcome = row.get("outcome") or DEFAULT_OUTCOME
    if isinstance(outcome, float) and math.isnan(outcome):
        outcome = DEFAULT_OUTCOME
    effect = row.get("effect", row.get("delta_p"))
    try:
        effect = float(effect)
    except (TypeError, ValueError):
        return 1
    strong = STRONG_EFFECT.get(str(outcome))
    if strong is None:
        raise ValueError(f"label row for {row.get('query_id')!r}/{row.get('chunk_id')!r}: unknown outcome "
                         f"{outcome!r} (known: {sorted(STRONG_EFFECT)})")
    return 2 if math.isfinite(effect) and effect >= strong else 1


def _breaks_lines(char: str) -> bool:
    """A character a line format cannot hold in an id: whitespace (TREC fields are split on any, and a file name
    may hold a newline), other control characters, `%` (the escape itself) and `"` (csv readers of BEIR qrels)."""
    return char.isspace() or char in '%"' or unicodedata.category(char) == "Cc"


def line_id(raw: str) -> str:
    """`raw` as the line formats (`qrels.trec`, `beir/`) write it: the characters `_breaks_lines` names
    percent-encoded as UTF-8 (`my notes.md` -> `my%20notes.md`), everything else as it is, so most ids are
    unchanged; `urllib.parse.unquote` gives the id back. JSON Lines, Parquet and `hf/` keep ids as they are."""
    if not any(_breaks_lines(c) for c in raw):
        return raw
    return "".join(quote(c, safe="") if _breaks_lines(c) else c for c in raw)


@dataclass
class DatasetCard:
    """What the card says about how the labels were made (everything optional but the benchmark name)."""
    benchmark: str
    split: str = "labels"
    solver: str | None = None                   # the model that answered, e.g. smollm2-135m-instruct
    estimator: str | None = None                # the estimator whose labels are exported (adaptive | naive)
    budgets: dict[str, Any] = field(default_factory=dict)   # calls per question, threshold, ...
    quality: dict[str, Any] = field(default_factory=dict)   # label-quality figures, e.g. precision vs gold
    source: str = "causal_assets Monte Carlo labels"
    license: str | None = None


@dataclass
class ExportResult:
    path: Path
    questions: int
    documents: int
    judgements: int
    by_grade: dict[int, int]
    estimator: str
    files: list[str]


LABEL_COLUMNS = ["query_id", "chunk_id", "label"]
POOL_COLUMNS = ["query_id", "question", "chunk_id", "title", "text"]


def labels_solver(labels: pd.DataFrame) -> str | None:
    """The solver the labels record (`mc_labels.solver`, e.g. local/gemma3-270m), None where they record none."""
    if "solver" not in labels.columns:
        return None
    return ", ".join(sorted(set(labels["solver"].dropna().astype(str)) - {""})) or None


def pick_estimator(labels: pd.DataFrame, estimator: str | None = None) -> str:
    """The estimator to export: the one asked for, else the only one, else the non-naive one (mc_labels keeps the
    naive ΔP rule beside the adaptive estimator on the same trials, for comparison)."""
    have = sorted(labels["estimator"].dropna().unique()) if "estimator" in labels else []
    if estimator:
        if have and estimator not in have:
            raise ValueError(f"estimator {estimator!r} not in the labels (have {have})")
        return estimator
    if not have:
        return "unknown"
    if len(have) == 1:
        return have[0]
    others = [e for e in have if e != "naive"]
    if len(others) == 1:
        return others[0]
    raise ValueError(f"labels hold several estimators {have}: say which one to export")


def build_tables(labels: pd.DataFrame, pools: pd.DataFrame, estimator: str | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, str]:
    """(qrels rows with grades and effect sizes, queries, corpus, estimator) from mc_labels and candidate_pools."""
    for name, frame, cols in (("mc_labels", labels, LABEL_COLUMNS), ("candidate_pools", pools, POOL_COLUMNS)):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"{name} lacks columns {missing} (has {list(frame.columns)})")
    est = pick_estimator(labels, estimator)
    rows = labels[labels["estimator"] == est] if "estimator" in labels and est != "unknown" else labels
    if rows.duplicated(["query_id", "chunk_id"]).any():
        dup = rows[rows.duplicated(["query_id", "chunk_id"], keep=False)].iloc[0]
        raise ValueError(f"more than one {est} label for question {dup['query_id']!r}, doc {dup['chunk_id']!r}")
    rows = rows.copy()
    rows["query_id"] = rows["query_id"].astype(str)
    rows["chunk_id"] = rows["chunk_id"].astype(str)
    rows["score"] = [relevance_grade(r) for r in rows.to_dict("records")]
    if "outcome" not in rows:
        rows["outcome"] = DEFAULT_OUTCOME
    if "effect" not in rows:
        rows["effect"] = rows["delta_p"] if "delta_p" in rows else float("nan")
    keep = ["query_id", "chunk_id", "score", "label", "effect", "outcome",
            *[c for c in ("delta_p", "ci_low", "ci_high", "trials_used", "estimator", "origin",
                          "base_success_rate", "success_rate") if c in rows]]
    qrels = rows[keep].sort_values(["query_id", "chunk_id"]).reset_index(drop=True)
    p = pools.assign(query_id=pools["query_id"].astype(str), chunk_id=pools["chunk_id"].astype(str))
    p = p[p["query_id"].isin(set(qrels["query_id"]))]
    qcols = ["query_id", "question", *[c for c in ("answer",) if c in p]]
    queries = (p[qcols].drop_duplicates("query_id").rename(columns={"query_id": "_id", "question": "text"})
               .sort_values("_id").reset_index(drop=True))
    corpus = (p[["chunk_id", "title", "text"]].drop_duplicates("chunk_id").rename(columns={"chunk_id": "_id"})
              .sort_values("_id").reset_index(drop=True))
    unknown = set(qrels["chunk_id"]) - set(corpus["_id"])
    if unknown:
        raise ValueError(f"labels name {len(unknown)} documents that are in no candidate pool, e.g. {sorted(unknown)[:3]}")
    # each judgement names its document's title (and file, for folder and package corpora) beside the id
    where = p.drop_duplicates("chunk_id").set_index("chunk_id")
    qrels.insert(2, "title", qrels["chunk_id"].map(where["title"]).fillna("").astype(str))
    if "path" in where and (where["path"].fillna("") != "").any():
        qrels.insert(3, "path", qrels["chunk_id"].map(where["path"]).fillna("").astype(str))
    return qrels, queries, corpus, est


def _write_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def card_markdown(card: DatasetCard, qrels: pd.DataFrame, queries: pd.DataFrame, corpus: pd.DataFrame,
                  estimator: str) -> str:
    by_label = qrels["label"].value_counts().to_dict()
    by_grade = qrels["score"].value_counts().sort_index().to_dict()
    outcomes = sorted(qrels["outcome"].dropna().astype(str).unique())
    header = {
        "pretty_name": f"{card.benchmark} Monte Carlo relevance labels",
        "task_categories": ["text-retrieval"], "tags": ["beir", "qrels", "rag", "relevance-labels"],
        "size_categories": ["n<1K" if len(qrels) < 1000 else "1K<n<10K" if len(qrels) < 10000 else "10K<n<100K"],
        "configs": [{"config_name": name, "data_files": f"data/{name}.parquet"} for name in ("labels", "queries", "corpus")],
    }
    if card.license:
        header["license"] = card.license
    lines = ["---", _yaml(header).rstrip(), "---", "",
             f"# {header['pretty_name']}", "",
             f"Empirical relevance labels for {len(queries)} questions of the `{card.benchmark}` benchmark "
             f"({len(qrels)} judged question-document pairs over {len(corpus)} documents), made by "
             f"{card.source}: a blind solver answers each question from random subsets of its candidate pool and a "
             "document is labelled by its causal effect on the outcome (YES when the confidence interval of the "
             "effect lies above the threshold, NO below, UNCERTAIN otherwise).", "",
             "## How the labels were made", "",
             "| what | value |", "|---|---|",
             f"| solver | {card.solver or 'not recorded'} |",
             f"| estimator | {estimator} |",
             f"| outcome (effect unit) | {', '.join(outcomes)} (success: ΔP in [-1, 1]; likelihood: nats) |",
             f"| split | {card.split} |"]
    lines += [f"| {k} | {v} |" for k, v in card.budgets.items()]
    lines += ["", "## Labels and grades", "",
              "| label | pairs |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(by_label.items())], "",
              "| grade (qrels score) | meaning | pairs |", "|---|---|---|",
              *[f"| {g} | {GRADES.get(int(g), '')} | {n} |" for g, n in by_grade.items()], "",
              f"Strong-effect thresholds by outcome: {json.dumps(STRONG_EFFECT)}.", ""]
    lines += ["## Label quality", ""]
    if card.quality:
        lines += ["| figure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in card.quality.items()], ""]
    else:
        lines += ["No label-quality figures were given with this export.", ""]
    lines += ["## Files", "",
              "- `beir/` BEIR layout: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (graded integer scores)",
              "- `qrels.trec`: the same judgements as TREC qrels (`qid 0 docid grade`)",
              "- ids in `qrels.trec` and `beir/` are percent-encoded where they hold whitespace, control characters, "
              "`%` or `\"` (`my notes.md` is `my%20notes.md`; `urllib.parse.unquote` reverses it); the JSON Lines, "
              "Parquet and `hf/` files keep them as they are",
              "- `labels.jsonl` and `data/labels.parquet`: every judged pair (`query_id`, `chunk_id`) with label, "
              "grade, effect, CI, trials",
              "- `data/queries.parquet`, `data/corpus.parquet`; `hf/`: the three tables as a `datasets.DatasetDict`",
              "", "## Use", "", "```python",
              "import datasets, ranx",
              "dd = datasets.load_from_disk('hf')            # DatasetDict: labels, queries, corpus",
              "qrels = ranx.Qrels.from_file('qrels.trec', kind='trec')",
              "run = ranx.Run.from_dict({qid: {chunk_id: score, ...}, ...})",
              "ranx.evaluate(qrels, run, ['ndcg@10', 'map@10'])", "```", ""]
    return "\n".join(lines)


def _yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True)


# What an export directory holds (`export_labels`): the only entries a directory it replaces may hold.
EXPORT_ENTRIES = frozenset({"beir", "qrels.trec", "labels.jsonl", "data", "README.md", "hf"})
# The file each export writes to say that its directory is one: what `export_labels` may replace. Names alone do
# not tell: a user's folder of `README.md` and `data/` holds only names an export writes.
MARKER = "causal_assets_export.json"
PRODUCT = "causal_assets labels export"


def read_marker(out: Path) -> dict | None:
    """The marker of the export at `out` ({"product", "benchmark", "estimator", "written"}), or None where `out`
    holds none (or a file of that name that is not one)."""
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("product") == PRODUCT else None


def refuse_foreign(out: Path) -> None:
    """An existing `out` is replaced only when it is an earlier export (its marker, and nothing an export does not
    write) or empty: never a file or a directory of the user's, which the swap would delete."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"{out}: exists and is not a directory; the labels export writes a directory there")
    if not out.is_dir():
        return
    entries = sorted(e.name for e in out.iterdir())
    if not entries:
        return
    foreign = [name for name in entries if name not in EXPORT_ENTRIES | {MARKER}]
    if read_marker(out) is None or foreign:
        holds = foreign or entries
        raise ValueError(f"{out}: not an earlier labels export (it holds {', '.join(holds[:5])}"
                         f"{', ...' if len(holds) > 5 else ''}"
                         f"{'' if foreign else f' but no {MARKER}, which every export writes'}), so it is not "
                         f"replaced; choose another directory, or empty it")


def _beside(out: Path) -> Path:
    """A new directory beside `out`, where the export is written before it is renamed into place; an error
    creating it names `out` (the user's `--out`), not the temporary name."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:   # e.g. /proc/x: its temporary name would be the one named
        raise CausalAssetsError(f"{out}: cannot write the export there ({e.strerror or e})") from None
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o777 & ~mask)   # mkdtemp's 0700 would become the export's own mode once renamed
    return tmp


def _naming_out(e: OSError, tmp: Path, out: Path) -> OSError:
    """`e` naming the export's own path (`out/...`) where it named the temporary directory (or nothing)."""
    name = os.fspath(e.filename) if e.filename is not None else None
    if name is not None and not (name == str(tmp) or name.startswith(str(tmp) + os.sep)):
        return e
    where = str(out) + (name[len(str(tmp)):] if name is not None else "")
    return OSError(e.errno, e.strerror or str(e).replace(str(tmp), str(out)), where)


def export_labels(labels: pd.DataFrame, pools: pd.DataFrame, out_dir: str | os.PathLike, card: DatasetCard,
                  estimator: str | None = None, hf: bool = True) -> ExportResult:
    """Write the export into `out_dir`, replacing a previous one only once the new one is complete."""
    qrels, queries, corpus, est = build_tables(labels, pools, estimator)
    if qrels.empty:
        raise ValueError(f"no {est} labels to export for benchmark {card.benchmark!r}")
    if not (card.estimator or est == "unknown"):
        card.estimator = est
    out = Path(out_dir)
    refuse_foreign(out)
    tmp = _beside(out)

    def written(rel: str):   # a full disk names the export's file, not the temporary directory's
        return naming_file(tmp / rel)

    try:
        beir = tmp / "beir"
        (beir / "qrels").mkdir(parents=True)
        with written("beir/queries.jsonl"):
            _write_jsonl(beir / "queries.jsonl", [{"_id": line_id(r["_id"]), "text": r["text"],
                                                   **({"metadata": {"answer": r["answer"]}} if "answer" in r else {})}
                                                  for r in queries.to_dict("records")])
        with written("beir/corpus.jsonl"):
            _write_jsonl(beir / "corpus.jsonl", [{"_id": line_id(r["_id"]), "title": r["title"] or "",
                                                  "text": r["text"]} for r in corpus.to_dict("records")])
        judged = [(line_id(q), line_id(d), int(s)) for q, d, s in qrels[["query_id", "chunk_id", "score"]]
                  .itertuples(index=False)]
        with written(f"beir/qrels/{card.split}.tsv"), \
                (beir / "qrels" / f"{card.split}.tsv").open("w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(["query-id", "corpus-id", "score"])
            w.writerows(judged)
        with written("qrels.trec"), (tmp / "qrels.trec").open("w", encoding="utf-8", newline="\n") as fh:
            for q, d, s in judged:
                fh.write(f"{q} 0 {d} {s}\n")
        with written("labels.jsonl"):
            _write_jsonl(tmp / "labels.jsonl", [{k: _clean(v) for k, v in r.items()}
                                                for r in qrels.to_dict("records")])
        (tmp / "data").mkdir()
        tables = {"labels": qrels, "queries": queries, "corpus": corpus}
        for name, frame in tables.items():
            with written(f"data/{name}.parquet"):
                frame.to_parquet(tmp / "data" / f"{name}.parquet", index=False)
        readme = card_markdown(card, qrels, queries, corpus, est)
        marker = {"product": PRODUCT, "benchmark": card.benchmark, "estimator": est,
                  "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        with written(MARKER):
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        with written("README.md"):
            (tmp / "README.md").write_text(readme, encoding="utf-8")
        files = ["beir/corpus.jsonl", "beir/queries.jsonl", f"beir/qrels/{card.split}.tsv", "qrels.trec",
                 "labels.jsonl", "data/labels.parquet", "data/queries.parquet", "data/corpus.parquet", "README.md",
                 MARKER]
        if hf:
            import datasets  # optional heavy dependency (Hugging Face datasets): only for the hf/ export

            dd = datasets.DatasetDict({name: datasets.Dataset.from_pandas(frame, preserve_index=False)
                                       for name, frame in tables.items()})
            with written("hf"):
                dd.save_to_disk(str(tmp / "hf"))
                (tmp / "hf" / "README.md").write_text(readme, encoding="utf-8")
            files.append("hf/")
        old = out.with_name(f".{out.name}.old")
        if old.exists():
            shutil.rmtree(old)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _naming_out(e, tmp, out) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(path=out, questions=len(queries), documents=len(corpus), judgements=len(qrels),
                        by_grade={int(k): int(v) for k, v in qrels["score"].value_counts().sort_index().items()},
                        estimator=est, files=files)


def agreement_with_seeds(labels: pd.DataFrame, estimator: str) -> dict[str, Any]:
    """YES precision / recall against the pools' seed documents (`origin == 'seed'`: gold paragraphs for HotpotQA,
    the mined target and its neighbours for the code benchmark), or {} without an origin column."""
    rows = labels[labels["estimator"] == estimator] if "estimator" in labels else labels
    if "origin" not in rows or rows.empty:
        return {}
    yes = rows["label"].astype(str).str.upper() == "YES"
    seed = rows["origin"] == "seed"
    tp = int((yes & seed).sum())
    return {"YES labels": int(yes.sum()), "seed documents": int(seed.sum()),
            "YES precision vs seeds": round(tp / int(yes.sum()), 4) if yes.any() else None,
            "YES recall vs seeds": round(tp / int(seed.sum()), 4) if seed.any() else None,
            "UNCERTAIN share": round(float((rows["label"].astype(str).str.upper() == "UNCERTAIN").mean()), 4)}
