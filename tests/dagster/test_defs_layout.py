"""The Dagster layer stays thin: the stage modules of defs/ share names only through its shared modules (never one
stage importing another), Dagster's private modules are used in one module only, and the commands never import
the command line that dispatches to them. Read from the source with `ast`, nothing imported."""
from __future__ import annotations

import ast
from pathlib import Path

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
