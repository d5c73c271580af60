"""Versioned store of tuned retriever configurations.

Under `root` (the storage resource's `reports/tuned`): `<benchmark>/<version>.yaml`, never overwritten, and the
trained models it names in `<benchmark>/models/<name>-<sha>.joblib` (`model_path` relative to the benchmark
directory; `"@learned"` names the same configuration's learned model). `version` is the first 12 hex digits of the
SHA-256 of the content's canonical JSON, so the same outcome gets the same version, and `load_tuned` re-hashes the
content to refuse an edited file. There is no "current" pointer: the version in force is the one the
`tuned_retriever_configs` materialization recorded, so the evaluation reads exactly what its upstream produced. The
content is described in docs/pipeline.md ("Tuning").
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.foundation.errors import naming_file
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.index.search import CorpusIndex

def index_fingerprint(index: CorpusIndex) -> dict[str, Any]:
    ids = hashlib.sha256("\n".join(map(str, index.ids)).encode()).hexdigest()[:12]
    return {"corpus": index.corpus, "chunks": int(len(index.ids)), "ids_sha": ids,
            "embedding_model": str(getattr(index.embedder, "reference", getattr(index.embedder, "model_name", "")))}


CORE = Path(__file__).resolve().parents[1]   # causal_assets/core: every retriever, feature and search the tuning runs
# the libraries whose results a tuning depends on (models, scores, metrics); an upgrade of one tunes again
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "lightgbm", "bm25s", "ranx", "faiss-cpu", "networkx",
             "sentence-transformers", "transformers", "torch", "onnxruntime")


def code_version() -> str:
    """The code a tuning runs: `causal_assets/core`'s sources and the versions of the libraries it computes with.
    Deliberately coarse: any edit to the core package tunes again, so a kept tuning is never one other code made."""
    h = hashlib.sha256()
    for path in sorted(CORE.rglob("*.py")):
        h.update(path.relative_to(CORE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for name in LIBRARIES:
        try:
            h.update(f"{name}=={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name} absent\n".encode())
    return h.hexdigest()[:12]


def frame_digest(frame: pd.DataFrame | None) -> str:
    """A content hash of a table (columns, then every row's values in order); "" for no table."""
    if frame is None:
        return ""
    h = hashlib.sha256(repr(list(frame.columns)).encode())
    h.update(pd.util.hash_pandas_object(frame.astype(str), index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def index_digest(index: CorpusIndex) -> dict[str, Any]:
    """`index_fingerprint` plus a hash of every chunk's content and index options and the backend queries are
    encoded with (fp32 and int8 vectors score differently): what the index holds and how it is searched."""
    columns = [c for c in ("chunk_id", "content_hash", "index_options") if c in index.chunks.columns]
    return {**index_fingerprint(index), "content": frame_digest(index.chunks[columns]),
            "backend": str(getattr(index.embedder, "backend", ""))}


def benchmark_digest(bench: Benchmark) -> str:
    """A hash of a benchmark's questions, judgements, candidate sets and answers."""
    return hashlib.sha256(json.dumps(asdict(bench), sort_keys=True, default=str).encode()).hexdigest()[:16]


def source_digest(index: CorpusIndex, bench: Benchmark,
                  graph: tuple[pd.DataFrame, pd.DataFrame] | None) -> dict[str, Any]:
    """What a tuning reads of one benchmark: its index, its questions and its graph frames."""
    return {"index": index_digest(index), "questions": benchmark_digest(bench),
            "graph": [frame_digest(f) for f in graph] if graph is not None else None}


def inputs_version(parts: dict[str, Any]) -> str:
    """The hash of everything a tuning reads (`parts`: plain, JSON-able values and digests), so the same inputs
    give the same version in every process."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def content_hash(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass
class TunedConfig:
    version: str
    content: dict[str, Any]
    path: Path

    @property
    def retrievers(self) -> dict[str, dict[str, Any]]:
        return self.content["retrievers"]

    @property
    def selected(self) -> str | None:
        return self.content.get("selected")

    def params(self, name: str) -> dict[str, Any]:
        """The retriever's params with model references resolved to absolute paths."""
        return _resolve(self.retrievers[name]["params"], self.path.parent, self.retrievers)

    def models_present(self) -> bool:
        """Every model file the configuration names is there."""
        return all((self.path.parent / r["params"]["model_path"]).is_file() for r in self.retrievers.values()
                   if r.get("params", {}).get("model_path") not in (None, "@learned"))


def _resolve(params: dict[str, Any], base: Path, retrievers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            out[k] = _resolve(v, base, retrievers)
        elif k == "model_path" and v == "@learned":
            out[k] = str(base / retrievers["learned"]["params"]["model_path"])
        elif k == "model_path":
            out[k] = str(base / v)
        else:
            out[k] = v
    return out


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with naming_file(path), os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_tuned(root: str | Path, benchmark: str, content: dict[str, Any], models: dict[str, Any]) -> TunedConfig:
    """Write the models and the configuration (module docstring); the returned version names it."""
    import joblib  # scikit-learn's persistence (0.1 s to import): only when a model is saved, not on every start-up
    folder = Path(root) / benchmark
    content = json.loads(json.dumps(content, default=str))   # plain types only, as YAML will read them back
    for name, model in models.items():
        buf = io.BytesIO()
        joblib.dump(model, buf)
        data = buf.getvalue()
        sha = hashlib.sha256(data).hexdigest()[:16]
        rel = f"models/{name}-{sha}.joblib"
        if not (folder / rel).exists():
            _write_atomic(folder / rel, data)
        content["retrievers"][name]["params"]["model_path"] = rel
        content["retrievers"][name]["model_sha256"] = sha
    version = content_hash(content)
    path = folder / f"{version}.yaml"
    if _stored_content(path, version) is None:   # new, or edited by hand since: written (again) as this content
        doc = {"version": version, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "content": content}
        _write_atomic(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return TunedConfig(version, content, path)


def _stored_content(path: Path, version: str) -> dict[str, Any] | None:
    """The content of a configuration file that is there and hashes to `version`, else None."""
    try:
        content = yaml.safe_load(path.read_text())["content"]
        return content if content_hash(content) == version else None
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None


def intact_tuned(root: str | Path, benchmark: str, version: str) -> TunedConfig | None:
    """Version `version` when its file is there, unedited, and every model it names is there; else None (where
    `load_tuned` would raise, for a caller that tunes again instead)."""
    path = Path(root) / benchmark / f"{version}.yaml"
    content = _stored_content(path, version)
    if content is None:
        return None
    stored = TunedConfig(version, content, path)
    return stored if stored.models_present() else None


def load_tuned(root: str | Path, benchmark: str, version: str) -> TunedConfig:
    """Version `version` of `benchmark`'s tuned configuration (a missing or edited file is an error)."""
    path = Path(root) / benchmark / f"{version}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path}: tuned configuration {version} of {benchmark!r} not found (re-materialize "
                                f"tuned_retriever_configs)")
    doc = yaml.safe_load(path.read_text())
    if content_hash(doc["content"]) != version:
        raise ValueError(f"{path}: content does not match its version {version} (edited by hand?)")
    return TunedConfig(version, doc["content"], path)


TUNED_ASSET = "tuned_retriever_configs"


def current_tuned(base, root: str | Path, benchmark: str) -> TunedConfig:
    """The configuration `benchmark`'s last `tuned_retriever_configs` materialization recorded (its trials' one
    `config_version`), as the evaluation reads it; FileNotFoundError naming the command that tunes when there is
    none."""
    trials = asset_path(base, TUNED_ASSET, benchmark)
    if not trials.exists():
        raise FileNotFoundError(f"benchmark {benchmark!r} has no tuned retriever here (run `causal-assets tune "
                                f"{benchmark}` first)")
    versions = read_parquet(trials, columns=["config_version"])["config_version"].dropna().unique()
    if len(versions) != 1:
        raise ValueError(f"{trials}: {len(versions)} configuration versions where one is recorded (re-run "
                         f"`causal-assets tune {benchmark}`)")
    return load_tuned(root, benchmark, str(versions[0]))
