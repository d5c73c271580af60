"""The context builder of causal search (GraphRAG-style local search over the entity graph): query -> entities ->
relationships, text units and community reports -> token-budgeted "network data" for the report prompt.

`GraphContextBuilder(nodes, edges, chunks)` works on any graph in the `graph.store` schema. The query is mapped to
entities by cosine similarity with each entity's `name: description` embedding (embedded once per graph);
`(k + s) * oversample_scaler` entities are requested and all used. `format_network_data` then adds records whole,
in priority order, while each section's real token count stays within its share of the budget; only a text unit's
text is shortened (1,000 characters). Community reports get what the other sections leave, so the total never
exceeds `max_tokens`. See docs/on-demand.md.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from causal_assets.core.index.dense import Embedder
from causal_assets.core.local_search.entity_vectors import entity_nodes, entity_text, entity_texts
from causal_assets.core.local_search.tokens import num_tokens

log = logging.getLogger(__name__)

DEFAULT_K = 10
DEFAULT_S = 3
OVERSAMPLE_SCALER = 2
DEFAULT_MAX_TOKENS = 8000
DEFAULT_SHARES = (0.4, 0.4, 0.2)
TEXT_UNIT_MAX_CHARS = 1000
_VECTOR_CACHE: dict[tuple, np.ndarray] = {}

ENTITY_FIELDS = ("id", "entity", "description", "rank", "type")
RELATIONSHIP_FIELDS = ("id", "source", "target", "description", "weight", "rank")
COMMUNITY_FIELDS = ("id", "title", "content", "rank")


def nodes_requested(k: int = DEFAULT_K, s: int = DEFAULT_S, oversample_scaler: int = OVERSAMPLE_SCALER) -> int:
    """(k + s) * oversample_scaler: 26 with the defaults."""
    if k < 0 or s < 0 or oversample_scaler < 1:
        raise ValueError(f"need k >= 0, s >= 0, oversample_scaler >= 1 (got {k}, {s}, {oversample_scaler})")
    return (k + s) * oversample_scaler


def serialize_record(record: dict) -> str:
    """How one record appears in the prompt (compact JSON, one record per line)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


def record_tokens(record: dict) -> int:
    """Real token count of a record as serialised, +1 for the line/comma separator."""
    return num_tokens(serialize_record(record)) + 1


def cut_text(text: str, max_chars: int = TEXT_UNIT_MAX_CHARS) -> str:
    text = text or ""
    return text if len(text) <= max_chars else text[:max_chars] + "..."


def _essential(record: dict, fields: Sequence[str]) -> dict:
    return {f: record.get(f) for f in fields}


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def _fill(records: list[dict], budget: int) -> tuple[list[dict], int]:
    """Add records whole, in order, while the running total stays <= budget. Stops at the first record that
    does not fit, so what is kept is always a priority prefix."""
    kept, used = [], 0
    for r in records:
        t = record_tokens(r)
        if used + t > budget:
            break
        kept.append(r)
        used += t
    return kept, used


def format_network_data(entities: Iterable[dict], relationships: Iterable[dict], text_units: Iterable[dict],
                        communities: Iterable[dict] = (), max_tokens: int = DEFAULT_MAX_TOKENS,
                        shares: Sequence[float] = DEFAULT_SHARES) -> dict:
    """The budgeted network data: {entities, relationships, text_units, community_reports, context_summary,
    token_counts, budgets, available}.

    Priorities: entities by rank desc; relationships by weight desc then rank desc; text units in the order
    given, which is relevance (`GraphContextBuilder.build_context`: the units of the entities the query names, then
    of the most similar entities); community reports by rank desc. Ties keep input order (stable sorts), so the
    input's relevance order breaks them. Text units are not sorted shortest first, as the causal-search design
    asks: in a small budget that keeps the shortest units of any of the 26 entities and drops the one the question
    is about (HotpotQA's "Counterparts" question lost its only answer-bearing paragraph that way).
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if len(shares) != 3 or any(s < 0 for s in shares) or sum(shares) > 1.0 + 1e-9:
        raise ValueError(f"shares must be 3 non-negative fractions summing to <= 1, got {tuple(shares)}")
    entities, relationships = list(entities), list(relationships)
    text_units, communities = list(text_units), list(communities)

    ents = sorted((_essential(e, ENTITY_FIELDS) for e in entities), key=lambda r: -_num(r["rank"]))
    rels = sorted((_essential(r, RELATIONSHIP_FIELDS) for r in relationships),
                  key=lambda r: (-_num(r["weight"]), -_num(r["rank"])))
    units = []
    for u in text_units:
        text = u.get("text") or ""
        n = u.get("n_tokens")
        units.append({"id": u.get("id"), "text": cut_text(text),
                      "n_tokens": int(n) if n is not None else num_tokens(text)})
    comms = sorted((_essential(c, COMMUNITY_FIELDS) for c in communities), key=lambda r: -_num(r["rank"]))

    budgets = {"entities": int(max_tokens * shares[0]), "relationships": int(max_tokens * shares[1]),
               "text_units": int(max_tokens * shares[2])}
    kept_e, tok_e = _fill(ents, budgets["entities"])
    kept_r, tok_r = _fill(rels, budgets["relationships"])
    kept_u, tok_u = _fill(units, budgets["text_units"])
    budgets["community_reports"] = max(0, max_tokens - tok_e - tok_r - tok_u)
    kept_c, tok_c = _fill(comms, budgets["community_reports"])

    token_counts = {"entities": tok_e, "relationships": tok_r, "text_units": tok_u, "community_reports": tok_c}
    token_counts["total"] = sum(token_counts.values())
    available = {"entities": len(ents), "relationships": len(rels), "text_units": len(units),
                 "community_reports": len(comms)}
    summary = (f"Network data within {max_tokens} tokens: {len(kept_e)}/{len(ents)} entities ({tok_e} tokens), "
               f"{len(kept_r)}/{len(rels)} relationships ({tok_r}), {len(kept_u)}/{len(units)} text units "
               f"({tok_u}), {len(kept_c)}/{len(comms)} community reports ({tok_c}).")
    return {"entities": kept_e, "relationships": kept_r, "text_units": kept_u, "community_reports": kept_c,
            "context_summary": summary, "token_counts": token_counts, "budgets": budgets,
            "available": available}


def network_data_for_prompt(data: dict) -> str:
    """The network data as it is put in the prompt: the four record sections, one record per line."""
    parts = []
    for key in ("entities", "relationships", "text_units", "community_reports"):
        rows = ",\n".join(serialize_record(r) for r in data.get(key) or [])
        parts.append(f'"{key}":[\n{rows}]')
    return "{" + ",\n".join(parts) + "}"


@dataclass
class GraphContext:
    """What the builder gathered for one query, before budgeting."""
    query: str
    nodes_requested: int
    entities: list[dict]
    relationships: list[dict]
    text_units: list[dict]
    communities: list[dict]
    scores: dict[str, float] = field(default_factory=dict)


class GraphContextBuilder:
    """Query -> (entities, relationships, text units, community reports) on one graph.

    nodes/edges: the `graph.store` frames. chunks: the chunk frame (chunk_id, text) the graph was built
    from; without it a text unit's text is its chunk node's description. embed: texts -> L2-normalised
    vectors (default: the packaged MiniLM `Embedder`); entity vectors are computed once and cached.
    entity_vectors: precomputed vectors by node id (the `graph_entity_embeddings` asset); entities missing from it
    are embedded with `embed`. Entities are the text graph's entity nodes, or a code graph's symbols, whose own
    chunk is their text unit.
    """

    def __init__(self, nodes: pd.DataFrame, edges: pd.DataFrame, chunks: pd.DataFrame | None = None,
                 embed: Callable[[list[str]], np.ndarray] | None = None, embed_query:
                 Callable[[list[str]], np.ndarray] | None = None, k: int = DEFAULT_K, s: int = DEFAULT_S,
                 oversample_scaler: int = OVERSAMPLE_SCALER, entity_vectors: dict[str, np.ndarray] | None = None):
        self.nodes, self.edges = nodes, edges
        self._given_vectors = entity_vectors or {}
        self.k, self.s, self.oversample_scaler = k, s, oversample_scaler
        if embed is None:
            emb = Embedder()
            embed, embed_query = emb.encode, emb.encode_queries
        self._embed = embed
        self._embed_query = embed_query or embed
        self._entity_vectors: np.ndarray | None = None
        self._names: dict[str, list[int]] | None = None

        ent = entity_nodes(nodes)
        self.entity_table = ent
        self._node = {r["node_id"]: r for r in nodes.to_dict("records")}
        self._entity_ids = set(ent["node_id"])
        text_of = dict(zip(chunks["chunk_id"], chunks["text"])) if chunks is not None else {}
        self._chunk_text = {r["node_id"]: text_of.get(r["chunk_id"], r["description"] or "")
                            for r in nodes[nodes["node_type"] == "chunk"].to_dict("records")}
        # A code symbol's text unit is its own chunk (code graphs have no chunk nodes or mention edges).
        self._own_unit = {r["node_id"]: r["chunk_id"] for r in ent.to_dict("records")
                          if r["node_type"] != "entity" and r["chunk_id"]}
        for nid, cid in self._own_unit.items():
            self._chunk_text.setdefault(f"chunk:{cid}", text_of.get(cid, self._node[nid]["description"] or ""))
        self._n_tokens: dict[str, int] = {}
        # adjacency by edge type
        self._related: dict[str, list[dict]] = {}
        self._mentioned_by: dict[str, list[tuple[str, float]]] = {}
        self._community_of: dict[str, list[str]] = {}
        for r in edges.to_dict("records"):
            src, dst, et = r["source"], r["target"], r["edge_type"]
            if et == "mentions":
                self._mentioned_by.setdefault(dst, []).append((src, float(r["weight"])))
            elif et == "in_community":
                self._community_of.setdefault(src, []).append(dst)
            elif src in self._entity_ids and dst in self._entity_ids:
                self._related.setdefault(src, []).append(r)
                self._related.setdefault(dst, []).append(r)

    # -- entity mapping ----------------------------------------------------------------------------
    entity_text = staticmethod(entity_text)

    @property
    def entity_vectors(self) -> np.ndarray:
        """Entity vectors, computed once per graph: cached on the builder and, process-wide, by the hash of
        the entity texts and the embedding function (a second builder over the same graph reuses them)."""
        if self._entity_vectors is None and self._given_vectors and \
                all(n in self._given_vectors for n in self.entity_table["node_id"]):
            self._entity_vectors = np.stack([np.asarray(self._given_vectors[n], dtype=np.float32)
                                             for n in self.entity_table["node_id"]]) \
                if len(self.entity_table) else np.zeros((0, 0), np.float32)
        if self._entity_vectors is None:
            texts = entity_texts(self.entity_table)
            h = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()
            key = (h, getattr(self._embed, "__qualname__", repr(self._embed)),
                   getattr(getattr(self._embed, "__self__", None), "model_name", None))
            if key not in _VECTOR_CACHE:
                if len(_VECTOR_CACHE) >= 8:
                    _VECTOR_CACHE.pop(next(iter(_VECTOR_CACHE)))
                _VECTOR_CACHE[key] = np.asarray(self._embed(texts), dtype=np.float32)
            self._entity_vectors = _VECTOR_CACHE[key]
        return self._entity_vectors

    def named_in(self, query: str) -> list[int]:
        """Rows of the entities the query names literally (whole words, names of 4+ characters; a one-word name only
        where the query capitalises it), longest name first: "Counterparts" in "Which band released the song
        Counterparts?"."""
        if self._names is None:
            self._names = {}
            for i, name in enumerate(self.entity_table["name"].astype(str)):
                key = " ".join(re.findall(r"\w+", name.casefold()))
                if len(key) >= 4:
                    self._names.setdefault(key, []).append(i)
        tokens = re.findall(r"\w+", query)
        words = [t.casefold() for t in tokens]
        found = []
        for size in range(min(6, len(words)), 0, -1):
            for start in range(len(words) - size + 1):
                # one word names an entity only where the query writes it as a name ("Counterparts", not "rock")
                if size == 1 and not (start > 0 and tokens[start][:1].isupper()):
                    continue
                found += self._names.get(" ".join(words[start:start + size]), [])
        return list(dict.fromkeys(found))

    def map_query_to_entities(self, query: str, n: int) -> tuple[list[dict], dict[str, float]]:
        """The n entities for the query, best first: those it names literally, then the most similar (cosine)."""
        if self.entity_table.empty or n <= 0:
            return [], {}
        q = np.asarray(self._embed_query([query]), dtype=np.float32)[0]
        sims = self.entity_vectors @ q
        named = self.named_in(query)
        rest = [i for i in np.argsort(-sims, kind="stable") if i not in set(named)]
        order = np.asarray((named + rest)[:n], dtype=int)
        rows = self.entity_table.iloc[order].to_dict("records")
        return rows, {r["node_id"]: float(sims[i]) for r, i in zip(rows, order)}

    # -- context ---------------------------------------------------------------------------------
    def _tokens_of_chunk(self, node_id: str) -> int:
        if node_id not in self._n_tokens:
            self._n_tokens[node_id] = num_tokens(self._chunk_text.get(node_id, ""))
        return self._n_tokens[node_id]

    def build_context(self, query: str, k: int | None = None, s: int | None = None,
                      oversample_scaler: int | None = None) -> GraphContext:
        n = nodes_requested(self.k if k is None else k, self.s if s is None else s,
                            self.oversample_scaler if oversample_scaler is None else oversample_scaler)
        rows, scores = self.map_query_to_entities(query, n)
        selected = [r["node_id"] for r in rows]
        sel = set(selected)
        entities = [{"id": r["node_id"], "entity": r["name"], "description": r["description"],
                     "rank": int(r["rank"]), "type": r["node_type"], "community": int(r["community"]),
                     "similarity": round(scores[r["node_id"]], 4)} for r in rows]

        rels, seen = [], set()
        for nid in selected:  # edges among the selected entities and around them (one end selected)
            for e in self._related.get(nid, ()):
                key = (e["source"], e["target"], e["edge_type"])
                if key in seen:
                    continue
                seen.add(key)
                a, b = self._node.get(e["source"], {}), self._node.get(e["target"], {})
                rels.append({"id": f"{e['source']}->{e['target']}", "source": a.get("name", e["source"]),
                             "target": b.get("name", e["target"]), "description": e["evidence"] or "",
                             "weight": float(e["weight"]),
                             "rank": int(a.get("rank", 0)) + int(b.get("rank", 0)),
                             "edge_type": e["edge_type"],
                             "in_network": e["source"] in sel and e["target"] in sel})

        units, seen_u = [], set()
        for nid in selected:
            own = [(f"chunk:{self._own_unit[nid]}", 1.0)] if nid in self._own_unit else []
            for chunk_node, _w in own + sorted(self._mentioned_by.get(nid, ()), key=lambda t: -t[1]):
                if chunk_node in seen_u:
                    continue
                seen_u.add(chunk_node)
                own_chunk = chunk_node.startswith("chunk:") and nid in self._own_unit and chunk_node == own[0][0]
                cid = self._own_unit[nid] if own_chunk else \
                    (self._node.get(chunk_node, {}).get("chunk_id") or chunk_node)
                title = nid if own_chunk else self._node.get(chunk_node, {}).get("name", "")
                units.append({"id": cid, "text": self._chunk_text.get(chunk_node, ""),
                              "n_tokens": self._tokens_of_chunk(chunk_node), "title": title})

        comm_ids: dict[str, int] = {}
        for nid in selected:
            for c in self._community_of.get(nid, ()):
                comm_ids[c] = comm_ids.get(c, 0) + 1
        communities = []
        for c, hits in sorted(comm_ids.items(), key=lambda t: -t[1]):
            node = self._node.get(c)
            if node is not None:
                communities.append({"id": c, "title": node["name"], "content": node["description"],
                                    "rank": int(node["rank"]), "matched_entities": hits})
        return GraphContext(query, n, entities, rels, units, communities, scores)

    def build_network_data(self, query: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                           shares: Sequence[float] = DEFAULT_SHARES, context: GraphContext | None = None,
                           **kw) -> dict:
        ctx = context or self.build_context(query, **kw)
        data = format_network_data(ctx.entities, ctx.relationships, ctx.text_units, ctx.communities,
                                   max_tokens=max_tokens, shares=shares)
        data["nodes_requested"] = ctx.nodes_requested
        data["nodes_extracted"] = len(ctx.entities)
        return data
