"""LLM calls for causal_assets: a local llama.cpp server, an OpenAI-compatible client with retries,
budget and redaction, and a SQLite cache/journal of every call. Pure logic: never imports dagster."""
from .cache import CachedCall, CallCache, canonical_json, make_key
from .client import CallBudget, LLMClient, LLMResult
from .errors import BudgetExceeded, LLMError, LLMInfrastructureError, LLMRequestError, LocalServerError
from .server import LocalLlamaServer, default_model_path, free_port

__all__ = ["BudgetExceeded", "CachedCall", "CallBudget", "CallCache", "LLMClient", "LLMError",
           "LLMInfrastructureError", "LLMRequestError", "LLMResult", "LocalLlamaServer", "LocalServerError",
           "canonical_json", "default_model_path", "free_port", "make_key"]
