"""Dagster runs started by the CLI: building what `search` / `ask` need, and the supervision every such run gets.

Runs execute in this process (`execute_in_process`) on the instance of $DAGSTER_HOME, so they show up in the UI.
Their Dagster log goes to the instance only (the terminal gets it with `--verbose`); progress lines of long steps
(embedding) still reach the terminal through `core.progress`.

While a run executes, Dagster only records SIGINT/SIGTERM (it checks for them between events, and a step may run
for minutes without one). `Supervisor` is a thread that notices the recorded interrupt within a fraction of a
second and ends the process cleanly: it stops the local LLM server this process started, marks the run
CANCELED, frees its pool slots and exits 130. It also bounds the wait for an `llm` pool slot (`--wait`).
"""
from __future__ import annotations

import functools
import os
import select
import signal
import sys
import threading
import time
import uuid

import sqlalchemy.exc
from dagster import AssetKey, DagsterExecutionInterruptedError, DagsterInstance, DagsterRunStatus

from causal_assets.commands import say, source_change, stale_line
from causal_assets.core.stored import build_time, needs
from causal_assets.core.corpus.chunk import content_hash
from causal_assets.core.local_search.entity_vectors import entity_nodes, entity_texts, entity_vector_cache
from causal_assets.core.foundation import progress
from causal_assets.core.registry.corpora import require_available
from causal_assets.core.local_search import inbox
from causal_assets.core.foundation.errors import CausalAssetsError, first_line
from causal_assets.core.llm.server import stop_all
from causal_assets.core.foundation.progress import duration
from causal_assets.core.foundation.storage import asset_path, cache_path, read_parquet
from causal_assets.dagster_private import instance_without_compute_logs, interrupt_captured
from causal_assets.exit_codes import EXIT_INTERRUPTED, EXIT_POOL_BLOCKED
from causal_assets.run_health import blocked_message, pool_holders, reap_dead_runs
from causal_assets.settings import Settings

BUILD_JOB = "corpus_build_job"


class NotBuilt(CausalAssetsError):
    """What a command needs is not materialized and `--no-build` was given."""


class RunFailed(CausalAssetsError):
    """A run the CLI started failed: one line naming the step and its error, and the run id."""


@functools.lru_cache(maxsize=1)
def cli_instance() -> DagsterInstance:
    """The instance of $DAGSTER_HOME (default: the checkout's data/dagster_home, as in the README)."""
    home = str(Settings.from_env().dagster_home)
    try:
        os.makedirs(home, exist_ok=True)
        # runs the CLI executes keep their events, not a capture of the process's stdout/stderr: that capture
        # pipes them through helper processes in the terminal's process group, which Ctrl-C kills mid-write
        instance = instance_without_compute_logs(home)
        instance.get_runs_count()   # the run database opens lazily: fail here, in one line, not inside a run
    except (OSError, sqlalchemy.exc.SQLAlchemyError) as e:   # a read-only or full DAGSTER_HOME: a 70-line traceback
        raise CausalAssetsError(f"Dagster instance {home} (DAGSTER_HOME) cannot be used: {first_line(e)}; it must be "
                                "a writable directory") from None
    return instance


def quiet_run_config(verbose: bool) -> dict:
    return {} if verbose else {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def build_command(corpus: str, index_only: bool = False) -> str:
    return f"causal-assets build {corpus}" + (" --index-only" if index_only else "")


def interrupts_not_reported(default):
    """An unraisable-exception hook that drops interrupts and passes anything else to `default`. Inside a step,
    Dagster's SIGINT handler raises its interrupt into whatever Python code runs at that moment; when that is a
    finalizer or a weakref callback (SQLAlchemy's `_collection_gced`, run by the garbage collector), Python cannot
    raise it and prints "Exception ignored in ..." with a traceback, while the supervisor is already ending the run
    (exit 130, run CANCELED): the traceback tells the user nothing but that Ctrl-C arrived."""
    def hook(unraisable):
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, DagsterExecutionInterruptedError)):
            return
        default(unraisable)

    hook.interrupts_not_reported = True
    return hook


class Supervisor:
    """Ends the process cleanly on Ctrl-C / SIGTERM during a run, and bounds the wait for a pool slot."""

    def __init__(self, instance: DagsterInstance, poll_s: float = 0.2):
        if not getattr(sys.unraisablehook, "interrupts_not_reported", False):
            sys.unraisablehook = interrupts_not_reported(sys.unraisablehook)
        self.instance, self.poll_s = instance, poll_s
        self.run_id: str | None = None
        self.pool: str | None = None
        self.pool_wait_s = 0.0
        self._blocked_since: float | None = None
        self._next_pool_check = 0.0
        # Every signal that reaches a Python-level handler also writes its number to this pipe, whichever handler
        # Dagster has installed at that moment: inside a step it raises an exception into user code, which an
        # import or a library may swallow, so the flag `interrupt_captured` reads is not enough.
        self._wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
        threading.Thread(target=self._loop, name="causal-assets-supervisor", daemon=True).start()

    def watch(self, run_id: str | None, pool: str | None = None, pool_wait_s: float = 0.0) -> None:
        self.run_id, self.pool, self.pool_wait_s, self._blocked_since = run_id, pool, pool_wait_s, None

    def _signalled(self) -> bool:
        ready, _, _ = select.select([self._wakeup_r], [], [], self.poll_s)
        if not ready:
            return False
        received = os.read(self._wakeup_r, 64)
        return any(b in (signal.SIGINT, signal.SIGTERM) for b in received)

    def _loop(self) -> None:
        while True:
            try:
                signalled = self._signalled()
                run_id = self.run_id   # read once: the main thread clears it when the run ends
                if run_id and (signalled or interrupt_captured()):
                    self.cancel(run_id)
                if self.run_id and self.pool and time.monotonic() >= self._next_pool_check:
                    self._next_pool_check = time.monotonic() + 1.0
                    self._check_pool()
            except Exception as e:  # never let the supervisor kill a healthy run
                say(f"supervisor: {e}")
                return

    def cancel(self, run_id: str) -> None:
        try:
            try:
                pids = stop_all()
            except Exception as e:  # noqa: BLE001 - the run is still to be marked, and the user told
                pids = []
                say(f"could not stop the local LLM server: {e}")
            server = f"; stopped the local LLM server (pid {', '.join(map(str, pids))})" if pids else ""
            say(f"interrupted{server}; run {run_id} {self.mark_canceled(run_id)}")
        finally:
            os._exit(EXIT_INTERRUPTED)  # the main thread is inside Dagster's step execution

    def mark_canceled(self, run_id: str, within_s: float = 3.0) -> str:
        """Mark the interrupted run CANCELED and free its pool slots; says what became of it. The interrupt may have
        ended the run first (Dagster then records FAILURE, which becomes CANCELED here too). A storage error is
        tried again for `within_s` and then named: the process ends right after, so it must not pass silently."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                run = self.instance.get_run_by_id(run_id)
                if run is None:
                    return "had not started"
                if run.status == DagsterRunStatus.SUCCESS:
                    return "had already succeeded"
                if run.status != DagsterRunStatus.CANCELED:
                    self.instance.report_run_canceled(run, "Interrupted (Ctrl-C or SIGTERM) in causal-assets")
                self.instance.event_log_storage.free_concurrency_slots_for_run(run_id)
                return "marked CANCELED"
            except Exception as e:  # noqa: BLE001 - storage errors of any backend
                if time.monotonic() >= deadline:
                    return f"could not be marked CANCELED ({type(e).__name__}: {first_line(e)})"
                time.sleep(0.25)

    def _check_pool(self) -> None:
        storage = self.instance.event_log_storage
        pending = [p for p in storage.get_concurrency_info(self.pool).pending_steps
                   if p.run_id == self.run_id and p.assigned_timestamp is None]
        if not pending:
            self._blocked_since = None
            return
        if self._blocked_since is None:
            self._blocked_since = time.monotonic()
            reap_dead_runs(self.instance)   # a dead run's slot is freed at once; a live holder is named at once
            holders = [h for h in pool_holders(self.instance, self.pool) if h.run_id != self.run_id]
            if holders:
                say(waiting_message(self.pool, holders, self.pool_wait_s))
        reap_dead_runs(self.instance)
        waited = time.monotonic() - self._blocked_since
        if waited < self.pool_wait_s:
            return
        run = self.instance.get_run_by_id(self.run_id)
        message = blocked_message(self.pool, pool_holders(self.instance, self.pool), waited)
        if run is not None and not run.is_finished:
            self.instance.report_run_failed(run, f"causal-assets gave up waiting for a {self.pool!r} slot: {message}")
        storage.free_concurrency_slots_for_run(self.run_id)
        say(f"{message}\nrun {self.run_id} marked FAILURE")
        os._exit(EXIT_POOL_BLOCKED)


def waiting_message(pool: str, holders, wait_s: float) -> str:
    """What a command says the moment its run waits for a slot of `pool`: who holds it and how to free it."""
    return (f"waiting up to {duration(wait_s)} for a free {pool!r} slot, held by "
            f"{'; '.join(h.describe() for h in holders)}. To free it: wait for that run, cancel it in the UI "
            f"(Runs -> Terminate), or raise the limit (`dagster instance concurrency set {pool} N`); "
            f"`--wait SECONDS` waits longer")


_supervisor: Supervisor | None = None


def supervisor(instance: DagsterInstance) -> Supervisor:
    global _supervisor
    if _supervisor is None:
        _supervisor = Supervisor(instance)
    return _supervisor


def interrupt_on_sigterm() -> None:
    """SIGTERM behaves like Ctrl-C (KeyboardInterrupt outside a run; recorded and handled by the supervisor inside)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


# Dagster's wrappers of a step's error, which say nothing a user can act on: the message is their cause's.
DAGSTER_WRAPPERS = ("Error occurred while executing",          # the op's own code
                    "Error occurred while handling output",    # the IO manager writing it (e.g. disk full)
                    "Error occurred while loading input")      # the IO manager reading an upstream asset


def failure_line(result) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            # ... and "Exceeded max_retries of 2" for a step out of retries
            while err.cause is not None and (any(w in err.message for w in DAGSTER_WRAPPERS)
                                             or err.cls_name == "RetryRequestedFromPolicy"):
                err = err.cause
            first = (err.message or "").strip().splitlines()
            line = first[-1] if first else err.cls_name
            if err.cls_name == "Failure":  # its description is the message (retries.py's names the cause's class)
                line = line.split("Failure: ", 1)[-1]
            return f"step {event.step_key} failed: {line}"
    return "the run failed"


def execute(job_name: str, partition_key: str, base, assets: list[str] | None = None, verbose: bool = False,
            pool: str | None = None, pool_wait_s: float = 0.0, run_config: dict | None = None):
    """Execute a job of the Definitions in this process, supervised, writing under `base` (the command's
    --base-path); returns the result (never raises for a failed step)."""
    from causal_assets.definitions import defs, storage  # the whole code location; only commands that run jobs

    if storage.base_path != str(base):   # its resources were imported in this process before `run` set the path
        raise CausalAssetsError(f"this process's code location writes to {storage.base_path}, not {base}: run the "
                                f"command in a new process")

    instance = cli_instance()
    reap_dead_runs(instance)   # runs of killed commands: marked FAILURE, their slots freed, before this one starts
    run_id = str(uuid.uuid4())   # a run id as Dagster makes one
    supervisor(instance).watch(run_id, pool, pool_wait_s)
    progress.terminal = None if verbose else (lambda line: say(line))
    try:
        return defs.resolve_job_def(job_name).execute_in_process(
            partition_key=partition_key, instance=instance, run_id=run_id, raise_on_error=False,
            asset_selection=[AssetKey(a) for a in assets] if assets else None,
            run_config={**quiet_run_config(verbose), **(run_config or {})})
    finally:
        supervisor(instance).watch(None)  # between runs an interrupt is a KeyboardInterrupt in the main thread
        progress.terminal = None
        # Dagster restores SIGTERM to the SIGINT handler it found, which is SIG_IGN when the shell started us in the
        # background: SIGTERM must keep working after a run.
        interrupt_on_sigterm()


def estimate_seconds(base, corpus: str, todo: list[str]) -> float | None:
    """The build's seconds at the load now, where the chunks exist (`build_time.estimate`); else None: the run says
    it once it has chunked the source."""
    chunks_path = asset_path(base, "corpus_chunks", corpus)
    if not chunks_path.exists():
        return None
    from causal_assets.resources import DEFAULT_EMBEDDING_BACKEND   # the corpus_embeddings asset's default

    cache = cache_path(base, "embeddings")
    nodes_path = asset_path(base, "graph_nodes", corpus)
    entities = None   # the entity texts not embedded yet, where the graph is built already
    if nodes_path.exists() and "graph_entity_embeddings" in todo:
        held = entity_vector_cache(cache).hashes()
        entities = [len(t) for t in entity_texts(entity_nodes(read_parquet(nodes_path))) if content_hash(t) not in held]
    return build_time.estimate(read_parquet(chunks_path, columns=["kind", "title", "text", "content_hash"]), todo,
                               cache, DEFAULT_EMBEDDING_BACKEND, entities)


_CHECK = object()


def ensure_built(base, corpus: str, wanted: list[str], no_build: bool, why: str, verbose: bool = False,
                 changed: str | None | object = _CHECK) -> None:
    """Materialize what is missing of `wanted` for `corpus` (saying what and about how long), and all of it again
    when its source changed since its chunks were built (`changed`, checked here unless given); or with `no_build`
    refuse a missing part in one line naming the command that builds it, and say that a changed source is used
    as built."""
    settings = Settings.from_env()
    if changed is _CHECK:
        changed = source_change(settings, base, corpus)
    todo = needs.missing(base, corpus, wanted)
    if changed and no_build:
        say(stale_line(corpus, changed, why))
    elif changed:
        todo = needs.rebuilt(wanted)
    if not todo:
        return
    require_available(corpus, settings.corpora, settings.shared_data)
    index_only = not any(a.startswith("graph") for a in todo)
    command = build_command(corpus, index_only)
    if no_build:
        raise NotBuilt(f"corpus {corpus!r} is not built for {why} ({needs.describe(base, corpus, todo)}); run "
                       f"`{command}`")
    build_assets(base, corpus, todo, verbose, reason=why, changed=changed)


def build_assets(base, corpus: str, todo: list[str], verbose: bool, reason: str = "",
                 changed: str | None = None) -> float:
    """Materialize `todo` for `corpus` in one supervised run (one run in the UI, not one for the chunks and one for
    the rest); `changed`: what changed in its source, said first. Returns the seconds taken."""
    t0 = time.monotonic()
    interrupt_on_sigterm()
    old = [] if changed else needs.outdated(base, corpus, todo)
    parts = [a for a in old if a not in needs.CHUNKS]
    if changed:
        say(f"corpus {corpus!r}: {changed}; rebuilding from it (the embeddings of unchanged texts come from the "
            f"cache)")
    if len(parts) < len(old):
        say(f"corpus {corpus!r}: its corpus_chunks was written before it recorded its fingerprint; chunking the "
            f"source again")
    if parts:
        say(f"corpus {corpus!r}: {', '.join(parts)} {'was' if len(parts) == 1 else 'were'} built from another "
            f"version of its chunks; rebuilding {'it' if len(parts) == 1 else 'them'} from the current corpus_chunks")
    needed = f" (needed by {reason})" if reason else ""
    seconds = estimate_seconds(base, corpus, todo)
    load = os.getloadavg()[0]
    if seconds is not None:
        about = f"about {duration(seconds)} at the current load {load:.1f}"
    else:   # the chunks are not counted yet: the run says it once they are
        about = "how long is said once the source is chunked"
    say(f"corpus {corpus!r}: building {', '.join(todo)}{needed} ({about}; once, then kept in the data directory)")
    _run(base, corpus, todo, verbose)
    took = time.monotonic() - t0
    say(f"corpus {corpus!r}: built in {duration(took)}")
    return took


def _run(base, corpus: str, assets: list[str], verbose: bool) -> None:
    result = execute(BUILD_JOB, corpus, base, assets, verbose)
    if not result.success:
        raise RunFailed(f"building {', '.join(assets)} for corpus {corpus!r}: {failure_line(result)} "
                        f"(run {result.run_id}; `--verbose` shows the log)")


def build(args) -> int:
    """`causal-assets build CORPUS`: what search and ask need for a corpus (its index, and unless --index-only its
    graph and entity vectors), in one supervised run; nothing when it is all there."""
    require_available(inbox.check_corpus(args.corpus), args.settings.corpora, args.settings.shared_data)
    wanted = needs.required(dense=True, graph=not args.index_only, entity_vectors=not args.index_only)
    reaped = reap_dead_runs(cli_instance())   # also when nothing is left to build: a killed run's slot is freed
    if reaped:
        say(f"freed the pool slots of {len(reaped)} run(s) whose process is gone (killed?): {', '.join(reaped)}")
    changed = source_change(args.settings, args.base_path, args.corpus)
    todo = needs.rebuilt(wanted) if changed else needs.missing(args.base_path, args.corpus, wanted)
    if not todo:
        say(f"corpus {args.corpus!r} is already built ({', '.join(wanted)})")
        return 0
    build_assets(args.base_path, args.corpus, todo, args.verbose, changed=changed)
    return 0
