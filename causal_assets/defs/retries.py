"""Step retries of the LLM steps: only a failure that can go away is retried.

Dagster's RetryPolicy retries every exception: a corrupt Parquet input or a bug failed the same way three times,
after ~45 s of backoff. Under `infrastructure_retries`, an `LLMInfrastructureError` that can go away (endpoint
down, connection refused, timeout, 5xx, a dead local server; not a bad key or URL: `transient`) still meets
`LLM_RETRY`; any other exception becomes a `Failure(allow_retries=False)`, which Dagster fails at once.
"""
from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

from dagster import Backoff, DagsterError, Failure, RetryPolicy, RetryRequested

from causal_assets.core.llm.errors import LLMInfrastructureError

# The LLM client already retries single calls; the step retry covers an endpoint down for longer than that.
LLM_RETRY = RetryPolicy(max_retries=2, delay=10, backoff=Backoff.EXPONENTIAL)


@contextmanager
def _only_infrastructure_retried():
    try:
        yield
    except (Failure, RetryRequested, DagsterError):
        raise  # the policy (or Dagster itself) decides
    except Exception as exc:
        if isinstance(exc, LLMInfrastructureError) and exc.transient:
            raise
        raise Failure(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}", allow_retries=False) from exc


def infrastructure_retries(fn):
    """Decorate the compute function of an asset with `retry_policy=LLM_RETRY` (below `@asset`): only
    infrastructure errors are retried. For functions that return and for those that yield their outputs."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def yielding(*args, **kwargs):
            with _only_infrastructure_retried():
                yield from fn(*args, **kwargs)
        return yielding

    @functools.wraps(fn)
    def returning(*args, **kwargs):
        with _only_infrastructure_retried():
            return fn(*args, **kwargs)
    return returning
