"""A questions file's gold, at the grain it can be judged: document ids, the passage that answers, or whole files.

A gold entry is a document id of the corpus, or (folder and package corpora) a file path relative to the corpus's
root. A file is not a passage: a 100-chunk manual page holds the answer in one or two of its chunks. So

* with `evidence` for a gold file (the verbatim passage of it that answers), the gold documents are the chunks that
  hold the passage: any 80-character window of it, whitespace collapsed and case ignored, so the truth does not
  depend on how the corpus is chunked;
* without it, a file of one chunk is that chunk, and a longer one makes the question judged **at file level**: its
  truth is the files, and a ranking or a set of labels is scored by each file's best chunk (`collapse_to_files`).
  No chunk counts as relevant merely for being in a gold file.

In both cases the gold files also tell the candidate pools where to look (`labeling.pools`): their chunks ranked by
the question and its answer, never by the evidence, so the labels are made the same way with or without it.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

import pandas as pd

from causal_assets.core.foundation.errors import CorpusError

WINDOW, STEP = 80, 20   # evidence matching: windows of this many characters, every STEP characters
FILE_LOADERS = ("folder", "python_package")


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip().lower()


def windows(passage: str) -> list[str]:
    """The windows of a normalized passage that a chunk must hold one of to hold the passage."""
    if len(passage) <= WINDOW:
        return [passage]
    return [passage[i:i + WINDOW] for i in range(0, len(passage) - WINDOW + 1, STEP)]


def holds(text: str, passage_windows: list[str]) -> bool:
    t = normalized(text)
    return any(w in t for w in passage_windows)


@dataclass(frozen=True)
class QuestionGold:
    """One question's truth: `qrels` keyed by chunk id, or by file when `file_level`; `files`: its gold files."""

    qrels: dict[str, float]
    files: tuple[str, ...] = ()
    file_level: bool = False


def file_key(entry: str) -> str:
    return str(PurePosixPath(entry.replace("\\", "/").removeprefix("./")))


class GoldResolver:
    """Resolves gold entries against one corpus's chunk table (`chunk_id`, `path`, `text`)."""

    def __init__(self, chunks: pd.DataFrame, corpus_name: str, loader: str):
        self.corpus, self.ids = corpus_name, set(chunks["chunk_id"])
        self.by_path: dict[str, list[str]] = {}
        self.file_of: dict[str, str] = {}
        if loader in FILE_LOADERS and "path" in chunks:
            for chunk_id, path in zip(chunks["chunk_id"], chunks["path"]):
                key = file_key(str(path))
                self.by_path.setdefault(key, []).append(chunk_id)
                self.file_of[chunk_id] = key
        self.text = dict(zip(chunks["chunk_id"], chunks["text"].astype(str))) if "text" in chunks else {}
        # a package's files also by their path inside its folder (`classes/graph.py` for `networkx/classes/...`)
        self.inside: dict[str, str] = {}
        if loader == "python_package":
            for path in self.by_path:
                parts = PurePosixPath(path).parts
                if len(parts) > 1:
                    self.inside.setdefault(str(PurePosixPath(*parts[1:])), path)

    def entry(self, entry: str, where: str) -> tuple[str, str, list[str]]:
        """("id", the id, [chunk]) or ("file", its path as the chunks record it, [its chunks]) for one gold entry:
        a document id, or a file path relative to a folder corpus's root; for a package, the path its chunks record
        (`networkx/classes/graph.py`: the package's folder first) or the path inside the package
        (`classes/graph.py`). Else one error naming the line, the entry and the closest names."""
        if entry in self.ids:
            return "id", entry, [entry]
        key = file_key(entry)
        key = key if key in self.by_path else self.inside.get(key, key)
        if key in self.by_path:
            return "file", key, self.by_path[key]
        names = list(self.by_path) if self.by_path else sorted(self.ids)
        close = difflib.get_close_matches(key, names, n=3)
        kind = "a document id or a file" if self.by_path else "a document id"
        raise CorpusError(f"{where}: gold {entry!r} is not {kind} of corpus {self.corpus!r}"
                          + (f" (closest: {', '.join(repr(c) for c in close)})" if close else ""))

    def resolve(self, entries: tuple[str, ...], where: str, evidence: dict[str, str] | None = None) -> QuestionGold:
        """A question's gold (module docstring). `evidence`: {gold entry: passage}; a passage that no chunk of its
        file holds stops with one error naming the line and the file."""
        evidence = evidence or {}
        ids: dict[str, float] = {}
        files: list[str] = []
        unmatched = False
        for entry in entries:
            kind, key, chunk_ids = self.entry(entry, where)
            if kind == "id":
                ids[entry] = 1.0
                continue
            files.append(key)
            passage = evidence.get(entry)
            if passage is None and len(chunk_ids) == 1:   # a file of one chunk is that chunk
                ids[chunk_ids[0]] = 1.0
                continue
            if passage is None:
                unmatched = True
                continue
            wins = windows(normalized(passage))
            found = [c for c in chunk_ids if holds(self.text.get(c, ""), wins)]
            if not found:
                raise CorpusError(f"{where}: evidence for {entry!r} is not in that file (no chunk of it holds "
                                  f"{passage[:60]!r}...; evidence is a verbatim passage of the gold file)")
            ids.update({c: 1.0 for c in found})
        if unmatched:   # some file without its passage: the whole question is judged at file level
            qrels = {self.file_of.get(c, c): 1.0 for c in ids} | {f: 1.0 for f in files}
            return QuestionGold(qrels, tuple(dict.fromkeys(files)), True)
        return QuestionGold(ids, tuple(dict.fromkeys(files)), False)


def collapse_to_files(ranking: dict[str, float], file_of: dict[str, str]) -> dict[str, float]:
    """A ranking of chunks {chunk: score} as a ranking of their files, each file at its best chunk's score."""
    out: dict[str, float] = {}
    for chunk, score in ranking.items():
        unit = file_of.get(chunk, chunk)
        if unit not in out or score > out[unit]:
            out[unit] = score
    return out
