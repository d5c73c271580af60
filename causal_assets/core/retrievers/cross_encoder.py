"""Cross-encoder reranking: the first `depth` hits of a base retriever are read jointly with the query by a
sequence-classification model (one relevance logit per pair) and reranked by

    score = z(base score) + weight * z(cross-encoder logit)

with z-scores over those `depth` hits; the hits below keep the base's order, and `weight = 0` is the base ranking.
A cross-encoder attends across the pair, so it sees which words of the query the document answers. None ships as a
wheel, so the product fits its own (`core/tuning/reranker.py`); this module loads a fitted one from its directory
(local files only): one model, or an ensemble of `member-<i>` fits scored by their mean logit. It is the
`cross_encoder` retriever: `base`, `model_path`, `weight`, `depth`, `max_length`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.retrievers.similarity import rerank_head, zscore


class CrossEncoder:
    """(query, document) -> relevance logit, from a transformers sequence-classification model directory. Scores
    are kept per (query, chunk id) for the object's life: the held-out decision reranks the same hits at several
    weights, and a query asked again costs nothing."""

    def __init__(self, path: str, max_length: int = 160, batch_size: int = 32):
        # optional heavy dependency (torch), as in core/index/dense.py: only where a cross-encoder is loaded
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if max_length < 8:
            raise ValueError(f"cross-encoder max_length must be >= 8 tokens, got {max_length}")
        self.path, self.max_length, self.batch_size = str(path), max_length, batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(self.path, num_labels=1,
                                                                        local_files_only=True)
        self.model.eval()
        self.scores: dict[tuple[str, str], float] = {}

    def logits(self, queries: list[str], documents: list[str]):
        """The model's logit per pair, with gradients (the fit calls this in train mode). A pair longer than
        `max_length` tokens loses tokens from the end of the longer of its two texts, one at a time: a short query
        stays whole and the document takes the rest, and a query longer than the whole budget (cutting only the
        document cannot make that pair fit) keeps its beginning and leaves the document at least as many tokens."""
        batch = self.tokenizer(queries, documents, truncation="longest_first", max_length=self.max_length,
                               padding=True, return_tensors="pt")
        return self.model(**batch).logits.squeeze(-1)

    def score(self, query: str, index: CorpusIndex, chunk_ids: list[str]) -> np.ndarray:
        """The logit of `query` against each chunk (its title and text, as the indexes see it)."""
        import torch  # the same optional dependency as above

        todo = [c for c in dict.fromkeys(chunk_ids) if (query, c) not in self.scores]
        with torch.no_grad():
            for s in range(0, len(todo), self.batch_size):
                part = todo[s:s + self.batch_size]
                values = self.logits([query] * len(part), [index.text(c) for c in part]).double().numpy()
                self.scores.update({(query, c): float(v) for c, v in zip(part, np.atleast_1d(values))})
        return np.array([self.scores[(query, c)] for c in chunk_ids], dtype=np.float64)


MEMBER = "member-"   # an ensemble's i-th model lives in <directory>/member-<i>


def member_dir(path: str | Path, member: int) -> Path:
    """Where an ensemble in `path` keeps its member `member`."""
    return Path(path) / f"{MEMBER}{member}"


def member_dirs(path: str | Path) -> list[Path]:
    """The model directories a fitted cross-encoder's directory holds: itself (one model) or its `member-<i>`
    directories in member order (an ensemble); [] when it holds neither."""
    path = Path(path)
    if (path / "config.json").exists():
        return [path]
    members = [d for d in path.glob(f"{MEMBER}*")
               if d.name.removeprefix(MEMBER).isdigit() and (d / "config.json").exists()]
    return sorted(members, key=lambda d: int(d.name.removeprefix(MEMBER)))


class CrossEncoderEnsemble:
    """Cross-encoders fitted alike from different seeds, scored by their mean logit: what one seed alone decided
    (the head's initial weights, the batches, the negatives drawn) partly cancels."""

    def __init__(self, members: list[CrossEncoder]):
        if not members:
            raise ValueError("a cross-encoder ensemble needs at least one member")
        self.members = members

    def score(self, query: str, index: CorpusIndex, chunk_ids: list[str]) -> np.ndarray:
        return np.mean([m.score(query, index, chunk_ids) for m in self.members], axis=0)


def load_cross_encoder(path: str | Path, max_length: int = 160) -> CrossEncoder | CrossEncoderEnsemble:
    """The fitted cross-encoder in `path`: one model, or the ensemble of its members."""
    dirs = member_dirs(path)
    if not dirs:
        raise ValueError(f"cross_encoder model_path {str(path)!r}: no fitted cross-encoder there (neither "
                         f"config.json nor member-<i>/config.json)")
    members = [CrossEncoder(str(d), max_length) for d in dirs]
    return members[0] if len(members) == 1 else CrossEncoderEnsemble(members)


class CrossEncoderReranker:
    name = "cross_encoder"

    def __init__(self, index: CorpusIndex, base, model: CrossEncoder | CrossEncoderEnsemble | str,
                 weight: float = 0.5, depth: int = 20, max_length: int = 160):
        if depth < 2:
            raise ValueError(f"cross_encoder depth must be >= 2, got {depth}")
        if weight < 0:
            raise ValueError(f"cross_encoder weight must be >= 0, got {weight}")
        self.index, self.base, self.depth, self.weight = index, base, depth, float(weight)
        self.model = load_cross_encoder(model, max_length) if isinstance(model, (str, Path)) and weight > 0 else model

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        runs = self.base.retrieve_many(queries, max(k, self.depth), within)
        if self.weight == 0:
            return [hits[:k] for hits in runs]
        out = []
        for q, hits in zip(queries, runs):
            head = hits[: self.depth]
            if len(head) < 2 or not q.strip():
                out.append(hits[:k])
                continue
            logits = self.model.score(q, self.index, [h.chunk_id for h in head])
            mixed = zscore(np.array([h.score for h in head], dtype=np.float64)) + self.weight * zscore(logits)
            out.append(rerank_head(hits, mixed, k))   # the hits below `depth` follow in the base's order
        return out
