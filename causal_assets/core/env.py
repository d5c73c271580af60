"""Settings read from environment variables, with errors that name the variable and its value."""
from __future__ import annotations

import os

from causal_assets.core.errors import ConfigError


def positive_int(name: str, default: int) -> int:
    """`$name` as a positive integer, `default` when unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name}={raw!r}: expected a positive integer")
    return int(raw)
