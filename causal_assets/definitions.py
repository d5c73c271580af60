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


def _load() -> object:
    """From a checkout (or an editable install) the `dg` project's defs folder; from an installed wheel, which has
    no project file beside the package to name the project, the same `defs` package loaded as a module."""
    here = Path(__file__).resolve().parent
    project = here.parent / "pyproject.toml"
    if project.is_file() and "[tool.dg" in project.read_text(encoding="utf-8"):
        return load_from_defs_folder(path_within_project=here)
    import warnings

    import causal_assets.defs as defs_root
    from dagster.components import load_defs

    with warnings.catch_warnings():   # deprecated in favour of load_from_defs_folder, which needs the project file
        warnings.simplefilter("ignore", DeprecationWarning)
        return load_defs(defs_root, project_root=here.parent)


defs = _load()
