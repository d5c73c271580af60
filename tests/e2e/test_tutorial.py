"""docs/tutorial.md as a user follows it: every command of the blocks marked `<!-- tutorial-walkthrough` runs exactly
as written, from the checkout, after README command 1 (the default lineage), in the checkout's own data directory.
The labels must find the gold pages (at least 3 of 4 gold files YES), the evaluation must have rows against the
labels, and every command's exit code and output are checked."""
from __future__ import annotations

import json
import os
import re
import time

import pandas as pd
import pytest
import yaml

from tests.e2e.test_readme import ROOT, require_command_1, run

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.e2e]

TUTORIAL = ROOT / "docs" / "tutorial.md"
BASE = ROOT / "data" / "parquet"


def walkthrough_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"<!-- tutorial-walkthrough[^\n]*-->\n```bash\n(.*?)```", text, re.DOTALL):
        commands += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def test_the_walkthrough_blocks_are_found():
    commands = walkthrough_commands(TUTORIAL.read_text())
    assert [c.split()[1] for c in commands if c.startswith(".venv/bin/causal-assets")] == \
        ["label", "sql", "export-labels", "tune", "evaluate"]
    assert sum(c.startswith("export CAUSAL_ASSETS_") for c in commands) == 2


def test_the_tutorial_runs_as_written():
    require_command_1("the tutorial")
    exports, report = [], []
    try:
        for command in walkthrough_commands(TUTORIAL.read_text()):
            if command.startswith("export "):
                exports.append(command)
                continue
            t0 = time.monotonic()
            done = run(command, exports)
            report.append(f"{time.monotonic() - t0:7.1f}s rc={done.returncode} {command[:100]}")
            assert done.returncode == 0, f"{command}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr, done.stderr[-3000:]
            check_output(command, done)
    finally:
        print("\n" + "\n".join(report) + f"\n(load {os.getloadavg()[0]:.1f})")
    check_results()


def check_output(command: str, done) -> None:
    out, err = done.stdout, done.stderr
    if "causal-assets label" in command:
        assert "labelling 8 questions of benchmark 'brindle'" in err and "about " in err, err
        assert re.search(r"labels of 'brindle': question 8/8 \(100%\)", err), err
        assert "labels of 'brindle': 8 questions, 64 (question, document) pairs" in out, out
    elif "causal-assets sql" in command:
        assert "query_id" in out and "scheduling.md#0" in out, out
    elif "retrieval_dataset_brindle.yaml" in command:
        assert "fqn: " in out and "title: " in out and "path: " in out, out
    elif "export-labels" in command:
        assert re.search(r"\d+ judgements \(8 questions", out), out
    elif "labels.jsonl" in command:
        record = json.loads(out.strip().splitlines()[-1])
        assert record["title"] and record["path"] and record["chunk_id"].startswith(record["path"]), record
    elif "causal-assets tune" in command:
        assert "tuned on 5 train questions" in out and "robust default" in out, out
    elif "causal-assets evaluate" in command:
        assert "against the gold documents" in out and "against the Monte Carlo labels" in out, out
    elif "reports/brindle.md" in command:
        assert out.startswith("# Evaluation report: brindle"), out


def check_results() -> None:
    """The acceptance figures: the gold files labelled YES, and evaluation rows against the labels."""
    registry = yaml.safe_load((ROOT / "examples" / "own-documents" / "benchmarks.yaml").read_text())
    assert registry["benchmarks"][0]["monte_carlo"]["budget"] == 16
    labels = pd.read_parquet(BASE / "mc_labels" / "brindle.parquet")
    labels = labels[labels["estimator"] == "regression"]
    questions = [json.loads(line) for line in (ROOT / "examples" / "own-documents" / "questions.jsonl")
                 .read_text().splitlines()]
    gold = [(q["id"], f"{g}#0") for q in questions if q.get("answer") for g in q["gold"]]
    yes = {(q, d) for q, d, lab in zip(labels["query_id"], labels["chunk_id"], labels["label"]) if lab == "YES"}
    found = [pair for pair in gold if pair in yes]
    print(f"\ngold pages labelled YES: {len(found)} of {len(gold)}")
    assert len(found) >= 0.75 * len(gold), (found, gold)
    metrics = pd.read_parquet(BASE / "evaluation_metrics" / "brindle.parquet")
    assert (metrics["truth"] == "mc_labels").any() and (metrics["truth"] == "qrels").any()
