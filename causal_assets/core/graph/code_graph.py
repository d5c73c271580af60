"""The code graph of a Python-package corpus: who defines, imports, calls, inherits and references whom.

Built from the chunks alone (`python_package` chunks: one per module, class, function and method, with its FQN and
source, long ones in parts) with `ast`; nothing is imported or executed. Nodes are the chunks (node_id = FQN; a
long unit is parsed whole, its later parts are `part` nodes linked from it by `has_part`) plus `external` nodes for
names that resolve outside the corpus. Edges: `defines`, `imports` (relative imports resolved), `calls` (resolved
through imports, locals, `self`/`cls` and the MRO, `super()`, aliases and re-export chains), `references` (a symbol
named but not called, or a call that resolves outside the corpus) and `inherits`, each weighted by occurrences with
its first source line as evidence. Resolution rules and known limits: docs/pipeline.md ("Graph").
"""
from __future__ import annotations

import ast
import builtins
import json
from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd

from causal_assets.core.corpus.python_package import join_parts
from causal_assets.core.graph.code_syntax import dotted_name, import_bindings, local_names, parse_function
from causal_assets.core.graph.store import CODE_KINDS, edges_frame, nodes_frame, with_degree_rank

BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class _Symbol:
    node_id: str
    fqn: str
    kind: str
    module: str
    parent: str
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    signature: str
    docstring: str
    text: str


@dataclass
class _Resolver:
    """Name resolution over the whole corpus: module namespaces, class members, package re-exports."""
    symbols: dict[str, _Symbol]                       # fqn -> first definition
    packages: set[str]                                # modules that are packages (__init__.py)
    roots: set[str]                                   # top-level package names in the corpus
    top_level: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    members: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    bindings: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    stars: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    bases: dict[str, list[str]] = field(default_factory=dict)
    by_short: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    _export_memo: dict[tuple[str, str], str | None] = field(default_factory=dict)
    _active: set = field(default_factory=set)

    def is_module(self, fqn: str) -> bool:
        s = self.symbols.get(fqn)
        return s is not None and s.kind == "module"

    def is_class(self, fqn: str) -> bool:
        s = self.symbols.get(fqn)
        return s is not None and s.kind == "class"

    def export(self, module: str, name: str) -> str | None:
        """What `module.name` denotes: a top-level definition, an import binding, a submodule, or a name
        re-exported through `from x import *`. Raw (possibly external) FQN or None."""
        key = (module, name)
        if key in self._export_memo:
            return self._export_memo[key]
        if key in self._active:
            return None
        self._active.add(key)
        try:
            result = self.top_level.get(module, {}).get(name)
            if result is None and name in self.bindings.get(module, {}):
                result = self.bindings[module][name]
            if result is None and self.is_module(f"{module}.{name}"):
                result = f"{module}.{name}"
            # `from x import *` exports public names, or `__all__` (which may list private names such as
            # networkx's `_dispatchable`); `__all__` is not in the chunks, so any non-dunder name passes.
            if result is None and not name.startswith("__"):
                for star in self.stars.get(module, ()):
                    r = self.export(star, name)
                    if r is not None and self.canon(r)[1]:
                        result = r
                        break
        finally:
            self._active.discard(key)
        self._export_memo[key] = result
        return result

    def member(self, cls: str, name: str, depth: int = 0) -> str | None:
        """`name` looked up on class `cls` and, failing that, on its in-corpus bases (depth-first MRO)."""
        if depth > 20:
            return None
        found = self.members.get(cls, {}).get(name)
        if found is not None:
            return found
        for base in self.bases.get(cls, ()):
            if self.is_class(base):
                found = self.member(base, name, depth + 1)
                if found is not None:
                    return found
        return None

    def canon(self, dotted: str, depth: int = 0) -> tuple[str, bool, str]:
        """(canonical FQN, known in corpus, how) for a dotted name; how is "", "reexport" or "guess"."""
        if dotted in self.symbols:
            return dotted, True, ""
        if depth > 20:
            return dotted, False, ""
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix, name, rest = ".".join(parts[:i]), parts[i], parts[i + 1:]
            if self.is_module(prefix):
                target = self.export(prefix, name)
            elif self.is_class(prefix):
                target = self.member(prefix, name)
            else:
                continue
            if target is None or target == ".".join(parts[:i + 1]):
                break
            fqn, known, how = self.canon(".".join([target, *rest]), depth + 1)
            return fqn, known, how or ("reexport" if known else "")
        # Partial corpora: `nx.foo` when networkx/__init__ was not loaded. Match the unique top-level `foo`
        # defined anywhere under the prefix package, if the prefix belongs to this corpus's packages.
        if parts[0] in self.roots:
            for i in range(len(parts) - 1, 0, -1):
                prefix, name, rest = ".".join(parts[:i]), parts[i], parts[i + 1:]
                if prefix in self.symbols:
                    break  # a loaded module/class that does not have the name: no guessing
                cands = [f for f in self.by_short.get(name, ()) if f.startswith(prefix + ".")
                         and self.symbols[f].parent == self.symbols[f].module]
                if len(cands) == 1:
                    fqn, known, _ = self.canon(".".join([cands[0], *rest]), depth + 1)
                    return fqn, known, "guess" if known else ""
        return dotted, False, ""

    def known_prefix(self, dotted: str) -> str | None:
        """The longest prefix of `dotted` (after resolution) that is an in-corpus class or function.
        Modules are not returned: `pkg.CONSTANT` says little about `pkg` and would make hubs of packages."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            fqn, known, _ = self.canon(".".join(parts[:i]))
            if known:
                return None if self.is_module(fqn) else fqn
        return None


class _BodyVisitor(ast.NodeVisitor):
    """Collects (edge_type, raw target, how, line, expression) from one function body."""

    def __init__(self, fn, sym: _Symbol, res: _Resolver, is_package: bool, line_offset: int):
        self.sym, self.res, self.offset = sym, res, line_offset
        self.found: list[tuple[str, str, bool, str, int, str]] = []  # (type, target, known, how, line, expr)
        self.local_imports: dict[str, str] = {}
        self.import_targets: list[tuple[str, int, str]] = []
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                binds, stars, targets = import_bindings(node, sym.module, is_package)
                self.local_imports.update(binds)
                self.import_targets += [(t, node.lineno, ast.unparse(node)) for t in targets]
        self.shadowed = local_names(fn) - set(self.local_imports)
        self.owner = sym.parent if sym.kind == "method" else None
        params = [*fn.args.posonlyargs, *fn.args.args]
        decorators = {dotted_name(d) for d in fn.decorator_list}
        self.self_name = params[0].arg if self.owner and params and "staticmethod" not in decorators else None
        if self.self_name:
            self.shadowed.discard(self.self_name)

    def line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 0) + self.offset

    def resolve(self, dotted: str) -> tuple[str, bool, str] | None:
        """(FQN, in corpus, how) of a name chain used in this function, or None when unresolvable."""
        head, _, rest = dotted.partition(".")
        res = self.res
        if head == "super()":
            if not self.owner or not rest:
                return None
            name, _, tail = rest.partition(".")
            for base in res.bases.get(self.owner, ()):
                found = res.member(base, name) if res.is_class(base) else None
                if found:
                    return res.canon(".".join(filter(None, [found, tail])))
            return None
        if head in self.local_imports:
            base = self.local_imports[head]
        elif head in self.shadowed:
            return None
        elif head == self.self_name and self.owner:
            if not rest:
                return None
            name, _, tail = rest.partition(".")
            found = res.member(self.owner, name)
            return res.canon(".".join(filter(None, [found, tail]))) if found else None
        else:
            base = res.export(self.sym.module, head)
            if base is None:
                return None  # builtins (len, isinstance, ...) and undefined names
        return res.canon(".".join(filter(None, [base, rest])))

    def record(self, kind: str, node: ast.AST, dotted: str) -> None:
        r = self.resolve(dotted)
        if r is None:
            return
        fqn, known, how = r
        expr = dotted + ("(...)" if kind == "calls" else "")
        if not known:
            prefix = self.res.known_prefix(fqn)
            if prefix is not None:  # `SomeClass.attr`, `nx.func.__doc__`: a reference to the known part
                self.found.append(("references", prefix, True, how, self.line(node), expr))
            elif kind == "calls":
                self.found.append(("references", fqn, False, how, self.line(node), expr))
            return
        if kind == "calls" and self.res.symbols[fqn].kind == "module":
            kind = "references"
        self.found.append((kind, fqn, True, how, self.line(node), expr))

    def visit_Call(self, node: ast.Call) -> None:
        dotted = dotted_name(node.func)
        if dotted is not None:
            self.record("calls", node, dotted)
        else:
            self.visit(node.func)
        for a in node.args:
            self.visit(a)
        for k in node.keywords:
            self.visit(k.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = dotted_name(node)
        if dotted is not None and isinstance(node.ctx, ast.Load):
            self.record("references", node, dotted)
        else:
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.record("references", node, node.id)


def build_code_graph(chunks: pd.DataFrame, include_external: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(nodes, edges) of the code chunks in `chunks`, in the `store` schema. Non-code chunks are ignored.

    include_external: keep nodes and edges for names resolved outside the corpus (imports of other
    packages, external base classes, calls through imports to external functions, as `references`).
    """
    code = chunks[chunks["kind"].isin(CODE_KINDS)]
    if code.empty:
        return nodes_frame([]), edges_frame([])
    corpus = str(code["corpus"].iloc[0])
    symbols: dict[str, _Symbol] = {}
    all_symbols: list[_Symbol] = []
    module_imports: dict[str, list[str]] = {}
    later_parts: dict[str, list[dict]] = defaultdict(list)  # a long unit's first chunk id -> its other parts
    for r in code.to_dict("records"):
        md = json.loads(r["metadata"] or "{}")
        if md.get("part_of"):
            later_parts[md["part_of"]].append({**r, "md": md})
            continue
        fqn = md.get("fqn") or r["title"] or r["chunk_id"]
        module = md.get("module") or (fqn if r["kind"] == "module" else fqn.rsplit(".", 1)[0])
        parent = md.get("parent") or ("" if r["kind"] == "module" else fqn.rsplit(".", 1)[0])
        s = _Symbol(r["chunk_id"], fqn, r["kind"], module, parent, r["chunk_id"], r["path"],
                    int(r["start_line"]), int(r["end_line"]), md.get("signature", ""), md.get("docstring", ""),
                    r["text"])
        all_symbols.append(s)
        symbols.setdefault(fqn, s)
        if r["kind"] == "module":
            module_imports[fqn] = list(md.get("imports", []))
    for s in all_symbols:  # a unit the loader cut into parts is one symbol, its text whole again
        parts = sorted(later_parts.get(s.chunk_id, ()), key=lambda p: p["md"]["part"])
        if parts:
            s.text = join_parts([(0, s.text)] + [(p["md"]["char_start"], p["text"]) for p in parts])
            s.end_line = max(s.end_line, *(int(p["end_line"]) for p in parts))

    packages = {s.fqn for s in symbols.values()
                if s.kind == "module" and s.path.replace("\\", "/").endswith("__init__.py")}
    res = _Resolver(symbols=symbols, packages=packages, roots={s.fqn.split(".")[0] for s in symbols.values()})
    for s in symbols.values():
        if s.kind == "module":
            continue
        res.by_short[s.fqn.rsplit(".", 1)[-1]].append(s.fqn)
        if s.parent == s.module:
            res.top_level[s.module][s.fqn.rsplit(".", 1)[-1]] = s.fqn
        elif res.is_class(s.parent):
            res.members[s.parent][s.fqn.rsplit(".", 1)[-1]] = s.fqn

    edges: dict[tuple[str, str, str], list] = {}  # (source, target, type) -> [weight, evidence]
    external: set[str] = set()

    def add(src: str, dst: str, etype: str, evidence: str, known: bool = True) -> None:
        if not known:
            if not include_external:
                return
            external.add(dst)
        if src == dst:
            return
        key = (src, dst, etype)
        if key in edges:
            edges[key][0] += 1
        else:
            edges[key] = [1, evidence]

    # Module namespaces first: every later resolution reads them.
    parsed_imports: dict[str, list[ast.stmt]] = {}
    for module, stmts in module_imports.items():
        is_pkg = module in packages
        nodes = []
        for text in stmts:
            try:
                nodes += [n for n in ast.parse(text).body if isinstance(n, (ast.Import, ast.ImportFrom))]
            except SyntaxError:
                continue
        parsed_imports[module] = nodes
        for n in nodes:
            binds, stars, _ = import_bindings(n, module, is_pkg)
            for k, v in binds.items():
                res.bindings[module].setdefault(k, v)
            res.stars[module] += stars

    # Bases of every class, resolved in the class's module (needed before self./super() lookups).
    class_bases: dict[str, list[tuple[str, str]]] = {}
    for s in symbols.values():
        if s.kind != "class":
            continue
        resolved = []
        try:
            cls = ast.parse((s.signature or f"class {s.fqn.rsplit('.', 1)[-1]}") + ":\n    pass").body[0]
            base_exprs = [b for b in cls.bases if dotted_name(b) is not None]
        except (SyntaxError, IndexError):
            base_exprs = []
        for b in base_exprs:
            dotted = dotted_name(b)
            head, _, rest = dotted.partition(".")
            base = res.export(s.module, head)
            if base is None:
                if dotted == "object":
                    continue  # says nothing
                if head in BUILTIN_NAMES:
                    base = f"builtins.{head}"
                else:
                    continue
            resolved.append((res.canon(".".join(filter(None, [base, rest])))[0], ast.unparse(b)))
        res.bases[s.fqn] = [fqn for fqn, _ in resolved]
        class_bases[s.fqn] = resolved

    for s in all_symbols:
        if s.kind != "module" and s.parent:
            parent = symbols.get(s.parent)
            if parent is not None:
                add(parent.node_id, s.node_id, "defines", f"L{s.start_line}: {s.signature}")

    for module, stmts in parsed_imports.items():
        src = symbols[module].node_id
        for n in stmts:
            _, _, targets = import_bindings(n, module, module in packages)
            for t in targets:
                fqn, known, _ = res.canon(t)
                if not known and "." in t:
                    parent, _, _ = t.rpartition(".")
                    p_fqn, p_known, _ = res.canon(parent)
                    if p_known and isinstance(n, ast.ImportFrom):
                        fqn, known = p_fqn, True  # `from m import x` where x is no symbol (a constant)
                add(src, symbols[fqn].node_id if known else fqn, "imports", ast.unparse(n), known)

    for cls, bases in class_bases.items():
        for fqn, expr in bases:
            known = fqn in symbols
            add(symbols[cls].node_id, symbols[fqn].node_id if known else fqn, "inherits",
                f"{symbols[cls].signature}", known)

    stats = {"functions": 0, "unparsable": 0}
    for s in all_symbols:
        if s.kind not in ("function", "method"):
            continue
        stats["functions"] += 1
        fn = parse_function(s.text)
        if fn is None:
            stats["unparsable"] += 1
            continue
        v = _BodyVisitor(fn, s, res, s.module in packages, s.start_line - 1)  # text line 1 = start_line
        for stmt in fn.body:
            v.visit(stmt)
        for d in fn.decorator_list:
            v.visit(d)
        for t, line, stmt in v.import_targets:
            fqn, known, _ = res.canon(t)
            add(s.node_id, symbols[fqn].node_id if known else fqn, "imports", f"L{line + v.offset}: {stmt}",
                known)
        for etype, fqn, known, how, line, expr in v.found:
            note = " (guessed re-export)" if how == "guess" else ""
            add(s.node_id, symbols[fqn].node_id if known else fqn, etype, f"L{line}: {expr}{note}", known)

    node_rows = []
    for s in all_symbols:
        doc_line = next((ln.strip() for ln in s.docstring.splitlines() if ln.strip()), "")
        node_rows.append({
            "node_id": s.node_id, "node_type": s.kind, "name": s.fqn.rsplit(".", 1)[-1], "chunk_id": s.chunk_id,
            "description": doc_line or s.signature,
            "attributes": {"fqn": s.fqn, "kind": s.kind, "module": s.module, "path": s.path,
                           "start_line": s.start_line, "end_line": s.end_line, "signature": s.signature},
        })
        for p in later_parts.get(s.chunk_id, ()):  # a part: a node of its own, linked to its unit
            add(s.node_id, p["chunk_id"], "has_part", f"L{p['start_line']}-L{p['end_line']}")
            node_rows.append({"node_id": p["chunk_id"], "node_type": "part", "name": s.fqn.rsplit(".", 1)[-1],
                              "chunk_id": p["chunk_id"], "description": f"part {p['md']['part']} of {s.fqn}",
                              "attributes": {"fqn": s.fqn, "kind": "part", "part": p["md"]["part"], "path": s.path,
                                             "start_line": p["start_line"], "end_line": p["end_line"]}})
    for fqn in sorted(external - {s.node_id for s in all_symbols}):
        node_rows.append({"node_id": fqn, "node_type": "external", "name": fqn, "chunk_id": "",
                          "attributes": {"fqn": fqn, "kind": "external"}})
    edge_rows = [{"source": a, "target": b, "edge_type": t, "weight": w, "evidence": ev}
                 for (a, b, t), (w, ev) in edges.items()]
    nodes_df = nodes_frame(node_rows, corpus)
    edges_df = edges_frame(edge_rows, corpus)
    nodes_df = with_degree_rank(nodes_df, edges_df)
    nodes_df.attrs["build_stats"] = stats
    return nodes_df, edges_df
