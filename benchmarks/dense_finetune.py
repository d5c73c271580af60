"""The measurement behind `tuned_encoder` (core/tuning/encoder.py): in-domain fine-tuning of the MiniLM encoder on a
benchmark's train qrels, with the asset's own fitting code, judged on held-out train queries and on `test`.

    python benchmarks/dense_finetune.py --benchmark scifact [--base data/parquet] [--epochs 1]

The encoder is trained on 4/5 of the train queries (multiple-negatives ranking loss with one BM25 hard negative per
query), then the base and the fine-tuned encoder (both fp32 PyTorch) are compared on the held-out fifth, where a
choice would be made, and on `test`: dense alone and in the z-score hybrid at the weights around the tuned one.
Writes data/benchmarks/dense_finetune_<benchmark>.json. On 2 cores SciFact costs ~6 min of training per epoch and
~3.5 min per encoding of its abstracts (four encodings).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, machine, write_json  # noqa: E402

from causal_assets.core.benchmarks import Benchmark, load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric  # noqa: E402
from causal_assets.core.index.dense import model_dir  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.tuning.encoder import SEQ_LEN, fine_tune, training_pairs  # noqa: E402
from causal_assets.core.tuning.spec import EncoderSpec, TuningSpec  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

WEIGHTS = (0.5, 0.65, 0.8)


def scores(bench, ids, matrix: np.ndarray, metric: str) -> float:
    qids = bench.query_ids()
    run = {q: {ids[j]: float(matrix[i, j]) for j in np.argsort(-matrix[i])[:100]} for i, q in enumerate(qids)}
    return round(named_metric({q: bench.qrels[q] for q in qids}, run, metric), 4)


def part(bench: Benchmark, qids: list[str]) -> Benchmark:
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in qids}, {q: bench.qrels[q] for q in qids})


def z(m: np.ndarray) -> np.ndarray:
    return (m - m.mean(1, keepdims=True)) / (m.std(1, keepdims=True) + 1e-12)


def figures(model, texts, ids, index, benches: dict, metric: str) -> dict:
    docs = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    out = {}
    for name, bench in benches.items():
        qids = bench.query_ids()
        dense = model.encode([bench.queries[q] for q in qids], normalize_embeddings=True) @ docs.T
        bm25 = np.stack([index.scores(bench.queries[q], "bm25") for q in qids])
        out[name] = {"queries": len(qids), "dense": scores(bench, ids, dense, metric),
                     "hybrid": {str(w): scores(bench, ids, w * z(dense) + (1 - w) * z(bm25), metric)
                                for w in WEIGHTS}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="scifact")
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=2e-5)
    args = ap.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    torch.set_num_threads(2)
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)[args.benchmark]
    index = CorpusIndex.load(args.base, spec.corpus)
    ids = index.ids.astype(str)
    texts = [f"{t} {x}".strip() for t, x in zip(index.chunks["title"].fillna(""), index.chunks["text"].fillna(""))]
    train = load_benchmark(spec, spec.tune_split or "train")
    qids = sorted(train.query_ids())
    random.Random(1).shuffle(qids)
    held = set(qids[: len(qids) // 5])
    fit_on, held_out = part(train, [q for q in qids if q not in held]), part(train, sorted(held))
    benches = {"train_held_out": held_out, "test": load_benchmark(spec, "test")}
    metric = TuningSpec.model_validate(spec.tuning).metric
    pairs = training_pairs(index, fit_on, fit_on.query_ids())
    model = SentenceTransformer(model_dir(), device="cpu")
    model.max_seq_length = SEQ_LEN
    t0 = time.perf_counter()
    base = figures(model, texts, ids, index, benches, metric)
    encode_s = time.perf_counter() - t0
    print("base", json.dumps(base), flush=True)
    t0 = time.perf_counter()
    losses = fine_tune(model, pairs, texts, EncoderSpec(epochs=args.epochs, lr=args.lr))
    train_s = time.perf_counter() - t0
    tuned = figures(model, texts, ids, index, benches, metric)
    print("fine-tuned", json.dumps(tuned), flush=True)
    out = {"topic": "dense_finetune", "benchmark": args.benchmark, "metric": metric, "pairs": len(pairs),
           "fit_queries": len(fit_on.query_ids()), "epochs": args.epochs, "lr": args.lr, "batch": EncoderSpec().batch_size,
           "first_last_loss": [losses[0], losses[-1]], "train_seconds": round(train_s, 1),
           "base_encode_seconds": round(encode_s, 1), "machine_start": started, "machine_end": machine(),
           "base": base, "fine_tuned": tuned}
    path = write_json(f"dense_finetune_{args.benchmark}", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
