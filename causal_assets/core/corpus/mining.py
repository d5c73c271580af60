"""Questions mined from an installed package's API: the `default` benchmark, whether a retriever finds the code that
answers "which function does X" (API understanding).

Each public function or class whose docstring summary is a usable sentence becomes a question
("Which function in networkx computes shortest paths in the graph?") whose gold answer is its FQN.
Leakage guard: the corpus is loaded with `mask_summaries`, so the summary sentence is not in any chunk
text; the question can only be answered from the code, signature and the rest of the docstring.
Validation is by FQN match, accepting the public re-exports (`networkx.shortest_path`).
"""
from __future__ import annotations

import doctest
import hashlib
import importlib
import inspect
import json
import re
from dataclasses import dataclass, field

import pandas as pd

MIN_WORDS, MAX_WORDS = 4, 25
# Summaries that say nothing about behaviour make unanswerable questions.
SKIP = re.compile(r"^(deprecated|alias|see |todo|note|this is|helper|private|internal|wrapper|backward)", re.I)
IRREGULAR = {"do": "does", "go": "goes", "be": "is", "have": "has"}


@dataclass(frozen=True)
class MinedQuestion:
    query_id: str
    question: str
    gold_fqn: str
    target_chunk_id: str
    kind: str
    summary: str
    aliases: tuple[str, ...] = field(default_factory=tuple)


def third_person(verb: str) -> str:
    v = verb.lower()
    if v in IRREGULAR:
        return IRREGULAR[v]
    if v.endswith("s") and not v.endswith("ss"):
        return v  # already "Returns", "Computes"
    if re.search(r"(s|sh|ch|x|z|o)$", v):
        return v + "es"
    if re.search(r"[^aeiou]y$", v):
        return v[:-1] + "ies"
    return v + "s"


def question_for(summary: str, kind: str, package: str) -> str | None:
    words = summary.rstrip(".").split()
    if not (MIN_WORDS <= len(words) <= MAX_WORDS) or SKIP.match(summary) or not words[0].isalpha():
        return None
    first = words[0]
    if kind == "class":
        # Class summaries are noun phrases ("Exception raised by ...", "Base class for ...").
        return f"Which class in {package} is described as: {first.lower()} {' '.join(words[1:])}?"
    # Docstring summaries are imperative ("Compute ...") or third person ("Returns ..."): both read as a verb.
    if not first[0].isupper() or first.lower() in ("a", "an", "the", "if", "for", "this", "given"):
        return None
    return f"Which function in {package} {third_person(first)} {' '.join(words[1:])}?"


def public_aliases(package: str) -> dict[str, list[str]]:
    """FQN -> public names it is re-exported as at the package top level (e.g. networkx.shortest_path)."""
    try:
        top = importlib.import_module(package)
    except Exception:  # an uninstallable import leaves FQN matching without aliases
        return {}
    out: dict[str, list[str]] = {}
    for name in dir(top):
        obj = getattr(top, name, None)
        # networkx wraps functions in dispatch objects that keep the original's module and name.
        module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        if module and qual and module.startswith(package) and not name.startswith("_"):
            out.setdefault(f"{module}.{qual}", []).append(f"{package}.{name}")
    return out


def mine_questions(chunks: pd.DataFrame, package: str, max_questions: int | None = None) -> list[MinedQuestion]:
    """Deterministic: candidates ordered by a hash of their FQN, so a prefix of the list is a stable sample."""
    aliases = public_aliases(package)
    seen_questions: set[str] = set()
    out = []
    rows = chunks[chunks["kind"].isin(["function", "class"])]
    for row in rows.itertuples(index=False):
        meta = json.loads(row.metadata)
        fqn = meta.get("fqn", row.chunk_id)
        if any(part.startswith("_") for part in fqn.split(".")) or "#" in row.chunk_id:
            continue
        q = question_for(meta.get("summary", ""), row.kind, package)
        if not q or q in seen_questions:  # two targets with one summary: ambiguous, keep neither twice
            continue
        seen_questions.add(q)
        qid = "api:" + hashlib.sha256(fqn.encode()).hexdigest()[:10]
        out.append(MinedQuestion(qid, q, fqn, row.chunk_id, row.kind, meta["summary"], tuple(aliases.get(fqn, []))))
    out.sort(key=lambda m: m.query_id)
    return out[:max_questions] if max_questions else out


# --------------------------------------------------------------------------------------------- code examples
@dataclass(frozen=True)
class MinedExample:
    """A code question mined from a docstring example: the solver writes the call, the example checks it."""
    query_id: str
    question: str
    gold: str                 # JSON: {"imports", "setup": [...], "call", "want", "print"} (the validator's spec)
    gold_fqn: str
    target_chunk_id: str


_UNSTABLE_WANT = re.compile(r"<[^>]*\bat 0x|0x[0-9a-f]{6,}|\.\.\.|Traceback", re.I)


def _resolve(fqn: str):
    module, _, name = fqn.rpartition(".")
    obj = importlib.import_module(module)
    return getattr(obj, name)


def example_for(fqn: str, public: str, package: str, alias: str) -> dict | None:
    """The first docstring example of `fqn` that calls it as `<alias>.<public name>(...)` (optionally inside
    print), with a short, stable expected output and only output-free one-line statements before it."""
    try:
        doc = inspect.getdoc(_resolve(fqn)) or ""
        examples = doctest.DocTestParser().get_examples(doc)
    except Exception:  # an object that cannot be imported or a docstring doctest cannot parse: no example
        return None
    name = public.rsplit(".", 1)[-1]
    call_re = re.compile(rf"^(print\()?{re.escape(alias)}\.{re.escape(name)}\(")
    setup: list[str] = []
    for ex in examples:
        src = ex.source.strip()
        if "\n" in src or ex.exc_msg is not None:
            return None
        if call_re.match(src) and ex.want.strip():
            want = ex.want
            if len(want) > 200 or "\n" in want.strip() or _UNSTABLE_WANT.search(want):
                return None
            is_print = src.startswith("print(")
            call = src[len("print("):-1] if is_print and src.endswith(")") else src
            return {"imports": f"import {package} as {alias}", "setup": setup, "call": call, "want": want,
                    "print": is_print}
        if ex.want.strip() or f"{alias}.{name}(" in src:
            return None  # setup must not print, nor already contain the answer
        setup.append(src)
        if len(setup) > 4:
            return None
    return None


def mine_examples(chunks: pd.DataFrame, package: str, max_questions: int | None = None,
                  alias: str = "nx") -> list[MinedExample]:
    """Code questions from the docstring examples of `package`'s public functions, deterministic order (hash)."""
    aliases = public_aliases(package)
    out = []
    for row in chunks[chunks["kind"] == "function"].itertuples(index=False):
        meta = json.loads(row.metadata)
        fqn = meta.get("fqn", row.chunk_id)
        public = next(iter(aliases.get(fqn, [])), None)
        if public is None or any(p.startswith("_") for p in fqn.split(".")) or "#" in row.chunk_id:
            continue
        spec = example_for(fqn, public, package, alias)
        if spec is None:
            continue
        summary = meta.get("summary", "").rstrip(".")
        setup = "\n".join(f"    {s}" for s in spec["setup"]) or "    (nothing)"
        question = (f"Using {package} imported as {alias}, after running:\n{setup}\nwrite one Python expression "
                    f"that calls {package} to {summary[:1].lower() + summary[1:] if summary else 'do this'}.")
        qid = "ex:" + hashlib.sha256(fqn.encode()).hexdigest()[:10]
        out.append(MinedExample(qid, question, json.dumps(spec, sort_keys=True), fqn, row.chunk_id))
    out.sort(key=lambda m: m.query_id)
    return out[:max_questions] if max_questions else out
