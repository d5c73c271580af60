"""The query-likelihood reranker (`query_likelihood`): a base retriever's top reranked by the real local model's
log-probability of the query after the document (Gemma-3-270M, in-process, through the call cache), and its tuning
on the tune split like every other combination."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.folder import load_folder
from causal_assets.core.index.build import build_index
from causal_assets.core.llm.errors import LLMInfrastructureError
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.retrievers.query_likelihood import QueryLikelihoodReranker
from causal_assets.core.tuning.search import tune
from causal_assets.core.registry.tuning import TuningSpec

pytestmark = pytest.mark.llm

# Functions a web query is asked against (CoSQA's kind): `walk_sizes` does what the query asks, the others share some
# of its words and do something else.
CODE = {
    "walk.py": "def walk_sizes(root):\n    \"\"\"Sum of the sizes of every file under root, recursively.\"\"\"\n"
               "    total = 0\n    for base, _, names in os.walk(root):\n        for n in names:\n"
               "            total += os.path.getsize(os.path.join(base, n))\n    return total\n",
    "listing.py": "def files_list(directory):\n    \"\"\"Print the list of files of a directory, one a line.\"\"\"\n"
                  "    for name in sorted(os.listdir(directory)):\n        print(name)\n",
    "remove.py": "def files_remove(directory, names):\n    \"\"\"Remove the listed files from a directory.\"\"\"\n"
                 "    for n in names:\n        os.remove(os.path.join(directory, n))\n",
    "json_io.py": "def load_json(path):\n    \"\"\"Read a JSON document from a file.\"\"\"\n"
                  "    with open(path) as f:\n        return json.load(f)\n",
}
QUERY = "python total size of all files in a directory recursively"
PROMPT = "{document}\n\n# A web search query for the code above:"
WALK = {"walk", "walk.walk_sizes"}   # the module's chunk and its function's (the folder loader keeps both)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    for rel, text in CODE.items():
        (root / rel).write_text(text, encoding="utf-8")
    chunks, _ = load_folder(Path(root), "code")
    return build_index(chunks_to_frame(chunks), "code", split_identifiers=True, dense=True)


def _ids(hits):
    return [h.chunk_id for h in hits]


def test_the_model_finds_the_query_likelier_after_the_code_that_answers_it(index, scorer):
    ql = QueryLikelihoodReranker(index, build_retriever("bm25", index), scorer, depth=4, weight=1.0, prompt=PROMPT)
    logp = {c: scorer.score_many([ql.request(QUERY, c)])[0].best for c in index.ids}
    assert max(logp, key=logp.get) in WALK, logp


def test_reranking_follows_the_likelihood_and_keeps_the_rest_of_the_base_ranking(index, scorer):
    base = build_retriever("bm25", index)
    before = base.retrieve_many([QUERY], 8)[0]
    unchanged = QueryLikelihoodReranker(index, base, scorer, depth=4, weight=0.0, prompt=PROMPT)
    assert _ids(unchanged.retrieve_many([QUERY], 8)[0]) == _ids(before)
    ql = QueryLikelihoodReranker(index, base, scorer, depth=4, weight=100.0, prompt=PROMPT)
    logp = {h.chunk_id: r.best for h, r in zip(before[:4], scorer.score_many([ql.request(QUERY, h.chunk_id)
                                                                              for h in before[:4]]))}
    by_likelihood = sorted(logp, key=logp.get, reverse=True)
    assert by_likelihood != _ids(before)[:4]   # else this test would not see the reranking
    after = ql.retrieve_many([QUERY], 8)[0]
    # the head in the model's order (the weight drowns the base's), the rest in the base's, after it
    assert _ids(after)[:4] == by_likelihood and _ids(after)[4:] == _ids(before)[4:]
    assert [h.rank for h in after] == list(range(1, 9))
    assert all(a.score > b.score for a, b in zip(after, after[1:]))
    assert [len(hits) for hits in ql.retrieve_many([QUERY, QUERY], 3)] == [3, 3]


class _Failing:
    """The real scorer with an infrastructure failure on one document."""

    def __init__(self, scorer):
        self.scorer, self.model_id = scorer, scorer.model_id

    def score_many(self, requests):
        out = self.scorer.score_many(requests)
        return [LLMInfrastructureError("server gone", kind="connection") if "def load_json" in r.prompt else o
                for r, o in zip(requests, out)]


def test_a_scoring_failure_fails_the_run_instead_of_ranking_the_document_last(index, scorer):
    base = build_retriever("bm25", index)
    ql = QueryLikelihoodReranker(index, base, _Failing(scorer), depth=8, weight=1.0, prompt=PROMPT)
    with pytest.raises(Exception, match="query_likelihood: scoring chunk 'json_io.*server gone"):
        ql.retrieve_many([QUERY], 8)


def test_the_factory_needs_a_base_and_a_scorer(index, scorer):
    with pytest.raises(ValueError, match="needs a log-probability scorer"):
        build_retriever("query_likelihood", index, {"base": {"bm25": {}}})
    with pytest.raises(ValueError, match="needs base"):
        build_retriever("query_likelihood", index, {}, scorer=scorer)
    with pytest.raises(ValueError, match="placeholder"):
        build_retriever("query_likelihood", index, {"base": {"bm25": {}}, "prompt": "no slot"}, scorer=scorer)
    built = build_retriever("query_likelihood", index, {"base": {"hybrid": {"weight": 0.5}}, "depth": 3},
                            scorer=scorer)
    assert isinstance(built, QueryLikelihoodReranker) and built.depth == 3 and built.base.name == "hybrid"


def test_tuning_searches_the_weight_over_the_tuned_base_and_skips_without_a_scorer(index, scorer):
    bench = Benchmark("code", "train", {"q1": QUERY}, {"q1": {c: 1.0 for c in WALK}})
    spec = TuningSpec(retrievers=["hybrid", "query_likelihood"], metric="mrr@10", cv_folds=2,
                      spaces={"query_likelihood": {"weight": [0.0, 2.0], "depth": [4], "prompt": [PROMPT]}})
    measured = tune(index, bench, spec, {}, scorer=lambda: scorer)
    best = measured.best["query_likelihood"]
    assert best["params"]["base"] == {"hybrid": measured.best["hybrid"]["params"]}
    trials = measured.trials[measured.trials.retriever == "query_likelihood"].reset_index(drop=True)
    points = [json.loads(p) for p in trials["params"]]
    # the start is the base itself (weight 0, default depth), scored as the tuned base scores
    assert (points[0]["weight"], points[0]["depth"]) == (0.0, 20)
    assert trials["value"][0] == measured.best["hybrid"]["value"]
    assert {(p["weight"], p["depth"]) for p in points} == {(0.0, 20), (2.0, 20), (0.0, 4)}
    assert all(p["prompt"] == PROMPT for p in points) and trials["best"].sum() == 1
    assert "selection_value" in best and best["value"] == trials["value"].max()
    assert "query_likelihood" not in tune(index, bench, spec, {}).best
