"""The Dagster layer stays thin: the stage modules of defs/ share names only through its shared modules (never one
stage importing another), Dagster's private modules are used in one module only, and the commands never import
the command line that dispatches to them (read from the source with `ast`); the code location loads from an
installed copy of the package as well as from the checkout, without the libraries only some steps use."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "causal_assets"
DEFS = PACKAGE / "defs"
# defs/ modules that hold no stage: what the stages share, and the resources the code location binds
SHARED = {"partitions", "checks", "shared"}
PRIVATE_DAGSTER = {"dagster_private.py"}


def imported(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, node.lineno)] + [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return out


def test_no_stage_module_of_defs_imports_another():
    stages = {p.stem for p in DEFS.glob("*.py")} - SHARED - {"__init__"}
    found = [f"defs/{path.name}:{line} imports {name}" for path in DEFS.glob("*.py")
             for name, line in imported(path)
             if name.startswith("causal_assets.defs.") and name.split(".")[2] in stages]
    assert not found, "move what they share to a shared module (defs/shared.py) or to core:\n" + "\n".join(found)


def test_dagster_private_modules_are_used_in_one_module_only():
    found = [f"{path.relative_to(PACKAGE)}:{line} imports {name}" for path in PACKAGE.rglob("*.py")
             if path.name not in PRIVATE_DAGSTER for name, line in imported(path) if name.startswith("dagster._")]
    strings = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
               if path.name not in PRIVATE_DAGSTER and "dagster._" in path.read_text(encoding="utf-8")]
    assert not found and not strings, "\n".join(found + strings)


def test_the_commands_never_import_the_command_line():
    found = [f"commands/{path.name}:{line}" for path in (PACKAGE / "commands").glob("*.py")
             for name, line in imported(path) if name == "causal_assets.cli" or name.startswith("causal_assets.cli.")]
    assert not found, "the exit codes are in causal_assets/exit_codes.py:\n" + "\n".join(found)


@pytest.mark.slow
def test_the_code_location_loads_from_an_installed_copy_without_the_project_file(tmp_path):
    """A wheel puts the package in site-packages with no `pyproject.toml` beside it, which `load_from_defs_folder`
    needs to find the project: the same assets load from the `defs` package then."""
    shutil.copytree(PACKAGE, tmp_path / "site" / "causal_assets",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "DAGSTER_HOME": str(tmp_path / "home"),
           "CAUSAL_ASSETS_MODELS_DIR": str(PACKAGE.parent / "data" / "models")}
    (tmp_path / "home").mkdir()
    code = ("import causal_assets.definitions as d; "
            "print(d.__file__); print(len(list(d.defs.resolve_asset_graph().get_all_asset_keys())))")
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    where, count = out.stdout.split()[-2:]
    from causal_assets.definitions import defs
    assert where.startswith(str(tmp_path)) and int(count) == len(list(defs.resolve_asset_graph().get_all_asset_keys()))


# Loaded by the steps that use them, never by loading the code location, which every Dagster process (each run
# worker, each step process of the multiprocess executor) does first: numba (the ranking kernel, ~0.35 s), joblib
# (~0.1 s), ranx, matplotlib, the openai SDK, the model runtimes (seconds).
NOT_AT_LOAD = ("numba", "joblib", "ranx", "matplotlib", "openai", "sklearn", "torch", "sentence_transformers",
               "llama_cpp", "onnxruntime", "lightgbm", "bm25s")


def test_loading_the_code_location_imports_none_of_the_libraries_only_some_steps_use():
    code = ("import json, sys; import causal_assets.definitions; "
            f"print(json.dumps([m for m in {NOT_AT_LOAD!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "[]", out.stdout
