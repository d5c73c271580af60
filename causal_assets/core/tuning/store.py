"""Versioned store of tuned retriever configurations.

Layout under `root` (the storage resource's `reports/tuned`):

    <benchmark>/<version>.yaml             the configuration (content below), never overwritten
    <benchmark>/models/<name>-<sha>.joblib a trained model it names (learned), by content hash

There is no "current" pointer: which version is in force is what the `tuned_retriever_configs` materialization
recorded (its `config_version` metadata and data version, and the `config_version` column of its trials), so the
evaluation reads exactly the configuration its upstream materialization produced, and a tuning that crashed after
writing its files changes nothing downstream.

`version` = the first 12 hex digits of the SHA-256 of the canonical JSON of the content, which names every model by
its own content hash: the same tuning outcome always gets the same version, a changed parameter or model a new one.
The creation time is written beside the content, not into it. `load_tuned` re-hashes the content, so an edited
file is refused rather than silently evaluated.

Content: benchmark, corpus, tune_split, metric, index (a fingerprint of the corpus index tuned on: chunk count,
hash of the chunk ids, embedding model; the evaluation skips a config tuned on another index), selected (the
retriever with the best train figure) and retrievers: name -> {params, value, evaluation, queries, trials}.
A model is referenced in params as `model_path` relative to the benchmark directory; `load_tuned` makes it
absolute. In params, `"@learned"` (causal's `shortlist_params.model_path`) means the learned model of the same
configuration.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import joblib
import yaml

from causal_assets.core.index.search import CorpusIndex

def index_fingerprint(index: CorpusIndex) -> dict[str, Any]:
    ids = hashlib.sha256("\n".join(map(str, index.ids)).encode()).hexdigest()[:12]
    return {"corpus": index.corpus, "chunks": int(len(index.ids)), "ids_sha": ids,
            "embedding_model": str(getattr(index.embedder, "reference", getattr(index.embedder, "model_name", "")))}


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
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_tuned(root: str | Path, benchmark: str, content: dict[str, Any], models: dict[str, Any]) -> TunedConfig:
    """Write the models and the configuration (module docstring); the returned version names it."""
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
    if not path.exists():
        doc = {"version": version, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "content": content}
        _write_atomic(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return TunedConfig(version, content, path)


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
