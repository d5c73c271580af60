"""benchmarks/own_documents.py labels with the product's settings: a questions file's defaults (its budget and pool
size, `registry.sections.QUESTION_MONTE_CARLO` / `QUESTION_POOLING`) unless a flag names another. It read the
registry's own `monte_carlo:` alone, so its figures were the default estimator's at another budget than
`causal-assets label` spends."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from causal_assets.core.registry.sections import QUESTION_MONTE_CARLO, QUESTION_POOLING

ROOT = Path(__file__).resolve().parents[2]


def script():
    spec = importlib.util.spec_from_file_location("own_documents", ROOT / "benchmarks" / "own_documents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arguments(folder: Path, questions: Path, **flags) -> argparse.Namespace:
    return argparse.Namespace(folder=folder, questions=questions, chunk_chars=1500, overlap_chars=200,
                              pool_size=None, budget=None, max_doc_chars=None, solver=None,
                              seed_neighbors=None, **flags)


@pytest.mark.unit
@pytest.mark.parametrize("budget, expected", [(None, QUESTION_MONTE_CARLO["budget"]), (48, 48)])
def test_the_benchmark_labels_with_a_questions_file_s_defaults(tmp_path, budget, expected):
    own = script()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("The answer is 42.\n")
    questions = tmp_path / "questions.jsonl"
    questions.write_text('{"id": "q1", "question": "What is the answer?", "answer": "42", "gold": ["a.md"]}\n')
    args = arguments(tmp_path / "docs", questions)
    args.budget = budget
    spec = own.registries(tmp_path, args)["own"]
    params = own.labeling_params(spec, 0, {})
    assert params.budget_for(spec.pool_size) == expected
    assert spec.pool_size == QUESTION_POOLING["size"]
