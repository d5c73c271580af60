"""Environment settings (causal_assets/settings.py): one module reads every variable, each bad value is one error
naming the variable and the value, the table of docs/configuration.md lists exactly these variables, and `core` reads
none."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from causal_assets.core.foundation.errors import ConfigError
from causal_assets.settings import VARIABLES, SecretVar, Settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "causal_assets"
NAMES = {v.env for v in VARIABLES}
# Read by the tests or CI only (documented in the variables table as such), never by the package.
TEST_ONLY = {"CAUSAL_ASSETS_FRESH_ASK", "CAUSAL_ASSETS_README_TEST", "CAUSAL_ASSETS_UI_SCREENSHOT_DIR"}
# Package modules that may touch os.environ, and why: none of them reads a setting.
ENVIRON_WRITERS = {
    "causal_assets/settings.py": "reads every variable",
    "causal_assets/__init__.py": "switches Hugging Face hub access off before anything imports it",
    "causal_assets/commands/__init__.py": "quiets progress bars and library logs of the CLI",
}
VAR = re.compile(r"\b(?:CAUSAL_ASSETS_[A-Z0-9_]+|DAGSTER_HOME|OPENAI_API_KEY)\b")


CONFIGURATION_PAGE = ROOT / "docs" / "configuration.md"


def variables_table() -> dict[str, list[str]]:
    """Variable -> cells of its row, from the table of docs/configuration.md, "Variables"."""
    text = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    section = text.split("\n## Variables\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and re.fullmatch(r"`[A-Z0-9_]+`", cells[0]):
            name = cells[0].strip("`")
            assert name not in rows, f"docs/configuration.md: {name} has two rows"
            rows[name] = cells
    return rows


def test_unset_or_blank_is_the_default_and_values_are_stripped():
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({v.env: "  " for v in VARIABLES}) == Settings()
    s = Settings.from_env({"CAUSAL_ASSETS_EMBEDDING_SHARDS": " 8 ", "CAUSAL_ASSETS_EXECUTOR": " K8S ",
                           "CAUSAL_ASSETS_REPORTS": "/srv/reports", "CAUSAL_ASSETS_POOL_WAIT_S": "0",
                           "CAUSAL_ASSETS_ANN_MIN_CHUNKS": "0", "CAUSAL_ASSETS_MAX_CONCURRENT": "3",
                           "CAUSAL_ASSETS_LLM_BASE_URL": "http://127.0.0.1:11434/v1"})
    assert (s.embedding_shards, s.executor, s.reports, s.pool_wait_s, s.ann_min_chunks, s.concurrency()) == \
        (8, "k8s", Path("/srv/reports"), 0.0, 0, 3)
    assert s.llm_base_url == "http://127.0.0.1:11434/v1"
    assert Settings().concurrency() == (os.cpu_count() or 1)


@pytest.mark.parametrize("name, bad, expected", [
    ("CAUSAL_ASSETS_MAX_CONCURRENT", "zero", "expected a positive integer"),
    ("CAUSAL_ASSETS_EMBEDDING_SHARDS", "0", "expected a positive integer"),
    ("CAUSAL_ASSETS_LABEL_SHARDS", "-2", "expected a positive integer"),
    ("CAUSAL_ASSETS_LABEL_SHARDS", "1.5", "expected a positive integer"),
    ("CAUSAL_ASSETS_ANN_MIN_CHUNKS", "2e5", "expected a whole number"),
    ("CAUSAL_ASSETS_POOL_WAIT_S", "soon", "expected a number of seconds"),
    ("CAUSAL_ASSETS_POOL_WAIT_S", "-1", "expected a number of seconds"),
    ("CAUSAL_ASSETS_POOL_WAIT_S", "nan", "expected a number of seconds"),
    ("CAUSAL_ASSETS_LLM_GIVE_UP_S", "inf", "expected a number of seconds"),
    ("CAUSAL_ASSETS_EXECUTOR", "dask", "expected one of multiprocess, in_process, k8s, docker, celery"),
    ("CAUSAL_ASSETS_LLM_BASE_URL", "127.0.0.1:8080", "expected an http(s) URL"),
    # a superscript digit passes str.isdigit() but not int(); a huge shard count would build that many partition
    # keys; a port out of range would fail only inside the run, after three retries
    ("CAUSAL_ASSETS_MAX_CONCURRENT", "\u00b2", "expected a positive integer"),
    ("CAUSAL_ASSETS_EMBEDDING_SHARDS", "99999999999", "expected at most 1024 shards"),
    ("CAUSAL_ASSETS_LLM_BASE_URL", "http://127.0.0.1:99999/v1", "Port out of range 0-65535"),
    # an unclosed IPv6 bracket made urllib raise a ValueError that every command printed as a traceback
    ("CAUSAL_ASSETS_LLM_BASE_URL", "http://[::1/v1", "Invalid IPv6 URL"),
    # checked by the settings, not only where the Definitions load: the CLI's search and a labelling step read
    # them too
    ("CAUSAL_ASSETS_EMBEDDING_BACKEND", "onnx_int8", "expected one of torch, onnx, onnx-int8"),
    ("CAUSAL_ASSETS_SOLVER", "gpt4", "expected one of gemma3-270m, smollm2-135m"),
])
def test_a_bad_value_is_one_error_naming_the_variable_and_the_value(name, bad, expected):
    with pytest.raises(ConfigError, match=re.escape(f"{name}={bad!r}: {expected}")):
        Settings.from_env({name: bad})


@pytest.mark.parametrize("url", ["http://alice:hunter2pw@127.0.0.1:8080/v1", "htp://alice:hunter2pw@host/v1"])
def test_credentials_in_the_llm_url_are_refused_and_never_shown(url):
    """They were sent as Basic auth in place of the key, and the URL (the cache's endpoint name) reached the call
    cache and the run history; an invalid URL's error echoed them."""
    with pytest.raises(ConfigError) as e:
        Settings.from_env({"CAUSAL_ASSETS_LLM_BASE_URL": url})
    assert "hunter2pw" not in str(e.value) and "alice" not in str(e.value)
    assert "***REDACTED***@" in str(e.value)


def test_a_bad_value_stops_the_cli_with_one_line(monkeypatch, capsys):
    from causal_assets.cli import main

    monkeypatch.setenv("CAUSAL_ASSETS_POOL_WAIT_S", "soon")
    assert main(["--help"]) == 2
    err = capsys.readouterr().err
    assert err == "causal-assets: CAUSAL_ASSETS_POOL_WAIT_S='soon': expected a number of seconds (0 or more)\n"


@pytest.mark.parametrize("command", [["sql", "select 1"], ["search", "x", "--no-build"], ["label", "x"]])
def test_an_unparsable_llm_url_stops_every_command_with_one_line(monkeypatch, capsys, command):
    """Even commands that never call the LLM (`sql`) read every setting first: one line, exit 2."""
    from causal_assets.cli import main

    monkeypatch.setenv("CAUSAL_ASSETS_LLM_BASE_URL", "http://[::1/v1")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("causal-assets: CAUSAL_ASSETS_LLM_BASE_URL='http://[::1/v1': Invalid IPv6 URL; ") and \
        err.count("\n") == 1, err


def test_the_choices_the_settings_check_are_the_ones_the_code_knows():
    from causal_assets.core.index.dense import BACKENDS
    from causal_assets.core.llm.models import LOCAL_MODELS
    from causal_assets.settings import EMBEDDING_BACKENDS, LOCAL_SOLVERS
    assert EMBEDDING_BACKENDS == BACKENDS and LOCAL_SOLVERS == tuple(LOCAL_MODELS)


def test_an_api_key_is_recorded_as_set_never_as_its_value():
    s = Settings.from_env({"CAUSAL_ASSETS_LLM_API_KEY": "sk-secret-value", "OPENAI_API_KEY": "sk-other"})
    assert s.llm_api_key == SecretVar("CAUSAL_ASSETS_LLM_API_KEY") and s.openai_api_key == SecretVar("OPENAI_API_KEY")
    assert "sk-secret-value" not in repr(s) and "sk-other" not in repr(s)


def test_the_llm_resource_reads_the_key_through_envvar_with_openai_as_fallback():
    from dagster import EnvVar

    from causal_assets.resources import LOCAL_MODEL_ALIAS, llm_from_settings

    llm = llm_from_settings(Settings.from_env({"OPENAI_API_KEY": "sk-x"}))
    assert llm.api_key == EnvVar("OPENAI_API_KEY") and llm.base_url is None and llm.model == LOCAL_MODEL_ALIAS
    llm = llm_from_settings(Settings.from_env({"OPENAI_API_KEY": "sk-x", "CAUSAL_ASSETS_LLM_API_KEY": "sk-y",
                                               "CAUSAL_ASSETS_LLM_MODEL": "m"}))
    assert llm.api_key == EnvVar("CAUSAL_ASSETS_LLM_API_KEY") and llm.model == "m"
    assert llm_from_settings(Settings()).api_key is None


def test_the_variables_table_lists_every_variable_with_its_default():
    rows = variables_table()
    missing, extra = NAMES - set(rows), set(rows) - NAMES - TEST_ONLY
    assert not missing, f"read by causal_assets/settings.py but not in docs/configuration.md: {sorted(missing)}"
    assert not extra, f"in docs/configuration.md but not read by causal_assets/settings.py: {sorted(extra)}"
    for v in VARIABLES:
        assert f"`{v.default}`" in rows[v.env][2], (v.env, v.default, rows[v.env][2])
    used_by_tests = "\n".join(p.read_text(encoding="utf-8")
                              for p in [*(ROOT / "tests").rglob("*.py"), ROOT / ".ci" / "run"])
    for name in TEST_ONLY:
        assert name in rows and rows[name][1].startswith("tests only"), name
        assert name in used_by_tests, f"{name} is documented as a test setting but no test reads it"


def test_the_package_reads_the_environment_only_through_settings():
    readers, unknown = [], []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".yaml") or "__pycache__" in path.parts:
            continue
        rel, text = path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
        if re.search(r"os\.environ|getenv|environ\[|environ\.get", text) and rel not in ENVIRON_WRITERS:
            readers.append(rel)
        unknown += [f"{rel}: {n}" for n in set(VAR.findall(text)) - NAMES]
    assert readers == [], f"read the environment outside causal_assets/settings.py: {readers}"
    assert unknown == [], f"name a variable that causal_assets/settings.py does not read: {unknown}"
    for rel in ENVIRON_WRITERS:
        if rel != "causal_assets/settings.py":  # they only set defaults for libraries, never read ours
            assert not VAR.search((ROOT / rel).read_text(encoding="utf-8")), rel


def test_core_never_touches_the_environment():
    """`git grep -n "os.environ" causal_assets/core` is empty (and no getenv either)."""
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (PACKAGE / "core").rglob("*.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"os\.environ|getenv|putenv", line)]
    assert hits == []


def test_settings_import_nothing_heavy():
    heavy = ["pandas", "numpy", "torch", "dagster", "pydantic", "yaml", "duckdb", "sentence_transformers"]
    code = (f"import sys, json\nimport causal_assets.settings\n"
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_registries_expand_shared_data_given_as_an_argument(tmp_path):
    from causal_assets.core.registry.benchmarks import load_benchmark_registry
    from causal_assets.core.registry.corpora import available_corpora, load_corpus_registry

    corpora, benchmarks = tmp_path / "corpora.yaml", tmp_path / "benchmarks.yaml"
    corpora.write_text("corpora:\n  - {name: default, loader: python_package, package: networkx}\n"
                       "  - {name: here, loader: beir, path: '${SHARED_DATA}/here'}\n")
    benchmarks.write_text("benchmarks:\n  - {name: here, loader: beir, corpus: here, path: '${SHARED_DATA}/here', "
                          "splits: [test], eval_splits: [test]}\n")
    data = tmp_path / "data"
    (data / "here").mkdir(parents=True)
    assert load_corpus_registry(corpora, data)["here"].resolved_path == data / "here"
    assert available_corpora(corpora, data) == ["default", "here"]
    assert available_corpora(corpora, tmp_path / "elsewhere") == ["default"]
    spec = load_benchmark_registry(benchmarks, data, corpora)["here"]
    assert spec.resolved_path == data / "here" and spec.available()
    assert spec.model_copy().resolved_path == data / "here"


def test_every_variable_reaches_what_it_configures_in_the_code_location(tmp_path):
    """The Definitions loaded in a fresh process with every variable set: each value arrives where it acts."""
    registry = ROOT / "causal_assets" / "registry"
    (tmp_path / "corpora.yaml").write_text((registry / "corpora.yaml").read_text())
    (tmp_path / "benchmarks.yaml").write_text((registry / "benchmarks.yaml").read_text())
    env = {"CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "parquet"), "CAUSAL_ASSETS_CATALOG": str(tmp_path / "c.duckdb"),
           "CAUSAL_ASSETS_REPORTS": str(tmp_path / "reports"), "CAUSAL_ASSETS_QUERIES": str(tmp_path / "queries"),
           "CAUSAL_ASSETS_LLM_CACHE": str(tmp_path / "llm.sqlite"), "CAUSAL_ASSETS_MODELS_DIR": str(tmp_path / "m"),
           "CAUSAL_ASSETS_CORPORA": str(tmp_path / "corpora.yaml"),
           "CAUSAL_ASSETS_BENCHMARKS": str(tmp_path / "benchmarks.yaml"),
           "CAUSAL_ASSETS_SHARED_DATA": str(Settings.from_env().shared_data),
           "CAUSAL_ASSETS_EMBEDDING_BACKEND": "torch", "CAUSAL_ASSETS_EMBEDDING_DEVICE": "cuda",
           "CAUSAL_ASSETS_EMBEDDING_SHARDS": "3", "CAUSAL_ASSETS_LABEL_SHARDS": "5",
           "CAUSAL_ASSETS_ANN_MIN_CHUNKS": "7", "CAUSAL_ASSETS_LLM_BASE_URL": "http://127.0.0.1:9/v1",
           "CAUSAL_ASSETS_LLM_MODEL": "m1", "CAUSAL_ASSETS_LLM_API_KEY": "sk-not-printed",
           "CAUSAL_ASSETS_SOLVER": "smollm2-135m", "CAUSAL_ASSETS_EXECUTOR": "multiprocess",
           "CAUSAL_ASSETS_MAX_CONCURRENT": "2", "CAUSAL_ASSETS_LLM_GIVE_UP_S": "12.5"}
    code = """
import json
from causal_assets.definitions import defs
from causal_assets.defs import corpus, scale_out, search
from causal_assets.defs.partitions import corpus_partitions
from causal_assets.resources import ANN
r = defs.resources
execu = defs.resolve_job_def("corpus_index_job").executor_def
limit = execu.config_schema.as_field().config_type.fields["multiprocess"].config_type.fields["max_concurrent"]
emb = corpus.EmbeddingConfig()
print(json.dumps({
    "storage": [r["storage"].base_path, r["storage"].catalog_path, r["storage"].reports_dir],
    "llm": [r["llm"].base_url, r["llm"].model, r["llm"].cache_path, r["llm"].solver, r["llm"].models_dir,
            type(r["llm"].api_key).__name__, r["llm"].give_up_after_s],
    "registries": [r["corpus_registry"].path, r["benchmark_registry"].path, r["benchmark_registry"].corpora],
    "embedding": [emb.backend, emb.device, emb.models_dir],
    "shards": [scale_out.EMBEDDING_SHARDS, scale_out.LABEL_SHARDS], "ann": ANN.min_chunks,
    "queries": [str(search.QUERIES_DIR), search.SearchConfig().queries_dir],
    "max_concurrent": limit.default_value, "partitions": "default" in corpus_partitions.get_partition_keys(),
}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sk-not-printed" not in out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    t = str(tmp_path)
    assert got == {
        "storage": [f"{t}/parquet", f"{t}/c.duckdb", f"{t}/reports"],
        "llm": ["http://127.0.0.1:9/v1", "m1", f"{t}/llm.sqlite", "smollm2-135m", f"{t}/m", "EnvVar", 12.5],
        "registries": [f"{t}/corpora.yaml", f"{t}/benchmarks.yaml", f"{t}/corpora.yaml"],
        "embedding": ["torch", "cuda", f"{t}/m"], "shards": [3, 5], "ann": 7,
        "queries": [f"{t}/queries", f"{t}/queries"], "max_concurrent": 2, "partitions": True}


def test_the_configured_catalog_belongs_to_the_configured_base_path(tmp_path):
    """`CAUSAL_ASSETS_CATALOG=none` means no catalog; a command's other --base-path gets none of the configured one."""
    settings = Settings.from_env({"CAUSAL_ASSETS_BASE_PATH": str(tmp_path / "pq"),
                                  "CAUSAL_ASSETS_CATALOG": str(tmp_path / "c.duckdb")})
    assert settings.catalog_for(str(tmp_path / "pq") + "/") == tmp_path / "c.duckdb"
    assert settings.catalog_for(str(tmp_path / "elsewhere")) is None
    assert Settings.from_env({"CAUSAL_ASSETS_CATALOG": "none"}).catalog is None
