"""What a one-query process (`causal-assets search`) loads: a one-shot BM25 search over a built index needs neither
numba nor bm25s (together ~0.9 s of a ~2 s command), and the analyzer's own stopword list is the one bm25s ships."""
from __future__ import annotations

import subprocess
import sys

from bm25s.stopwords import STOPWORDS_EN

from causal_assets.core.text.analyzer import STOPWORDS

ONE_QUERY = """
import sys
import pandas as pd
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.index.sparse import SparseIndex
from causal_assets.core.text.analyzer import analyze
import scipy.sparse as sp

chunks = pd.DataFrame({"chunk_id": ["a", "b", "c"], "title": "", "kind": "x", "text": ["x"] * 3})
# an index as `CorpusIndex.load` rebuilds it from Parquet: no bm25s involved
matrix = sp.csc_matrix(([1.0, 2.0, 0.5], ([0, 1, 2], [0, 0, 1])), shape=(3, 2), dtype="float32")
index = CorpusIndex("t", chunks, {"bm25": SparseIndex("bm25", {analyze("path")[0]: 0, analyze("node")[0]: 1}, matrix)})
print([h.chunk_id for h in index.search("shortest path between nodes", k=2, method="bm25", one_shot=True)])
print(sorted(m for m in ("numba", "bm25s") if m in sys.modules))
"""


def test_one_bm25_query_loads_neither_numba_nor_bm25s():
    out = subprocess.run([sys.executable, "-c", ONE_QUERY], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['b', 'a']", "[]"]


def test_stopwords_are_the_ones_bm25s_ships():
    assert STOPWORDS == frozenset(STOPWORDS_EN)
