"""Kubernetes on paper, checked by machine (no cluster, no Docker engine, no Helm here): the k8s_job_executor config
of deploy/k8s/executor.yaml against dagster-k8s's config schema and the kubernetes client's models, its per-step
entries against the op names of the Definitions, and deploy/k8s/values.yaml + Dockerfile against the project."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.execution import EXECUTOR_CONFIG_ENV, EXECUTOR_ENV, executor_from_env
from tests.dagster.procs import ROOT

K8S = ROOT / "deploy" / "k8s"

PROBE = """
import json
from causal_assets.definitions import defs
ex = defs.executor
ops = sorted({a.node_def.name for a in defs.assets})
print(json.dumps({"executor": ex.name, "ops": ops}))
"""


@pytest.mark.slow
def test_definitions_load_with_the_k8s_executor_and_its_config():
    env = {**os.environ, EXECUTOR_ENV: "k8s", EXECUTOR_CONFIG_ENV: str(K8S / "executor.yaml")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["executor"] == "k8s"
    config = yaml.safe_load((K8S / "executor.yaml").read_text())
    # per_step_k8s_config is keyed by op name: a name that matches no op would silently configure nothing.
    assert set(config["per_step_k8s_config"]) <= set(out["ops"]), set(config["per_step_k8s_config"]) - set(out["ops"])
    gpu = config["per_step_k8s_config"]["embedding_shards"]
    assert gpu["pod_spec_config"]["node_selector"] and gpu["container_config"]["resources"]["limits"]["nvidia.com/gpu"]
    assert {"name": "CAUSAL_ASSETS_EMBEDDING_DEVICE", "value": "cuda"} in gpu["container_config"]["env"]


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(max_concurent=3), "max_concurent"),
    (lambda c: c["per_step_k8s_config"]["embedding_shards"]["pod_spec_config"].update(node_selectr={"a": "b"}),
     "node_selectr"),
    (lambda c: c["step_k8s_config"]["container_config"].update(resorces={}), "resorces"),
])
def test_a_typo_in_the_executor_config_fails_the_load_naming_it(tmp_path, monkeypatch, mutate, message):
    config = yaml.safe_load((K8S / "executor.yaml").read_text())
    mutate(config)
    bad = tmp_path / "executor.yaml"
    bad.write_text(yaml.safe_dump(config))
    monkeypatch.setenv(EXECUTOR_CONFIG_ENV, str(bad))
    with pytest.raises(ConfigError, match=message) as e:
        executor_from_env("k8s")
    assert str(bad) in str(e.value)


def test_the_shipped_executor_config_is_valid_in_process(monkeypatch):
    monkeypatch.setenv(EXECUTOR_CONFIG_ENV, str(K8S / "executor.yaml"))
    executor = executor_from_env("k8s")
    assert executor.name == "k8s"


def test_helm_values_and_image_match_the_project():
    values = yaml.safe_load((K8S / "values.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [deployment] = values["dagster-user-deployments"]["deployments"]
    args = deployment["codeServerArgs"]
    assert args[args.index("-m") + 1] == pyproject["tool"]["dagster"]["module_name"]
    assert args[args.index("--location-name") + 1] == pyproject["tool"]["dagster"]["code_location_name"]
    env = deployment["env"]
    assert env["CAUSAL_ASSETS_EXECUTOR"] == "k8s"
    # Every CAUSAL_ASSETS_* variable set for the pods is one the code reads.
    source = "\n".join(p.read_text() for p in (ROOT / "causal_assets").rglob("*.py"))
    unknown = [k for k in env if k.startswith("CAUSAL_ASSETS_") and k not in source]
    assert not unknown, unknown
    image_path = env["CAUSAL_ASSETS_EXECUTOR_CONFIG"]
    assert image_path.startswith("/opt/causal_assets/") and (ROOT / image_path.removeprefix("/opt/causal_assets/")).is_file()
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] and values["dagsterDaemon"]["runMonitoring"]["freeSlotsAfterRunEndSeconds"] > 0
    assert values["concurrency"]["pools"]["granularity"] == "op"
    # The instance the chart renders must agree with the production profile tested on this machine.
    local = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    assert local["concurrency"]["pools"] == {"granularity": values["concurrency"]["pools"]["granularity"],
                                            "default_limit": values["concurrency"]["pools"]["defaultLimit"]}
    assert local["run_monitoring"]["max_resume_run_attempts"] == values["dagsterDaemon"]["runMonitoring"]["maxResumeRunAttempts"]

    dockerfile = (K8S / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+)", dockerfile, flags=re.M):
        assert (ROOT / src).exists(), src
    assert "'.[k8s]'" in dockerfile and "k8s" in pyproject["project"]["optional-dependencies"]
    assert f"CAUSAL_ASSETS_EXECUTOR_CONFIG={image_path}" in dockerfile
