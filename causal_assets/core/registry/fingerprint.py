"""Fingerprints of a corpus *source* (not its chunks): how the sensor and the commands notice that files changed.

Two levels, the cheap one first: `source_fingerprint` digests the files' paths, sizes and mtimes (and a Python
package's installed version), without reading a byte of them: what `corpus_change_sensor` compares every tick.
`content_fingerprint` digests the files' contents. `corpus_chunks` records both (`source_record`, in the column
`SOURCE_COLUMN`) from before it reads the source, and `source_change` compares a recorded state with the source now:
the stat digest first, the contents only when it differs, so a file touched but not changed (a checkout, `cp`
without `-p`) is no change, and a check of an unchanged source costs one walk of stat calls.
"""
from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from causal_assets.core.corpus.folder import walk_files
from causal_assets.core.corpus.python_package import iter_python_files, package_root
from causal_assets.core.registry.corpora import CorpusSpec

MISSING = "missing"  # the fingerprint of a source that does not exist
# The column of `corpus_chunks` that records the state of the source it was read from (`source_record`).
SOURCE_COLUMN = "source_fingerprint"
_BLOCK = 1 << 20


def source_files(spec: CorpusSpec) -> tuple[str, list[Path]] | None:
    """(a prefix for the digests, the source's files, sorted), or None when the source does not exist. A Python
    package's prefix is its installed version."""
    if spec.loader == "python_package":
        try:
            version = metadata.version(spec.package)
        except metadata.PackageNotFoundError:
            version = "?"
        return f"{version}:", list(iter_python_files(package_root(spec.package)))
    path = spec.resolved_path
    if path is None or not path.exists():
        return None
    # Iterative walk (a 1,100-deep directory made rglob raise RecursionError on every sensor tick).
    return "", list(walk_files(path)) if path.is_dir() else [path]


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


def _content_digest(files) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f}\n".encode("utf-8", "surrogateescape"))
        try:
            if not f.is_file():   # a FIFO would block the read, a device never end (the loaders skip them too)
                h.update(b"?special\n")
                continue
            file_hash = hashlib.sha256()
            with open(f, "rb") as fh:
                while block := fh.read(_BLOCK):
                    file_hash.update(block)
            h.update(file_hash.digest())
        except OSError:   # unreadable now: a state of its own
            h.update(b"?unreadable\n")
    return h.hexdigest()[:16]


def source_fingerprint(spec: CorpusSpec) -> str:
    """The cheap fingerprint (paths, sizes, mtimes; a package's version), or `MISSING`."""
    found = source_files(spec)
    if found is None:
        return MISSING
    prefix, files = found
    return f"{prefix}{_stat_digest(files)}"


def content_fingerprint(spec: CorpusSpec) -> str:
    """The fingerprint of the source's contents (every file read), or `MISSING`."""
    found = source_files(spec)
    if found is None:
        return MISSING
    prefix, files = found
    return f"{prefix}{_content_digest(files)}"


def source_record(spec: CorpusSpec) -> str:
    """The state of the source now, as `corpus_chunks` records it: JSON of its stat and content digests and its
    number of files."""
    found = source_files(spec)
    if found is None:
        return json.dumps({"stat": MISSING, "content": MISSING, "files": 0})
    prefix, files = found
    return json.dumps({"stat": f"{prefix}{_stat_digest(files)}", "content": f"{prefix}{_content_digest(files)}",
                       "files": len(files)})


def source_change(spec: CorpusSpec, recorded: str | None) -> str | None:
    """What changed in the source since the state `recorded` (a `source_record`), in words; None when nothing did,
    when nothing was recorded (chunks written before they recorded their source) or when the source is missing now
    (its chunks are all there is: building could only fail)."""
    try:
        then = json.loads(recorded) if recorded else None
    except ValueError:
        then = None
    if not isinstance(then, dict) or not {"stat", "content", "files"} <= set(then):
        return None
    found = source_files(spec)
    if found is None:
        return None
    prefix, files = found
    if f"{prefix}{_stat_digest(files)}" == then["stat"]:
        return None
    if f"{prefix}{_content_digest(files)}" == then["content"]:
        return None   # touched, not changed
    where = spec.package if spec.loader == "python_package" else str(spec.resolved_path)
    counts = (f"{then['files']} file(s) then, {len(files)} now" if then["files"] != len(files)
              else f"{len(files)} file(s), contents changed")
    return f"its source {where} changed since its chunks were built ({counts})"
