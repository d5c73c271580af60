"""The entity graph of a text corpus (GraphRAG-style, extractive, no model): entities, the chunks that mention them,
how they co-occur, which paragraphs name each other's titles, and entity communities.

Nodes: `chunk:<chunk_id>`, `entity:<key>` (from titles and `extract_entities` spans; spans that are only numbers,
dates or nationality words are skipped, since they would only make hubs) and `community:<n>` (Louvain, seed 0).
Edges: `mentions` (chunk -> entity), `related` (entities co-mentioned in a chunk), `title_mention` (a chunk naming
another's title, the multi-hop bridge; within a question's own paragraphs where chunks carry one) and
`in_community`. Every edge carries a weight and a sentence as evidence. Details: docs/pipeline.md ("Graph").
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import networkx as nx
import pandas as pd
from networkx.algorithms.community import louvain_communities

from causal_assets.core.graph.store import edges_frame, nodes_frame
from causal_assets.core.text.entities import DEMONYMS, extract_entities
from causal_assets.core.text.titles import TitleMatcher, entity_key, title_entity

TITLED_KINDS = frozenset({"paragraph", "document"})
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"“'(\[A-Z0-9])|\n\s*\n")
MAX_DESCRIPTION_CHARS = 300


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text or "") if s and s.strip()]


# Date words and nationality/compass descriptors: every biography has them, so as entities they only make hubs.
CALENDAR_WORDS = frozenset("""january february march april may june july august september october november
    december jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday
    saturday sunday""".split())


def _keep(name: str) -> bool:
    if len(name) < 2 or name[0].isdigit() or not any(c.isalpha() for c in name):
        return False
    words = [w.casefold() for w in re.split(r"[\s\-]+", name) if w]
    return not all(w in CALENDAR_WORDS or w in DEMONYMS for w in words)


def _short(text: str) -> str:
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[:MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"


def build_text_graph(chunks: pd.DataFrame, min_community_size: int = 2, max_entities_per_chunk: int = 40,
                     seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(nodes, edges) of the text chunks in `chunks`, in the `store` schema."""
    if chunks.empty:
        return nodes_frame([]), edges_frame([])
    corpus = str(chunks["corpus"].iloc[0])
    rows = chunks.to_dict("records")
    sentences: dict[str, list[str]] = {}
    scope: dict[str, str | None] = {}
    # Entities: key -> surface-form counts, mention count, chunks, description candidates.
    forms: dict[str, Counter] = defaultdict(Counter)
    title_form: dict[str, str] = {}
    title_desc: dict[str, str] = {}
    mention_count: Counter = Counter()
    entity_chunks: dict[str, set[str]] = defaultdict(set)
    shortest: dict[str, str] = {}
    mentions: dict[tuple[str, str], list] = {}          # (chunk_id, key) -> [weight, evidence]
    chunk_entities: dict[str, list[str]] = {}
    sentence_entities: list[tuple[str, str, list[str]]] = []  # (chunk_id, sentence, keys)

    def better(sentence: str, current: str | None) -> bool:
        if current is None:
            return True
        long_new, long_cur = len(sentence.split()) >= 4, len(current.split()) >= 4
        return (long_new, -len(sentence)) > (long_cur, -len(current))

    for r in rows:
        cid, title = r["chunk_id"], r["title"] or ""
        md = json.loads(r["metadata"] or "{}") if isinstance(r["metadata"], str) else (r["metadata"] or {})
        scope[cid] = str(md["query_id"]) if "query_id" in md else None
        sents = split_sentences(r["text"])
        sentences[cid] = sents
        order: dict[str, None] = {}
        if r["kind"] in TITLED_KINDS and title_entity(title) and _keep(title_entity(title)):
            name = title_entity(title)
            key = entity_key(name)
            if key:
                title_form.setdefault(key, name)
                if sents:
                    title_desc.setdefault(key, sents[0])
                mentions[(cid, key)] = [1, "title"]
                order[key] = None
        for sent in sents:
            keys = []
            for name in extract_entities(sent):
                if not _keep(name):
                    continue
                key = entity_key(name)
                if not key or key in keys:
                    continue
                keys.append(key)
                forms[key][name] += 1
                mention_count[key] += 1
                if better(sent, shortest.get(key)):
                    shortest[key] = sent
                if (cid, key) in mentions:
                    mentions[(cid, key)][0] += 1
                else:
                    mentions[(cid, key)] = [1, sent]
                order[key] = None
            sentence_entities.append((cid, sent, keys))
        chunk_entities[cid] = list(order)[:max_entities_per_chunk]
        for key in order:
            entity_chunks[key].add(cid)

    entities = sorted(set(forms) | set(title_form))

    # Co-mentions: chunks per pair, and the shortest sentence that names both.
    pair_weight: Counter = Counter()
    pair_evidence: dict[tuple[str, str], str] = {}
    for cid, keys in chunk_entities.items():
        ks = sorted(keys)
        for i, a in enumerate(ks):
            for b in ks[i + 1:]:
                pair_weight[(a, b)] += 1
                pair_evidence.setdefault((a, b), f"co-mentioned in {cid}")
    for cid, sent, keys in sentence_entities:
        ks = sorted(keys)
        for i, a in enumerate(ks):
            for b in ks[i + 1:]:
                ev = pair_evidence.get((a, b))
                if ev is not None and (ev.startswith("co-mentioned in ") or len(sent) < len(ev)):
                    pair_evidence[(a, b)] = sent

    EG = nx.Graph()
    EG.add_nodes_from(entities)
    EG.add_weighted_edges_from((a, b, w) for (a, b), w in pair_weight.items())
    degree = dict(EG.degree())

    communities = sorted((c for c in louvain_communities(EG, weight="weight", seed=seed)
                          if len(c) >= min_community_size), key=lambda c: (-len(c), min(c)))
    community_of = {key: i for i, c in enumerate(communities) for key in c}
    # Representative sentence per community: the one naming most distinct members (then the shorter).
    best_sentence: dict[int, tuple[int, int, str]] = {}
    for cid, sent, keys in sentence_entities:
        per = Counter(community_of[k] for k in keys if k in community_of)
        for comm, n in per.items():
            cur = best_sentence.get(comm)
            if cur is None or (n, -len(sent)) > (cur[0], cur[1]):
                best_sentence[comm] = (n, -len(sent), sent)

    def display(key: str) -> str:
        return title_form.get(key) or forms[key].most_common(1)[0][0]

    node_rows, edge_rows = [], []
    title_of = {r["chunk_id"]: r["title"] or "" for r in rows}
    kind_of = {r["chunk_id"]: r["kind"] for r in rows}

    # title_mention: per scope (question) when chunks have one, corpus-wide otherwise.
    by_scope: dict[str | None, list[tuple[str, str]]] = defaultdict(list)
    for cid in sentences:
        if kind_of[cid] in TITLED_KINDS and title_of[cid]:
            by_scope[scope[cid]].append((cid, title_of[cid]))
    matchers = {s: TitleMatcher(titles) for s, titles in by_scope.items()}
    title_edges: dict[tuple[str, str], list] = {}
    for cid, sents in sentences.items():
        matcher = matchers.get(scope[cid])
        if matcher is None:
            continue
        for sent in sents:
            for other in matcher.find(sent):
                if other == cid or title_of[other] == title_of[cid]:
                    continue
                if (cid, other) in title_edges:
                    title_edges[(cid, other)][0] += 1
                else:
                    title_edges[(cid, other)] = [1, sent]

    chunk_degree: Counter = Counter()
    for (cid, _key) in mentions:
        chunk_degree[cid] += 1
    for (a, b) in title_edges:
        chunk_degree[a] += 1
        chunk_degree[b] += 1

    for cid, sents in sentences.items():
        comms = Counter(community_of[k] for k in chunk_entities[cid] if k in community_of)
        node_rows.append({
            "node_id": f"chunk:{cid}", "node_type": "chunk", "name": title_of[cid] or cid, "chunk_id": cid,
            "description": _short(sents[0]) if sents else "", "rank": chunk_degree[cid],
            "community": comms.most_common(1)[0][0] if comms else -1,
            "attributes": {"kind": kind_of[cid], "title": title_of[cid], "scope": scope[cid],
                           "n_entities": len(chunk_entities[cid])},
        })
    for key in entities:
        desc = title_desc.get(key) or shortest.get(key, "")
        node_rows.append({
            "node_id": f"entity:{key}", "node_type": "entity", "name": display(key), "chunk_id": "",
            "description": _short(desc), "rank": degree.get(key, 0), "community": community_of.get(key, -1),
            "attributes": {"key": key, "mentions": int(mention_count[key]), "chunks": len(entity_chunks[key]),
                           "is_title": key in title_form},
        })
    for i, members in enumerate(communities):
        top = sorted(members, key=lambda k: (-degree.get(k, 0), k))[:5]
        names = [display(k) for k in top]
        rep = best_sentence.get(i, (0, 0, ""))[2]
        n_chunks = len(set().union(*(entity_chunks[k] for k in members)))
        node_rows.append({
            "node_id": f"community:{i}", "node_type": "community", "name": f"community {i}: " + ", ".join(names[:3]),
            "chunk_id": "", "description": _short(f"Top entities: {', '.join(names)}. {rep}".strip()),
            "rank": len(members), "community": i,
            "attributes": {"size": len(members), "top_entities": names, "chunks": n_chunks},
        })
        edge_rows += [{"source": f"entity:{k}", "target": f"community:{i}", "edge_type": "in_community",
                       "weight": 1.0, "evidence": ""} for k in sorted(members)]

    edge_rows += [{"source": f"chunk:{cid}", "target": f"entity:{key}", "edge_type": "mentions", "weight": w,
                   "evidence": _short(ev)} for (cid, key), (w, ev) in mentions.items()]
    edge_rows += [{"source": f"entity:{a}", "target": f"entity:{b}", "edge_type": "related", "weight": w,
                   "evidence": _short(pair_evidence[(a, b)])} for (a, b), w in pair_weight.items()]
    edge_rows += [{"source": f"chunk:{a}", "target": f"chunk:{b}", "edge_type": "title_mention", "weight": w,
                   "evidence": _short(ev)} for (a, b), (w, ev) in title_edges.items()]

    nodes_df = nodes_frame(node_rows, corpus)
    edges_df = edges_frame(edge_rows, corpus)
    nodes_df.attrs["build_stats"] = {"chunks": len(sentences), "entities": len(entities),
                                     "communities": len(communities), "title_mentions": len(title_edges)}
    return nodes_df, edges_df
