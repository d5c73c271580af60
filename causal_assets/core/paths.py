"""Where the project, its registries and the shared benchmark data live."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PROJECT_ROOT = PACKAGE_DIR.parent
REGISTRY_DIR = PACKAGE_DIR / "registry"


def shared_data_dir() -> Path:
    """Real benchmark data lives outside the repository (never copied in): ../shared/data by default."""
    return Path(os.environ.get("CAUSAL_ASSETS_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data"))


def expand(path: str) -> str:
    return path.replace("${SHARED_DATA}", str(shared_data_dir()))
