"""Steps on Celery workers (`CAUSAL_ASSETS_EXECUTOR=celery`): Dagster's `dagster_celery` executor, watched.

The run's orchestrator submits each step as a Celery task to the broker; long-lived workers
(`dagster-celery worker start -A causal_assets.celery_app -y FILE`, on any machine that shares the instance database,
the storage and the call cache) run it and write its events to the instance. Dagster's own loop gives up on the whole
run when a task fails outside the step (its worker process killed: `WorkerLostError`, no retry), and waits for ever
on a task whose worker machine is gone. Here each submitted step is watched instead:

- a task whose worker process died (`WorkerLostError`), or whose worker stopped answering pings for `LOST_AFTER_S`
  while the task was started on it, is revoked (killed, should the worker come back) and submitted again, at most
  `RESUBMITS` times, so another worker runs the step; what the lost attempt paid is in the caches, nothing is paid twice;
- a broker or result backend that cannot be reached fails the run with one error naming its address, never its
  password.

The step's own `RetryPolicy` (an exception inside the step) works as under every executor: the worker reports the
retry and the orchestrator submits the step again. See docs/scale-out.md.
"""
from __future__ import annotations

import time
from urllib.parse import urlsplit

from dagster import executor, multiple_process_executor_requirements
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

from causal_assets.core.foundation.errors import CausalAssetsError
from causal_assets.core.foundation.urls import without_credentials
from causal_assets.dagster_private import celery_submit_task, retry_mode_from_config

LOST_AFTER_S = 20.0    # a worker silent this long while its task is started is taken for gone
PING_EVERY_S = 5.0
PING_TIMEOUT_S = 2.0
RESUBMITS = 2          # a step lost more often than this fails the run
# What the orchestrator's Celery app needs on top of dagster_celery's defaults (the workers get the same from
# causal_assets.celery_app): a started task names its worker, so that a lost worker can be told from a long task.
ORCHESTRATOR_CONFIG = {"task_track_started": True}


class CeleryUnreachable(CausalAssetsError):
    """The broker or the result backend cannot be reached: infrastructure, never the step's failure."""


def shown(url: str | None) -> str:
    """A broker or backend URL for messages: its scheme, host and port, no credentials."""
    if not url:
        return "(none)"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"
    except ValueError:
        return without_credentials(url)


def scrub(text: str, *urls: str | None) -> str:
    """`text` without the password of any of `urls` (a client library may quote its URL whole)."""
    text = without_credentials(text)
    for url in urls:
        try:
            password = urlsplit(url or "").password
        except ValueError:
            password = None
        if password:
            text = text.replace(password, "***")
    return text


class WatchedResult:
    """What Dagster's Celery loop polls for one step (`ready`, `get`, `revoke`), resubmitting a lost task."""

    def __init__(self, submit, app, step_key: str, log, where: str, urls: tuple):
        self._submit, self._app, self._step_key, self._log = submit, app, step_key, log
        self._where, self._urls = where, urls
        self.resubmits = 0
        self._last_ping = 0.0
        self._silent_since: float | None = None
        self.result = self._guarded(submit)

    def _guarded(self, fn):
        try:
            return fn()
        except CausalAssetsError:
            raise
        except Exception as exc:   # kombu, redis-py, amqp and celery each have their own connection errors
            if _is_connection_error(exc):
                raise CeleryUnreachable(
                    f"Celery broker / result backend {self._where} unreachable while running step {self._step_key}: "
                    f"{type(exc).__name__}: {scrub(str(exc), *self._urls)}") from None
            raise

    def _resubmit(self, why: str) -> None:
        if self.resubmits >= RESUBMITS:
            raise CeleryUnreachable(f"step {self._step_key}: {why}; lost {self.resubmits + 1} times, not resubmitted")
        self.resubmits += 1
        self._log.warning(f"step {self._step_key}: {why}; submitting it again "
                          f"(resubmission {self.resubmits} of {RESUBMITS})")
        try:   # should the worker still be there after all, it must not go on with the step
            self.result.revoke(terminate=True, signal="SIGKILL")
        except Exception:
            pass
        self.result = self._guarded(self._submit)
        self._silent_since = None

    def _worker_answers(self, worker: str) -> bool:
        replies = self._app.control.ping(destination=[worker], timeout=PING_TIMEOUT_S)
        return any(worker in reply for reply in replies)

    def _check(self) -> bool:
        result = self.result
        if result.ready():
            if result.failed() and type(result.result).__name__ == "WorkerLostError":
                self._resubmit(f"the worker process running it died ({scrub(str(result.result), *self._urls)})")
                return False
            return True
        now = time.monotonic()
        if result.state == "STARTED" and now - self._last_ping >= PING_EVERY_S:
            self._last_ping = now
            worker = (result.info or {}).get("hostname") if isinstance(result.info, dict) else None
            if worker and not self._worker_answers(worker):
                self._silent_since = self._silent_since or now
                if now - self._silent_since >= LOST_AFTER_S:
                    self._resubmit(f"its worker {worker} has not answered for {now - self._silent_since:.0f} s")
            else:
                self._silent_since = None
        return False

    def ready(self) -> bool:
        return self._guarded(self._check)

    def get(self):
        if self._guarded(self.result.failed):   # the task itself raised: Dagster's loop reports it as the step's
            return self.result.get()
        return self._guarded(self.result.get)

    def revoke(self, *args, **kwargs):
        return self._guarded(lambda: self.result.revoke(*args, **kwargs))


def _is_connection_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"ConnectionError", "OperationalError", "BackendError", "BackendGetMetaError",
                         "TimeoutError", "OSError", "RedisError"}) or "reconnect" in str(exc)


class WatchedCeleryExecutor(CeleryExecutor):
    def execute(self, plan_context, execution_plan):
        from dagster_celery.core_execution_loop import core_celery_execution_loop

        urls = (self.broker, self.backend)
        where = shown(self.broker) + ("" if shown(self.backend) == shown(self.broker) else
                                      f" (results: {shown(self.backend)})")

        def submit(app, context, step, queue, priority, known_state):
            return WatchedResult(lambda: celery_submit_task(app, context, step, queue, priority, known_state),
                                 app, step.key, context.log, where, urls)

        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)


@executor(name="celery", config_schema=CELERY_CONFIG, requirements=multiple_process_executor_requirements())
def watched_celery_executor(init_context):
    """`dagster_celery.celery_executor` (same config: broker, backend, include, config_source, retries) whose lost
    steps are submitted again and whose broker failures name the broker."""
    config = init_context.executor_config
    return WatchedCeleryExecutor(broker=config.get("broker"), backend=config.get("backend"),
                                 include=config.get("include"),
                                 config_source={**ORCHESTRATOR_CONFIG, **(config.get("config_source") or {})},
                                 retries=retry_mode_from_config(config["retries"]))
