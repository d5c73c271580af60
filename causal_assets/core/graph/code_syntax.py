"""What the code graph reads from Python syntax: import bindings, dotted names, a function's local names, and the
def node of a function's source text. Pure functions of `ast` nodes and text, used by `code_graph`."""
from __future__ import annotations

import ast
import textwrap


def resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module of `from <level dots><name> import ...` written in `module`."""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)] if level - 1 <= len(base) else []
    return ".".join([*base, *([name] if name else [])])


def import_bindings(stmt: ast.Import | ast.ImportFrom, module: str, is_package: bool
                    ) -> tuple[dict[str, str], list[str], list[str]]:
    """(local name -> raw FQN, star-imported modules, raw import targets) of one import statement."""
    binds: dict[str, str] = {}
    stars: list[str] = []
    targets: list[str] = []
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            targets.append(a.name)
            if a.asname:
                binds[a.asname] = a.name
            else:
                head = a.name.split(".")[0]
                binds[head] = head
        return binds, stars, targets
    src = resolve_relative(module, is_package, stmt.level, stmt.module) if stmt.level else (stmt.module or "")
    for a in stmt.names:
        if a.name == "*":
            stars.append(src)
            targets.append(src)
        else:
            fqn = f"{src}.{a.name}" if src else a.name
            binds[a.asname or a.name] = fqn
            targets.append(fqn)
    return binds, stars, targets


def parse_function(text: str) -> ast.AST | None:
    """The def node of a function's source (dedented; a tail that does not parse is cut line by line)."""
    src = textwrap.dedent(text)
    lines = src.splitlines()
    for _ in range(60):
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            if len(lines) <= 1:
                return None
            lines = lines[:-1]
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None
    return None


def dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for a pure Name/Attribute chain, "super().m" style chains as "super().m", else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
          and not node.args):
        parts.append("super()")
    else:
        return None
    return ".".join(reversed(parts))


def local_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Parameters and every name the function body binds (assignments, loops, with/except, nested defs)."""
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.arg) and node not in (*a.posonlyargs, *a.args, *a.kwonlyargs):
            names.add(node.arg)  # lambda and nested-def parameters
    return names
