"""The Celery app of a causal_assets worker: `dagster-celery worker start -A causal_assets.celery_app -y FILE`.

`dagster_celery.app` (the tasks that run a step, a run or a resumed run, configured from the worker's YAML, which
`dagster-celery worker start` turns into the `dagster_celery_config` module), and in addition a started task names
its worker (`task_track_started`), which is how the run's orchestrator tells a lost worker from a long step
(`causal_assets/celery_executor.py`). The code location itself is imported by each task from the run's job origin.
"""
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task, create_task

app = make_app()
app.conf.task_track_started = True

execute_plan = create_task(app)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
