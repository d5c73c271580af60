"""`causal-assets evaluate --fail-on-regression`, `accept`, `compare` and `label --dry-run` on the default benchmark
(networkx's shortest-path modules): the first evaluation passes with no baseline, is accepted, an unchanged re-run
passes, a planted regression (the gated rrf fusing each ranking's first document only) exits 4 with one line
naming the retriever, metric, Δ, interval and p; `compare` shows the questions that changed; the dry run plans
without building or calling anything, and a plan above the ceiling is refused."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from causal_assets.exit_codes import EXIT_REGRESSION
from tests.cli.test_cli_ux import run_cli, run_main


def registries(tmp_path: Path, rrf: dict | None = None) -> None:
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths"]}}]}))
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [{
        "name": "default", "loader": "python_package_api", "corpus": "default", "options": {"max_questions": 200},
        "splits": ["dev", "train", "test"], "eval_splits": ["test"], "tune_split": "train", "validator": "fqn_match",
        "retrievers": {"bm25": {}, "rrf": rrf or {}}, "answers": {"enabled": False},
        "monte_carlo": {"split": "dev", "max_questions": 12, "budget": 16}, "pooling": {"size": 8},
        "gate": {"retriever": "rrf"}}]}))


@pytest.fixture
def env(tmp_path, cli_env) -> dict[str, str]:
    registries(tmp_path)
    return cli_env


def test_label_dry_run_plans_without_building_and_the_ceiling_refuses(env, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "label", "default", "--dry-run", env=env)
    assert code == 0, err
    assert not Path(env["CAUSAL_ASSETS_BASE_PATH"]).exists()   # nothing built, nothing run
    code, err = run_main(monkeypatch, capsys, "label", "default", "--dry-run",
                         env={**env, "CAUSAL_ASSETS_LABEL_MAX_CALLS": "100"})
    assert code == 2 and "would make 192 solver calls (12 questions x 16)" in err
    assert "export CAUSAL_ASSETS_LABEL_MAX_CALLS=192" in err and len(err.strip().splitlines()) == 1


def test_label_dry_run_prints_calls_tokens_and_minutes(env):
    done = run_cli("label", "default", "--dry-run", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip()
    assert "12 questions x 16 solver calls = 192 calls, about " in line and "prompt tokens; about " in line
    assert "on this machine" in line
    remote = run_cli("label", "default", "--dry-run", env={**env, "CAUSAL_ASSETS_LLM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert remote.returncode == 0 and "depends on the endpoint's latency" in remote.stdout


@pytest.mark.slow
def test_evaluate_fail_on_regression_accept_and_compare(env, tmp_path):
    first = run_cli("evaluate", "default", "--fail-on-regression", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "no accepted baseline" not in first.stderr   # a pass says nothing on the terminal
    accepted = run_cli("accept", "default", env=env)
    assert accepted.returncode == 0 and "accepted run " in accepted.stderr, accepted.stderr
    again = run_cli("evaluate", "default", "--fail-on-regression", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    registries(tmp_path, rrf={"depth": 1})   # the planted regression
    broken = run_cli("evaluate", "default", "--fail-on-regression", env=env)
    assert broken.returncode == EXIT_REGRESSION, broken.stderr[-3000:]
    [line] = [l for l in broken.stderr.splitlines() if "regression: " in l]
    assert "rrf ndcg@10 on `test` (truth qrels) fell " in line and "Δ -" in line and ", p 0.0" in line
    assert "[-" in line and "on 23 questions" in line
    assert "report: " in broken.stdout   # the evaluation itself is written and summarized
    compared = run_cli("compare", "default", "default@latest", env=env)
    assert compared.returncode == 0, compared.stderr
    assert "| rrf " in compared.stdout and "rrf ndcg@10 on `test` (qrels): worse most: " in compared.stdout
    html = Path(env["CAUSAL_ASSETS_REPORTS"]) / "default.html"
    assert "FAILED: regression: rrf ndcg@10" in html.read_text()
