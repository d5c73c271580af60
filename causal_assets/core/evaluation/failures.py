"""Failure buckets of the evaluation (`evaluation_failures` and the report): why no relevant document reached the
top K.

Every rule is lexical and deterministic, so the report can print exactly why a query landed in a
bucket. Terms come from the analyzer passed in (the project's tokenizer; it decides stemming and
stopwords); "query terms" are the distinct terms of the query, a document's "overlap" is how many of
them it contains, and document frequency (DF) is counted over the texts of `CorpusTerms`, which should
therefore be the whole searchable corpus (analysed once, then shared by every retriever's run). Gold documents
are the relevant ones (`metrics.is_relevant`).

Rules are tried in this order and the first that holds wins (each later rule assumes the earlier
ones failed, e.g. a vague query also lets distractors in, but its cause is the vagueness):
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from causal_assets.core.measures.metrics import Qrels, Run, is_relevant, ranked

VOCAB_MIN_OVERLAP = 0.5  # the best-matching gold doc must contain at least half the query terms
SPECIFICITY_MAX_TERMS = 1  # a query with at most this many distinct terms is too vague
SPECIFICITY_MIN_DF = 0.05  # ... as is one whose rarest term is in >= 5% of the corpus documents

BUCKET_RULES: dict[str, str] = {
    "none": "Not a failure: a relevant document is in the top K.",
    "vocabulary_mismatch": (
        f"Every gold document (with text) contains fewer than {VOCAB_MIN_OVERLAP:.0%} of the query's distinct "
        "terms: the query and the target use different words."
    ),
    "specificity_gap": (
        f"The query has at most {SPECIFICITY_MAX_TERMS} distinct term(s), or even its rarest term "
        f"occurs in at least {SPECIFICITY_MIN_DF:.0%} of the corpus documents: it matches too many "
        "documents to single out the target."
    ),
    "distractor_overlap": (
        "A non-relevant document in the top K contains at least as many query terms as the "
        "best-matching gold document (a hard negative sharing the keywords)."
    ),
    "other": "A failure none of the rules above explains (e.g. the gold text is missing, or the "
             "gold document matches more query terms than anything in the top K yet ranks lower).",
}
__doc__ += "".join(f"\n* {bucket}: {rule}" for bucket, rule in BUCKET_RULES.items()) + "\n"

COLUMNS = ["query_id", "bucket", "rule", "detail"]


@dataclass(frozen=True)
class CorpusTerms:
    """Each document's distinct terms, every term's document frequency, and the analyzer that made them."""
    doc_terms: dict[str, set[str]]
    df: Counter
    analyzer: Callable[[str], list[str]]

    @classmethod
    def of(cls, doc_texts: dict[str, str], analyzer: Callable[[str], list[str]]) -> "CorpusTerms":
        doc_terms = {d: set(analyzer(t)) for d, t in doc_texts.items()}
        return cls(doc_terms, Counter(t for terms in doc_terms.values() for t in terms), analyzer)

    @property
    def n_docs(self) -> int:
        return max(len(self.doc_terms), 1)


def classify_failures(
    queries: dict[str, str],
    qrels: Qrels,
    run: Run,
    corpus: CorpusTerms,
    k: int,
    relevance_threshold: float = 0.0,
) -> pd.DataFrame:
    """One row per qrels query that has a relevant document: its bucket, rule text and evidence.

    Queries without a relevant document are skipped, as in `metrics.evaluate`.
    """
    rows = []
    for qid, labels in qrels.items():
        gold = {d for d, v in labels.items() if is_relevant(v, relevance_threshold)}
        if not gold:
            continue
        if qid not in queries:
            raise KeyError(f"query {qid!r} is in the qrels but has no text in `queries`")
        top = ranked(run.get(qid, {}))[:k]
        bucket, detail = _bucket(set(corpus.analyzer(queries[qid])), gold, top, corpus)
        rows.append((qid, bucket, BUCKET_RULES[bucket], detail))
    return pd.DataFrame(rows, columns=COLUMNS)


def _bucket(q_terms, gold, top, corpus: CorpusTerms) -> tuple[str, str]:
    doc_terms, df, n_docs = corpus.doc_terms, corpus.df, corpus.n_docs
    hits = [d for d in top if d in gold]
    if hits:
        return "none", f"gold {hits[0]} at rank {top.index(hits[0]) + 1}"

    def overlap(d):
        return len(q_terms & doc_terms[d])

    known_gold = sorted(d for d in gold if d in doc_terms)
    if not known_gold:
        return "other", "no text for any gold document"
    best_gold = max(known_gold, key=overlap)  # sorted first, so ties pick the smallest id
    n_terms, best = len(q_terms), overlap(best_gold)

    if n_terms and best / n_terms < VOCAB_MIN_OVERLAP:
        return "vocabulary_mismatch", f"best gold {best_gold} has {best}/{n_terms} query terms"

    rarest = min(q_terms, key=lambda t: (df[t], t), default=None)
    if n_terms <= SPECIFICITY_MAX_TERMS or df[rarest] / n_docs >= SPECIFICITY_MIN_DF:
        where = f"; rarest term {rarest!r} in {df[rarest]}/{n_docs} docs" if rarest else ""
        return "specificity_gap", f"{n_terms} query term(s){where}"

    distractors = [d for d in top if d in doc_terms and overlap(d) >= best]
    if distractors:
        d = distractors[0]
        return "distractor_overlap", (
            f"{d} at rank {top.index(d) + 1} has {overlap(d)}/{n_terms} query terms, "
            f"best gold {best_gold} has {best}/{n_terms}")

    return "other", (f"best gold {best_gold} has {best}/{n_terms} query terms; "
                     f"no document of the {len(top)} in the top K has as many")
