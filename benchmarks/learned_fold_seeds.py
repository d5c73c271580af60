"""The learned model's train CV across fold seeds, with and without the solver's question-likelihood feature: the
stability gauge behind the learned-model feature rules (docs/decisions.md, "Rules written before the figures").

    python benchmarks/learned_fold_seeds.py [--base data/parquet] [--benchmarks hotpotqa musique] [--seeds 0 1 2]
        [--retrievers hybrid learned] [--repeats 1]

For each benchmark and fold seed, the tuner (`core.tuning.search.tune`) tunes the hybrid, then the learned model on
the train split, every grid point scored by grouped CV with and without the feature. With more --retrievers it also
records which retriever the tuner selects per seed and every nested figure; `--repeats N` tunes each seed with N
fold splits (`tuning.cv_repeats`), to check a repeated CV's selection on disjoint sets of splits. Nothing reads a
test split; scoring goes through the LLM call cache. Writes data/benchmarks/learned_fold_seeds.json
(`_repeats<N>.json` with --repeats N > 1).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PARQUET, load_average, machine, write_json  # noqa: E402

from causal_assets.core.stored.artifacts import CorpusArtifacts  # noqa: E402
from causal_assets.core.registry.benchmarks import load_benchmark_registry  # noqa: E402
from causal_assets.core.foundation.errors import CorpusError  # noqa: E402
from causal_assets.core.index.ann import AnnConfig  # noqa: E402
from causal_assets.core.llm.cache import CallCache  # noqa: E402
from causal_assets.core.llm.models import DEFAULT_SOLVER, local_scorer  # noqa: E402
from causal_assets.core.tuning.search import tune  # noqa: E402
from causal_assets.core.registry.tuning import TuningSpec  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)
ANN = AnnConfig(min_chunks=SETTINGS.ann_min_chunks)   # the code location's ANN settings (resources.py)


def best_by_feature(trials) -> dict[str, dict]:
    """The learned model's best CV point without and with the feature (the trials' `question_likelihood` key)."""
    points = [(json.loads(params), float(value)) for params, value in zip(trials["params"], trials["value"])]
    out = {}
    for with_feature in (False, True):
        side = [(p, v) for p, v in points if bool(p.get("question_likelihood")) == with_feature]
        if side:
            point, value = max(side, key=lambda pv: pv[1])   # ties: the earlier point, as the tuner keeps it
            out["with" if with_feature else "without"] = {"cv": round(value, 4), "point": point}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=str(PARQUET), help="Parquet base path with the corpus indexes and graphs")
    parser.add_argument("--benchmarks", nargs="+", default=["hotpotqa", "musique"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--retrievers", nargs="+", default=["hybrid", "learned"],
                        help="the retrievers tuned (learned is always one); with more, the selection is recorded")
    parser.add_argument("--repeats", type=int, default=1,
                        help="fold splits per seed (tuning.cv_repeats: seeds seed .. seed + repeats - 1)")
    args = parser.parse_args()
    started = machine()
    registry = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)
    solver = SETTINGS.solver or DEFAULT_SOLVER
    scorer = local_scorer(solver, CallCache(SETTINGS.llm_cache), SETTINGS.models_dir)
    loaded: dict[str, tuple] = {}

    def source(name: str):
        """(index, train split, graph, artifacts) of a benchmark; raises when its corpus index is not under --base."""
        if name not in loaded:
            spec = registry[name]
            artifacts = CorpusArtifacts(args.base, spec.corpus, ANN)
            loaded[name] = (artifacts.index, artifacts.benchmark(spec, spec.tune_split), artifacts.graph, artifacts)
        return loaded[name]

    def extra(name: str):
        """An extra training benchmark, or None (left out, as the asset leaves it out) when its index is not there."""
        try:
            return source(name)[:3]
        except (KeyError, OSError, ValueError, CorpusError) as e:
            print(f"learned_extra {name!r} left out: {e}")
            return None

    results: dict[str, dict] = {}
    for name in args.benchmarks:
        spec = registry[name]
        registered = TuningSpec.model_validate({**spec.tuning,
                                                "retrievers": list(dict.fromkeys([*args.retrievers, "learned"]))})
        if not registered.learned_question_likelihood:
            print(f"{name}: the registry does not offer the question-likelihood feature; both sides would be the same")
        index, bench, graph, artifacts = source(name)
        results[name] = {}
        for seed in args.seeds:
            tuning = registered.model_copy(update={"seed": seed, "cv_repeats": args.repeats})
            t0 = time.perf_counter()
            result = tune(index, bench, tuning, spec.retrievers, artifacts.neighbors, graph, None,
                          forbidden=tuple(spec.eval_splits), extra_sources=extra, scorer=lambda: scorer)
            learned = result.trials[result.trials["retriever"] == "learned"]
            selected = next((n for n, b in result.best.items() if b.get("selected")), None)
            results[name][str(seed)] = {**best_by_feature(learned), "seconds": round(time.perf_counter() - t0, 1),
                                        "fold_seeds": tuning.fold_seeds(),
                                        "queries": len(bench.query_ids()), "selected": selected,
                                        "nested": {n: round(b["selection_value"], 4) for n, b in result.best.items()
                                                   if "selection_value" in b},
                                        "not_selectable": sorted(n for n, b in result.best.items()
                                                                 if not b.get("selectable", True))}
            sides = results[name][str(seed)]
            print(f"{name} seed {seed}: learned cv {tuning.metric} without the feature "
                  f"{sides.get('without', {}).get('cv')}, with it {sides.get('with', {}).get('cv')}; selected "
                  f"{selected}, nested {sides['nested']} ({sides['seconds']} s)", flush=True)
    name = "learned_fold_seeds" + (f"_repeats{args.repeats}" if args.repeats > 1 else "")
    path = write_json(name, {"machine_start": started, "load_average_end": load_average(), "solver": solver,
                             "base": args.base, "repeats": args.repeats, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
