"""Seed 000's gate: MAP@10 of causal retrieval vs the best similarity retriever, on labelled questions.

    python benchmarks/causal_gate.py --base data/issue5/hotpot/parquet
    python benchmarks/causal_gate.py --base data/issue5/hotpot/parquet --llm-questions 12

HotpotQA distractor: each question ranks its own 10 paragraphs; relevance = its two supporting paragraphs.
Scored on the held-out `test` half (stable hash of the question id); everything tuned or learned comes from the
configuration `benchmarks/tuned_retrievers.py --benchmark hotpotqa` stored in data/benchmarks/tuned/hotpotqa
(tuned on the `train` half only); the similarity baselines' hybrid weight is the one chosen there on train.

Rows: the similarity baselines (BM25, TF-IDF, dense, z-hybrid, RRF) -> the best one is the reference; the
causal retriever with its defaults (offline lexical answer model, hybrid shortlist); the tuned causal
retriever; the learned model alone. `--llm-questions N` adds the causal retriever with the LLM answer model
(local SmolLM2 server, sampled answers) on the first N test questions only (each costs tens of calls), compared
with the best similarity retriever on the same N questions.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT_DIR, PARQUET, Figure, machine, write_result  # noqa: E402

from causal_assets.core.benchmarks import Benchmark, load_benchmark, load_benchmark_registry  # noqa: E402
from causal_assets.core.evaluation.metrics import evaluate, warm_up  # noqa: E402
from causal_assets.core.evaluation.runner import run_benchmark  # noqa: E402
from causal_assets.core.graph.store import load_chunk_neighbors, load_graph  # noqa: E402
from causal_assets.core.index.search import CorpusIndex  # noqa: E402
from causal_assets.core.retrievers.factory import build_retriever  # noqa: E402
from causal_assets.core.tuning.store import index_fingerprint, load_tuned  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

SIMILARITY = ("bm25", "tfidf", "dense", "hybrid", "rrf")


def subset(bench: Benchmark, ids: list[str]) -> Benchmark:
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in ids}, {q: bench.qrels[q] for q in ids},
                     {q: bench.within[q] for q in ids}, {q: bench.answers[q] for q in ids if q in bench.answers})


def measure(index, bench, kind, params, neighbors, graph, llm_client=None) -> dict:
    t0 = time.perf_counter()
    rr = run_benchmark(build_retriever(kind, index, params, neighbors, llm_client, graph), bench, 10, kind)
    m = evaluate(bench.qrels, rr.run, ks=(2, 10), map_k=10)
    out = {f"{r.metric}@{r.k}": round(float(r.value), 5) for r in m.itertuples()}
    return {**out, "seconds": round(time.perf_counter() - t0, 1), "queries": len(bench.query_ids())}


def relative(a: float, b: float) -> float:
    return round((a / b - 1) * 100, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=PARQUET, help="Parquet base with the hotpotqa index and graph")
    ap.add_argument("--tuned", type=Path, default=OUT_DIR / "tuned", help="store of tuned_retrievers.py")
    ap.add_argument("--version", help="tuned configuration version (default: the one tuned_retrievers.py recorded "
                                      "in tuned_retrievers_hotpotqa.json)")
    ap.add_argument("--llm-questions", type=int, default=0, help="also run the LLM answer model on N questions")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()

    started = machine()
    spec = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)["hotpotqa"]
    index = CorpusIndex.load(args.base, spec.corpus)
    graph, neighbors = load_graph(args.base, spec.corpus), load_chunk_neighbors(args.base, spec.corpus)
    recorded = args.out / "tuned_retrievers_hotpotqa.json"
    version = args.version or (json.loads(recorded.read_text())["details"]["config_version"]
                               if recorded.exists() else None)
    tuned = load_tuned(args.tuned, "hotpotqa", version) if version else None
    if tuned is None or tuned.content["index"] != index_fingerprint(index):
        raise SystemExit("run benchmarks/tuned_retrievers.py --benchmark hotpotqa on this index first")
    test = load_benchmark(spec, "test")
    assert not set(test.queries) & set(load_benchmark(spec, tuned.content["tune_split"]).queries)
    warm_up()

    weight = tuned.params("hybrid")["weight"]
    rows = {n: measure(index, test, n, {"weight": weight} if n == "hybrid" else {}, neighbors, graph)
            for n in SIMILARITY}
    rows["causal"] = measure(index, test, "causal", {}, neighbors, graph)
    rows["causal_tuned"] = measure(index, test, "causal", tuned.params("causal"), neighbors, graph)
    rows["learned_tuned"] = measure(index, test, "learned", tuned.params("learned"), neighbors, graph)
    rows["entity_first"] = measure(index, test, "entity_first", spec.retrievers.get("entity_first", {}), neighbors,
                                   graph)
    for n, r in rows.items():
        print(f"test/{n}: MAP@10 {r['map@10']:.4f}  P@2 {r['precision@2']:.4f}  ({r['seconds']}s)", flush=True)
    best = max(SIMILARITY, key=lambda n: rows[n]["map@10"])
    ref = rows[best]["map@10"]
    figures = [
        Figure(f"HotpotQA test MAP@10, best similarity retriever ({best})", ref, "MAP@10"),
        Figure("HotpotQA test MAP@10, causal retriever defaults (lexical answer model)", rows["causal"]["map@10"],
               "MAP@10", note=f"{relative(rows['causal']['map@10'], ref):+.1f}% vs {best}"),
        Figure("HotpotQA test MAP@10 change, causal retriever tuned on train vs best similarity",
               relative(rows["causal_tuned"]["map@10"], ref), "%", 15.0, ">=",
               note=f"causal_tuned {rows['causal_tuned']['map@10']:.4f} vs {best} {ref:.4f}"),
        Figure("HotpotQA test MAP@10 change, learned model vs best similarity",
               relative(rows["learned_tuned"]["map@10"], ref), "%",
               note=f"learned {rows['learned_tuned']['map@10']:.4f} vs {best} {ref:.4f}"),
    ]
    details = {"split": "test", "questions": len(test.query_ids()), "config_version": tuned.version,
               "tuned_causal_params": tuned.retrievers["causal"]["params"], "rows": rows, "best_similarity": best}
    if args.llm_questions:
        from causal_assets.core.llm.cache import CallCache
        from causal_assets.core.llm.client import LLMClient
        from causal_assets.core.llm.server import LocalLlamaServer

        sub = subset(test, test.query_ids()[:args.llm_questions])
        server = LocalLlamaServer(n_ctx=4096, n_threads=2, alias="smollm2-135m-instruct",
                                  log_path=args.out / "llama_server_causal_gate.log")
        server.start()
        try:
            client = LLMClient(server.base_url, "smollm2-135m-instruct",
                               cache=CallCache(str(args.out / "causal_gate_llm_calls.sqlite")))
            params = {**tuned.params("causal"), "answer_model": "llm"}
            llm_row = measure(index, sub, "causal", params, neighbors, graph, client)
        finally:
            server.stop()
        sim_row = measure(index, sub, best, {"weight": weight} if best == "hybrid" else {}, neighbors, graph)
        lex_row = measure(index, sub, "causal", tuned.params("causal"), neighbors, graph)
        details["llm"] = {"questions": len(sub.query_ids()), "causal_llm": llm_row, best: sim_row,
                          "causal_lexical": lex_row}
        print(f"LLM subset ({len(sub.query_ids())} q): causal/llm MAP@10 {llm_row['map@10']:.4f} "
              f"({llm_row['seconds']}s), causal/lexical {lex_row['map@10']:.4f}, {best} {sim_row['map@10']:.4f}")
        figures.append(Figure(f"HotpotQA test MAP@10 change, causal retriever with the LLM answer model vs {best} "
                              f"(first {len(sub.query_ids())} test questions)",
                              relative(llm_row["map@10"], sim_row["map@10"]), "%", 15.0, ">=",
                              note=f"causal/llm {llm_row['map@10']:.4f} vs {best} {sim_row['map@10']:.4f}"))
    write_result("causal_gate", figures, details, started, quick=False, out_dir=args.out)


if __name__ == "__main__":
    main()
