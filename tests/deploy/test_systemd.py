"""The production profile's units bind every server to 127.0.0.1 (Dagster OSS has no authentication: the webserver's
GraphQL API launches, deletes and wipes runs for anyone who reaches it), and read every variable the profile needs
from the one environment file. The units run for real in tests/deploy/test_production.py."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.deploy.systemd_units import UNITS, env_example, exec_start, option, unit
from tests.dagster.procs import ROOT

NAMES = ("code-server", "daemon", "webserver")


@pytest.mark.parametrize("name", ["code-server", "webserver"])
def test_servers_listen_on_loopback_only(name):
    argv = exec_start(name)
    assert option(argv, "-h", "--host") == "127.0.0.1", argv
    assert "0.0.0.0" not in " ".join(argv) and "::" not in argv


def test_units_run_installed_commands_with_the_profile_files():
    bin_dir = Path(sys.executable).parent
    for name in NAMES:
        argv = exec_start(name, venv_bin=bin_dir)
        assert Path(argv[0]).exists(), argv[0]
        service = unit(name)["Service"]
        assert service["EnvironmentFile"] == "/etc/causal-assets/causal-assets.env"
        assert service["User"] != "root" and service["Restart"] == "on-failure"
    assert option(exec_start("code-server"), "-m") == "causal_assets.definitions"
    for name in ("daemon", "webserver"):
        assert option(exec_start(name), "-w") == "${DAGSTER_HOME}/workspace.yaml"


def test_the_environment_file_names_every_variable_the_profile_reads():
    """Each `${VAR}` of the units and each `env:` of deploy/dagster.yaml and deploy/workspace.yaml."""
    read = {v for name in NAMES for v in re.findall(r"\$\{(\w+)\}", unit(name)["Service"]["ExecStart"])}
    for config in ("dagster.yaml", "workspace.yaml"):
        text = (ROOT / "deploy" / config).read_text()
        read |= set(re.findall(r"\benv:\s*(\w+)", text))
    env = env_example()
    assert read | {"DAGSTER_HOME"} <= set(env), sorted(read - set(env))
    assert env["DAGSTER_CODE_SERVER_HOST"] == "127.0.0.1"
    assert env["DAGSTER_PG_PASSWORD"] == ""   # a template: no secret is shipped
    assert "chmod 600" in (UNITS / "causal-assets.env.example").read_text()


def test_the_celery_worker_unit_runs_one_step_at_a_time_from_the_executor_file():
    """The unit tests/deploy/test_celery.py starts its two workers with: the causal_assets Celery app (a started task
    names its worker), the executor file of the code location, one step at a time, no port of its own; the variables
    it reads are in the environment file (commented out: a one-machine install does not use them)."""
    argv = exec_start("celery-worker", venv_bin=Path(sys.executable).parent)
    assert Path(argv[0]).exists() and argv[1:3] == ["worker", "start"], argv
    assert option(argv, "-A") == "causal_assets.celery_app" and option(argv, "-y") == "${CAUSAL_ASSETS_EXECUTOR_CONFIG}"
    assert argv[argv.index("--") + 1:] == ["--concurrency=1"]
    service = unit("celery-worker")["Service"]
    assert service["User"] != "root" and service["Restart"] == "on-failure"
    assert service["EnvironmentFile"] == "/etc/causal-assets/causal-assets.env"
    template = (UNITS / "causal-assets.env.example").read_text()
    for variable in re.findall(r"\$\{(\w+)\}", service["ExecStart"]) + ["CAUSAL_ASSETS_EXECUTOR"]:
        assert f"#{variable}=" in template, variable
