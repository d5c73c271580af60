"""Tuning the dense encoder itself: in-domain fine-tuning of the corpus's bi-encoder on a benchmark's tune split.

A benchmark's judged (query, relevant document) pairs teach the general-purpose MiniLM the domain's language.
`tune_encoder` fits a copy of the index's model on all but a held-out share of the tune split's queries
(multiple-negatives ranking loss with one BM25 hard negative per query), then compares it with the index's own
vectors on the held-out queries, in the z-score hybrid at each of `weights`. It is adopted only beyond
`standard_errors` standard errors of the paired per-query difference, because fits differing only by their seed
gain by as much as a real gain (docs/decisions.md, "Encoders and rerankers"); the adopted encoder is the one
compared, never refit on the held-out queries.
"""
from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel

from causal_assets.core.registry.benchmarks import Benchmark, restrict
from causal_assets.core.measures.metrics import named_metric_per_query
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.dense import Embedder, model_dir, torch_threads
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.llm.cores import free_cores
from causal_assets.core.retrievers.similarity import HybridRetriever
from causal_assets.core.registry.tuning import EncoderSpec

SCALE = 20.0         # logit scale of the in-batch softmax (sentence-transformers' MultipleNegativesRankingLoss)
HARD_NEGATIVES = 20  # a query's hard negative is drawn from its BM25 top-20 that is not judged relevant
SEQ_LEN = 256        # tokens per document while training (abstracts fit; the index encodes with the model's own)
BACKEND = "torch"    # the fine-tuned encoder's vectors and queries: fp32 PyTorch, as it was compared


@dataclass
class EncoderResult:
    adopted: bool
    base: dict[float, float]        # held-out hybrid figure per weight, the index's own vectors
    tuned: dict[float, float]       # the same with the fine-tuned encoder
    gain: float                     # best tuned - best base, the mean of the paired per-query differences
    gain_se: float                  # its standard error over the held-out queries
    fit_queries: int
    held_out_queries: int
    pairs: int
    losses: tuple[float, float]     # first and last batch loss
    seconds: dict[str, float]
    embeddings: np.ndarray          # the fine-tuned encoder's vectors of every chunk, in chunk order


def training_pairs(index: CorpusIndex, bench: Benchmark, qids: list[str]) -> list[tuple[str, int, list[int]]]:
    """(query, relevant chunk position, hard-negative positions) per judged relevant pair of `qids`."""
    ids = index.ids.astype(str)
    pairs = []
    for q in qids:
        bm25 = index.scores(bench.queries[q], "bm25")
        judged = bench.qrels.get(q, {})
        negatives = [int(j) for j in np.argsort(-bm25, kind="stable")[:HARD_NEGATIVES] if ids[j] not in judged]
        pairs += [(bench.queries[q], index.position[d], negatives or [int(np.argmin(bm25))])
                  for d, rel in judged.items() if rel > 0 and d in index.position]
    return pairs


def warmup_decay(lr: float, step: int, total: int) -> float:
    """The learning rate at `step` (1-based) of `total`: linear warm-up over the first 10% of steps, then linear
    decay to 0 (the schedule of sentence-transformers' and transformers' fits)."""
    return lr * max(0.0, min(step / max(1, 0.1 * total), (total - step + 1) / (0.9 * total)))


def train_in_batches(parameters, items: list, epochs: int, batch_size: int, lr: float, seed: int,
                     batch_loss: Callable[[list, random.Random], object]) -> list[list[float]]:
    """AdamW over `items` in seeded, reshuffled batches at the `warmup_decay` learning rate; `batch_loss(batch, rng)`
    gives a batch's loss tensor. Every fit here (encoder, reranker) trains through this. Returns each epoch's batch
    losses."""
    import torch  # optional heavy dependency (as in core/index/dense.py): only where a model is fitted

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(parameters, lr=lr)
    rng = random.Random(seed)
    items = list(items)
    total = epochs * -(-len(items) // batch_size)
    step, out = 0, []
    for _ in range(epochs):
        rng.shuffle(items)
        losses = []
        for s in range(0, len(items), batch_size):
            loss = batch_loss(items[s:s + batch_size], rng)
            step += 1
            for g in opt.param_groups:
                g["lr"] = warmup_decay(lr, step, total)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        out.append(losses)
    return out


def fine_tune(model, pairs: list[tuple[str, int, list[int]]], texts: list[str], spec: EncoderSpec,
              seed: int = 0) -> list[float]:
    """Multiple-negatives ranking loss (`train_in_batches`). Returns the loss of every batch."""
    import torch  # the same optional dependency

    def embed(items: list[str]):
        return torch.nn.functional.normalize(model(model.preprocess(items))["sentence_embedding"], dim=-1)

    def batch_loss(batch, rng: random.Random):
        gold = [p for _, p, _ in batch]
        columns = gold + [rng.choice(n) for _, _, n in batch]
        logits = SCALE * embed([x for x, _, _ in batch]) @ embed([texts[p] for p in columns]).T
        # a query's relevant document in another column (another query's, or drawn as a negative) is no negative
        same = torch.tensor([[j != i and columns[j] == gold[i] for j in range(len(columns))]
                             for i in range(len(batch))])
        return torch.nn.functional.cross_entropy(logits.masked_fill(same, -1e4), torch.arange(len(batch)))

    model.train()
    epochs = train_in_batches(model.parameters(), pairs, spec.epochs, spec.batch_size, spec.lr, seed, batch_loss)
    model.eval()
    return [x for losses in epochs for x in losses]


def fit_threads(threads: int) -> int:
    """Torch's intra-op threads for a fit: `threads`, or for 0 the cores other processes leave free at its start
    (`core/llm/cores.py`). Torch's default is every core, and its threads wait for each other at every operation:
    beside other work on 2 cores a cross-encoder fit ran 10-16 times slower on two threads than on one (the same six
    steps: 55-80 s against 5-6 s, load 8)."""
    return threads or free_cores()


def figures_by_setting(held: Benchmark, retrievers: dict[float, Any], metric: str) -> dict[float, dict[str, float]]:
    """Per setting, `metric` per query of `held` for that setting's retriever, through `run_benchmark` as the
    evaluation runs it. A query the metric does not score counts 0, as in the mean the evaluation reports."""
    out = {}
    for setting, retriever in retrievers.items():
        scores = named_metric_per_query(held.qrels, run_benchmark(retriever, held).run, metric)
        out[float(setting)] = {q: float(scores.get(q, 0.0)) for q in held.query_ids()}
    return out


def hybrid_figures(index: CorpusIndex, held: Benchmark, weights: list[float],
                   metric: str) -> dict[float, dict[str, float]]:
    """Per dense share, `metric` per query of `held` for the z-score hybrid over `index`: the `HybridRetriever` the
    tuning then sweeps, so the decision is about the figure the tuned hybrid computes (ANN scale included)."""
    return figures_by_setting(held, {w: HybridRetriever(index, w) for w in weights}, metric)


def means(per_query: dict[float, dict[str, float]]) -> dict[float, float]:
    return {w: round(float(np.mean(list(s.values()))), 4) if s else 0.0 for w, s in per_query.items()}


def paired_gain(base: dict[float, dict[str, float]], tuned: dict[float, dict[str, float]]) -> tuple[float, float]:
    """Best tuned weight against best base weight: the mean paired per-query difference and its standard error."""
    b, t = (max(side.values(), key=lambda s: np.mean(list(s.values()))) for side in (base, tuned))
    d = np.array([t[q] - b[q] for q in b])
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")


def held_out_split(qids: list[str], share: float, seed: int) -> tuple[list[str], list[str]]:
    """(fit, held out): a seeded share of the judged queries is held out."""
    order = sorted(qids)
    random.Random(seed).shuffle(order)
    n = max(1, round(share * len(order)))
    return sorted(order[n:]), sorted(order[:n])


def fit_and_held_out(bench: Benchmark, share: float, seed: int, section: str) -> tuple[list[str], list[str]]:
    """`held_out_split` of the judged queries of `bench`; refused, naming the registry `section`, when none is left
    to fit on."""
    judged = [q for q in bench.query_ids() if any(v > 0 for v in bench.qrels.get(q, {}).values())]
    fit, held = held_out_split(judged, share, seed)
    if not fit:
        raise ValueError(f"{section}: {len(judged)} judged queries on {bench.split!r} of {bench.name!r}: none left "
                         f"to fit on after holding out {share:.0%}")
    return fit, held


def recipe() -> str:
    """The fitting code: this module's source and the versions of the libraries that run it."""
    libraries = [f"{name}=={metadata.version(name)}" for name in ("torch", "sentence-transformers", "transformers")]
    return hashlib.sha256(Path(__file__).read_bytes() + repr(libraries).encode()).hexdigest()[:12]


def fit_version(index: CorpusIndex, bench: Benchmark, spec: BaseModel, seed: int, code: str) -> str:
    """A fit's version: what determines the fit and its decision. The corpus's chunks and the vectors the decision
    compares or ranks with (their model, as the vectors table names it, and backend), the tune split's queries,
    judgements and candidate sets, the spec, the seed and the fitting `code`. The assets keep the last fit of the
    same version, so a kept fit is never one that other code or data made. The model by the table's name for it,
    not its resolved path: a tuned encoder's is relative to the table, so a data directory moved or copied as a
    whole keeps its fits (its absolute path would refit SciFact's reranker, 96 min, in every copy)."""
    h = hashlib.sha256()
    embedder = index.embedder
    for part in (index.chunks["content_hash"].astype(str).tolist(), sorted(bench.queries.items()),
                 sorted((q, sorted(r.items())) for q, r in bench.qrels.items()),
                 sorted((q, list(c)) for q, c in (bench.within or {}).items()), spec.model_dump(),
                 (embedder.reference, embedder.backend) if embedder is not None else None, seed, code):
        h.update(repr(part).encode())
        h.update(b"\x1e")
    return h.hexdigest()[:12]


def encoder_version(index: CorpusIndex, bench: Benchmark, spec: EncoderSpec, seed: int) -> str:
    """The encoder fit's version (`fit_version`, with this module's `recipe`)."""
    return fit_version(index, bench, spec, seed, recipe())


def tune_encoder(index: CorpusIndex, bench: Benchmark, spec: EncoderSpec, metric: str, save_to: str | Path,
                 seed: int = 0, log: Callable[[str], None] = lambda m: None) -> EncoderResult:
    """Fit on the tune split minus its held-out share, save the encoder to the new directory `save_to` (adopted or
    not: the caller keeps or deletes it), compare on the held-out share (module docstring)."""
    from sentence_transformers import SentenceTransformer  # optional heavy dependency (torch), as in dense.py

    if bench.within:
        raise ValueError(f"tuning.encoder: benchmark {bench.name!r} ranks each question's own candidates; the "
                         f"encoder is tuned only where queries rank the whole corpus")
    if index.embeddings is None:
        raise ValueError(f"tuning.encoder: corpus {index.corpus!r} has no embeddings to compare against")
    fit, held = fit_and_held_out(bench, spec.held_out, seed, "tuning.encoder")
    texts = chunk_texts(index.chunks)
    pairs = training_pairs(index, bench, fit)
    seconds: dict[str, float] = {}
    held_bench = restrict(bench, held)
    base_per_query = hybrid_figures(index, held_bench, spec.weights, metric)
    base = means(base_per_query)
    log(f"encoder: base vectors on {len(held)} held-out queries: {base}")
    model = SentenceTransformer(model_dir(index.embedder.model_name), device="cpu", local_files_only=True)
    model.max_seq_length = SEQ_LEN
    threads = fit_threads(spec.threads)
    with torch_threads(threads):
        t0 = time.perf_counter()
        losses = fine_tune(model, pairs, texts, spec, seed)
        seconds["fit"] = round(time.perf_counter() - t0, 1)
        log(f"encoder: fitted on {len(pairs)} pairs of {len(fit)} queries in {seconds['fit']}s on {threads} torch "
            f"thread(s) (loss {losses[0]:.3f} -> {losses[-1]:.3f})")
        # saved, then read back as the evaluation will read it: the compared vectors and queries are the ones the
        # tuned retrievers get (a directory name not loaded before: models are cached by it)
        model.save(str(save_to))
        embedder = Embedder(str(save_to), backend=BACKEND)
        t0 = time.perf_counter()
        tuned_index = replace(index, embeddings=embedder.encode(texts), embedder=embedder)
        seconds["encode"] = round(time.perf_counter() - t0, 1)
        tuned_per_query = hybrid_figures(tuned_index, held_bench, spec.weights, metric)
    tuned = means(tuned_per_query)
    gain, se = paired_gain(base_per_query, tuned_per_query)
    adopted = gain > spec.min_gain + spec.standard_errors * se
    log(f"encoder: fine-tuned vectors on the held-out queries: {tuned}: {gain:+.4f} (1 SE {se:.4f}): "
        f"{'adopted' if adopted else 'not adopted'}")
    return EncoderResult(adopted, base, tuned, gain, se, len(fit), len(held), len(pairs), (losses[0], losses[-1]),
                         seconds, tuned_index.embeddings)
