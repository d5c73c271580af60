"""The analyzer shared by every sparse index and by queries: the same function on both sides, always.

Lucene-style: lowercase word tokens of 2+ characters, the English stopword list BM25 baselines use
(Lucene's 33 words, as bm25s ships them), Snowball English stemming (PyStemmer). For code, identifiers are also split into
their parts ("calculateTotal" -> calculate, total; "shortest_path" -> shortest, path) while the whole
identifier is kept, so a query can match either form.
"""
from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

TOKEN = re.compile(r"(?u)\b\w\w+\b")
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# Lucene's EnglishAnalyzer set, the list bm25s's `STOPWORDS_EN` holds (a test keeps the two equal). Written out
# because importing bm25s loads numba (~0.2 s), which a one-query search would pay for a 33-word tuple.
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with"))
_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=500_000)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def _identifier_parts(token: str) -> list[str]:
    parts = [p for piece in token.split("_") for p in CAMEL.findall(piece)]
    return parts if len(parts) > 1 else []


def _token_terms(token: str, split_identifiers: bool) -> tuple[str, ...]:
    """The index terms one token contributes (lowercased, stopwords dropped, stemmed)."""
    words = [token, *_identifier_parts(token)] if split_identifiers else [token]
    out = []
    for w in words:
        w = w.lower()
        if len(w) > 1 and w not in STOPWORDS:
            out.append(_stem(w))
    return tuple(out)


# One memo per mode, keyed by the raw token: a token's terms are computed once, then cost one dict lookup
# (most of the time of analysing queries and corpora went into lowercasing, stopword checks and stemming again).
_plain_terms = lru_cache(maxsize=1_000_000)(lambda token: _token_terms(token, False))
_code_terms = lru_cache(maxsize=1_000_000)(lambda token: _token_terms(token, True))


def analyze(text: str, split_identifiers: bool = False) -> list[str]:
    """Index terms of `text`, in order (duplicates kept: term frequency matters)."""
    terms = _code_terms if split_identifiers else _plain_terms
    out: list[str] = []
    for token in TOKEN.findall(text):
        out += terms(token)
    return out
