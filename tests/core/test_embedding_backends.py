"""Embedding backends: the choice and its cache key, the offline ONNX export, the exact single-query
dense path against the batched one, and progress in the logs."""
from __future__ import annotations

import socket

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.index import dense
from causal_assets.core.index.ann import exact_top_k
from causal_assets.core.index.dense import (BACKENDS, DEFAULT_MODEL, Embedder, EmbeddingCache, cache_key,
                                            embed_incremental)
from causal_assets.core.index.exact import Int8Scan
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.foundation.progress import ProgressLog, duration


class FakeEmbedder(Embedder):
    """Deterministic vectors by backend, no model: what is cached where is the point."""

    def __init__(self, backend: str):
        super().__init__(DEFAULT_MODEL, 8, backend)
        self.calls = 0

    @property
    def dim(self) -> int:
        return 4

    def encode(self, texts, progress=None):
        self.calls += 1
        shift = BACKENDS.index(self.backend)
        out = np.array([[len(t) + shift, 1, 0, 0] for t in texts], np.float32)
        for done in range(0, len(texts), 2):
            if progress:
                progress(min(done + 2, len(texts)), len(texts))
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_cache_key_of_a_model_directory_is_its_content_not_its_flattened_path(tmp_path):
    """Two model directories whose paths flatten alike (`a_b` vs `a/b`) got one cache and shared vectors; the same
    model in two places shares them, and a model trained again in place gets new ones."""
    def model(path, weights: bytes):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")
        (path / "model.safetensors").write_bytes(weights)
        return str(path)

    one, other = model(tmp_path / "mdl" / "a_b", b"A"), model(tmp_path / "mdl_a" / "b", b"B")
    assert one.replace("/", "_") == other.replace("/", "_")     # the collision the old key had
    assert cache_key(one, "onnx-int8") != cache_key(other, "onnx-int8")
    assert cache_key(one, "torch") == cache_key(model(tmp_path / "copy" / "a_b", b"A"), "torch")
    before = cache_key(one, "torch")
    model(tmp_path / "mdl" / "a_b", b"A, trained again")
    assert cache_key(one, "torch") != before and cache_key(one, "torch").startswith("a_b-")


def test_cache_key_separates_backends(tmp_path):
    assert cache_key(DEFAULT_MODEL, "torch") == DEFAULT_MODEL  # caches from before backends stay valid (fp32)
    assert len({cache_key(DEFAULT_MODEL, b) for b in BACKENDS}) == len(BACKENDS)
    texts, hashes = ["a", "bb", "ccc"], ["h1", "h2", "h3"]
    vectors = {}
    for backend in ("torch", "onnx-int8"):
        emb = FakeEmbedder(backend)
        vectors[backend], stats = embed_incremental(texts, hashes, emb, EmbeddingCache.for_embedder(tmp_path, emb), "c")
        assert stats["embedded"] == 3 and stats["backend"] == backend  # the other backend's cache is not seen
    assert not np.allclose(vectors["torch"], vectors["onnx-int8"])
    assert {p.name for p in tmp_path.iterdir()} == {cache_key(DEFAULT_MODEL, "torch"),
                                                   cache_key(DEFAULT_MODEL, "onnx-int8")}
    again = FakeEmbedder("onnx-int8")
    cached, stats = embed_incremental(texts, hashes, again, EmbeddingCache.for_embedder(tmp_path, again), "c")
    assert stats["embedded"] == 0 and again.calls == 0 and np.array_equal(cached, vectors["onnx-int8"])


def test_a_cache_of_another_backend_is_refused(tmp_path):
    with pytest.raises(ValueError, match="must not mix"):
        embed_incremental(["a"], ["h"], FakeEmbedder("onnx-int8"), EmbeddingCache(tmp_path, DEFAULT_MODEL, "torch"), "c")


def test_backend_choice():
    with pytest.raises(ValueError, match="expected one of"):
        Embedder(backend="tensorrt")
    from causal_assets.defs.corpus import EmbeddingConfig
    from causal_assets.resources import DEFAULT_EMBEDDING_BACKEND

    assert EmbeddingConfig().backend == DEFAULT_EMBEDDING_BACKEND in BACKENDS
    embedder = EmbeddingConfig(backend="onnx", threads=1).embedder()
    assert (embedder.backend, embedder.threads, embedder.cache_key) == ("onnx", 1, f"{DEFAULT_MODEL}@onnx")


def test_corpus_index_embeds_queries_with_the_backend_of_its_vectors(tmp_path):
    from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint
    from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic

    chunks = pd.DataFrame({"chunk_idx": [0, 1], "chunk_id": ["a", "b"], "title": "", "kind": "x", "text": ["x", "y"],
                           "content_hash": ["h1", "h2"]})
    built_from = {FINGERPRINT: chunks_fingerprint(chunks)}
    postings = pd.DataFrame({"method": ["bm25"], "term_id": [0], "chunk_idx": [0], "weight": [1.0], **built_from})
    vocab = pd.DataFrame({"method": ["bm25"], "term_id": [0], "term": ["x"], "df": [1], "idf": [1.0], **built_from})
    for name, frame in (("corpus_chunks", chunks), ("sparse_postings", postings), ("sparse_vocabulary", vocab)):
        write_parquet_atomic(frame, asset_path(tmp_path, name, "c"))
    emb = pd.DataFrame({"chunk_idx": [0, 1], "model": DEFAULT_MODEL, "embedding": [np.eye(4)[0], np.eye(4)[1]],
                        **built_from})
    write_parquet_atomic(emb.assign(backend="onnx-int8"), asset_path(tmp_path, "corpus_embeddings", "c"))
    assert CorpusIndex.load(tmp_path, "c").embedder.backend == "onnx-int8"
    write_parquet_atomic(emb, asset_path(tmp_path, "corpus_embeddings", "c"))  # written before backends existed
    assert CorpusIndex.load(tmp_path, "c").embedder.backend == "torch"


def clustered(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, dim))
    v = centres[rng.integers(0, 50, n)] + 0.8 * rng.standard_normal((n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("n", [3_000, 25_000])  # below and above INT8_SCAN_MIN
def test_single_query_path_returns_the_batched_top_k(n):
    data = clustered(n + 40)
    vectors, queries = data[:n], data[n:]
    vectors[5] = vectors[6]  # a tie: broken by position on both paths
    queries[0] = vectors[5]
    chunks = pd.DataFrame({"chunk_id": [f"c{i}" for i in range(n)], "title": "", "kind": "x"})
    index = CorpusIndex("x", chunks, {}, vectors)
    assert (index.scan is not None) == (n >= 20_000)
    batched_pos, batched_scores = index.dense_top_k(queries, 10)  # > FEW_QUERIES: blocked products
    single_pos, single_scores = index.dense_top_k_single(queries, 10)
    assert np.array_equal(batched_pos, exact_top_k(vectors, queries, 10))
    assert np.array_equal(single_pos, batched_pos)
    assert np.allclose(single_scores, batched_scores, atol=1e-5)
    one_pos, _ = index.dense_top_k(queries[:1], 10)  # the path a single search takes
    assert np.array_equal(one_pos[0], batched_pos[0]) and one_pos[0][:2].tolist() == [5, 6]


def test_int8_scan_bound_holds_and_prunes():
    vectors = clustered(20_000, seed=3)
    scan = Int8Scan(vectors)
    for q in clustered(30, seed=4):
        approx, bound = scan.approximate(q)
        assert np.abs(approx - vectors @ q).max() <= bound
    assert scan.stats["fallbacks"] == 0
    for q in clustered(10, seed=5):
        scan.top_k(q, 10)
    assert scan.stats["candidates"] < 0.25 * 20_000 * 10  # the bound leaves a small share to re-score


def test_int8_scan_is_exact_where_int16_pair_sums_saturate():
    """ONNX Runtime's uint8 x int8 kernel on CPUs without VNNI adds pairs of products in int16 with saturation: a
    query at the top of its range beside codes at +-127 came back clipped (here 0.51 for an exact 1.0), so a vector
    whose score is exactly the query's norm fell below the cut and another was returned as the top 1."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((20_000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = np.zeros(384, np.float32)
    query[:2] = np.sqrt(0.5)
    vectors[7] = query                                        # two equal components: codes 127, 127
    other = np.zeros(384, np.float32)
    other[:3] = (0.389, 0.389, 0.835)                         # 0.55 with the query, codes 59, 59 at its dims
    vectors[9] = other / np.linalg.norm(other)
    scan = Int8Scan(vectors)
    approx, bound = scan.approximate(query)
    assert np.abs(approx - vectors @ query).max() <= bound
    top, scores = scan.top_k(query, 1)
    assert top.tolist() == [7] and scores[0] == pytest.approx(1.0, abs=1e-6)


def test_progress_log_reports_done_rate_and_eta():
    now = [0.0]
    lines: list[str] = []
    report = ProgressLog(lines.append, "embedding scifact", "texts", interval_s=10, first_s=5, clock=lambda: now[0])
    for done, t in ((100, 1.0), (200, 6.0), (300, 9.0), (400, 16.5), (500, 20.0)):
        now[0] = t
        report(done, 500)
    assert len(lines) == 3  # first after 5 s, then after 10 more, then at the end
    assert lines[0] == "embedding scifact: 200/500 texts (40%), 33.3 texts/s, ETA 9 s"
    assert "400/500" in lines[1] and "ETA" in lines[1]
    assert lines[2] == "embedding scifact: 500/500 texts done in 20 s, 25.0 texts/s"
    assert duration(3725) == "1 h 02 min" and duration(75) == "1 min 15 s"


def test_embed_incremental_logs_progress(tmp_path):
    lines: list[str] = []
    calls: list[tuple[int, int]] = []
    embed_incremental([f"t{i}" for i in range(9)], [f"h{i}" for i in range(9)], FakeEmbedder("torch"),
                      EmbeddingCache(tmp_path, DEFAULT_MODEL, "torch"), "c", progress=lambda d, t: calls.append((d, t)),
                      log=lines.append)
    assert calls[-1] == (9, 9) and len(calls) == 5
    assert lines[-1].startswith("embedding c (torch): 9/9 texts done in")
    embed_incremental(["t0"], ["h0"], FakeEmbedder("torch"), EmbeddingCache(tmp_path, DEFAULT_MODEL, "torch"), "c",
                      log=lines.append)
    assert lines[-1] == "embedding c: all 1 texts cached, nothing to encode"


@pytest.mark.slow
def test_onnx_export_is_offline_cached_and_matches_torch(tmp_path, monkeypatch):
    """Export with the network unreachable (HF_HUB_OFFLINE=1 and every socket connect refused): the packaged model
    only. fp32 ONNX gives the torch vectors; int8 stays close; a second use does not export again."""
    from causal_assets.core.index import onnx_backend

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise OSError("network access attempted during the ONNX export")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    target = onnx_backend.export(dense.model_dir(), tmp_path)
    assert {p.name for p in target.iterdir()} == {"fp32.onnx", "int8.onnx", "export.json"}
    assert target.parent == tmp_path / "onnx" and onnx_backend.model_hash(dense.model_dir())[:16] in target.name
    mtime = (target / "int8.onnx").stat().st_mtime_ns
    assert onnx_backend.export(dense.model_dir(), tmp_path) == target
    assert (target / "int8.onnx").stat().st_mtime_ns == mtime

    texts = ["Aspirin reduces the risk of heart attacks.", "short", "  padded   text  ",
             "A much longer abstract about T cells. " * 60]  # past the 256-token limit: truncated alike
    reference = dense.load_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    fp32 = onnx_backend.OnnxEncoder(dense.model_dir(), tmp_path, "fp32", threads=1)
    int8 = onnx_backend.OnnxEncoder(dense.model_dir(), tmp_path, "int8", threads=1)
    ids = [e.ids for e in fp32.tokenizer.encode_batch(texts)]
    st = dense.load_model().tokenize(texts)
    assert ids == [row[mask.astype(bool)].tolist() for row, mask in zip(st["input_ids"].numpy(),
                                                                          st["attention_mask"].numpy())]
    assert np.einsum("ij,ij->i", fp32.encode(texts), reference).min() > 0.99999
    assert np.einsum("ij,ij->i", int8.encode(texts), reference).min() > 0.98
    # one text per run: a text's int8 vector does not depend on the texts encoded with it
    assert np.array_equal(int8.encode(texts[:1]), int8.encode(texts)[:1])
    # nor on how many threads encode them, each on its own texts: bit for bit, in the texts' order
    many = [f"{t} {i}" for i in range(9) for t in texts]
    one = int8.encode(many)
    assert np.array_equal(int8.encode(many, threads=3), one)
    assert np.array_equal(onnx_backend.OnnxEncoder(dense.model_dir(), tmp_path, "int8", threads=2).encode(many), one)
    assert np.array_equal(int8.encode(many[:2], threads=8), one[:2])   # more threads than texts


def test_a_vectors_table_names_its_model_relative_to_itself(tmp_path):
    """A fine-tuned encoder's directory is named relative to the table that uses it, so the whole data directory can
    move; model names, absolute paths and tables off the local disk keep the name as it is."""
    table, model = tmp_path / "parquet/tuned_embeddings/b.parquet", tmp_path / "reports/tuned/b/encoder-1"
    reference = dense.model_reference(model, table)
    assert reference == "../../reports/tuned/b/encoder-1"
    assert dense.resolve_model_reference(reference, table) == str(model)
    moved = tmp_path / "elsewhere/parquet/tuned_embeddings/b.parquet"
    assert dense.resolve_model_reference(reference, moved) == str(tmp_path / "elsewhere/reports/tuned/b/encoder-1")
    assert dense.model_reference(model, "memory://bucket/tuned_embeddings/b.parquet") == str(model)
    for name in (DEFAULT_MODEL, str(model)):
        assert dense.resolve_model_reference(name, table) == name
    assert Embedder(str(model)).reference == str(model)
    assert Embedder(str(model), reference=reference).reference == reference


def test_a_stopped_corpus_embedding_keeps_its_blocks_and_the_next_encodes_only_the_rest(tmp_path):
    """repro_4: `build` stopped at 2560/5183 texts of corpus_embeddings kept nothing and started again from 0."""
    n = 2 * dense.CACHE_BLOCK + 100
    texts = [f"text {i}" * (1 + i % 3) for i in range(n)]
    hashes = [f"h{i}" for i in range(n)]
    cache = EmbeddingCache(tmp_path, DEFAULT_MODEL, "torch")

    def ctrl_c_past_two_blocks(done, total):
        if done > 2 * dense.CACHE_BLOCK:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        embed_incremental(texts, hashes, FakeEmbedder("torch"), cache, "c", progress=ctrl_c_past_two_blocks)
    assert len(cache.load()) == 2 * dense.CACHE_BLOCK
    # a save killed half-way leaves only its hidden temporary file, which the cache never reads
    (cache.dir / ".c.parquet.0123.tmp").write_bytes(b"PAR1 half a file")
    vectors, stats = embed_incremental(texts, hashes, FakeEmbedder("torch"), cache, "c")
    assert stats["embedded"] == 100 and stats["cache_hits"] == 2 * dense.CACHE_BLOCK
    full, _ = embed_incremental(texts, hashes, FakeEmbedder("torch"),
                                EmbeddingCache(tmp_path / "fresh", DEFAULT_MODEL, "torch"), "c")
    assert np.allclose(vectors, full)
    assert [f.name for f in cache.dir.glob("*.parquet")] == ["c.parquet"]  # the parts folded into one file
