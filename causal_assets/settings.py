"""Every setting causal_assets takes from the environment, in one place.

`Settings.from_env()` reads the `CAUSAL_ASSETS_*` variables (and `DAGSTER_HOME`, `OPENAI_API_KEY`) into one typed,
immutable object; no other module of the package reads them. The Dagster code location reads it once, when its
Definitions load (`causal_assets.resources.SETTINGS`); the CLI when it parses its arguments. `causal_assets.core`
never reads the environment: it is given paths and values as arguments.

Each field names its variable, its default and what it means (`VARIABLES` lists them; docs/configuration.md has
the same table, and a test keeps the two equal). An unset or blank variable means the default; a value that does
not parse stops with one `ConfigError` naming the variable and the value. Secrets are never read here: for an API
key the settings record only *that* it is set, and the resource reads it through Dagster's `EnvVar`.

Only the standard library is imported, so `causal-assets --help` stays instant.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import urlparse

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.foundation.urls import has_credentials, without_credentials
from causal_assets.core.foundation.paths import DEFAULT_SHARED_DATA, PROJECT_ROOT, REGISTRY_DIR

DATA_DIR = PROJECT_ROOT / "data"
# Where steps may run (causal_assets.execution builds each).
EXECUTORS = ("multiprocess", "in_process", "k8s", "docker", "celery")
# Named here rather than imported, so that reading the settings imports nothing heavy, and checked when they are
# read by every command, not only where the index or the LLM is imported (a test keeps them equal to
# causal_assets.core.index.dense.BACKENDS and causal_assets.core.llm.models.LOCAL_MODELS).
EMBEDDING_BACKENDS = ("torch", "onnx", "onnx-int8")
LOCAL_SOLVERS = ("gemma3-270m", "smollm2-135m")


@dataclass(frozen=True)
class SecretVar:
    """A secret that is set in the environment variable `name`; its value is never held here (read it with
    `dagster.EnvVar(name)`)."""

    name: str


# ------------------------------------------------------------------------------------------------------- parsers
# Each takes the variable's name and its stripped, non-blank value.

def text(name: str, raw: str) -> str:
    return raw


def path(name: str, raw: str) -> Path:
    return Path(raw).expanduser()


NO_CATALOG = "none"


def catalog_path(name: str, raw: str) -> Path | None:
    """A catalog file, or None for `none`: no catalog (runs write Parquet only)."""
    return None if raw.lower() == NO_CATALOG else path(name, raw)


def same_base(a: str, b: str) -> bool:
    """Whether two base paths name the same place: local paths once absolute, URLs without a trailing slash."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))


# Far more than a machine or cluster runs at once; a typo of 99999999999 made the code location build that many
# partition keys when it loaded, until memory ran out.
MAX_SHARDS = 1024


def _digits(raw: str) -> bool:
    """ASCII digits only: str.isdigit() also takes '²' and other digits int() refuses."""
    return raw.isascii() and raw.isdigit()


def positive_int(name: str, raw: str) -> int:
    if not _digits(raw) or int(raw) < 1:
        raise ConfigError(f"{name}={raw!r}: expected a positive integer")
    return int(raw)


def shard_count(name: str, raw: str) -> int:
    """A positive integer of at most MAX_SHARDS: the code location makes one partition key per shard when it loads."""
    value = positive_int(name, raw)
    if value > MAX_SHARDS:
        raise ConfigError(f"{name}={raw!r}: expected at most {MAX_SHARDS} shards")
    return value


def non_negative_int(name: str, raw: str) -> int:
    if not _digits(raw):
        raise ConfigError(f"{name}={raw!r}: expected a whole number (0 or more)")
    return int(raw)


def non_negative_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{name}={raw!r}: expected a number of seconds (0 or more)")
    return value


def choice(*options: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.lower()
        if value not in options:
            raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(options)}")
        return value
    return parse


def http_url(name: str, raw: str) -> str:
    shown = without_credentials(raw)   # an error message must not carry them either
    try:
        url = urlparse(raw)
    except ValueError as e:   # an unclosed IPv6 bracket ('http://[::1/v1'): "Invalid IPv6 URL"
        raise ConfigError(f"{name}={shown!r}: {e}; expected an http(s) URL such as http://127.0.0.1:8080/v1 "
                          "(an IPv6 address in brackets: http://[::1]:8080/v1)") from None
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(f"{name}={shown!r}: expected an http(s) URL such as http://127.0.0.1:8080/v1")
    if has_credentials(raw):
        raise ConfigError(f"{name}={shown!r}: credentials in the URL would be sent in place of the API key and "
                          f"logged; give the key in CAUSAL_ASSETS_LLM_API_KEY and the URL without them")
    try:
        url.port
    except ValueError as e:
        raise ConfigError(f"{name}={shown!r}: {e}") from None
    return raw


def cache_location(name: str, raw: str) -> Path | str:
    """A SQLite file, or a PostgreSQL database URL (postgresql://user@host:port/db) shared by the workers of several
    machines; its password comes from PGPASSWORD or ~/.pgpass, never from the URL (it would be logged)."""
    if not raw.startswith(("postgresql://", "postgres://")):
        return path(name, raw)
    try:
        parts = urlparse(raw)
        password, host = parts.password, parts.hostname
        parts.port
    except ValueError as e:
        raise ConfigError(f"{name}={without_credentials(raw)!r}: {e}") from None
    if password:
        raise ConfigError(f"{name}={without_credentials(raw)!r}: a password in the URL would be logged; give it in "
                          f"PGPASSWORD or ~/.pgpass (libpq reads them) and the URL without it")
    if not host:
        raise ConfigError(f"{name}={raw!r}: expected postgresql://user@host:port/database")
    return raw


def secret(name: str, raw: str) -> SecretVar:
    return SecretVar(name)


def var(env: str, default, meaning: str, parse: Callable[[str, str], object] = text, shown: str | None = None):
    """A settings field read from variable `env`; `shown` is the default as docs/configuration.md states it."""
    return field(default=default, metadata={"env": env, "meaning": meaning, "parse": parse,
                                            "shown": shown if shown is not None else str(default)})


# ------------------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Settings:
    """The project's configuration from the environment (see the module docstring); one field per variable."""

    # storage
    base_path: str = var("CAUSAL_ASSETS_BASE_PATH", str(DATA_DIR / "parquet"),
                         "Parquet base path (local path or fsspec URL)", shown="data/parquet")
    catalog: Path | None = var("CAUSAL_ASSETS_CATALOG", DATA_DIR / "causal_assets.duckdb",
                               "DuckDB catalog file of the views over the base path's Parquet (`none`: no catalog)",
                               catalog_path, shown="data/causal_assets.duckdb")
    reports: Path = var("CAUSAL_ASSETS_REPORTS", DATA_DIR / "reports", "Markdown reports and plots", path,
                        shown="data/reports")
    queries: Path = var("CAUSAL_ASSETS_QUERIES", DATA_DIR / "queries",
                        "submitted queries, and the inbox/ the queries_inbox_sensor watches", path,
                        shown="data/queries")
    llm_cache: Path | str = var("CAUSAL_ASSETS_LLM_CACHE", DATA_DIR / "llm_calls.sqlite",
                                "LLM call cache / journal: a SQLite file, or a PostgreSQL URL shared by several machines",
                                cache_location, shown="data/llm_calls.sqlite")
    models_dir: Path = var("CAUSAL_ASSETS_MODELS_DIR", DATA_DIR / "models",
                           "where local models are assembled and ONNX exports cached", path, shown="data/models")
    # registries and data
    corpora: Path = var("CAUSAL_ASSETS_CORPORA", REGISTRY_DIR / "corpora.yaml", "corpus registry (YAML)", path,
                        shown="causal_assets/registry/corpora.yaml")
    benchmarks: Path = var("CAUSAL_ASSETS_BENCHMARKS", REGISTRY_DIR / "benchmarks.yaml",
                           "benchmark registry (YAML/JSON)", path, shown="causal_assets/registry/benchmarks.yaml")
    shared_data: Path = var("CAUSAL_ASSETS_SHARED_DATA", DEFAULT_SHARED_DATA,
                            "shared benchmark data (`${SHARED_DATA}` in the registries)", path,
                            shown="../shared/data beside the checkout")
    # embeddings and the index
    embedding_backend: str | None = var("CAUSAL_ASSETS_EMBEDDING_BACKEND", None,
                                        "embedding backend: torch, onnx or onnx-int8", choice(*EMBEDDING_BACKENDS),
                                        shown="onnx-int8")
    embedding_device: str = var("CAUSAL_ASSETS_EMBEDDING_DEVICE", "cpu",
                                "device of the torch embedding backend (cuda on a GPU worker)")
    embedding_shards: int = var("CAUSAL_ASSETS_EMBEDDING_SHARDS", 4, "hash buckets of embedding_shards",
                                shard_count)
    ann_min_chunks: int = var("CAUSAL_ASSETS_ANN_MIN_CHUNKS", 200_000,
                              "corpora with at least this many chunks use the ANN index for dense search "
                              "(smaller ones are searched exactly)", non_negative_int, shown="200000")
    # LLM
    llm_base_url: str | None = var("CAUSAL_ASSETS_LLM_BASE_URL", None, "OpenAI-compatible endpoint", http_url,
                                   shown="none: a local llama.cpp server")
    llm_model: str | None = var("CAUSAL_ASSETS_LLM_MODEL", None, "model name at the endpoint",
                                shown="smollm2-135m-instruct")
    llm_api_key: SecretVar | None = var("CAUSAL_ASSETS_LLM_API_KEY", None,
                                        "API key of the endpoint (read through EnvVar, never logged)", secret,
                                        shown="none")
    openai_api_key: SecretVar | None = var("OPENAI_API_KEY", None,
                                           "API key used when CAUSAL_ASSETS_LLM_API_KEY is unset", secret,
                                           shown="none")
    solver: str | None = var("CAUSAL_ASSETS_SOLVER", None, "local Monte Carlo solver model", choice(*LOCAL_SOLVERS),
                             shown="gemma3-270m")
    llm_give_up_s: float = var("CAUSAL_ASSETS_LLM_GIVE_UP_S", 60.0,
                               "seconds of LLM endpoint attempts failing in a row (errors, refused connections, "
                               "timeouts) after which a step stops retrying and fails", non_negative_float,
                               shown="60")
    label_shards: int = var("CAUSAL_ASSETS_LABEL_SHARDS", 4, "question ranges of mc_trial_shards", shard_count)
    label_max_calls: int = var("CAUSAL_ASSETS_LABEL_MAX_CALLS", 10_000,
                               "ceiling of a labelling run's planned solver calls (questions x budget); a run planned "
                               "above it stops before its first call (0: no ceiling)", non_negative_int,
                               shown="10000")
    pool_wait_s: float = var("CAUSAL_ASSETS_POOL_WAIT_S", 300.0,
                             "`causal-assets ask`: longest wait for an `llm` pool slot (seconds)",
                             non_negative_float, shown="300")
    # execution
    executor: str = var("CAUSAL_ASSETS_EXECUTOR", "multiprocess", "executor of every job", choice(*EXECUTORS))
    max_concurrent: int | None = var("CAUSAL_ASSETS_MAX_CONCURRENT", None,
                                     "multiprocess executor: steps running at once", positive_int,
                                     shown="the machine's core count")
    executor_config: Path | None = var("CAUSAL_ASSETS_EXECUTOR_CONFIG", None,
                                       "YAML config of the k8s/docker/celery executor, checked when the Definitions load",
                                       path, shown="none")
    dagster_home: Path = var("DAGSTER_HOME", DATA_DIR / "dagster_home",
                             "Dagster instance of the runs `causal-assets ask` / `search` / `build` start", path,
                             shown="data/dagster_home")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """The settings of `environ` (default: this process's environment), every variable parsed now."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = (environ.get(f.metadata["env"]) or "").strip()
            if raw:
                values[f.name] = f.metadata["parse"](f.metadata["env"], raw)
        return cls(**values)

    @staticmethod
    def dagster_home_given(environ: Mapping[str, str] | None = None) -> bool:
        """Whether DAGSTER_HOME is set at all: Dagster opens no instance of its own without it (the `dagster_home`
        field is the CLI's default, data/dagster_home, when it is not)."""
        return bool((os.environ if environ is None else environ).get("DAGSTER_HOME"))

    def concurrency(self) -> int:
        """Steps the multiprocess executor runs at once: the setting, or the machine's core count."""
        return self.max_concurrent or os.cpu_count() or 1

    def catalog_for(self, base_path: str) -> Path | None:
        """The configured catalog if `base_path` is the configured base path, else None: the catalog's views are
        over the configured base path, and a command given another `--base-path` must not re-point them."""
        return self.catalog if same_base(str(base_path), self.base_path) else None

    @staticmethod
    def pass_to_code_location(attribute: str, value) -> None:
        """Set the variable of `attribute` in this process's environment, for the code location imported after it
        (its resources read their settings when first imported): how a command's option reaches its runs."""
        [f] = [f for f in fields(Settings) if f.name == attribute]
        os.environ[f.metadata["env"]] = str(value)


@dataclass(frozen=True)
class Variable:
    """One row of docs/configuration.md's table: the variable, the `Settings` attribute, its default, its meaning."""

    env: str
    attribute: str
    default: str
    meaning: str


VARIABLES: tuple[Variable, ...] = tuple(Variable(f.metadata["env"], f.name, f.metadata["shown"], f.metadata["meaning"])
                                        for f in fields(Settings))
