"""Query latency of every retriever on the materialized SciFact index (5,183 chunks): p50/p95 per query, the query
embedding included (no LLM is involved in any of them).

    python benchmarks/query_latency.py [--quick] [--out DIR]

Each query is one `retrieve_many([query], 10)` call, as a service answering one request at a time would make it;
nothing is cached across queries. Retrievers: BM25, dense, z-score hybrid, the cascade (no graph: SciFact has none
materialized) and entity-first. Entity-first ranks a candidate set (it links every
candidate's title to every other, quadratic in the set), so it is timed where it is used: on HotpotQA's 10
paragraphs per question, and on SciFact over the hybrid top 20 (the shortlist's time included). The cascade is
also timed with query vectors computed beforehand, so its own cost shows without MiniLM's.
`--quick` indexes the first 300 SciFact and 400 HotpotQA chunks in a temporary directory instead (40 queries
each). Writes data/benchmarks/query_latency[_quick].json.
"""
from __future__ import annotations


from common import PARQUET, Figure, PrecomputedQueries, latency_ms, quick_base, run_script, time_queries

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

TARGET_CASCADE_P50_MS = 20.0
SHORTLIST = 20  # entity-first repairs a small retrieved set; its title linking is quadratic in it


def timed(details: dict, name: str, retrieve, queries: list[str], warmup: int) -> None:
    wall, cpu = time_queries(retrieve, queries, warmup)
    details["latency_ms"][name], details["cpu_ms"][name] = latency_ms(wall), latency_ms(cpu)


def run(quick: bool) -> tuple[list[Figure], dict]:
    registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    scifact = load_benchmark(registry["scifact"], "test")
    queries = [scifact.queries[q] for q in scifact.query_ids()][: 40 if quick else None]
    warmup = 5 if quick else 10
    base = quick_base({"scifact": 300, "hotpotqa": 400}) if quick else PARQUET
    index = CorpusIndex.load(base, "scifact")
    details: dict = {"corpus": "scifact", "chunks": len(index.ids), "queries": len(queries), "k": 10,
                     "warmup_queries": warmup, "latency_ms": {}, "cpu_ms": {}}

    for name in ("bm25", "dense", "hybrid", "cascade"):
        retriever = build_retriever(name, index, {"weight": 0.7} if name == "hybrid" else None)
        timed(details, name, lambda q: retriever.retrieve_many([q], 10), queries, warmup)

    hybrid = build_retriever("hybrid", index, {"weight": 0.7})
    entity_first = build_retriever("entity_first", index, {"k": 2})

    def shortlisted_entity_first(q: str):
        candidates = [h.chunk_id for h in hybrid.retrieve_many([q], SHORTLIST)[0]]
        return entity_first.retrieve_many([q], 10, [candidates])

    timed(details, "entity_first_over_hybrid_top20", shortlisted_entity_first, queries, warmup)

    # The cascade without query embedding: its own work only.
    real_embedder = index.embedder
    index.embedder = PrecomputedQueries(real_embedder, queries)
    cascade = build_retriever("cascade", index)
    timed(details, "cascade_without_query_embedding", lambda q: cascade.retrieve_many([q], 10), queries, warmup)
    timed(details, "query_embedding", lambda q: real_embedder.encode_queries([q]), queries, warmup)
    index.embedder = real_embedder

    hotpot = load_benchmark(registry["hotpotqa"], "dev")
    hp_index = CorpusIndex.load(base, "hotpotqa")
    hp_ids = hotpot.query_ids()[: 40 if quick else None]
    hp_entity_first = build_retriever("entity_first", hp_index, {"k": 2})
    indexed = set(hp_index.ids)   # all of them but with --quick
    within = {hotpot.queries[q]: [c for c in hotpot.within[q] if c in indexed] for q in hp_ids}
    within = {q: ids for q, ids in within.items() if len(ids) >= 2}
    timed(details, "entity_first_hotpotqa_10_paragraphs", lambda q: hp_entity_first.retrieve_many([q], 10, [within[q]]),
          list(within), warmup)
    details["hotpotqa_queries"] = len(within)

    lat, cpu = details["latency_ms"], details["cpu_ms"]
    figures = [Figure("cascade p50 latency, SciFact (query embedding included)", lat["cascade"]["p50"], "ms",
                      TARGET_CASCADE_P50_MS, "<=", f"p95 {lat['cascade']['p95']} ms; CPU p50 {cpu['cascade']['p50']} ms;"
                      f" without query embedding p50 {lat['cascade_without_query_embedding']['p50']} ms; query "
                      f"embedding alone p50 {lat['query_embedding']['p50']} ms")]
    labels = {"bm25": "BM25 p50 latency, SciFact (no embedding needed)",
              "dense": "dense p50 latency, SciFact (query embedding included)",
              "hybrid": "hybrid p50 latency, SciFact (query embedding included)",
              "entity_first_over_hybrid_top20": "entity-first p50 latency, SciFact over the hybrid top 20",
              "entity_first_hotpotqa_10_paragraphs": "entity-first p50 latency, HotpotQA 10 paragraphs"}
    for name, label in labels.items():
        figures.append(Figure(label, lat[name]["p50"], "ms",
                              note=f"p95 {lat[name]['p95']} ms; CPU p50 {cpu[name]['p50']} ms"))
    return figures, details


def main() -> None:
    run_script("query_latency", run, __doc__)


if __name__ == "__main__":
    main()
