"""A benchmark's split as data: its queries, graded relevance judgements (qrels), answers and, where the setting
demands it, the candidate set each query ranks (HotpotQA distractor: its own paragraphs), by the entry's loader."""
from __future__ import annotations

import warnings

import pandas as pd

from causal_assets.core.corpus.beir import (beir_chunk_ids, load_beir_answers, load_beir_qrels,
                                            load_beir_queries)
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.mining import mine_examples, mine_questions
from causal_assets.core.corpus.multihop import load_multihop
from causal_assets.core.corpus.questions import load_questions
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.measures.metrics import Qrels
from causal_assets.core.registry.benchmarks import Benchmark, BenchmarkSpec, hash_half, split_members
from causal_assets.core.registry.corpora import CorpusSpec, load_corpus, load_corpus_registry
from causal_assets.core.registry.gold import GoldResolver
def load_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """`spec`'s queries, judgements and candidate sets of `split`. `chunks`: the corpus's materialized chunk table
    (`corpus_chunks`), which benchmarks mined from the corpus read; without it they chunk the corpus's source."""
    if split not in spec.splits:
        raise CorpusError(f"benchmark {spec.name!r}: unknown split {split!r} (splits: {spec.splits})")
    if spec.loader == "beir":
        queries = load_beir_queries(spec.resolved_path)
        # a judgement of a document the corpus lacks can never be retrieved: it would lower recall unseen
        chunk_ids = set(chunks["chunk_id"]) if chunks is not None else beir_chunk_ids(spec.resolved_path)
        # `options.halves_of: dev`: a benchmark with a single judged split (CoSQA's dev) gets `train`/`test` as the
        # stable hash halves of that split's queries, so something can be tuned on one half and reported on the other.
        source = spec.options.get("halves_of")
        if source and split in ("train", "test"):
            qrels = {q: r for q, r in load_beir_qrels(spec.resolved_path, source, chunk_ids, set(queries)).items()
                     if hash_half(q) == split}
        else:
            qrels = load_beir_qrels(spec.resolved_path, split, chunk_ids, set(queries))
        # accepted answers in the queries' metadata (`metadata.answer`) make the queries labellable
        answers = load_beir_answers(spec.resolved_path)
        return Benchmark(spec.name, split, {q: queries[q] for q in qrels}, qrels,
                         answers={q: a[0] for q, a in answers.items() if q in qrels},
                         aliases={q: list(a[1:]) for q, a in answers.items() if q in qrels and len(a) > 1})
    if spec.loader == "questions":
        return questions_benchmark(spec, split, chunks)
    if spec.loader == "hotpotqa":
        chunks, questions = load_hotpotqa(spec.resolved_path, spec.corpus)
        keep = set(split_members([(q.query_id, q.split) for q in questions], split))
        questions = [q for q in questions if q.query_id in keep]
        qrels, _ = _gold_by_question([q.query_id for q in questions], chunks)
        return Benchmark(spec.name, split, {q.query_id: q.question for q in questions}, qrels,
                         {q.query_id: list(q.paragraph_ids) for q in questions},
                         {q.query_id: q.answer for q in questions})
    if spec.loader == "multihop":
        return multihop_benchmark(spec, split)
    if spec.loader == "python_package_api":
        return mined_benchmark(spec, split, chunks)
    if spec.loader == "python_package_examples":
        return mined_examples_benchmark(spec, split, chunks)
    raise CorpusError(f"benchmark {spec.name!r}: unknown loader {spec.loader!r}")


def _chunk_table(corpus: CorpusSpec, chunks: pd.DataFrame | None) -> pd.DataFrame:
    """The corpus's chunk table: the materialized one when given, else its source chunked here (scripts and tests
    that have no index)."""
    return chunks if chunks is not None else chunks_to_frame(load_corpus(corpus)[0])


def mined_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """Questions mined from the corpus's package; gold = the target chunk (graded 1.0)."""
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    questions = mine_questions(_chunk_table(corpus, chunks), corpus.package, spec.options.get("max_questions"))
    if split != "dev":
        questions = [q for q in questions if hash_half(q.query_id) == split]
    return Benchmark(spec.name, split, {q.query_id: q.question for q in questions},
                     {q.query_id: {q.target_chunk_id: 1.0} for q in questions},
                     answers={q.query_id: q.gold_fqn for q in questions},
                     aliases={q.query_id: list(q.aliases) for q in questions})


def mined_examples_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """Code questions mined from the docstring examples of the corpus's package: the solver writes the call, the
    `pytest` validator runs it in the sandbox after the example's setup and compares the output with the
    example's; gold document = the function's chunk."""
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    if corpus.loader != "python_package":
        raise CorpusError(f"benchmark {spec.name!r}: loader python_package_examples needs a python_package corpus, "
                          f"corpus {spec.corpus!r} is {corpus.loader!r}")
    examples = mine_examples(_chunk_table(corpus, chunks), corpus.package, spec.options.get("max_questions"),
                             alias=spec.options.get("alias", "nx"))
    if split != "dev":
        examples = [q for q in examples if hash_half(q.query_id) == split]
    return Benchmark(spec.name, split, {q.query_id: q.question for q in examples},
                     {q.query_id: {q.target_chunk_id: 1.0} for q in examples},
                     answers={q.query_id: q.gold for q in examples})


def _gold_by_question(query_ids: list[str], chunks) -> tuple[Qrels, dict[str, list[str]]]:
    """Per question of `query_ids`, in their order: its supporting paragraphs (gold, graded 1.0) and all its
    paragraphs, from the chunks' `query_id` and `supporting` metadata (the HotpotQA and multi-hop loaders). Keyed
    in the file's question order, never a set's: the order reaches every mean the tuner takes, and a set's changes
    with each process's string hashing (it changed the tuner's choices from run to run)."""
    qrels: Qrels = {q: {} for q in query_ids}
    within: dict[str, list[str]] = {q: [] for q in query_ids}
    for c in chunks:
        qid = c.metadata["query_id"]
        if qid in qrels:
            within[qid].append(c.chunk_id)
            if c.metadata["supporting"]:
                qrels[qid][c.chunk_id] = 1.0
    return qrels, within


def multihop_benchmark(spec: BenchmarkSpec, split: str) -> Benchmark:
    """HotpotQA / 2Wiki / MuSiQue questions, each ranking its own paragraphs (`load_multihop`, the same ids as the
    corpus loader's); gold = the reader's supporting paragraphs (MuSiQue: `is_supporting`, never the title).
    `train`/`test` halve the questions by a stable hash of their id; `dev` is all of them."""
    with warnings.catch_warnings():   # the corpus asset reports skipped records; the benchmark does not repeat it
        warnings.simplefilter("ignore")
        chunks, data, _ = load_multihop(spec.resolved_path, spec.corpus, strict=bool(spec.options.get("strict", False)))
    keep = set(split_members([(q.query_id, q.split) for q in data.questions], split))
    questions = [q for q in data.questions if q.query_id in keep]
    qrels, within = _gold_by_question([q.query_id for q in questions], chunks)
    return Benchmark(spec.name, split, {q.query_id: q.question for q in questions}, qrels, within,
                     {q.query_id: q.answer for q in questions},
                     {q.query_id: list(q.aliases) for q in questions if q.aliases})


def questions_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """A user's questions file over any registered corpus (`core/corpus/questions.py`): every question of `split`
    ranks the whole corpus; its gold, where given, at the grain it can be judged (`registry.gold`: document ids,
    the chunks that hold its evidence, or its files). Questions without gold are not in `qrels`: the Monte Carlo
    labels are their only truth."""
    qfile = load_questions(spec.resolved_path)
    keep = set(split_members([(r.query_id, r.split) for r in qfile.records], split))
    records = [r for r in qfile.records if r.query_id in keep]
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    qrels: Qrels = {}
    files: dict[str, tuple[str, ...]] = {}
    file_level: set[str] = set()
    resolver = None
    if any(r.gold for r in records):
        resolver = GoldResolver(_chunk_table(corpus, chunks), corpus.name, corpus.loader)
        for r in records:
            if r.gold:
                gold = resolver.resolve(r.gold, r.where, dict(r.evidence))
                qrels[r.query_id] = gold.qrels
                if gold.files:
                    files[r.query_id] = gold.files
                if gold.file_level:
                    file_level.add(r.query_id)
    return Benchmark(spec.name, split, {r.query_id: r.question for r in records}, qrels,
                     answers={r.query_id: r.answer for r in records if r.answers},
                     aliases={r.query_id: list(r.aliases) for r in records if r.aliases},
                     gold_files=files, file_level=frozenset(file_level),
                     file_of=resolver.file_of if resolver else {})
