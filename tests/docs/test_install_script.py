"""The Python that scripts/install runs after the pip install (the numba warm-up) names modules that exist: a moved
module otherwise breaks README command 1 and CI while every test still passes, because the tests never run the
install script."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = re.compile(r'python[^\n]* -c "\n?(.*?)"', re.S)


def snippets(script: Path) -> list[str]:
    return SNIPPET.findall(script.read_text())


@pytest.mark.unit
def test_install_snippets_import_modules_that_exist():
    found = [code for script in sorted((ROOT / "scripts").iterdir()) if script.is_file()
             for code in snippets(script)]
    assert found, "scripts/install no longer runs Python after its pip install: update this test"
    for code in found:
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom):
                package = importlib.import_module(node.module)
                for alias in node.names:
                    assert (hasattr(package, alias.name)
                            or importlib.util.find_spec(f"{node.module}.{alias.name}") is not None), \
                        f"scripts: `from {node.module} import {alias.name}` names nothing"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert importlib.util.find_spec(alias.name) is not None, f"scripts: `import {alias.name}`"


def imported_modules(tree: ast.AST) -> dict[str, object]:
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
    return names


@pytest.mark.unit
def test_install_snippets_call_functions_that_exist():
    """`for module in (metrics, sparse): module.warm_up()`: each module the loop names has the function it calls (a
    function removed from one module broke CI's install while the import check above still passed)."""
    for script in sorted((ROOT / "scripts").iterdir()):
        if not script.is_file():
            continue
        for code in snippets(script):
            tree = ast.parse(code)
            modules = imported_modules(tree)
            for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For)):
                if not (isinstance(loop.iter, ast.Tuple) and isinstance(loop.target, ast.Name)):
                    continue
                called = {n.func.attr for n in ast.walk(loop) if isinstance(n, ast.Call)
                          and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                          and n.func.value.id == loop.target.id}
                for element in loop.iter.elts:
                    for attr in called:
                        assert hasattr(modules[element.id], attr), \
                            f"{script.name}: {element.id}.{attr}() does not exist"
