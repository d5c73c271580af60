"""A cheap fingerprint of a corpus *source* (not its chunks): what a sensor compares to notice a change without
re-reading every file. Python packages: installed version + file sizes and mtimes; files and folders: sizes
and mtimes."""
from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

from causal_assets.core.corpus.folder import walk_files
from causal_assets.core.corpus.python_package import iter_python_files, package_root
from causal_assets.core.registry.corpora import CorpusSpec

MISSING = "missing"  # the fingerprint of a source that does not exist


def _stat_digest(files) -> str:
    h = hashlib.sha256()
    for f in files:
        try:
            st = f.stat()
        except OSError:  # removed, dangling symlink or loop: part of the fingerprint, never an error
            h.update(f"{f}:?\n".encode("utf-8", "surrogateescape"))
            continue
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


def source_fingerprint(spec: CorpusSpec) -> str:
    if spec.loader == "python_package":
        try:
            version = metadata.version(spec.package)
        except metadata.PackageNotFoundError:
            version = "?"
        return f"{version}:{_stat_digest(iter_python_files(package_root(spec.package)))}"
    path = spec.resolved_path
    if path is None or not path.exists():
        return MISSING
    # Iterative walk (a 1,100-deep directory made rglob raise RecursionError on every sensor tick).
    files = list(walk_files(path)) if path.is_dir() else [path]
    return _stat_digest(files)
