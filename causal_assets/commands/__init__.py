"""The `causal-assets` commands. `causal_assets.cli` parses the arguments and imports only the module of the
command it runs: `search` (index only, no Dagster), `ask` and `build` (Dagster runs), `benchmark` (label, tune,
evaluate, all: Dagster runs), `data` (catalog, SQL, labels export). Each module has `run(args) -> exit code`; errors a user can act on become one line on stderr."""
from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings

from causal_assets.core.foundation.errors import CausalAssetsError, RegistryWarning
from causal_assets.settings import NO_CATALOG

MODULES = {"search": "search", "ask": "ask", "build": "build", "catalog": "data", "sql": "data",
           "export_labels": "data", "label": "benchmark", "tune": "benchmark", "evaluate": "benchmark",
           "all_stages": "benchmark", "accept": "gate", "compare": "gate"}
RUNS_JOBS = ("ask", "build", "label", "tune", "evaluate", "all_stages")   # commands that import the code location


def quiet() -> None:
    """No progress bars, library warnings or INFO chatter on the terminal (`--verbose` keeps them). Must run before
    torch / transformers / tqdm are imported: they read these variables at import."""
    for name, value in {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error",
                        "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}.items():
        os.environ.setdefault(name, value)
    warnings.simplefilter("ignore")
    warnings.simplefilter("default", RegistryWarning)   # the product's own word about a registry stays
    warnings.showwarning = lambda message, category, *a, **k: say(f"warning: {message}") \
        if issubclass(category, RegistryWarning) else None
    logging.basicConfig(level=logging.ERROR)
    for handler in logging.getLogger().handlers:  # libraries that set their own logger to DEBUG (bm25s) included
        handler.setLevel(logging.ERROR)
        handler.addFilter(reported_by_the_command)


# Loggers whose ERROR records are each followed by the exception they describe: the command reports that exception
# in its one error line (and `--verbose` shows the log), so on the terminal the record would say it a second time,
# once per attempt of a retried step.
RAISED_AFTER_LOGGING = ("causal_assets.core.llm.client",)


def reported_by_the_command(record: logging.LogRecord) -> bool:
    """False for a record the command's own error line reports (`RAISED_AFTER_LOGGING`, below CRITICAL)."""
    return record.levelno >= logging.CRITICAL or not any(
        record.name == name or record.name.startswith(name + ".") for name in RAISED_AFTER_LOGGING)


def say(message: str) -> None:
    """A status line for the user (stderr, so stdout stays the result)."""
    try:
        print(f"causal-assets: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed or broken stderr must not stop an interrupt's clean-up
        pass


def source_change(settings, base, corpus: str) -> str | None:
    """What changed in the source of `corpus` since its chunks were built, in words (`needs.source_change`: stats
    first, contents only when they differ); None when nothing did. A registry that cannot be read says nothing
    here: the build that needs it reports it."""
    from causal_assets.core.foundation.errors import ConfigError
    from causal_assets.core.registry.corpora import load_corpus_registry
    from causal_assets.core.stored import needs

    try:
        spec = load_corpus_registry(settings.corpora, settings.shared_data).get(corpus)
    except (ConfigError, OSError):
        return None
    return needs.source_change(base, corpus, spec)


def stale_line(corpus: str, change: str, why: str) -> str:
    """What `--no-build` says of a corpus whose source changed: it goes on with the index as built."""
    return (f"corpus {corpus!r}: {change}; {why} uses the index as built, which does not hold the change "
            f"(--no-build): `causal-assets build {corpus}` rebuilds it")


def pass_to_runs(args) -> None:
    """Before a command imports the code location to run its jobs (`ask`, `build`, and `search` building a missing
    index): its resources read their settings when first imported, so without this the runs would write to the
    configured base path while the command reads from --base-path. The configured catalog holds views over the
    configured base path only: runs under another --base-path leave it alone."""
    args.settings.pass_to_code_location("base_path", args.base_path)
    if args.settings.catalog_for(args.base_path) is None:
        args.settings.pass_to_code_location("catalog", NO_CATALOG)


def run(args) -> int:
    if not args.verbose:
        quiet()
    if args.command in RUNS_JOBS:
        pass_to_runs(args)  # before the command module imports the code location
    try:
        module = importlib.import_module(f"causal_assets.commands.{MODULES[args.command]}")
        return getattr(module, args.command)(args)
    except BrokenPipeError:
        # the reader went away (`causal-assets search ... | head`): stop quietly, as a tool killed by SIGPIPE would,
        # and keep Python's flush at exit from failing on the same pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        # Only here: causal_assets.core.llm imports the openai client (seconds), which `search` never needs.
        from causal_assets.core.llm.server import stop_all

        stopped = stop_all()
        say("interrupted" + (f"; stopped the local LLM server (pid {', '.join(map(str, stopped))})" if stopped else ""))
        return 130
    except Exception as e:
        if isinstance(e, FileNotFoundError):
            say(f"{e.filename or e}: not found")
            return 2
        if isinstance(e, (CausalAssetsError, ValueError)) and not args.verbose:
            say(str(e))
            return 2
        if isinstance(e, OSError) and e.strerror and not args.verbose:   # e.g. the results' file on a full disk
            say(f"{e.filename + ': ' if e.filename else ''}{e.strerror}")
            return 1
        raise
