"""core/ imports only downward: no import circle between its modules, no import of a higher layer, no Dagster.

Read from the source with `ast` (nothing is imported), so the check costs milliseconds. The layers are the "Layers"
section of docs/architecture.md; a new module of core must be placed in one of them here.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "causal_assets" / "core"
PACKAGE = "causal_assets.core"

# Lowest first: each layer is a list of folders of core/. A module imports modules of its own layer and of the
# layers below it, never of a layer above; every module of core lives in one of these folders.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("foundation", "text")),
    # where questions, documents and log-probabilities come from, and how a ranking is measured
    ("sources and measures", ("llm", "corpus", "measures")),
    # the registries' specs: corpora, benchmarks, tuning and answers sections, as typed and checked objects
    ("registry", ("registry",)),
    ("index", ("index",)),
    ("graph", ("graph",)),
    # what the stages read back: a corpus's index + graph, tuned configurations and models, what is missing
    ("stored artifacts", ("stored",)),
    ("retrievers", ("retrievers",)),
    ("sandbox", ("sandbox",)),
    ("labeling", ("labeling",)),
    ("evaluation", ("evaluation",)),
    ("tuning", ("tuning",)),
    # what users and the Dagster layer read: local search, checks of stored tables, the SQL catalog, the export
    ("applications", ("local_search", "outputs")),
]


# Imports that may stay inside functions: optional heavy dependencies (seconds to import, or only for an export,
# a fit, a model file), loaded where they are used so that a search or `--help` does not pay for them.
HEAVY = frozenset({"torch", "sentence_transformers", "transformers", "onnx", "onnxruntime", "llama_cpp", "faiss",
                   "datasets", "tokenizers", "sklearn", "joblib", "bm25s",
                   # LightGBM (~1.3 s with its scikit-learn glue): only fitting a LambdaMART point needs it
                   "lightgbm",
                   # ranx brings scipy.stats and matplotlib (~1.7 s) into every process that loads the code location
                   "ranx",
                   # matplotlib (~0.5 s): only the evaluation report's plots draw
                   "matplotlib",
                   # the openai SDK (~0.7 s): only a step that calls an endpoint needs it (core/llm/transport.py)
                   "openai",
                   # psycopg2: only the PostgreSQL call cache of several machines (core/llm/pg_cache.py)
                   "psycopg2"})
# Our own modules that exist to hold a heavy dependency: the numba BM25 batch kernel (numba + the cached kernel load
# in ~0.7 s, which a one-query `causal-assets search` skips), the numba kernel that builds ranx's input (numba and
# scipy, ~0.35 s, which a step process that evaluates nothing skips), the openai SDK with the client's HTTP
# transport, llama_cpp's low-level API for separately encoded documents (loaded by the first such request), and the
# PostgreSQL call cache (psycopg2, only where the cache is a database URL).
HEAVY_OWN = frozenset({"causal_assets.core.index.postings_kernel", "causal_assets.core.measures.ranking_kernel",
                       "causal_assets.core.llm.transport",
                       "causal_assets.core.llm.separate", "causal_assets.core.llm.pg_cache"})
# Run inside the sandbox as a script, never imported: its worker and grader processes each import only their side.
STANDALONE = frozenset({"sandbox._launcher"})
NEVER = ("dagster", "causal_assets.defs", "causal_assets.resources", "causal_assets.definitions", "causal_assets.cli",
         "causal_assets.commands")


def _modules() -> dict[str, Path]:
    out = {}
    for path in CORE.rglob("*.py"):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int, bool]]:
    """(imported absolute module name, line, imported inside a function or class) of every import in a module."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested |= {id(n) for n in ast.walk(node) if n is not node}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in nested) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = f"{PACKAGE}.{name}".split(".")
                base = here if _is_package(name) else here[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:   # `from pkg import mod` imports the module pkg.mod
                full = f"{module}.{a.name}"
                target = full if full.startswith(PACKAGE + ".") and full[len(PACKAGE) + 1:] in MODULES else module
                out.append((target, node.lineno, id(node) in nested))
    return out


def _core_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        edges[name] = set()
        for target, _, _ in _imports(name):
            if target.startswith(PACKAGE + "."):
                rel = target[len(PACKAGE) + 1:]
                while rel and rel not in MODULES:
                    rel = rel.rpartition(".")[0]
                if rel and rel != name:
                    edges[name].add(rel)
    return edges


def layer_of(name: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if name.split(".")[0] == p and (best is None or len(p) > best[1]):
                best = (i, len(p))
    if best is None:
        raise KeyError(name)
    return best[0]


def test_every_core_module_has_a_layer():
    missing = sorted(m for m in MODULES if _try_layer(m) is None or "." not in m and not _is_package(m))
    assert not missing, f"place these modules in a layer of LAYERS (and docs/architecture.md, Layers): {missing}"


def _try_layer(name: str) -> int | None:
    try:
        return layer_of(name)
    except KeyError:
        return None


def test_no_import_circle():
    edges = _core_edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:   # Tarjan's strongly connected components; core's import depth is small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"import circles between core modules: {circles}"


def test_layers_import_only_downward():
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
              for name, targets in _core_edges().items() for target in sorted(targets)
              if layer_of(target) > layer_of(name)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_core_never_imports_dagster_or_the_dagster_layer():
    found = [f"{name}:{line} imports {target}" for name in MODULES for target, line, _ in _imports(name)
             if any(target == n or target.startswith(n + ".") for n in NEVER)]
    assert not found, "\n".join(found)


def test_function_local_imports_only_for_optional_heavy_dependencies():
    found = [f"{name}:{line} imports {target} inside a function" for name in MODULES if name not in STANDALONE
             for target, line, nested in _imports(name)
             if nested and target.split(".")[0] not in HEAVY and target not in HEAVY_OWN]
    assert not found, "move these imports to module level:\n" + "\n".join(found)


def test_package_inits_import_only_their_own_package():
    edges = _core_edges()     # once: it parses every core module
    found = [f"{name} imports {target}" for name in MODULES if _is_package(name)
             for target in edges[name] if not target.startswith(name + ".")]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name,layer", [("text.entities", "foundation"), ("registry.tuning", "registry"),
                                        ("tuning.search", "tuning"), ("retrievers.causal.answer_model", "retrievers")])
def test_a_module_is_placed_by_its_folder(name, layer):
    assert LAYERS[layer_of(name)][0] == layer


def test_every_layer_entry_names_a_module_and_the_layer_diagram_shows_it():
    stale = [p for _, prefixes in LAYERS for p in prefixes
             if not any(m == p or m.startswith(p + ".") for m in MODULES)]
    assert not stale, f"LAYERS names modules core no longer has: {stale}"
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    missing = [p for _, prefixes in LAYERS for p in prefixes
               if not re.search(rf"(?<![\w.]){re.escape(p)}(?![\w])", section)]
    assert not missing, f"the layer diagram of docs/architecture.md does not show: {missing}"
