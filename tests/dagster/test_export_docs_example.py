"""The ranx example of docs/labels-export.md, run as written against a real (small) HotpotQA index and an export of
labels on its real paragraph ids."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from dagster import materialize

from causal_assets.core.outputs.export import DatasetCard, export_labels
from causal_assets.defs.corpus import corpus_chunks, sparse_postings_and_vocabulary
from tests.dagster.procs import ROOT


def docs_example() -> str:
    text = (ROOT / "docs" / "labels-export.md").read_text()
    m = re.search(r"<!-- ranx-example -->\n```python\n(.*?)```", text, flags=re.S)
    assert m, "docs/labels-export.md lost its ranx example"
    return m.group(1)


def test_the_docs_ranx_example_runs(resources, tmp_path, capsys):
    assert materialize([corpus_chunks, sparse_postings_and_vocabulary], resources=resources, partition_key="hotpotqa").success
    base = resources["storage"].base_path
    chunks = pd.read_parquet(f"{base}/corpus_chunks/hotpotqa.parquet")
    chunks["query_id"] = chunks["chunk_id"].str.split("/").str[0]
    pools = chunks.assign(
        question=lambda f: f["query_id"].map(lambda q: f"question {q}"), answer="")
    supporting = chunks["supporting"].astype(bool) if "supporting" in chunks else chunks.index % 5 == 0
    labels = pd.DataFrame({"query_id": chunks["query_id"], "chunk_id": chunks["chunk_id"],
                           "label": ["YES" if s else "NO" for s in supporting],
                           "delta_p": [0.4 if s else -0.1 for s in supporting], "estimator": "adaptive"})
    # The example's questions are real: use the benchmark's question texts so BM25 has something to match.
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.registry.benchmark_loading import load_benchmark
    spec = load_benchmark_registry(Path(resources["benchmark_registry"].path))["hotpotqa"]
    bench = load_benchmark(spec, "dev")
    pools["question"] = pools["query_id"].map(bench.queries)
    out = tmp_path / "datasets" / "hotpotqa"
    export_labels(labels, pools, out, DatasetCard(benchmark="hotpotqa", split="dev"), hf=False)

    code = docs_example().replace('"data/datasets/hotpotqa"', repr(str(out))).replace('"data/parquet"', repr(base))
    exec(compile(code, "docs/labels-export.md:ranx-example", "exec"), {})
    printed = capsys.readouterr().out
    scores = eval(printed.strip().splitlines()[-1], {"np": np})  # the dict ranx.evaluate printed
    assert set(scores) == {"ndcg@10", "map@10", "recall@5"} and all(0 <= v <= 1 for v in scores.values())
    assert scores["ndcg@10"] > 0
    print(f"\nThe docs' ranx example on the small export: {scores}")
