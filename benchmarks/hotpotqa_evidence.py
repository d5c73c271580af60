"""HotpotQA distractor evidence selection at a budget of 2: which retriever puts both supporting paragraphs first?

    .venv/bin/python benchmarks/hotpotqa_evidence.py [--quick] [--out DIR]

Each question ranks only its own 10 paragraphs; gold = the 2 supporting paragraphs. Reported per retriever
(bm25, dense, hybrid, entity_first) and split (train: where the entity_first heuristics were developed;
test: held out; dev: all 200): Precision@2, Recall@2 (ranx) and all-gold@2 (share of questions whose top 2
are exactly both gold paragraphs). `--quick`: the first 20 questions, with a temporary embedding cache. Writes
data/benchmarks/hotpotqa_evidence[_quick].json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import quick_tmp  # noqa: E402

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.corpus.chunk import chunks_to_frame  # noqa: E402
from causal_assets.core.corpus.hotpotqa import load_hotpotqa  # noqa: E402
from causal_assets.core.measures.metrics import evaluate  # noqa: E402
from causal_assets.core.evaluation.runner import metric_value, run_benchmark  # noqa: E402
from causal_assets.core.index.build import build_index  # noqa: E402
from causal_assets.core.index.dense import DEFAULT_MODEL, EmbeddingCache  # noqa: E402
from causal_assets.core.retrievers.entity_first.retriever import EntityFirstRetriever  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

DATA = SETTINGS.shared_data / "hotpotqa" / "hotpot_dev_distractor_200.jsonl"
SPLITS = ("train", "test", "dev")
QUICK_QUESTIONS = 20


def all_gold_at(bench, run, k: int = 2) -> float:
    """Share of questions whose top-k holds every gold paragraph."""
    qids = bench.query_ids()
    hits = 0
    for q in qids:
        top = sorted(run.get(q, {}).items(), key=lambda x: -x[1])[:k]
        hits += set(bench.qrels[q]) <= {d for d, _ in top}
    return hits / len(qids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"a smoke run: the first {QUICK_QUESTIONS} questions")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "benchmarks", help="directory for the JSON")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data, cache_root = DATA, ROOT / "data" / "parquet" / "cache"
    if args.quick:
        cache_root = quick_tmp()
        data = cache_root / DATA.name
        data.write_text("\n".join(DATA.read_text().splitlines()[:QUICK_QUESTIONS]) + "\n")
    chunks, _ = load_hotpotqa(data, "hotpotqa")
    index = build_index(chunks_to_frame(chunks), "hotpotqa", False, dense=True,
                        cache=EmbeddingCache(cache_root / "embeddings", DEFAULT_MODEL))
    spec = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)["hotpotqa"]
    spec = spec.model_copy(update={"path": str(data)})
    retrievers = {name: build_retriever(name, index) for name in ("bm25", "dense", "hybrid")}
    retrievers["entity_first"] = EntityFirstRetriever(index, k=2, max_repairs=3)
    results: dict = {}
    for split in SPLITS:
        bench = load_benchmark(spec, split)
        results[split] = {"queries": len(bench.query_ids())}
        for name, retriever in retrievers.items():
            rr = run_benchmark(retriever, bench, depth=10, name=name)
            m = evaluate(bench.qrels, rr.run, ks=(2, 10))
            results[split][name] = {
                "P@2": round(metric_value(m, "precision", 2), 4),
                "all_gold@2": round(all_gold_at(bench, rr.run, 2), 4),
                "Recall@2": round(metric_value(m, "recall", 2), 4),
                "Recall@10": round(metric_value(m, "recall", 10), 4),
                "seconds": round(rr.seconds, 3),
            }
    report = {
        "benchmark": "hotpotqa distractor (200 dev questions), evidence = 2 supporting paragraphs",
        "quick": args.quick,
        "protocol": "entity_first heuristics developed on `train` only; `test` is held out; `dev` = all 200",
        "entity_first": {"k": 2, "max_repairs": 3, "dense_weight": 0.5, "title_weight": 2.0, "bridge_weight": 0.3},
        "hybrid": {"weight": 0.5},
        "results": results,
        "total_s": round(time.perf_counter() - t0, 1),
    }
    out = args.out / f"hotpotqa_evidence{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"{'split':6} {'retriever':13} {'P@2':>6} {'allgold@2':>9} {'R@2':>6}")
    for split in SPLITS:
        for name in retrievers:
            r = results[split][name]
            print(f"{split:6} {name:13} {r['P@2']:6.3f} {r['all_gold@2']:9.3f} {r['Recall@2']:6.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
