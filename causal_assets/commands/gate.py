"""`causal-assets accept` and `compare`: the regression gate's baseline and the comparison of two stored evaluations
(`core/evaluation/gate.py`). They read and write Parquet under --base-path only: no Dagster run, no model."""
from __future__ import annotations

from upath import UPath

from causal_assets.commands import say
from causal_assets.core.evaluation import gate as gates
from causal_assets.core.evaluation.answers import is_reference


def accept(args) -> int:
    """Make the latest (or --run) stored evaluation of a benchmark its accepted baseline."""
    values = gates.accept(UPath(args.base_path), args.benchmark, args.run)
    run, version = str(values["run_id"].iloc[0]), str(values["config_version"].iloc[0])
    figures = values[["split", "truth", "retriever"]].drop_duplicates()
    say(f"accepted run {run} of {args.benchmark!r} as its baseline"
        + (f" (tuned configuration {version})" if version else "")
        + f": {values['query_id'].nunique()} questions, {len(figures)} (split, truth, retriever) figures; the "
        f"next evaluation's regression gate compares with it")
    print(run)
    return 0


def compare(args) -> int:
    """B - A per split, truth, retriever and metric, with the questions that changed most."""
    base = UPath(args.base_path)
    name_a, a = gates.resolve(base, args.a)
    name_b, b = gates.resolve(base, args.b)
    diffs = gates.compare_runs(a, b, args.metric)
    if not diffs:
        say(f"{name_a} and {name_b} have no figure in common (split, truth, retriever, metric on the same "
            "questions)")
        return 1
    print(f"A: {name_a}\nB: {name_b}\n")
    # the table as formatted (Δ keeps its sign, p its four decimals), not re-read as numbers
    print(gates.comparison_table(diffs).drop(columns=["worse most", "better most"])
          .to_markdown(index=False, disable_numparse=True, floatfmt=".4f"))
    if any(is_reference(str(r)) for r in (*a["retriever"].unique(), *b["retriever"].unique())):
        print("\n(the answer utility's references @gold, @labels and @random are not compared: their candidates are "
              "the documents each run's retrievers returned)")
    for d in diffs:
        if d.worse or d.better:
            print(f"\n{d.retriever} {d.metric} on `{d.split}` ({d.truth}): worse most: "
                  + (", ".join(f"{q} {v:+.3f}" for q, v in d.worse) or "-") + "; better most: "
                  + (", ".join(f"{q} {v:+.3f}" for q, v in d.better) or "-"))
    return 0
