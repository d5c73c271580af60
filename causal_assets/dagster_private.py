"""The only uses of Dagster's private modules, each because dagster 1.13.27 exports nothing public that does it:

- `interrupt_captured()`: whether Dagster's own SIGINT handler (`capture_interrupts`, installed while a run
  executes in this process) has swallowed a Ctrl-C; our watchdogs cancel the run when it has.
- `instance_without_compute_logs(home)`: the instance of `home` with its `dagster.yaml`, except that runs keep no
  capture of stdout/stderr (`DagsterInstance.from_config` takes no overrides; that capture pipes output through
  helper processes that Ctrl-C kills mid-write).
- `retry_mode_from_config(config)`, `celery_submit_task(...)`: what `dagster_celery.celery_executor` does with its
  `retries` config and to submit one step as a Celery task, for the watched Celery executor
  (`causal_assets/celery_executor.py`), which must build the same executor and submit the same task.
- `slot_status(claimed)`, `class_data(...)`: the result type of a pool slot claim and the description of a storage
  class, for `causal_assets/pool_storage.py`, which also overrides one private method of Dagster's PostgreSQL event
  log (`_claim_concurrency_slot`): check it on an upgrade too.

Kept in one module, imported where used, so an upgrade of Dagster has one place to check.
"""
from dagster import DagsterInstance

# Instance config naming the no-op compute log manager; Dagster has no public module path for it.
NO_COMPUTE_LOGS = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager",
                                    "class": "NoOpComputeLogManager"}}


def interrupt_captured() -> bool:
    from dagster._utils.interrupts import check_captured_interrupt

    return check_captured_interrupt()


def instance_without_compute_logs(home: str) -> DagsterInstance:
    from dagster._core.instance.ref import InstanceRef

    return DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=NO_COMPUTE_LOGS))


def retry_mode_from_config(config: dict):
    from dagster._core.execution.retries import RetryMode

    return RetryMode.from_config(config)


def celery_submit_task(app, plan_context, step, queue, priority, known_state):
    from dagster_celery.executor import _submit_task

    return _submit_task(app, plan_context, step, queue, priority, known_state)


def slot_status(claimed: bool):
    from dagster._utils.concurrency import ConcurrencySlotStatus

    return ConcurrencySlotStatus.CLAIMED if claimed else ConcurrencySlotStatus.BLOCKED


def class_data(module_name: str, class_name: str, config_yaml: str):
    from dagster._serdes import ConfigurableClassData

    return ConfigurableClassData(module_name, class_name, config_yaml)
