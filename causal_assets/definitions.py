"""The code location: every asset, check, job, schedule, sensor, resource and the executor of causal_assets, loaded
from the modules of `causal_assets/defs/` (`dg` projects' defs folder; `defs/resources.py` holds the resources and
the executor)."""
import logging
from pathlib import Path

from dagster import load_from_defs_folder

from causal_assets.defs.resources import storage  # noqa: F401  (the commands check where this process writes)
from causal_assets.run_health import cancel_on_interrupt, home_instance, reap_at_load

# Slots of dead runs (a labelling run killed with SIGKILL) are freed before this process queues any step for them,
# and a run of this process that Ctrl-C interrupts ends CANCELED, not FAILURE.
_home = home_instance()
reap_at_load(_home)
cancel_on_interrupt(_home)



class _OneLocationName(logging.Filter):
    """`dagster ... -m causal_assets.definitions` names the location after the module, the project names it
    `causal_assets` ([tool.dg.project]): Dagster warns of the mismatch on every load, for the app-managed
    components (made in the UI) this project has none of. That one warning is dropped; any other passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "does not match the name 'causal_assets.definitions'" not in record.getMessage()


logging.getLogger("dagster.components.core.component_tree").addFilter(_OneLocationName())
defs = load_from_defs_folder(path_within_project=Path(__file__).parent)
