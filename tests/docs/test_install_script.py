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
