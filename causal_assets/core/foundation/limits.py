"""The upper bounds of every text, count and size the user gives: queries, questions, registries, run config.

Each is generous but finite: a value past it is a typo or an attack. Without a bound a 5 MB question was sent to the
solver 132 times. Refused when the file, the registry or the command line is read, before any LLM call; the table is
docs/configuration.md ("Bounds").
"""
from __future__ import annotations

# Text: a query of `search` / `ask` and a question of a questions file (each goes into every prompt about it), and
# an accepted answer (scored in every trial of its question).
MAX_QUERY_CHARS = 2_000
MAX_ANSWER_CHARS = 2_000
