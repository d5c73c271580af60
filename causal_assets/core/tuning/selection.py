"""How a retriever is selected on a few train questions: nested cross-validated figures over repeated fold splits
(`nested_scores`, `repeated_folds`, `FoldChoices` for combinations), and the choice among retrievers by them with
the one-standard-error rule for combinations and the robust default (`compare_nested`, `choose`). Why: docs/pipeline.md
("Choosing among retrievers")."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.registry.retrievers import ingredients
from causal_assets.core.retrievers.learned.retriever import query_folds
from causal_assets.core.registry.tuning import ORDER, TuningSpec


def fold_groups(spec: TuningSpec, bench: Benchmark) -> dict[str, dict[str, float]] | None:
    """The qrels `query_folds` keeps queries together by (`spec.cv_groups`), or None: each query alone."""
    return bench.qrels if spec.cv_groups == "shared_documents" else None


def nested_scores(per_trial: list[dict[str, float]], folds: list[list[str]]) -> dict[str, float]:
    """Per query, the figure a searched retriever is selected by (module docstring): each fold's queries scored at
    the trial point with the best mean over the other folds' queries (ties: the earliest, as the search's own
    choice). `per_trial`: per point, the metric per query; queries outside every fold are left out."""
    out: dict[str, float] = {}
    for _, held in held_folds(folds, per_trial):
        i = best_without(per_trial, set(held))
        out.update({q: per_trial[i].get(q, 0.0) for q in held})
    return out


def repeated_folds(spec: TuningSpec, bench: Benchmark) -> list[list[list[str]]]:
    """The train queries' CV folds, drawn `spec.cv_repeats` times (fold seeds `spec.seed`, `spec.seed` + 1, ...): the
    learned model's folds (passed to `cross_validate` and its fold models) and every nested figure's."""
    judged = [q for q in bench.query_ids() if q in bench.qrels]
    return [query_folds(judged, spec.cv_folds, seed, fold_groups(spec, bench)) for seed in spec.fold_seeds()]


def mean_per_query(figures: list[dict[str, float]]) -> dict[str, float]:
    """Per query, the mean of its figure over `figures` (one per fold split) that hold it, in first-seen order; a
    figure equal on every split is kept as it is (a floating-point mean of equal values can move its last bit, and
    ties between trial points must stay ties)."""
    out: dict[str, list[float]] = {}
    for figure in figures:
        for q, v in figure.items():
            out.setdefault(q, []).append(v)
    return {q: float(v[0]) if all(x == v[0] for x in v) else float(np.mean(v)) for q, v in out.items()}


def held_folds(folds: list[list[str]], per_trial: list[dict[str, float]]) -> Iterator[tuple[int, list[str]]]:
    """(fold number, its queries that `per_trial` scored) for each fold holding any of them."""
    scored = set().union(*per_trial) if per_trial else set()
    for f, fold in enumerate(folds):
        held = [q for q in fold if q in scored]
        if held:
            yield f, held


def best_without(per_trial: list[dict[str, float]], held: set[str]) -> int:
    """The trial point with the best mean over the queries outside `held` (ties: the earliest)."""
    means = [np.mean([v for q, v in pq.items() if q not in held]) if any(q not in held for q in pq) else 0.0
             for pq in per_trial]
    return max(range(len(per_trial)), key=lambda i: (means[i], -i))


def paired_margin(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    """(mean of a - b, one standard error of that mean, queries) over the queries both were scored on."""
    on = sorted(set(a) & set(b))
    d = np.array([a[q] - b[q] for q in on])
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
    return (float(d.mean()) if len(d) else float("nan")), se, len(on)


def compare_nested(best: dict[str, dict[str, Any]], nested: dict[str, dict[str, float]], splits: int = 1,
                   robust_default: str | None = None) -> str:
    """Sets each retriever's `selection_value` (the mean of its nested scores over the queries it was scored on),
    `selectable` (a combination only where it beats every retriever it is built on, recursively, by more than one
    standard error of the paired difference on their common queries; `selection_margin` says by how much, or which
    one it did not beat) and marks the `selected` one (`choose`).

    `robust_default` (`TuningSpec.robust_default`): the winner must also beat it by more than one standard error
    of their paired difference, else the default is selected. A few train questions (a user's file of 10-50) do not
    separate the candidates, and the winner by a hair was the noise's choice (docs: the robust default's
    measurement). Returns one line saying how far the selection can be trusted."""
    scored = set().union(*(set(v) for v in nested.values())) if nested else set()
    for name, scores in nested.items():
        best[name]["selection_value"] = float(np.mean(list(scores.values()))) if scores else float("nan")
        best[name]["selection_evaluation"] = f"nested cv over {best[name]['trials']} points, on {len(scores)} " \
            f"train queries" + (" (a sample)" if len(scores) < len(scored) else "") + \
            (f", the mean over {splits} fold splits" if splits > 1 else "")

    def built_on(name: str) -> list[str]:
        out: list[str] = []
        for m in ingredients(name, best[name].get("params") or {}):
            if m in best and m not in out:
                out += [m, *(x for x in built_on(m) if x not in out and x != m)]
        return out

    for name in nested:
        margins = []
        for m in built_on(name):
            if m not in nested:
                continue
            on = sorted(set(nested[name]) & set(nested[m]))
            d = np.array([nested[name][q] - nested[m][q] for q in on])
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
            margins.append((m, float(d.mean()) if len(d) else float("nan"), se))
        lost = [(m, diff, se) for m, diff, se in margins if not diff > se]
        best[name]["selectable"] = not lost
        if margins:
            best[name]["selection_margin"] = "; ".join(
                f"{'+' if diff >= 0 else ''}{diff:.4f} over {m} (1 SE {se:.4f})" for m, diff, se in margins) + \
                (f": not beyond the noise of {', '.join(m for m, _, _ in lost)}" if lost else "")
    chosen = choose({n: v for n, v in nested.items() if best[n]["selectable"]})
    note = ""
    if chosen is not None and robust_default is not None:
        chosen, note = _against_default(best, nested, chosen, robust_default)
    for name in best:
        best[name].pop("selected", None)
    if chosen is not None:
        best[chosen]["selected"] = True
    return note


def _against_default(best: dict[str, dict[str, Any]], nested: dict[str, dict[str, float]], chosen: str,
                     default: str) -> tuple[str, str]:
    """(the retriever to select, why): `chosen` if it beats `default` beyond one standard error, else `default`."""
    if default not in nested or not best[default].get("selectable", True):
        return chosen, (f"`{chosen}` selected by its nested train figure (the robust default `{default}` was not "
                        f"tuned here, so nothing checks that the margin is more than noise)")
    if chosen != default:
        diff, se, n = paired_margin(nested[chosen], nested[default])
        if diff > se:
            return chosen, (f"`{chosen}` selected: {diff:+.4f} over the robust default `{default}` on {n} train "
                            f"queries (1 SE {se:.4f}), beyond the noise")
        return default, (f"`{default}` selected, the robust default: the best nested train figure, `{chosen}`'s, "
                         f"is {diff:+.4f} over it on {n} train queries (1 SE {se:.4f}), within the noise, so the "
                         f"train questions do not tell the two apart")
    others = [m for m in nested if m != default and best[m].get("selectable", True)]
    if not others:
        return chosen, f"`{chosen}` selected, the only retriever tuned"
    margins = {m: paired_margin(nested[default], nested[m]) for m in others}
    runner = min(margins, key=lambda m: margins[m][0])
    diff, se, n = margins[runner]
    return chosen, (f"`{chosen}` selected, the robust default, {diff:+.4f} over the next best `{runner}` on {n} "
                    f"train queries (1 SE {se:.4f}): " + ("beyond the noise" if diff > se else
                                                          "within the noise (they tie on these questions)"))


def choose(nested: dict[str, dict[str, float]]) -> str | None:
    """The retriever to select by nested figures, each comparison on the queries both were scored on: the best of
    those scored on every query (ties: the earlier in `TUNABLE`), unless a retriever scored on a sample (the causal
    one: its answer model runs per candidate) beats every one of them on its sample. Comparing all of them on the
    sample alone, as before, threw away the other queries (HotpotQA: 60 of 91) for every other choice."""
    if not nested:
        return None
    scored = set().union(*(set(v) for v in nested.values()))

    def mean(name: str, on: set[str]) -> float:
        return float(np.mean([nested[name][q] for q in on])) if on else float("-inf")

    complete = [n for n, v in nested.items() if set(v) == scored]
    sampled = [n for n in nested if n not in complete]
    winner = max(complete, key=lambda n: (mean(n, scored), -ORDER[n])) if complete else None
    challengers = [s for s in sampled
                   if all(mean(s, set(nested[s])) > mean(c, set(nested[s])) for c in complete)]
    if challengers:
        # (without a complete one, the sampled ones compared on the queries they share)
        on = set.intersection(*(set(nested[s]) for s in challengers))
        winner = max(challengers, key=lambda n: (mean(n, on), -ORDER[n]))
    return winner



class FoldChoices:
    """Per fold of the train queries, the point each searched retriever would have chosen without that fold's
    queries, for nested figures of combinations that nest their ingredients' choice too (module docstring)."""

    def __init__(self, folds: list[list[str]]):
        self.folds = folds
        # retriever, or (combination, fold) -> (params of every scored point, the metric per query of each)
        self.searched: dict[Any, tuple[list[dict[str, Any]], list[dict[str, float]]]] = {}

    def add(self, name: str, params: list[dict[str, Any]], per_query: list[dict[str, float]]) -> None:
        self.searched[name] = (params, per_query)

    def chosen_without(self, name: str, f: int) -> dict[str, Any]:
        """`name`'s params at the point with the best mean over the queries of the other folds (a combination's
        among its points with its ingredients at their own fold-f choices)."""
        params, per_query = self.searched.get((name, f), self.searched[name])
        return params[best_without(per_query, set(self.folds[f]))]

    def at_fold(self, params: dict[str, Any], f: int) -> dict[str, Any]:
        """A combination's params with each searched ingredient (fusion's members, a base) at its fold-f choice;
        an ingredient not searched here (the learned model: its fold models hold each fold out) is kept."""
        out = dict(params)
        for key in ("members", "base"):
            if isinstance(out.get(key), dict):
                out[key] = {m: self.chosen_without(m, f) if m in self.searched else p for m, p in out[key].items()}
        return out

    def nested(self, name: str, run: Callable[[dict[str, Any]], dict[str, float]]) -> dict[str, float]:
        """A combination's nested figure with its ingredients' choice nested too: each fold's queries scored at
        the combination's point chosen on the other folds, every ingredient at its own choice without that fold
        (`run(params)`: the metric per query; points whose ingredients do not move are not re-run). Without this
        a combination inherits the train optimism of ingredients chosen on every train query: on HotpotQA,
        pairwise at its zero weights (= fusion at its best train point) scored 0.9290 "nested" where fusion's own
        nested figure was 0.9218, and was selected over it by the one-SE rule."""
        params, per_query = self.searched[name]
        out: dict[str, float] = {}
        for f, held in held_folds(self.folds, per_query):
            moved = [self.at_fold(p, f) for p in params]
            scores = [pq if m == p else run(m) for p, m, pq in zip(params, moved, per_query)]
            self.searched[(name, f)] = (moved, scores)
            i = best_without(scores, set(held))
            out.update({q: scores[i].get(q, 0.0) for q in held})
        return out
