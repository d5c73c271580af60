"""Guards that run when the code location loads, for runs no code server watches (`dagster asset materialize`,
`dagster job execute`): a labelling run killed with SIGKILL kept the `llm` slot and the documented re-run waited on
it for ever (logged at DEBUG only); a Ctrl-C'd materialize showed as FAILURE, not CANCELED.

Real processes: a holder run in pool `llm` (tests/dagster/test_run_health.py), then the project's own
`dagster asset materialize -m causal_assets.definitions` against a SQLite instance configured as shipped."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus

from causal_assets.run_health import LLM_POOL
from tests.conftest import HOTPOT, require
from tests.dagster.procs import DAGSTER, ROOT, group_alive, kill_group
from tests.dagster.test_run_health import env_for, home, start_holder  # noqa: F401  (the `home` fixture)

pytestmark = pytest.mark.slow


def registry_env(home: Path, tmp_path: Path) -> dict[str, str]:
    hotpot = tmp_path / "hotpot_small.jsonl"
    hotpot.write_text("\n".join(require(HOTPOT).read_text().splitlines()[:3]) + "\n")
    (tmp_path / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": "hotpotqa", "loader": "hotpotqa", "path": str(hotpot)}]}))
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "hotpotqa", "loader": "hotpotqa", "corpus": "hotpotqa", "path": str(hotpot), "splits": ["dev"],
         "eval_splits": ["dev"], "validator": "answer_f1"}]}))
    return {**env_for(home, tmp_path), "CAUSAL_ASSETS_CORPORA": str(tmp_path / "corpora.yaml"),
            "CAUSAL_ASSETS_BENCHMARKS": str(tmp_path / "benchmarks.yaml"), "CAUSAL_ASSETS_CATALOG": "none"}


def materialize_labels(env: dict[str, str], log: Path) -> subprocess.Popen:
    """The documented labelling command for the `hotpotqa` partition (its pools are not there: the step fails on
    its input once it has its slot, which is all these tests need of it)."""
    with open(log, "w") as out:
        return subprocess.Popen([DAGSTER, "asset", "materialize", "-m", "causal_assets.definitions", "--select",
                                 "mc_trials,solver_calls", "--partition", "hotpotqa"], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None and not predicate():
            raise AssertionError(f"exited {proc.returncode} before {what}: {log.read_text()[-3000:] if log else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:.0f}s: {log.read_text()[-3000:] if log else ''}")
        time.sleep(0.2)


def test_the_rerun_after_a_sigkilled_labelling_run_frees_its_slot_and_says_so(home, tmp_path):
    holder = start_holder(home, tmp_path)      # a labelling step that holds the only `llm` slot
    with DagsterInstance.from_config(str(home)) as instance:
        [dead_run] = [r.run_id for r in instance.get_runs()]
    kill_group(holder, signal.SIGKILL)          # kill -9: nobody records its end, its slot stays claimed
    env = registry_env(home, tmp_path)
    log = tmp_path / "rerun.log"
    rerun = materialize_labels(env, log)
    try:
        # the re-run's own labelling step starts: it got the slot (before, it waited for ever, logged at DEBUG)
        wait_for(lambda: "mc_trials - STEP_START" in log.read_text(), 240, "the re-run's mc_trials step to start",
                 rerun, log)
    finally:
        kill_group(rerun, signal.SIGKILL)
    text = log.read_text()
    assert f"freed the concurrency slots of 1 run(s) whose process is gone (killed?), marked FAILURE: {dead_run}" in text
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_by_id(dead_run).status == DagsterRunStatus.FAILURE


def test_a_ctrl_c_of_a_materialize_ends_its_run_canceled(home, tmp_path):
    holder = start_holder(home, tmp_path)      # keeps the labelling step of the materialize waiting for the pool
    env = registry_env(home, tmp_path)
    log = tmp_path / "materialize.log"
    try:
        run = materialize_labels(env, log)

        def its_run():
            with DagsterInstance.from_config(str(home)) as instance:
                return [r for r in instance.get_runs() if r.job_name != "holder"]

        wait_for(lambda: its_run() and its_run()[0].status == DagsterRunStatus.STARTED, 240, "the run to start",
                 run, log)
        with DagsterInstance.from_config(str(home)) as instance:   # its step is queued behind the holder
            wait_for(lambda: any(p.run_id == its_run()[0].run_id
                                 for p in instance.event_log_storage.get_concurrency_info(LLM_POOL).pending_steps),
                     120, "its step to queue for the pool", run, log)
        os.killpg(run.pid, signal.SIGINT)       # Ctrl-C in the terminal: the whole foreground group
        try:
            run.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the interrupted materialize did not exit: {log.read_text()[-3000:]}") from None
        assert not group_alive(run.pid)
        [interrupted] = its_run()
        assert interrupted.status == DagsterRunStatus.CANCELED, (interrupted.status, log.read_text()[-3000:])
    finally:
        kill_group(holder, signal.SIGKILL)


def test_build_of_a_built_corpus_frees_a_dead_runs_slot_too(home, tmp_path):
    """`build` of a built corpus did not free it: nothing was run, so nothing reaped."""
    from tests.cli.test_cli_ux import run_cli
    from tests.conftest import mark_built

    holder = start_holder(home, tmp_path)
    with DagsterInstance.from_config(str(home)) as instance:
        [dead_run] = [r.run_id for r in instance.get_runs()]
    kill_group(holder, signal.SIGKILL)
    env = registry_env(home, tmp_path)
    mark_built(Path(env["CAUSAL_ASSETS_BASE_PATH"]), "hotpotqa")
    done = run_cli("build", "hotpotqa", "--index-only", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"freed the pool slots of 1 run(s) whose process is gone (killed?): {dead_run}" in done.stderr
    assert "is already built" in done.stderr
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.event_log_storage.get_concurrency_info(LLM_POOL).claimed_slots == []
        assert instance.get_run_by_id(dead_run).status == DagsterRunStatus.FAILURE
