"""A tiny real corpus (titled encyclopedia-style paragraphs) and judged questions about it, for unit tests of the
retrieval core: indexed by the real BM25/TF-IDF builders and the real embedding model (a few seconds, once per
test session)."""
from __future__ import annotations

from functools import lru_cache

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.corpus.chunk import Chunk, chunks_to_frame
from causal_assets.core.index.build import build_index
from causal_assets.core.index.search import CorpusIndex

PARAGRAPHS = {
    "seine": ("Seine", "The Seine is a river that flows through Paris before reaching the English Channel."),
    "thames": ("Thames", "The Thames is the river of London, crossed by Tower Bridge."),
    "danube": ("Danube", "The Danube flows through Vienna and Budapest into the Black Sea."),
    "eiffel_tower": ("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, built by the "
                     "company of Gustave Eiffel for the 1889 World's Fair."),
    "gustave_eiffel": ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer whose company designed the "
                       "Eiffel Tower and the iron frame of the Statue of Liberty."),
    "liberty": ("Statue of Liberty", "The Statue of Liberty stands on Liberty Island in New York Harbor; it was a "
                "gift from France."),
    "big_ben": ("Big Ben", "Big Ben is the nickname of the great bell of the clock at the Palace of Westminster "
                "in London."),
    "photosynthesis": ("Photosynthesis", "Photosynthesis converts light energy into chemical energy stored in "
                       "glucose, in the chloroplasts of plants."),
    "mitochondria": ("Mitochondria", "Mitochondria produce ATP through cellular respiration: the powerhouse of "
                     "the cell."),
    "python": ("Python", "Python is a programming language created by Guido van Rossum, known for its readable "
               "syntax."),
    "dijkstra": ("Dijkstra's algorithm", "Dijkstra's algorithm finds the shortest path between nodes in a graph "
                 "with non-negative edge weights."),
    "bfs": ("Breadth-first search", "Breadth-first search explores a graph level by level and finds shortest "
            "paths in unweighted graphs."),
}
# question id -> (question, its one relevant paragraph)
QUESTIONS = {
    "q1": ("Which river flows through Paris?", "seine"),
    "q2": ("Who was the engineer whose company built the Eiffel Tower?", "gustave_eiffel"),
    "q3": ("How do plants turn light into chemical energy?", "photosynthesis"),
    "q4": ("Which algorithm finds shortest paths with non-negative edge weights?", "dijkstra"),
    "q5": ("What is the great bell at Westminster called?", "big_ben"),
    "q6": ("Which river runs through Vienna?", "danube"),
    "q7": ("Who created the Python programming language?", "python"),
    "q8": ("What produces ATP in a cell?", "mitochondria"),
}


@lru_cache(maxsize=1)
def tiny_index() -> CorpusIndex:
    """The corpus indexed once per session (treat it as read-only)."""
    chunks = [Chunk(chunk_id=cid, corpus="tiny", source="test", path="", title=title, text=text, kind="paragraph")
              for cid, (title, text) in PARAGRAPHS.items()]
    return build_index(chunks_to_frame(chunks), "tiny")


def tiny_benchmark(query_ids=None, within: dict[str, list[str]] | None = None, split: str = "train") -> Benchmark:
    """The judged questions (each with one relevant paragraph, grade 1; the answer is its title) as a Benchmark."""
    ids = list(query_ids or QUESTIONS)
    return Benchmark("tiny", split, {q: QUESTIONS[q][0] for q in ids}, {q: {QUESTIONS[q][1]: 1.0} for q in ids},
                     within, answers={q: PARAGRAPHS[QUESTIONS[q][1]][0] for q in ids})
