"""Labels that decide nothing: with `budget: 8` on pools of 10 every label came out UNCERTAIN with intervals
(-inf, inf), the check passed and `export-labels` wrote an all-zero dataset. The blocking `labels_decided` check
fails on them, and `export-labels` refuses them unless `--force`. The export names each document's title and file
beside its id."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from causal_assets.core.outputs.export import DatasetCard, export_labels
from causal_assets.core.foundation.storage import write_parquet_atomic
from tests.cli.test_cli_ux import run_main

DOCS = [f"page{i}.md#0" for i in range(4)]


def labels(kind: str) -> pd.DataFrame:
    rows = []
    for q in ("q1", "q2"):
        for i, d in enumerate(DOCS):
            for est in ("regression", "naive"):
                if kind == "decided":
                    label, lo, hi = (("YES", 3.0, 9.0) if i == 0 else ("NO", -4.0, 1.0)) if est == "regression" \
                        else ("NO", -1.0, 1.0)
                elif kind == "uncertain":   # what budget 8 on pools of 10 wrote: nothing decided, nothing bounded
                    label, lo, hi = "UNCERTAIN", -math.inf, math.inf
                else:                       # every label UNCERTAIN although the intervals are finite
                    label, lo, hi = "UNCERTAIN", -1.0, 3.0
                rows.append({"query_id": q, "chunk_id": d, "label": label, "effect": (lo + hi) / 2 if math.isfinite(lo)
                             else float("nan"), "ci_low": lo, "ci_high": hi, "average_effect": 0.0,
                             "outcome": "qa_likelihood", "delta_p": float("nan"), "trials_used": 8,
                             "estimator": est, "base_outcome": -20.0, "mean_outcome": -19.0, "benchmark": "mine",
                             "solver": "local/gemma3-270m", "origin": "seed" if i == 0 else "random"})
    return pd.DataFrame(rows)


def pools() -> pd.DataFrame:
    return pd.DataFrame([{"benchmark": "mine", "query_id": q, "question": f"Question {q}?", "answer": "7461",
                          "aliases": "[]", "chunk_id": d, "origin": "seed" if i == 0 else "random", "position": i,
                          "title": d.split("#")[0], "text": f"Text of {d}", "path": f"docs/{d.split('#')[0]}"}
                         for q in ("q1", "q2") for i, d in enumerate(DOCS)])


def test_decided_labels_pass():
    from causal_assets.core.outputs.checks import check_labels_decided, labels_decided_problem

    check = check_labels_decided(labels("decided"))
    assert check.passed and check.metadata["uncertain_share"] == 0.0
    assert labels_decided_problem(labels("decided")) is None


@pytest.mark.parametrize("kind, why", [
    ("uncertain", r"all 8 labels are UNCERTAIN; 2 question\(s\) have no finite interval \(100% of the intervals "
                  r"are infinite\)"),
    ("all_uncertain_finite", r"all 8 labels are UNCERTAIN: the labels decide nothing"),
])
def test_labels_that_decide_nothing_fail(kind, why):
    from causal_assets.core.outputs.checks import check_labels_decided, labels_decided_problem

    check = check_labels_decided(labels(kind))
    assert not check.passed
    assert check.metadata["uncertain_share"] == 1.0   # the naive comparison rows are not what is checked
    import re

    assert re.search(why, labels_decided_problem(labels(kind))), labels_decided_problem(labels(kind))
    assert "raise monte_carlo.budget" in labels_decided_problem(labels(kind))


def test_export_labels_refuses_labels_that_decide_nothing_unless_forced(tmp_path, monkeypatch, capsys):
    base = tmp_path / "parquet"
    write_parquet_atomic(labels("uncertain"), base / "mc_labels" / "mine.parquet")
    write_parquet_atomic(pools(), base / "candidate_pools" / "mine.parquet")
    out = tmp_path / "export"
    code, err = run_main(monkeypatch, capsys, "--base-path", str(base), "export-labels", "mine", "--out", str(out),
                         "--no-hf")
    assert code == 2 and not out.exists()
    assert "labels of benchmark 'mine': all 8 labels are UNCERTAIN" in err and "`--force` exports them anyway" in err
    code, err = run_main(monkeypatch, capsys, "--base-path", str(base), "export-labels", "mine", "--out", str(out),
                         "--no-hf", "--force")
    assert code == 0 and "exporting anyway (--force)" in err and (out / "labels.jsonl").exists()


def test_the_export_names_titles_and_files_beside_ids(tmp_path):
    result = export_labels(labels("decided"), pools(), tmp_path / "export",
                           DatasetCard(benchmark="mine", split="dev", solver="local/gemma3-270m",
                                       estimator="regression", budgets={}, quality={}), hf=False)
    rows = [json.loads(line) for line in (result.path / "labels.jsonl").read_text().splitlines()]
    assert {(r["chunk_id"], r["title"], r["path"]) for r in rows} == {(d, d.split("#")[0], f"docs/{d.split('#')[0]}")
                                                                   for d in DOCS}
