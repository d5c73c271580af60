"""The command line's exit codes beyond 0 (done), 1 (failed) and 2 (bad input), shared by `cli.py` and the commands
(a module of its own, so that neither imports the other)."""
EXIT_POOL_BLOCKED = 3     # the `llm` pool stayed held by other runs past `--wait`
EXIT_REGRESSION = 4       # `evaluate --fail-on-regression`: the gate found a significant drop below the baseline
EXIT_INTERRUPTED = 130    # Ctrl-C or SIGTERM: the runs it interrupted end CANCELED
