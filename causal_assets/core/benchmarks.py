"""The benchmark registry and benchmark loading: queries, graded relevance judgements (qrels) and, where the
setting demands it, the candidate set each query ranks (HotpotQA distractor: its own paragraphs)."""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from causal_assets.core.corpus.beir import beir_doc_ids, load_beir_qrels, load_beir_queries
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.multihop import load_multihop
from causal_assets.core.corpus.registry import CorpusSpec, load_corpus, load_corpus_registry
from causal_assets.core.errors import CorpusError
from causal_assets.core.evaluation.metrics import Qrels
from causal_assets.core.mining import mine_examples, mine_questions
from causal_assets.core.paths import DEFAULT_SHARED_DATA, REGISTRY_DIR, expand
from causal_assets.core.tuning.spec import TuningSpec
from causal_assets.core.yaml_registry import load_entries


class PoolingSpec(BaseModel):
    """`pooling:` of a benchmark (the fields of `labeling.pools.PoolParams`); unknown keys are refused."""
    model_config = ConfigDict(extra="forbid")

    size: int = Field(default=10, ge=1)
    max_seed_neighbors: int = Field(default=2, ge=0)
    hard_negatives: int = Field(default=4, ge=0)
    max_doc_chars: int = Field(default=600, ge=1)
    seed: int = 0


class MonteCarloSpec(BaseModel):
    """`monte_carlo:` of a benchmark; unknown keys (a typo such as `budjet`) are refused instead of silently
    running the defaults. Fields the labelling code reads; types are checked where they are fixed."""
    model_config = ConfigDict(extra="forbid")

    estimator: Literal["adaptive", "regression", "naive"] | None = None
    threshold: float | None = None
    budget: int | None = Field(default=None, ge=1)
    batch: int | None = Field(default=None, ge=1)
    alpha: float | None = Field(default=None, gt=0, lt=1)
    seed: int | None = None
    max_consecutive_errors: int | None = Field(default=None, ge=1)
    split: str | None = None
    max_questions: int | None = Field(default=None, ge=1)
    outcome: Literal["qa_likelihood", "likelihood", "success", "both"] | None = None
    solver: Literal["gemma3-270m", "smollm2-135m"] | None = None   # a packaged local model (core/llm/models.py)
    threshold_nats: float | None = None
    question_weight: float | None = Field(default=None, ge=0)


def _validated_section(name: str, model: type[BaseModel], value: dict[str, Any]) -> dict[str, Any]:
    """`value` unchanged if `model` accepts it, else a one-line ValueError naming the key (and the known keys)."""
    try:
        model.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ValueError(f"{name}.{key}: unknown key; known keys: {', '.join(model.model_fields)}") from None
        raise ValueError(f"{name}.{key}: {err['msg']}") from None
    return value


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    loader: Literal["beir", "hotpotqa", "multihop", "python_package_api", "python_package_examples"]
    corpus: str
    path: str | None = None
    splits: list[str] = Field(min_length=1)
    eval_splits: list[str] = Field(min_length=1)
    tune_split: str | None = None
    validator: Literal["exact_match", "answer_f1", "answer_containment", "fqn_match", "pytest"] = "answer_containment"
    options: dict[str, Any] = Field(default_factory=dict)   # loader options, e.g. max_questions for mined benchmarks
    # Retrievers the evaluation report runs (name -> params); entity_first needs per-question candidate sets.
    retrievers: dict[str, dict[str, Any]] = Field(default_factory=lambda: {
        "bm25": {}, "tfidf": {}, "dense": {}, "hybrid": {}, "rrf": {}, "cascade": {}})
    pooling: dict[str, Any] = Field(default_factory=dict)
    monte_carlo: dict[str, Any] = Field(default_factory=dict)
    # tuned_retriever_configs: which retrievers to tune, the metric, search-space overrides (core/tuning/spec.py).
    tuning: dict[str, Any] = Field(default_factory=dict)

    @field_validator("pooling")
    @classmethod
    def _pooling_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Kept a plain dict of the keys given (callers read it with .get), validated by the typed model.
        return _validated_section("pooling", PoolingSpec, v)

    @field_validator("monte_carlo")
    @classmethod
    def _monte_carlo_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _validated_section("monte_carlo", MonteCarloSpec, v)

    @property
    def label_split(self) -> str:
        """The split whose questions get Monte Carlo labels (`monte_carlo.split`, else the first split)."""
        return self.monte_carlo.get("split") or self.splits[0]

    @model_validator(mode="after")
    def _monte_carlo_split_known(self) -> "BenchmarkSpec":
        split = self.monte_carlo.get("split")
        if split is not None and split not in self.splits:
            raise ValueError(f"monte_carlo.split {split!r} is not one of splits {self.splits}")
        return self

    @model_validator(mode="after")
    def _tuning_valid(self) -> "BenchmarkSpec":
        TuningSpec.model_validate(self.tuning)
        return self

    @model_validator(mode="after")
    def _splits_known(self) -> "BenchmarkSpec":
        for s in [*self.eval_splits, *([self.tune_split] if self.tune_split else [])]:
            if s not in self.splits:
                raise ValueError(f"split {s!r} is not one of splits {self.splits}")
        if self.tune_split and self.tune_split in self.eval_splits:
            raise ValueError(f"tune_split {self.tune_split!r} must not be an eval split (no tuning on the test set)")
        return self

    # Set by load_benchmark_registry: what `${SHARED_DATA}` in `path` stands for, and the corpus registry that
    # mined benchmarks (python_package_*) read their corpus from (None: the shipped one).
    _shared_data: Path = PrivateAttr(default=DEFAULT_SHARED_DATA)
    _corpora: Path | None = PrivateAttr(default=None)

    @property
    def resolved_path(self) -> Path | None:
        return Path(expand(self.path, self._shared_data)) if self.path else None

    def available(self) -> bool:
        return self.path is None or self.resolved_path.exists()

    @model_validator(mode="after")
    def _validator_supported(self) -> "BenchmarkSpec":
        # Refused here, before any solver call: `pytest` grades code answers in the sandbox against examples,
        # which only the mined code benchmark provides.
        if self.validator == "pytest" and self.loader != "python_package_examples":
            raise ValueError(f"validator 'pytest' needs code examples to run the answer against; only loader "
                             f"'python_package_examples' provides them (this benchmark's loader is {self.loader!r})")
        if self.loader == "python_package_examples" and self.validator != "pytest":
            raise ValueError(f"loader 'python_package_examples' makes code questions: validator must be 'pytest', "
                             f"not {self.validator!r}")
        return self

    @model_validator(mode="after")
    def _path_needed(self) -> "BenchmarkSpec":
        if self.loader in ("beir", "hotpotqa", "multihop") and not self.path:
            raise ValueError(f"loader {self.loader} needs 'path'")
        return self


@dataclass
class Benchmark:
    name: str
    split: str
    queries: dict[str, str]
    qrels: Qrels
    within: dict[str, list[str]] | None = None   # query id -> the chunk ids it ranks (None: the whole corpus)
    answers: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # accepted alternative answers (FQN re-exports)

    def query_ids(self) -> list[str]:
        """Judged queries, in a stable order."""
        return [q for q in self.queries if q in self.qrels]


def restrict(bench: Benchmark, ids: list[str]) -> Benchmark:
    """`bench` with only the queries `ids`."""
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in ids}, {q: bench.qrels[q] for q in ids},
                     {q: bench.within[q] for q in ids} if bench.within else None,
                     {q: bench.answers[q] for q in ids if q in bench.answers},
                     {q: bench.aliases[q] for q in ids if q in bench.aliases})


DEFAULT_REGISTRY = REGISTRY_DIR / "benchmarks.yaml"


def load_benchmark_registry(path: str | Path | None = None, shared_data: str | Path | None = None,
                            corpora: str | Path | None = None) -> dict[str, BenchmarkSpec]:
    """The registry at `path` (default: the shipped one); `${SHARED_DATA}` in its paths stands for `shared_data`
    (default: ../shared/data beside the checkout) and mined benchmarks find their corpus in the corpus registry
    `corpora` (default: the shipped one). The configured ones come from `causal_assets.settings`."""
    specs = load_entries(Path(path) if path else DEFAULT_REGISTRY, "benchmarks", BenchmarkSpec)
    for spec in specs.values():
        spec._shared_data = Path(shared_data) if shared_data else DEFAULT_SHARED_DATA
        spec._corpora = Path(corpora) if corpora else None
    return specs


def hash_half(key: str) -> str:
    """Stable train/test assignment for benchmarks without official splits."""
    return "train" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 2 == 0 else "test"


def load_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """`spec`'s queries, judgements and candidate sets of `split`. `chunks`: the corpus's materialized chunk table
    (`corpus_chunks`), which benchmarks mined from the corpus read; without it they chunk the corpus's source."""
    if split not in spec.splits:
        raise CorpusError(f"benchmark {spec.name!r}: unknown split {split!r} (splits: {spec.splits})")
    if spec.loader == "beir":
        queries = load_beir_queries(spec.resolved_path)
        # a judgement of a document the corpus lacks can never be retrieved: it would lower recall unseen
        doc_ids = set(chunks["chunk_id"]) if chunks is not None else beir_doc_ids(spec.resolved_path)
        # `options.halves_of: dev`: a benchmark with a single judged split (CoSQA's dev) gets `train`/`test` as the
        # stable hash halves of that split's queries, so something can be tuned on one half and reported on the other.
        source = spec.options.get("halves_of")
        if source and split in ("train", "test"):
            qrels = {q: r for q, r in load_beir_qrels(spec.resolved_path, source, doc_ids, set(queries)).items()
                     if hash_half(q) == split}
        else:
            qrels = load_beir_qrels(spec.resolved_path, split, doc_ids, set(queries))
        return Benchmark(spec.name, split, {q: queries[q] for q in qrels}, qrels)
    if spec.loader == "hotpotqa":
        chunks, questions = load_hotpotqa(spec.resolved_path, spec.corpus)
        if split != "dev":
            questions = [q for q in questions if hash_half(q.question_id) == split]
        qrels, _ = _gold_by_question([q.question_id for q in questions], chunks)
        return Benchmark(spec.name, split, {q.question_id: q.question for q in questions}, qrels,
                         {q.question_id: list(q.paragraph_ids) for q in questions},
                         {q.question_id: q.answer for q in questions})
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
        questions = [q for q in questions if hash_half(q.question_id) == split]
    return Benchmark(spec.name, split, {q.question_id: q.question for q in questions},
                     {q.question_id: {q.target_chunk_id: 1.0} for q in questions},
                     answers={q.question_id: q.gold_fqn for q in questions},
                     aliases={q.question_id: list(q.aliases) for q in questions})


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
        examples = [q for q in examples if hash_half(q.question_id) == split]
    return Benchmark(spec.name, split, {q.question_id: q.question for q in examples},
                     {q.question_id: {q.target_chunk_id: 1.0} for q in examples},
                     answers={q.question_id: q.gold for q in examples})


def _gold_by_question(question_ids: list[str], chunks) -> tuple[Qrels, dict[str, list[str]]]:
    """Per question of `question_ids`, in their order: its supporting paragraphs (gold, graded 1.0) and all its
    paragraphs, from the chunks' `question_id` and `supporting` metadata (the HotpotQA and multi-hop loaders). Keyed
    in the file's question order, never a set's: the order reaches every mean the tuner takes, and a set's changes
    with each process's string hashing (it changed the tuner's choices from run to run)."""
    qrels: Qrels = {q: {} for q in question_ids}
    within: dict[str, list[str]] = {q: [] for q in question_ids}
    for c in chunks:
        qid = c.metadata["question_id"]
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
    questions = data.questions if split == "dev" else [q for q in data.questions if hash_half(q.question_id) == split]
    qrels, within = _gold_by_question([q.question_id for q in questions], chunks)
    return Benchmark(spec.name, split, {q.question_id: q.question for q in questions}, qrels, within,
                     {q.question_id: q.answer for q in questions},
                     {q.question_id: list(q.aliases) for q in questions if q.aliases})
