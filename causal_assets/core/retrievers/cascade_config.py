"""The cascade retriever's configuration (`RetrievalConfig`: its TF-IDF, embedding, graph and entropy stages), checked
when it is built, saved and loaded as JSON or YAML beside a tuned configuration."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from causal_assets.core.index.dense import DEFAULT_MODEL

class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TFIDFConfig(_Section):
    """Stage 1. Only `initial_k` acts at query time. The project's TF-IDF index is prebuilt by the index stage
    (`build_tfidf`: unigrams of the shared analyzer, whole vocabulary, idf, sublinear tf), so `max_features`,
    `ngram_range`, `use_idf` and `sublinear_tf` cannot be honoured here: their defaults *describe* that index,
    and the retriever warns when they are set to anything else (rebuild the index to change them)."""
    initial_k: int = Field(100, ge=1, description="TF-IDF candidates in iteration 1; iteration i takes initial_k * i")
    max_features: Optional[int] = Field(None, ge=1, description="describes the prebuilt index: None = whole vocabulary")
    ngram_range: tuple[int, int] = Field((1, 1), description="describes the prebuilt index: unigrams")
    use_idf: bool = Field(True, description="describes the prebuilt index")
    sublinear_tf: bool = Field(True, description="describes the prebuilt index")


PREBUILT_TFIDF = {"max_features": None, "ngram_range": (1, 1), "use_idf": True, "sublinear_tf": True}


class EmbeddingConfig(_Section):
    """Stage 2. `similarity_cutoff` is a cosine on L2-normalised vectors (in [-1, 1]); a candidate is kept when
    `cosine >= similarity_cutoff`; None keeps every candidate."""
    similarity_top_k: int = Field(20, ge=1, description="stage-2 documents in iteration 1; iteration i keeps top_k * i")
    similarity_cutoff: Optional[float] = Field(0.6, ge=-1.0, le=1.0)
    embedding_model: str = Field(DEFAULT_MODEL, description="must be the model the index was embedded with")


class GraphConfig(_Section):
    """Stage 3, over the neighbour function. `max_nodes` caps the documents expansion adds (and the frontier
    expanded at each hop); edge weights below `min_edge_weight` are not followed; `relationship_types=None`
    follows every type. Nodes that are not chunks of the index are entity nodes: traversed when
    `include_entity_nodes`, never returned."""
    max_hops: int = Field(2, ge=0)
    max_nodes: int = Field(50, ge=0)
    min_edge_weight: float = Field(0.3, ge=0.0)
    relationship_types: Optional[list[str]] = None
    include_entity_nodes: bool = True
    score_decay_factor: float = Field(0.8, ge=0.0, le=1.0)


class EntropyConfig(_Section):
    """Loop control. `threshold` bounds |entropy change| against the mean of the last `window_size` iterations;
    `max_documents` caps (and, when reached, ends) retrieval; fewer than `min_documents` asks for another
    iteration, but never past `max_iterations` (see the module docstring: Termination)."""
    threshold: float = Field(0.05, ge=0.0)
    max_iterations: int = Field(5, ge=1)
    min_documents: int = Field(5, ge=0)
    max_documents: int = Field(100, ge=1)
    window_size: int = Field(3, ge=1)
    use_normalized_entropy: bool = True
    terminate_on_decreasing_entropy: bool = True


class RetrievalConfig(_Section):
    tfidf: TFIDFConfig = Field(default_factory=TFIDFConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    graph: GraphConfig = Field(default_factory=GraphConfig)
    entropy: EntropyConfig = Field(default_factory=EntropyConfig)

    @model_validator(mode="after")
    def _documents_range(self) -> "RetrievalConfig":
        if self.entropy.min_documents > self.entropy.max_documents:
            raise ValueError(f"entropy.min_documents ({self.entropy.min_documents}) exceeds "
                             f"entropy.max_documents ({self.entropy.max_documents})")
        return self

    def save(self, path: str | Path) -> Path:
        """JSON, or YAML when the name ends in .yaml/.yml; a path without one of those suffixes is a directory
        that receives `cascade_config.json`."""
        path = _config_file(Path(path), for_writing=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.model_dump(mode="json")
        if path.suffix in (".yaml", ".yml"):
            path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        else:
            path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "RetrievalConfig":
        path = _config_file(Path(path), for_writing=False)
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        return cls.model_validate(data)


CONFIG_NAME = "cascade_config"


def _config_file(path: Path, for_writing: bool) -> Path:
    if path.suffix in (".json", ".yaml", ".yml"):
        return path
    if not for_writing:
        for suffix in (".json", ".yaml", ".yml"):
            if (path / f"{CONFIG_NAME}{suffix}").exists():
                return path / f"{CONFIG_NAME}{suffix}"
        raise FileNotFoundError(f"no {CONFIG_NAME}.json/.yaml in {path}")
    return path / f"{CONFIG_NAME}.json"
