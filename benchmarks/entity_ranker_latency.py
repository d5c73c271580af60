"""Entity-first's latency test as a benchmark: rank 100 chunks x 3 entities, averaged over repeats; writes JSON.

    python benchmarks/entity_ranker_latency.py
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from causal_assets.core.retrievers.entity_first.ranker import EntityFirstRanker  # noqa: E402

REPEATS, ROUNDS = 100, 7


def main() -> None:
    ranker = EntityFirstRanker()
    chunks = [{"content": f"content {i} about SEAL-RAG and retrieval with dense passage retrieval (DPR) " * 4, "id": i}
              for i in range(100)]
    entities = ["SEAL-RAG", "CRAG", "DPR"]
    ranker.rank_by_entity_coverage(chunks, entities, top_k=10)  # warm the pattern cache, as a server would be
    per_call_ms = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(REPEATS):
            ranker.rank_by_entity_coverage(chunks, entities, top_k=10)
        per_call_ms.append((time.perf_counter() - t0) / REPEATS * 1000)
    result = {"chunks": 100, "entities": 3, "repeats": REPEATS, "rounds": ROUNDS,
              "median_ms_per_ranking": round(statistics.median(per_call_ms), 4),
              "all_rounds_ms": [round(x, 4) for x in per_call_ms], "target_ms": 50}
    out = ROOT / "data" / "benchmarks" / "entity_ranker_latency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"rank 100 chunks x 3 entities: median {result['median_ms_per_ranking']} ms (target < 50 ms) -> {out}")


if __name__ == "__main__":
    main()
