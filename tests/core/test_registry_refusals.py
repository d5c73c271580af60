"""What cannot work is refused when the registry loads, before any LLM time is spent, in one line naming the file,
the entry and the field: a Monte Carlo budget too small to decide a label (the floor derived from the estimators'
intervals), `monte_carlo` on questions without answers, a corpus that is not registered, splits without questions,
NaN / infinite / out-of-range labelling numbers, a JSON key given twice, a registry that is not UTF-8 text; and
typos, YAML alias bombs, impossible or duplicated qrels and malformed HotpotQA records, each one short error."""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import yaml

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.sections import budget_for
from causal_assets.core.corpus.beir import load_beir_qrels, load_beir_queries
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.registry.corpora import load_corpus_registry
from causal_assets.core.foundation.errors import ConfigError, CorpusError
from causal_assets.core.labeling.design import balanced_design, bernoulli_design
from causal_assets.core.labeling.estimators import naive, regression
from causal_assets.core.labeling.runner import LabelingParams
from tests.conftest import SCIFACT, require

HOTPOT = {"name": "hotmini", "loader": "hotpotqa", "corpus": "hotpotqa", "path": "/nonexistent.jsonl",
          "splits": ["dev"], "eval_splits": ["dev"]}


def _write(tmp_path, *entries, name="benchmarks.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"benchmarks": list(entries)}) if name.endswith(".yaml")
                    else json.dumps({"benchmarks": list(entries)}))
    return path


def _questions(tmp_path, records: list[dict]):
    """A folder corpus and a questions file beside a corpus registry that has both; returns the corpora path."""
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "a.md").write_text("The port is 7461.\n")
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx"},
        {"name": "mydocs", "loader": "folder", "path": "docs"}]}))
    return corpora


QUESTION = {"name": "mine", "loader": "questions", "corpus": "mydocs", "path": "questions.jsonl"}
ANSWERED = [{"id": f"q{i}", "question": f"Question {i}?", "answer": "7461", "gold": ["a.md"]} for i in range(8)]


# ------------------------------------------------------------------------------------------------ the budget
@pytest.mark.parametrize("pool, estimator", [(8, "regression"), (10, "regression"), (3, "adaptive"), (10, "naive")])
def test_the_budget_floor_is_where_the_estimators_interval_becomes_finite(pool, estimator):
    """`min_budget` is derived, not picked: one trial fewer and every interval the estimator gives is infinite (so
    every label is UNCERTAIN whatever the solver says); at the floor a strong effect is decided."""
    from causal_assets.core.registry.sections import min_budget

    floor = min_budget(pool, estimator)
    rng = np.random.default_rng(0)

    def design(trials: int) -> np.ndarray:
        if estimator == "naive":   # the floor makes a decision possible: two trials on each side of document 0
            x = bernoulli_design(pool, trials, 0.5, rng)
            x[:, 0] = np.arange(trials) % 2 == 0
            return x
        while True:   # a design of full rank (a random one can repeat a column: then fewer effects are estimable)
            x = balanced_design(pool, trials, rng)
            f = np.column_stack([np.ones(trials), 2.0 * x - 1])
            if np.linalg.matrix_rank(f) == min(f.shape):
                return x

    def intervals(trials: int) -> list[tuple[float, float, str]]:
        x = design(trials)
        y = 10.0 * x[:, 0] + rng.normal(0, 0.1, trials)   # document 0 raises the outcome by 10 nats
        result = naive(x, y, 2.0, 0.2, rule="ci") if estimator == "naive" else \
            regression(x, y, 2.0, 0.2, interactions=False)
        return [(d.ci_low, d.ci_high, d.label) for d in result.docs]

    below = intervals(floor - 1)
    if estimator != "naive":
        assert all(not math.isfinite(lo) and not math.isfinite(hi) and lab == "UNCERTAIN" for lo, hi, lab in below)
    else:
        assert not all(math.isfinite(lo) and math.isfinite(hi) for lo, hi, _ in below)
    at = intervals(floor)
    assert math.isfinite(at[0][0]) and math.isfinite(at[0][1]) and at[0][2] == "YES"


@pytest.mark.parametrize("mc, pooling, message", [
    ({"budget": 2}, {}, r"monte_carlo\.budget: budget 2 cannot decide a label of a pool of 10 documents: .* at least "
                        r"pool size \+ 2 = 12"),
    ({"budget": 10}, {"size": 9}, r"monte_carlo\.budget: budget 10 cannot decide a label of a pool of 9 documents"),
    ({"budget": 3, "estimator": "naive"}, {}, r"monte_carlo\.budget: budget 3 cannot decide a label: the naive "
                                              r"estimator needs at least 4"),
])
def test_a_budget_that_cannot_decide_a_label_is_refused_naming_it(tmp_path, mc, pooling, message):
    entry = {**HOTPOT, **({"monte_carlo": mc} if mc else {}), **({"pooling": pooling} if pooling else {})}
    with pytest.raises(ConfigError, match=rf"benchmarks\.yaml: benchmarks\[0\]\.{message}.*\(entry 'hotmini'\)"):
        load_benchmark_registry(_write(tmp_path, entry))
    from causal_assets.core.registry.sections import budget_problem

    assert budget_problem(12, 10) is None and budget_problem(4, 10, "naive") is None


@pytest.mark.parametrize("pool, budget", [(1, 3), (5, 12), (8, 24), (10, 24), (15, 24), (16, 48), (20, 48)])
def test_the_default_budget_is_derived_from_the_pool_size(tmp_path, pool, budget):
    # `budget: auto`: the first orthogonal block and half a block more where a label is undecided
    spec = load_benchmark_registry(_write(tmp_path, {**HOTPOT, "pooling": {"size": pool}}))["hotmini"]
    assert spec.budget == budget and budget_for("auto", pool) == budget
    assert LabelingParams().budget == "auto" and LabelingParams().budget_for(pool) == budget
    for bad in ("16", True, "automatic", 0):
        with pytest.raises(ValueError, match=r"monte_carlo\.budget must be a whole number from 1 to .* or \"auto\""):
            LabelingParams(budget=bad)


def test_the_shipped_registry_budgets_decide():
    from causal_assets.core.registry.sections import budget_problem

    for spec in load_benchmark_registry().values():
        assert budget_problem(spec.budget, spec.pool_size, spec.estimator) is None, spec.name


def test_a_run_config_budget_that_cannot_decide_is_refused_before_trials():
    params = LabelingParams(budget=4)
    with pytest.raises(ValueError, match=r"monte_carlo\.budget: budget 4 cannot decide a label of a pool of 6"):
        params.check_budget(6)
    params.check_budget(2)


# ------------------------------------------------------------------------------- answers, corpora and splits
def test_monte_carlo_on_questions_without_answers_is_refused(tmp_path):
    corpora = _questions(tmp_path, [{"id": f"q{i}", "question": f"Q{i}?", "gold": ["a.md"]} for i in range(6)])
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.monte_carlo: no question of .*questions\.jsonl has an "
                                          r"'answer', and Monte Carlo labels score the solver's likelihood"):
        load_benchmark_registry(_write(tmp_path, {**QUESTION, "monte_carlo": {"budget": 16}}), corpora=corpora)
    # without `monte_carlo` the same file is a benchmark to evaluate
    assert load_benchmark_registry(_write(tmp_path, QUESTION), corpora=corpora)["mine"].loader == "questions"


def test_monte_carlo_on_beir_queries_without_answers_is_refused(tmp_path):
    scifact = require(SCIFACT)
    entry = {"name": "sf", "loader": "beir", "corpus": "scifact", "path": str(scifact), "splits": ["test"],
             "eval_splits": ["test"], "monte_carlo": {"budget": 16}}
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.monte_carlo: the queries of .*queries\.jsonl carry no "
                                          r"answers \(metadata\.answer\)"):
        load_benchmark_registry(_write(tmp_path, entry))


def test_beir_queries_with_answers_in_their_metadata_are_labellable(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "The port is 7461."}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "Which port?", "metadata": {"answer": ["7461", '
                                          '"port 7461"]}}\n{"_id": "q2", "text": "Other?"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t1\n")
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "python_package",
                                                    "package": "networkx"},
                                                   {"name": "mine", "loader": "beir", "path": str(folder)}]}))
    from causal_assets.core.registry.benchmark_loading import load_benchmark

    spec = load_benchmark_registry(_write(tmp_path, {"name": "b", "loader": "beir", "corpus": "mine",
                                                     "path": str(folder), "splits": ["test"], "eval_splits": ["test"],
                                                     "monte_carlo": {"budget": 16}}), corpora=corpora)["b"]
    bench = load_benchmark(spec, "test")
    assert bench.answers == {"q1": "7461"} and bench.aliases == {"q1": ["port 7461"]}
    assert bench.labelable_ids() == ["q1"]


def test_a_corpus_that_is_not_registered_is_refused(tmp_path):
    """Today's registry silently left such a benchmark out of the partitions."""
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.corpus: 'nosuch' is not a registered corpus \(the corpus "
                                          r"registry .* has: 2wiki, cosqa, default, hotpotqa, musique, scifact\)"):
        load_benchmark_registry(_write(tmp_path, {**HOTPOT, "corpus": "nosuch"}))


def test_the_shipped_benchmarks_follow_a_corpus_registry_of_the_users_own(tmp_path):
    """With only CAUSAL_ASSETS_CORPORA set, the shipped benchmarks over corpora it leaves out go with them (every
    command had refused to start); the user's own benchmark registry is still held to its corpora."""
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text(yaml.safe_dump({"corpora": [{"name": "default", "loader": "python_package",
                                                    "package": "networkx"}]}))
    specs = load_benchmark_registry(corpora=corpora)
    assert specs and {s.corpus for s in specs.values()} == {"default"}
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.corpus: 'hotpotqa' is not a registered corpus"):
        load_benchmark_registry(_write(tmp_path, HOTPOT), corpora=corpora)


@pytest.mark.parametrize("splits", [["dev", "holdout"], ["train", "validation"]])
def test_a_hash_half_loader_refuses_a_split_no_question_has(tmp_path, splits):
    entry = {**HOTPOT, "splits": splits, "eval_splits": [splits[-1]]}
    with pytest.raises(ConfigError, match=rf"benchmarks\[0\]\.splits: '{splits[-1]}' names no question: its splits "
                                          r"are dev \(every question\) and the stable hash halves train and test"):
        load_benchmark_registry(_write(tmp_path, entry))


def test_a_beir_split_without_judgements_is_refused(tmp_path):
    scifact = require(SCIFACT)
    entry = {"name": "sf", "loader": "beir", "corpus": "scifact", "path": str(scifact), "splits": ["train", "dev"],
             "eval_splits": ["dev"]}
    with pytest.raises(ConfigError, match=r"splits: 'dev' has no judgements: .*qrels has test, train"):
        load_benchmark_registry(_write(tmp_path, entry))


def test_relative_paths_are_relative_to_the_registry_file(tmp_path, monkeypatch):
    corpora = _questions(tmp_path, ANSWERED)
    monkeypatch.chdir(tmp_path.parent)   # not the registry's directory
    spec = load_benchmark_registry(_write(tmp_path, QUESTION), corpora=corpora)["mine"]
    assert spec.resolved_path == tmp_path / "questions.jsonl" and spec.available()
    assert load_corpus_registry(corpora)["mydocs"].resolved_path == tmp_path / "docs"


# ------------------------------------------------------------------------------------------ numbers and files
@pytest.mark.parametrize("key, value, message", [
    ("threshold_nats", float("nan"), r"monte_carlo\.threshold_nats: Input should be a finite number"),
    ("question_weight", float("inf"), r"monte_carlo\.question_weight: Input should be a finite number"),
    ("threshold", float("-inf"), r"monte_carlo\.threshold: Input should be a finite number"),
    ("alpha", float("nan"), r"monte_carlo\.alpha: Input should be a finite number"),
    ("threshold", 1.5, r"monte_carlo\.threshold: Input should be less than 1"),
    ("threshold", -0.1, r"monte_carlo\.threshold: Input should be greater than or equal to 0"),
    ("threshold_nats", -2, r"monte_carlo\.threshold_nats: Input should be greater than or equal to 0"),
    ("question_weight", -1, r"monte_carlo\.question_weight: Input should be greater than or equal to 0"),
])
def test_non_finite_and_out_of_range_monte_carlo_numbers_are_refused(tmp_path, key, value, message):
    """A NaN threshold made every label UNCERTAIN (a +5.2-nat document included); an infinite question weight failed
    mc_labels only after every trial was paid. JSON, since YAML's `.nan` / `.inf` read the same."""
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps({"benchmarks": [{**HOTPOT, "monte_carlo": {key: value}}]}, allow_nan=True))
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(path)
    yaml_path = _write(tmp_path, {**HOTPOT, "monte_carlo": {key: value}})
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(yaml_path)


@pytest.mark.parametrize("entry, field", [
    ({"retrievers": {"hybrid": {"weight": float("nan")}}}, "retrievers.hybrid.weight"),
    ({"retrievers": {"fusion": {"members": {"hybrid": {"weight": float("inf")}}}}},
     "retrievers.fusion.members.hybrid.weight"),
    ({"tuning": {"spaces": {"hybrid": {"weight": [0.5, float("-inf")]}}}}, r"tuning.spaces.hybrid.weight\[1\]"),
    ({"tuning": {"encoder": {"lr": float("nan")}}}, "tuning.encoder.lr"),
    ({"options": {"halves_of": float("nan")}}, "options.halves_of"),
])
def test_a_number_that_is_not_finite_is_refused_anywhere_in_an_entry(tmp_path, entry, field):
    """`retrievers: {hybrid: {weight: .nan}}` loaded and the evaluation ran on NaN scores: sections of free-form
    params are not typed, so every number of an entry is checked, in YAML and in JSON (NaN, 1e999)."""
    message = rf"benchmarks\[0\]\.{field}: Input should be a finite number \(value: -?(nan|inf)\) \(entry 'hotmini'\)"
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(_write(tmp_path, {**HOTPOT, **entry}))
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps({"benchmarks": [{**HOTPOT, **entry}]}).replace("Infinity", "1e999"))
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(path)
    corpora = tmp_path / "corpora.yaml"
    corpora.write_text("corpora:\n  - {name: default, loader: python_package, package: networkx}\n"
                       "  - {name: docs, loader: folder, path: /tmp, options: {chunk_chars: .inf}}\n")
    with pytest.raises(ConfigError, match=r"corpora\[1\]\.options\.chunk_chars: Input should be a finite number"):
        load_corpus_registry(corpora)


@pytest.mark.parametrize("override", [{"threshold_nats": float("nan")}, {"question_weight": float("inf")},
                                      {"threshold": 2.0}, {"alpha": 0.0}, {"budget": 0}])
def test_run_config_numbers_are_checked_too(override):
    with pytest.raises(ValueError, match=rf"monte_carlo\.{next(iter(override))} must be"):
        LabelingParams(**override)


def test_a_json_key_given_twice_is_refused(tmp_path):
    """JSON kept the last of two `path`s silently; the YAML loader refused the same already."""
    path = tmp_path / "benchmarks.json"
    path.write_text('{"benchmarks": [{"name": "hotmini", "loader": "hotpotqa", "corpus": "hotpotqa", '
                    '"path": "/a.jsonl", "path": "/b.jsonl", "splits": ["dev"], "eval_splits": ["dev"]}]}')
    with pytest.raises(ConfigError, match=r"benchmarks\.json: malformed JSON \(key 'path' given twice in one object "
                                          r"\(\{.*'name': 'hotmini'"):
        load_benchmark_registry(path)
    path.write_text('{"benchmarks": [], "benchmarks": []}')
    with pytest.raises(ConfigError, match=r"key 'benchmarks' given twice"):
        load_benchmark_registry(path)


def test_a_registry_that_is_not_utf8_or_is_a_directory_is_one_line_naming_it(tmp_path):
    path = tmp_path / "benchmarks.yaml"
    path.write_bytes(b"benchmarks:\n  - name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"benchmarks\.yaml:2: not UTF-8 \(invalid continuation byte at byte 25\); "
                                          r"a registry is UTF-8 text"):
        load_benchmark_registry(path)
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"dir\.yaml: is a directory, not a registry file"):
        load_benchmark_registry(tmp_path / "dir.yaml")
    with pytest.raises(ConfigError, match=r"dir\.yaml: is a directory"):
        load_corpus_registry(tmp_path / "dir.yaml")


# ---- Typos, alias bombs, bad qrels and malformed HotpotQA records --------------------------------------------------


ENTRY = {"name": "hotmini", "loader": "hotpotqa", "corpus": "hotpotqa", "path": "/nonexistent.jsonl",
         "splits": ["dev"], "eval_splits": ["dev"]}


def _registry(tmp_path, **extra):
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [{**ENTRY, **extra}]}))
    return path


@pytest.mark.parametrize("section, value, message", [
    ("monte_carlo", {"budjet": 4}, r"monte_carlo\.budjet: unknown key; known keys: .*budget"),
    ("monte_carlo", {"budget": "many"}, r"monte_carlo\.budget: Value error, must be a whole number from 1 to 10,000 or \"auto\", got 'many'"),
    ("monte_carlo", {"outcome": "vibes"}, r"monte_carlo\.outcome: Input should be 'qa_likelihood', 'likelihood', 'success' or 'both'"),
    ("monte_carlo", {"split": "test"}, r"monte_carlo.split 'test' is not one of splits \['dev'\]"),
    ("pooling", {"sise": 8}, r"pooling\.sise: unknown key; known keys: size"),
    ("pooling", {"size": 0}, r"pooling\.size: Input should be greater than or equal to 1"),
    ("answers", {"kz": [1, 3]}, r"answers\.kz: unknown key; known keys: ks, max_questions, enabled, verdicts"),
    ("answers", {"ks": [1, 0]}, r"answers\.ks\.1: Input should be greater than or equal to 1"),
    ("answers", {"ks": [-3]}, r"answers\.ks\.0: Input should be greater than or equal to 1"),
    ("answers", {"ks": []}, r"answers\.ks: List should have at least 1 item"),
    ("answers", {"ks": [2.5]}, r"answers\.ks\.0: Input should be a valid integer"),
    ("answers", {"max_questions": 0}, r"answers\.max_questions: Input should be greater than or equal to 1"),
    ("answers", {"enabled": "maybe"}, r"answers\.enabled: Input should be a valid boolean"),
])
def test_registry_typos_are_refused(tmp_path, section, value, message):
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(_registry(tmp_path, **{section: value}))


@pytest.mark.parametrize("section, value, message", [
    ("monte_carlo", {"budget": 10**30}, r"monte_carlo\.budget: Value error, must be a whole number from 1 to 10,000 or \"auto\", got 10{30}"),
    ("monte_carlo", {"batch": 10**6}, r"monte_carlo\.batch: Input should be less than or equal to 10000"),
    ("monte_carlo", {"budget": "16"}, r"monte_carlo\.budget: Value error, must be a whole number from 1 to 10,000 or \"auto\", got '16'"),
    ("monte_carlo", {"budget": True}, r"monte_carlo\.budget: Value error, must be a whole number from 1 to 10,000 or \"auto\", got True"),
    ("monte_carlo", {"budget": 16.0}, r"monte_carlo\.budget: Value error, must be a whole number from 1 to 10,000 or \"auto\", got 16\.0"),
    ("monte_carlo", {"max_consecutive_errors": 10**5}, r"max_consecutive_errors: Input should be less than or equal"),
    ("pooling", {"size": 10**4}, r"pooling\.size: Input should be less than or equal to 1000"),
    ("pooling", {"max_doc_chars": 10**7}, r"pooling\.max_doc_chars: Input should be less than or equal to 100000"),
    ("pooling", {"hard_negatives": "4"}, r"pooling\.hard_negatives: Input should be a valid integer"),
    ("answers", {"ks": [1, 10**6]}, r"answers\.ks\.1: Input should be less than or equal to 1000"),
    ("answers", {"ks": list(range(1, 200))}, r"answers\.ks: List should have at most 100 items"),
    ("answers", {"max_questions": 10**9}, r"answers\.max_questions: Input should be less than or equal to 1000000"),
    ("tuning", {"passes": 10**9}, r"tuning\.passes: Input should be less than or equal to 1000"),
    ("tuning", {"cv_repeats": "3"}, r"tuning\.cv_repeats: Input should be a valid integer"),
    ("tuning", {"max_queries": {"causal": 10**12}}, r"tuning\.max_queries\.causal: Input should be less than or equal"),
    ("tuning", {"encoder": {"epochs": 10**6}}, r"tuning\.encoder\.epochs: Input should be less than or equal to 1000"),
    ("tuning", {"reranker": {"max_length": 10**9}}, r"tuning\.reranker\.max_length: Input should be less than or equal"),
])
def test_every_count_is_a_whole_number_below_its_bound(tmp_path, section, value, message):
    """A budget of 10**30 was announced, then looped at full CPU; `"16"` and `true` were read as 16 and 1. Every
    count and size of a benchmark has a generous, finite bound (`foundation.limits`) and is an integer as written."""
    with pytest.raises(ConfigError, match=message):
        load_benchmark_registry(_registry(tmp_path, **{section: value}))


def test_labelling_params_of_run_config_have_the_same_bounds():
    """Run config reaches the labelling through `LabelingParams` (mc_config), checked before any trial."""
    for name in ("budget", "batch"):
        with pytest.raises(ValueError, match=rf"monte_carlo\.{name} must be a whole number from 1 to 10,000(| or \"auto\"), got 10{{30}}"
                                             .replace("10{30}", str(10**30))):
            LabelingParams(**{name: 10**30})
    with pytest.raises(ValueError, match=r"monte_carlo\.max_consecutive_errors must be a whole number from 1 to 1,000"):
        LabelingParams(max_consecutive_errors=10**6)
    assert LabelingParams(budget=10_000).budget == 10_000   # at the bound: taken


def test_answers_section_defaults_and_accepted_keys(tmp_path):
    """`answers:` (the evaluation's answer utility): on unless `enabled: false`, k = 1, 3 on 10 questions; the
    section as given stays a plain dict."""
    spec = load_benchmark_registry(_registry(tmp_path))["hotmini"]
    assert spec.answers == {} and spec.answer_settings.ks == [1, 3]
    assert spec.answer_settings.max_questions == 10 and spec.answer_settings.enabled is True
    given = {"ks": [2, 5], "max_questions": 8, "enabled": False}
    spec = load_benchmark_registry(_registry(tmp_path, answers=given))["hotmini"]
    assert spec.answers == given and spec.answer_settings.ks == [2, 5] and spec.answer_settings.enabled is False


def test_monte_carlo_accepts_the_labelling_keys(tmp_path):
    mc = {"estimator": "adaptive", "threshold": 0.1, "budget": 24, "batch": 8, "alpha": 0.05, "seed": 1,
          "max_consecutive_errors": 3, "split": "dev", "max_questions": 30, "outcome": "qa_likelihood",
          "solver": "gemma3-270m", "threshold_nats": 0.5}
    spec = load_benchmark_registry(_registry(tmp_path, monte_carlo=mc, pooling={"size": 8, "max_doc_chars": 400}))
    assert spec["hotmini"].monte_carlo == mc                       # still a plain dict, as given
    assert spec["hotmini"].monte_carlo.get("budget") == 24


@pytest.mark.parametrize("where", ["name: *g", "name: bombq\n    loader: beir\n    path: x\n    options: {x: *g}"])
def test_yaml_alias_bomb_gives_a_short_error(tmp_path, where):
    """A bomb in a name and one in an entry's free-form `options` are both refused with a short error (expanded,
    7 levels cost 13 s and 1 GB in `tuned_retriever_configs`; 8 killed the step)."""
    bomb = ("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
            f"benchmarks:\n  - {where}\n")
    path = tmp_path / "benchmarks.yaml"
    path.write_text(bomb)
    assert len(bomb) < 400
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"benchmarks.yaml: expands to more than 100,000 values") as e:
        load_benchmark_registry(path)
    assert time.perf_counter() - started < 2
    assert len(str(e.value)) < 1000, len(str(e.value))


@pytest.mark.parametrize("score", ["-5", "nan", "inf", "1e308"])
def test_qrels_with_impossible_scores_are_refused(tmp_path, score):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{score}\n")
    with pytest.raises(CorpusError, match=r"test\.tsv:3: score .* must be a finite number in \[0, 100\]"):
        load_beir_qrels(tmp_path, "test")


def test_duplicated_qrels_pairs_and_query_ids_are_refused(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t0\n")
    with pytest.raises(CorpusError, match=r"test\.tsv:3: duplicate judgement for query-id 'q1', corpus-id 'd1'"):
        load_beir_qrels(tmp_path, "test")
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n')
    with pytest.raises(CorpusError, match=r"queries\.jsonl:2: duplicate query _id 'q1'"):
        load_beir_queries(tmp_path)


GOOD = {"_id": "x1", "question": "Q?", "answer": "A", "context": [["T1", ["s1. ", "s2."]], ["T2", ["u."]]],
        "supporting_facts": [["T1", 0]]}


@pytest.mark.parametrize("change, message", [
    ({"context": []}, r"h\.jsonl:1: context must be a non-empty list"),
    ({"supporting_facts": None}, r"h\.jsonl:1: missing field 'supporting_facts'"),
    ({"supporting_facts": []}, r"h\.jsonl:1: supporting_facts must be a non-empty list"),
    ({"supporting_facts": [["T1"]]}, r"h\.jsonl:1: supporting_facts\[0\] must be \[title, sentence index\]"),
    ({"supporting_facts": ["T1", 0]}, r"h\.jsonl:1: supporting_facts\[0\] must be \[title, sentence index\]"),
    ({"supporting_facts": [["Nope", 0]]}, r"h\.jsonl:1: supporting_facts title 'Nope' is not a context paragraph"),
])
def test_malformed_hotpotqa_records_name_file_and_line(tmp_path, change, message):
    path = tmp_path / "h.jsonl"
    record = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(CorpusError, match=message):
        load_hotpotqa(path, "h")
    path.write_text(json.dumps(GOOD) + "\n")
    chunks, questions = load_hotpotqa(path, "h")
    assert len(chunks) == 2 and questions[0].supporting_titles == ("T1",)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_registry_nested_too_deeply_is_one_error(tmp_path, suffix):
    """20,000 nested lists: one error, not a RecursionError traceback."""
    path = tmp_path / f"benchmarks{suffix}"
    path.write_text('{"benchmarks": ' + "[" * 20_000 + "]" * 20_000 + "}")
    with pytest.raises(ConfigError, match=rf"benchmarks\{suffix}: nested too deeply to read"):
        load_benchmark_registry(path)

