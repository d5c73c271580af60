"""Incremental re-index cost: re-indexing an unchanged corpus, and one with 1% of its documents edited, as a share of
a full index.

    python benchmarks/incremental_reindex.py [--quick] [--documents N]

The corpus is a BEIR folder of the first N SciFact documents (default 1,000) in a temporary directory; every run
goes from the files to the stored index as the three corpus index assets do (chunks, BM25 and TF-IDF postings,
`embed_incremental` against the content-hash cache), writing Parquet to a temporary base path. Runs: full (empty
cache), unchanged (median of repeats), and 1% change (a different random 1% of the documents edited each repeat,
each from the state after the full index). Writes data/benchmarks/incremental_reindex.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from common import Figure, add_common_options, machine, write_result

from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.registry.corpora import CorpusSpec, load_corpus
from causal_assets.core.index.build import build_sparse, chunk_texts, sparse_frames
from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, compute_fingerprint
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder, EmbeddingCache, embed_incremental
from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

TARGET_UNCHANGED, TARGET_ONE_PERCENT = 0.05, 0.10
NAME = "scifact_subset"


def index_corpus(spec: CorpusSpec, base: Path, cache: EmbeddingCache, embedder: Embedder) -> dict:
    """The corpus index assets' work, without Dagster: seconds per stage and the embedding stats."""
    t0 = time.perf_counter()
    chunks, _ = load_corpus(spec)
    frame = chunks_to_frame(chunks)
    frame.insert(0, "chunk_idx", range(len(frame)))
    frame["index_options"] = json.dumps({"split_identifiers": spec.split_identifiers})
    frame[FINGERPRINT] = compute_fingerprint(frame)
    write_parquet_atomic(frame, asset_path(base, "corpus_chunks", spec.name))
    t1 = time.perf_counter()
    indexes, _ = build_sparse(frame, spec.split_identifiers)
    postings, vocab = sparse_frames(indexes, spec.name, chunks_fingerprint(frame))
    write_parquet_atomic(postings, asset_path(base, "sparse_postings", spec.name))
    write_parquet_atomic(vocab, asset_path(base, "sparse_vocabulary", spec.name))
    t2 = time.perf_counter()
    hashes = frame["content_hash"].tolist()
    vectors, stats = embed_incremental(chunk_texts(frame), hashes, embedder, cache, spec.name)
    write_parquet_atomic(pd.DataFrame({"corpus": spec.name, "chunk_id": frame["chunk_id"], "chunk_idx": frame["chunk_idx"],
                                       "content_hash": hashes, "model": embedder.model_name,
                                       "embedding": list(vectors), FINGERPRINT: frame[FINGERPRINT]}),
                         asset_path(base, "corpus_embeddings", spec.name))
    t3 = time.perf_counter()
    return {"total_s": t3 - t0, "chunks_s": t1 - t0, "sparse_s": t2 - t1, "embeddings_s": t3 - t2,
            "embedded": stats["embedded"], "cache_hits": stats["cache_hits"]}


def edit_documents(lines: list[str], share: float, seed: int) -> list[str]:
    """A copy of the corpus.jsonl lines with `share` of the documents' texts edited (a sentence appended)."""
    rng = np.random.default_rng(seed)
    picked = set(rng.choice(len(lines), max(1, round(share * len(lines))), replace=False).tolist())
    out = []
    for i, line in enumerate(lines):
        if i in picked:
            doc = json.loads(line)
            doc["text"] += f" Revised in edit {seed}."
            line = json.dumps(doc) + "\n"
        out.append(line)
    return out


def run(quick: bool, documents: int | None) -> tuple[list[Figure], dict]:
    documents = documents or (150 if quick else 1000)
    repeats = 2 if quick else 3
    source = SETTINGS.shared_data / "scifact" / "corpus.jsonl"
    with source.open(encoding="utf-8") as f:
        lines = [line for _, line in zip(range(documents), f)]
    embedder = Embedder()
    embedder.model.encode(["warm-up"])  # model loading is not indexing
    runs: dict[str, list[dict]] = {"full": [], "unchanged": [], "one_percent": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder, base, cache_root = tmp / "corpus", tmp / "parquet", tmp / "cache"
        folder.mkdir()
        corpus_file = folder / "corpus.jsonl"
        corpus_file.write_text("".join(lines), encoding="utf-8")
        spec = CorpusSpec(name=NAME, loader="beir", path=str(folder))
        cache = EmbeddingCache(cache_root, DEFAULT_MODEL)

        runs["full"].append(index_corpus(spec, base, cache, embedder))
        snapshot = tmp / "cache_after_full"
        shutil.copytree(cache_root, snapshot)
        for _ in range(repeats):
            runs["unchanged"].append(index_corpus(spec, base, cache, embedder))
        for r in range(repeats):
            shutil.rmtree(cache_root)
            shutil.copytree(snapshot, cache_root)
            corpus_file.write_text("".join(edit_documents(lines, 0.01, seed=r + 1)), encoding="utf-8")
            runs["one_percent"].append(index_corpus(spec, base, cache, embedder))

    def median(kind: str, key: str = "total_s") -> float:
        return float(np.median([r[key] for r in runs[kind]]))

    full = median("full")
    unchanged, one_percent = median("unchanged") / full, median("one_percent") / full
    details = {"corpus": f"first {documents} SciFact documents", "repeats": repeats, "full_index_runs": 1,
               "runs": runs, "median_total_s": {k: round(median(k), 3) for k in runs},
               "median_stage_s": {k: {s: round(median(k, s), 3) for s in ("chunks_s", "sparse_s", "embeddings_s")}
                                  for k in runs}}
    figures = [
        Figure("re-index of an unchanged corpus / full index", round(unchanged, 4), "ratio", TARGET_UNCHANGED, "<=",
               f"{median('unchanged'):.2f} s vs {full:.1f} s; {documents} SciFact documents"),
        Figure("re-index after a 1% change / full index", round(one_percent, 4), "ratio", TARGET_ONE_PERCENT, "<=",
               f"{median('one_percent'):.2f} s vs {full:.1f} s; "
               f"{int(np.median([r['embedded'] for r in runs['one_percent']]))} chunks re-embedded"),
    ]
    return figures, details


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(ap)
    ap.add_argument("--documents", type=int, help="SciFact documents in the corpus (default 1000, quick 150)")
    args = ap.parse_args()
    started = machine()
    figures, details = run(args.quick, args.documents)
    write_result("incremental_reindex", figures, details, started, args.quick, args.out)


if __name__ == "__main__":
    main()
