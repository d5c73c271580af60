"""A synthetic corpus of any size (up to millions of chunks) built from the project's real chunks, for scale tests.

Nothing is encoded: chunk i mixes a real base chunk a with a partner b (half the time one of a's 10 nearest
neighbours, otherwise any chunk) in a share lam ~ U(0, 0.5), text and vector alike. Vector:
normalise((1 - lam) e_a + lam e_b + NOISE g), so mixtures fill the space between topics, where approximate search
is hardest. Text: the first (1 - lam) of a's words, then the last lam of b's, so BM25 sees real vocabulary and
lengths. Chunks come in order from one seed: the corpus of size n is the first n chunks of any larger one.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from causal_assets.core.foundation.storage import read_parquet

NOISE = 0.3
NEIGHBOURS = 10
NEIGHBOUR_SHARE = 0.5


class SourceChunks:
    """The real chunks and vectors synthetic chunks are made of, with each one's nearest real neighbours."""

    def __init__(self, base):
        frames, vectors = [], []
        for path in sorted((base / "corpus_chunks").glob("*.parquet")):
            corpus = path.stem
            emb_path = base / "corpus_embeddings" / path.name
            if not emb_path.exists():
                continue
            chunks = read_parquet(path).sort_values("chunk_idx")
            emb = read_parquet(emb_path).sort_values("chunk_idx")
            frames.append(chunks.assign(source_corpus=corpus))
            vectors.append(np.stack(emb["embedding"].to_numpy()).astype(np.float32))
        chunks = pd.concat(frames, ignore_index=True)
        self.corpora = sorted(chunks["source_corpus"].unique())
        self.words = [t.split() for t in chunks["text"].astype(str)]  # the title is kept apart, as for real chunks
        self.titles = chunks["title"].astype(str).tolist()
        self.vectors = np.concatenate(vectors)
        self.neighbours = self._nearest(NEIGHBOURS)

    def __len__(self) -> int:
        return len(self.vectors)

    def _nearest(self, k: int, block: int = 2048) -> np.ndarray:
        out = np.empty((len(self), k), dtype=np.int64)
        for start in range(0, len(self), block):
            sims = self.vectors[start:start + block] @ self.vectors.T
            rows = np.arange(sims.shape[0])
            sims[rows, rows + start] = -np.inf  # not itself
            out[start:start + block] = np.argpartition(-sims, k, axis=1)[:, :k]
        return out


def make_corpus(source: SourceChunks, n: int, seed: int = 0, with_plan: bool = False):
    """(chunks frame with chunk_id/title/kind/text, L2-normalised float32 vectors), n synthetic chunks; with
    `with_plan`, also the recombination plan (a, b, lam) that `make_terms` reuses."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, len(source), n)
    near = rng.random(n) < NEIGHBOUR_SHARE
    b = np.where(near, source.neighbours[a, rng.integers(0, NEIGHBOURS, n)], rng.integers(0, len(source), n))
    lam = rng.uniform(0.0, 0.5, n).astype(np.float32)
    vectors = np.empty((n, source.vectors.shape[1]), dtype=np.float32)
    block = 65_536
    for start in range(0, n, block):
        sl = slice(start, start + block)
        g = rng.standard_normal((len(a[sl]), vectors.shape[1])).astype(np.float32)
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        v = (1 - lam[sl, None]) * source.vectors[a[sl]] + lam[sl, None] * source.vectors[b[sl]] + NOISE * g
        vectors[sl] = v / np.linalg.norm(v, axis=1, keepdims=True)
    words = source.words
    texts = []
    for ai, bi, li in zip(a.tolist(), b.tolist(), lam.tolist()):
        wa, wb = words[ai], words[bi]
        keep_b = int(li * len(wb))
        texts.append(" ".join(wa[: len(wa) - int(li * len(wa))] + wb[len(wb) - keep_b:]))
    titles = source.titles
    chunks = pd.DataFrame({"chunk_id": [f"syn{i}" for i in range(n)], "title": [titles[i] for i in a.tolist()],
                           "kind": "synthetic", "text": texts})
    return (chunks, vectors, (a, b, lam)) if with_plan else (chunks, vectors)


class SourceTerms:
    """Each source chunk's analyzed title and its text's terms word by word, so the index terms of a synthetic chunk
    are slices of its two sources' terms instead of a new analysis of its text. Exact, not an approximation: the
    analyzer's tokens never span whitespace, so analyze(" ".join(words)) is the concatenation of analyze(word) over
    the words, and the title is analysed apart from the text (they are joined by a newline)."""

    def __init__(self, source: SourceChunks, split_identifiers: bool = False):
        from causal_assets.core.text.analyzer import analyze

        self.title_terms = [analyze(t, split_identifiers) for t in source.titles]
        self.terms, self.offsets = [], []  # flat terms of the text; offsets[w] = terms before word w
        for words in source.words:
            flat, offsets = [], [0]
            for w in words:
                flat += analyze(w, split_identifiers)
                offsets.append(len(flat))
            self.terms.append(flat)
            self.offsets.append(offsets)
        self.words = source.words


def make_terms(source_terms: SourceTerms, plan) -> list[list[str]]:
    """The analyzer's terms of every chunk of `make_corpus(..., with_plan=True)`, in the same order, from its plan."""
    a, b, lam = plan
    out = []
    for ai, bi, li in zip(a.tolist(), b.tolist(), lam.tolist()):
        wa, wb = source_terms.words[ai], source_terms.words[bi]
        keep_a, keep_b = len(wa) - int(li * len(wa)), int(li * len(wb))
        out.append(source_terms.title_terms[ai] + source_terms.terms[ai][:source_terms.offsets[ai][keep_a]]
                   + source_terms.terms[bi][source_terms.offsets[bi][len(wb) - keep_b]:])
    return out
