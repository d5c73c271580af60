"""The LLM-backed entity extractor against the real local server."""
from __future__ import annotations

import pytest

from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.client import LLMClient
from causal_assets.core.llm.server import LocalLlamaServer
from causal_assets.core.retrievers.entity_first.llm_entities import LLMEntityExtractor

pytestmark = pytest.mark.llm   # a real local llama.cpp server


def test_llm_entities_are_grounded_in_the_question(tmp_path):
    question = "Which magazine was started first, Arthur's Magazine or First for Women?"
    with LocalLlamaServer(n_threads=1) as server:
        client = LLMClient(server.base_url, "smollm2-135m-instruct", cache=CallCache(tmp_path / "c.sqlite"))
        entities = LLMEntityExtractor(client)(question)
        assert all(e.lower() in question.lower() for e in entities)  # nothing invented
        assert LLMEntityExtractor(client)(question) == entities      # cached and deterministic
        assert CallCache(tmp_path / "c.sqlite").stats()["ok"] == 1
