"""The tables the tuning stages write about their fits, and what a later read finds intact in them: the fine-tuned
encoder's record and vectors, the cross-encoder reranker's record, and the tuning trials with the configuration
they chose. `core.stored.reuse.reuse_or_fit` keeps a fit when these say it is whole; the evaluation reads the
adopted encoder and reranker through them."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from causal_assets.core.index.dense import resolve_model_reference
from causal_assets.core.index.provenance import FINGERPRINT, recorded_fingerprint
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.cross_encoder import member_dirs
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.stored.tuned import TunedConfig, intact_tuned
from causal_assets.core.tuning.encoder import BACKEND, EncoderResult
from causal_assets.core.tuning.reranker import RerankerResult
from causal_assets.core.registry.tuning import EncoderSpec, RerankerSpec

TUNED = "tuned_retriever_configs"
ENCODER, TUNED_EMBEDDINGS = "tuned_encoder", "tuned_embeddings"
RERANKER = "tuned_reranker"
ENCODER_COLUMNS = ["benchmark", "adopted", "reason", "metric", "held_out_base", "held_out_tuned", "held_out_gain",
                   "held_out_gain_se", "fit_queries", "held_out_queries", "pairs", "epochs", "lr", "fit_seconds",
                   "encode_seconds", "model", "version", "held_out_by_weight"]
RERANKER_COLUMNS = ["benchmark", "adopted", "reason", "metric", "weight", "depth", "max_length", "base_weight",
                    "held_out_base", "held_out_reranked", "held_out_gain", "held_out_gain_se", "fit_queries",
                    "held_out_queries", "pairs", "epochs", "lr", "members", "tune_split_queries", "fit_seconds",
                    "held_out_seconds", "model", "version", "held_out_by_mix", "held_out_by_member"]
EMBEDDING_COLUMNS = ["corpus", "chunk_id", "chunk_idx", "content_hash", "model", "backend", "embedding", FINGERPRINT]


def unfitted(columns: list[str], benchmark: str, reason: str, **values) -> pd.DataFrame:
    """The record of a benchmark nothing was fitted for (no tune split, not asked for), saying why."""
    return pd.DataFrame([{c: None for c in columns} | {"benchmark": benchmark, "adopted": False, "reason": reason,
                                                       **values}], columns=columns).astype({"adopted": bool})


def encoder_record(benchmark: str, result: EncoderResult, metric: str, encoder: EncoderSpec, version: str,
                   model: str) -> tuple[pd.DataFrame, dict]:
    """(record, held-out figures by weight) of an encoder fit; `model`: the adopted model as the record names it
    ("" when none was adopted)."""
    best = {"base": max(result.base.values()), "tuned": max(result.tuned.values())}
    by_weight = {"base": {str(k): v for k, v in result.base.items()},
                 "tuned": {str(k): v for k, v in result.tuned.items()}}
    record = pd.DataFrame([{
        "benchmark": benchmark, "adopted": result.adopted,
        "reason": f"held-out {metric} {best['tuned']:.4f} vs {best['base']:.4f} with the corpus's vectors: "
                  f"{result.gain:+.4f} per query, {'beyond' if result.adopted else 'within'} the margin "
                  f"(min_gain {encoder.min_gain} + {encoder.standard_errors} x 1 SE {result.gain_se:.4f})",
        "metric": metric, "held_out_base": best["base"], "held_out_tuned": best["tuned"],
        "held_out_gain": round(result.gain, 4), "held_out_gain_se": round(result.gain_se, 4),
        "fit_queries": result.fit_queries, "held_out_queries": result.held_out_queries, "pairs": result.pairs,
        "epochs": encoder.epochs, "lr": encoder.lr, "fit_seconds": result.seconds["fit"],
        "encode_seconds": result.seconds["encode"], "model": model, "version": version,
        "held_out_by_weight": json.dumps(by_weight)}], columns=ENCODER_COLUMNS)
    return record, by_weight


def encoder_vectors(corpus: str, index: CorpusIndex, result: EncoderResult, model: str) -> pd.DataFrame:
    """The corpus's chunk vectors under an adopted encoder (`model` as the table names it); empty when none was."""
    if not result.adopted:
        return pd.DataFrame(columns=EMBEDDING_COLUMNS)
    return pd.DataFrame({
        "corpus": corpus, "chunk_id": index.chunks["chunk_id"], "chunk_idx": index.chunks["chunk_idx"],
        "content_hash": index.chunks["content_hash"], "model": model, "backend": BACKEND,
        "embedding": list(result.embeddings), FINGERPRINT: index.fingerprint})


def reranker_record(benchmark: str, result: RerankerResult, metric: str, reranker: RerankerSpec, version: str,
                    model: str) -> pd.DataFrame:
    """The record of a reranker fit; `model`: the adopted members as the record names them ("" when none was)."""
    return pd.DataFrame([{
        "benchmark": benchmark, "adopted": result.adopted,
        "reason": f"held-out {metric} {result.by_mix[result.weight]:.4f} reranked (weight {result.weight}) vs "
                  f"{result.by_mix[0.0]:.4f} for the hybrid alone: {result.gain:+.4f} per query, "
                  f"{'beyond' if result.adopted else 'within'} the margin (min_gain {reranker.min_gain} + "
                  f"{reranker.standard_errors} x 1 SE {result.gain_se:.4f})"
                  + (f"; fitted again on all {result.tune_split_queries} tune queries" if result.model else ""),
        "metric": metric, "weight": result.weight, "depth": reranker.depth, "max_length": reranker.max_length,
        "base_weight": result.base_weight, "held_out_base": result.by_mix[0.0],
        "held_out_reranked": result.by_mix[result.weight], "held_out_gain": round(result.gain, 4),
        "held_out_gain_se": round(result.gain_se, 4), "fit_queries": result.fit_queries,
        "held_out_queries": result.held_out_queries, "pairs": result.groups, "epochs": reranker.epochs,
        "lr": reranker.lr, "members": reranker.members, "tune_split_queries": result.tune_split_queries,
        "fit_seconds": result.seconds["fit"], "held_out_seconds": result.seconds["held_out"], "model": model,
        "version": version,
        "held_out_by_mix": json.dumps({str(k): v for k, v in result.by_mix.items()}),
        "held_out_by_member": json.dumps([{str(k): v for k, v in m.items()} for m in result.by_member])}],
        columns=RERANKER_COLUMNS)


def tuned_embeddings_path(base, benchmark: str):
    """The benchmark's `tuned_embeddings` table when its last `tuned_encoder` adopted a fine-tuned encoder, else None
    (never tuned, not asked for, or the base vectors won on the held-out queries)."""
    record = asset_path(base, ENCODER, benchmark)
    if not record.exists():
        return None
    adopted = read_parquet(record, columns=["adopted"])["adopted"]
    return asset_path(base, TUNED_EMBEDDINGS, benchmark) if len(adopted) and bool(adopted.iloc[0]) else None


def kept_encoder(record: pd.DataFrame, record_path, vectors_path, target: Path, chunks: int,
                 fingerprint: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict] | None:
    """(record, vectors, held-out figures by weight) of an encoder record of one row when what it adopted is intact:
    the model directory `target` and the vectors at `vectors_path` of all `chunks` chunks under it (of the index
    `fingerprint`); the record at `record_path` names the model relative to itself."""
    if len(record) != 1 or not vectors_path.exists():
        return None
    by_weight = json.loads(record["held_out_by_weight"].iloc[0])   # a record written without them: ValueError
    if not bool(record["adopted"].iloc[0]):
        return record, pd.DataFrame(columns=EMBEDDING_COLUMNS), by_weight
    vectors = read_parquet(vectors_path)
    models = {resolve_model_reference(str(m), vectors_path) for m in vectors["model"]}
    intact = (resolve_model_reference(str(record["model"].iloc[0]), record_path) == str(target.resolve())
              and models == {str(target.resolve())} and (target / "config.json").exists() and len(vectors) == chunks
              and (fingerprint is None or recorded_fingerprint(vectors.get(FINGERPRINT)) == fingerprint))
    return (record, vectors, by_weight) if intact else None


def stored_reranker(base, benchmark: str) -> pd.DataFrame | None:
    """The benchmark's last `tuned_reranker` record when it is one this stage wrote (one row, its columns), else
    None."""
    path = asset_path(base, RERANKER, benchmark)
    if not path.exists():
        return None
    record = read_parquet(path)
    return record if len(record) == 1 and list(record.columns) == RERANKER_COLUMNS else None


def reranker_intact(record: pd.DataFrame, adopted_dir: Path, members: int) -> bool:
    """A reranker record of one row that adopted nothing, or whose `members` adopted members are in `adopted_dir`."""
    return len(record) == 1 and (not bool(record["adopted"].iloc[0]) or len(member_dirs(adopted_dir)) == members)


def adopted_reranker(base, benchmark: str) -> dict | None:
    """The `cross_encoder` params (model_path, weight, depth, max_length) and version of the benchmark's last
    `tuned_reranker` when it adopted one and its model is there, else None."""
    record = stored_reranker(base, benchmark)
    if record is None or not bool(record["adopted"].iloc[0]):
        return None
    row = record.iloc[0]
    model = resolve_model_reference(str(row["model"]), asset_path(base, RERANKER, benchmark))
    if len(member_dirs(model)) != int(row["members"]):   # not the ensemble the record decided on
        return None
    return {"model_path": model, "weight": float(row["weight"]), "depth": int(row["depth"]),
            "max_length": int(row["max_length"]), "version": str(row["version"])}


def kept_tuning(trials: pd.DataFrame, root: Path, benchmark: str) -> tuple[pd.DataFrame, TunedConfig] | None:
    """(trials, configuration) when the trials chose one configuration and it and its models are intact under
    `root` (removed or edited by hand, or a model missing: None)."""
    if trials["config_version"].nunique() != 1:
        return None
    stored = intact_tuned(root, benchmark, str(trials["config_version"].iloc[0]))
    return (trials, stored) if stored is not None else None
