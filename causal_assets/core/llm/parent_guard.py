"""Run a Python module (`python -m MODULE ARGS...`) that dies with the process that started it.

    python parent_guard.py PARENT_PID MODULE [ARGS...]

`LocalLlamaServer` runs the llama.cpp server in its own session (so `stop()` can signal its whole group), which
also means nothing kills it when the Dagster step that started it is killed with SIGKILL: measured, the server
(~700 MB) stayed up as an orphan after `kill -9` of its run. Here a daemon thread polls the parent pid and, once
the process is re-parented, kills this process group (only if this process leads it) and exits.

Executed by path, not with -m, so starting the server imports nothing of causal_assets; stdlib only.
"""
import os
import runpy
import signal
import sys
import threading
import time

POLL_S = 0.5


def _watch(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            try:
                if os.getpgid(0) == os.getpid():  # we lead our own group (start_new_session): take it all down
                    os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)
        time.sleep(POLL_S)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: parent_guard.py PARENT_PID MODULE [ARGS...]")
    parent, module, args = int(argv[0]), argv[1], argv[2:]
    # Running a script puts its directory first on sys.path; our sibling modules (cache, client, errors, server)
    # must not shadow anything the guarded module imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    threading.Thread(target=_watch, args=(parent,), name="parent-guard", daemon=True).start()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
