"""Fixtures of the core tests."""
from __future__ import annotations

import pytest

from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.models import local_scorer


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    """The packaged Gemma-3-270M scoring in-process on 2 threads, with a call cache of its own per test module."""
    root = tmp_path_factory.mktemp("likelihood")
    s = local_scorer("gemma3-270m", CallCache(root / "calls.sqlite"), root / "models", n_threads=2)
    yield s
    s.close()
