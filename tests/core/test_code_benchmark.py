"""The code benchmark: `validator: pytest` works on a mined code benchmark. Questions are mined from
networkx docstring examples; the blind solver writes the call; the validator runs it in the bubblewrap sandbox
after the example's setup and compares the output. Unsupported validator/loader pairs are refused by the registry
before any solver call."""
from __future__ import annotations

import json

import pytest
import yaml

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.python_package import load_python_package
from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.labeling.runner import LabelingParams, label_question
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.core.labeling.validators import extract_expression, validate
from causal_assets.core.llm import CallCache, LLMClient
from causal_assets.core.corpus.mining import mine_examples
from tests.helpers.endpoint import FakeEndpoint, chat_completion, send_json

needs_bwrap = pytest.mark.system("bubblewrap")
SUB = ["algorithms.shortest_paths.generic"]


@pytest.fixture(scope="module")
def mined():
    chunks, _ = load_python_package("networkx", "default", subpackages=SUB)
    frame = chunks_to_frame(chunks)
    examples = {m.gold_fqn.rsplit(".", 1)[-1]: m for m in mine_examples(frame, "networkx")}
    return frame, examples


def test_examples_are_mined_from_docstrings(mined):
    _, examples = mined
    sp = examples["shortest_path"]
    spec = json.loads(sp.gold)
    assert spec["setup"] == ["G = nx.path_graph(5)"] and spec["want"] == "[0, 1, 2, 3, 4]\n" and spec["print"]
    assert "nx.shortest_path" not in sp.question and "after running" in sp.question


def test_expression_extraction():
    assert extract_expression("You can use `nx.shortest_path(G, 0, 4)`.") == "nx.shortest_path(G, 0, 4)"
    assert extract_expression("```python\n>>> nx.shortest_path(G, 0, 4)\n```") == "nx.shortest_path(G, 0, 4)"
    assert extract_expression("import os; os.system('id')") is None
    assert extract_expression("unknown") == "unknown"   # a name: an expression, which the example then fails


@needs_bwrap
def test_pytest_validator_runs_the_call_in_the_sandbox(mined, tmp_path):
    gold = mined[1]["shortest_path"].gold
    assert validate("pytest", "nx.shortest_path(G, source=0, target=4)", gold).passed
    assert validate("pytest", "`nx.shortest_path(G, 0, 4)`", gold).passed
    assert not validate("pytest", "nx.shortest_path(G, 0, 3)", gold).passed
    assert not validate("pytest", "unknown", gold).passed
    marker = tmp_path / "pwned"
    hostile = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    assert not validate("pytest", hostile, gold).passed and not marker.exists()


@pytest.mark.parametrize("loader_entry", [
    {"loader": "hotpotqa", "corpus": "hotpotqa", "path": "/x.jsonl", "validator": "pytest"},
    {"loader": "python_package_api", "corpus": "default", "validator": "pytest"},
    {"loader": "python_package_examples", "corpus": "default", "validator": "answer_f1"},
])
def test_unsupported_validator_is_refused_by_the_registry(tmp_path, loader_entry):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [{"name": "b", "splits": ["dev"], "eval_splits": ["dev"],
                                                    **loader_entry}]}))
    with pytest.raises(ConfigError, match=r"validator 'pytest' needs code examples|validator must be 'pytest'"):
        load_benchmark_registry(path)


def test_code_benchmark_loads_from_a_registry(tmp_path):
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "python_package",
                                                    "package": "networkx", "options": {"subpackages": SUB}}]}))
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [{
        "name": "default_examples", "loader": "python_package_examples", "corpus": "default", "validator": "pytest",
        "splits": ["dev"], "eval_splits": ["dev"], "options": {"max_questions": 20}}]}))
    spec = load_benchmark_registry(path, corpora=corpora)["default_examples"]
    bench = load_benchmark(spec, "dev")
    qid = next(q for q, a in bench.answers.items() if json.loads(a)["call"].startswith("nx.shortest_path("))
    assert list(bench.qrels[qid]) == ["networkx.algorithms.shortest_paths.generic.shortest_path"]


def _solver_answer(h) -> None:
    """A stand-in LLM endpoint: it writes the right call only when the target function's source is in the context."""
    user = h.body["messages"][-1]["content"]
    send_json(h, chat_completion("`nx.shortest_path(G, source=0, target=4)`" if "def shortest_path(" in user
                                 else "`nx.shortest_path(G, 0, 2)`"))


@needs_bwrap
def test_monte_carlo_labels_a_code_question_through_the_sandbox(mined, tmp_path):
    frame, examples = mined
    q = examples["shortest_path"]
    rows = frame.set_index("chunk_id")
    others = [c for c in frame["chunk_id"] if c != q.target_chunk_id and rows.loc[c, "kind"] == "function"][:5]
    pool = [(c, c, rows.loc[c, "text"][:600]) for c in [*others, q.target_chunk_id]]
    with FakeEndpoint(_solver_answer) as server:
        client = LLMClient(server.url, "fake-model", cache=CallCache(tmp_path / "c.sqlite"), max_retries=0)
        out = label_question(q.query_id, q.question, q.gold, pool, BlindSolver(client, "pytest"),
                             LabelingParams(estimator="adaptive", outcome="success", budget=24, batch=8, threshold=0.1))
    labels = out.result.labels()
    assert labels[q.target_chunk_id] == "YES", labels
    assert all(labels[c] != "YES" for c in others)
    assert all(t["success"] == (q.target_chunk_id in t["subset"]) for t in out.trials)
