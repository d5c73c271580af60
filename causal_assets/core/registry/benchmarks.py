"""The benchmark registry: each entry checked when it loads (its loader, corpus, splits and sections), and the
`Benchmark` a split loads into (`benchmark_loading.load_benchmark`): queries, graded relevance judgements (qrels) and,
where the setting demands it, the candidate set each query ranks."""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator,
                      model_validator)

from causal_assets.core.corpus.beir import beir_splits, load_beir_answers
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.multihop import load_multihop
from causal_assets.core.corpus.questions import QuestionFile, load_questions
from causal_assets.core.registry.corpora import CorpusSpec, load_corpus_registry, resolve_registry_path
from causal_assets.core.llm.models import SOLVER_CONTEXT_TOKENS
from causal_assets.core.foundation.errors import ConfigError, CorpusError, RegistryWarning
from causal_assets.core.measures.metrics import Qrels
from causal_assets.core.foundation.paths import DEFAULT_SHARED_DATA, REGISTRY_DIR
from causal_assets.core.registry.gate import GateSpec
from causal_assets.core.registry.sections import (DEFAULT_BUDGET, QUESTION_MONTE_CARLO, QUESTION_POOLING, AnswersSpec,
                                                  MonteCarloSpec, PoolingSpec, budget_for, budget_problem,
                                                  document_chars, validated_section)
from causal_assets.core.registry.retriever_params import check_retrievers
from causal_assets.core.registry.tuning import TuningSpec
from causal_assets.core.foundation.yaml_registry import load_entries


HASH_SPLITS = ("dev", "train", "test")   # every loader without splits of its own: all, and the stable hash halves
QUESTION_LOADERS = ("hotpotqa", "multihop", "questions")   # files whose records may carry their own `split`


def _resolve(path: str, info: ValidationInfo | None) -> Path:
    context = (info.context if info is not None else None) or {}
    return resolve_registry_path(path, context.get("shared_data") or DEFAULT_SHARED_DATA, context.get("registry_dir"))


def split_members(records: list[tuple[str, str | None]], split: str) -> list[str]:
    """The ids of `records` ((id, own split or None), in file order) that belong to `split`: where the records carry
    splits, theirs decide (`dev` is all of them unless some record says `dev`); else `dev` is all and `train` /
    `test` are the stable hash halves (`hash_half`)."""
    own = [s for _, s in records if s is not None]
    if own:
        if split == "dev" and "dev" not in own:
            return [q for q, _ in records]
        return [q for q, s in records if s == split]
    if split == "dev":
        return [q for q, _ in records]
    return [q for q, _ in records if hash_half(q) == split]


def _file_splits(loader: str, path: Path) -> list[str] | None:
    """The splits a question file's records name themselves, or None (hash halves)."""
    if loader == "questions":
        return load_questions(path).own_splits
    if loader == "hotpotqa":
        named = [q.split for q in load_hotpotqa(path, "_")[1] if q.split]
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            named = [q.split for q in load_multihop(path, "_")[1].questions if q.split]
    return list(dict.fromkeys(named)) or None


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    loader: Literal["beir", "hotpotqa", "multihop", "python_package_api", "python_package_examples", "questions"]
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
    # tuned_retriever_configs: which retrievers to tune, the metric, search-space overrides (core/registry/tuning.py).
    tuning: dict[str, Any] = Field(default_factory=dict)
    # the evaluation's answer utility: ks, max_questions, enabled (AnswersSpec)
    answers: dict[str, Any] = Field(default_factory=dict)
    # the evaluation's regression gate against the accepted baseline (core/registry/gate.py)
    gate: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _question_file_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """A questions benchmark may leave out its splits: `dev` (every question, labelled) plus the file's own
        splits, or the stable hash halves `train` (tuned on) and `test` (evaluated on)."""
        if not isinstance(data, dict) or data.get("loader") != "questions" or not isinstance(data.get("path"), str):
            return data
        if "splits" in data and "eval_splits" in data:
            return data
        path = _resolve(data["path"], info)
        try:
            qfile = load_questions(path) if path.is_file() else None
        except CorpusError:
            qfile = None   # reported with its line by the file check below
        own = qfile.own_splits if qfile else None
        parts = [s for s in own if s != "dev"] if own else ["train", "test"]
        if qfile and not own:   # a half the hash leaves empty (a file of a few questions) is not a default split
            records = [(r.query_id, r.split) for r in qfile.records]
            parts = [s for s in parts if split_members(records, s)]
        data = dict(data)
        data.setdefault("splits", ["dev", *parts])
        if "eval_splits" not in data:
            data["eval_splits"] = ["test"] if "test" in data["splits"] else [data["splits"][-1]]
        if "tune_split" not in data and "train" in data["splits"] and "train" not in data["eval_splits"]:
            data["tune_split"] = "train"
        return data

    @field_validator("corpus")
    @classmethod
    def _corpus_registered(cls, v: str, info: ValidationInfo) -> str:
        # a benchmark on an unregistered corpus silently left the partitions before
        known = ((info.context or {}).get("corpus_names"))
        if known is not None and v not in known:
            raise ValueError(f"{v!r} is not a registered corpus (the corpus registry "
                             f"{(info.context or {}).get('corpora_path', '')} has: {', '.join(sorted(known))})")
        return v

    @field_validator("pooling")
    @classmethod
    def _pooling_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Kept a plain dict of the keys given (callers read it with .get), validated by the typed model.
        return validated_section("pooling", PoolingSpec, v)

    @field_validator("monte_carlo")
    @classmethod
    def _monte_carlo_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return validated_section("monte_carlo", MonteCarloSpec, v)

    @field_validator("answers")
    @classmethod
    def _answers_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return validated_section("answers", AnswersSpec, v)

    @field_validator("gate")
    @classmethod
    def _gate_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        validated_section("gate", GateSpec, v)
        for metric in GateSpec.model_validate(v).metrics:
            GateSpec.model_validate(v).checked(metric.partition("@")[0])
        return v

    @property
    def gate_settings(self) -> GateSpec:
        """`gate:` with its defaults."""
        return GateSpec.model_validate(self.gate)

    @property
    def answer_settings(self) -> AnswersSpec:
        """`answers:` with its defaults."""
        return AnswersSpec.model_validate(self.answers)

    @property
    def label_split(self) -> str:
        """The split whose questions get Monte Carlo labels (`monte_carlo.split`, else the first split)."""
        return self.monte_carlo.get("split") or self.splits[0]

    @property
    def label_limit(self) -> int | None:
        """How many of the label split's questions are labelled (`monte_carlo.max_questions`): by default every
        answered question of a user's questions file, and the first 20 of the other loaders."""
        return self.monte_carlo.get("max_questions") or (None if self.loader == "questions" else 20)

    @property
    def pool_settings(self) -> dict[str, Any]:
        """`pooling:` with the loader's defaults (`QUESTION_POOLING` for a questions file)."""
        return {**(QUESTION_POOLING if self.loader == "questions" else {}), **self.pooling}

    @property
    def pool_size(self) -> int:
        return int(self.pool_settings.get("size") or PoolingSpec().size)

    @property
    def monte_carlo_settings(self) -> dict[str, Any]:
        """`monte_carlo:` with the loader's defaults (`QUESTION_MONTE_CARLO` for a questions file)."""
        return {**(QUESTION_MONTE_CARLO if self.loader == "questions" else {}), **self.monte_carlo}

    @property
    def budget(self) -> int:
        """Solver calls per question for this benchmark's pools (`monte_carlo.budget`, else the loader's or the
        labelling's default; `auto` derives it from the pool size)."""
        return budget_for(self.monte_carlo_settings.get("budget") or DEFAULT_BUDGET, self.pool_size)

    @property
    def estimator(self) -> str:
        return self.monte_carlo.get("estimator") or DEFAULT_ESTIMATOR

    @model_validator(mode="after")
    def _monte_carlo_split_known(self) -> "BenchmarkSpec":
        split = self.monte_carlo.get("split")
        if split is not None and split not in self.splits:
            raise ValueError(f"monte_carlo.split {split!r} is not one of splits {self.splits}")
        return self

    @model_validator(mode="after")
    def _budget_decides(self) -> "BenchmarkSpec":
        # Refused here, before any solver call: below this budget every label is UNCERTAIN with an infinite
        # interval (core/labeling/budget.py derives it from the estimators' intervals).
        problem = budget_problem(self.budget, self.pool_size, self.estimator)
        if problem:
            default = "" if self.monte_carlo.get("budget") else f" ({self.budget} is the default: set it higher)"
            raise ValueError(f"monte_carlo.budget: {problem}{default}")
        return self

    @model_validator(mode="after")
    def _tuning_valid(self) -> "BenchmarkSpec":
        validated_section("tuning", TuningSpec, self.tuning)   # one line naming tuning.<key>
        check_retrievers(self.retrievers)   # one line naming retrievers.<name>.<param> and its value
        return self

    @model_validator(mode="after")
    def _splits_known(self) -> "BenchmarkSpec":
        for s in [*self.eval_splits, *([self.tune_split] if self.tune_split else [])]:
            if s not in self.splits:
                raise ValueError(f"split {s!r} is not one of splits {self.splits}")
        if self.tune_split and self.tune_split in self.eval_splits:
            raise ValueError(f"tune_split {self.tune_split!r} must not be an eval split (no tuning on the test set)")
        return self

    # Set by load_benchmark_registry: what `${SHARED_DATA}` in `path` stands for, the corpus registry that mined
    # benchmarks (python_package_*) and questions files read their corpus from (None: the shipped one), and the
    # directory a relative `path` is relative to (the registry file's).
    _shared_data: Path = PrivateAttr(default=DEFAULT_SHARED_DATA)
    _corpora: Path | None = PrivateAttr(default=None)
    _registry_dir: Path | None = PrivateAttr(default=None)

    @property
    def resolved_path(self) -> Path | None:
        return resolve_registry_path(self.path, self._shared_data, self._registry_dir) if self.path else None

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
        if self.loader in ("beir", "hotpotqa", "multihop", "questions") and not self.path:
            raise ValueError(f"loader {self.loader} needs 'path'")
        return self

    @model_validator(mode="after")
    def _splits_exist(self, info: ValidationInfo) -> "BenchmarkSpec":
        """Every split the registry names holds questions (`splits: [train, holdout]` gave 0 questions for
        `holdout`, silently); checked from the file where that costs little."""
        path = _resolve(self.path, info) if self.path else None
        if self.loader == "questions":
            return self   # `_question_file_valid` counts every split's questions
        if self.loader == "beir":
            if path is not None and (path / "qrels").is_dir():
                halves = ("train", "test") if self.options.get("halves_of") else ()
                files = beir_splits(path)
                for s in self.splits:
                    if s not in files and s not in halves:
                        raise ValueError(f"splits: {s!r} has no judgements: {path / 'qrels'} has "
                                         f"{', '.join(files) or 'no split'}"
                                         + (" (and options.halves_of makes train and test)" if halves else ""))
            return self
        unknown = [s for s in self.splits if s not in HASH_SPLITS]
        if not unknown:
            return self
        own = None
        if self.loader in QUESTION_LOADERS and path is not None and path.is_file():
            try:
                own = _file_splits(self.loader, path)
            except CorpusError as e:
                raise ValueError(f"path: {e}") from None
        if own is None or unknown[0] not in own:
            have = (f"its records' splits are {', '.join(own)} (and dev, all of them)" if own else
                    "its splits are dev (every question) and the stable hash halves train and test")
            raise ValueError(f"splits: {unknown[0]!r} names no question: {have}")
        return self

    @model_validator(mode="after")
    def _answers_for_monte_carlo(self, info: ValidationInfo) -> "BenchmarkSpec":
        """`monte_carlo:` on questions that carry no answers is refused: the labels score the solver's likelihood
        of the answer (a BEIR benchmark failed deep inside the labelling with "no gold answer to score")."""
        if "monte_carlo" not in self.model_fields_set or self.loader != "beir" or not self.path:
            return self
        path = _resolve(self.path, info)
        if (path / "queries.jsonl").is_file():
            try:
                answers = load_beir_answers(path)
            except CorpusError as e:
                raise ValueError(f"path: {e}") from None
            if not answers:
                raise ValueError(f"monte_carlo: the queries of {path / 'queries.jsonl'} carry no answers "
                                 "(metadata.answer), and Monte Carlo labels score the solver's likelihood of a "
                                 "question's answer: add answers, or remove monte_carlo")
        return self

    @model_validator(mode="after")
    def _question_file_valid(self, info: ValidationInfo) -> "BenchmarkSpec":
        """A questions file is read and checked when the registry loads (its size is a user's questions)."""
        if self.loader != "questions" or not self.path:
            return self
        path = _resolve(self.path, info)
        if not path.exists():
            return self   # not available: left out of the partitions, as other loaders' missing sources
        try:
            qfile = load_questions(path)
        except CorpusError as e:
            raise ValueError(f"path: {e}") from None
        check_question_splits(self, qfile, explicit_monte_carlo="monte_carlo" in self.model_fields_set)
        return self


DEFAULT_ESTIMATOR = "regression"


def check_question_splits(spec: BenchmarkSpec, qfile: QuestionFile, explicit_monte_carlo: bool = True) -> None:
    """ValueError (one line) when `spec` cannot work on `qfile`: a split without questions, Monte Carlo labels
    asked of questions without answers, or an eval split with neither gold documents nor questions to label."""
    records = [(r.query_id, r.split) for r in qfile.records]
    by_id = {r.query_id: r for r in qfile.records}
    members = {s: split_members(records, s) for s in spec.splits}
    for s, ids in members.items():
        if not ids:
            own = qfile.own_splits
            have = (f"the questions' own splits are {', '.join(own)}" if own else
                    f"the stable hash halves put {len(split_members(records, 'train'))} of the {len(records)} "
                    f"questions in train and {len(split_members(records, 'test'))} in test (give the questions a "
                    f"'split' field to choose)")
            raise ValueError(f"splits: {s!r} has no question in {qfile.path}: {have}")
    labelled = [q for q in members[spec.label_split] if by_id[q].answers]
    if explicit_monte_carlo and spec.monte_carlo and not qfile.with_answers:
        raise ValueError(f"monte_carlo: no question of {qfile.path} has an 'answer', and Monte Carlo labels score "
                         "the solver's likelihood of the answer: add answers, or remove monte_carlo")
    for s in spec.eval_splits:
        gold = [q for q in members[s] if by_id[q].gold]
        if not gold and not set(members[s]) & set(labelled):
            raise ValueError(f"eval_splits: {s!r} cannot be evaluated: none of its {len(members[s])} questions has "
                             f"'gold' documents, and none of them is labelled (labels are made on split "
                             f"{spec.label_split!r}, for questions with an 'answer')")


@dataclass
class Benchmark:
    name: str
    split: str
    queries: dict[str, str]
    qrels: Qrels
    within: dict[str, list[str]] | None = None   # query id -> the chunk ids it ranks (None: the whole corpus)
    answers: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # accepted alternative answers (FQN re-exports)
    # A questions file's gold files (`registry.gold`): per question, the files its gold names (the pools rank their
    # chunks); the questions judged at file level (their qrels are keyed by file, and a ranking is scored by each
    # file's best chunk); and each chunk's file.
    gold_files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    file_level: frozenset[str] = frozenset()
    file_of: dict[str, str] = field(default_factory=dict)

    def query_ids(self) -> list[str]:
        """Judged queries, in a stable order."""
        return [q for q in self.queries if q in self.qrels]

    def labelable_ids(self) -> list[str]:
        """The questions Monte Carlo labels can be made for: those with an answer to score, in a stable order (a
        question of a questions file without an answer is evaluated only)."""
        return [q for q in self.queries if self.answers.get(q)]


def restrict(bench: Benchmark, ids: list[str]) -> Benchmark:
    """`bench` with only the queries `ids`."""
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in ids}, {q: bench.qrels[q] for q in ids},
                     {q: bench.within[q] for q in ids} if bench.within else None,
                     {q: bench.answers[q] for q in ids if q in bench.answers},
                     {q: bench.aliases[q] for q in ids if q in bench.aliases},
                     {q: bench.gold_files[q] for q in ids if q in bench.gold_files},
                     frozenset(q for q in ids if q in bench.file_level), bench.file_of)


DEFAULT_REGISTRY = REGISTRY_DIR / "benchmarks.yaml"


def load_benchmark_registry(path: str | Path | None = None, shared_data: str | Path | None = None,
                            corpora: str | Path | None = None) -> dict[str, BenchmarkSpec]:
    """The registry at `path` (default: the shipped one); `${SHARED_DATA}` in its paths stands for `shared_data`
    (default: ../shared/data beside the checkout) and mined benchmarks find their corpus in the corpus registry
    `corpora` (default: the shipped one). The configured ones come from `causal_assets.settings`."""
    path = Path(path) if path else DEFAULT_REGISTRY
    shared = Path(shared_data) if shared_data else DEFAULT_SHARED_DATA
    corpora_path = Path(corpora) if corpora else None
    try:
        corpus_names = set(load_corpus_registry(corpora_path, shared))
    except ConfigError as e:   # the corpus registry's own error, named as such
        raise ConfigError(f"{path}: its benchmarks' corpora cannot be checked: {e}") from None
    # The shipped benchmarks are over the shipped corpora: with a corpus registry of the user's own, those whose
    # corpus it leaves out go with it. A registry of the user's own benchmarks is held to its corpora strictly.
    shipped_over_own = path.resolve() == DEFAULT_REGISTRY.resolve() and corpora_path is not None
    context = {"registry_dir": path.resolve().parent, "shared_data": shared,
               "corpus_names": None if shipped_over_own else corpus_names,
               "corpora_path": str(corpora_path or "causal_assets/registry/corpora.yaml")}
    specs = load_entries(path, "benchmarks", BenchmarkSpec, context=context)
    if shipped_over_own:
        specs = {name: spec for name, spec in specs.items() if spec.corpus in corpus_names}
    for spec in specs.values():
        spec._shared_data = shared
        spec._corpora = corpora_path
        spec._registry_dir = context["registry_dir"]
    warn_short_cuts(path, specs, load_corpus_registry(corpora_path, shared))
    return specs


def warn_short_cuts(path: Path, specs: dict[str, "BenchmarkSpec"], corpora: dict[str, CorpusSpec]) -> None:
    """A `RegistryWarning` for each benchmark whose solver reads fewer characters of a document than its corpus's
    chunks hold: every longer chunk is then shortened (to the lines that best match the question)."""
    for spec in specs.values():
        corpus = corpora.get(spec.corpus)
        chunk = corpus.chunk_chars if corpus is not None else None
        settings = spec.pool_settings
        cut = document_chars(spec.pool_size, settings.get("context_tokens") or SOLVER_CONTEXT_TOKENS,
                             settings.get("max_doc_chars"))
        if chunk and cut < chunk:
            why = ("pooling.max_doc_chars" if settings.get("max_doc_chars") else
                   f"the share of {settings.get('context_tokens') or SOLVER_CONTEXT_TOKENS} context tokens for "
                   f"{spec.pool_size} documents")
            warnings.warn(f"{path}: benchmark {spec.name!r}: the solver reads {cut} characters of each document "
                          f"({why}), fewer than corpus {spec.corpus!r}'s chunks of up to {chunk}: longer chunks are "
                          f"shortened to their lines that best match the question", RegistryWarning, stacklevel=2)


def hash_half(key: str) -> str:
    """Stable train/test assignment for benchmarks without official splits."""
    return "train" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 2 == 0 else "test"
