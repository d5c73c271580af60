"""The executor is configuration: real multiprocess runs (one process per step, bounded concurrency), the
in_process switch through run config, and clear errors for executors whose library is not installed."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, Field, execute_job, job, op, reconstructable

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.execution import executor_from_env, local_executor

SLEEP_S = 2.5


def _probe(max_concurrent: int):
    def make(name):
        @op(name=name, config_schema={"out": str, "sleep_s": Field(float, default_value=SLEEP_S)})
        def record(context):
            start = time.time()
            time.sleep(context.op_config["sleep_s"])
            Path(context.op_config["out"], f"{name}.json").write_text(
                json.dumps({"pid": os.getpid(), "start": start, "end": time.time()}))
        return record

    a, b = make("probe_a"), make("probe_b")

    @job(name=f"probe_{max_concurrent}", executor_def=local_executor(max_concurrent))
    def probe():
        a()
        b()

    return probe


def probe_one_at_a_time():
    return _probe(1)


def probe_two_at_a_time():
    return _probe(2)


def _run(target, out: Path, extra: dict | None = None, sleep_s: float = SLEEP_S) -> dict[str, dict]:
    out.mkdir()
    config = {"ops": {n: {"config": {"out": str(out), "sleep_s": sleep_s}} for n in ("probe_a", "probe_b")},
              **(extra or {})}
    (out / "home").mkdir()
    with DagsterInstance.local_temp(str(out / "home")) as instance:  # multiprocess needs a persistent instance
        result = execute_job(reconstructable(target), instance=instance, run_config=config)
        assert result.success
    steps = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(steps) == {"probe_a", "probe_b"}
    return steps


def _overlap(steps: dict[str, dict]) -> float:
    a, b = steps["probe_a"], steps["probe_b"]
    return min(a["end"], b["end"]) - max(a["start"], b["start"])


@pytest.mark.slow  # ~20 s: real step processes of the multiprocess executor
def test_multiprocess_runs_steps_in_their_own_processes_with_bounded_concurrency(tmp_path):
    two = _run(probe_two_at_a_time, tmp_path / "two")
    assert len({s["pid"] for s in two.values()} | {os.getpid()}) == 3   # each step in its own process
    assert _overlap(two) > 0.5 * SLEEP_S                                 # and both at once

    one = _run(probe_one_at_a_time, tmp_path / "one")
    assert len({s["pid"] for s in one.values()} | {os.getpid()}) == 3
    assert _overlap(one) < 0                                             # max_concurrent=1: one after the other

    # Only where the steps ran is checked here: no need to hold them (SLEEP_S is there to measure overlap).
    inproc = _run(probe_two_at_a_time, tmp_path / "inproc", {"execution": {"config": {"in_process": {}}}}, sleep_s=0)
    assert {s["pid"] for s in inproc.values()} == {os.getpid()}          # run config switched to in-process


def test_executor_kinds_from_environment(monkeypatch):
    from causal_assets.definitions import defs

    assert defs.resolve_job_def("corpus_index_job").executor_def.name == "local_executor"
    monkeypatch.setenv("CAUSAL_ASSETS_MAX_CONCURRENT", "3")
    default = executor_from_env()
    assert default.name == "local_executor"
    assert default.config_schema.as_field().config_type.fields["multiprocess"].config_type.fields[
        "max_concurrent"].default_value == 3
    assert executor_from_env("in_process").name == "in_process"
    # k8s/docker executors live in integration libraries: dagster-k8s comes with the dev extra (the Kubernetes
    # profile is checked offline, tests/deploy/test_k8s.py); dagster-docker belongs in a deployment image only.
    assert executor_from_env("k8s").name == "k8s"
    with pytest.raises(ConfigError, match=r"CAUSAL_ASSETS_EXECUTOR=docker: needs the 'dagster-docker' package"):
        executor_from_env("docker")
    with pytest.raises(ConfigError, match=r"expected one of multiprocess, in_process, k8s, docker, celery"):
        executor_from_env("dask")
    monkeypatch.setenv("CAUSAL_ASSETS_MAX_CONCURRENT", "zero")
    with pytest.raises(ConfigError, match=r"CAUSAL_ASSETS_MAX_CONCURRENT='zero': expected a positive integer"):
        executor_from_env()


def test_shipped_instance_config_retries_runs_and_bounds_the_llm_pool(tmp_path):
    """data/dagster_home/dagster.yaml (the README's DAGSTER_HOME) is valid instance config: crashed runs are
    retried, step failures are left to the assets' RetryPolicy, and the `llm` pool holds one slot across runs."""
    shipped = Path(__file__).resolve().parents[2] / "data" / "dagster_home" / "dagster.yaml"
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(shipped.read_text())
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
        assert not instance.run_retries_retry_on_asset_or_op_failure
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        instance.event_log_storage.initialize_concurrency_limit_to_default("llm")
        assert instance.event_log_storage.get_concurrency_info("llm").slot_count == 1


def test_celery_executor_config_is_nested_names_a_broker_and_never_shows_its_password(tmp_path, monkeypatch):
    """`CAUSAL_ASSETS_EXECUTOR=celery` loads only with the file the workers start from: nested (`execution: config:`;
    `dagster-celery worker start -y` ignores a flat one and waits on amqp://localhost:5672) and naming a broker."""
    from causal_assets.settings import Settings

    def load(config=None):
        env = {"CAUSAL_ASSETS_EXECUTOR": "celery"}
        if config is not None:
            path = tmp_path / "celery.yaml"
            path.write_text(config)
            env["CAUSAL_ASSETS_EXECUTOR_CONFIG"] = str(path)
        return executor_from_env(settings=Settings.from_env(env))

    with pytest.raises(ConfigError, match=r"CAUSAL_ASSETS_EXECUTOR=celery needs CAUSAL_ASSETS_EXECUTOR_CONFIG"):
        load()
    with pytest.raises(ConfigError, match=r"nest the Celery config as `execution: config:.*top-level keys: broker"):
        load("broker: redis://127.0.0.1:6379/0\n")
    with pytest.raises(ConfigError, match=r"execution.config.broker is missing"):
        load("execution: {config: {backend: redis://127.0.0.1:6379/1}}\n")
    with pytest.raises(ConfigError, match=r"not a valid celery executor config: .*brokr") as bad_key:
        load("execution: {config: {broker: redis://127.0.0.1:6379/0, brokr: x}}\n")
    with pytest.raises(ConfigError, match=r"execution.config.broker='htp://10.0.0.5:6379/0': expected a URL") as e:
        load("execution: {config: {broker: 'htp://:s3cret-pw@10.0.0.5:6379/0'}}\n")
    assert "s3cret-pw" not in str(e.value) and "s3cret-pw" not in str(bad_key.value)
    executor = load("execution: {config: {broker: 'redis://:s3cret-pw@10.0.0.5:6379/0', "
                    "backend: 'redis://:s3cret-pw@10.0.0.5:6379/1'}}\n")
    assert executor.name == "celery"
