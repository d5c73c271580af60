"""The corpus registry: named corpus sources validated with pydantic, and the one function that loads any of them."""
from __future__ import annotations

import inspect
import json
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, model_validator

from causal_assets.core.corpus.beir import load_beir_corpus
from causal_assets.core.corpus.chunk import Chunk
from causal_assets.core.corpus.folder import load_folder
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.multihop import load_multihop
from causal_assets.core.corpus.python_package import load_python_package
from causal_assets.core.corpus.split import check_options as check_split_options
from causal_assets.core.foundation.errors import ConfigError, CorpusError
from causal_assets.core.foundation.paths import DEFAULT_CORPUS, DEFAULT_SHARED_DATA, REGISTRY_DIR, expand
from causal_assets.core.foundation.yaml_registry import load_entries, short_repr

DEFAULT_REGISTRY = REGISTRY_DIR / "corpora.yaml"


class CorpusSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    loader: Literal["python_package", "beir", "hotpotqa", "multihop", "folder"]
    path: str | None = None
    package: str | None = None
    description: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    # what `${SHARED_DATA}` in `path` stands for, and the directory a relative `path` is relative to (the
    # registry file's): set by load_corpus_registry
    _shared_data: Path = PrivateAttr(default=DEFAULT_SHARED_DATA)
    _registry_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _source_given(self) -> "CorpusSpec":
        if self.loader == "python_package" and not self.package:
            raise ValueError("loader python_package needs 'package'")
        if self.loader != "python_package" and not self.path:
            raise ValueError(f"loader {self.loader} needs 'path'")
        known = loader_options(self.loader)
        unknown = sorted(set(self.options) - set(known))
        if unknown:   # a misspelt option was silently ignored, or failed the build with a TypeError
            raise ValueError(f"unknown option {unknown[0]!r} for loader {self.loader} (its options: "
                             f"{', '.join(sorted(known))})")
        for name, value in self.options.items():
            check_option(name, value, known[name])
        if self.loader in ("folder", "python_package"):
            check_split_options(**{k: v for k, v in self.options.items() if k in known and k != "split_identifiers"})
        return self

    @property
    def resolved_path(self) -> Path | None:
        return resolve_registry_path(self.path, self._shared_data, self._registry_dir) if self.path else None

    def available(self) -> bool:
        return self.loader == "python_package" or self.resolved_path.exists()

    @property
    def chunk_chars(self) -> int | None:
        """The longest chunk a folder or package corpus makes (its `chunk_chars` option, else the loader's
        default); None for corpora whose documents are the dataset's own."""
        if self.loader not in LOADER_FUNCTIONS:
            return None
        default = inspect.signature(LOADER_FUNCTIONS[self.loader]).parameters.get("chunk_chars")
        value = self.options.get("chunk_chars", default.default if default is not None else None)
        return int(value) if isinstance(value, int) else None

    @property
    def split_identifiers(self) -> bool:
        """Code corpora also index the parts of snake_case/camelCase identifiers."""
        return bool(self.options.get("split_identifiers", self.loader == "python_package"))


# Options every loader takes (read here, not by the loader), and the loaders whose keyword parameters are options.
COMMON_OPTIONS: dict[str, Any] = {"split_identifiers": bool}
LOADER_FUNCTIONS = {"python_package": load_python_package, "folder": load_folder}


def loader_options(loader: str) -> dict[str, Any]:
    """Option name -> its type: the common ones, `strict` for multihop, and the keyword parameters of the loader's
    function (after its source and corpus name), typed by their annotations (with their range constraints)."""
    options = dict(COMMON_OPTIONS) | ({"strict": bool} if loader == "multihop" else {})
    if loader in LOADER_FUNCTIONS:
        function = LOADER_FUNCTIONS[loader]
        hints = typing.get_type_hints(function, include_extras=True)
        for param in list(inspect.signature(function).parameters.values())[2:]:
            options[param.name] = hints.get(param.name, Any)
    return options


def resolve_registry_path(path: str, shared_data: str | Path, registry_dir: Path | None) -> Path:
    """A registry entry's `path`: `${SHARED_DATA}` replaced by the shared data directory, `~` expanded, and a path
    that is still relative taken relative to the registry file's directory (never to the working directory, which
    differs between the CLI, `dagster dev` and each run worker)."""
    resolved = Path(expand(path, shared_data)).expanduser()
    if not resolved.is_absolute() and registry_dir is not None:
        resolved = registry_dir / resolved
    return resolved


def check_option(name: str, value: Any, kind: Any) -> None:
    """Refuse an option value that is not of the option's type, exactly (`"1500"` and `1500.5` are not integers,
    `"false"` is not a flag: YAML gives every one of them as written), or outside its declared range."""
    try:
        TypeAdapter(kind).validate_json(json.dumps(value), strict=True)
    except (TypeError, ValueError) as e:
        if kind is bool:   # "false" would be true
            raise ValueError(f"option {name!r} must be true or false, not {short_repr(value)}") from None
        msg = e.errors()[0]["msg"] if isinstance(e, ValidationError) else "Input should be a plain YAML value"
        raise ValueError(f"option {name!r} is {short_repr(value)}: {msg[0].lower() + msg[1:]}") from None


def load_corpus_registry(path: str | Path | None = None,
                         shared_data: str | Path | None = None) -> dict[str, CorpusSpec]:
    """The registry at `path` (default: the shipped one), `${SHARED_DATA}` in its paths standing for `shared_data`
    (default: ../shared/data beside the checkout). The configured ones come from `causal_assets.settings`."""
    path = Path(path) if path else DEFAULT_REGISTRY
    specs = load_entries(path, "corpora", CorpusSpec)
    if DEFAULT_CORPUS not in specs:
        raise ConfigError(f"{path}: no corpus named {DEFAULT_CORPUS!r}")
    for spec in specs.values():
        spec._shared_data = Path(shared_data) if shared_data else DEFAULT_SHARED_DATA
        spec._registry_dir = path.resolve().parent
    return specs


def available_corpora(path: str | Path | None = None, shared_data: str | Path | None = None) -> list[str]:
    return [name for name, spec in load_corpus_registry(path, shared_data).items() if spec.available()]


def require_available(name: str, path: str | Path | None = None, shared_data: str | Path | None = None) -> str:
    """`name` when it is a corpus here; else a ConfigError saying why: not registered (listing those that are), or
    registered with a source that does not exist (a checkout not beside the shared data said "unknown corpus")."""
    specs = load_corpus_registry(path, shared_data)
    spec = specs.get(name)
    if spec is not None and spec.available():
        return name
    if spec is None:
        known = sorted(n for n, s in specs.items() if s.available())
        raise ConfigError(f"unknown corpus {name!r}; corpora: {', '.join(known)}")
    where = (f" ({spec.path} with ${{SHARED_DATA}} = {spec._shared_data}: set CAUSAL_ASSETS_SHARED_DATA to the "
             f"shared data directory)" if "${SHARED_DATA}" in spec.path else "")
    raise ConfigError(f"corpus {name!r} is registered, but its source {spec.resolved_path} does not exist{where}")


def load_corpus(spec: CorpusSpec) -> tuple[list[Chunk], dict]:
    """Chunks of a registered corpus and a small load report (counts of files read and skipped)."""
    opts = {k: v for k, v in spec.options.items() if k != "split_identifiers"}
    if spec.loader == "python_package":
        return load_python_package(spec.package, spec.name, **opts)
    if not spec.resolved_path.exists():
        raise CorpusError(f"corpus {spec.name!r}: path {spec.resolved_path} does not exist")
    if spec.loader == "beir":
        return load_beir_corpus(spec.resolved_path, spec.name), {}
    if spec.loader == "hotpotqa":
        chunks, questions = load_hotpotqa(spec.resolved_path, spec.name)
        return chunks, {"questions": len(questions)}
    if spec.loader == "multihop":
        # HotpotQA / 2Wiki / MuSiQue, detected per record; `strict: true` refuses records without paragraphs.
        chunks, _, report = load_multihop(spec.resolved_path, spec.name, strict=bool(opts.get("strict", False)))
        return chunks, report
    return load_folder(spec.resolved_path, spec.name, **opts)
