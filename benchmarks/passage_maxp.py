"""Tried and not adopted (docs/decisions.md): MaxP dense scores over sentence windows of SciFact's abstracts.

The encoder reads at most 256 word pieces, so an abstract's one vector misses its later sentences. Each abstract is
cut into windows of 3 sentences (title first) with a vector each; an abstract scores as its best window (MaxP).
Figures on the train split (where a choice would be made) and the test split, for dense alone and for the z-score
hybrid at the weights around the tuned one:

    python benchmarks/passage_maxp.py [--base data/parquet]

Reads the materialized SciFact index under --base (its `corpus_embeddings` backend embeds the windows and the
queries); writes data/benchmarks/passage_maxp.json. ~2.5 min of embedding on 2 cores (16.5k windows, onnx-int8).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, machine, write_json  # noqa: E402

from causal_assets.core.benchmarks import load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
WINDOW = 3
WEIGHTS = (0.5, 0.6, 0.65, 0.7)


def windows(index: CorpusIndex) -> tuple[list[str], np.ndarray]:
    texts, owner = [], []
    for d, (title, text) in enumerate(zip(index.chunks["title"].fillna(""), index.chunks["text"].fillna(""))):
        sents = SENTENCE_END.split(str(text))
        for s in range(0, max(len(sents), 1), WINDOW):
            texts.append(f"{title}. " + " ".join(sents[s:s + WINDOW]))
            owner.append(d)
    return texts, np.array(owner)


def ndcg(bench, ids, scores: np.ndarray) -> float:
    qids = bench.query_ids()
    run = {q: {ids[j]: float(scores[i, j]) for j in np.argsort(-scores[i])[:100]} for i, q in enumerate(qids)}
    return round(named_metric(bench.qrels, run, "ndcg@10"), 4)


def z(m: np.ndarray) -> np.ndarray:
    return (m - m.mean(1, keepdims=True)) / m.std(1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=PARQUET)
    args = ap.parse_args()
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)["scifact"]
    index = CorpusIndex.load(args.base, spec.corpus)
    ids = index.ids.astype(str)
    texts, owner = windows(index)
    t0 = time.perf_counter()
    vectors = index.embedder.encode(texts)
    embed_s = time.perf_counter() - t0
    order = np.argsort(owner, kind="stable")
    starts = np.r_[0, np.flatnonzero(np.diff(owner[order])) + 1]
    result = {}
    for split in ("train", "test"):
        bench = load_benchmark(spec, split)
        qids = bench.query_ids()
        qv = index.embedder.encode_queries([bench.queries[q] for q in qids])
        chunk = qv @ index.embeddings.T
        maxp = np.maximum.reduceat((qv @ vectors.T)[:, order], starts, axis=1)
        bm25 = np.stack([index.scores(bench.queries[q], "bm25") for q in qids])
        result[split] = {"queries": len(qids), "dense": {"chunk": ndcg(bench, ids, chunk), "maxp": ndcg(bench, ids, maxp)},
                         "hybrid": {str(w): {"chunk": ndcg(bench, ids, w * z(chunk) + (1 - w) * z(bm25)),
                                             "maxp": ndcg(bench, ids, w * z(maxp) + (1 - w) * z(bm25))}
                                    for w in WEIGHTS}}
        print(split, json.dumps(result[split]), flush=True)
    out = {"topic": "passage_maxp", "metric": "ndcg@10", "windows": len(texts), "abstracts": len(ids),
           "window_sentences": WINDOW, "backend": index.embedder.backend, "embed_seconds": round(embed_s, 1),
           "machine_start": started, "machine_end": machine(), "results": result}
    print(f"wrote {write_json('passage_maxp', out)}")


if __name__ == "__main__":
    main()
