"""Where the project, its registries and the shared benchmark data live by default, and the corpora used when a
command names none. The configured places (environment variables) are read by `causal_assets.settings`, never
here: code in `core` is given them as arguments."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2]
PROJECT_ROOT = PACKAGE_DIR.parent
REGISTRY_DIR = PACKAGE_DIR / "registry"
# Real benchmark data lives outside the repository (never copied in): ../shared/data beside the checkout by default.
DEFAULT_SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

DEFAULT_CORPUS = "default"      # the corpus every registry has (`causal-assets search` reads it unless told)
QUESTION_CORPUS = "hotpotqa"    # where a question goes when none is named (`ask`, the query inbox, the UI)


def expand(path: str, shared_data: str | Path = DEFAULT_SHARED_DATA) -> str:
    """A registry path with `${SHARED_DATA}` replaced by the shared data directory."""
    return path.replace("${SHARED_DATA}", str(shared_data))


def display_path(path: str | Path) -> str:
    """A path as printable UTF-8: bytes of a non-UTF-8 file name (surrogate escapes) shown as \\xNN, `caf\\xe9.txt`
    (for logs, messages and JSON, which cannot hold the surrogates)."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")
