"""benchmarks/label_quality.py's test-retest (`--retest`): a question labelled again with its paragraphs in another
order has its labels put back in the question's own order before the two labellings are compared pair by pair."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from causal_assets.core.corpus.multihop import MultiHopQuestion, Paragraph

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def script():
    sys.path.insert(0, str(ROOT / "benchmarks"))   # its `from common import ...`
    spec = importlib.util.spec_from_file_location("label_quality", ROOT / "benchmarks" / "label_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QUESTION = MultiHopQuestion("q1", "Who?", "Ann", (), "bridge", tuple(
    Paragraph(f"P{i}", f"text {i}", i in (1, 4)) for i in range(6)))


def labelled(q: MultiHopQuestion) -> dict:
    """What `label_one` returns, each list naming the paragraph at its position."""
    titles = [p.title for p in q.paragraphs]
    return {"query_id": q.query_id, "gold": q.gold, "contains": [t == "P4" for t in titles], "effects": titles,
            "context_effects": titles, "labels": titles, "partners": [[t] for t in titles],
            "beside_yes": titles, "ci": [[t, t] for t in titles], "trials": [{"subset": ["q1/0"]}]}


def test_a_reordered_question_s_labels_come_back_in_its_own_order():
    lq = script()
    moved, order = lq.reordered(QUESTION)
    assert [p.title for p in moved.paragraphs] != [p.title for p in QUESTION.paragraphs]   # another order
    assert sorted(order) == list(range(6)) and lq.reordered(QUESTION)[1].tolist() == order.tolist()   # seeded
    back = lq.in_original_order(labelled(moved), order)
    titles = [f"P{i}" for i in range(6)]
    assert back["labels"] == back["effects"] == back["context_effects"] == titles
    assert back["ci"] == [[t, t] for t in titles] and back["partners"] == [[t] for t in titles]
    assert back["gold"] == [1, 4] and back["contains"] == [t == "P4" for t in titles]
    assert "trials" not in back   # their ids name the reordered positions


def test_the_retest_frame_pairs_the_same_paragraph_of_both_labellings():
    lq = script()
    first = labelled(QUESTION)
    moved, order = lq.reordered(QUESTION)
    frames = [lq.retest_frame([p]) for p in (first, lq.in_original_order(labelled(moved), order))]
    assert frames[0]["label"].tolist() == frames[1]["label"].tolist()
    assert frames[0]["chunk_id"].tolist() == list(range(6))
