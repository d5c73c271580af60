"""The evaluation's regression gate and run comparison: every evaluation stores its per-query metric values (the
run's history file); one run per benchmark is the *accepted* baseline, chosen explicitly (`causal-assets accept`);
a later run is compared with it query by query, on the questions both scored.

A gated figure fails only where its mean dropped by more than `gate.min_drop` *and* the paired randomization test
(`measures.significance.randomization_p`) gives p < `gate.alpha`: a drop within the questions' noise passes, and
says so. Stored under the storage base:

* `evaluation_history/<benchmark>--<run id>.parquet`: one file per evaluation run (view `evaluation_history`);
* `evaluation_baselines/<benchmark>.parquet`: the accepted run's values (view `evaluation_baselines`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from causal_assets.core.evaluation.answers import is_reference
from causal_assets.core.foundation.errors import CausalAssetsError
from causal_assets.core.foundation.storage import read_parquet, write_parquet_atomic
from causal_assets.core.measures.metrics import parse_metric
from causal_assets.core.measures.significance import bootstrap_ci, randomization_p
from causal_assets.core.registry.gate import DEFAULT_RETRIEVER, GateSpec

HISTORY = "evaluation_history"
BASELINES = "evaluation_baselines"
VALUE_COLUMNS = ["benchmark", "split", "truth", "retriever", "query_id", "metric", "k", "value"]
CHANGED_QUERIES = 5   # the questions that changed most, in each direction


class NoBaseline(CausalAssetsError):
    """No accepted baseline (or no stored run) to compare with."""


# ------------------------------------------------------------------------------------------------ the stores
def history_path(base, benchmark: str, run_id: str):
    return base / HISTORY / f"{benchmark}--{run_id}.parquet"


def baseline_path(base, benchmark: str):
    return base / BASELINES / f"{benchmark}.parquet"


def write_history(base, benchmark: str, run_id: str, values: pd.DataFrame, config_version: str = "") -> None:
    """The run's per-query values (VALUE_COLUMNS), with the run id, the tuned configuration version it evaluated
    and when."""
    frame = values[VALUE_COLUMNS].assign(run_id=run_id, config_version=config_version or "",
                                         evaluated_at=time.time())
    write_parquet_atomic(frame, history_path(base, benchmark, run_id))


def stored_runs(base, benchmark: str) -> list[tuple[str, float, str]]:
    """(run id, evaluated at, config version) of every stored evaluation of `benchmark`, oldest first."""
    folder = base / HISTORY
    out = []
    if folder.exists():
        for path in folder.glob(f"{benchmark}--*.parquet"):
            head = read_parquet(path, columns=["run_id", "evaluated_at", "config_version"]).head(1)
            if len(head):
                out.append((str(head["run_id"].iloc[0]), float(head["evaluated_at"].iloc[0]),
                            str(head["config_version"].iloc[0])))
    return sorted(out, key=lambda r: r[1])


def read_run(base, benchmark: str, run: str | None = None) -> pd.DataFrame:
    """A stored evaluation of `benchmark`: the latest, or the one whose run id (or a prefix of it) or tuned
    configuration version is `run`."""
    runs = stored_runs(base, benchmark)
    if not runs:
        raise NoBaseline(f"benchmark {benchmark!r} has no stored evaluation (run `causal-assets evaluate "
                         f"{benchmark}` first)")
    if run is None:
        chosen = runs[-1]
    else:
        found = [r for r in runs if r[0].startswith(run) or r[2] == run]
        if not found:
            raise NoBaseline(f"benchmark {benchmark!r} has no stored evaluation with run id or configuration "
                             f"version {run!r}; stored: " + ", ".join(r[0][:8] for r in runs[-10:]))
        chosen = found[-1]
    return read_parquet(history_path(base, benchmark, chosen[0]))


def accept(base, benchmark: str, run: str | None = None) -> pd.DataFrame:
    """Make a stored evaluation (default: the latest) the accepted baseline of `benchmark`; returns its values."""
    values = read_run(base, benchmark, run).assign(accepted_at=time.time())
    write_parquet_atomic(values, baseline_path(base, benchmark))
    return values


def read_baseline(base, benchmark: str) -> pd.DataFrame | None:
    path = baseline_path(base, benchmark)
    return read_parquet(path) if path.exists() else None


def resolve(base, ref: str) -> tuple[str, pd.DataFrame]:
    """A `compare` operand: `<benchmark>` or `<benchmark>@baseline` (its accepted baseline), `<benchmark>@latest`,
    or `<benchmark>@<run id prefix | config version>`; returns (its description, its values)."""
    benchmark, _, which = ref.partition("@")
    if which in ("", "baseline"):
        values = read_baseline(base, benchmark)
        if values is None:
            raise NoBaseline(f"benchmark {benchmark!r} has no accepted baseline (`causal-assets accept "
                             f"{benchmark}` accepts its latest evaluation)")
        return f"{benchmark}'s accepted baseline (run {str(values['run_id'].iloc[0])[:8]})", values
    values = read_run(base, benchmark, None if which == "latest" else which)
    return f"{benchmark} run {str(values['run_id'].iloc[0])[:8]}", values


# ------------------------------------------------------------------------------------------------ comparison
@dataclass(frozen=True)
class Difference:
    """One figure of B against A, paired on the questions both scored."""
    split: str
    truth: str
    retriever: str
    metric: str                 # metric@k
    n: int
    mean_a: float
    mean_b: float
    delta: float                # B - A
    low: float
    high: float
    p: float
    worse: list[tuple[str, float]] = field(default_factory=list)   # (query, Δ), most negative first
    better: list[tuple[str, float]] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.retriever} {self.metric} on `{self.split}` (truth {self.truth}): {self.mean_a:.4f} -> "
                f"{self.mean_b:.4f}, Δ {self.delta:+.4f} [{self.low:+.4f}, {self.high:+.4f}], p {self.p:.4f}, "
                f"{self.n} questions")


def paired(a: pd.DataFrame, b: pd.DataFrame, split: str, truth: str, retriever: str, metric: str,
           k: int) -> Difference | None:
    """B - A for one figure on the questions both have, or None where either has none of them."""
    def pick(values):
        sel = values[(values["split"] == split) & (values["truth"] == truth) & (values["retriever"] == retriever)
                     & (values["metric"] == metric) & (values["k"] == k)]
        return sel.groupby("query_id")["value"].first()

    both = pd.concat([pick(a).rename("a"), pick(b).rename("b")], axis=1, join="inner").dropna()
    if both.empty:
        return None
    d = (both["b"] - both["a"]).sort_values(kind="stable")
    lo, hi = bootstrap_ci(d.to_numpy())
    p = randomization_p(both["a"].to_numpy(), both["b"].to_numpy())
    return Difference(split, truth, retriever, f"{metric}@{k}", len(both), float(both["a"].mean()),
                      float(both["b"].mean()), float(d.mean()), lo, hi, p,
                      [(q, float(v)) for q, v in d.head(CHANGED_QUERIES).items() if v < 0],
                      [(q, float(v)) for q, v in d[::-1].head(CHANGED_QUERIES).items() if v > 0])


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, metrics: list[str] | None = None,
                 truths: tuple[str, ...] = ("qrels", "mc_labels", "answers")) -> list[Difference]:
    """Every figure both runs have (per split, truth, retriever and metric@k of `metrics`, default ndcg@10 and,
    where measured, answer gain at its largest k). The answer utility's references (`@gold`, `@labels`, `@random`)
    are left out: where a question has no candidate set of its own, their candidates are the documents the run's
    retrievers returned, so they move with any retriever's change (a hybrid's weight moved `@random` by -0.78 nats on
    the default benchmark)."""
    keys = ["split", "truth", "retriever", "metric", "k"]
    common = a[keys].drop_duplicates().merge(b[keys].drop_duplicates())
    common = common[~common["retriever"].astype(str).map(is_reference)]
    if metrics is not None:
        wanted = {parse_metric(m) for m in metrics}
    else:
        gains = common[common["metric"] == "answer_gain"]["k"]
        wanted = {("ndcg", 10), *([("answer_gain", int(gains.max()))] if len(gains) else [])}
    common = common[[(m, int(k)) in wanted for m, k in zip(common["metric"], common["k"])]]
    common = common[common["truth"].isin(truths)]
    out = []
    for r in common.itertuples(index=False):
        d = paired(a, b, r.split, r.truth, r.retriever, r.metric, int(r.k))
        if d is not None:
            out.append(d)
    return out


def comparison_table(diffs: list[Difference]) -> pd.DataFrame:
    return pd.DataFrame([{"split": d.split, "truth": d.truth, "retriever": d.retriever, "metric": d.metric,
                          "n": d.n, "A": round(d.mean_a, 4), "B": round(d.mean_b, 4), "Δ": f"{d.delta:+.4f}",
                          "Δ 95% interval": f"[{d.low:+.4f}, {d.high:+.4f}]", "p": f"{d.p:.4f}",
                          "worse most": ", ".join(f"{q} ({v:+.2f})" for q, v in d.worse[:3]),
                          "better most": ", ".join(f"{q} ({v:+.2f})" for q, v in d.better[:3])} for d in diffs])


# ------------------------------------------------------------------------------------------------ the gate
@dataclass
class GateOutcome:
    passed: bool
    message: str                               # one line: what failed, or why it passed
    differences: list[Difference] = field(default_factory=list)
    failing: list[Difference] = field(default_factory=list)
    retriever: str = ""
    baseline_run: str = ""

    def metadata(self) -> dict:
        return {"retriever": self.retriever, "baseline_run": self.baseline_run,
                "figures": [{"metric": d.metric, "split": d.split, "truth": d.truth, "n": d.n,
                             "baseline": round(d.mean_a, 4), "this_run": round(d.mean_b, 4),
                             "delta": round(d.delta, 4), "delta_low": round(d.low, 4),
                             "delta_high": round(d.high, 4), "p": round(d.p, 4)} for d in self.differences]}


def gated_retriever(gate: GateSpec, selected: str | None) -> str:
    """The gated retriever: the registry's, else the tuned retriever the tuning selected, else bm25."""
    return gate.retriever or (f"{selected}_tuned" if selected else DEFAULT_RETRIEVER)


def regression_line(d: Difference, gate: GateSpec) -> str:
    return (f"regression: {d.retriever} {d.metric} on `{d.split}` (truth {d.truth}) fell {d.mean_a:.4f} -> "
            f"{d.mean_b:.4f}: Δ {d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}], p {d.p:.4f} on {d.n} questions "
            f"(fails beyond a drop of {gate.min_drop:g} with p < {gate.alpha:g})")


def check_gate(gate: GateSpec, values: pd.DataFrame, baseline: pd.DataFrame | None, selected: str | None,
               default_split: str) -> GateOutcome:
    """This run's `values` against the accepted `baseline` for every gated figure of `gate`."""
    retriever = gated_retriever(gate, selected)
    if not gate.enabled:
        return GateOutcome(True, "gate off (`gate: {enabled: false}` in the benchmark registry)", retriever=retriever)
    if baseline is None or not len(baseline):
        return GateOutcome(True, "no accepted baseline yet: nothing to compare with (`causal-assets accept "
                                 "<benchmark>` accepts the latest evaluation)", retriever=retriever)
    split = gate.split or default_split
    run = str(baseline["run_id"].iloc[0])
    diffs, missing = [], []
    for name in gate.metrics:
        metric, k = parse_metric(name)
        d = paired(baseline, values, split, gate.truth, retriever, metric, k)
        (diffs.append(d) if d is not None else missing.append(name))
    failing = [d for d in diffs if -d.delta > gate.min_drop and d.p < gate.alpha]
    outcome = GateOutcome(not failing, "", diffs, failing, retriever, run)
    if failing:
        outcome.message = "; ".join(regression_line(d, gate) for d in failing)
        return outcome
    parts = []
    for d in diffs:
        if d.delta < 0 and -d.delta > gate.min_drop:
            why = f"a drop within noise (p {d.p:.4f} >= {gate.alpha:g})"
        elif d.delta < 0:
            why = f"a drop within the threshold {gate.min_drop:g}" + (" (significant, but small)"
                                                                     if d.p < gate.alpha else " and within noise")
        else:
            why = "no drop"
        parts.append(f"{d.retriever} {d.metric} on `{d.split}`: Δ {d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}], "
                     f"p {d.p:.4f} on {d.n} questions: {why}")
    for name in missing:
        parts.append(f"{retriever} {name} on `{split}` (truth {gate.truth}): not in both this run and the baseline "
                     f"(run {run[:8]}): not compared")
    outcome.message = f"passed against the baseline of run {run[:8]}: " + "; ".join(parts)
    return outcome
