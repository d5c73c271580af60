"""`BenchmarkComponent`: a benchmark declared in a user's own `dg` project as a `defs.yaml` (a folder of documents,
a questions file, the solver endpoint, the Monte Carlo budget), built with this package's assets: the corpus
index and graph, candidate pools, Monte Carlo labels, tuning and evaluation, as one partition named after the
benchmark. The declaration is written as a corpus and a benchmark registry (docs/loaders.md) under the data
directory and validated there when the definitions load, before any LLM call."""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from dagster import (AssetDep, AssetSelection, Component, ComponentLoadContext, Definitions, EnvVar, Model,
                     Resolvable, Scaffolder, ScaffoldRequest, StaticPartitionsDefinition, define_asset_job,
                     load_assets_from_modules, scaffold_component, scaffold_with, with_resources)
from pydantic import Field

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.corpora import load_corpus_registry
from causal_assets.core.foundation.errors import ConfigError
from causal_assets.defs import corpus, evaluation, export, graph, labels, tuning
from causal_assets.resources import (LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage)

# The stage modules a benchmark runs, one partition each; the scale-out shards and the query search stay with the
# causal_assets code location.
STAGES = (corpus, graph, labels, tuning, evaluation, export)
# A corpus registry needs its `default` entry (core/registry/corpora.py); this one is never a partition here.
PLACEHOLDER_DEFAULT = {"name": "default", "loader": "python_package", "package": "networkx"}


class Solver(Model):
    """The OpenAI-compatible endpoint of the Monte Carlo solver; none: the packaged local model."""

    base_url: str | None = Field(None, description="e.g. http://127.0.0.1:8000/v1 (vLLM) or https://api.openai.com/v1")
    model: str | None = Field(None, description="The model name the endpoint serves.")
    api_key_env: str | None = Field(None, description="The environment variable holding its API key (read through "
                                                      "EnvVar: never in config, logs or metadata).")


class BenchmarkScaffolder(Scaffolder):
    """`dg scaffold defs causal_assets.BenchmarkComponent NAME`: a defs.yaml naming the benchmark after its folder,
    with the documents in `docs/` and the questions in `questions.jsonl` beside it (put them there)."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        name = re.sub(r"[^a-z0-9_]", "_", request.target_path.name.lower()) or "my_benchmark"
        scaffold_component(request, {"name": name, "corpus": "docs", "questions": "questions.jsonl", "budget": 16})


@scaffold_with(BenchmarkScaffolder)
class BenchmarkComponent(Component, Model, Resolvable):
    """A benchmark of your own documents and questions, labelled and evaluated by causal_assets: the corpus index
    and graph, candidate pools, Monte Carlo labels, tuned retrievers and the evaluation report, as one partition
    named after the benchmark (see causal_assets' docs/components.md)."""

    name: str = Field(description="The benchmark's name and partition key: lower case letters, digits and _.")
    corpus: str = Field(description="The folder of documents (text, Markdown, code), relative to this defs.yaml.")
    questions: str = Field(description="The questions file (JSONL: id, question, optional answer and gold "
                                       "documents), relative to this defs.yaml.")
    corpus_options: dict = Field(default_factory=dict,
                                 description="Options of the folder loader: chunk_chars, overlap_chars, suffixes.")
    solver: Solver = Field(default_factory=Solver)
    budget: int | None = Field(None, description="Monte Carlo solver calls per question (default 16).")
    max_questions: int | None = Field(None, description="Questions labelled (default: every answered question).")
    retrievers: dict | None = Field(None, description="The retrievers evaluated, with their params (default: the "
                                                      "benchmark registry's defaults).")
    data_dir: str = Field("data", description="Where its tables, reports, LLM call cache and generated registries "
                                              "go, relative to the project root.")

    def registries(self, context: ComponentLoadContext) -> tuple[Path, Path]:
        """The corpus and benchmark registry files this declaration makes (rewritten only when it changed)."""
        here = Path(context.path)
        folder, questions = (here / self.corpus).resolve(), (here / self.questions).resolve()
        where = f"{here / 'defs.yaml'}: benchmark {self.name!r}"
        if not folder.is_dir():
            raise ConfigError(f"{where}: corpus {self.corpus!r} is not a folder ({folder})")
        if not questions.is_file():
            raise ConfigError(f"{where}: questions {self.questions!r} is not a file ({questions})")
        monte_carlo = {k: v for k, v in {"budget": self.budget, "max_questions": self.max_questions}.items()
                       if v is not None}
        entry = {"name": self.name, "loader": "questions", "corpus": self.name, "path": str(questions),
                 **({"monte_carlo": monte_carlo} if monte_carlo else {}),
                 **({"retrievers": self.retrievers} if self.retrievers is not None else {})}
        out = self.data_path(context) / "registry" / self.name
        corpora, benchmarks = out / "corpora.yaml", out / "benchmarks.yaml"
        _write_if_changed(corpora, {"corpora": [PLACEHOLDER_DEFAULT, {
            "name": self.name, "loader": "folder", "path": str(folder),
            **({"options": self.corpus_options} if self.corpus_options else {})}]})
        _write_if_changed(benchmarks, {"benchmarks": [entry]})
        return corpora, benchmarks

    def data_path(self, context: ComponentLoadContext) -> Path:
        return (Path(context.project_root) / self.data_dir).resolve()

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        corpora, benchmarks = self.registries(context)
        # validated now: a bad option, question or path stops the load with one line naming it
        load_corpus_registry(corpora)
        load_benchmark_registry(benchmarks, corpora=corpora)
        partitions = StaticPartitionsDefinition([self.name])

        def one_partition(spec):
            # the benchmark's corpus is its own partition of the same name: every dependency is partition to
            # partition
            return spec.replace_attributes(partitions_def=partitions,
                                           deps=[AssetDep(d.asset_key) for d in spec.deps])

        assets = [a.map_asset_specs(one_partition) for a in load_assets_from_modules(list(STAGES))]
        data = self.data_path(context)
        storage = Storage(base_path=str(data / "parquet"), catalog_path=str(data / "causal_assets.duckdb"),
                          reports_dir=str(data / "reports"))
        solver = self.solver
        llm = LLM(cache_path=str(data / "llm_cache.sqlite"),
                  **({"base_url": solver.base_url} if solver.base_url else {}),
                  **({"model": solver.model} if solver.model else {}),
                  **({"api_key": EnvVar(solver.api_key_env)} if solver.api_key_env else {}))
        resources = {"storage": storage, "corpus_registry": CorpusRegistry(path=str(corpora)),
                     "benchmark_registry": BenchmarkRegistry(path=str(benchmarks), corpora=str(corpora)),
                     "llm": llm, "io_manager": ParquetIOManagerFactory(storage=storage)}
        job = define_asset_job(f"{self.name}_job", selection=AssetSelection.assets(*assets), partitions_def=partitions,
                               description=f"Index, label, tune and evaluate benchmark {self.name!r}.")
        return Definitions(assets=with_resources(assets, resources), jobs=[job])


def _write_if_changed(path: Path, content: dict) -> None:
    text = yaml.safe_dump(content, sort_keys=False)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)   # another process loading the same project sees the old file or the new one
