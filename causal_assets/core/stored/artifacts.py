"""A corpus's materialized artifacts, each read once: the index (chunks, sparse postings, embeddings), the graph
frames and the chunk neighbourhoods built from them, and the benchmarks evaluated on that corpus.

Pools, tuning and evaluation all start from the same things; loading them through one object keeps each Parquet
file read once per step (the graph used to be read twice by tuning: once for its frames, once for neighbours) and
gives mined benchmarks the materialized `corpus_chunks` table instead of re-chunking the corpus's source.
"""
from __future__ import annotations

from functools import cached_property
from typing import Callable

import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark, BenchmarkSpec
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.graph.store import chunk_neighbors, load_graph
from causal_assets.core.index.ann import AnnConfig
from causal_assets.core.index.search import CorpusIndex

Neighbors = Callable[[str], list[tuple[str, str, float]]]


class CorpusArtifacts:
    """The materialized artifacts of corpus `corpus` under the storage base `base`, loaded on first use."""

    def __init__(self, base, corpus: str, ann_config: AnnConfig | None = None, vectors=None):
        self.base, self.corpus, self.ann_config = base, corpus, ann_config
        self.vectors = vectors   # another table of chunk vectors (a benchmark's tuned_embeddings), else the corpus's
        self._benchmarks: dict[tuple[str, str], Benchmark] = {}

    @cached_property
    def index(self) -> CorpusIndex:
        return CorpusIndex.load(self.base, self.corpus, ann_config=self.ann_config, vectors=self.vectors)

    @cached_property
    def graph(self) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """(graph_nodes, graph_edges), or None when the corpus has no graph yet; refused when built from other chunks
        than the index serves."""
        return load_graph(self.base, self.corpus, self.index.fingerprint)

    @cached_property
    def neighbors(self) -> Neighbors | None:
        """Each chunk's graph neighbours (`graph.store.chunk_neighbors`), or None without a graph."""
        return chunk_neighbors(*self.graph) if self.graph is not None else None

    def benchmark(self, spec: BenchmarkSpec, split: str) -> Benchmark:
        """`spec`'s questions of `split`; a benchmark mined from the corpus reads the materialized chunks."""
        key = (spec.name, split)
        if key not in self._benchmarks:
            self._benchmarks[key] = load_benchmark(spec, split, chunks=self.index.chunks)
        return self._benchmarks[key]
