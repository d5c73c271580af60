"""A Ctrl-C that Dagster raises into a finalizer or a weakref callback during a step prints no traceback: the
supervisor of the CLI's runs is already ending the run (exit 130, run CANCELED)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.dagster.procs import ROOT

SCRIPT = textwrap.dedent("""
    import gc, os, signal, sys, time, weakref
    from dagster import DagsterInstance
    from dagster._core.errors import DagsterExecutionInterruptedError
    from dagster._utils.interrupts import raise_interrupts_as
    from causal_assets.commands.build import Supervisor

    Supervisor(DagsterInstance.ephemeral())

    class Target:
        pass

    def interrupted_inside(ref):   # SIGINT arrives while the garbage collector runs a weakref callback
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)

    def broken(ref):
        raise ValueError("a real bug in a callback")

    with raise_interrupts_as(DagsterExecutionInterruptedError):   # what Dagster does around a step's code
        target = Target()
        ref = weakref.ref(target, interrupted_inside)
        del target
        gc.collect()
    target = Target()
    ref = weakref.ref(target, broken)
    del target
    print("step went on", flush=True)
""")


def test_an_interrupt_raised_into_a_callback_prints_no_traceback_and_other_errors_still_do():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "step went on" in proc.stdout, proc.stderr[-3000:]
    assert "DagsterExecutionInterruptedError" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("Exception ignored in") == 1 and "a real bug in a callback" in proc.stderr, proc.stderr


def test_an_interrupted_run_is_marked_canceled_whatever_state_the_interrupt_left_it_in(tmp_path):
    """The supervisor marks the run after the interrupt: it may still be STARTED, or the interrupt may have ended it
    first (FAILURE). A storage that fails is named in the message, never passed over (the process exits next)."""
    from types import SimpleNamespace

    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    from causal_assets.commands.build import Supervisor

    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        for status in (DagsterRunStatus.STARTED, DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS):
            instance.add_run(DagsterRun(job_name="search_job", run_id=f"run-{status.value.lower()}", status=status))
        sup = SimpleNamespace(instance=instance)
        assert Supervisor.mark_canceled(sup, "run-started") == "marked CANCELED"
        assert Supervisor.mark_canceled(sup, "run-failure") == "marked CANCELED"
        assert Supervisor.mark_canceled(sup, "run-success") == "had already succeeded"
        assert Supervisor.mark_canceled(sup, "never-made") == "had not started"
        assert [instance.get_run_by_id(f"run-{s}").status for s in ("started", "failure", "success")] == [
            DagsterRunStatus.CANCELED, DagsterRunStatus.CANCELED, DagsterRunStatus.SUCCESS]
        (tmp_path / "history" / "runs.db").unlink()   # the run storage gone mid-run: sqlite opens an empty file
        said = Supervisor.mark_canceled(sup, "run-started", within_s=0.5)
        assert said.startswith("could not be marked CANCELED (") and "runs" in said, said
