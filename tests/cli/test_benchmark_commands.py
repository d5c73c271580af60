"""`causal-assets label / tune / evaluate / all` on a user's own folder and questions (the tutorial's example):
refusals before any run or LLM call, the runs they start (one per command, on the instance of $DAGSTER_HOME),
the summary they print, and a labelling run that waits for the `llm` pool saying at once who holds it.

Commands that execute runs import the code location for their --base-path, so they run in a new interpreter
(`run_cli`); the refusals run in this process (`run_main`)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance

from tests.cli.conftest import cli_environment
from tests.cli.test_cli_ux import run_cli, run_main
from tests.dagster.test_run_health import kill_group, start_holder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-documents"


def copy_example(root: Path) -> None:
    for name in ("docs", "questions.jsonl", "corpora.yaml", "benchmarks.yaml"):
        (shutil.copytree if name == "docs" else shutil.copy)(EXAMPLE / name, root / name)


@pytest.fixture
def own(tmp_path, cli_env) -> dict[str, str]:
    """The example's folder, questions and registries copied into tmp_path, and the environment that points the
    CLI at them and at tmp_path's own data directory and instance (as shipped: one `llm` slot)."""
    copy_example(tmp_path)
    return cli_env


@pytest.fixture(scope="module")
def built_example(tmp_path_factory) -> Path:
    """The example's corpus built once for the module by `build brindle_docs` (its index and graph, what `label`
    builds first): its Parquet directory, for the tests whose point comes after the build (`start_built`)."""
    root = tmp_path_factory.mktemp("built_example")
    copy_example(root)
    env = cli_environment(root)
    done = run_cli("build", "brindle_docs", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(env["CAUSAL_ASSETS_BASE_PATH"])


def start_built(own: dict[str, str], built_example: Path) -> None:
    """The test's data directory starts with the module's build (the same example files, built elsewhere)."""
    shutil.copytree(built_example, own["CAUSAL_ASSETS_BASE_PATH"])


def runs(env: dict[str, str]) -> list:
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return instance.get_runs()


def test_a_budget_that_cannot_decide_is_refused_before_any_run(own, monkeypatch, capsys):
    registry = yaml.safe_load(Path(own["CAUSAL_ASSETS_BENCHMARKS"]).read_text())
    registry["benchmarks"][0]["monte_carlo"]["budget"] = 2
    Path(own["CAUSAL_ASSETS_BENCHMARKS"]).write_text(yaml.safe_dump(registry))
    for command in ("label", "all"):
        code, err = run_main(monkeypatch, capsys, command, "brindle", env=own)
        assert code == 2, err
        assert "benchmarks[0].monte_carlo.budget: budget 2 cannot decide a label of a pool of 8 documents" in err
        assert "at least pool size + 2 = 10" in err and "(entry 'brindle')" in err and len(err.splitlines()) == 1
    assert runs(own) == [] and not Path(own["CAUSAL_ASSETS_BASE_PATH"]).exists()


def test_a_questions_file_giving_a_key_twice_is_refused_before_any_run(own, monkeypatch, capsys):
    """`"answer": "7461", "answer": "wrong"` loaded with the answer `wrong` (JSON keeps the last): the labels would
    have scored the solver against it."""
    questions = Path(own["CAUSAL_ASSETS_BENCHMARKS"]).with_name("questions.jsonl")
    lines = questions.read_text().splitlines()
    lines[1] = lines[1].replace('"answer": ', '"answer": "wrong", "answer": ', 1)
    questions.write_text("\n".join(lines) + "\n")
    for command in ("label", "evaluate"):   # --no-build: the refusal comes first, from the registry
        code, err = run_main(monkeypatch, capsys, command, "brindle", "--no-build", env=own)
        assert code == 2, err
        assert f"{questions}:2: key 'answer' given twice in one record" in err and len(err.splitlines()) == 1, err
    assert runs(own) == [] and not Path(own["CAUSAL_ASSETS_BASE_PATH"]).exists()


def test_a_question_longer_than_a_query_is_refused_before_any_run(own, monkeypatch, capsys):
    """A 5 MB question was sent to the solver in each of its 132 trials."""
    questions = Path(own["CAUSAL_ASSETS_BENCHMARKS"]).with_name("questions.jsonl")
    with questions.open("a") as fh:
        fh.write(json.dumps({"id": "huge", "question": "Which port? " * 420_000, "answer": "7461"}) + "\n")
    line = len(questions.read_text().splitlines())
    # --no-build: whatever else happens, nothing is built (the refusal comes first, from the registry)
    code, err = run_main(monkeypatch, capsys, "label", "brindle", "--no-build", env=own)
    assert code == 2, err
    assert f"{questions}:{line}: field 'question' is 5,039,999 characters; the limit is 2,000" in err, err
    assert len(err.splitlines()) == 1 and len(err) < 400
    assert runs(own) == [] and not Path(own["CAUSAL_ASSETS_BASE_PATH"]).exists()


@pytest.mark.parametrize("section, key, value, message", [
    ("monte_carlo", "budget", 10**30, "must be a whole number from 1 to 10,000 or \"auto\""),
    ("monte_carlo", "budget", "16", "must be a whole number from 1 to 10,000 or \"auto\", got '16'"),
    ("monte_carlo", "budget", True, "must be a whole number from 1 to 10,000 or \"auto\", got True"),
    ("monte_carlo", "max_questions", 10**12, "Input should be less than or equal to 1000000"),
    ("pooling", "size", 10**9, "Input should be less than or equal to 1000"),
    ("answers", "ks", [1, 10**9], "Input should be less than or equal to 1000"),
])
def test_a_count_past_its_bound_or_not_a_number_is_refused_before_any_run(own, monkeypatch, capsys, section, key,
                                                                          value, message):
    """`monte_carlo.budget: 10**30` was announced, then looped at full CPU; `"16"` and `true` were taken as 16
    and 1. Every count of the registry is a whole number as written, below its bound (docs/configuration.md)."""
    registry = yaml.safe_load(Path(own["CAUSAL_ASSETS_BENCHMARKS"]).read_text())
    registry["benchmarks"][0].setdefault(section, {})[key] = value
    Path(own["CAUSAL_ASSETS_BENCHMARKS"]).write_text(yaml.safe_dump(registry))
    # --no-build: whatever else happens, nothing is built (the refusal comes first, from the registry)
    code, err = run_main(monkeypatch, capsys, "label", "brindle", "--no-build", env=own)
    assert code == 2, err
    assert f"benchmarks[0].{section}: {section}.{key}" in err and message in err, err
    assert "(entry 'brindle')" in err and len(err.splitlines()) == 1, err
    assert runs(own) == [] and not Path(own["CAUSAL_ASSETS_BASE_PATH"]).exists()


@pytest.mark.parametrize("command", ["evaluate", "tune", "label"])
def test_a_nan_weight_in_the_registry_is_refused_before_any_run(own, monkeypatch, capsys, command):
    """`retrievers: {hybrid: {weight: .nan}}` loaded, and the evaluation ran on NaN scores."""
    path = Path(own["CAUSAL_ASSETS_BENCHMARKS"])
    path.write_text(path.read_text() + "    retrievers: {bm25: {}, hybrid: {weight: .nan}}\n")
    code, err = run_main(monkeypatch, capsys, command, "brindle", "--no-build", env=own)
    assert code == 2, err
    assert "benchmarks[0].retrievers.hybrid.weight: Input should be a finite number (value: nan)" in err, err
    assert "(entry 'brindle')" in err and len(err.splitlines()) == 1
    assert runs(own) == [] and not Path(own["CAUSAL_ASSETS_BASE_PATH"]).exists()


def test_an_unknown_or_unavailable_benchmark_is_one_line(own, monkeypatch, capsys):
    code, err = run_main(monkeypatch, capsys, "evaluate", "brindel", env=own)
    assert code == 2 and "unknown benchmark 'brindel'" in err and "benchmarks: brindle" in err
    Path(own["CAUSAL_ASSETS_BENCHMARKS"]).with_name("questions.jsonl").unlink()
    code, err = run_main(monkeypatch, capsys, "label", "brindle", env=own)
    assert code == 2 and "benchmark 'brindle' is registered, but its file" in err and "does not exist" in err


@pytest.mark.slow
def test_build_is_one_run(own):
    """Each `build` appeared as two runs in the UI (the chunks first, then the rest)."""
    done = run_cli("build", "brindle_docs", "--index-only", env=own)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "corpus 'brindle_docs': built in" in done.stderr
    assert len(runs(own)) == 1
    # A first build cannot say how long before the source is chunked: its run says it once it is, for the rest.
    assert "(how long is said once the source is chunked;" in done.stderr
    said = [line for line in done.stderr.splitlines() if "corpus 'brindle_docs': 8 chunks; " in line]
    assert len(said) == 1 and re.fullmatch(r".*; the rest of the build \(sparse_postings, sparse_vocabulary, "
                                           r"corpus_embeddings\): about \d+ s at the current load \d+\.\d", said[0]), \
        done.stderr


@pytest.mark.slow
def test_evaluate_and_tune_run_through_dagster_and_print_what_they_found(own):
    done = run_cli("evaluate", "brindle", env=own)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "corpus 'brindle_docs': building" in done.stderr        # the index is built first, when missing
    assert "evaluating 6 configured retrievers" in done.stderr and "evaluated in" in done.stderr
    assert "ndcg@10 on `test` against the gold documents: " in done.stdout
    assert f"report: {own['CAUSAL_ASSETS_REPORTS']}/brindle.md" in done.stdout
    # the questions have answers: the answer utility is measured (on by default) and summarized
    assert "answer gain at k=3 on `test` (nats the top 3 add to the solver's log-likelihood" in done.stdout
    assert [r.status.value for r in runs(own)] == ["SUCCESS", "SUCCESS"]   # the build, then the evaluation
    done = run_cli("tune", "brindle", env=own)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tuned on 5 train questions by ndcg@10: selected `" in done.stdout
    assert "robust default" in done.stdout                          # how far the selection can be trusted
    assert "each truth's choice on the tune split: qrels `" in done.stdout and "answers `" in done.stdout
    assert len(runs(own)) == 3
    # the selected retriever by name, with its tuned params, on the benchmark's corpus
    selected = done.stdout.split("selected `", 1)[1].split("`", 1)[0]
    found = run_cli("search", "Which port do the metrics use?", "--tuned", "brindle", "-k", "3", env=own)
    assert found.returncode == 0, found.stderr[-3000:]
    assert f"{selected} as tuned for 'brindle' (configuration " in found.stderr and ", selected)" in found.stderr
    assert found.stdout.splitlines()[0].split()[0] == "1"
    wrong = run_cli("search", "port", "--tuned", "brindle", "--corpus", "other", env=own)
    assert wrong.returncode == 2 and "its retrievers were tuned on corpus 'brindle_docs', not 'other'" in wrong.stderr


@pytest.mark.slow
def test_a_labelling_run_that_waits_for_the_llm_pool_says_at_once_who_holds_it(own, tmp_path):
    holder = start_holder(Path(own["DAGSTER_HOME"]), tmp_path)
    try:
        done = run_cli("label", "brindle", "--wait", "2", env=own)
    finally:
        kill_group(holder)
    assert done.returncode == 3, done.stderr[-3000:]
    err = done.stderr
    waiting = next(line for line in err.splitlines() if "waiting up to 2 s for a free 'llm' slot" in line)
    assert f"pid {holder.pid}, alive" in waiting and "step hold_llm_slot" in waiting
    assert "cancel it in the UI (Runs -> Terminate)" in waiting and "`--wait SECONDS` waits longer" in waiting
    assert "the 'llm' pool has no free slot after" in err
    assert "labelling 8 questions" not in err and "building" not in err   # said first: nothing built, nothing run


@pytest.mark.slow
def test_ctrl_c_of_label_ends_its_run_canceled_with_exit_130(own, built_example, tmp_path):
    """Ctrl-C in the middle of the labelling (after its first question): exit 130, no traceback, the labelling
    run CANCELED, not FAILURE, so nothing of it holds the `llm` pool for the next command."""
    start_built(own, built_example)
    import os
    import signal
    import subprocess
    import sys

    from dagster import DagsterRunStatus

    from tests.cli.test_cli_ux import ROOT as CLI_ROOT
    from tests.dagster.test_run_guards import wait_for

    log = tmp_path / "label.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "causal_assets.cli", "label", "brindle"],
                                cwd=CLI_ROOT, env={**os.environ, "PYTHONPATH": str(CLI_ROOT), **own},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: "labels of 'brindle': question 1/8" in log.read_text(), 600, "the first labelled question",
                 proc, log)
        os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C in the terminal: the whole foreground group
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the interrupted label did not exit: {log.read_text()[-3000:]}") from None
    finally:
        kill_group(proc)
    text = log.read_text()
    assert proc.returncode == 130 and "Traceback" not in text, text[-3000:]
    labelling = [r for r in runs(own) if "mc_trials" in str(r.asset_selection)]
    assert [r.status for r in labelling] == [DagsterRunStatus.CANCELED], [(r.job_name, r.status) for r in runs(own)]


@pytest.mark.slow
def test_label_against_a_failing_endpoint_says_what_failed_within_the_give_up_bound(own, built_example):
    """`label` with CAUSAL_ASSETS_LLM_BASE_URL at an endpoint that fails every call: retry lines on the terminal
    while it tries, then one line naming the endpoint and what failed, within the give-up bound; a 401 is asked
    once and never advised to be re-run. Measured without a bound: every call HTTP 500 kept `label` silent for
    400 s (254 requests), a closed port ran 384 s and never said "connection refused", a 401 was sent 144 times."""
    from tests.conftest import load_scaled_s
    from tests.helpers.endpoint import FakeEndpoint, closed_port_url, status

    key = "sk-label-test-never-shown"
    env = {**own, "CAUSAL_ASSETS_LLM_GIVE_UP_S": "5", "CAUSAL_ASSETS_LLM_MODEL": "fake-model",
           "CAUSAL_ASSETS_LLM_API_KEY": key}
    start_built(own, built_example)   # what `label` would build first

    def label(url: str):
        done = run_cli("label", "brindle", env={**env, "CAUSAL_ASSETS_LLM_BASE_URL": url})
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and "Traceback" not in done.stderr and key not in done.stderr, done.stderr
        assert lines[-1].startswith("causal-assets: labelling of 'brindle' failed: step mc_trials failed: "), lines
        return lines

    with FakeEndpoint(status(500, "internal boom")) as server:
        lines = label(server.url)
    retrying = [line for line in lines if "retrying in" in line]
    assert retrying and all(f"LLM endpoint {server.url}: HTTP 500 (server error)" in line for line in retrying)
    assert f"the LLM endpoint {server.url} failed every attempt for" in lines[-1] and "gave up after 5 s" in lines[-1]
    assert "HTTP 500 (server error)" in lines[-1]
    asked_for = server.requests[-1]["t"] - server.requests[0]["t"]
    assert asked_for < 5 + load_scaled_s(2), asked_for          # the bound, plus the last attempt; no step retry

    url = closed_port_url()
    lines = label(url)
    assert f"the LLM endpoint {url} failed every attempt for" in lines[-1] and "connection refused" in lines[-1]

    # an edited page of the corpus: `label` says so and rebuilds the index before its first call, as search does
    page = sorted((Path(own["CAUSAL_ASSETS_CORPORA"]).parent / "docs").glob("*.md"))[0]
    page.write_text(page.read_text() + "\nAn added closing sentence.\n")
    with FakeEndpoint(status(401, "invalid api key")) as server:
        lines = label(server.url)
    assert any("corpus 'brindle_docs': its source" in line and "contents changed); rebuilding from it" in line
               for line in lines), lines
    assert len(server.requests) == 1                            # not retried, by the client or the step
    assert f"at {server.url} failed after 1 attempt(s) [auth]: HTTP 401 (authentication refused: check the API " \
           "key)" in lines[-1]
    assert not any("re-run" in line or "retrying" in line for line in lines), lines
