"""Causal retrieval measures, it does not read names: the shop scenario with its file names and identifiers renamed
consistently ranks the same, a deliberately name-reading model is caught by the same check, and no string in
core/retrievers names the scenario's cause or file type."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from causal_assets.core.retrievers.causal.answer_model import LexicalAnswerModel, candidate_units
from causal_assets.core.retrievers.causal.retriever import CausalRetriever
from causal_assets.core.text.answers import normalize_answer
from tests.core.test_causal_retriever import BUG_QUERY, SHOP, _cart_ts, _retriever, _write, shop  # noqa: F401


# The shop scenario's names -> made-up words, applied to every camelCase part of the file texts, paths and the query
# (case kept). One word per stem class (item/items -> zorp/zorps), none a stopword or a word of the scenario.
RENAME = {"cart": "blick", "item": "zorp", "items": "zorps", "price": "mulv", "quantity": "frimble", "qty": "gwop",
          "total": "quux", "calculate": "vorpal", "format": "snig", "money": "plurk", "math": "drelb",
          "api": "wumpet", "types": "klorn", "utils": "brast", "docs": "yeld", "name": "skav", "src": "tove",
          "checkout": "jubjub", "product": "slithy"}


def _rename(text: str) -> str:
    def sub(m):
        w = m.group(0)
        new = RENAME.get(w.lower())
        if new is None:
            return w
        return new.upper() if len(w) > 1 and w.isupper() else new.capitalize() if w[0].isupper() else new
    return re.sub(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+", sub, text)


def _ranking(r: CausalRetriever, query: str) -> tuple[list[tuple[str, float]], str]:
    res = r.retrieve(query)
    return [(d.document.chunk_id, round(d.relevance.relevance_score, 9)) for d in res.documents], res.metadata["answer"]


def _renamed_ranking(r: CausalRetriever, query: str) -> tuple[list[tuple[str, float]], str]:
    ranking, answer = _ranking(r, query)
    return [(_rename(c), s) for c, s in ranking], _rename(answer)


class _NameBiased(LexicalAnswerModel):
    """A deliberately name-dependent model (the control): lines of a document whose path names the cart get a
    bonus, as the removed rule's bonus did for the lines it flagged."""

    def _clusters(self, query, docs):
        weights, raw = super()._clusters(query, docs)
        for d in docs:
            if "cart" in d.path:
                for _, unit in candidate_units(d):
                    key = normalize_answer(unit)
                    if key in weights:
                        weights[key] *= 50.0
        return weights, raw


@pytest.fixture(scope="module")
def scrambled_root(tmp_path_factory) -> Path:
    files = {**SHOP, "src/cart.ts": _cart_ts()}
    return _write(tmp_path_factory.mktemp("scrambled"), {_rename(p): _rename(t) for p, t in files.items()})


def test_ranking_invariant_to_renaming(shop, scrambled_root):
    """File names and identifiers renamed consistently (src/cart.ts -> tove/blick.ts, calculateTotal -> vorpalQuux,
    price -> mulv, ...): a ranker that measures must give the same ranking, scores and answer."""
    assert _rename("src/cart.ts#1") == "tove/blick.ts#1" and _rename(BUG_QUERY) == "Why does vorpalQuux return NaN?"
    scrambled = _retriever(scrambled_root, "scrambled")
    assert set(scrambled.index.position) == {_rename(c) for c in shop.index.position}
    assert _ranking(scrambled, _rename(BUG_QUERY)) == _renamed_ranking(shop, BUG_QUERY)


def test_renaming_check_catches_a_name_based_model(shop, scrambled_root):
    """The control: the same check fails for a model that reads names."""
    biased = CausalRetriever(shop.index, _NameBiased(), (shop.nodes, shop.edges))
    scrambled = _retriever(scrambled_root, "scrambled", _NameBiased())
    assert _ranking(scrambled, _rename(BUG_QUERY)) != _renamed_ranking(biased, BUG_QUERY)


def test_no_scenario_rule_in_the_retrievers():
    """No string in core/retrievers names the test scenario's cause or file type."""
    root = Path(__file__).resolve().parents[2] / "causal_assets" / "core" / "retrievers"
    banned = (r"parsefloat", r"parseint", r"\bnumber\(", r"\.value\b", r"textcontent", r"innertext", r"\bdataset\.",
              r"string-typed", r"type conversion", r"string arithmetic", r"\.tsx?\b", r"\.jsx?\b", r"typescript",
              r"calculatetotal", r"\bcart\b", r"\bprice\b")
    found = [f"{p.relative_to(root)}: {b}" for p in sorted(root.rglob("*.py"))
             for b in banned if re.search(b, p.read_text(encoding="utf-8").lower())]
    found += [f"{p.relative_to(root)}: nan" for p in sorted((root / "causal").rglob("*.py"))
              if re.search(r"\bnan\b", p.read_text(encoding="utf-8").lower())]
    assert not found, found
