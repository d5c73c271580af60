"""Shared fixtures: small subsets of the real benchmarks in ../shared/data (read from there, never copied
into the repository) and isolated storage for Dagster materializations."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import yaml

from causal_assets.settings import Settings

SHARED = Settings.from_env().shared_data
SCIFACT = SHARED / "scifact"
HOTPOT = SHARED / "hotpotqa" / "hotpot_dev_distractor_200.jsonl"


def pytest_configure(config) -> None:
    """SIGINT and SIGTERM as a terminal leaves them, for this process and every process the tests start. A suite run
    in the background of a non-interactive shell (`cmd &`, nohup, a CI runner) starts with SIGINT *ignored*, children
    inherit an ignored signal across exec, and `dagster dev` maps SIGTERM to SIGINT's disposition: the UI's and the
    production profile's servers then ignored SIGTERM and were SIGKILLed after the 60 s / 30 s grace (measured:
    ~100 s of a 14-min suite run with nohup, 2.5 s shutdowns in the foreground)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.dont_write_bytecode and not os.environ.get("PYTEST_XDIST_WORKER"):
        compile_checkout()


def compile_checkout() -> None:
    """The checkout's bytecode, written once before the tests start (only for modules changed since). Where
    PYTHONDONTWRITEBYTECODE is set (many container images, CI runners) nothing else writes it, and each of the few
    hundred processes the tests start (commands, runs, steps, servers, workers) compiled every module of the package
    it imported again: a tenth of `import causal_assets.definitions`."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for folder in ("causal_assets", "benchmarks", "tests"):
        compileall.compile_dir(root / folder, quiet=1)


# Modules of tests/core that run real processes or servers (the sandbox, endpoints, killed workers) or fit neural
# models: in the fast lane, not in the unit lane.
NOT_UNIT = {"test_sandbox.py", "test_sandbox_escapes.py", "test_code_benchmark.py", "test_llm.py",
            "test_llm_endpoint.py", "test_cores.py", "test_labeling_faults.py", "test_orphan_guard.py",
            "test_search_startup.py", "test_reranker_tuning.py", "test_encoder_tuning.py", "test_labels_early_stop.py"}


# The longest groups, in CPU seconds of one full run (self and waited-for children, the same run for all): handed
# out first, longest first, so that the two workers finish together (the rest follow in collection order). Refresh
# from a run's `--durations` when a file's cost changes much.
GROUP_SECONDS = {
    "tests/cli/test_benchmark_commands.py": 460, "tests/benchmarks/test_quick.py": 400,
    "tests/deploy/test_celery.py": 290, "e2e": 180, "tests/cli/test_gate_commands.py": 150,
    "tests/cli/test_cli_ux.py": 140, "tests/deploy/test_dg.py": 90, "tests/deploy/test_production.py": 90,
    "tests/core/test_reranker_tuning.py": 75, "tests/core/test_sandbox.py": 65, "tests/core/test_sandbox_escapes.py": 50,
    "tests/cli/test_corpus_changes.py": 70, "tests/dagster/test_reliability.py": 70,
    "tests/dagster/test_labels.py": 70, "tests/dagster/test_tuning.py": 70, "tests/dagster/test_run_health.py": 70,
}

# Once README command 1 has run in the checkout (its lineage's last output exists), tests/e2e also runs the README's
# and the docs' walkthrough and the tutorial: then it is the longest group.
COMMAND_1_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "parquet" / "evaluation_metrics" / \
    "default.parquet"
E2E_AFTER_COMMAND_1 = {"e2e": 1000}


def xdist_group(nodeid: str) -> str:
    """The group of a test under `--dist loadgroup`: its file, or `e2e` for every file of tests/e2e (their tests
    drive the commands on the checkout's own `data/`: the README walkthrough fills it, the tutorial and the
    screenshots read it, so they run in order on one worker). Read from the node id alone (any `@name` suffix an
    xdist release may add is ignored), so the controller, which collects nothing, computes it too."""
    path = nodeid.split("::", 1)[0].split("@", 1)[0]
    return "e2e" if Path(path).parent.name == "e2e" else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per core and one more. A third of the suite's time is spent waiting (on servers
    starting, daemons ticking, killed processes being noticed): on a 2-core machine the suite used 156% of the CPU
    with two workers and 171% with three."""
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` as the README's test command means it: every test of a group on one worker, in file order,
    so a module's fixtures (a loaded model, a built index, a server) are built once; groups handed out in the order
    of the collection (`pytest_collection_modifyitems`: the longest first), not by their number of tests.

    xdist's own loadgroup reads the group from a suffix it appends to each node id, which pytest 9.2's structured node
    ids no longer take: without this scheduler every test was handed out alone, a file's tests ran on both workers
    and each worker built the module fixtures of a file again whenever it came back to it."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FileGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False   # the collection's order, not the groups' sizes
    return FileGroups(config, log)


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by markers
def pytest_collection_modifyitems(config, items) -> None:
    """The unit lane (`-m unit`): tests/core's pure-logic tests, none slow, none with a real model or process. Under
    xdist, the groups (`xdist_group`) in the order they are handed out: the longest first."""
    for item in items:
        path = Path(str(item.fspath))
        if (path.parent.name == "core" and path.parent.parent.name == "tests" and path.name not in NOT_UNIT
                and not any(item.get_closest_marker(m) for m in ("slow", "llm"))
                and "scorer" not in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.unit)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = Path(__file__).parent.parent
        seconds = {**GROUP_SECONDS, **(E2E_AFTER_COMMAND_1 if COMMAND_1_OUTPUT.exists() else {})}
        items.sort(key=lambda item: -seconds.get(xdist_group(str(Path(str(item.fspath)).relative_to(root))), 0))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(path: Path) -> Path:
    """`path` (shared benchmark data), or skip the test when it is missing; under CI (CI=true) a missing data set
    is a failure, never a silent skip (set CAUSAL_ASSETS_SHARED_DATA to where the data lives)."""
    if not path.exists():
        message = (f"benchmark data not found at {path} (shared data dir {SHARED}; set CAUSAL_ASSETS_SHARED_DATA)")
        if in_ci():
            pytest.fail(message + "; CI must run every test", pytrace=False)
        pytest.skip(message)
    return path


SYSTEM_PACKAGES = Path(__file__).parent.parent / "scripts" / "system-packages.txt"


def system_packages(path: Path = SYSTEM_PACKAGES) -> dict[str, tuple[list[str], str]]:
    """package -> (how it is found: commands or path globs, what needs it), from the list `scripts/install` installs
    from (scripts/system-packages.txt)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            package, found_as, needed_by = line.split(None, 2)
            out[package] = (found_as.split(","), needed_by)
    return out


def system_tool(package: str) -> str | None:
    """Where the Debian package `package` of scripts/system-packages.txt is found (its first command on PATH or
    path glob that exists, as scripts/system-packages looks for it), or None."""
    for spec in system_packages()[package][0]:
        found = sorted(glob.glob(spec)) if "/" in spec else [shutil.which(spec)]
        if found and found[-1]:
            return found[-1]
    return None


def _unusable(package: str) -> str | None:
    """Why a package that is installed cannot serve here, or None."""
    if package == "bubblewrap":
        from causal_assets.core.sandbox.bubblewrap import bwrap_available

        if not bwrap_available():
            return "bwrap is installed but cannot create the sandbox's namespaces here (user namespaces disabled?)"
    return None


def require_system(package: str) -> str:
    """The path of the Debian package `package`'s command (scripts/system-packages.txt), or skip the test naming
    the package and how to install it; under CI (CI=true) a missing package is a failure, never a silent skip
    (`.ci/run` installs them through scripts/install). The `system(package)` marker calls this before a test."""
    path = system_tool(package)
    why = _unusable(package) if path else (f"{package} is not installed: `bash scripts/install` installs it as root or "
                                          f"with passwordless sudo (or: apt-get install -y {package})")
    if why:
        if in_ci():
            pytest.fail(f"{why}; CI must run every test", pytrace=False)
        pytest.skip(why)
    return path


@pytest.hookimpl(tryfirst=True)   # before the test's fixtures start anything
def pytest_runtest_setup(item) -> None:
    for mark in item.iter_markers("system"):
        require_system(*mark.args)


def load_scaled_s(base_s: float, max_factor: float = 10.0) -> float:
    """A time limit of `base_s` on a quiet machine, scaled by the runnable processes per core (the 1-minute load
    average): a test asserts what the product does, not how fast the machine is (at load 9 on 2 cores a llama.cpp
    call takes ~5 times as long as quiet)."""
    return base_s * max(1.0, min(max_factor, os.getloadavg()[0] / (os.cpu_count() or 1)))


def make_beir_subset(src: Path, dst: Path, n_docs: int) -> Path:
    """The first `n_docs` real documents plus the real queries/qrels (every split) that only need those documents."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "qrels").mkdir(exist_ok=True)
    lines = (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n_docs]
    (dst / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = {json.loads(l)["_id"] for l in lines}
    qids = set()
    for qrels_file in (src / "qrels").glob("*.tsv"):
        qrel_lines = qrels_file.read_text().splitlines()
        kept = [l for l in qrel_lines[1:] if l.split("\t")[1] in ids]
        (dst / "qrels" / qrels_file.name).write_text("\n".join([qrel_lines[0], *kept]) + "\n")
        qids |= {l.split("\t")[0] for l in kept}
    queries = [l for l in (src / "queries.jsonl").read_text().splitlines() if json.loads(l)["_id"] in qids]
    (dst / "queries.jsonl").write_text("\n".join(queries) + "\n")
    return dst


@pytest.fixture(scope="session")
def scifact_small(tmp_path_factory) -> Path:
    return make_beir_subset(require(SCIFACT), tmp_path_factory.mktemp("scifact_small"), 120)


@pytest.fixture
def small_registry(tmp_path, scifact_small) -> Path:
    """Registry whose partition names match the shipped ones but point at small real sources."""
    hotpot_small = tmp_path / "hotpot_small.jsonl"
    hotpot_small.write_text("\n".join(require(HOTPOT).read_text().splitlines()[:3]) + "\n")
    reg = {"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "scifact", "loader": "beir", "path": str(scifact_small)},
        {"name": "hotpotqa", "loader": "hotpotqa", "path": str(hotpot_small)},
    ]}
    path = tmp_path / "corpora.yaml"
    path.write_text(yaml.safe_dump(reg))
    benchmarks = {"benchmarks": [
        {"name": "scifact", "loader": "beir", "corpus": "scifact", "path": str(scifact_small),
         "splits": ["train", "test"], "eval_splits": ["test"], "tune_split": "train"},
        {"name": "hotpotqa", "loader": "hotpotqa", "corpus": "hotpotqa", "path": str(hotpot_small),
         "splits": ["dev", "train", "test"], "eval_splits": ["dev"], "tune_split": "train", "validator": "answer_f1",
         "retrievers": {"bm25": {}, "dense": {}, "hybrid": {}, "cascade": {}, "entity_first": {"k": 2}},
         # the answer utility (on by default) has its own tests, which switch it on here (test_evaluation.py);
         # elsewhere every evaluation and tuning of this benchmark would load and run the solver for it
         "answers": {"enabled": False}},
    ]}
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump(benchmarks))
    return path


@pytest.fixture
def resources(tmp_path, small_registry):
    from causal_assets.resources import LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage

    storage = Storage(base_path=str(tmp_path / "parquet"), catalog_path=str(tmp_path / "catalog.duckdb"),
                      reports_dir=str(tmp_path / "reports"))
    return {"storage": storage, "corpus_registry": CorpusRegistry(path=str(small_registry)),
            "benchmark_registry": BenchmarkRegistry(path=str(small_registry.parent / "benchmarks.yaml")),
            "io_manager": ParquetIOManagerFactory(storage=storage),
            # Lazy: the local server starts only if a step actually calls the LLM.
            # the shipped default: as many llama.cpp threads as other processes leave cores free
            "llm": LLM(cache_path=str(tmp_path / "llm_calls.sqlite"))}


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    """Where the packaged Gemma-3-270M is assembled from its wheel's parts (~250 MB written and sha256-checked, a
    few seconds): once per test session, for every test that loads it."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True, scope="session")
def _dagster_home(tmp_path_factory):
    os.environ.setdefault("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster_home")))


def mark_built(base: Path, corpus: str) -> None:
    """Empty files where a corpus's index and graph go: enough for the query inbox's "is it built?" check, which
    looks only at which files exist (a search run would need the real ones)."""
    from causal_assets.core.stored import needs
    from causal_assets.core.foundation.storage import asset_path

    for asset in needs.required(dense=True, graph=True):
        path = Path(str(asset_path(base, asset, corpus)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


@pytest.fixture(scope="module")
def torch_on_free_cores():
    """Torch's intra-op threads pinned, for a module's tests, to the cores other processes leave free (measured once
    at its start, as the llama.cpp tests do with `free_cores`), then restored. Torch's default is every core, and
    its threads wait for each other at every operation: beside other work on 2 cores a cross-encoder fit ran 10-16
    times slower on two threads than on one (measured at load 8: 55-80 s vs 5-6 s for the same six steps). One
    count for the whole module keeps fits compared within a test on the same arithmetic."""
    import torch

    from causal_assets.core.llm.cores import free_cores

    before = torch.get_num_threads()
    torch.set_num_threads(min(before, free_cores()))
    yield
    torch.set_num_threads(before)
