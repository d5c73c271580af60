"""Label quality of the Monte Carlo labels against gold supporting paragraphs (HotpotQA, 2Wiki, MuSiQue).

    .venv/bin/python benchmarks/label_quality.py --dataset hotpotqa [--split train] [--questions 200]
        [--solver gemma3-270m] [--outcome likelihood] [--estimator adaptive] [--budget 32] [--max-doc-chars 0]
        [--no-stop-when-decided] [--document-encoding separate] [--document-order pool] [--threads 0] [--busy N]
    .venv/bin/python benchmarks/label_quality.py --compare BASE.json OTHER.json   # paired, no LLM
    .venv/bin/python benchmarks/label_quality.py --agreement A.json B.json   # two solvers' labels, no LLM
    .venv/bin/python benchmarks/label_quality.py --second-block beside_yes --previous   # both ways, one run
    .venv/bin/python benchmarks/label_quality.py --split train --retest   # again in another order: agreement
    .venv/bin/python benchmarks/label_quality.py --quick --out /tmp/label_quality.json   # a smoke run

Each question's own paragraphs are its pool; the labelling is the product's (`label_question`, local solver,
through the call cache), with the dataset's registry settings unless flags say otherwise (HotpotQA: 24 trials,
400-character paragraphs, the regression estimator on the qa_likelihood outcome). Reported against the gold paragraphs: YES precision / recall / F1 and the UNCERTAIN
share; the ranking by average effect (top-2 precision, R-precision, per-question ROC AUC); the same for the
baseline "the paragraph contains the answer string"; and the cost (calls, tokens evaluated of requested, seconds
per question, load, cache hits). The trials are kept in the JSON, so estimators can be compared offline with
``--reanalyze`` (no LLM). ``--quick`` labels one question with 16 trials of 150-character paragraphs, its call
cache beside the JSON (about half a minute of LLM time).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import busy_loops  # noqa: E402
from causal_assets.core.registry.benchmarks import hash_half, load_benchmark_registry  # noqa: E402
from causal_assets.core.corpus.multihop import read_multihop  # noqa: E402
from causal_assets.core.labeling.quality import (auc, expected_precision_at, label_quality_rows,  # noqa: E402
                                                summarize, test_retest)
from causal_assets.core.labeling.design import balanced_stages  # noqa: E402
from causal_assets.core.labeling.runner import (DOCUMENT_ORDERS, LabelingParams, decided, estimate,  # noqa: E402
                                                label_question, question_rng)
from causal_assets.core.labeling.solver import LikelihoodSolver  # noqa: E402
from causal_assets.core.labeling.validators import contains_answer  # noqa: E402
from causal_assets.core.llm.cache import CallCache  # noqa: E402
from causal_assets.core.llm.models import LOCAL_MODELS, local_scorer  # noqa: E402
from causal_assets.core.foundation.schemas import ranking_effect  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

DATASETS = {"hotpotqa": "hotpotqa/hot" "pot_dev_distractor_200.jsonl", "2wiki": "2wiki/2wiki_dev_40.jsonl",
            "musique": "musique/musique_ans_dev_40.jsonl"}


def cut(text: str, max_chars: int) -> str:
    return text if max_chars <= 0 or len(text) <= max_chars else text[:max_chars]


def top2_interval(per_q: list[dict], n_boot: int = 2000, seed: int = 0) -> dict:
    """95% bootstrap interval (over questions) of the labels' top-2 precision, of containment's, and of their
    paired difference: 200 questions still leave a few hundredths of sampling error."""
    rows = label_quality_rows(per_q)
    by_q = {}
    for r in rows:
        by_q.setdefault(r["query_id"], []).append(r)
    pairs = []
    for items in by_q.values():
        items = sorted(items, key=lambda r: r["position"])
        gold = [r["gold"] for r in items]
        if any(gold):
            pairs.append((expected_precision_at([r["effect"] for r in items], gold, 2),
                          expected_precision_at([float(r["contains"]) for r in items], gold, 2)))
    if not pairs:
        return {}
    v = np.array(pairs)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(v), (n_boot, len(v)))
    boot = v[idx].mean(axis=1)
    q = lambda a: [float(np.quantile(a, 0.025)), float(np.quantile(a, 0.975))]  # noqa: E731
    return {"labels": q(boot[:, 0]), "containment": q(boot[:, 1]), "difference": q(boot[:, 0] - boot[:, 1]),
            "questions": len(v)}


def paired_comparison(base: dict, other: dict, n_boot: int = 2000, seed: int = 0) -> dict:
    """Two runs' labels on the same questions (``--compare BASE OTHER``): each one's top-2 precision and mean
    per-question AUC, and 95% bootstrap intervals (over questions) of OTHER minus BASE, paired by question."""
    common = [q for q in base["per_question"] if q in other["per_question"]]
    if not common:
        raise SystemExit("--compare: the two runs share no question")
    per = []
    for run in (base, other):
        # the id from the report's key: entries written by earlier versions name it otherwise
        rows = label_quality_rows([{**run["per_question"][q], "query_id": q} for q in common])
        by_q: dict[str, list[dict]] = {}
        for r in rows:
            by_q.setdefault(r["query_id"], []).append(r)
        values = {}
        for qid, items in by_q.items():
            items = sorted(items, key=lambda r: r["position"])
            gold, scores = [r["gold"] for r in items], [r["effect"] for r in items]
            if any(gold) and not all(gold):
                values[qid] = (expected_precision_at(scores, gold, 2), auc(scores, gold))
        per.append(values)
    qids = [q for q in per[0] if q in per[1]]
    a, b = np.array([per[0][q] for q in qids]), np.array([per[1][q] for q in qids])
    idx = np.random.default_rng(seed).integers(0, len(qids), (n_boot, len(qids)))
    diff = (b - a)[idx].mean(axis=1)
    q = lambda v: [float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))]  # noqa: E731
    out = {"questions": len(qids)}
    for j, name in enumerate(("top2_precision", "auc")):
        out[name] = {"base": float(a[:, j].mean()), "other": float(b[:, j].mean()),
                     "difference": float((b - a)[:, j].mean()), "difference_interval_95": q(diff[:, j]),
                     "base_interval_95": q(a[idx, j].mean(axis=1)), "other_interval_95": q(b[idx, j].mean(axis=1))}
    for name, run in (("base", base), ("other", other)):
        out[f"{name}_seconds_per_question"] = run.get("seconds_per_question_paid")
        out[f"{name}_config"] = run.get("config")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 question, budget 16, 150-character "
                                                         "paragraphs, a new call cache beside the JSON")
    ap.add_argument("--dataset", choices=sorted(DATASETS), default="hotpotqa")
    ap.add_argument("--questions", type=int, default=0, help="first N questions (0 = all)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--split", choices=["all", "train", "test"], default="all",
                    help="hash half of the question ids (the benchmarks' train/test split)")
    ap.add_argument("--solver", choices=sorted(LOCAL_MODELS), default="gemma3-270m")
    ap.add_argument("--estimator", default=None, help="default: the registry entry's, else the product's")
    ap.add_argument("--outcome", default=None, choices=["likelihood", "qa_likelihood"])
    ap.add_argument("--budget", default=None, help='solver calls per question, or "auto" (default: the '
                    "registry's, else the product's: auto)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-stop-when-decided", dest="stop_when_decided", action="store_false", default=None,
                    help="regression: run every trial of the budget, even where the first block decided every label")
    ap.add_argument("--second-block", choices=["beside_yes", "balanced"], default=None,
                    help="regression: the rows run after the first block where a label is undecided (default: "
                         "the registry's, else LabelingParams')")
    ap.add_argument("--no-beside-yes", dest="beside_yes", action="store_false", default=None,
                    help="labels from the regression alone, not also from the effects beside the YES documents")
    ap.add_argument("--previous", action="store_true",
                    help="also label every question the previous way (the pool's order in every trial, the "
                         "balanced second block, no effects beside the YES documents), through the same call "
                         "cache, and report both")
    ap.add_argument("--retest", action="store_true",
                    help="also label every question again with its paragraphs in another order (seeded by the "
                         "question) and another Monte Carlo seed, and report test-retest agreement")
    ap.add_argument("--document-encoding", choices=["auto", "joint", "separate"], default=None,
                    help="documents read together, or each encoded on its own (default: the registry's, else "
                         "LabelingParams')")
    ap.add_argument("--document-order", choices=DOCUMENT_ORDERS, default=None,
                    help="the order a trial shows its documents in (default: the registry's, else LabelingParams')")
    ap.add_argument("--threshold-nats", type=float, default=None)
    ap.add_argument("--question-weight", type=float, default=None,
                    help="weight of the question's own log-likelihood in the qa_likelihood outcome")
    ap.add_argument("--max-doc-chars", type=int, default=None,
                    help="cut each paragraph (0 = whole paragraph; default: the registry's pooling.max_doc_chars)")
    ap.add_argument("--threads", type=int, default=0,
                    help="llama.cpp threads (0 = the cores other processes leave free, re-measured per batch)")
    ap.add_argument("--busy", type=int, default=0,
                    help="run beside N CPU-bound loops (seconds per question on a loaded machine)")
    ap.add_argument("--cache", type=Path, default=ROOT / "data" / "benchmarks" / "label_quality_calls.sqlite")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--alpha", type=float, default=None, help="1 - confidence of the label intervals")
    ap.add_argument("--compare", type=Path, nargs=2, default=None, metavar=("BASE", "OTHER"),
                    help="two runs' JSONs: top-2 and AUC of each, and their paired difference (no LLM)")
    ap.add_argument("--agreement", type=Path, nargs=2, default=None, metavar=("A", "B"),
                    help="two runs' JSONs over the same questions (e.g. two solvers): Cohen's kappa on YES/NO, flips, "
                         "interval overlap and the effects' rank correlation (no LLM)")
    ap.add_argument("--reanalyze", type=Path, nargs="+", default=None,
                    help="re-estimate labels from previous JSONs' trials (no LLM; per_question entries are merged)")
    ap.add_argument("--max-trials", type=int, default=0,
                    help="with --reanalyze: use only each question's first N recorded trials (what a smaller "
                         "budget would have given, up to the design's balance)")
    args = ap.parse_args()
    if args.agreement:
        runs = [json.loads(p.read_text()) for p in args.agreement]
        result = {"a": {"path": str(args.agreement[0]), "solver": runs[0].get("solver")},
                  "b": {"path": str(args.agreement[1]), "solver": runs[1].get("solver")},
                  **test_retest(*(label_frame(r) for r in runs))}
        print(json.dumps(result, indent=1))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
        return
    if args.compare:
        result = paired_comparison(*(json.loads(p.read_text()) for p in args.compare))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
        return
    out = args.out or ROOT / "data" / "benchmarks" / (f"label_quality_{args.dataset}_{args.solver}"
                                                      f"{'_quick' if args.quick else ''}.json")
    if args.quick:
        args.questions, args.budget, args.max_doc_chars = 1, 16, 150
        args.cache = out.with_name(out.stem + "_calls.sqlite")
        out.parent.mkdir(parents=True, exist_ok=True)
    # the dataset's registry entry (its labelling settings), then the flags given
    spec = load_benchmark_registry(shared_data=SETTINGS.shared_data).get(args.dataset)
    if args.max_doc_chars is None:
        args.max_doc_chars = int(spec.pool_settings.get("max_doc_chars") or 0) if spec else 0
    flags = {"estimator": args.estimator, "outcome": args.outcome, "budget": args.budget,
             "stop_when_decided": args.stop_when_decided, "threshold_nats": args.threshold_nats,
             "alpha": args.alpha, "question_weight": args.question_weight,
             "document_encoding": args.document_encoding, "second_block": args.second_block,
             "beside_yes": args.beside_yes, "document_order": args.document_order}
    if isinstance(args.budget, str) and args.budget != "auto":
        flags["budget"] = int(args.budget) if args.budget.lstrip("-").isdigit() else args.budget
    try:   # refused as the product refuses it, with its message, before any solver call
        cfg = LabelingParams.from_settings(spec.monte_carlo if spec else {}, **flags, batch=args.batch)
    except ValueError as e:
        sys.exit(f"label_quality: {e}")

    data = read_multihop(SETTINGS.shared_data / DATASETS[args.dataset])
    questions = [q for q in data.questions if args.split == "all" or hash_half(q.query_id) == args.split]
    questions = questions[args.offset:]
    if args.questions:
        questions = questions[: args.questions]

    for q in questions:   # each question's own paragraphs are its pool
        try:
            cfg.check_budget(len(q.paragraphs))
        except ValueError as e:
            sys.exit(f"label_quality: {e} (question {q.query_id} has {len(q.paragraphs)} paragraphs); no solver "
                     "call made")
    prior = None
    if args.reanalyze:
        prior = {"per_question": {}, "calls": {}}
        for path in args.reanalyze:
            old = json.loads(path.read_text())
            prior["per_question"].update(old["per_question"])
        questions = [q for q in questions if q.query_id in prior["per_question"]]
    with busy_loops(args.busy):
        run(args, cfg, data, questions, prior, out)


def label_frame(run: dict) -> pd.DataFrame:
    """A run's labels as `mc_labels`-like rows: question, document (its position), label, interval, average effect."""
    return pd.DataFrame([{"query_id": qid, "chunk_id": i, "label": lab, "ci_low": ci[0], "ci_high": ci[1],
                          "average_effect": eff}
                         for qid, p in run["per_question"].items()
                         for i, (lab, ci, eff) in enumerate(zip(p["labels"], p["ci"], p["effects"]))])


def ranked_effects(result) -> list[float]:
    """Each document's effect size as the product ranks labelled documents (`schemas.ranking_effect`): the average
    effect over the random subsets, the context effect where a document never varied."""
    table = pd.DataFrame({"average_effect": [e.marginal_delta_p for e in result.docs],
                          "effect": [e.delta_p for e in result.docs]})
    return [float(v) for v in ranking_effect(table)]


def trials_run(query_id: str, trials: list[dict], chunk_ids: list[str], cfg: LabelingParams) -> list[dict]:
    """Of a question's recorded trials of the whole balanced design, those the labeller runs when it stops after the
    first block where every label is decided (`LabelingParams.stop_when_decided`): the first block's own rows, or
    all of them."""
    design, stage = balanced_stages(len(chunk_ids), cfg.budget_for(len(chunk_ids)), question_rng(query_id, cfg.seed))
    first = Counter(tuple(np.flatnonzero(row).tolist()) for row in design[stage == 0])
    position = {d: i for i, d in enumerate(chunk_ids)}
    block = []
    for t in trials:
        row = tuple(sorted(position[d] for d in t["subset"]))
        if first[row] > 0:
            first[row] -= 1
            block.append(t)
    return block if len(block) < len(trials) and decided(block, chunk_ids, cfg) else trials


def label_one(q, cfg: LabelingParams, scorer, prior, max_doc_chars: int, max_trials: int = 0) -> dict:
    """One question labelled (or re-estimated from `prior`'s trials): its labels, effects, calls and trials."""
    pool = [(f"{q.query_id}/{i}", p.title, cut(p.text, max_doc_chars)) for i, p in enumerate(q.paragraphs)]
    chunk_ids = [d for d, _, _ in pool]
    t0 = time.time()
    if prior:
        old = prior["per_question"][q.query_id]
        trials = old["trials"][: max_trials or None]
        if cfg.estimator == "regression" and cfg.stop_when_decided and not max_trials:
            trials = trials_run(q.query_id, trials, chunk_ids, cfg)
        result = estimate(trials, chunk_ids, cfg)
        calls = {k: old.get(k) for k in ("calls", "paid", "seconds", "errors", "tokens_evaluated",
                                         "tokens_requested")}
        if old.get("calls"):
            calls["calls"] = min(old["calls"], len(trials))
    else:
        ev0, rq0 = scorer.tokens_evaluated, scorer.tokens_requested
        solver = LikelihoodSolver(scorer, "answer_f1", cfg.separate_documents(scorer))
        o = label_question(q.query_id, q.question, q.answer, pool, solver, cfg, aliases=list(q.aliases))
        trials = [{"subset": t["subset"], "loglik": t["loglik"], "loglik_question": t["loglik_question"]}
                  for t in o.trials]
        result = o.result
        paid = [c for c in o.calls if c["status"] == "ok" and not c["cached"]]
        calls = {"calls": len(o.calls), "paid": len(paid), "seconds": round(time.time() - t0, 2),
                 "errors": sum(c["status"] == "error" for c in o.calls),
                 "tokens_evaluated": scorer.tokens_evaluated - ev0,
                 "tokens_requested": scorer.tokens_requested - rq0}
    contains = [contains_answer(text, [q.answer, *q.aliases]) for _, _, text in pool]
    return {"query_id": q.query_id, "type": q.type, "gold": q.gold, "contains": contains,
            "effects": ranked_effects(result), "context_effects": [float(e.delta_p) for e in result.docs],
            "labels": [e.label for e in result.docs], "partners": [list(e.partners) for e in result.docs],
            "beside_yes": [[float(e.conditional_delta_p), float(e.conditional_ci_low), float(e.conditional_ci_high)]
                           for e in result.docs],
            "ci": [[float(e.ci_low), float(e.ci_high)] for e in result.docs], **calls, "trials": trials}


def previous_way(cfg: LabelingParams) -> LabelingParams:
    """The previous estimator: every trial shows its documents in the pool's order, the design's balanced second
    block, labels from the regression alone (no effects beside the YES documents)."""
    return replace(cfg, second_block="balanced", beside_yes=False, document_order="pool")


def bridge_share(per_q: list[dict]) -> dict:
    """Of the gold paragraphs that do not hold the answer (the first hop of a bridge question), the share labelled
    YES, and UNCERTAIN."""
    labels = [lab for p in per_q for i, (c, lab) in enumerate(zip(p["contains"], p["labels"]))
              if i in set(p["gold"]) and not c]
    n = len(labels)
    return {"first_hop_paragraphs": n, "yes": sum(v == "YES" for v in labels) / n if n else None,
            "uncertain": sum(v == "UNCERTAIN" for v in labels) / n if n else None}


def figures(per_q: list[dict]) -> dict:
    """The summary of one way of labelling: overall, by hash half and by question type, and its cost."""
    secs = [p["seconds"] for p in per_q if p.get("seconds") is not None]
    return {"summary": summarize(label_quality_rows(per_q)),
            # the threshold and interval were calibrated on train questions: the test half is the honest figure
            "summary_by_half": {half: summarize(label_quality_rows([p for p in per_q
                                                                    if hash_half(p["query_id"]) == half]))
                                for half in ("train", "test")},
            "summary_by_type": {t: summarize(label_quality_rows([p for p in per_q if p["type"] == t]))
                                for t in sorted({str(p["type"]) for p in per_q})},
            "first_hop": bridge_share(per_q),
            "top2_interval_95": top2_interval(per_q),
            "calls_per_question": float(np.mean([p["calls"] for p in per_q])) if per_q else None,
            "paid_calls": int(sum(p.get("paid") or 0 for p in per_q)),
            "seconds_per_question_paid": float(np.mean(secs)) if secs else None,
            "tokens_evaluated_share": (sum(p.get("tokens_evaluated") or 0 for p in per_q)
                                       / max(1, sum(p.get("tokens_requested") or 0 for p in per_q)))}


def run(args, cfg: LabelingParams, data, questions, prior, out: Path) -> None:
    scorer = None if prior else local_scorer(args.solver, CallCache(args.cache), SETTINGS.models_dir,
                                         n_threads=args.threads or None)
    load0, t_start = os.getloadavg(), time.time()
    per_q, per_q_prev, per_q_re = [], [], []
    for n, q in enumerate(questions, 1):
        per_q.append(label_one(q, cfg, scorer, prior, args.max_doc_chars, args.max_trials))
        if args.previous:   # second: its first block comes from the cache, its own second block is paid
            per_q_prev.append(label_one(q, previous_way(cfg), scorer, prior, args.max_doc_chars, args.max_trials))
        if args.retest and not prior:
            moved, order = reordered(q)
            again = label_one(moved, replace(cfg, seed=cfg.seed + 1), scorer, None, args.max_doc_chars)
            per_q_re.append(in_original_order(again, order))
        if n % 5 == 0 or n == len(questions):
            s = summarize(label_quality_rows(per_q))
            print(f"[{n}/{len(questions)}] labels F1 {s['labels']['f1']:.3f} top-2 P {s['ranking']['top2_precision']:.3f} "
                  f"AUC {s['ranking']['auc']:.3f} UNCERTAIN {s['labels']['uncertain_share']:.2f} | containment F1 "
                  f"{s['containment']['f1']:.3f} top-2 {s['containment_ranking']['top2_precision']:.3f} "
                  f"| {time.time() - t_start:.0f}s load {os.getloadavg()[0]:.1f}", flush=True)
            if n < len(questions):   # a run stopped part-way keeps what it measured ("complete": false)
                partial = report(args, cfg, data, scorer, per_q, per_q_prev, load0, t_start, done=False,
                                 per_q_re=per_q_re)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(partial, indent=1, default=float))
    result = report(args, cfg, data, scorer, per_q, per_q_prev, load0, t_start, done=True, per_q_re=per_q_re)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=float))
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("per_question")}, indent=1, default=float))
    print("wrote", out)


def reordered(q) -> tuple:
    """`q` with its paragraphs in another order, seeded by the question (another draw of its pool's order), and
    that order: position in the new pool -> position in the question's own."""
    order = question_rng(q.query_id, "retest").permutation(len(q.paragraphs))
    return replace(q, paragraphs=tuple(q.paragraphs[i] for i in order)), order


def in_original_order(p: dict, order) -> dict:
    """A reordered question's labels (`label_one`) put back in the question's own paragraph order."""
    at = np.argsort(order)   # position in the question's own order -> position in the reordered pool
    out = {**p, "gold": sorted(int(order[j]) for j in p["gold"])}
    for key in ("contains", "effects", "context_effects", "labels", "partners", "beside_yes", "ci"):
        out[key] = [p[key][int(j)] for j in at]
    out.pop("trials", None)   # their ids name the reordered positions
    return out


def retest_frame(per_q: list[dict]) -> pd.DataFrame:
    """Labels as `labeling.quality.test_retest` reads them: the context effect and its interval, the average effect."""
    return pd.DataFrame([{"query_id": p["query_id"], "chunk_id": i, "label": lab, "ci_low": ci[0], "ci_high": ci[1],
                          "effect": eff, "average_effect": avg}
                         for p in per_q for i, (lab, ci, eff, avg) in
                         enumerate(zip(p["labels"], p["ci"], p["context_effects"], p["effects"]))])


def report(args, cfg: LabelingParams, data, scorer, per_q: list[dict], per_q_prev: list[dict], load0, t_start: float,
           done: bool, per_q_re: list[dict] = ()) -> dict:
    """The run's JSON: its figures, the comparison's where labelled both ways, the load and the questions."""
    mine = figures(per_q)
    return {"dataset": args.dataset, "quick": args.quick, "questions": len(per_q), "split": args.split,
            "solver": args.solver, "complete": done,
            "config": cfg.__dict__, "max_doc_chars": args.max_doc_chars, **mine,
            "document_encoding": ("separate" if cfg.separate_documents(scorer) else "joint") if scorer else None,
            **({"previous": {"config": previous_way(cfg).__dict__, **figures(per_q_prev),
                             "note": "labelled after this run's question, through the same call cache: its "
                                     "seconds exclude the first block (cached)"}} if per_q_prev else {}),
            **({"retest": {**test_retest(retest_frame(per_q[: len(per_q_re)]), retest_frame(per_q_re)),
                           **figures(per_q_re), "note": "the paragraphs in another order, Monte Carlo seed + 1"}}
               if per_q_re else {}),
            "skipped_without_paragraphs": len(data.skipped_without_paragraphs),
            "load_average_start": load0, "load_average_end": os.getloadavg(),
            "threads": getattr(scorer, "thread_history", None), "busy_loops": args.busy,
            "wall_seconds": round(time.time() - t_start, 1),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "per_question": {p["query_id"]: p for p in per_q},
            **({"per_question_previous": {p["query_id"]: p for p in per_q_prev}} if per_q_prev else {})}


if __name__ == "__main__":
    main()
