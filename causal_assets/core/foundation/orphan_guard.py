"""Step processes die with the run that started them.

Dagster's multiprocess executor starts one process per step (multiprocessing). If the run worker is killed with
SIGKILL, nothing stops those step processes: measured, orphaned steps keep writing Parquet after `kill -9` of a
materialize. `install()` (called when a step's resources are set up) starts a daemon thread in a
multiprocessing child that waits on the parent's sentinel and exits the process at once when the parent is gone,
so no orphan writes after its run died. In the main process (in-process execution, the CLI, tests) it does nothing.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from multiprocessing.connection import wait

log = logging.getLogger(__name__)
EXIT_CODE = 70
_installed = False
_lock = threading.Lock()


def install() -> bool:
    """Start the watcher once per process; True when this process is a multiprocessing child being watched."""
    global _installed
    parent = multiprocessing.parent_process()
    if parent is None:
        return False
    with _lock:
        if _installed:
            return True
        _installed = True
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])  # ready when the parent process is gone
        log.error("parent process %s died; exiting step process %s so it writes nothing more", parent.pid,
                  os.getpid())
        os._exit(EXIT_CODE)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()
    return True
