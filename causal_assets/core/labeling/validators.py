"""Answer validators: score a blind solver's answer against the ground truth.

Every validator is ``validator(prediction, gold, **kw) -> Validation``; ``gold`` is a string or a sequence of
acceptable strings (the best-scoring one is reported). Text answers: :func:`exact_match` and :func:`token_f1`
reproduce HotpotQA's official normalisation; :func:`answer_containment` accepts the gold as a run of whole tokens
inside a sentence, because small LLMs answer in sentences; :func:`answer_f1` passes on F1 >= ``threshold`` or
containment. Code symbols: :func:`fqn_match` accepts the gold FQN, an alias, or an unambiguous suffix of one.
Code answers: :func:`code_example` runs the call the answer writes in the bubblewrap sandbox. The rules are in
docs/pipeline.md ("Candidate pools and Monte Carlo labels").
"""
from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from causal_assets.core.foundation.errors import CausalAssetsError, ConfigError
from causal_assets.core.sandbox.bubblewrap import check_examples
from causal_assets.core.text.answers import f1_precision_recall, normalize_answer

__all__ = [
    "Validation",
    "exact_match",
    "token_f1",
    "answer_containment",
    "contains_answer",
    "answer_f1",
    "fqn_match",
    "code_example",
    "extract_expression",
    "SandboxError",
    "VALIDATORS",
    "validate",
    "UnknownValidatorError",
]


class UnknownValidatorError(ConfigError, ValueError):
    """A validator name that is not in :data:`VALIDATORS`."""


class SandboxError(CausalAssetsError):
    """The code sandbox could not grade an answer (bubblewrap missing, grader failure): an infrastructure error,
    never a failed trial."""


@dataclass(frozen=True)
class Validation:
    passed: bool
    score: float
    detail: str


Gold = str | Sequence[str]


def _golds(gold: Gold) -> list[str]:
    if isinstance(gold, str):
        return [gold]
    golds = [g for g in gold if isinstance(g, str)]
    if not golds:
        raise ValueError(f"gold must be a string or a non-empty sequence of strings, got {gold!r}")
    return golds


def _best(results: Iterable[Validation]) -> Validation:
    return max(results, key=lambda v: (v.passed, v.score))


# --------------------------------------------------------------------------------------------------- HotpotQA

def exact_match(prediction: str, gold: Gold) -> Validation:
    def one(g: str) -> Validation:
        ok = normalize_answer(prediction) == normalize_answer(g)
        return Validation(ok, float(ok), f"exact match {'with' if ok else 'failed against'} {g!r}")

    return _best(one(g) for g in _golds(gold))


def token_f1(prediction: str, gold: Gold, threshold: float = 0.5) -> Validation:
    """Official HotpotQA token F1 (score); passes when F1 >= ``threshold``."""

    def one(g: str) -> Validation:
        f1, p, r = f1_precision_recall(prediction, g)
        return Validation(f1 >= threshold and f1 > 0, f1, f"token F1={f1:.3f} (P={p:.3f}, R={r:.3f}) vs {g!r}")

    return _best(one(g) for g in _golds(gold))


def _contains(hay: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def contains_answer(text: str, gold: Gold) -> bool:
    """A passage contains some accepted answer as whole normalised tokens (the "contains the answer string"
    relevance heuristic that labels are compared against; yes/no answers never count as contained)."""
    hay = normalize_answer(text).split()
    return any(_contains(hay, normalize_answer(g).split()) for g in _golds(gold)
               if normalize_answer(g) not in ("yes", "no"))


def answer_containment(prediction: str, gold: Gold) -> Validation:
    """Normalised gold occurs in the normalised prediction as a contiguous run of whole tokens."""

    def one(g: str) -> Validation:
        pred = normalize_answer(prediction).split()
        norm_gold = normalize_answer(g)
        gold_tokens = norm_gold.split()
        if not gold_tokens:
            return Validation(False, 0.0, f"gold {g!r} is empty after normalisation")
        if norm_gold in ("yes", "no"):
            other = "no" if norm_gold == "yes" else "yes"
            ok = bool(pred) and (pred[0] == norm_gold or (norm_gold in pred and other not in pred))
            return Validation(ok, float(ok), f"yes/no answer {'matches' if ok else 'does not match'} {norm_gold!r}")
        ok = _contains(pred, gold_tokens)
        return Validation(ok, float(ok), f"gold {norm_gold!r} {'found' if ok else 'not found'} as whole tokens")

    return _best(one(g) for g in _golds(gold))


def answer_f1(prediction: str, gold: Gold, threshold: float = 0.5) -> Validation:
    """Passes when token F1 >= ``threshold`` or the gold is contained; ``score`` is the official F1."""

    def one(g: str) -> Validation:
        f1 = token_f1(prediction, g, threshold=threshold)
        contained = answer_containment(prediction, g)
        if f1.passed:
            return Validation(True, f1.score, f"{f1.detail} >= {threshold}")
        if contained.passed:
            return Validation(True, f1.score, f"{f1.detail} < {threshold} but containment: {contained.detail}")
        return Validation(False, f1.score, f"{f1.detail} < {threshold} and {contained.detail}")

    return _best(one(g) for g in _golds(gold))


# -------------------------------------------------------------------------------------------------- FQN match
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"(?<![A-Za-z0-9_.]){_IDENT}(?:\.{_IDENT})*")
_FROM_IMPORT = re.compile(
    rf"\bfrom\s+({_IDENT}(?:\.{_IDENT})*)\s+import\s+\(?\s*((?:{_IDENT}(?:\s+as\s+{_IDENT})?\s*,?\s*)+)"
)
_CODE_SPAN = re.compile(r"```.*?```|`[^`\n]+`", re.S)


@dataclass(frozen=True)
class _Mention:
    name: str
    code_like: bool  # inside backticks/code block, or followed by "("


def _mentions(text: str) -> list[_Mention]:
    code_ranges = [m.span() for m in _CODE_SPAN.finditer(text)]

    def in_code(pos: int) -> bool:
        return any(a <= pos < b for a, b in code_ranges)

    out: list[_Mention] = []
    for m in _DOTTED.finditer(text):
        name = m.group(0)
        rest = text[m.end() :].lstrip(" ")
        out.append(_Mention(name, in_code(m.start()) or rest.startswith("(")))
    for m in _FROM_IMPORT.finditer(text):
        module = m.group(1)
        for item in m.group(2).split(","):
            item = item.strip().strip("()").strip()
            if item:
                out.append(_Mention(f"{module}.{item.split()[0]}", True))
    return out


def _is_suffix(short: Sequence[str], long: Sequence[str]) -> bool:
    return 0 < len(short) <= len(long) and tuple(long[-len(short) :]) == tuple(short)


def _identifier_shaped(name: str) -> bool:
    return "_" in name or any(c.isdigit() for c in name) or any(c.isupper() for c in name[1:])


def fqn_match(
    prediction: str,
    gold_fqn: str | Sequence[str],
    aliases: Iterable[str] = (),
    known_fqns: Iterable[str] = (),
) -> Validation:
    """Does the prediction name ``gold_fqn`` (or an alias)? See the module docstring for the exact rule."""
    golds = _golds(gold_fqn)
    targets = {t.strip().strip("`").strip() for t in [*golds, *aliases] if t and t.strip()}
    if not targets:
        raise ValueError("fqn_match needs a non-empty gold_fqn")
    target_parts = [tuple(t.split(".")) for t in targets]
    mentions = _mentions(prediction)
    names = {m.name for m in mentions}

    full = sorted(names & targets)
    if full:
        kind = "gold" if any(f in golds for f in full) else "alias"
        return Validation(True, 1.0, f"full {kind} name {full[0]!r} found")

    others = [tuple(k.split(".")) for k in known_fqns if k not in targets]
    mentioned_others = [tuple(n.split(".")) for n in names]
    ambiguous: list[str] = []
    for m in sorted(mentions, key=lambda m: (-m.name.count("."), m.name)):
        parts = tuple(m.name.split("."))
        if not any(_is_suffix(parts, t) for t in target_parts):
            continue
        reasons = []
        clash = [".".join(o) for o in others if _is_suffix(parts, o)]
        if clash:
            reasons.append(f"also a suffix of known {clash[0]!r}")
        longer = [
            ".".join(o)
            for o in mentioned_others
            if len(o) > len(parts) and _is_suffix(parts, o) and not any(_is_suffix(o, t) for t in target_parts)
        ]
        if longer:
            reasons.append(f"the answer also names {longer[0]!r}")
        if len(parts) == 1 and not (m.code_like or _identifier_shaped(m.name)):
            reasons.append("bare word not written as code")
        if not reasons:
            return Validation(True, 1.0, f"unambiguous suffix {m.name!r} of {sorted(targets)[0]!r}")
        ambiguous.append(f"{m.name!r} ({'; '.join(reasons)})")
    if ambiguous:
        return Validation(False, 0.0, "only ambiguous suffixes: " + ", ".join(dict.fromkeys(ambiguous)))
    return Validation(False, 0.0, f"no mention of {sorted(targets)}")


# --------------------------------------------------------------------------------------------------- code answers
_FENCE = re.compile(r"```(?:python|py)?\s*\n?(.*?)```", re.DOTALL)
_TICKS = re.compile(r"`([^`\n]+)`")
MAX_EXPRESSION_CHARS = 500


def extract_expression(prediction: str) -> str | None:
    """The one Python expression of an answer: a fenced block, else a backticked span, else the first non-empty
    line; a leading `>>> ` and a trailing `.` dropped. None unless it parses as a single expression (parsed
    here with `ast` only, never run)."""
    text = prediction or ""
    m = _FENCE.search(text)
    candidates = [m.group(1)] if m else []
    candidates += _TICKS.findall(text)
    candidates += [line for line in text.splitlines() if line.strip()][:1]
    for cand in candidates:
        lines = [l for l in cand.strip().splitlines() if l.strip()]
        if len(lines) != 1:
            continue
        expr = lines[0].strip()
        expr = expr[4:] if expr.startswith(">>> ") else expr
        expr = expr.rstrip().rstrip(".").rstrip() if not expr.endswith("..") else expr
        if not expr or len(expr) > MAX_EXPRESSION_CHARS:
            continue
        try:
            ast.parse(expr, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        return expr
    return None


@functools.lru_cache(maxsize=4096)
def _run_example(expr: str, gold: str, timeout_s: float) -> tuple[bool, str]:
    spec = json.loads(gold)
    call = expr
    if spec.get("print") and not expr.startswith("print("):
        call = f"print({expr})"
    examples = "".join(f">>> {s}\n" for s in spec.get("setup", [])) + f">>> {call}\n{spec['want']}"
    r = check_examples(spec.get("imports", "") + "\n", examples, timeout_s=timeout_s)
    if r.error is not None:
        raise SandboxError(f"code sandbox: {r.error}")
    if r.timed_out:
        return False, f"timed out after {timeout_s}s"
    return r.passed, "example passed" if r.passed else "example output differs"


def code_example(prediction: str, gold: Gold, timeout_s: float = 30.0, **_: object) -> Validation:
    """The `pytest` validator of code benchmarks: the answer's expression runs in the bubblewrap sandbox after the
    example's setup, and its output is compared with the example's expected output (doctest rules). `gold` is
    the JSON spec made by `mining.mine_examples`; the expected output never enters the sandbox's answer process."""
    expr = extract_expression(prediction)
    if expr is None:
        return Validation(False, 0.0, "no single Python expression in the answer")
    best = Validation(False, 0.0, "")
    for g in _golds(gold):
        passed, detail = _run_example(expr, g, float(timeout_s))
        if passed:
            return Validation(True, 1.0, f"{detail}: {expr}")
        best = Validation(False, 0.0, f"{detail}: {expr}")
    return best


# --------------------------------------------------------------------------------------------------- registry
VALIDATORS: dict[str, Callable[..., Validation]] = {
    "exact_match": exact_match,
    "token_f1": token_f1,
    "answer_containment": answer_containment,
    "answer_f1": answer_f1,
    "fqn_match": fqn_match,
    "pytest": code_example,   # registry name: answers graded by running them against examples in the sandbox
}


def validate(name: str, prediction: str, gold: Gold, **kw) -> Validation:
    """Run the validator registered under ``name``."""
    try:
        fn = VALIDATORS[name]
    except KeyError:
        raise UnknownValidatorError(f"unknown validator {name!r}; known validators: {', '.join(sorted(VALIDATORS))}") from None
    if prediction is None:
        prediction = ""
    return fn(prediction, gold, **kw)
