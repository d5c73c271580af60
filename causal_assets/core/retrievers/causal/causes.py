"""Cause findings: documented rules that read the evidence for a cause in code (the rule is described in the
causal retriever's module docstring, `retriever.py`). The retriever explains its ranking with them and the lexical
answer model gives the lines they flag a bonus."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from causal_assets.core.retrievers.causal.documents import ContextDoc


@dataclass(frozen=True)
class CauseFinding:
    kind: str              # e.g. "missing type conversion"
    chunk_id: str
    location: str          # path:line
    line: int
    code: str
    detail: str
    confidence: float


_STRING_DECL = [
    (re.compile(r"\b(\w+)\??\s*:\s*(?:[\w\[\]<> ]+\|\s*)*string\b"), "declared `{}` as string"),      # TS
    (re.compile(r"\b(\w+)\s*:\s*(?:Optional\[str\]|str\b)"), "annotated `{}` as str"),                 # Python
    (re.compile(r"\b(\w+)\s*=\s*[\w.\[\]'\"]*\.(?:value|textContent|innerText|dataset\.\w+)\b"),
     "assigned `{}` from a DOM text value"),
    (re.compile(r"\b(\w+)\s*=\s*(?:input|prompt)\("), "assigned `{}` from user input"),
]
_CONVERSIONS = re.compile(r"(?:parseFloat|parseInt|Number|float|int|Decimal|toNumber)\s*\(\s*$")
_OPERAND = r"((?:[A-Za-z_]\w*\.)*{name})\b(?!\s*\()"
_COMMENT = re.compile(r"^\s*(?://|#|\*|/\*)")


def _string_typed(docs: Sequence[ContextDoc]) -> dict[str, tuple[str, str]]:
    """name -> (how it is string-typed, chunk id declaring it)."""
    out: dict[str, tuple[str, str]] = {}
    for d in docs:
        for line in d.text.split("\n"):
            if _COMMENT.match(line):
                continue
            for rx, how in _STRING_DECL:
                for m in rx.finditer(line):
                    name = m.group(1)
                    if name not in out and not name[0].isdigit():
                        out[name] = (how.format(line.strip()[:80]) if "{}" in how else how, d.chunk_id)
    return out


def detect_causes(docs: Sequence[ContextDoc]) -> list[CauseFinding]:
    """Cause findings in `docs` (the rule is documented in the module docstring), in document/line order."""
    typed = _string_typed(docs)
    findings: list[CauseFinding] = []
    if not typed:
        return findings
    for d in docs:
        for i, line in enumerate(d.text.split("\n")):
            if _COMMENT.match(line) or not re.search(r"[*/%-]", line):
                continue
            for name, (how, decl) in typed.items():
                for m in re.finditer(_OPERAND.format(name=re.escape(name)), line):
                    before, after = line[:m.start()], line[m.end():]
                    if re.search(r"(?:\w+|\))\s*:\s*$", before) or re.match(r"\s*:", after):
                        continue  # a declaration, not a use
                    arith = re.match(r"\s*[*/%-](?![-=>])", after) or re.search(r"(?<![-=<])[*/%-]\s*$", before) \
                        or ((re.match(r"\s*\+", after) or re.search(r"\+\s*$", before)) and re.search(r"[*/%]", line))
                    if not arith or _CONVERSIONS.search(before):
                        continue
                    lineno = d.start_line + i if d.start_line else i + 1
                    operand = m.group(1)
                    findings.append(CauseFinding(
                        kind="missing type conversion", chunk_id=d.chunk_id,
                        location=f"{d.path or d.chunk_id}:{lineno}", line=lineno, code=line.strip(),
                        detail=(f"missing type conversion: `{operand}` is string-typed ({how} in {decl}) and is "
                                f"used in arithmetic without parseFloat/parseInt/Number conversion; string "
                                f"arithmetic yields NaN (or concatenates)"),
                        confidence=0.9))
                    break
    return findings
