"""Pool slots held by dead runs, and a bounded wait for a slot.

A run killed with SIGKILL never reports its end: it stays STARTED and keeps the `llm` pool slot its step claimed,
so every later LLM step would wait for ever. Runs launched by a code server are marked FAILURE by that server, and
run monitoring then frees their slots. Runs executed inside a command (`dagster asset materialize`, `causal-assets
ask`) have no server watching them: on a single-machine SQLite instance `reap_dead_runs` marks FAILURE a run in
progress whose worker process (the pid of its RUN_START event) is gone or was reused, and frees its slots. With
shared storage (PostgreSQL) runs may live on other machines, so pids are not checked (`local_only`). See
docs/operations.md ("Retries and limits").
"""
from __future__ import annotations

import atexit
import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from causal_assets.dagster_private import interrupt_captured
from causal_assets.settings import Settings

LLM_POOL = "llm"
IN_PROGRESS = {DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.CANCELING}


@dataclass
class Holder:
    run_id: str
    step_key: str
    status: str          # the run's status, or "missing" for a slot whose run is gone
    pid: int | None      # the run worker's pid (RUN_START event)
    alive: bool | None   # None: not checked (shared storage)

    def describe(self) -> str:
        who = f"pid {self.pid}, {'alive' if self.alive else 'dead' if self.alive is False else 'not checked'}" if self.pid else "no pid"
        return f"run {self.run_id} step {self.step_key} ({self.status}, {who})"


def instance_is_local(instance: DagsterInstance) -> bool:
    """True when the run storage is a local SQLite file: every run of this instance ran on this machine."""
    return "sqlite" in type(instance.run_storage).__name__.lower()


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def _process_start(pid: int) -> float | None:
    """Epoch seconds at which process `pid` started (Linux /proc), None if there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":  # a zombie is dead
        return None
    boot = _boot_time()
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK") if boot is not None else 0.0


def worker_pid(instance: DagsterInstance, run_id: str) -> tuple[int | None, float | None]:
    """(pid, timestamp) of the run's RUN_START event: the process that executed the run."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_START, limit=1).records
    if not records or records[0].event_log_entry.dagster_event is None:
        return None, None
    entry = records[0].event_log_entry
    return entry.dagster_event.pid, entry.timestamp


def worker_alive(pid: int | None, started_at: float | None) -> bool:
    if pid is None:
        return True  # nothing to go by: never reap on a guess
    start = _process_start(pid)
    if start is None:
        return False
    # A process that started after the run did is another process that reused the pid (2 s for clock-tick rounding).
    return not (started_at is not None and start and start > started_at + 2)


def pool_holders(instance: DagsterInstance, pool: str = LLM_POOL, local_only: bool | None = None) -> list[Holder]:
    """Who holds the slots of `pool` (claimed slots only), with each run's status and, on a local instance, whether
    its worker process is alive."""
    if not instance.event_log_storage.supports_global_concurrency_limits:
        return []
    check_pids = instance_is_local(instance) if local_only is None else local_only
    holders = []
    for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots:
        run = instance.get_run_by_id(slot.run_id)
        pid, started = worker_pid(instance, slot.run_id) if run else (None, None)
        alive = worker_alive(pid, started) if (check_pids and run and run.status in IN_PROGRESS) else None
        holders.append(Holder(slot.run_id, slot.step_key, run.status.value if run else "missing", pid, alive))
    return holders


def pool_limit(instance: DagsterInstance, pool: str = LLM_POOL) -> int | None:
    info = instance.event_log_storage.get_concurrency_info(pool)
    return info.limit if info.limit is not None else (info.slot_count or None)


def reap_dead_runs(instance: DagsterInstance, local_only: bool | None = None) -> list[str]:
    """Free the concurrency slots that runs can no longer give back, claimed or assigned to a queued step: those of
    finished or missing runs, and (on a local instance) of runs in progress whose worker process is gone, which are
    first marked FAILURE. On a local instance, every other run in progress whose worker is gone is marked FAILURE
    too: a killed `causal-assets build` holds no slot, but stayed STARTED for ever (in the UI, and as the latest run
    of its asset partitions). Returns the run ids reaped.

    Queued steps count: a run killed while its step waited for the pool kept that place in the queue, and the slot
    freed for it by the next reaping was then assigned to the dead run, which never gave it back (every later
    `ask` waited out its deadline on an empty list of holders)."""
    check_pids = instance_is_local(instance) if local_only is None else local_only
    storage = instance.event_log_storage
    with_slots = storage.get_concurrency_run_ids() if storage.supports_global_concurrency_limits else set()
    in_progress = {r.run_id for r in instance.get_runs(filters=RunsFilter(statuses=list(IN_PROGRESS)))} \
        if check_pids else set()
    reaped = []
    for run_id in sorted(with_slots | in_progress):
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in IN_PROGRESS:
            pid, started = worker_pid(instance, run_id) if check_pids else (None, None)
            if pid is None or worker_alive(pid, started):
                continue   # alive, or nothing to go by: never reap on a guess
            instance.report_run_failed(run, f"The run worker (pid {pid}) is gone (killed?): marked FAILURE and "
                                            "its concurrency slots freed by causal_assets.run_health")
        if run_id in with_slots:
            storage.free_concurrency_slots_for_run(run_id)
        reaped.append(run_id)
    return reaped


def wait_for_slot(instance: DagsterInstance, pool: str = LLM_POOL, timeout_s: float = 300, poll_s: float = 2.0,
                  on_wait=None) -> tuple[bool, list[Holder]]:
    """Wait (at most `timeout_s`) until `pool` has a free slot, reaping dead holders on the way. Returns
    (free, holders at the end). A pool without a limit is always free."""
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        reap_dead_runs(instance)
        limit = pool_limit(instance, pool)
        holders = pool_holders(instance, pool)
        if limit is None or len(holders) < limit:
            return True, holders
        if time.monotonic() >= deadline:
            return False, holders
        if on_wait and not told:
            on_wait(holders)
            told = True
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def blocked_message(pool: str, holders: list[Holder], waited_s: float) -> str:
    lines = [f"the {pool!r} pool has no free slot after {waited_s:.0f}s; held by:"]
    lines += [f"  {h.describe()}" for h in holders]
    lines += ["Wait for those runs, cancel them in the UI (Runs -> Terminate), free a dead run's slots in the UI "
              "(Deployment -> Concurrency), or raise the limit: `dagster instance concurrency set "
              f"{pool} N`. `--wait SECONDS` waits longer."]
    return "\n".join(lines)


def home_instance() -> DagsterInstance | None:
    """The instance of $DAGSTER_HOME, or None when it is not set (an ephemeral instance: no other process's runs)."""
    if not Settings.dagster_home_given():   # DagsterInstance.get() would refuse: not set
        return None
    try:
        return DagsterInstance.get()
    except Exception as e:   # a broken instance fails Dagster's own command, with its own message; not the load
        logging.getLogger(__name__).debug("instance of DAGSTER_HOME not opened: %s", e)
        return None


def reap_at_load(instance: DagsterInstance | None) -> list[str]:
    """Free the pool slots of dead runs when the code location loads, in the process that loads it: what
    `dagster asset materialize`, `dagster job execute` and the webserver's code server do first. A labelling run
    killed with SIGKILL held the `llm` slot, and the documented re-run waited on it for ever (logged at DEBUG only);
    now the re-run frees it before its own step queues, and says so at WARNING. Only when the run storage is local
    SQLite (`reap_dead_runs`); never fails the load."""
    if instance is None or not instance_is_local(instance):
        return []
    try:
        reaped = reap_dead_runs(instance)
    except Exception as e:   # a read-only or locked instance: the runs' own supervision still applies
        logging.getLogger(__name__).debug("dead runs not reaped at load: %s", e)
        return []
    if reaped:
        logging.getLogger(__name__).warning(
            "freed the concurrency slots of %d run(s) whose process is gone (killed?), marked FAILURE: %s",
            len(reaped), ", ".join(reaped))
    return reaped


def _runs_of_this_process(instance: DagsterInstance) -> list:
    """The runs in progress whose worker is this process (the pid of their RUN_START event)."""
    out = []
    for run in instance.get_runs(filters=RunsFilter(statuses=list(IN_PROGRESS))):
        pid, _ = worker_pid(instance, run.run_id)
        if pid == os.getpid():
            out.append(run)
    return out


def cancel_on_interrupt(instance: DagsterInstance | None, poll_s: float = 0.1) -> None:
    """A Ctrl-C'd `dagster asset materialize` (or `job execute`) showed as FAILURE ("interrupted unexpectedly,
    treating as failure"): Dagster records CANCELED only for a run that is CANCELING when the interrupt reaches the
    run's end. A daemon thread, started when the code location loads, notices SIGINT / SIGTERM (through the signal
    wakeup pipe where this process has none yet, and the flag Dagster's `capture_interrupts` sets) and marks this
    process's runs CANCELING at once, so they end CANCELED. Runs of other processes are never touched; a command
    with its own supervisor (`causal-assets label`) replaces the pipe and cancels its runs itself."""
    if instance is None:
        return
    wake_r = None
    if threading.current_thread() is threading.main_thread():
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        if previous != -1:   # the process watches its signals itself: leave that alone
            signal.set_wakeup_fd(previous)
            os.close(wake_r)
            os.close(wake_w)
            wake_r = None

    def signalled() -> bool:
        if wake_r is None:
            time.sleep(poll_s)
            return False
        ready, _, _ = select.select([wake_r], [], [], poll_s)
        return bool(ready) and any(b in (signal.SIGINT, signal.SIGTERM) for b in os.read(wake_r, 64))

    first_interrupt: list[float] = []   # the time of the first interrupt, once there was one

    def watch() -> None:
        while True:
            try:
                if not (signalled() or interrupt_captured()):
                    continue
                if not first_interrupt:
                    first_interrupt.append(time.time())
                for run in _runs_of_this_process(instance):
                    if run.status == DagsterRunStatus.STARTED:
                        instance.report_run_canceling(run, message="Interrupted (Ctrl-C or SIGTERM)")
                time.sleep(1.0)      # one marking per interrupt is enough
            except Exception:        # storage gone at exit: nothing to mark
                time.sleep(1.0)

    def finish() -> None:
        """At exit: an interrupted run whose end Dagster wrote before the watcher saw it in progress (a step still
        queued for its pool ends at once) ends CANCELED all the same: this process's runs that ended FAILURE after
        the first interrupt (those the watcher marked CANCELING among them) are found by their worker's pid."""
        if not first_interrupt:
            return
        try:
            since = datetime.fromtimestamp(first_interrupt[0] - 1.0, tz=timezone.utc)
            for record in instance.get_run_records(filters=RunsFilter(
                    statuses=[DagsterRunStatus.CANCELING, DagsterRunStatus.FAILURE], updated_after=since)):
                if worker_pid(instance, record.dagster_run.run_id)[0] == os.getpid():
                    instance.report_run_canceled(record.dagster_run, message="Interrupted (Ctrl-C or SIGTERM)")
        except Exception:            # storage gone at exit: nothing to mark
            pass

    atexit.register(finish)
    threading.Thread(target=watch, name="causal-assets-interrupt-watch", daemon=True).start()
