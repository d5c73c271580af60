"""Does another llama.cpp binding give llama-cpp-python's answer log-probabilities, and how fast?

    python benchmarks/binding_parity.py --binding llama-cpp-python --out ref.json
    /other/venv/bin/python benchmarks/binding_parity.py --binding cyllama --out cand.json
    python benchmarks/binding_parity.py --compare ref.json cand.json

Monte Carlo trials as the labels make them (`trial_requests`: random subsets of HotpotQA
paragraphs, the gold answer and the question span), scored in prefix order. llama-cpp-python scores through the
product's `LlamaCppScorer`; a candidate through the same algorithm over its own API (prompt and span tokenized
apart, the previous prompt's KV cache reused in whole 128-token blocks, logits only for the rows that predict a
scored token, the context as `Llama(flash_attn=False)` makes it); `--requests` scores recorded requests instead. One
thread each unless `--threads`; the load average is recorded. `--compare` prints the largest difference in nats, the
requests tokenized differently and the mean time per request. A candidate runs in a venv of its own with the
project's other dependencies.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_average  # noqa: E402

from causal_assets.core.corpus.multihop import read_multihop  # noqa: E402
from causal_assets.core.labeling.solver import answer_continuations, question_span, solver_prompt  # noqa: E402
from causal_assets.core.llm.models import DEFAULT_SOLVER, local_model_path  # noqa: E402
from causal_assets.core.llm.scoring import REUSE_BLOCK, LlamaCppScorer, ScoreRequest  # noqa: E402
from causal_assets.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()   # the variables the code location reads (causal_assets/settings.py)
DOC_CHARS = 400                  # HotpotQA's `pooling.max_doc_chars` in the registry


def trial_requests(n_questions: int, n_subsets: int, seed: int = 0) -> list[ScoreRequest]:
    """Monte Carlo trials as the labels make them: random subsets of each HotpotQA question's paragraphs, the gold
    answer as continuation."""
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


def _log_softmax_at(row: np.ndarray, token: int) -> float:
    m = float(row.max())
    return float(row[token] - m - math.log(float(np.exp(row - m).sum())))


class Candidate:
    """The scorer's teacher forcing over a binding's tokenize / decode / KV-removal calls."""

    def __init__(self):
        self.ids: list[int] = []
        self.version = ""

    def score(self, req) -> tuple[list[float], float | None]:
        tok = self.tokenize
        if req.span is None:
            prompt, rows = tok(req.prompt, True), []
        else:
            a, b = req.span
            head, span = tok(req.prompt[:a], True), tok(req.prompt[a:b], False)
            prompt = head + span + tok(req.prompt[b:], False)
            rows = list(range(len(head) - 1, len(head) + len(span) - 1))
        lps, span_lp = [], None
        for cont in req.continuations:
            target = tok(cont, False)
            tokens, extra = prompt + target, (rows if span_lp is None else [])
            common = 0
            for x, y in zip(self.ids, tokens[:min([len(prompt) - 1, *extra])]):
                if x != y:
                    break
                common += 1
            common -= common % REUSE_BLOCK
            self.kv_rm(common)
            self.ids = self.ids[:common]
            want = set(range(len(prompt) - 1, len(tokens) - 1)) | set(extra)
            at = {}
            for start in range(common, len(tokens) - 1, REUSE_BLOCK):
                chunk = tokens[start: min(len(tokens) - 1, start + REUSE_BLOCK)]
                got = self.decode(chunk, start, [i for i in range(len(chunk)) if start + i in want])
                self.ids += chunk
                at.update({start + i: _log_softmax_at(row, tokens[start + i + 1]) for i, row in got.items()})
            lps.append(sum(at[p] for p in range(len(prompt) - 1, len(tokens) - 1)))
            if span_lp is None and rows:
                span_lp = sum(at[r] for r in rows)
        return lps, span_lp


class Cyllama(Candidate):
    def __init__(self, model: Path, threads: int):
        super().__init__()
        from cyllama.llama import llama_cpp as cy

        cy.disable_logging()
        cy.ggml_backend_load_all()

        class Model(cy.LlamaModel):   # cyllama 0.2.18's get_logits_ith reads a model.n_vocab it lacks
            n_vocab = property(lambda self: self.get_vocab().n_vocab)

        self.model = Model(str(model), cy.LlamaModelParams())
        p = cy.LlamaContextParams()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_threads, p.n_threads_batch = 4096, 512, 512, threads, threads
        p.flash_attn_type = 0
        self.ctx, self.vocab = cy.LlamaContext(self.model, p), self.model.get_vocab()
        self.batch = cy.LlamaBatch(n_tokens=512, embd=0, n_seq_max=1)
        import importlib.metadata
        self.version = f"cyllama {importlib.metadata.version('cyllama')}"

    def tokenize(self, text: str, bos: bool) -> list[int]:
        return list(self.vocab.tokenize(text, add_special=bos, parse_special=False))

    def kv_rm(self, pos: int) -> None:
        self.ctx.memory_seq_rm(-1, pos, -1)

    def decode(self, chunk, start, rows):
        self.batch.clear()
        for i, t in enumerate(chunk):
            self.batch.add(t, start + i, [0], i in rows)
        self.ctx.decode(self.batch)
        return {i: np.asarray(self.ctx.get_logits_ith(i), dtype=np.float32) for i in rows}


class PySync(Candidate):
    def __init__(self, model: Path, threads: int):
        super().__init__()
        import llama_cpp_py_sync
        from llama_cpp_py_sync._cffi_bindings import get_ffi, get_lib

        self.ffi, lib = get_ffi(), get_lib()
        self.lib = lib
        lib.llama_backend_init()
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(str(model).encode(), mp)
        p = lib.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_threads, p.n_threads_batch = 4096, 512, 512, threads, threads
        p.flash_attn_type = 0
        self.ctx = lib.llama_init_from_model(self.model, p)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.batch, self.memory = lib.llama_batch_init(512, 0, 1), lib.llama_get_memory(self.ctx)
        self.version = f"llama-cpp-py-sync {llama_cpp_py_sync.__version__}"

    def tokenize(self, text: str, bos: bool) -> list[int]:
        b = text.encode()
        buf = self.ffi.new(f"llama_token[{len(b) + 16}]")
        return list(buf[0: self.lib.llama_tokenize(self.vocab, b, len(b), buf, len(b) + 16, bos, False)])

    def kv_rm(self, pos: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, -1, pos, -1)

    def decode(self, chunk, start, rows):
        b = self.batch
        b.n_tokens = len(chunk)
        for i, t in enumerate(chunk):
            b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = t, start + i, 1, 0, i in rows
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return {i: np.frombuffer(self.ffi.buffer(self.lib.llama_get_logits_ith(self.ctx, i), 4 * self.n_vocab),
                                 dtype=np.float32).copy() for i in rows}


def run(binding: str, model: Path, threads: int, requests) -> dict:
    load_start = load_average()
    requests = sorted(requests, key=lambda r: r.prompt)
    rows = []
    if binding == "llama-cpp-python":
        scorer = LlamaCppScorer(model, f"local/{DEFAULT_SOLVER}", cache=None, n_threads=threads)
        version = scorer.binding
        t0 = time.perf_counter()
        for res in scorer.score_many(requests):
            rows.append({"logprobs": list(res.logprobs), "span": res.span_logprob, "seconds": res.latency_s})
        tokens = [scorer.tokenize(r.prompt, True) for r in requests]
    else:
        cand = {"cyllama": Cyllama, "llama-cpp-py-sync": PySync}[binding](model, threads)
        version = cand.version
        t0 = time.perf_counter()
        for req in requests:
            t = time.perf_counter()
            lps, span = cand.score(req)
            rows.append({"logprobs": lps, "span": span, "seconds": time.perf_counter() - t})
        tokens = [cand.tokenize(r.prompt, True) for r in requests]
    seconds = time.perf_counter() - t0
    for row, req, tok in zip(rows, requests, tokens):
        row.update(prompt=req.prompt, continuations=list(req.continuations), span_chars=req.span and list(req.span),
                   tokens=tok)
    return {"binding": version, "threads": threads, "requests": len(rows), "seconds": round(seconds, 2),
            "load_start": load_start, "load_end": load_average(), "rows": rows}


def compare(a: dict, b: dict) -> dict:
    def key(r):
        return r["prompt"], tuple(r["continuations"]), tuple(r["span_chars"] or ())

    by_request = {key(r): r for r in a["rows"]}
    pairs = [(by_request[key(r)], r) for r in b["rows"]]
    answer = [abs(x - y) for ra, rb in pairs for x, y in zip(ra["logprobs"], rb["logprobs"])]
    span = [abs(ra["span"] - rb["span"]) for ra, rb in pairs if ra["span"] is not None]
    return {"bindings": [a["binding"], b["binding"]], "answer_scorings": len(answer),
            "answer_max_diff_nats": max(answer), "answer_within_1e-4": sum(d <= 1e-4 for d in answer),
            "span_max_diff_nats": max(span, default=0.0),
            "tokenized_differently": sum(ra["tokens"] != rb["tokens"] for ra, rb in pairs),
            "seconds_per_request": [round(x["seconds"] / x["requests"], 3) for x in (a, b)],
            "loads": [[x["load_start"][0], x["load_end"][0]] for x in (a, b)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binding", choices=["llama-cpp-python", "cyllama", "llama-cpp-py-sync"])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    ap.add_argument("--model", type=Path, help="the GGUF (default: the packaged solver)")
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--subsets", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--requests", type=Path, help="JSON lines of prompt, continuations and span to score instead "
                    "(e.g. the requests a test run passed to `score_many`)")
    args = ap.parse_args()
    if args.compare:
        print(json.dumps(compare(*(json.loads(p.read_text()) for p in args.compare)), indent=1))
        return
    if not (args.binding and args.out):
        ap.error("--binding and --out, or --compare A B")
    model = args.model or local_model_path(DEFAULT_SOLVER, SETTINGS.models_dir)
    if args.requests:
        lines = [json.loads(x) for x in args.requests.read_text().splitlines() if x.strip()]
        requests = [ScoreRequest(x["prompt"], tuple(x["continuations"]), tuple(x["span"]) if x.get("span") else None)
                    for x in lines]
    else:
        requests = trial_requests(args.questions, args.subsets)
    out = run(args.binding, model, args.threads, requests)
    args.out.write_text(json.dumps(out))
    print(f"{out['binding']}: {out['requests']} requests in {out['seconds']} s, load {out['load_start']} -> "
          f"{out['load_end']}; wrote {args.out}")


if __name__ == "__main__":
    main()
