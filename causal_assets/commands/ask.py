"""`causal-assets ask`: a question answered from a corpus graph by the local LLM, with its sources."""
from __future__ import annotations

import json
import time

from causal_assets.commands import say
from causal_assets.core.stored import needs
from causal_assets.commands.build import cli_instance, ensure_built, execute, failure_line, interrupt_on_sigterm
from causal_assets.commands.search import snippet
from causal_assets.core.registry.corpora import require_available
from causal_assets.core.local_search import inbox
from causal_assets.core.foundation.limits import MAX_QUERY_CHARS
from causal_assets.core.foundation.progress import duration
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.defs.partitions import query_partitions
from causal_assets.exit_codes import EXIT_POOL_BLOCKED
from causal_assets.run_health import LLM_POOL, blocked_message, wait_for_slot

SOURCES_SHOWN = 5


def ask(args) -> int:
    """Submit the question and run retrieval + causal search for it now, in this process (the runs show up in the
    UI when DAGSTER_HOME is the one `dagster dev` uses). The LLM step needs a slot of the `llm` pool: slots held by
    dead runs are freed, and the wait for a slot is bounded by --wait (exit 3 with the holders named)."""
    interrupt_on_sigterm()
    # Refused before anything exists: no record, no partition, no run for a bad corpus or query.
    require_available(inbox.check_corpus(args.corpus), args.settings.corpora, args.settings.shared_data)
    if not " ".join(args.query.split()):
        raise ValueError("query is empty")
    if len(args.query) > MAX_QUERY_CHARS:
        raise ValueError(f"query is {len(args.query)} characters; the limit is {MAX_QUERY_CHARS}")
    if args.wait < 0:
        raise ValueError(f"--wait must be at least 0 seconds (got {args.wait})")

    t_start = time.monotonic()
    instance = cli_instance()
    t0 = time.monotonic()
    free, holders = wait_for_slot(instance, LLM_POOL, args.wait, on_wait=lambda h: say(
        f"waiting up to {args.wait:.0f}s for a free {LLM_POOL!r} slot (held by {', '.join(x.describe() for x in h)})"))
    if not free:
        say(blocked_message(LLM_POOL, holders, time.monotonic() - t0))
        return EXIT_POOL_BLOCKED
    ensure_built(args.base_path, args.corpus, needs.required(dense=True, entity_vectors=True), args.no_build,
                 why="ask", verbose=args.verbose)
    qid = inbox.submit(args.settings.queries, args.query, args.corpus)
    instance.add_dynamic_partitions(query_partitions.name, [qid])
    llm = f"the LLM at {args.settings.llm_base_url}" if args.settings.llm_base_url else "the local LLM"
    say(f"answering from corpus {args.corpus!r} with {llm} (question {qid})")
    result = execute("search_job", qid, args.base_path, verbose=args.verbose, pool=LLM_POOL,
                     pool_wait_s=max(args.wait - (time.monotonic() - t0), 0.0))
    if not result.success:
        say(f"answering failed: {failure_line(result)} (run {result.run_id}; `--verbose` shows the log)")
        return 1
    row = read_parquet(asset_path(args.base_path, "causal_search", qid)).iloc[0]
    print(row["response"])
    note = row.get("grounding_note") or ""
    if note.startswith("not checked"):
        print(f"\n[grounding {note}]")
    elif note and note != "no evidence retrieved":  # (with no evidence the answer itself says so)
        print(f"\n[ungrounded: {note}]")
    sources = json.loads(row.get("sources") or "[]")
    texts = {}
    chunks_path = asset_path(args.base_path, "corpus_chunks", args.corpus)
    if sources:
        chunks = read_parquet(chunks_path, columns=["chunk_id", "title", "text"])
        texts = dict(zip(chunks["chunk_id"], zip(chunks["title"], chunks["text"])))
        # the text units and the code symbols among the entities (the report counts them apart)
        print(f"\nSources (corpus {args.corpus!r}, {len(sources)} chunks shown to the model):")
        for i, s in enumerate(sources[:SOURCES_SHOWN], 1):
            title, text = texts.get(s["chunk_id"], (s.get("title", ""), ""))
            named = f"{title}: " if title and title not in s["chunk_id"] else ""
            print(f"  {i}. {s['chunk_id']}  {named}{snippet(text, s['chunk_id'], title, 90)}")
        if len(sources) > SOURCES_SHOWN:
            print(f"  ... and {len(sources) - SOURCES_SHOWN} more in the report")
    else:
        print(f"\nSources: none (no evidence in corpus {args.corpus!r})")
    print(f"\nquestion id {qid}; report: {row['report_path']} ({duration(time.monotonic() - t_start)})")
    return 0
