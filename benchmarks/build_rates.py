"""A corpus build's time against the estimate `build` and the lineage print before they start.

    python benchmarks/build_rates.py [--quick] [--corpora hotpotqa,default,scifact]

Each registered corpus is chunked, then its four timed steps run in this process as the corpus and graph assets
run them: the chunks' embeddings (the default backend, an empty embedding cache), the BM25/TF-IDF postings, the
graph with its statistics, and the entities' embeddings. Each step's seconds are set beside
`core/stored/build_time.build_parts` for the same chunks (and, for the entities, the graph's own entity texts and, as
before a graph exists, the typical count per chunk). Also the embedding rate in tokens a second for each kind of
text, the figure the estimate rests on.
Figures: the estimate over the measured seconds of each corpus's whole build, target within 0.75-1.33.
`--quick`: the first 100 chunks of the packaged `default` corpus (no shared data).
Writes data/benchmarks/build_rates[_quick].json.
"""
from __future__ import annotations

import json
import tempfile
import time

from common import Figure, run_script

from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.graph.build import build_graph
from causal_assets.core.graph.store import graph_stats, mostly_code, to_networkx
from causal_assets.core.index.build import build_sparse, chunk_texts
from causal_assets.core.index.dense import Embedder
from causal_assets.core.local_search.entity_vectors import (embed_entities, entity_nodes, entity_texts,
                                                            entity_vector_cache)
from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry
from causal_assets.core.stored.build_time import EMBED_MAX_TOKENS, build_parts
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

STEPS = ["corpus_embeddings", "sparse_postings", "graph_nodes", "graph_entity_embeddings"]
TARGET_LOW, TARGET_HIGH = 0.75, 1.33


def tokens(embedder: Embedder, texts: list[str]) -> int:
    """The tokens the encoder runs over: each text's, up to the model's maximum."""
    return sum(min(len(e.ids), EMBED_MAX_TOKENS) for e in embedder.model.tokenizer.encode_batch(texts))


def measure(corpus: str, limit: int | None, embedder: Embedder) -> dict:
    spec = load_corpus_registry(SETTINGS.corpora, SETTINGS.shared_data)[corpus]
    chunks = chunks_to_frame(load_corpus(spec)[0])
    if limit:
        chunks = chunks.head(limit)
    chunks = chunks.reset_index(drop=True).assign(chunk_idx=range(len(chunks)))
    texts = chunk_texts(chunks)
    code = mostly_code(chunks["kind"])
    seconds = {}
    t0 = time.perf_counter()
    embedder.encode(texts)
    seconds["corpus_embeddings"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_sparse(chunks, spec.split_identifiers)
    seconds["sparse_postings"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    nodes, edges = build_graph(chunks)
    graph_stats(nodes, edges, to_networkx(nodes, edges))   # the step's metadata, as the graph asset computes it
    seconds["graph_nodes"] = time.perf_counter() - t0
    entity_text = entity_texts(entity_nodes(nodes))
    entity_chars = [len(t) for t in entity_text]
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        embed_entities(nodes, embedder.encode, entity_vector_cache(cache), corpus)
        seconds["graph_entity_embeddings"] = time.perf_counter() - t0
    chars = [len(t) for t in texts]
    with_graph = build_parts(chars, code, STEPS, entity_chars)
    before_graph = build_parts(chars, code, STEPS)
    entity_tokens = tokens(embedder, entity_text)
    chunk_tokens = tokens(embedder, texts)
    return {
        "chunks": len(chunks), "code": code, "entities": len(entity_chars),
        "measured_s": {k: round(v, 2) for k, v in seconds.items()},
        "estimated_s": {k: round(v, 2) for k, v in with_graph.items()},
        "estimated_before_graph_s": {k: round(v, 2) for k, v in before_graph.items()},
        "tokens_per_s": {"chunks": round(chunk_tokens / seconds["corpus_embeddings"]),
                         "entities": round(entity_tokens / max(seconds["graph_entity_embeddings"], 1e-9))},
        "tokens": {"chunks": chunk_tokens, "entities": entity_tokens},
    }


def run(quick: bool, args) -> tuple[list[Figure], dict]:
    corpora = {"default": 100} if quick else {name: None for name in args.corpora.split(",")}
    embedder = Embedder()
    embedder.encode(["warm-up"])   # loading the model is not building
    results, figures = {}, []
    for corpus, limit in corpora.items():
        r = results[corpus] = measure(corpus, limit, embedder)
        measured = sum(r["measured_s"].values())
        for key, label in (("estimated_s", "with its graph"), ("estimated_before_graph_s", "before its graph")):
            ratio = sum(r[key].values()) / measured
            figures.append(Figure(f"{corpus}: estimated / measured build, {label}", round(ratio, 3), "ratio",
                                  TARGET_HIGH, "<=", f"{sum(r[key].values()):.0f} s estimated, {measured:.0f} s "
                                  f"measured; {r['chunks']:,} chunks, {r['entities']:,} entities"))
            figures.append(Figure(f"{corpus}: estimated / measured build, {label} (lower bound)", round(ratio, 3),
                                  "ratio", TARGET_LOW, ">="))
        print(json.dumps({corpus: r}), flush=True)
    return figures, {"corpora": results}


if __name__ == "__main__":
    run_script("build_rates", run, __doc__, options=lambda ap: ap.add_argument(
        "--corpora", default="hotpotqa,default,scifact", help="registered corpora to build (comma-separated)"))
