"""Fixtures of the core tests."""
from __future__ import annotations

import copy

import pytest

from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.models import local_scorer
from causal_assets.core.llm.scoring import LlamaCppScorer


@pytest.fixture(scope="module")
def scorer(tmp_path_factory, models_dir):
    """The packaged Gemma-3-270M scoring in-process, with a call cache of its own per test module, on the shipped
    default threads: the cores other processes leave free, re-measured before each batch. On this shared 2-core
    machine a fixed 2 spin-wait on each other whenever other work holds a core (a 128-token batch: 1.6 s on 2
    threads, 0.46 s on 1, at load 2.5); the log-probabilities are the same bits on 1 or 2 threads."""
    root = tmp_path_factory.mktemp("likelihood")
    s = local_scorer("gemma3-270m", CallCache(root / "calls.sqlite"), models_dir)
    yield s
    s.close()


def with_cache(scorer: LlamaCppScorer, cache: CallCache | None) -> LlamaCppScorer:
    """The same loaded model (weights, llama.cpp context and its lock) behind another call cache (None: none, every
    request evaluated): what a scorer made on that cache computes, without loading the model again (~1-2 s)."""
    twin = copy.copy(scorer)
    twin.cache = cache
    return twin
