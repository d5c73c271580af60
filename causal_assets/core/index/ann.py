"""Approximate nearest-neighbour (ANN) search over the dense chunk vectors, for corpora too large for an exact scan.

`CorpusIndex` uses it for whole-corpus dense search from `AnnConfig.min_chunks` chunks (below that an exact scan
takes a few milliseconds and nothing is approximated). The index is faiss IVF with 8-bit scalar quantisation, not
an HNSW graph: it builds in about a minute at 1M x 384 on 2 cores and costs 1 byte a dimension (docs/decisions.md,
"Performance and engineering"). Recall is one query-time knob, `nprobe`, calibrated at build time: the smallest
power of two whose recall@k against exact search reaches `target_recall`. Candidates (`rerank` x k) are re-scored
with the exact float vectors, so returned scores are exact cosines.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

DEFAULT_MIN_CHUNKS = 200_000  # the code location passes $CAUSAL_ASSETS_ANN_MIN_CHUNKS (causal_assets.settings)


@dataclass(frozen=True)
class AnnConfig:
    min_chunks: int = DEFAULT_MIN_CHUNKS  # corpora smaller than this are searched exactly
    nlist: int | None = None              # IVF lists; None: sqrt(n) rounded to a power of two
    nprobe: int | None = None             # lists scanned per query; None: calibrated at build time
    target_recall: float = 0.98           # calibration goal, recall@calibration_k vs exact search
    calibration_k: int = 10
    calibration_queries: int = 200
    rerank: int = 4                       # candidates re-scored exactly per requested result
    train_per_list: int = 64              # k-means sample: this many vectors per list
    seed: int = 0


def default_nlist(n: int) -> int:
    return int(min(max(2 ** round(math.log2(max(math.sqrt(n), 1))), 16), 65536))


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int, block: int = 262_144) -> np.ndarray:
    """Positions of the k highest inner products per query, by brute force in blocks of the corpus (bounded memory)."""
    k = min(k, len(vectors))
    best_pos = np.zeros((len(queries), 0), np.int64)
    best_val = np.zeros((len(queries), 0), np.float32)
    for start in range(0, len(vectors), block):
        sims = queries @ vectors[start:start + block].T
        kk = min(k, sims.shape[1])
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        best_pos = np.hstack([best_pos, part + start])
        best_val = np.hstack([best_val, np.take_along_axis(sims, part, axis=1)])
    order = np.lexsort((best_pos, -best_val), axis=-1)[:, :k]
    return np.take_along_axis(best_pos, order, axis=1)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each row of `truth` that the same row of `found` contains."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth)]))


def pseudo_queries(vectors: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Calibration queries drawn from the corpus itself: a chunk vector plus a random share of another chunk's
    vector plus isotropic noise, normalised. Mixing two chunks puts many queries between topics, where IVF is at
    its weakest, so the calibrated nprobe errs on the safe side for real queries."""
    rng = np.random.default_rng(seed)
    a = vectors[rng.integers(0, len(vectors), n)]
    b = vectors[rng.integers(0, len(vectors), n)]
    noise = rng.standard_normal(a.shape).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    q = a + rng.uniform(0.0, 1.0, (n, 1)).astype(np.float32) * b + 0.5 * noise
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class AnnIndex:
    """faiss IVF-SQ8 over inner product (cosine on the L2-normalised vectors), with exact re-scoring."""
    index: object                         # faiss.IndexIVFScalarQuantizer
    vectors: np.ndarray                   # the float32 corpus vectors, shared with the corpus index (not copied)
    config: AnnConfig
    build_stats: dict = field(default_factory=dict)

    @classmethod
    def build(cls, vectors: np.ndarray, config: AnnConfig = AnnConfig(),
              calibration: np.ndarray | None = None) -> "AnnIndex":
        """Train, add and calibrate. `calibration`: query vectors to calibrate nprobe on (default: pseudo-queries
        from the corpus)."""
        import faiss  # optional heavy dependency: only large corpora build an ANN index

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = vectors.shape
        nlist = config.nlist or default_nlist(n)
        t0 = time.perf_counter()
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(config.seed)
        sample = vectors[np.sort(rng.choice(n, min(n, nlist * config.train_per_list), replace=False))]
        index.train(sample)
        t1 = time.perf_counter()
        index.add(vectors)
        t2 = time.perf_counter()
        ann = cls(index, vectors, config, {"n": n, "dim": dim, "nlist": nlist, "train_s": t1 - t0, "add_s": t2 - t1})
        if config.nprobe is not None:
            index.nprobe = config.nprobe
        else:
            queries = calibration if calibration is not None else pseudo_queries(vectors, config.calibration_queries,
                                                                                  config.seed)
            ann.build_stats["calibration"] = ann.calibrate(queries)
        ann.build_stats["calibrate_s"] = time.perf_counter() - t2
        ann.build_stats["build_s"] = time.perf_counter() - t0
        return ann

    @property
    def nprobe(self) -> int:
        return int(self.index.nprobe)

    def calibrate(self, queries: np.ndarray) -> dict:
        """Set nprobe to the smallest power of two reaching `target_recall` (recall@k of the final, re-scored
        results against exact search); returns the recall measured at each nprobe tried."""
        k = self.config.calibration_k
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        truth = exact_top_k(self.vectors, queries, k)
        curve, nprobe = {}, 1
        while True:
            self.index.nprobe = nprobe
            curve[nprobe] = recall_at_k(self.search(queries, k)[0], truth)
            if curve[nprobe] >= self.config.target_recall or nprobe >= self.index.nlist:
                break
            nprobe = min(nprobe * 2, self.index.nlist)
        return {"nprobe": nprobe, "recall_by_nprobe": curve, "queries": len(queries), "k": k}

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, exact cosines), each (queries, k), best first; ties by position. Rows may end in -1 / -inf
        when fewer than k candidates were found."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        _, cand = self.index.search(queries, max(k * self.config.rerank, k))
        valid = cand >= 0
        safe = np.where(valid, cand, 0)
        exact = np.einsum("qcd,qd->qc", self.vectors[safe], queries)
        exact = np.where(valid, exact, -np.inf).astype(np.float32)
        order = np.lexsort((safe, -exact), axis=-1)[:, :k]
        positions = np.take_along_axis(np.where(valid, cand, -1), order, axis=1)
        return positions, np.take_along_axis(exact, order, axis=1)

    def memory_bytes(self) -> dict:
        """Bytes held by the ANN index itself (the float vectors belong to the corpus index)."""
        ntotal, dim = self.index.ntotal, self.index.d
        return {"codes": int(ntotal * self.index.code_size), "ids": int(ntotal * 8),
                "centroids": int(self.index.nlist * dim * 4)}
