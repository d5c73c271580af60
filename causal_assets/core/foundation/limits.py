"""The upper bounds of every text, count and size the user gives: queries, questions, registries, run config.

Each is generous (tens to hundreds of times what a shipped benchmark uses) but finite: a value past it is a typo or
an attack. Without a bound a 5 MB question was sent to the solver 132 times, and a budget of 10**30 was announced
and then looped at full CPU. Refused when the file, the registry, the run config or the command line is read, before
any LLM call; the table is docs/configuration.md ("Bounds").
"""
from __future__ import annotations

# Text: a query of `search` / `ask` and a question of a questions file (each goes into every prompt about it), and
# an accepted answer (scored in every trial of its question).
MAX_QUERY_CHARS = 2_000
MAX_ANSWER_CHARS = 2_000

# Monte Carlo labelling (`monte_carlo:`, `pooling:` and their run config): solver calls per question (the shipped
# benchmarks use 16-24), documents in a question's pool (10), characters of a document shown to the solver (600),
# failed batches in a row before the step stops (3).
MAX_BUDGET = 10_000
MAX_POOL_SIZE = 1_000
MAX_DOC_CHARS = 100_000
MAX_CONSECUTIVE_ERRORS = 1_000

# Questions a stage reads of a split (`monte_carlo.max_questions`, `answers.max_questions`, tuning's `max_queries`):
# the largest shipped split has a few thousand.
MAX_QUESTIONS = 1_000_000

# Ranks: a cutoff k (`answers.ks`, `answer_k`, a search's `k`, a reranker's `depth`) and an evaluated ranking's
# depth (100).
MAX_K = 1_000
MAX_DEPTH = 10_000

# A retriever's params (`retrievers:`, `search --params`) beside its ranks: a weight that is not a share (a bonus, a
# reranker's mix; the shipped spaces go up to 3) and the hops of a graph walk (2-4).
MAX_WEIGHT = 1_000
MAX_HOPS = 100

# Folder corpora: characters per chunk (1,500; overlap below it) and bytes of a file read (2,000,000).
MAX_CHUNK_CHARS = 100_000
MAX_FILE_BYTES = 1_000_000_000

# Fits: repetitions (epochs, passes, folds, repeats, ensemble members), batch sizes, tokens (a model's context, a
# completion, a pair's length) and threads.
MAX_REPEATS = 1_000
MAX_BATCH = 100_000
MAX_TOKENS = 100_000
MAX_THREADS = 1_024
