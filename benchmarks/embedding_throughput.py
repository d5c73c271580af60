"""Embedding throughput of the index stage vs raw SentenceTransformer.encode on the same texts, in one process.

    python benchmarks/embedding_throughput.py [--quick] [--out DIR]

Raw: `model.encode(texts, batch_size, normalize_embeddings=True)`, the model's own limit on this machine (it
sorts each call by length itself). Index stage: `embed_incremental` with an empty content-hash cache, i.e. what the
`corpus_embeddings` asset does on a first run (hashing, global length sort, blocks, cache write). Texts: a random
sample of SciFact chunks (a uniform sample keeps the corpus's length distribution). The two are run alternately,
pair after pair, and the figure is the median of the per-pair throughput ratios, so load changes hit both.
`--quick`: 48 texts, 3 pairs, from the first 300 chunks of the packaged `default` corpus (no shared data).
Writes data/benchmarks/embedding_throughput[_quick].json.
"""
from __future__ import annotations

import tempfile
import time

import numpy as np
from common import PARQUET, Figure, quick_base, run_script

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder, EmbeddingCache, embed_incremental
from causal_assets.core.foundation.storage import asset_path, read_parquet

TARGET_RATIO = 0.90


def run(quick: bool) -> tuple[list[Figure], dict]:
    n_texts, pairs = (48, 3) if quick else (128, 5)  # many short pairs: a load change hits fewer of them
    corpus = "default" if quick else "scifact"
    chunks = read_parquet(asset_path(quick_base({corpus: 300}, dense=False) if quick else PARQUET, "corpus_chunks", corpus))
    rng = np.random.default_rng(0)
    sample = chunks.iloc[np.sort(rng.choice(len(chunks), n_texts, replace=False))]
    texts, hashes = chunk_texts(sample), sample["content_hash"].tolist()
    embedder = Embedder()
    model = embedder.model
    model.encode(texts[:8], batch_size=embedder.batch_size)  # warm-up: weights paged in, kernels initialised

    def raw() -> np.ndarray:
        return model.encode(texts, batch_size=embedder.batch_size, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)

    def index_stage() -> np.ndarray:
        with tempfile.TemporaryDirectory() as cache_dir:  # empty cache: everything is embedded
            vectors, stats = embed_incremental(texts, hashes, embedder, EmbeddingCache(cache_dir, DEFAULT_MODEL),
                                               "throughput")
        assert stats["embedded"] == len(set(hashes))
        return vectors

    seconds: dict[str, list[float]] = {"raw": [], "index_stage": []}
    for i in range(pairs):
        order = (("raw", raw), ("index_stage", index_stage))
        for name, fn in order if i % 2 == 0 else order[::-1]:  # alternate who goes first
            t0 = time.perf_counter()
            out = fn()
            seconds[name].append(time.perf_counter() - t0)
            if name == "raw":
                raw_vectors = out
            else:
                stage_vectors = out
    ratios = [r / s for r, s in zip(seconds["raw"], seconds["index_stage"])]  # throughput ratio = time ratio
    tps = {n: [n_texts / s for s in v] for n, v in seconds.items()}
    details = {"texts": n_texts, "unique_texts": len(set(hashes)), "pairs": pairs, "batch_size": embedder.batch_size,
               "model": DEFAULT_MODEL, "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
               "texts_per_second": {n: [round(x, 2) for x in v] for n, v in tps.items()},
               "median_texts_per_second": {n: round(float(np.median(v)), 2) for n, v in tps.items()},
               "ratio_by_pair": [round(r, 4) for r in ratios],
               "max_abs_vector_difference": float(np.abs(raw_vectors - stage_vectors).max())}
    figures = [Figure("embedding throughput, index stage / raw encode (same texts, same process)",
                      round(float(np.median(ratios)), 3), "x", TARGET_RATIO, ">=",
                      f"index stage {details['median_texts_per_second']['index_stage']} texts/s, raw "
                      f"{details['median_texts_per_second']['raw']} texts/s, {n_texts} {corpus} chunks")]
    return figures, details


def main() -> None:
    run_script("embedding_throughput", run, __doc__)


if __name__ == "__main__":
    main()
