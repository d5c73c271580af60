"""The multi-hop reader on the shared MuSiQue / 2Wiki / HotpotQA samples and on the pitfalls they carry."""
from __future__ import annotations

import json

import pytest

from causal_assets.core.corpus.multihop import join_sentences, read_multihop
from causal_assets.core.foundation.errors import CorpusError
from tests.conftest import HOTPOT, SHARED, require

MUSIQUE = SHARED / "musique" / "musique_ans_dev_40.jsonl"
TWOWIKI = SHARED / "2wiki" / "2wiki_dev_40.jsonl"


def test_musique_gold_is_is_supporting_even_where_titles_repeat():
    raw = [json.loads(l) for l in require(MUSIQUE).read_text().splitlines() if l.strip()]
    data = read_multihop(MUSIQUE)
    assert sum(len(q.gold) for q in data.questions) == sum(p["is_supporting"] for r in raw for p in r["paragraphs"])
    # titles do repeat within questions, so gold by title would over-count
    assert any(len({p["title"] for p in r["paragraphs"]}) < len(r["paragraphs"]) for r in raw)
    assert all(len(q.paragraphs) == 20 and 2 <= len(q.gold) <= 4 for q in data.questions)


def test_2wiki_sentences_are_joined_with_a_space_and_hotpot_keeps_its_own():
    assert join_sentences(["He was a screenwriter.", "He died."]) == "He was a screenwriter. He died."
    assert join_sentences(["Rush is a band.", " It is Canadian."]) == "Rush is a band. It is Canadian."
    raw = [json.loads(l) for l in require(TWOWIKI).read_text().splitlines() if l.strip()]
    wiki = {q.query_id: q for q in read_multihop(TWOWIKI).questions}
    boundaries = 0
    for r in raw:
        for (title, sentences), para in zip(r.get("context") or [], getattr(wiki.get(r["_id"]), "paragraphs", ())):
            for a, b in zip(sentences, sentences[1:]):
                assert f"{a} {b}" in para.text, (title, a, b)
                boundaries += 1
    assert boundaries > 50
    hotpot = read_multihop(require(HOTPOT))
    assert len(hotpot.questions) == 200 and all(len(q.gold) == 2 for q in hotpot.questions)


def test_a_record_without_context_is_skipped_and_counted(tmp_path):
    rec = json.loads(require(TWOWIKI).read_text().splitlines()[0])
    bare = {k: v for k, v in rec.items() if k != "context"} | {"_id": "no-context"}
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(bare) + "\n")
    data = read_multihop(path)
    assert [q.query_id for q in data.questions] == [rec["_id"]]
    assert data.skipped_without_paragraphs == [f"{path}:2"]
    with pytest.raises(CorpusError, match=r"w.jsonl:2: record has no paragraphs"):
        read_multihop(path, strict=True)


def test_malformed_supporting_facts_names_file_and_line(tmp_path):
    rec = json.loads(require(TWOWIKI).read_text().splitlines()[0])
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(rec | {"supporting_facts": [["only a title"]]}) + "\n")
    with pytest.raises(CorpusError, match=r"w.jsonl:1: supporting_facts\[0\] must be \[title, sentence index\]"):
        read_multihop(path)


@pytest.mark.parametrize("change, message", [
    ({"question": None}, r"m.jsonl:1: field 'question' has no text"),
    ({"id": ["x"]}, r"m.jsonl:1: field 'id' must be a string or an integer id, got JSON array"),
    ({"answer_aliases": "one alias"}, r"m.jsonl:1: 'answer_aliases' must be a list of texts"),
    ({"paragraphs": [{"title": "T", "paragraph_text": "p", "is_supporting": "false"}]},
     r"m.jsonl:1: paragraphs\[0\].is_supporting must be true or false, got 'false'"),
    ({"paragraphs": [{"title": {"a": 1}, "paragraph_text": "p", "is_supporting": True}]},
     r"m.jsonl:1: field 'title' is a JSON object, not text"),
])
def test_musique_fields_are_typed(tmp_path, change, message):
    """A null question became the text "None"; the string "false" made a paragraph gold."""
    rec = json.loads(require(MUSIQUE).read_text().splitlines()[0])
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(rec | change) + "\n")
    with pytest.raises(CorpusError, match=message):
        read_multihop(path)
