"""On-demand retrieval and GraphRAG-style causal search, one dynamic partition per submitted query.

Submit a query with `causal-assets ask "..."`, by dropping a `.txt` file (first line = query; optional second line
`corpus: NAME`) into `data/queries/inbox/` (the `queries_inbox_sensor` picks it up), or from the UI: add a partition to `queries`
whose key is the question itself (or an id from `data/queries/`) and materialize it.
"""
import json
import os
import time
from pathlib import Path

import pandas as pd
from dagster import (AllPartitionMapping, AssetDep, AssetExecutionContext, Config, DefaultSensorStatus,
                     MetadataValue, Output, RunRequest, SensorEvaluationContext, SensorResult, asset, sensor)
from pydantic import Field

from causal_assets.core.foundation.limits import MAX_K, MAX_TOKENS
from causal_assets.core.outputs.checks import check_ranked_results
from causal_assets.core.foundation.errors import ConfigError
from causal_assets.core.index.dense import DEFAULT_MODEL, Embedder, EmbeddingCache
from causal_assets.core.index.provenance import FINGERPRINT, chunks_fingerprint, require_current
from causal_assets.core.index.search import CHUNKS, CorpusIndex
from causal_assets.core.stored import needs
from causal_assets.core.local_search import inbox
from causal_assets.core.local_search.context import GraphContextBuilder
from causal_assets.core.local_search.entity_vectors import embed_entities
from causal_assets.core.local_search.search import LocalSearch, save_outputs
from causal_assets.core.foundation.paths import display_path
from causal_assets.core.retrievers.factory import build_retriever
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.core.foundation.paths import QUESTION_CORPUS
from causal_assets.defs.checks import check_result, spec
from causal_assets.defs.partitions import query_partitions
from causal_assets.defs.shared import SEARCH_GROUP
from causal_assets.retries import LLM_RETRY, infrastructure_retries
from causal_assets.resources import ANN, LLM, SETTINGS, CorpusRegistry, Storage

GROUP = SEARCH_GROUP
# Submitted queries (and the inbox/ the sensor watches); $CAUSAL_ASSETS_QUERIES points a deployment or a test elsewhere.
QUERIES_DIR = SETTINGS.queries
# Where the inbox looks for a corpus's index and graph (the `storage` resource's default base).
BASE_PATH = SETTINGS.base_path


def _deps(*assets: str) -> list[AssetDep]:
    # A query may read any corpus partition: lineage to all of them.
    return [AssetDep(a, partition_mapping=AllPartitionMapping()) for a in assets]


class SearchConfig(Config):
    queries_dir: str = str(QUERIES_DIR)
    retriever: str = "hybrid"
    k: int = Field(default=10, ge=1, le=MAX_K)
    # fits SmolLM2's 4k context with room for the report
    network_max_tokens: int = Field(default=2000, ge=1, le=MAX_TOKENS)
    max_tokens: int = Field(default=256, ge=1, le=MAX_TOKENS)   # completion tokens per LLM stage
    n_ctx: int = Field(default=4096, ge=1, le=MAX_TOKENS)
    response_type: str = "Multiple Paragraphs"
    default_corpus: str = QUESTION_CORPUS  # for queries typed directly as partition keys in the UI


@asset(partitions_def=query_partitions, group_name=GROUP, kinds={"parquet"}, deps=_deps(CHUNKS, "sparse_postings", "corpus_embeddings"),
       check_specs=[spec("retrieval_results", "ranking_valid", "Finite scores, ranks 1..n, no chunk twice.",
                         blocking=False)])
def retrieval_results(context: AssetExecutionContext, config: SearchConfig, storage: Storage):
    """The configured retriever's top results for one submitted question (what `causal-assets ask` lists beside
    the answer)."""
    record = inbox.load(config.queries_dir, context.partition_key, config.default_corpus)
    index = CorpusIndex.load(storage.base, record["corpus"], ann_config=ANN)
    hits = build_retriever(config.retriever, index).retrieve_many([record["query"]], config.k)[0]
    frame = pd.DataFrame([{"query_id": record["query_id"], "query": record["query"], "corpus": record["corpus"],
                           "retriever": config.retriever, "rank": h.rank, "chunk_id": h.chunk_id, "score": h.score,
                           "title": h.title} for h in hits])
    table = "\n".join(f"{h.rank}. `{h.chunk_id}` {h.title} ({h.score:.3f})" for h in hits)
    yield Output(frame, metadata={"query": record["query"], "results": MetadataValue.md(table)})
    yield check_result("retrieval_results", "ranking_valid", check_ranked_results(frame, ["query_id"]))


# Retried only on an infrastructure failure (retries.py), which includes a local server that died.
@asset(partitions_def=query_partitions, group_name=GROUP, kinds={"openai", "parquet"}, pool="llm",
       retry_policy=LLM_RETRY,
       metadata={"duckdb_aliases": ["causal_search_runs"]},
       deps=_deps(CHUNKS, "graph_nodes", "graph_edges", "graph_entity_embeddings"))
@infrastructure_retries
def causal_search(context: AssetExecutionContext, config: SearchConfig, storage: Storage, llm: LLM) -> Output[pd.DataFrame]:
    """Answer a submitted question from the corpus graph: the entities nearest the question, their relationships,
    text units and communities (within a token budget) go to the LLM, which writes a causal analysis report and
    then the answer. With no evidence in the graph the LLM is not asked; the answer says so. The grounding
    check and the sources are stored with the answer."""
    record = inbox.load(config.queries_dir, context.partition_key, config.default_corpus)
    corpus = record["corpus"]
    nodes = read_parquet(asset_path(storage.base, "graph_nodes", corpus))
    edges = read_parquet(asset_path(storage.base, "graph_edges", corpus))
    chunks = read_parquet(asset_path(storage.base, CHUNKS, corpus))
    embedder = Embedder()
    t0 = time.perf_counter()
    vectors_path = asset_path(storage.base, "graph_entity_embeddings", corpus)
    parts = {"graph_nodes": nodes.get(FINGERPRINT), "graph_edges": edges.get(FINGERPRINT)}
    if vectors_path.exists():
        vectors = read_parquet(vectors_path)
        parts["graph_entity_embeddings"] = vectors.get(FINGERPRINT)
    # a graph of other chunks would answer with entities and ids of texts that are gone or changed
    require_current(corpus, chunks_fingerprint(chunks), parts)
    if not vectors_path.exists():  # built by the graph stage; an older graph without it is embedded here (resumable, with progress)
        context.log.warning(f"graph_entity_embeddings/{corpus} is missing: embedding the entity descriptions now")
        vectors, _ = embed_entities(nodes, embedder.encode, EmbeddingCache(storage.cache_dir("embeddings"), DEFAULT_MODEL),
                                    f"{corpus}_entities", emit=context.log.info)
    builder = GraphContextBuilder(nodes, edges, chunks, embed=embedder.encode, embed_query=embedder.encode_queries,
                                  entity_vectors=dict(zip(vectors["node_id"], vectors["embedding"])))
    search = LocalSearch(llm.client, builder, response_type=config.response_type, max_tokens=config.max_tokens,
                         n_ctx=config.n_ctx, network_max_tokens=config.network_max_tokens, corpus=corpus)
    result = search.search(record["query"])
    result.query_id = record["query_id"]  # the submitted id names the outputs and the partition
    paths = save_outputs(result, storage.reports_path / "causal_search")
    meta = result.metadata()
    seconds = round(time.perf_counter() - t0, 1)
    sources = result.sources()
    row = {"query_id": record["query_id"], "query": record["query"], "corpus": corpus, "response": result.response,
           "grounded": bool(result.grounding.get("grounded")), "grounding_note": result.grounding.get("note", ""),
           "sources": json.dumps([{"chunk_id": x["id"], "title": x["title"]} for x in sources], ensure_ascii=False),
           "report_path": str(paths["report"]), "network_data_path": str(paths["network_data"]),
           "seconds": seconds, **{f"n_{k}": v for k, v in meta["counts"].items()},
           **{f"{stage}_{k}": getattr(u, k) for stage, u in result.usage.items()
              for k in ("prompt_tokens_api", "completion_tokens_api", "latency_s")}}
    for stage in ("causal_discovery", "response_generation"):  # the same columns when the LLM was not asked
        for k in ("prompt_tokens_api", "completion_tokens_api", "latency_s"):
            row.setdefault(f"{stage}_{k}", None)
    return Output(pd.DataFrame([row]), metadata={
        "report": MetadataValue.md(Path(paths["report"]).read_text()), "seconds": seconds,
        "counts": MetadataValue.json(meta["counts"]), "report_path": MetadataValue.path(str(paths["report"])),
        "grounded": bool(result.grounding.get("grounded")), "sources": len(sources)})


def _known_corpora() -> list[str] | None:
    try:
        return CorpusRegistry().available()
    except Exception:  # a broken registry is reported by the corpus stages; the inbox only checks the name then
        return None


def _record_rejection(queries_dir: Path, name: str, reason: str, log) -> None:
    """Append one line to `<queries>/inbox_rejected.jsonl` (the inbox's error log beside the sensor's warnings)."""
    try:
        with open(queries_dir / "inbox_rejected.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"file": name, "reason": reason[:500], "time": time.time()}, ensure_ascii=False) + "\n")
    except OSError as e:  # the warning already logged names the file and the reason
        log.warning(f"{queries_dir / 'inbox_rejected.jsonl'}: cannot record the rejection of {name} ({e})")


def _settling(mtime: float, now: float) -> bool:
    """Modified in the last SETTLE_S seconds: maybe still being written, so left for a later tick. A write sets the
    mtime to the writer's clock, so a file dated further ahead (clock skew, an unpacked archive) is not being written
    here and now: it is read at once (with a warning) instead of waiting, unseen, until the clock catches up."""
    return abs(now - mtime) < inbox.SETTLE_S


def _not_built(corpus: str, known: list[str] | None) -> str | None:
    """Why a question for `corpus` could only fail (its index or graph missing), or None. Only a registered corpus
    is looked at: an unknown name is refused by `inbox.submit` with the list of corpora."""
    if known is None or corpus not in known:
        return None
    todo = needs.missing(BASE_PATH, corpus, needs.required(dense=True, graph=True))
    if todo:
        return (f"corpus {corpus!r} is not built ({needs.describe(BASE_PATH, corpus, todo)}): run "
                f"`causal-assets build {corpus}`")
    return None


@sensor(job_name="search_job", minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def queries_inbox_sensor(context: SensorEvaluationContext) -> SensorResult:
    """Each new `.txt` file in data/queries/inbox/ becomes a query partition and a search run.

    Only regular UTF-8 files of at most `inbox.MAX_INBOX_BYTES` are read (no symlink, FIFO, device, directory or
    hard link), for a built corpus; a file refused for what it is or holds is logged, recorded in
    `inbox_rejected.jsonl` and skipped, and the cursor advances past it, so one bad file never stops the files
    after it. A failure that is not the file's (its record cannot be written: disk full) leaves it for the next
    tick, and an inbox that cannot be listed keeps the cursor as it was."""
    inbox_dir = QUERIES_DIR / "inbox"
    seen = set(json.loads(context.cursor)) if context.cursor else set()
    try:
        entries = [e for e in os.scandir(inbox_dir) if e.name.endswith(".txt")]
    except OSError as e:
        # An empty listing would drop every marker, and the next tick would submit every old question again.
        if seen or not isinstance(e, FileNotFoundError):
            context.log.warning(f"{inbox_dir}: cannot list ({e}); the cursor is kept as it was")
        return SensorResult(run_requests=[], cursor=context.cursor)
    new_keys, requests, present = [], [], set()
    known = _known_corpora()
    now = time.time()
    for entry in sorted(entries, key=lambda e: e.name):
        name = display_path(entry.name)
        try:
            st = entry.stat(follow_symlinks=False)
            marker = f"{entry.name}:{st.st_mtime_ns}"
        except OSError:
            marker = f"{entry.name}:?"
            st = None
        if st is not None and _settling(st.st_mtime, now):
            continue   # maybe still being written: a later tick reads it whole (not marked as seen)
        present.add(marker)
        if marker in seen:
            continue
        if st is not None and st.st_mtime > now:
            context.log.warning(f"{inbox_dir / name}: modified in the future ({st.st_mtime - now:.0f} s ahead of "
                                "this clock); read now")
        read = False
        try:
            if st is None:
                raise ConfigError(f"{name}: vanished while listing")
            query, corpus = inbox.parse_inbox_text(inbox.read_inbox_file(entry.path))
            read = True
            if why := _not_built(corpus, known):
                raise ConfigError(why)
            qid = inbox.submit(QUERIES_DIR, query, corpus, known_corpora=known)
        except Exception as e:  # one bad file must not stop the inbox
            if read and isinstance(e, OSError):  # ours, not the file's (disk full): not marked as seen, so retried
                context.log.warning(f"{inbox_dir / name}: not submitted this tick: cannot check its corpus or write "
                                    f"its query record in {QUERIES_DIR} ({type(e).__name__}: {e}); a later tick "
                                    "tries again")
                continue
            seen.add(marker)
            reason = f"{type(e).__name__}: {e}"
            context.log.warning(f"{inbox_dir / name}: skipped ({reason[:300]})")
            _record_rejection(QUERIES_DIR, name, reason, context.log)
            continue
        seen.add(marker)
        new_keys.append(qid)
        requests.append(RunRequest(run_key=qid, partition_key=qid))
    # Only markers of files still in the inbox are kept, so the cursor does not grow forever.
    return SensorResult(run_requests=requests, cursor=json.dumps(sorted(seen & present)),
                        dynamic_partitions_requests=[query_partitions.build_add_request(new_keys)] if new_keys else [])
