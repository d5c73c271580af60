"""The entity-description embedding is resumable and reports progress (HotpotQA's graph has 14,596 descriptions to
embed on the first question: progress lines while it runs, nothing lost when it is stopped)."""
from __future__ import annotations

import pandas as pd
import pytest

from causal_assets.core.index.dense import EmbeddingCache
from causal_assets.core.local_search.entity_vectors import embed_entities, entity_nodes
from causal_assets.core.foundation.progress import Progress, duration
from tests.core.test_causal_search import hash_embed


def entity_frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"corpus": "c", "node_id": [f"entity:e{i}" for i in range(n)], "node_type": "entity",
                         "name": [f"E{i}" for i in range(n)], "chunk_id": "", "description": [f"thing {i}" for i in range(n)],
                         "rank": 1, "community": -1, "attributes": "{}"})


def test_a_stopped_build_keeps_its_blocks_and_the_next_embeds_only_the_rest(tmp_path):
    nodes = entity_frame(50)
    cache = EmbeddingCache(tmp_path / "cache", "m")
    seen = []

    def dies_after_two_blocks(texts):
        seen.append(len(texts))
        if len(seen) > 2:
            raise KeyboardInterrupt
        return hash_embed(texts)

    with pytest.raises(KeyboardInterrupt):
        embed_entities(nodes, dies_after_two_blocks, cache, "c_entities", block=10)
    assert len(cache.load()) == 20 and cache.hashes() == set(cache.load())   # the parts count, vectors unread
    lines = []
    frame, stats = embed_entities(nodes, hash_embed, cache, "c_entities", emit=lines.append, block=10)
    assert stats["embedded"] == 30 and stats["cache_hits"] == 20 and len(frame) == 50
    assert lines[-1].startswith("embedding entity descriptions: 30/30 (100%)") and "/s" in lines[-1]
    assert any("left" in ln for ln in lines[:-1])
    _, again = embed_entities(nodes, hash_embed, cache, "c_entities", block=10)
    assert again["embedded"] == 0


def test_code_symbols_are_the_entities_of_a_code_graph():
    nodes = pd.DataFrame({"node_id": ["m", "m.f", "ext"], "node_type": ["module", "function", "external"],
                          "name": ["m", "f", "ext"], "description": ["", "Do it.", ""], "chunk_id": ["m", "m.f", ""]})
    assert list(entity_nodes(nodes)["node_id"]) == ["m", "m.f"]


def test_progress_line():
    p = Progress(200, "embedding", every_s=0)
    p.t0 -= 10
    assert p.line(100) == "embedding: 100/200 (50%), 10/s, about 10 s left"
    slow = Progress(60, "causal on train: queries", every_s=0)   # an LLM-measured retriever: seconds per query
    slow.t0 -= 100
    assert slow.line(31) == "causal on train: queries: 31/60 (52%), 0.31/s, about 1 min 34 s left"
    assert duration(3725) == "1 h 02 min" and duration(185) == "3 min 05 s"
