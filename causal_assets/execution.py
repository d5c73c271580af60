"""Where a run's steps execute is configuration, not code.

`CAUSAL_ASSETS_EXECUTOR` picks the executor of every job in the code location when the Definitions load:
`multiprocess` (default; at most `CAUSAL_ASSETS_MAX_CONCURRENT` steps at once, and run config can still ask for
`in_process` or another `max_concurrent`), `in_process`, `k8s` (one Kubernetes Job per step, needs `dagster-k8s`)
`docker` (one container per step, needs `dagster-docker`) or `celery` (each step a task for long-lived Celery
workers on any number of machines, needs `dagster-celery[redis]`; causal_assets/celery_executor.py).
`CAUSAL_ASSETS_EXECUTOR_CONFIG` names a YAML file of executor config, checked against the executor's schema at load
(deploy/k8s/executor.yaml sizes every step pod and puts `embedding_shards` on a GPU node; for Celery the file is
nested, `execution: config: {broker: ...}`, because the workers start from the same file). LLM-bound steps are limited across all runs by the `llm` pool, whatever the
executor. See docs/operations.md ("Executor").
"""
import importlib
from urllib.parse import urlsplit

from dagster import ExecutorDefinition, Field, Selector, in_process_executor, multi_or_in_process_executor

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.settings import EXECUTORS, Settings

EXECUTOR_ENV = "CAUSAL_ASSETS_EXECUTOR"
EXECUTOR_CONFIG_ENV = "CAUSAL_ASSETS_EXECUTOR_CONFIG"
# kind -> (module, attribute, pip requirement) for executors that live in integration libraries
_EXTERNAL = {"k8s": ("dagster_k8s", "k8s_job_executor", "dagster-k8s"),
             "docker": ("dagster_docker", "docker_executor", "dagster-docker"),
             "celery": ("causal_assets.celery_executor", "watched_celery_executor", "dagster-celery[redis]")}
# Brokers the Celery executor may name (kombu transports with a network address)
CELERY_BROKERS = ("redis", "rediss", "amqp", "amqps", "pyamqp", "sqs", "sentinel")
KINDS = EXECUTORS  # what $CAUSAL_ASSETS_EXECUTOR accepts
assert set(KINDS) == {"multiprocess", "in_process", *_EXTERNAL}, KINDS


def default_max_concurrent(settings: Settings | None = None) -> int:
    return (settings or Settings.from_env()).concurrency()


def local_executor(max_concurrent: int | None = None, settings: Settings | None = None) -> ExecutorDefinition:
    """Dagster's multi_or_in_process executor with our default `max_concurrent`; the run-config shape is unchanged."""
    limit = max_concurrent or default_max_concurrent(settings)
    schema = Selector({
        "multiprocess": {"max_concurrent": Field(int, is_required=False, default_value=limit,
                                                 description="Steps running at once (processes).")},
        "in_process": {},
    })
    return multi_or_in_process_executor.configured(
        lambda config: config, name="local_executor",
        config_schema=Field(schema, is_required=False, default_value={"multiprocess": {}}),
        description=f"One process per step, at most {limit} at once (or in_process via run config).")


def executor_from_env(kind: str | None = None, settings: Settings | None = None) -> ExecutorDefinition:
    """The executor `kind` names, else the one of the settings (default: read from the environment now)."""
    settings = settings or Settings.from_env()
    kind = (kind or settings.executor).strip().lower()
    if kind == "multiprocess":
        return local_executor(settings=settings)
    if kind == "in_process":
        return in_process_executor
    if kind in _EXTERNAL:
        module, attr, requirement = _EXTERNAL[kind]
        try:
            executor = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            if not (e.name or "").startswith(("dagster_", "celery", "kombu", "redis")):
                raise
            raise ConfigError(f"{EXECUTOR_ENV}={kind}: needs the {requirement!r} package (pin it to the dagster "
                              f"release, e.g. {requirement}==0.29.27 for dagster 1.13.27) in the image that runs "
                              f"the code location ({e})") from None
        if kind == "celery":
            return _configured(executor, kind, settings.executor_config, config=celery_config(settings.executor_config))
        return _configured(executor, kind, settings.executor_config)
    raise ConfigError(f"{EXECUTOR_ENV}={kind!r}: expected one of {', '.join(KINDS)}")


def _read_yaml(path) -> dict:
    import yaml

    try:
        config = yaml.safe_load(open(path, encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: {e}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: expected a mapping of executor config")
    return config


def celery_config(path) -> dict:
    """The executor config of the Celery file at `path`: nested (`execution: config:`), as `dagster-celery worker
    start -y` reads it (a flat file is ignored there: the workers would wait on amqp://localhost:5672), and naming
    its broker. Messages show the broker's address, never its password."""
    from causal_assets.celery_executor import shown

    if not path:
        raise ConfigError(f"{EXECUTOR_ENV}=celery needs {EXECUTOR_CONFIG_ENV}: a YAML file "
                          "`execution: {config: {broker: redis://HOST:6379/0, backend: redis://HOST:6379/1}}`, "
                          "the same file the workers start from (`dagster-celery worker start -y FILE`)")
    raw = _read_yaml(path)
    config = (raw.get("execution") or {}).get("config") if isinstance(raw.get("execution"), dict) else None
    if not isinstance(config, dict):
        raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: nest the Celery config as `execution: config: "
                          "{broker: ..., backend: ...}` (top-level keys: " + ", ".join(map(str, raw)) +
                          "): the workers read only that shape and would wait on amqp://localhost:5672")
    broker = config.get("broker")
    if not broker:
        raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: execution.config.broker is missing (e.g. "
                          "redis://HOST:6379/0); without it Celery waits on amqp://localhost:5672")
    for key in ("broker", "backend"):
        url = config.get(key)
        if isinstance(url, str) and url != "rpc://":
            try:
                parts = urlsplit(url)
                parts.port
            except ValueError as e:
                raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: execution.config.{key}={shown(url)!r}: {e}") from None
            if parts.scheme not in CELERY_BROKERS or not parts.hostname:
                raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: execution.config.{key}={shown(url)!r}: expected a "
                                  f"URL with a host, one of {', '.join(s + '://' for s in CELERY_BROKERS)}")
    return config


def _configured(executor: ExecutorDefinition, kind: str, path, config: dict | None = None) -> ExecutorDefinition:
    """The executor with the YAML at `path` ($CAUSAL_ASSETS_EXECUTOR_CONFIG), or `config` read from it, as its
    config, validated now (a typo in a key or a Kubernetes field fails the code location load, naming the file), or
    unchanged when `path` is None."""
    if not path:
        return executor
    from dagster import DagsterInvalidConfigError, job, op, validate_run_config

    if config is None:
        config = _read_yaml(path)
    @op
    def noop() -> None:
        pass

    @job(executor_def=executor)
    def probe() -> None:   # the run config of a job on this executor is where Dagster's API validates its config
        noop()

    try:
        validate_run_config(probe, {"execution": {"config": config}})
    except DagsterInvalidConfigError as e:
        raise ConfigError(f"{EXECUTOR_CONFIG_ENV}={path}: not a valid {kind} executor config: "
                          + "; ".join(err.message for err in e.errors)) from None
    if kind == "k8s":
        check_k8s_sections(config, str(path))
    return executor.configured(config, name=executor.name)


def check_k8s_sections(config: dict, where: str) -> None:
    """The raw Kubernetes sections of a k8s_job_executor config (container_config, pod_spec_config, ...) against the
    kubernetes client's models, the check dagster-k8s itself makes only when it builds a step's Job."""
    import kubernetes.client as k8s
    from dagster_k8s.models import k8s_model_from_dict

    # model, and the required fields dagster-k8s fills in itself when it builds the step's Job
    models = {"container_config": (k8s.V1Container, {"name": "step"}),
              "pod_spec_config": (k8s.V1PodSpec, {"containers": []}),
              "pod_template_spec_metadata": (k8s.V1ObjectMeta, {}), "job_config": (k8s.V1Job, {}),
              "job_metadata": (k8s.V1ObjectMeta, {}), "job_spec_config": (k8s.V1JobSpec, {"template": {}})}
    steps = {"step_k8s_config": config.get("step_k8s_config") or {},
             **{f"per_step_k8s_config.{k}": v for k, v in (config.get("per_step_k8s_config") or {}).items()}}
    for step, sections in steps.items():
        for section, raw in sections.items():
            if section in models:
                model, filled_in = models[section]
                try:
                    k8s_model_from_dict(model, {**filled_in, **raw})
                except Exception as e:
                    raise ConfigError(f"{where}: {step}.{section}: {e}") from None
