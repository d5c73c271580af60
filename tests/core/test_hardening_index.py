"""Issue 15, finding 10: postings and vocabulary of different builds are refused on load instead of silently
returning wrong BM25 results."""
from __future__ import annotations

import json

import pytest

from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.errors import CorpusError
from causal_assets.core.index.build import build_sparse, sparse_frames
from causal_assets.core.index.search import CHUNKS, POSTINGS, VOCABULARY, CorpusIndex
from causal_assets.core.storage import asset_path, write_parquet_atomic


def _chunks(texts):
    frame = chunks_to_frame([Chunk(chunk_id=f"d{i}", corpus="c", source="test", path="p", title="", text=t,
                                   kind="document") for i, t in enumerate(texts)])
    frame.insert(0, "chunk_idx", range(len(frame)))
    frame["index_options"] = json.dumps({"split_identifiers": False})
    return frame


def test_postings_of_one_build_with_the_vocabulary_of_another_are_refused(tmp_path):
    old = _chunks(["dijkstra shortest path", "minimum spanning tree kruskal", "graph coloring greedy"])
    new = _chunks(["graph coloring greedy", "dijkstra shortest path", "minimum spanning tree kruskal"])
    old_p, old_v = sparse_frames(build_sparse(old, False)[0], "c")
    new_p, new_v = sparse_frames(build_sparse(new, False)[0], "c")
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
