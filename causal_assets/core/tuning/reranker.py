"""Tuning a cross-encoder reranker on a benchmark's tune split (`tuning.reranker`, the `tuned_reranker` asset).

`tune_reranker` fits the cross-encoder (`retrievers/cross_encoder.py`) on the share of the judged tune queries the
encoder is fitted on, with hard negatives from the hybrid's top `pool`. On the held-out queries only (where its
scores are not memorised) it reranks the hybrid's top `depth` by `z(hybrid) + a * z(cross-encoder)`, and adopts
the reranker only beyond `standard_errors` standard errors of the paired gain. `members` > 1 averages the logits
of fits from successive seeds. Members already saved under a fit's version are read, not refitted;
`refit_on_tune_split` refits adopted members on every judged tune query. Details: docs/pipeline.md ("Tuning").
"""
from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from causal_assets.core.registry.benchmarks import Benchmark, restrict
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.dense import model_dir, torch_threads
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers import cross_encoder
from causal_assets.core.retrievers.cross_encoder import (CrossEncoder, CrossEncoderEnsemble, CrossEncoderReranker,
                                                        member_dir, member_dirs)
from causal_assets.core.retrievers.similarity import HybridRetriever
from causal_assets.core.tuning import encoder
from causal_assets.core.tuning.encoder import (figures_by_setting, fit_and_held_out, fit_threads, fit_version,
                                               hybrid_figures, means, paired_gain, train_in_batches)
from causal_assets.core.registry.tuning import RerankerSpec


@dataclass
class RerankerResult:
    adopted: bool
    weight: float                   # the cross-encoder's weight `a` chosen on the held-out queries
    base_weight: float              # the dense share of the hybrid it reranks there
    base: dict[float, float]        # held-out figure of the hybrid alone, per dense share
    by_mix: dict[float, float]      # held-out figure per cross-encoder weight over the chosen hybrid (0: alone)
    by_member: list[dict[float, float]]  # the same for each member alone (an ensemble's; [] for one model)
    gain: float                     # chosen weight - hybrid alone, the mean paired per-query difference
    gain_se: float                  # its standard error over the held-out queries
    fit_queries: int
    held_out_queries: int
    groups: int                     # relevant pairs fitted on, each with its negatives
    # per member fitted here (not read), by its directory relative to the fit's ("member-0", "tune-split/member-0"):
    # its first and last epoch's mean loss
    losses: dict[str, tuple[float, float]]
    seconds: dict[str, float]
    model: str = ""                 # the adopted members' directory relative to the fit's ("" or TUNE_SPLIT)
    tune_split_queries: int = 0     # the judged tune queries the adopted members were fitted again on (0: not)


def training_groups(index: CorpusIndex, bench: Benchmark, qids: list[str], base_weight: float,
                    pool: int) -> list[tuple[str, str, list[str]]]:
    """(query, relevant chunk id, hard-negative chunk ids) per judged relevant pair of `qids`: the negatives are the
    hybrid's top `pool` minus the judged documents (inside the question's candidates where it has them)."""
    run = run_benchmark(HybridRetriever(index, base_weight), restrict(bench, qids), pool).run
    groups = []
    for q in qids:
        judged = bench.qrels.get(q, {})
        ranked = sorted(run.get(q, {}), key=run[q].get, reverse=True) if q in run else []
        negatives = [d for d in ranked if d not in judged]
        if negatives:
            groups += [(bench.queries[q], d, negatives) for d, rel in judged.items()
                       if rel > 0 and d in index.position]
    return groups


def fit(model: CrossEncoder, groups: list[tuple[str, str, list[str]]], index: CorpusIndex, spec: RerankerSpec,
        seed: int = 0) -> list[float]:
    """Listwise cross-entropy, the relevant document first among its negatives (`train_in_batches`, as the
    encoder). Returns each epoch's mean batch loss."""
    import torch  # optional heavy dependency (as in core/index/dense.py): only where a cross-encoder is fitted

    def batch_loss(batch, rng: random.Random):
        # every group the same width (few candidates: negatives drawn again), the relevant document at 0
        docs = [[d] + (rng.sample(n, spec.negatives) if len(n) >= spec.negatives
                       else [rng.choice(n) for _ in range(spec.negatives)]) for _, d, n in batch]
        logits = model.logits([q for (q, _, _), ds in zip(batch, docs) for _ in ds],
                              [index.text(d) for ds in docs for d in ds])
        return torch.nn.functional.cross_entropy(logits.view(len(batch), -1), torch.zeros(len(batch), dtype=torch.long))

    model.model.train()
    epochs = train_in_batches(model.model.parameters(), groups, spec.epochs, spec.batch_size, spec.lr, seed,
                              batch_loss)
    model.model.eval()
    return [float(np.mean(losses)) for losses in epochs]


def recipe() -> str:
    """The fitting and scoring code (this module, the encoder helpers it uses, the reranking retriever) and the
    versions of the libraries that run it."""
    libraries = [f"{name}=={metadata.version(name)}" for name in ("torch", "transformers")]
    sources = b"".join(Path(m.__file__).read_bytes() for m in (encoder, cross_encoder)) + Path(__file__).read_bytes()
    return hashlib.sha256(sources + repr(libraries).encode()).hexdigest()[:12]


# spec fields read only after the members are fitted (`refit_on_tune_split`'s members are decided by the decision)
DECISION = ("depth", "mix", "min_gain", "standard_errors", "refit_on_tune_split")
TUNE_SPLIT = "tune-split"   # where the members fitted again on the whole tune split are saved, in the fit's directory
COUNT = "members"   # member i is the same fit whatever the count: the count names no directory


def reranker_versions(index: CorpusIndex, bench: Benchmark, spec: RerankerSpec, seed: int) -> tuple[str, str]:
    """(the members' fit version, the record's version). The fit's is `fit_version` with this module's `recipe`,
    without `COUNT` and the `DECISION` fields, and with the vectors of the hybrid it reranks and draws negatives from
    (the tuned encoder's where one was adopted); the record's adds the count and the decision's fields."""
    fitted = fit_version(index, bench, spec.model_copy(update=dict.fromkeys((COUNT, *DECISION))), seed, recipe())
    decided = (fitted, [getattr(spec, f) for f in (COUNT, *DECISION)])
    return fitted, hashlib.sha256(repr(decided).encode()).hexdigest()[:12]


def fitted_members(groups: list[tuple[str, str, list[str]]], index: CorpusIndex, spec: RerankerSpec, seed: int,
                   fit_dir: Path, within: str, queries: int, log: Callable[[str], None],
                   losses: dict[str, tuple[float, float]], seconds: dict[str, float]) -> list[CrossEncoder]:
    """`spec.members` cross-encoders fitted on `groups` (member i from seed + i, from the packaged MiniLM's weights)
    and saved as `member-<i>` in `fit_dir / within`; a member already saved there is read, not fitted again. Each
    fitted member's first and last epoch loss goes into `losses` under its directory relative to `fit_dir`, its
    time into `seconds["fit"]`."""
    import torch  # the same optional dependency as `fit`

    members = []
    for member in range(spec.members):
        saved = member_dir(fit_dir / within, member)
        name = f"{within}/{saved.name}" if within else saved.name
        if saved in member_dirs(fit_dir / within):
            log(f"reranker: {name} fitted by an earlier materialization, read from {saved}")
            members.append(CrossEncoder(str(saved), spec.max_length))
            continue
        torch.manual_seed(seed + member)   # the fresh head's initial weights
        # from the packaged MiniLM's weights (the tuned encoder's would start from what a bi-encoder learned)
        model = CrossEncoder(model_dir(), spec.max_length)
        t0 = time.perf_counter()
        epochs = fit(model, groups, index, spec, seed + member)
        losses[name] = (epochs[0], epochs[-1])
        seconds["fit"] = round(seconds["fit"] + time.perf_counter() - t0, 1)
        log(f"reranker: {name} fitted on {len(groups)} pairs of {queries} queries, {seconds['fit']}s of fitting so "
            f"far (epoch loss {' -> '.join(f'{x:.3f}' for x in epochs)})")
        # saved, then read back as the evaluation will read it: the decision is about the saved models
        model.model.save_pretrained(str(saved))
        model.tokenizer.save_pretrained(str(saved))
        members.append(CrossEncoder(str(saved), spec.max_length))
    return members


def tune_reranker(index: CorpusIndex, bench: Benchmark, spec: RerankerSpec, metric: str, save_to: str | Path,
                  seed: int = 0, log: Callable[[str], None] = lambda m: None) -> RerankerResult:
    """Fit `spec.members` cross-encoders on the tune split minus its held-out share (seeds seed, seed + 1, ...;
    saved as `member-<i>` in `save_to`, adopted or not: the caller keeps or deletes it), decide on the held-out share
    (module docstring) for their mean logit, and, adopted with `refit_on_tune_split`, fit them again on the whole
    tune split into `save_to/tune-split`. A member that `save_to` already holds was fitted for this fit version
    (`reranker_versions`) by an earlier materialization: it is read, not fitted again (no losses, no fit seconds for
    it)."""
    if index.embeddings is None:
        raise ValueError(f"tuning.reranker: corpus {index.corpus!r} has no embeddings for the hybrid it reranks")
    save_to = Path(save_to)
    fit_ids, held = fit_and_held_out(bench, spec.held_out, seed, "tuning.reranker")
    held_bench = restrict(bench, held)
    base_per_query = hybrid_figures(index, held_bench, spec.weights, metric)
    base = means(base_per_query)
    base_weight = max(base, key=lambda w: (base[w], -w))
    log(f"reranker: hybrid on {len(held)} held-out queries: {base}; reranked at dense share {base_weight}")
    seconds: dict[str, float] = {"fit": 0.0}
    losses: dict[str, tuple[float, float]] = {}
    threads = fit_threads(spec.threads)
    log(f"reranker: fitting and scoring on {threads} torch thread(s)")
    with torch_threads(threads):
        groups = training_groups(index, bench, fit_ids, base_weight, spec.pool)
        members = fitted_members(groups, index, spec, seed, save_to, "", len(fit_ids), log, losses, seconds)
        t0 = time.perf_counter()
        hybrid = HybridRetriever(index, base_weight)

        def by_mix_of(model) -> dict[float, dict[str, float]]:
            return figures_by_setting(held_bench, {a: CrossEncoderReranker(index, hybrid, model, a, spec.depth)
                                                   for a in spec.mix}, metric)

        # each member alone, for the record (the members' cached scores make the ensemble's figures cheap)
        by_member = [means(by_mix_of(m)) for m in members] if len(members) > 1 else []
        model = members[0] if len(members) == 1 else CrossEncoderEnsemble(members)
        by_mix_per_query = {0.0: base_per_query[base_weight], **by_mix_of(model)}
        seconds["held_out"] = round(time.perf_counter() - t0, 1)
        for member, figures in enumerate(by_member):
            log(f"reranker: member {member} alone, held-out {metric} by weight {figures}")
        by_mix = means(by_mix_per_query)
        chosen = max(spec.mix, key=lambda a: (by_mix[float(a)], -a))
        gain, se = paired_gain({0.0: by_mix_per_query[0.0]}, {float(chosen): by_mix_per_query[float(chosen)]})
        adopted = gain > spec.min_gain + spec.standard_errors * se
        log(f"reranker: held-out {metric} by cross-encoder weight {by_mix} ({len(members)} member(s)): weight "
            f"{chosen} {gain:+.4f} (1 SE {se:.4f}): {'adopted' if adopted else 'not adopted'}")
        refit = adopted and spec.refit_on_tune_split
        if refit:
            # the order every refit sees (its batches are shuffled from it): the fit share's, then the held-out's
            every = fit_ids + held
            fitted_members(training_groups(index, bench, every, base_weight, spec.pool), index, spec, seed,
                           save_to, TUNE_SPLIT, len(every), log, losses, seconds)
    return RerankerResult(adopted, float(chosen), float(base_weight), base, by_mix, by_member, gain, se,
                          len(fit_ids), len(held), len(groups), losses, seconds, TUNE_SPLIT if refit else "",
                          len(fit_ids) + len(held) if refit else 0)
