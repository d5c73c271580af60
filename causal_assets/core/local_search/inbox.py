"""Submitted queries: one small JSON record per query, named by its id (first 8 hex of the query hash + "_" +
unix time + "_" + 6 random hex; the record file is created exclusively, so two submissions never share an id).
The CLI, the UI flow and the inbox sensor all go through here, so the Dagster partition key is the id and the
text lives in one place.

The inbox (`read_inbox_file`): only regular files (no symlink, FIFO, device, directory, hard link), at most
`MAX_INBOX_BYTES`, checked before reading and opened without following links or blocking."""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Iterable

from causal_assets.core.foundation.errors import ConfigError, naming_file
from causal_assets.core.foundation.limits import MAX_QUERY_CHARS
from causal_assets.core.foundation.paths import QUESTION_CORPUS, display_path

# An inbox file holds a question and an optional `corpus:` line: 16 KiB is far more than that needs.
MAX_INBOX_BYTES = 16 * 1024
# A file modified this recently may still be being written (an editor, a copy, `cat > q.txt`): the sensor leaves
# it for a later tick instead of submitting its first half.
SETTLE_S = 2.0
_CORPUS_NAME = re.compile(r"^[a-z0-9_]{1,64}$")


def query_id(query: str, now: float | None = None) -> str:
    """First 8 hex of sha256(query) + "_" + unix time, e.g. "6c867dce_1755478569" (`submit` adds a random suffix)."""
    now = time.time() if now is None else now
    return f"{hashlib.sha256(query.encode('utf-8')).hexdigest()[:8]}_{int(now)}"


def check_corpus(corpus: str, known: Iterable[str] | None = None) -> str:
    """The corpus name, or a ConfigError before anything is recorded (no record, partition or run for it)."""
    if not isinstance(corpus, str) or not _CORPUS_NAME.match(corpus):
        raise ConfigError(f"invalid corpus name {str(corpus)[:80]!r} (lowercase letters, digits and _ only)")
    if known is not None:
        known = sorted(known)
        if corpus not in known:
            raise ConfigError(f"unknown corpus {corpus!r}; corpora: {', '.join(known)}")
    return corpus


def submit(queries_dir: str | os.PathLike, query: str, corpus: str, now: float | None = None, *,
           known_corpora: Iterable[str] | None = None) -> str:
    """Record a query; returns its id. The id is unique: two submissions of the same text in the same second get
    different ids (random suffix; the record is hard-linked into place, which fails if the id exists)."""
    query = " ".join(query.split())
    if not query:
        raise ConfigError("query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    check_corpus(corpus, known_corpora)
    base = query_id(query, now if now is not None else time.time())
    Path(queries_dir).mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        qid = f"{base}_{secrets.token_hex(3)}"
        path = Path(queries_dir) / f"{qid}.json"
        tmp = path.with_name(f".{qid}.{os.getpid()}.tmp")
        try:  # a failed write (disk full) leaves no temporary file either, and names the record
            with naming_file(path):
                tmp.write_text(json.dumps({"query_id": qid, "query": query, "corpus": corpus}, ensure_ascii=False))
            os.link(tmp, path)  # atomic and exclusive: fails if the id exists, never shows a half-written record
        except FileExistsError:
            continue
        finally:
            tmp.unlink(missing_ok=True)
        return qid
    raise ConfigError(f"{queries_dir}: could not allocate a unique query id")  # pragma: no cover


def read_inbox_file(path: str | os.PathLike, max_bytes: int = MAX_INBOX_BYTES) -> str:
    """The text of one inbox file, or a ConfigError saying why it is refused. Never blocks (FIFOs, devices),
    never follows a symlink, never reads more than `max_bytes` + 1 bytes."""
    path = Path(path)
    name = display_path(path.name)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = ("symlink" if stat.S_ISLNK(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode)
                else "FIFO" if stat.S_ISFIFO(st.st_mode) else "special file")
        raise ConfigError(f"{name}: not a regular file ({kind})")
    if st.st_nlink > 1:
        raise ConfigError(f"{name}: has {st.st_nlink} hard links (only plain files are accepted)")
    if st.st_size > max_bytes:
        raise ConfigError(f"{name}: {st.st_size} bytes; the limit is {max_bytes}")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            raise ConfigError(f"{name}: replaced while being read")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ConfigError(f"{name}: more than {max_bytes} bytes")
    if b"\x00" in data:
        raise ConfigError(f"{name}: contains a NUL byte (not a text file)")
    try:  # a BOM (Windows editors) is not part of the question; other bytes are not guessed at
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{name}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})") from None


# Lines of an inbox file end at \n, \r\n or \r only: str.splitlines also cuts at a form feed, U+2028, U+0085 and
# the other separators, which inside a question are whitespace (`submit` turns them into spaces).
_LINE_END = re.compile(r"\r\n|\r|\n")
# `corpus: NAME`: the key (any case), a colon, one token. A line "Corpus: what does ... mean?" is question text.
_CORPUS_LINE = re.compile(r"^\s*corpus\s*:\s*(\S*)\s*$", re.IGNORECASE)


def parse_inbox_text(text: str, default_corpus: str = QUESTION_CORPUS) -> tuple[str, str]:
    """(query, corpus) of an inbox file: the question is the first line that is neither blank nor a `corpus: NAME`
    line, and the corpus is named by a `corpus: NAME` line anywhere in the file (before the question too), else
    `default_corpus`. Two `corpus:` lines naming different corpora are refused: which one was meant is a guess."""
    query, named = "", []
    for line in _LINE_END.split(text):
        directive = _CORPUS_LINE.match(line)
        if directive:
            named.append(directive.group(1))
        elif not query and line.strip():
            query = " ".join(line.split())   # a form feed, U+2028, a tab: a space, as `submit` records it
    if len(set(named)) > 1:
        raise ConfigError(f"{len(named)} corpus: lines naming different corpora ({', '.join(map(repr, named))})")
    return query, named[0] if named else default_corpus


ID_PATTERN = re.compile(r"^[0-9a-f]{8}_\d+(?:_[0-9a-f]{6})?$")


# A question typed as a partition key is also the name of the asset's Parquet file (and file names are at most 255
# bytes), so it is held to a shorter limit than submitted queries.
MAX_KEY_BYTES = 200


def check_typed_key(key: str) -> str:
    """The partition key as a usable question, or a ConfigError that says why not and what to do instead."""
    query = " ".join(key.split())
    if not query:
        raise ConfigError("partition key is not a usable query (empty after trimming whitespace)")
    if any(c in key for c in "/\\\0") or key.startswith("."):
        raise ConfigError(f"partition key {key[:80]!r} contains '/', '\\', NUL or starts with '.': it would be used "
                          "as a file name; submit this question with `causal-assets ask` or the inbox instead")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ConfigError(f"partition key is {len(key.encode('utf-8'))} bytes in UTF-8; a question typed as a "
                          f"partition key is also a file name, so the limit is {MAX_KEY_BYTES} bytes: submit longer "
                          "questions with `causal-assets ask` or the inbox")
    return query


def load(queries_dir: str | os.PathLike, key: str, default_corpus: str | None = None) -> dict:
    """The record of a submitted query id. A key that is not an id is the query itself (typed as a new partition
    in the UI): it is adopted as a record with `default_corpus`, keeping the key as its id."""
    if ID_PATTERN.match(key):
        path = Path(queries_dir) / f"{key}.json"
        if path.is_file():
            return json.loads(path.read_text())
        raise ConfigError(f"{path}: no submitted query with id {key!r}")
    if default_corpus is None:
        raise ConfigError(f"{Path(queries_dir) / key}.json: no submitted query with id {key!r}")
    query = check_typed_key(key)
    path = Path(queries_dir) / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    record = {"query_id": query_id(query, time.time()), "query": query, "corpus": default_corpus, "partition_key": key}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with naming_file(path):
            tmp.write_text(json.dumps(record, ensure_ascii=False))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return record
