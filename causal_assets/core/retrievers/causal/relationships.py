"""How a document relates to what a query names: the relationships a causal chain follows over the graph, how strongly
each transmits cause, which graph edges carry which, and a document's role for a name read from its text."""
from __future__ import annotations

import re
from typing import Literal

Relationship = Literal["answers", "defines", "implements", "calls", "modifies", "constrains", "contextualizes"]
RELATIONSHIPS = ("answers", "defines", "implements", "calls", "modifies", "constrains", "contextualizes")
# How strongly a relationship transmits cause. A call executes the callee, so it carries behaviour further than
# a definition or containment (a module "defines" all its functions); context is weakest.
RELATIONSHIP_PRIOR = {"answers": 1.0, "implements": 1.0, "calls": 0.9, "modifies": 0.85, "defines": 0.8,
                      "constrains": 0.75, "contextualizes": 0.5}
MAX_PATHS = 50         # hop-shortest paths compared per entry node
EDGE_RELATIONSHIPS = {"calls": "calls", "called_by": "calls", "defines": "defines", "defined_in": "defines",
                      "inherits": "implements", "inherited_by": "implements", "modifies": "modifies",
                      "assigns": "modifies", "writes": "modifies", "constrains": "constrains",
                      "validates": "constrains", "type_of": "constrains", "imports": "contextualizes",
                      "references": "contextualizes", "related": "contextualizes",
                      "title_mention": "contextualizes", "answers": "answers"}
SKIP_NODE_TYPES = frozenset({"community"})


def role_of(text: str, name: str) -> str:
    """What `text` does with `name`: implements | defines | modifies | calls | contextualizes."""
    n = re.escape(name)
    if re.search(rf"\b(?:def|function|func|fn|fun|sub)\s+{n}\s*[(<]|\b(?:const|let|var)\s+{n}\s*=\s*(?:async\s*)?"
                 rf"(?:\([^)]*\)|\w+)\s*=>|^\s*(?:public |private |static |async )*{n}\s*\([^)]*\)\s*(?::\s*[\w<>\[\]| ]+)?\s*\{{",
                 text, re.M):
        return "implements"
    if re.search(rf"\b(?:class|interface|type|struct|enum|trait)\s+{n}\b|\b(?:const|let|var)\s+{n}\b", text):
        return "defines"
    if re.search(rf"(?<![=!<>])\b{n}\s*(?:[-+*/]?=(?!=)|\.push\(|\[[^\]]*\]\s*=(?!=))", text):
        return "modifies"
    if re.search(rf"\b{n}\s*\(", text):
        return "calls"
    return "contextualizes"
