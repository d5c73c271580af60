"""Step retries: only a failure that can go away is retried.

Dagster's RetryPolicy retries every exception: a corrupt Parquet input or a bug failed the same way three times,
after ~45 s of backoff. Under `only_infrastructure_retried`, an `LLMInfrastructureError` that can go away
(endpoint down, connection refused, timeout, 5xx, a dead local server; not a bad key or URL: `transient`) still
meets the step's policy (`LLM_RETRY`), unless the client already gave up on the endpoint after it failed for the
client's whole `give_up_after_s` (`gave_up`: a retried step would only fail that long again); any other exception
becomes a `Failure(allow_retries=False)`, which Dagster fails at once. The LLM assets' compute functions run under
it (`infrastructure_retries`), and so does the Parquet IO manager's loading of their inputs, which happens before
the compute function.
"""
from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

from dagster import Backoff, DagsterError, Failure, RetryPolicy, RetryRequested

from causal_assets.core.foundation.errors import CausalAssetsError
from causal_assets.core.llm.errors import LLMInfrastructureError

# The LLM client already retries single calls; the step retry covers an endpoint down for longer than that.
LLM_RETRY = RetryPolicy(max_retries=2, delay=10, backoff=Backoff.EXPONENTIAL)


@contextmanager
def only_infrastructure_retried(what: str | None = None):
    """Exceptions of the block other than transient infrastructure failures are not retried; `what` (e.g. the
    file being read) opens the failure's message."""
    try:
        yield
    except (Failure, RetryRequested, DagsterError):
        raise  # the policy (or Dagster itself) decides
    except Exception as exc:
        if isinstance(exc, LLMInfrastructureError) and exc.transient and not exc.gave_up:
            raise
        if isinstance(exc, (CausalAssetsError, LLMInfrastructureError)):
            text = str(exc)   # ours: its message already names the file, field or value, or the endpoint and failure
        else:
            cls = type(exc).__qualname__ if type(exc).__module__ == "builtins" else \
                f"{type(exc).__module__}.{type(exc).__qualname__}"
            text = f"{cls}: {exc}"
        if what and not text.startswith(what):
            text = f"{what}: {text}"
        raise Failure(text, allow_retries=False) from exc


def infrastructure_retries(fn):
    """Decorate the compute function of an asset with `retry_policy=LLM_RETRY` (below `@asset`): only
    infrastructure errors are retried. For functions that return and for those that yield their outputs."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def yielding(*args, **kwargs):
            with only_infrastructure_retried():
                yield from fn(*args, **kwargs)
        return yielding

    @functools.wraps(fn)
    def returning(*args, **kwargs):
        with only_infrastructure_retried():
            return fn(*args, **kwargs)
    return returning
