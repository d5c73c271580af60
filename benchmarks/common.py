"""What every performance benchmark shares: the machine record, repeated timing, figures checked against their
targets, and the JSON they write to data/benchmarks/.

A figure is always a median of repeated runs or a ratio of such medians; its record names the target, the
comparison and whether it passed, so `run_all.py` can write the summary without knowing any benchmark's details.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT_DIR = ROOT / "data" / "benchmarks"
PARQUET = ROOT / "data" / "parquet"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model and load: the context every timing on a shared machine needs."""
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = None
    try:
        kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
        mem_gib = round(kb / 2**20, 1)
    except (OSError, StopIteration):
        pass
    return {"cores": os.cpu_count(), "cpu": model, "memory_gib": mem_gib, "python": platform.python_version(),
            "platform": platform.platform(), "load_average": load_average()}


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def current_rss_mib() -> float:
    try:
        kb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                  if line.startswith("VmRSS"))
        return round(kb / 1024, 1)
    except (OSError, StopIteration):
        return float("nan")


def repeat(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of `repeats` calls of fn after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def repeat_wall_cpu(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process, all threads) of `repeats` calls of fn after `warmup` untimed calls. On a
    shared machine the CPU time is what the work itself costs; wall time adds the waiting for a core."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def time_queries(fn: Callable[[str], Any], queries: list[str], warmup: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds per query of fn(query), after fn on the first `warmup` queries untimed."""
    for q in queries[:warmup]:
        fn(q)
    wall, cpu = [], []
    for q in queries:
        c0, t0 = time.process_time(), time.perf_counter()
        fn(q)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def latency_ms(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3),
            "mean": round(float(ms.mean()), 3), "n": len(ms)}


@dataclass
class Figure:
    """One measured figure against its target. `comparison`: "<=" or ">=" (None: reported, no target)."""
    name: str
    value: float | None
    unit: str
    target: float | None = None
    comparison: str | None = None
    note: str = ""
    details: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool | None:
        if self.target is None or self.comparison is None:
            return None
        if self.value is None or (isinstance(self.value, float) and np.isnan(self.value)):
            return False
        return self.value <= self.target if self.comparison == "<=" else self.value >= self.target

    def to_json(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def write_result(topic: str, figures: list[Figure], details: dict, started: dict, quick: bool,
                 out_dir: Path = OUT_DIR) -> Path:
    """data/benchmarks/<topic>[_quick].json: machine at start and end, the figures, and the raw measurements."""
    result = {"topic": topic, "quick": quick, "machine_start": started, "load_average_end": load_average(),
              "peak_rss_mib": peak_rss_mib(), "figures": [f.to_json() for f in figures], "details": details}
    path = write_json(f"{topic}{'_quick' if quick else ''}", result, out_dir)
    for f in figures:
        verdict = {True: "PASS", False: "MISS", None: "-"}[f.passed]
        target = f" (target {f.comparison} {f.target:g} {f.unit})" if f.target is not None else ""
        value = "n/a" if f.value is None else f"{f.value:.4g}"
        print(f"[{verdict}] {f.name}: {value} {f.unit}{target}", flush=True)
    print(f"wrote {path}", flush=True)
    return path


def write_json(name: str, data: dict, out_dir: Path = OUT_DIR) -> Path:
    """data/benchmarks/<name>.json (a study's or a benchmark's record)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    return path


BUSY_WARMUP_S = 60  # the 1-minute load average needs about this long to show the busy loops


@contextmanager
def busy_loops(n: int):
    """n CPU-bound processes beside a measurement (`--busy N`), for the time on a machine that is not idle; started
    a minute before it, so the load average shows them."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        if loops:
            time.sleep(BUSY_WARMUP_S)
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


def run_script(topic: str, run: Callable[..., tuple[list[Figure], dict]], doc: str | None,
               options: Callable[[argparse.ArgumentParser], None] | None = None) -> Path:
    """The command line every benchmark script shares: `--quick` and `--out`, then `run(quick)` and its JSON written.
    `options`: a script's own arguments, added to the parser; `run` then gets the parsed namespace too."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(ap)
    if options:
        options(ap)
    args = ap.parse_args()
    started = machine()
    figures, details = run(args.quick, args) if options else run(args.quick)
    return write_result(topic, figures, details, started, args.quick, args.out)


class _QuickCache(argparse.Action):
    """`--quick-cache DIR`: where `quick_base` keeps what it builds, for the quick runs after this one."""

    def __call__(self, parser, namespace, values, option_string=None):
        global QUICK_CACHE
        QUICK_CACHE = Path(values)
        setattr(namespace, self.dest, QUICK_CACHE)


QUICK_CACHE: Path | None = None


def add_common_options(ap: argparse.ArgumentParser) -> None:
    """`--quick` (a smoke run of seconds to a minute: small inputs, few repeats, figures not comparable with the
    targets), `--out DIR` (where the JSON goes) and `--quick-cache DIR` (`quick_base`)."""
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: small inputs and few repeats; writes <topic>_quick.json")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the JSON (default data/benchmarks)")
    ap.add_argument("--quick-cache", action=_QuickCache, metavar="DIR",
                    help="with --quick: keep the small indexes it builds in DIR and take them from there in later "
                         "quick runs (the test suite runs every script's; default: built afresh each run)")


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class PrecomputedQueries:
    """A stand-in embedder whose query vectors were computed beforehand: for timings that exclude query
    embedding (the real embedder stays the index's for everything else)."""

    def __init__(self, embedder, queries: list[str]):
        self.inner = embedder
        self.model_name = embedder.model_name
        vectors = embedder.encode_queries(queries)
        self.vectors = dict(zip(queries, vectors))

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        return np.stack([self.vectors[q] for q in queries])

    def __getattr__(self, name):
        return getattr(self.inner, name)


def quick_tmp() -> Path:
    """A temporary directory for a quick run, removed when the process exits."""
    import atexit
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="bench-quick-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def quick_base(corpora: dict[str, int], dense: bool = True) -> Path:
    """A Parquet base with a small corpus index (`corpus_chunks`, `corpus_embeddings`, `sparse_postings`,
    `sparse_vocabulary`) for each corpus, built as the corpus index assets build it from the first n chunks of the
    registry's corpus: what `--quick` reads instead of data/parquet, so a smoke run needs no materialization.
    `corpora`: corpus name -> chunks; `dense=False` leaves out the vectors. A new temporary directory each time,
    removed when the process exits: nothing under data/ is read or written. With `--quick-cache DIR` each corpus's
    tables are built once into DIR (its vectors through an embedding cache there) and copied from it afterwards."""
    import shutil
    import tempfile

    base = quick_tmp()
    for corpus, n in corpora.items():
        if QUICK_CACHE is None:
            _build_quick_index(base, corpus, n, dense, base / "cache" / "embeddings")
            continue
        kept = QUICK_CACHE / f"{corpus}-{n}{'-dense' if dense else ''}"
        if not kept.is_dir():
            QUICK_CACHE.mkdir(parents=True, exist_ok=True)
            building = Path(tempfile.mkdtemp(prefix=f"{kept.name}.", dir=QUICK_CACHE))
            _build_quick_index(building, corpus, n, dense, QUICK_CACHE / "embeddings")
            try:
                building.rename(kept)   # whole or not at all, should two quick runs build it at once
            except OSError:
                shutil.rmtree(building, ignore_errors=True)
        shutil.copytree(kept, base, dirs_exist_ok=True)
    return base


@functools.lru_cache(maxsize=1)
def _embedder():
    """The packaged MiniLM, loaded once per process."""
    from causal_assets.core.index.dense import Embedder

    return Embedder()


def _build_quick_index(base: Path, corpus: str, n: int, dense: bool, embedding_cache: Path) -> None:
    import json as _json

    from causal_assets.core.corpus.chunk import chunks_to_frame
    from causal_assets.core.registry.corpora import load_corpus, load_corpus_registry
    from causal_assets.core.index.build import build_sparse, chunk_texts, sparse_frames
    from causal_assets.core.index.dense import DEFAULT_MODEL, EmbeddingCache, embed_incremental
    from causal_assets.core.index.provenance import FINGERPRINT, compute_fingerprint
    from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic
    from causal_assets.settings import Settings

    settings = Settings.from_env()
    spec = load_corpus_registry(settings.corpora, settings.shared_data)[corpus]
    frame = chunks_to_frame(load_corpus(spec)[0]).head(n).reset_index(drop=True)
    frame.insert(0, "chunk_idx", range(len(frame)))
    frame["index_options"] = _json.dumps({"split_identifiers": spec.split_identifiers})
    frame[FINGERPRINT] = compute_fingerprint(frame)
    fingerprint = frame[FINGERPRINT].iloc[0]
    postings, vocab = sparse_frames(build_sparse(frame, spec.split_identifiers)[0], corpus, fingerprint)
    tables = {"corpus_chunks": frame, "sparse_postings": postings, "sparse_vocabulary": vocab}
    if dense:
        embedder = _embedder()
        cache = EmbeddingCache.for_embedder(embedding_cache, embedder)
        vectors, _ = embed_incremental(chunk_texts(frame), frame["content_hash"].tolist(), embedder, cache, corpus)
        tables["corpus_embeddings"] = pd.DataFrame({
            "corpus": corpus, "chunk_id": frame["chunk_id"], "chunk_idx": frame["chunk_idx"],
            "content_hash": frame["content_hash"], "model": DEFAULT_MODEL, "backend": embedder.backend,
            "embedding": list(vectors), FINGERPRINT: fingerprint})
    for asset, table in tables.items():
        path = asset_path(base, asset, corpus)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(table, path)
