"""core.export: the Monte Carlo labels as BEIR / TREC / Parquet / Hugging Face files, read back by the tools others
use (datasets.load_from_disk, ranx.Qrels.from_file, our own BEIR loader) and evaluated with a ranx Run."""
from __future__ import annotations

import json
import os
from pathlib import Path

import datasets
import pandas as pd
import pytest
import ranx

from causal_assets.core.corpus.beir import load_beir_qrels
from causal_assets.core.measures.metrics import evaluate
from causal_assets.core.outputs.export import (DatasetCard, agreement_with_seeds, build_tables, export_labels,
                                       relevance_grade)


def make_pools() -> pd.DataFrame:
    rows = []
    for q, question, answer in (("q1", "Who designed the Analytical Engine?", "Charles Babbage"),
                                ("q2", "Where is Bletchley Park?", "Milton Keynes")):
        for pos, (doc, origin) in enumerate(((f"{q}/d0", "seed"), (f"{q}/d1", "seed"), (f"{q}/d2", "hard_negative"),
                                             ("shared/d9", "random"))):
            rows.append({"benchmark": "hotpotqa", "query_id": q, "question": question, "answer": answer,
                         "aliases": "[]", "chunk_id": doc, "origin": origin, "position": pos,
                         "title": f"Title {doc}", "text": f"Text of {doc} about {answer}."})
    return pd.DataFrame(rows)


def make_labels() -> pd.DataFrame:
    """The shape mc_labels has today: adaptive labels plus the naive rule on the same trials."""
    main = [("q1", "q1/d0", "YES", 0.45), ("q1", "q1/d1", "YES", 0.12), ("q1", "q1/d2", "NO", -0.05),
            ("q1", "shared/d9", "UNCERTAIN", 0.02), ("q2", "q2/d0", "YES", 0.31), ("q2", "q2/d1", "UNCERTAIN", 0.08),
            ("q2", "q2/d2", "NO", -0.2), ("q2", "shared/d9", "NO", -0.01)]
    origin = {r["chunk_id"]: r["origin"] for r in make_pools().to_dict("records")}
    rows = []
    for est in ("adaptive", "naive"):
        for q, d, label, dp in main:
            label = label if est == "adaptive" else ("YES" if dp > 0.1 else "NO")
            rows.append({"query_id": q, "chunk_id": d, "label": label, "delta_p": dp, "ci_low": dp - 0.1,
                         "ci_high": dp + 0.1, "trials_used": 24, "estimator": est, "base_success_rate": 0.3,
                         "success_rate": 0.5, "benchmark": "hotpotqa", "origin": origin[d]})
    return pd.DataFrame(rows)


def test_relevance_grade_is_the_one_mapping():
    assert relevance_grade({"label": "NO", "delta_p": 0.9}) == 0
    assert relevance_grade({"label": "UNCERTAIN", "delta_p": 0.5}) == 0
    assert relevance_grade({"label": "YES", "delta_p": 0.1}) == 1
    assert relevance_grade({"label": "YES", "delta_p": 0.3}) == 2
    # The labeller's coming `outcome` column: a log-likelihood effect in nats has its own strong threshold.
    assert relevance_grade({"label": "YES", "delta_p": 0.5, "outcome": "likelihood"}) == 1
    assert relevance_grade({"label": "YES", "effect": 2.6, "outcome": "likelihood"}) == 1   # above the 2-nat YES cut
    assert relevance_grade({"label": "YES", "effect": 4.4, "outcome": "qa_likelihood"}) == 2
    assert relevance_grade({"label": "YES", "delta_p": float("nan")}) == 1
    with pytest.raises(ValueError, match="unknown outcome 'bleu'"):
        relevance_grade({"label": "YES", "delta_p": 0.5, "outcome": "bleu"})


@pytest.mark.slow
def test_export_round_trip_with_datasets_ranx_and_beir(tmp_path):
    labels, pools = make_labels(), make_pools()
    card = DatasetCard(benchmark="hotpotqa", split="dev", solver="smollm2-135m-instruct",
                       budgets={"solver calls per question": 24, "label threshold": 0.1},
                       quality=agreement_with_seeds(labels, "adaptive"))
    result = export_labels(labels, pools, tmp_path / "export", card)
    out = result.path
    assert result.estimator == "adaptive" and result.judgements == 8 and result.questions == 2
    assert result.documents == 7 and result.by_grade == {0: 5, 1: 1, 2: 2}

    # Hugging Face: the three tables, effect sizes included, and the card beside them.
    dd = datasets.load_from_disk(str(out / "hf"))
    assert set(dd) == {"labels", "queries", "corpus"}
    assert dd["labels"].num_rows == 8 and {"score", "effect", "ci_low", "ci_high", "label"} <= set(dd["labels"].column_names)
    row = next(r for r in dd["labels"] if r["chunk_id"] == "q1/d0")
    assert row["score"] == 2 and row["effect"] == pytest.approx(0.45) and row["outcome"] == "success"
    assert dd["queries"].num_rows == 2 and dd["corpus"].num_rows == 7
    card_text = (out / "README.md").read_text()
    assert card_text.startswith("---\n") and "smollm2-135m-instruct" in card_text and "adaptive" in card_text
    assert "YES precision vs seeds" in card_text and "| solver calls per question | 24 |" in card_text
    assert (out / "hf" / "README.md").read_text() == card_text
    assert pd.read_parquet(out / "data" / "labels.parquet").shape[0] == 8

    # ranx reads the TREC qrels, and runs are evaluated against what it read (with the evaluation's own ranx
    # kernels, compiled at install: ranx's own Run and evaluate on string ids are the README example's test, and
    # numba compiles them again for every id width, ~15 s here)
    qrels = ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec").to_dict()
    assert qrels["q1"] == {"q1/d0": 2, "q1/d1": 1, "q1/d2": 0, "shared/d9": 0}
    perfect = {"q1": {"q1/d0": 3.0, "q1/d1": 2.0, "q1/d2": 1.0}, "q2": {"q2/d0": 3.0, "q2/d2": 2.0, "shared/d9": 1.0}}
    inverted = {"q1": {"q1/d2": 3.0, "shared/d9": 2.0, "q1/d1": 1.5, "q1/d0": 1.0},
                "q2": {"q2/d2": 3.0, "shared/d9": 2.0, "q2/d0": 1.0}}
    ndcg = {name: evaluate(qrels, run, ks=[10]).set_index(["metric", "k"])["value"][("ndcg", 10)]
            for name, run in (("good", perfect), ("bad", inverted))}
    assert ndcg["good"] == pytest.approx(1.0) and ndcg["bad"] < ndcg["good"]

    # The BEIR layout is read by our own BEIR loader (so the export can be registered as a benchmark).
    beir_qrels = load_beir_qrels(out / "beir", "dev")
    assert beir_qrels["q1"]["q1/d0"] == 2.0 and beir_qrels["q2"]["q2/d2"] == 0.0
    queries = [json.loads(l) for l in (out / "beir" / "queries.jsonl").read_text().splitlines()]
    assert queries[0] == {"_id": "q1", "text": "Who designed the Analytical Engine?",
                          "metadata": {"answer": "Charles Babbage"}}
    corpus_ids = {json.loads(l)["_id"] for l in (out / "beir" / "corpus.jsonl").read_text().splitlines()}
    assert "shared/d9" in corpus_ids and len(corpus_ids) == 7

    # A second export replaces the first whole (nothing of the old one left behind).
    again = export_labels(labels, pools, out, card, estimator="naive", hf=False)
    assert again.estimator == "naive" and not (out / "hf").exists()
    assert not list(tmp_path.glob(".export.*"))


def test_export_refuses_what_it_cannot_map(tmp_path):
    labels, pools = make_labels(), make_pools()
    with pytest.raises(ValueError, match="estimator 'bayes' not in the labels"):
        build_tables(labels, pools, "bayes")
    with pytest.raises(ValueError, match="lacks columns"):
        build_tables(labels.drop(columns=["label"]), pools)
    with pytest.raises(ValueError, match="in no candidate pool"):
        build_tables(labels, pools[pools["chunk_id"] != "q1/d0"])
    both = pd.concat([labels, labels.assign(estimator="other")])
    with pytest.raises(ValueError, match="several estimators"):
        build_tables(both, pools)
    assert not (tmp_path / "export").exists()


def test_cli_export_labels(tmp_path, capsys):
    from causal_assets.cli import main

    base = tmp_path / "parquet"
    for name, frame in (("mc_labels", make_labels()), ("candidate_pools", make_pools())):
        (base / name).mkdir(parents=True)
        frame.to_parquet(base / name / "hotpotqa.parquet", index=False)
    out = tmp_path / "out"
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf",
                 "--solver", "smollm2-135m-instruct"]) == 0
    assert "8 judgements (2 questions, 7 documents" in capsys.readouterr().out
    assert ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec").to_dict()["q2"]["q2/d0"] == 2
    assert "smollm2-135m-instruct" in (out / "README.md").read_text() and not (out / "hf").exists()
    assert main(["--base-path", str(base), "export-labels", "../x"]) == 2  # names with paths are refused


def test_the_card_names_the_solver_the_labels_record(tmp_path, capsys):
    """The card said "not recorded" although mc_labels records its solver, and `--solver` put any name on it."""
    from causal_assets.cli import main

    base = tmp_path / "parquet"
    for name, frame in (("mc_labels", make_labels().assign(solver="local/gemma3-270m")),
                        ("candidate_pools", make_pools())):
        (base / name).mkdir(parents=True)
        frame.to_parquet(base / name / "hotpotqa.parquet", index=False)
    out = tmp_path / "out"
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf"]) == 0
    assert "| solver | local/gemma3-270m |" in (out / "README.md").read_text()
    capsys.readouterr()
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf",
                 "--solver", "smollm2-135m-instruct"]) == 2
    assert "these labels record their solver, 'local/gemma3-270m'" in capsys.readouterr().err
    assert main(["--base-path", str(base), "export-labels", "scifact"]) == 2   # said "<path>: not found"
    assert "no Monte Carlo labels of benchmark 'scifact'" in capsys.readouterr().err


def test_an_export_replaces_only_an_earlier_export_never_a_users_files(tmp_path, capsys):
    """`--out` naming a directory of the user's (or a file) is refused in one line, with everything left as it
    was; an earlier export at the same place is replaced; the export is readable as the umask allows."""
    from causal_assets.cli import main

    base = tmp_path / "parquet"
    for name, frame in (("mc_labels", make_labels()), ("candidate_pools", make_pools())):
        (base / name).mkdir(parents=True)
        frame.to_parquet(base / name / "hotpotqa.parquet", index=False)
    mine, notes = tmp_path / "mydocs", tmp_path / "notes.txt"
    mine.mkdir()
    (mine / "thesis.txt").write_text("precious")
    notes.write_text("also precious")
    for target in (mine, notes):
        assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(target), "--no-hf"]) == 2
        assert str(target) in capsys.readouterr().err
    assert (mine / "thesis.txt").read_text() == "precious" and notes.read_text() == "also precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydocs", "notes.txt", "parquet"]   # no temporary left

    out = tmp_path / "export"
    for _ in range(2):   # the second replaces the first
        assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf"]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "mydocs", "notes.txt", "parquet"]


def _exportable(tmp_path) -> Path:
    base = tmp_path / "parquet"
    for name, frame in (("mc_labels", make_labels()), ("candidate_pools", make_pools())):
        (base / name).mkdir(parents=True)
        frame.to_parquet(base / name / "hotpotqa.parquet", index=False)
    return base


def test_a_users_folder_holding_only_names_an_export_writes_is_not_replaced(tmp_path, capsys):
    """A folder of the user's own `README.md` and `data/` holds only names an export writes: it is refused in one
    line naming it, and survives whole; an export is recognised by the marker it writes itself."""
    from causal_assets.cli import main

    marker_name = "causal_assets_export.json"
    base = _exportable(tmp_path)
    mine = tmp_path / "project"
    (mine / "data").mkdir(parents=True)
    (mine / "README.md").write_text("my project")
    (mine / "data" / "results.csv").write_text("a,b\n1,2\n")
    capsys.readouterr()
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(mine), "--no-hf"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{mine}: not an earlier labels export" in line and marker_name in line, line
    assert (mine / "README.md").read_text() == "my project"
    assert (mine / "data" / "results.csv").read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in mine.rglob("*")) == ["README.md", "data", "results.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parquet", "project"]   # no temporary left

    out = tmp_path / "export"
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf"]) == 0
    marker = json.loads((out / marker_name).read_text())
    assert marker["product"] == "causal_assets labels export" and marker["benchmark"] == "hotpotqa"
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf"]) == 0


@pytest.mark.slow   # ranx's Qrels and Run compile their numba dictionaries: several seconds
def test_ids_with_whitespace_round_trip_through_the_trec_and_beir_files(tmp_path, capsys):
    """A question id `q 1` and documents `my notes.md` and `new<newline>line.md` (a newline in a file name) made
    qrels.trec lines of 6 fields and a line split in two. The line formats percent-encode such ids, the same way in
    every file, and `unquote` gives them back; ranx reads the qrels and a run written with the same ids."""
    from urllib.parse import unquote

    from causal_assets.cli import main

    odd = {"q1/d0": "my notes.md", "q1/d1": "new\nline.md", "q1/d2": "100% sure\t.md"}
    pools = make_pools().replace({"query_id": {"q1": "q 1"}, "chunk_id": odd})
    labels = make_labels().replace({"query_id": {"q1": "q 1"}, "chunk_id": odd})
    base = tmp_path / "parquet"
    for name, frame in (("mc_labels", labels), ("candidate_pools", pools)):
        (base / name).mkdir(parents=True)
        frame.to_parquet(base / name / "hotpotqa.parquet", index=False)
    out = tmp_path / "out"
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", str(out), "--no-hf"]) == 0

    lines = (out / "qrels.trec").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == 8 and all(len(line.split()) == 4 for line in lines[:-1])
    qrels = ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec").to_dict()
    decoded = {unquote(q): {unquote(d): s for d, s in docs.items()} for q, docs in qrels.items()}
    assert decoded["q 1"] == {"my notes.md": 2, "new\nline.md": 1, "100% sure\t.md": 0, "shared/d9": 0}
    assert decoded["q2"] == {"q2/d0": 2, "q2/d1": 0, "q2/d2": 0, "shared/d9": 0}
    assert "my%20notes.md" in qrels["q%201"] and "shared/d9" in qrels["q%201"]   # plain ids stay as they are

    # a run written with the export's ids is read back whole by ranx, and scores as the judgements say
    run_file = tmp_path / "run.trec"
    run_file.write_text("".join(f"{q} Q0 {d} {rank} {10 - rank} mine\n" for q, docs in qrels.items()
                                for rank, d in enumerate(sorted(docs, key=lambda d: -docs[d]), 1)), encoding="utf-8")
    run = ranx.Run.from_file(str(run_file), kind="trec").to_dict()
    assert {q: set(docs) for q, docs in run.items()} == {q: set(docs) for q, docs in qrels.items()}
    ndcg = evaluate(qrels, run, ks=[10]).set_index(["metric", "k"])["value"][("ndcg", 10)]
    assert ndcg == pytest.approx(1.0)

    # the BEIR folder uses the same ids in its qrels, queries and corpus (our loader reads it)
    beir_qrels = load_beir_qrels(out / "beir", "dev")
    assert beir_qrels == {q: {d: float(s) for d, s in docs.items()} for q, docs in qrels.items()}
    corpus_ids = {json.loads(l)["_id"] for l in (out / "beir" / "corpus.jsonl").read_text().splitlines()}
    query_ids = {json.loads(l)["_id"] for l in (out / "beir" / "queries.jsonl").read_text().splitlines()}
    assert {d for docs in qrels.values() for d in docs} <= corpus_ids and query_ids == set(qrels)
    # the JSON Lines and Parquet tables keep the ids as they are
    assert {json.loads(l)["chunk_id"] for l in (out / "labels.jsonl").read_text().splitlines()} >= set(odd.values())


def test_an_out_where_nothing_can_be_written_is_named_not_a_temporary_directory(tmp_path, capsys):
    """`--out /proc/x`: the export's hidden temporary directory beside it cannot be made; the error named that
    temporary name (`/proc/.x.k2j3h1`), which the user never typed."""
    from causal_assets.cli import main

    base = _exportable(tmp_path)
    assert main(["--base-path", str(base), "export-labels", "hotpotqa", "--out", "/proc/x", "--no-hf"]) == 2
    err = capsys.readouterr().err
    assert err == "causal-assets: /proc/x: cannot write the export there (No such file or directory)\n", err


FULL_DISK = """
import sys
from causal_assets.cli import main
sys.exit(main(["--base-path", sys.argv[1], "export-labels", "hotpotqa", "--out", sys.argv[2], "--no-hf"]))
"""


def test_a_full_disk_during_the_export_names_the_file_and_leaves_nothing(tmp_path):
    """The export written onto a 16 KiB tmpfs (mounted in a user and mount namespace of its own): the disk fills
    while a file is written. The error names that file of `--out` (not the temporary directory's), and nothing is
    left on the disk."""
    import subprocess
    import sys

    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm) to mount a small tmpfs in")
    base = _exportable(tmp_path)
    disk = tmp_path / "disk"
    disk.mkdir()
    root = Path(__file__).resolve().parents[2]
    script = (f'mount -t tmpfs -o size=16k tmpfs "$1" && "$2" -c "$3" "$4" "$1/export"; code=$?; '
              f'echo "left: $(ls -A "$1")"; exit $code')
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(disk), sys.executable, FULL_DISK,
                           str(base)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout.endswith("left: \n"), done.stdout               # no temporary directory left on the disk
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"causal-assets: {disk}/export/") and line.endswith(": No space left on device"), line
