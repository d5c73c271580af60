"""Automation: a sensor that re-indexes a corpus when its source changes, a nightly schedule that tops up Monte
Carlo labels and re-evaluates every benchmark, and declarative automation that keeps the derived assets
(graph, evaluation) in step with the index.

Defaults, so `dagster dev` does the cheap things without clicks and nothing expensive by surprise:
`corpus_change_sensor` and `automation_sensor` (the graph and entity vectors follow their index) are RUNNING;
`heavy_automation_sensor` (tuning and evaluation, hours of CPU and LLM calls) and `nightly_labels_and_evaluation`
are STOPPED until switched on in the UI or with `dagster sensor start` / `dagster schedule start`. The table of
sensors and schedules is in docs/operations.md ("Automation").
"""
import json
import time

from dagster import (AssetSelection, AutomationConditionSensorDefinition, DefaultScheduleStatus,
                     DefaultSensorStatus, RunRequest, ScheduleEvaluationContext, SensorEvaluationContext,
                     SensorResult, schedule, sensor)

from causal_assets.core.registry.fingerprint import MISSING, source_fingerprint
from causal_assets.defs.partitions import benchmark_partitions, corpus_partitions
from causal_assets.defs.shared import EVALUATION_GROUP, EXPORT_GROUP, LABELS_GROUP, SCALE_OUT_GROUP, TUNING_GROUP
from causal_assets.resources import CorpusRegistry


@sensor(job_name="corpus_index_job", minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def corpus_change_sensor(context: SensorEvaluationContext, corpus_registry: CorpusRegistry) -> SensorResult:
    """Re-index a corpus partition when its source files (or installed package version) change; a source gone
    missing is a warning (a run could only fail), and is re-indexed when it is back."""
    previous = json.loads(context.cursor) if context.cursor else None
    specs = corpus_registry.specs()
    current = {}
    for name in corpus_partitions.get_partition_keys():
        if name not in specs:
            continue
        try:
            current[name] = source_fingerprint(specs[name])
        except Exception as e:  # one unreadable corpus must not stop the sensor for the others
            context.log.warning(f"corpus {name!r}: fingerprint failed ({type(e).__name__}: {str(e)[:300]}); "
                                "keeping the previous one")
            if previous is not None and name in previous:
                current[name] = previous[name]
    requests = []
    # Dagster makes one run per run key, ever: a key of the fingerprint alone never re-indexed content restored to
    # an earlier state (A -> B -> C -> B). The previous tick's time makes each change's key new, and stays the same
    # if this tick is evaluated again.
    stamp = int(context.last_tick_completion_time or time.time())
    for name, fp in current.items():
        before = previous.get(name) if previous is not None else None
        if fp == MISSING:  # a run could only fail; "missing" in the cursor re-indexes it when the source is back
            if before != MISSING:
                context.log.warning(f"corpus {name!r}: its source {specs[name].resolved_path} is missing; not "
                                    "re-indexed until it is back")
        elif previous is not None and before != fp:
            requests.append(RunRequest(run_key=f"{name}:{before}->{fp}@{stamp}", partition_key=name,
                                       tags={"causal_assets/trigger": "corpus_changed"}))
    return SensorResult(run_requests=requests, cursor=json.dumps(current))


@schedule(job_name="labels_and_evaluation_job", cron_schedule="0 2 * * *", default_status=DefaultScheduleStatus.STOPPED)
def nightly_labels_and_evaluation(context: ScheduleEvaluationContext):
    """One run per benchmark partition, every night at 02:00."""
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    for key in benchmark_partitions.get_partition_keys():
        yield RunRequest(run_key=f"{key}:{date}", partition_key=key)


# Asset groups whose runs are long or cost LLM calls: declarative automation starts them only through the sensor
# that is off by default. Starting the UI must not launch an hour of tuning because `search` built an index.
HEAVY_GROUPS = (LABELS_GROUP, TUNING_GROUP, EVALUATION_GROUP, SCALE_OUT_GROUP, EXPORT_GROUP)
HEAVY = AssetSelection.groups(*HEAVY_GROUPS)

automation_sensor = AutomationConditionSensorDefinition(
    "automation_sensor", target=AssetSelection.all() - HEAVY, default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
    description="Keeps the graph and entity vectors of a corpus in step with its index (cheap, no LLM).")

heavy_automation_sensor = AutomationConditionSensorDefinition(
    "heavy_automation_sensor", target=HEAVY, default_status=DefaultSensorStatus.STOPPED,
    minimum_interval_seconds=60,
    description="Re-tunes and re-evaluates a benchmark when its index or labels change (long runs, LLM calls): "
                f"off until switched on. Groups: {', '.join(HEAVY_GROUPS)}.")
