"""Index parts that do not belong together are refused on load instead of silently returning wrong results:
postings and vocabulary of different builds, and parts built from other chunks than corpus_chunks holds."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.index.build import build_sparse, sparse_frames
from causal_assets.core.index.provenance import chunks_fingerprint
from causal_assets.core.index.search import CHUNKS, EMBEDDINGS, POSTINGS, VOCABULARY, CorpusIndex
from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic


def _chunks(texts):
    frame = chunks_to_frame([Chunk(chunk_id=f"d{i}", corpus="c", source="test", path="p", title="", text=t,
                                   kind="document") for i, t in enumerate(texts)])
    frame.insert(0, "chunk_idx", range(len(frame)))
    frame["index_options"] = json.dumps({"split_identifiers": False})
    return frame


def test_postings_of_one_build_with_the_vocabulary_of_another_are_refused(tmp_path):
    old = _chunks(["dijkstra shortest path", "minimum spanning tree kruskal", "graph coloring greedy"])
    new = _chunks(["graph coloring greedy", "dijkstra shortest path", "minimum spanning tree kruskal"])
    # both recording the chunks now stored, so that only the build ids tell the two builds apart
    old_p, old_v = sparse_frames(build_sparse(old, False)[0], "c", chunks_fingerprint(new))
    new_p, new_v = sparse_frames(build_sparse(new, False)[0], "c", chunks_fingerprint(new))
    assert old_p["build_id"].nunique() == 1 and (old_p["build_id"].iloc[0] == old_v["build_id"].iloc[0])
    write_parquet_atomic(new, asset_path(tmp_path, CHUNKS, "c"))
    write_parquet_atomic(new_p, asset_path(tmp_path, POSTINGS, "c"))
    write_parquet_atomic(new_v, asset_path(tmp_path, VOCABULARY, "c"))
    hits = CorpusIndex.load(tmp_path, "c", dense=False).search("kruskal spanning", k=1, method="bm25")
    assert hits[0].chunk_id == "d2"
    if set(old_v["term_id"].astype(str) + old_v["term"]) == set(new_v["term_id"].astype(str) + new_v["term"]):
        # The ids happened to agree: make the mix a real one (same shape, shuffled ids), as a run-to-run change does.
        old_v = old_v.assign(term=old_v["term"].iloc[::-1].to_numpy(), build_id="0" * 16)
    write_parquet_atomic(old_v, asset_path(tmp_path, VOCABULARY, "c"))  # a new postings file beside an old vocab
    with pytest.raises(CorpusError, match=r"sparse_postings .* and sparse_vocabulary .* are not from one build"):
        CorpusIndex.load(tmp_path, "c", dense=False)
    # Tables from before build ids (no column in either) still load.
    write_parquet_atomic(new_p.drop(columns="build_id"), asset_path(tmp_path, POSTINGS, "c"))
    write_parquet_atomic(new_v.drop(columns="build_id"), asset_path(tmp_path, VOCABULARY, "c"))
    assert CorpusIndex.load(tmp_path, "c", dense=False).search("kruskal", k=1, method="bm25")[0].chunk_id == "d2"


def _write_index(base, chunks, vectors=True):
    """The corpus index parts of `chunks` as the assets write them: sparse postings and vocabulary, unit vectors
    and a graph, each recording the chunks it was built from."""
    from causal_assets.core.graph.build import build_graph
    from causal_assets.core.index.provenance import FINGERPRINT

    built_from = chunks_fingerprint(chunks)
    postings, vocab = sparse_frames(build_sparse(chunks, False)[0], "c", built_from)
    write_parquet_atomic(postings, asset_path(base, POSTINGS, "c"))
    write_parquet_atomic(vocab, asset_path(base, VOCABULARY, "c"))
    if vectors:
        rng = np.random.default_rng(0)
        v = rng.standard_normal((len(chunks), 8)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        write_parquet_atomic(pd.DataFrame({"corpus": "c", "chunk_id": chunks["chunk_id"], "chunk_idx": chunks["chunk_idx"],
                                           "content_hash": chunks["content_hash"], "model": "m", "backend": "torch",
                                           "embedding": list(v), FINGERPRINT: built_from}),
                             asset_path(base, EMBEDDINGS, "c"))
    nodes, edges = build_graph(chunks)
    write_parquet_atomic(nodes.assign(corpus="c", **{FINGERPRINT: built_from}), asset_path(base, "graph_nodes", "c"))
    write_parquet_atomic(edges.assign(corpus="c", **{FINGERPRINT: built_from}), asset_path(base, "graph_edges", "c"))


def _stored_chunks(texts):
    from causal_assets.core.index.provenance import FINGERPRINT, compute_fingerprint

    frame = _chunks(texts)
    return frame.assign(**{FINGERPRINT: compute_fingerprint(frame)})   # as the corpus_chunks asset writes it


def test_an_index_built_from_older_chunks_is_refused_and_counted_as_missing(tmp_path):
    """corpus_chunks re-materialized alone (a file added to a folder corpus): postings of the older chunks would
    score the new ids with the old texts' statistics, and 2 older vectors would break dense search over 3 chunks;
    loading refuses them, naming what to rebuild, and `needs.missing` (what build, search and ask rebuild) lists
    them."""
    from causal_assets.core.stored import needs
    from causal_assets.core.graph.store import load_chunk_neighbors, load_graph
    from causal_assets.core.index.provenance import StaleIndexError

    old = _stored_chunks(["dijkstra shortest path", "minimum spanning tree kruskal"])
    write_parquet_atomic(old, asset_path(tmp_path, CHUNKS, "c"))
    _write_index(tmp_path, old)
    wanted = needs.required(dense=True, graph=True)
    assert needs.missing(tmp_path, "c", wanted) == []
    query = np.full((1, 8), 8 ** -0.5, np.float32)
    assert CorpusIndex.load(tmp_path, "c").dense_top_k(query, 2)[0].shape == (1, 2)   # current: served

    new = _stored_chunks(["graph coloring greedy", "dijkstra shortest path", "minimum spanning tree kruskal"])
    write_parquet_atomic(new, asset_path(tmp_path, CHUNKS, "c"))
    for dense in (False, True):
        with pytest.raises(StaleIndexError, match=r"sparse_postings, sparse_vocabulary"
                                                  + (", corpus_embeddings" if dense else "")
                                                  + r" were built from another version of corpus_chunks.*"
                                                    r"`causal-assets build c`"):
            CorpusIndex.load(tmp_path, "c", dense=dense)
    fingerprint = chunks_fingerprint(new)
    for load in (load_graph, load_chunk_neighbors):
        with pytest.raises(StaleIndexError, match="graph_nodes"):   # (its edges: none, so nothing to claim)
            load(tmp_path, "c", fingerprint)
    parts = [a for a in wanted if a != CHUNKS]
    assert pd.read_parquet(asset_path(tmp_path, "graph_edges", "c")).empty   # no edge claims any chunks...
    old_parts = [a for a in parts if a != "graph_edges"]
    assert needs.outdated(tmp_path, "c", wanted) == old_parts
    assert set(needs.missing(tmp_path, "c", wanted)) == set(parts)   # ...but it is rebuilt with its nodes
    assert needs.describe(tmp_path, "c", old_parts) == f"built from older chunks: {', '.join(old_parts)}"

    _write_index(tmp_path, new)   # rebuilt from the current chunks: served again, the new chunk found
    assert needs.missing(tmp_path, "c", wanted) == []
    index = CorpusIndex.load(tmp_path, "c")
    assert index.search("coloring", k=1)[0].chunk_id == "d0" and index.dense_top_k(query, 3)[0].shape == (1, 3)
    assert load_graph(tmp_path, "c", fingerprint) is not None


def test_index_parts_that_record_no_chunks_are_rebuilt_not_trusted(tmp_path):
    """Parts written before the index recorded its chunks could be of any chunks: rebuilt, never served."""
    from causal_assets.core.stored import needs
    from causal_assets.core.index.provenance import FINGERPRINT, StaleIndexError

    chunks = _stored_chunks(["dijkstra shortest path", "minimum spanning tree kruskal"])
    write_parquet_atomic(chunks, asset_path(tmp_path, CHUNKS, "c"))
    _write_index(tmp_path, chunks, vectors=False)
    path = asset_path(tmp_path, POSTINGS, "c")
    write_parquet_atomic(pd.read_parquet(path).drop(columns=FINGERPRINT), path)
    with pytest.raises(StaleIndexError, match=r"sparse_postings was built .*recorded: no chunk fingerprint"):
        CorpusIndex.load(tmp_path, "c", dense=False)
    assert needs.missing(tmp_path, "c", needs.required()) == ["sparse_postings", "sparse_vocabulary"]


def test_a_chunk_table_that_records_no_fingerprint_is_made_again_with_its_parts(tmp_path):
    """corpus_chunks written before it recorded its fingerprint: every load would compute it from the whole table;
    `build` chunks the source again (parts that record the same chunks stay)."""
    from causal_assets.core.stored import needs

    chunks = _chunks(["dijkstra shortest path", "minimum spanning tree kruskal"])   # no fingerprint column
    write_parquet_atomic(chunks, asset_path(tmp_path, CHUNKS, "c"))
    _write_index(tmp_path, chunks, vectors=False)   # parts recording the fingerprint computed from the content
    wanted = needs.required()
    assert needs.outdated(tmp_path, "c", wanted) == [CHUNKS]
    assert needs.missing(tmp_path, "c", wanted) == [CHUNKS]
    assert needs.describe(tmp_path, "c", [CHUNKS]) == "corpus_chunks written before it recorded its fingerprint"
    assert CorpusIndex.load(tmp_path, "c", dense=False).search("kruskal", k=1)[0].chunk_id == "d1"   # still served
