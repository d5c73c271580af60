"""The code location's resources and executor, from the environment's settings (`causal_assets/settings.py`):
every asset of defs/ and of a benchmark component asks for them by name."""
from dagster import Definitions, definitions

from causal_assets.execution import executor_from_env
from causal_assets.resources import (SETTINGS, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage,
                                     llm_from_settings)

storage = Storage()
# Local llama.cpp server by default; CAUSAL_ASSETS_LLM_BASE_URL (+ _MODEL, + the key in CAUSAL_ASSETS_LLM_API_KEY,
# read through EnvVar so it never enters config or logs) points every LLM call elsewhere.
llm = llm_from_settings(SETTINGS)


@definitions
def resources() -> Definitions:
    # Where steps run is configuration: CAUSAL_ASSETS_EXECUTOR=multiprocess (default) | in_process | k8s | docker.
    return Definitions(executor=executor_from_env(settings=SETTINGS),
                       resources={"storage": storage, "corpus_registry": CorpusRegistry(),
                                  "benchmark_registry": BenchmarkRegistry(), "llm": llm,
                                  "io_manager": ParquetIOManagerFactory(storage=storage)})
