"""Model folders written whole: a fit writes into a fresh `.partial` directory beside its target, renamed to the
target only when the fit was adopted, so no table ever names a half-written model."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Protocol, TypeVar


class Adoptable(Protocol):
    adopted: bool


R = TypeVar("R", bound=Adoptable)


def fit_into(target: Path, fit: Callable[[Path], R], reuse: tuple[str, ...] = ()) -> R:
    """`fit(directory)` into a fresh `.partial` directory beside `target` (what a killed run left there is cleared
    first), renamed to `target` only if the result was adopted. `reuse`: entries of `target` (what an earlier fit
    adopted there) linked into the fresh directory first, for `fit` to read and the rename to keep; the files are
    hard links (copies where the file system has none), so `target` itself is never written to and stays whole
    whatever the new fit decides."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f"{target.name}.partial*"):
        shutil.rmtree(stale, ignore_errors=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=target.parent))
    try:
        for name in reuse:
            shutil.copytree(target / name, partial / name, copy_function=link_or_copy)
        result = fit(partial)
        if result.adopted:
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return result


def link_or_copy(source: str, destination: str) -> None:
    """A hard link to `source` (no second copy of a model's weights), a copy where the file system refuses one."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
