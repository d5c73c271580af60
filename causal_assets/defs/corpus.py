"""Stage 1, the corpus index: chunks, sparse indexes (BM25, TF-IDF) and dense embeddings, per corpus."""

import hashlib
import json
import os
import time

import pandas as pd
from dagster import AssetExecutionContext, AssetOut, MetadataValue, Output, asset, multi_asset

from causal_assets.core.outputs.checks import blank_chunks, check_chunks, check_embeddings, check_sparse
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.registry.corpora import load_corpus
from causal_assets.core.registry.fingerprint import SOURCE_COLUMN, source_record
from causal_assets.core.foundation.errors import CorpusError
from causal_assets.core.index.build import build_sparse, chunk_texts, sparse_frames
from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, compute_fingerprint
from causal_assets.core.index.dense import EmbeddingCache, embed_incremental
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import corpus_partitions
from causal_assets.defs.shared import CORPUS_GROUP, EmbeddingConfig
from causal_assets.resources import CorpusRegistry, Storage

GROUP = CORPUS_GROUP


def log_lineage_estimate(context: AssetExecutionContext, frame: pd.DataFrame) -> None:
    """The whole lineage's expected duration, logged by its first step (the labels are most of it: README command 1
    took 65 min on a loaded 2-core machine, with no word of it up front). Never fails the step."""
    from causal_assets.core.graph.store import mostly_code
    from causal_assets.core.labeling.pools import pool_params
    from causal_assets.core.labeling.sizing import estimate_labels, lineage_estimate, machine_now, shown_chars
    from causal_assets.resources import BenchmarkRegistry, Storage

    try:
        benchmarks = BenchmarkRegistry().specs()
        spec = benchmarks.get(context.partition_key)
        code = mostly_code(frame["kind"])
        labels = None
        if spec is not None:
            questions = spec.label_limit or 20
            separate = spec.monte_carlo.get("document_encoding") != "joint"
            labels = estimate_labels(questions, spec.budget, spec.pool_size,
                                     shown_chars(frame["text"], pool_params(spec.pool_settings).doc_chars),
                                     machine=machine_now(Storage().base, None, separate=separate),
                                     separate=separate, code=code,
                                     stop_when_decided=spec.monte_carlo_settings.get("stop_when_decided", True))
        _, line = lineage_estimate([len(t) for t in chunk_texts(frame)], code, labels)
        context.log.info(f"default_lineage_job for {context.partition_key!r}: {line}")
    except Exception as e:   # an estimate is a courtesy
        context.log.debug(f"no lineage estimate: {e}")


def tell_build_estimate(context: AssetExecutionContext, frame: pd.DataFrame) -> None:
    """Once chunked, how long the rest of the run's build steps take (the command that started the build could not
    say it before the chunks existed). Never fails the step."""
    from causal_assets.core.foundation.progress import duration, tell
    from causal_assets.core.stored import build_time, needs
    from causal_assets.resources import DEFAULT_EMBEDDING_BACKEND, Storage

    try:
        keys = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys   # None: the whole job
        selected = {key.to_user_string() for key in keys}
        rest = [a for group in needs.GROUPS if group != needs.CHUNKS for a in group if a in selected]
        if not rest:
            return
        seconds = build_time.estimate(frame, rest, Storage().cache_dir("embeddings"), DEFAULT_EMBEDDING_BACKEND)
        tell(f"corpus {context.partition_key!r}: {len(frame):,} chunks; the rest of the build ({', '.join(rest)}): "
             f"about {duration(seconds)} at the current load {os.getloadavg()[0]:.1f}", context.log.info)
    except Exception as e:   # an estimate is a courtesy
        context.log.debug(f"no build estimate: {e}")


def corpus_fingerprint(content_hashes: pd.Series) -> str:
    """One hash for the whole corpus content: what freshness checks and sensors compare."""
    return hashlib.sha256("\n".join(sorted(content_hashes)).encode()).hexdigest()[:16]


@asset(partitions_def=corpus_partitions, group_name=GROUP, kinds={"python", "parquet"},
       check_specs=[spec("corpus_chunks", "chunks_valid", "Non-empty; unique ids; chunk_idx = row number; no blank chunk.")])
def corpus_chunks(context: AssetExecutionContext, corpus_registry: CorpusRegistry):
    """Chunks of one registered corpus (Python package AST, BEIR, HotpotQA or a folder): id, title, text, kind,
    span, content hash and metadata."""
    spec = corpus_registry.spec(context.partition_key)
    t0 = time.perf_counter()
    # the source's state before it is read: a file changed while the loader reads it is a change the next check sees
    source = source_record(spec)
    chunks, report = load_corpus(spec)
    frame = chunks_to_frame(chunks)
    dupes = frame["chunk_id"][frame["chunk_id"].duplicated()]
    if len(dupes):
        raise CorpusError(f"corpus {spec.name!r}: duplicate chunk ids, e.g. {dupes.iloc[0]!r}")
    # refused before anything is written: a blank chunk would fail chunks_valid after its table was on disk, where
    # the next build would take it as done
    blank = frame[blank_chunks(frame)]
    if len(blank):
        raise CorpusError(f"corpus {spec.name!r}: {len(blank)} chunk(s) with neither text nor title, e.g. "
                          f"{blank['chunk_id'].iloc[0]!r} ({blank['path'].iloc[0]})")
    frame.insert(0, "chunk_idx", range(len(frame)))
    frame["index_options"] = json.dumps({"split_identifiers": spec.split_identifiers})
    # what every index part built from this table records, and is checked against when it is loaded
    frame[FINGERPRINT] = compute_fingerprint(frame)
    # what the commands compare the source with (`needs.source_change`): not part of the chunks' own fingerprint
    frame[SOURCE_COLUMN] = source
    skipped = report.pop("skipped", [])
    if report.get("skipped_without_paragraphs"):
        context.log.warning(f"{spec.name}: {report['skipped_without_paragraphs']} record(s) without paragraphs "
                            f"skipped (load_report.skipped_records); `options: {{strict: true}}` refuses them")
    context.log.info(f"{spec.name}: {len(frame)} chunks from {spec.loader} in {time.perf_counter() - t0:.1f}s; {report}")
    if context.has_partition_key and context.job_name == "default_lineage_job":
        log_lineage_estimate(context, frame)   # the whole lineage's, which includes the build
    else:
        tell_build_estimate(context, frame)
    yield Output(frame, metadata={
        "chunks": len(frame),
        "by_kind": MetadataValue.json(frame["kind"].value_counts().to_dict()),
        "load_report": MetadataValue.json(report),
        "skipped_files": MetadataValue.md("\n".join(f"- {s}" for s in skipped[:50]) or "none"),
        "corpus_hash": corpus_fingerprint(frame["content_hash"]),
        FINGERPRINT: frame[FINGERPRINT].iloc[0],
        "loader": spec.loader,
        "load_seconds": round(time.perf_counter() - t0, 2),
    })
    yield check_result("corpus_chunks", "chunks_valid", check_chunks(frame))


@asset(partitions_def=corpus_partitions, group_name=GROUP, kinds={"pytorch", "parquet"},
       check_specs=[spec("corpus_embeddings", "embeddings_fresh_and_finite",
                         "One finite unit vector per chunk, in chunk order, from the chunk's current content hash.")])
def corpus_embeddings(context: AssetExecutionContext, config: EmbeddingConfig, storage: Storage,
                      corpus_chunks: pd.DataFrame):
    """L2-normalised sentence embeddings of every chunk; only chunks whose content hash is new are encoded."""
    texts = chunk_texts(corpus_chunks)
    hashes = corpus_chunks["content_hash"].tolist()
    embedder = config.embedder()
    # texts done / total, rate and ETA in the step's log every 15 s
    vectors, stats = embed_incremental(texts, hashes, embedder,
                                       EmbeddingCache.for_embedder(storage.cache_dir("embeddings"), embedder),
                                       context.partition_key, log=context.log.info)
    frame = pd.DataFrame({"corpus": context.partition_key, "chunk_id": corpus_chunks["chunk_id"],
                          "chunk_idx": corpus_chunks["chunk_idx"], "content_hash": hashes,
                          "model": config.model, "backend": config.backend, "embedding": list(vectors),
                          FINGERPRINT: chunks_fingerprint(corpus_chunks)})
    context.log.info(f"embeddings: {stats}")
    yield Output(frame, metadata={
        "model": config.model, "backend": config.backend, "dimension": int(vectors.shape[1]), "chunks": stats["chunks"],
        "newly_embedded": stats["embedded"], "cache_hits": stats["cache_hits"],
        "embed_seconds": round(stats["embed_s"], 3), "total_seconds": round(stats["total_s"], 3),
        "texts_per_second": round(stats["embedded"] / stats["embed_s"], 1) if stats["embedded"] else 0.0,
        "corpus_hash": corpus_fingerprint(corpus_chunks["content_hash"]),
    })
    yield check_result("corpus_embeddings", "embeddings_fresh_and_finite", check_embeddings(frame, corpus_chunks))


@multi_asset(
    partitions_def=corpus_partitions, group_name=GROUP,
    outs={"sparse_postings": AssetOut(kinds={"parquet"}, description="BM25 and TF-IDF postings: (method, term_id, chunk_idx, weight)."),
          "sparse_vocabulary": AssetOut(kinds={"parquet"}, description="Index terms with document frequency and idf.")},
    check_specs=[spec("sparse_postings", "postings_consistent",
                      "Finite positive weights; postings point at existing chunks and terms; df matches the postings.")],
)
def sparse_postings_and_vocabulary(context: AssetExecutionContext, corpus_chunks: pd.DataFrame):
    """BM25 (bm25s, Lucene k1=1.2, b=0.75) and TF-IDF (scikit-learn, sublinear tf, l2) over the analyzed chunks."""
    split = json.loads(corpus_chunks["index_options"].iloc[0])["split_identifiers"]
    indexes, stats = build_sparse(corpus_chunks, split)
    postings, vocab = sparse_frames(indexes, context.partition_key, chunks_fingerprint(corpus_chunks))
    meta = {"vocabulary": stats["vocabulary"], "postings": len(postings), "split_identifiers": split,
            "analyze_seconds": round(stats["analyze_s"], 2), "build_seconds": round(stats["build_s"], 2),
            "avg_terms_per_chunk": round(stats["avg_terms_per_chunk"], 1),
            "corpus_hash": corpus_fingerprint(corpus_chunks["content_hash"])}
    yield Output(postings, output_name="sparse_postings", metadata=meta)
    yield Output(vocab, output_name="sparse_vocabulary", metadata={"terms": len(vocab)})
    yield check_result("sparse_postings", "postings_consistent", check_sparse(postings, vocab, len(corpus_chunks)))
