"""Does an in-process scoring depend on the request scored before it, and what does block-aligned KV reuse cost?

    python benchmarks/scoring_determinism.py [--questions 5] [--subsets 24] [--blocks 0 64 128 256]

Monte Carlo trials as the labels make them (random subsets of each HotpotQA question's paragraphs, the gold answer
as continuation), scored in one batch sorted so subsets sharing a beginning reuse the KV cache, then every request
again alone after the cache is emptied. For each `reuse_block` (0 = free-form reuse): the batch's wall time, tokens
evaluated of requested, and how many answer and question-span log-probabilities differ between batch and alone, by
how much at most. One process, the packaged solver on 2 threads, no call cache, the load average per block. Writes
data/benchmarks/scoring_determinism.json.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_average, machine, write_json  # noqa: E402

from causal_assets.core.corpus.multihop import read_multihop  # noqa: E402
from causal_assets.core.labeling.solver import answer_continuations, question_span, solver_prompt  # noqa: E402
from causal_assets.core.llm.models import DEFAULT_SOLVER, local_model_path  # noqa: E402
from causal_assets.core.llm.scoring import LlamaCppScorer, ScoreRequest  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()   # the variables the code location reads (causal_assets/settings.py)
DOC_CHARS = 400                  # HotpotQA's `pooling.max_doc_chars` in the registry


def trial_requests(n_questions: int, n_subsets: int, seed: int = 0) -> list[ScoreRequest]:
    path = SETTINGS.shared_data / "hotpotqa" / "hotpot_dev_distractor_200.jsonl"
    rng = random.Random(seed)
    requests = []
    for q in read_multihop(path).questions[:n_questions]:
        docs = [(p.title, p.text[:DOC_CHARS]) for p in q.paragraphs]
        for _ in range(n_subsets):
            subset = [d for d in docs if rng.random() < 0.5] or docs[:1]
            requests.append(ScoreRequest(solver_prompt(q.question, subset, "answer_f1"),
                                         answer_continuations(q.answer), question_span(q.question, subset)))
    return requests


def measure(requests: list[ScoreRequest], block: int, model_path: Path) -> dict:
    load_start = load_average()
    scorer = LlamaCppScorer(model_path, f"local/{DEFAULT_SOLVER}", cache=None, n_threads=2, reuse_block=block)
    try:
        t0 = time.perf_counter()
        batch = scorer.score_many(requests)
        seconds = time.perf_counter() - t0
        evaluated, requested = scorer.tokens_evaluated, scorer.tokens_requested
        alone = []
        for req in requests:
            scorer.forget_prefix()                        # scored from scratch
            alone.append(scorer.score_many([req])[0])
    finally:
        scorer.close()
    answer = [abs(a - b) for x, y in zip(batch, alone) for a, b in zip(x.logprobs, y.logprobs)]
    span = [abs(x.span_logprob - y.span_logprob) for x, y in zip(batch, alone)]
    return {"reuse_block": block, "batch_seconds": round(seconds, 2), "tokens_evaluated": evaluated,
            "tokens_requested": requested, "answer_scorings": len(answer),
            "answer_differ": sum(d > 0 for d in answer), "answer_max_diff_nats": max(answer),
            "span_differ": sum(d > 0 for d in span), "span_max_diff_nats": max(span),
            "load_start": load_start, "load_end": load_average()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--subsets", type=int, default=24)
    ap.add_argument("--blocks", type=int, nargs="+", default=[0, 64, 128, 256])
    args = ap.parse_args()
    requests = trial_requests(args.questions, args.subsets)
    model_path = local_model_path(DEFAULT_SOLVER, SETTINGS.models_dir)
    rows = []
    for block in args.blocks:
        rows.append(measure(requests, block, model_path))
        print(rows[-1], flush=True)
    path = write_json("scoring_determinism", {"machine": machine(), "requests": len(requests),
                                              "questions": args.questions, "subsets": args.subsets, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
