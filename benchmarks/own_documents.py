"""Labels of a user's own documents, judged at the passage that answers: a folder corpus and a questions file whose
gold files carry `evidence` (the verbatim passage that answers), e.g. the shared man pages.

    .venv/bin/python benchmarks/own_documents.py --folder ../shared/data/manpages/docs \\
        --questions ../shared/data/manpages/questions.jsonl [--retest] [--budget N] [--pool-size N] \\
        [--seed-neighbors N] [--max-doc-chars N] [--chunk-chars 1500] [--questions-limit N] [--out FILE.json]

The product's own path, in-process: the folder loader, the index and the corpus graph (its chunk neighbours join the
pools as `candidate_pools` adds them), `load_benchmark`, `build_pools`, `run_trials`
with the local solver (through a call cache beside the output), `label_table`, with the registry defaults of a
questions benchmark unless flags say otherwise. Reported, per (question, gold file): whether a chunk holding the
evidence was pooled and labelled YES; the two-file questions with both files YES; YES precision / recall / F1
against the pooled evidence chunks beside answer containment's; every YES outside the evidence chunks with whether
it contains the answer; solver calls, tokens and seconds per question with the load. `--retest` labels the same
questions again with another pool draw (other random and hard-negative members) and another Monte Carlo seed, and
reports test-retest agreement on the pairs judged in both (`labeling.quality.test_retest`). Refuses what the
product refuses: the registries are the product's, checked as `causal-assets label` checks them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from causal_assets.core.corpus.chunk import chunks_to_frame  # noqa: E402
from causal_assets.core.index.build import build_index  # noqa: E402
from causal_assets.core.index.dense import EmbeddingCache, Embedder  # noqa: E402
from causal_assets.core.graph.build import build_graph  # noqa: E402
from causal_assets.core.graph.store import chunk_neighbors  # noqa: E402
from causal_assets.core.labeling.pools import build_pools, pool_params  # noqa: E402
from causal_assets.core.labeling.quality import test_retest  # noqa: E402
from causal_assets.core.labeling.runner import (DOCUMENT_ORDERS, LabelingParams, answer_holders,  # noqa: E402
                                                label_table)
from causal_assets.core.labeling.trials import run_trials  # noqa: E402
from causal_assets.core.labeling.validators import contains_answer  # noqa: E402
from causal_assets.core.llm.cache import CallCache  # noqa: E402
from causal_assets.core.llm.models import local_scorer  # noqa: E402
from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.registry.benchmark_loading import load_benchmark
from causal_assets.core.foundation.errors import ConfigError  # noqa: E402
from causal_assets.core.corpus.questions import load_questions  # noqa: E402
from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry  # noqa: E402
from causal_assets.core.registry.gold import GoldResolver  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()


def registries(work: Path, args) -> dict:
    """The benchmark spec of the run, through the product's registries (and their checks)."""
    corpora = {"corpora": [{"name": "default", "loader": "python_package", "package": "networkx"},
                           {"name": "own_docs", "loader": "folder", "path": str(args.folder.resolve()),
                            "options": {"chunk_chars": args.chunk_chars, "overlap_chars": args.overlap_chars}}]}
    pooling = {k: v for k, v in (("size", args.pool_size), ("max_doc_chars", args.max_doc_chars),
                                 ("max_seed_neighbors", args.seed_neighbors)) if v is not None}
    monte_carlo = {k: v for k, v in (("budget", args.budget), ("solver", args.solver)) if v}
    bench = {"name": "own", "loader": "questions", "corpus": "own_docs", "path": str(args.questions.resolve()),
             **({"pooling": pooling} if pooling else {}), **({"monte_carlo": monte_carlo} if monte_carlo else {})}
    (work / "corpora.yaml").write_text(yaml.safe_dump(corpora))
    (work / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [bench]}))
    return load_benchmark_registry(work / "benchmarks.yaml", SETTINGS.shared_data, work / "corpora.yaml")


def labeling_params(spec, seed: int, overrides: dict) -> LabelingParams:
    """The registry's Monte Carlo settings with the loader's defaults (a questions file's budget), as `mc_trials`
    reads them, then the flags' overrides."""
    return LabelingParams.from_settings(spec.monte_carlo_settings, **overrides, seed=seed or None)


def label(index, bench, qids, spec, seed: int, scorer, cfg_overrides: dict, neighbors=None) -> tuple:
    params = pool_params(spec.pool_settings, seed=seed or None)
    pools = build_pools(index, bench, qids, params, neighbors)
    pools["aliases"] = pools["aliases"].map(json.dumps)
    cfg = labeling_params(spec, seed, cfg_overrides)
    load0 = os.getloadavg()[0]
    run = run_trials(pools, cfg, "own", spec.validator, f"local/{spec.monte_carlo.get('solver', 'gemma3-270m')}",
                     scorer=scorer)
    labels, _ = label_table(pools, run.trials, cfg)
    labels = labels[labels["estimator"] == cfg.estimator]
    calls = run.calls[run.calls["status"] == "ok"]
    cost = {"questions": len(qids), "seconds_per_question": round(run.seconds / max(1, len(qids)), 2),
            "calls_per_question": round(len(run.calls) / max(1, len(qids)), 2),
            "cached_calls": int(calls["cached"].sum()), "prompt_tokens_per_call": round(float(
                calls["prompt_tokens"].mean()), 1) if len(calls) else None,
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)], "pool_size": params.size,
            "doc_chars": params.doc_chars, "budget": cfg.budget_for(params.size),
            "documents_shortened": int((pools["kept_end"] - pools["kept_start"] < pools["doc_chars"]).sum())}
    return pools, labels, cost


def passage_figures(records, resolver: GoldResolver, pools, labels) -> dict:
    """The passage judge's figures from the stored tables (module docstring)."""
    verdict = {(q, d): lab for q, d, lab in zip(labels["query_id"], labels["chunk_id"], labels["label"])}
    pooled = {(q, d) for q, d in zip(pools["query_id"], pools["chunk_id"])}
    texts = {(q, d): t for q, d, t in zip(pools["query_id"], pools["chunk_id"], pools["text"])}
    pairs, truth = [], set()
    for r in records:
        ev = dict(r.evidence)
        for gold in r.gold:
            if gold not in ev:
                continue
            chunks = resolver.resolve((gold,), r.where, {gold: ev[gold]}).qrels
            truth |= {(r.query_id, c) for c in chunks}
            inpool = [c for c in chunks if (r.query_id, c) in pooled]
            pairs.append({"question": r.query_id, "gold": gold, "evidence_chunks": sorted(chunks),
                          "pooled": inpool, "labels": [verdict.get((r.query_id, c), "-") for c in inpool],
                          "two_file": len(r.gold) > 1})
    answers = {r.query_id: r.answers for r in records}
    yes = {k for k, v in verdict.items() if v == "YES"}
    contains = {k for k in pooled if k[0] in answers and contains_answer(texts[k], list(answers[k[0]]))}
    judged = truth & pooled

    def prf(pred: set) -> list[float]:
        tp = len(pred & judged)
        p, r = (tp / len(pred) if pred else 0.0), (tp / len(judged) if judged else 0.0)
        return [round(p, 3), round(r, 3), round(2 * p * r / (p + r) if p + r else 0.0, 3)]

    two: dict[str, list[bool]] = {}
    for p in pairs:
        if p["two_file"]:
            two.setdefault(p["question"], []).append("YES" in p["labels"])
    outside = sorted(yes - truth)
    return {"pairs": len(pairs), "pooled": round(sum(bool(p["pooled"]) for p in pairs) / len(pairs), 3),
            "yes": round(sum("YES" in p["labels"] for p in pairs) / len(pairs), 3),
            "two_file_both_yes": f"{sum(all(v) for v in two.values())}/{len(two)}",
            "labels_prf": prf(yes), "containment_prf": prf(contains),
            "yes_total": len(yes), "yes_outside_evidence": [
                {"question": q, "chunk": d, "contains_answer": (q, d) in contains} for q, d in outside],
            "rows": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--chunk-chars", type=int, default=1500)
    ap.add_argument("--overlap-chars", type=int, default=200)
    ap.add_argument("--pool-size", type=int, default=None)
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--seed-neighbors", type=int, default=None,
                    help="graph neighbours of each seed chunk in the pool (pooling.max_seed_neighbors)")
    ap.add_argument("--max-doc-chars", type=int, default=None)
    ap.add_argument("--solver", default=None)
    ap.add_argument("--question-weight", type=float, default=None)
    ap.add_argument("--threshold-nats", type=float, default=None)
    ap.add_argument("--questions-limit", type=int, default=0)
    ap.add_argument("--document-order", choices=DOCUMENT_ORDERS, default=None,
                    help="the order a trial shows its documents in (monte_carlo.document_order)")
    ap.add_argument("--retest", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "benchmarks" / "own_documents.json")
    ap.add_argument("--cache", type=Path, default=None, help="the call cache (default: beside --out)")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="own_documents_"))   # the run's registries, read while it runs
    spec = registries(work, args)["own"]
    chunks = chunks_to_frame(load_corpus(load_corpus_registry(work / "corpora.yaml", SETTINGS.shared_data)
                                         ["own_docs"])[0])
    embedder = Embedder()
    index = build_index(chunks, "own_docs", embedder=embedder,
                        cache=EmbeddingCache.for_embedder(args.out.parent / "embeddings", embedder))
    bench = load_benchmark(spec, "dev", chunks)
    qids = bench.labelable_ids()[: args.questions_limit or None]
    records = [r for r in _records(spec) if r.query_id in qids]
    resolver = GoldResolver(chunks, "own_docs", "folder")
    cache = CallCache(args.cache or args.out.with_suffix(".calls.sqlite"))
    scorer = local_scorer(spec.monte_carlo.get("solver", SETTINGS.solver or "gemma3-270m"), cache,
                          SETTINGS.models_dir)
    t0 = time.time()
    overrides = {k: v for k, v in (("question_weight", args.question_weight), ("threshold_nats", args.threshold_nats),
                                   ("document_order", args.document_order)) if v is not None}
    # the corpus graph's chunk neighbours, as `candidate_pools` gets them from the graph assets
    neighbors = chunk_neighbors(*build_graph(chunks))
    pools, labels, cost = label(index, bench, qids, spec, 0, scorer, overrides, neighbors)
    out = {"settings": {k: str(v) for k, v in vars(args).items()}, "cost": cost,
           "figures": passage_figures(records, resolver, pools, labels)}
    f = out["figures"]
    print(f"evidence chunk pooled {f['pooled']:.0%}, YES {f['yes']:.0%} of {f['pairs']} (question, gold file) pairs; "
          f"two-file both YES {f['two_file_both_yes']}; labels P/R/F1 {f['labels_prf']} vs containment "
          f"{f['containment_prf']}; YES {f['yes_total']} ({len(f['yes_outside_evidence'])} outside the evidence, "
          f"{sum(x['contains_answer'] for x in f['yes_outside_evidence'])} of them contain the answer); "
          f"{cost['seconds_per_question']} s and {cost['calls_per_question']} calls per question (load {cost['load']})")
    if args.retest:
        pools2, labels2, cost2 = label(index, bench, qids, spec, 1, scorer, overrides, neighbors)
        out["retest"] = {"cost": cost2, **test_retest(labels, labels2)}
        # the pairs whose pool held the same other copies of the answer in both draws: what is left there is the
        # estimate's own noise; the rest is the label's dependence on the pool, which each label's note names
        same = same_answer_holders(pools, pools2)
        keep = lambda t: t[[(q, c) in same for q, c in zip(t["query_id"], t["chunk_id"])]]   # noqa: E731
        out["retest"]["same_answer_holders"] = test_retest(keep(labels), keep(labels2))
        out["retest_figures"] = passage_figures(records, resolver, pools2, labels2)
        r = out["retest"]
        print(f"test-retest over {r['pairs']} pairs judged in both: kappa {r['kappa']:.3f} on {r['decided_both']} "
              f"decided in both, YES<->NO flips {r['flips']} ({r['flip_share']:.1%}), 80% intervals overlap "
              f"{r['overlap_share']:.1%}; the change of effect over its standard error: sd {r['change_z_sd']:.2f}, "
              f"{r['change_beyond_90']:.0%} beyond 1.645 (1 and 10% where the intervals cover a change of pool)")
        r = r["same_answer_holders"]
        print(f"  of them {r['pairs']} pairs whose pools hold the same other copies of the answer: kappa "
              f"{r['kappa']:.3f}, flips {r['flips']} ({r['flip_share']:.1%}), overlap {r['overlap_share']:.1%}")
    out["seconds"] = round(time.time() - t0, 1)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"written {args.out}")


def same_answer_holders(first, second) -> set[tuple[str, str]]:
    """The (question, chunk) pairs pooled in both draws whose question's pool holds the same other chunks containing
    the answer in both (`labeling.runner.answer_holders`)."""
    holders = [{q: set(answer_holders(p)) for q, p in pools.groupby("query_id")} for pools in (first, second)]
    pairs = set(zip(first["query_id"], first["chunk_id"])) & set(zip(second["query_id"], second["chunk_id"]))
    return {(q, c) for q, c in pairs
            if holders[0].get(q, set()) - {c} == holders[1].get(q, set()) - {c}}


def _records(spec):
    return load_questions(spec.resolved_path).records


if __name__ == "__main__":
    try:
        main()
    except ConfigError as e:   # refused as the product refuses it (a budget, a registry value), before any call
        sys.exit(f"own_documents: {e}")
