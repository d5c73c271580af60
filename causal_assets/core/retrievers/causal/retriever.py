"""Causal retrieval: rank documents by how much they *cause* the answer to a query, not by how similar they are to it.

Each candidate of a shortlist (BM25, the cascade or the learned model, plus graph neighbours) gets three measured
quantities from an answer model (`answer_model.py`, `likelihood_model.py`): its information contribution (bits of
the answer's uncertainty it removes), its counterfactual impact (how much the answer changes without it) and the
strongest causal chain from the query's entities to it over the graph. The score is their weighted mean; a
diversity filter then drops documents that add nothing to those ranked above them. Explanations report only these
measurements: there are no hand-written cause rules. The formulas, modes and filter are in docs/on-demand.md
("The causal retriever").
"""
from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import networkx as nx
import pandas as pd
from networkx.algorithms.shortest_paths.generic import _build_paths_from_predecessors

from causal_assets.core.graph.store import chunk_neighbors, to_networkx
from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.retrievers.causal.answer_model import (AnswerModel, candidate_units, is_causal_query,
                                                               query_terms)
from causal_assets.core.retrievers.causal.documents import ContextDoc
from causal_assets.core.retrievers.causal.explanation import explain
from causal_assets.core.retrievers.causal.relationships import (EDGE_RELATIONSHIPS, MAX_PATHS, RELATIONSHIP_PRIOR,
                                                                SKIP_NODE_TYPES, role_of)
from causal_assets.core.retrievers.causal.results import (CausalChainLink, CausalNode, CausalRelevance,
                                                          CausalRetrievalOptions, CausalRetrievalResult,
                                                          CounterfactualImpact, InformationContribution,
                                                          RankedCausalDocument, RetrievalExplanation,
                                                          answer_similarity, change_impact)
from causal_assets.core.text.analyzer import analyze
from causal_assets.core.text.answers import normalize_answer
from causal_assets.core.text.entities import extract_entities



# --- The retriever --------------------------------------------------------------------------------------------

Shortlist = Callable[[str, int, Sequence[str] | None], list[Hit]]


class CausalRetriever:
    """Causal retrieval over a `CorpusIndex` (module docstring). Retriever protocol: `name = "causal"`."""

    name = "causal"

    def __init__(self, index: CorpusIndex, answer_model: AnswerModel,
                 graph: tuple[pd.DataFrame, pd.DataFrame] | None = None, shortlist: Any = None,
                 options: CausalRetrievalOptions | None = None):
        self.index = index
        self.answer_model = answer_model
        self.options = options or CausalRetrievalOptions()
        self._shortlist = self._make_shortlist(shortlist)
        self.nodes, self.edges = graph if graph is not None else (None, None)
        self._G: nx.Graph | None = None
        self._node_of_chunk: dict[str, str] = {}
        self._neighbors = None
        self._last_shortlist: list[Hit] = []
        self._pred_cache: dict[tuple[str, int], dict[str, list[str]]] = {}
        self._entries_memo: tuple[Any, list[tuple[str, float, str]]] = (None, [])
        if graph is not None:
            self._prepare_graph(*graph)

    # -- setup --
    def _make_shortlist(self, shortlist) -> Shortlist:
        if shortlist is None:
            def bm25(query, n, within):
                return [h for h in self.index.search(query, n, "bm25", list(within) if within else None)
                        if h.score > 0]
            return bm25
        if hasattr(shortlist, "retrieve") and hasattr(shortlist, "config"):  # a CascadeRetriever
            def cascade(query, n, within):
                return list(shortlist.retrieve(query, max_documents=n, within=within).documents)
            return cascade
        if hasattr(shortlist, "retrieve_many"):   # any other retriever: its top n
            def top(query, n, within):
                return shortlist.retrieve_many([query], n, [list(within)] if within is not None else None)[0]
            return top
        if callable(shortlist):
            return shortlist
        raise TypeError("shortlist must be None, a retriever or a callable (query, n, within) -> [Hit]")

    def _prepare_graph(self, nodes: pd.DataFrame, edges: pd.DataFrame) -> None:
        M = to_networkx(nodes, edges)
        G = nx.Graph()
        for n, a in M.nodes(data=True):
            if a.get("node_type") not in SKIP_NODE_TYPES:
                G.add_node(n, **a)
        for u, v, a in M.edges(data=True):
            if u not in G or v not in G or u == v:
                continue
            cur = G.get_edge_data(u, v)
            if cur is None or float(a["weight"]) > cur["weight"]:
                G.add_edge(u, v, edge_type=a["edge_type"], weight=float(a["weight"]),
                           evidence=str(a.get("evidence") or ""), source=u)
        self._G = G
        for nid, cid in zip(nodes["node_id"], nodes["chunk_id"]):
            if cid and nid in G and cid not in self._node_of_chunk:
                self._node_of_chunk[cid] = nid
        self._neighbors = chunk_neighbors(nodes, edges)
        # Node text for lexical entry matching: name, description and (for chunk nodes) the chunk text.
        self._node_terms: dict[str, set[str]] = {}
        for n, a in G.nodes(data=True):
            text = f"{a.get('name', '')} {a.get('description', '')}"
            cid = a.get("chunk_id") or ""
            if cid and cid in self.index.position:
                text += " " + self.index.text(cid)
            self._node_terms[n] = set(analyze(text, True))

    # -- documents --
    def context_doc(self, chunk_id: str) -> ContextDoc:
        row = self.index.chunks.iloc[self.index.position[chunk_id]]
        return ContextDoc(chunk_id, str(row["text"]), str(row["title"]), str(row.get("path", "") or ""),
                          int(row.get("start_line", 0) or 0))

    def answer_location(self, chunk_id: str, answer: str) -> str:
        """`path:line` (or `chunk id:line`) of the line/sentence of the document that is `answer`, else ""."""
        key = normalize_answer(answer)
        if not key:
            return ""
        doc = self.context_doc(chunk_id)
        for lineno, unit in candidate_units(doc):
            if normalize_answer(unit) == key:
                return f"{doc.path or chunk_id}:{lineno}" if lineno else ""
        return ""

    def _hit(self, chunk_id: str, score: float = 0.0, rank: int = 0) -> Hit:
        row = self.index.chunks.iloc[self.index.position[chunk_id]]
        return Hit(chunk_id, float(score), rank, str(row["title"]), str(row["kind"]))

    def candidates(self, query: str, opts: CausalRetrievalOptions, within: Sequence[str] | None = None) -> list[str]:
        """Shortlist + graph neighbours (step 2 of the algorithm), in shortlist order."""
        allowed = set(within) if within is not None else None
        base = [h.chunk_id for h in self._shortlist(query, opts.shortlist_size, within)
                if h.chunk_id in self.index.position][:opts.shortlist_size]
        out = list(dict.fromkeys(base))
        self._last_shortlist = [self._hit(c) for c in out]
        if self._neighbors is not None and opts.graph_candidates:
            extra: list[tuple[float, int, str]] = []
            for i, cid in enumerate(base):
                for nb, _, w in self._neighbors(cid):
                    if nb in self.index.position and (allowed is None or nb in allowed) and nb not in out:
                        extra.append((-w, i, nb))
            for _, _, nb in sorted(extra):
                if nb not in out:
                    out.append(nb)
                if len(out) >= len(base) + opts.graph_candidates:
                    break
        return out

    # -- query analysis and chains --
    def analyze_query(self, query: str) -> dict[str, Any]:
        ents = extract_entities(query)
        idents = [t for t in re.findall(r"[A-Za-z_][\w.]*", query)
                  if "_" in t or "." in t.strip(".") or any(c.isupper() for c in t[1:])]
        first = query.strip().split()[0].lower() if query.strip() else ""
        intent = first if first in ("why", "how", "what", "which", "where", "when", "who", "is", "does") else "other"
        return {"entities": list(dict.fromkeys(ents + idents)), "intent": intent,
                "causal": is_causal_query(query), "terms": query_terms(query),
                "expected_answer": "cause" if is_causal_query(query) else
                ("behaviour" if intent in ("how", "what") else "fact")}

    def _entries(self, query: str, entities: Sequence[str]) -> list[tuple[str, float, str]]:
        """(node, match strength, matched name) of the graph nodes the query enters at. Kept for the last
        query: every candidate of a query enters at the same nodes, and the scan visits every graph node."""
        key = (query, tuple(entities))
        if self._entries_memo[0] != key:
            self._entries_memo = (key, self._scan_entries(query, entities))
        return self._entries_memo[1]

    def _scan_entries(self, query: str, entities: Sequence[str]) -> list[tuple[str, float, str]]:
        G = self._G
        names = {e.casefold(): e for e in entities}
        keys = {re.sub(r"\W+", " ", e.casefold()).strip(): e for e in entities}
        out = []
        for n, a in G.nodes(data=True):
            nm = str(a.get("name", "")).casefold()
            key = n.split(":", 1)[1] if n.startswith("entity:") else None
            if nm in names or (key is not None and key in keys):
                out.append((n, 1.0, names.get(nm) or keys.get(key)))
        if out:
            return out
        q = set(query_terms(query))
        if not q:
            return []
        cov = {n: len(q & t) / len(q) for n, t in self._node_terms.items()}
        best = max(cov.values(), default=0.0)
        if best <= 0:
            return []
        top = sorted((n for n, c in cov.items() if c >= 0.8 * best), key=lambda n: (-cov[n], n))[:3]
        return [(n, cov[n], str(G.nodes[n].get("name", n))) for n in top]

    def _cnode(self, n: str) -> CausalNode:
        a = self._G.nodes[n]
        if a.get("chunk_id"):
            label = a["chunk_id"] if a.get("node_type") == "chunk" else (a.get("name") or a["chunk_id"])
            return CausalNode("document", str(a["chunk_id"]), str(label))
        return CausalNode("entity" if a.get("node_type") == "entity" else "concept", n, str(a.get("name", n)))

    def _doc_text(self, n: str) -> str:
        cid = self._G.nodes[n].get("chunk_id") or ""
        return self.index.text(cid) if cid in self.index.position else ""

    def causal_chain(self, query: str, chunk_id: str, max_hops: int = 4, hop_decay: float = 0.8,
                     entities: Sequence[str] | None = None) -> tuple[list[CausalChainLink], float]:
        """The strongest chain from the query to the document, and its strength (module docstring)."""
        if self._G is None or chunk_id not in self._node_of_chunk:
            return [], 0.0
        target = self._node_of_chunk[chunk_id]
        entities = self.analyze_query(query)["entities"] if entities is None else entities
        best: tuple[list[CausalChainLink], float] = ([], 0.0)
        for entry, match, matched in self._entries(query, entities):
            for path in self._shortest_paths(entry, target, max_hops):
                links, strength = self._links(query, path, match, matched, hop_decay)
                if strength > best[1]:
                    best = (links, strength)
        return best

    def _shortest_paths(self, entry: str, target: str, max_hops: int) -> list[list[str]]:
        """The first MAX_PATHS hop-shortest paths entry -> target, none when longer than max_hops: exactly
        `nx.all_shortest_paths`, but from a BFS cut at max_hops and kept per (entry, max_hops). A BFS cut at depth
        d gives every node within d the same predecessor lists as a full one, and an unbounded BFS per
        (entry, candidate) over the HotpotQA entity graph (16.7k nodes, 164k edges) cost ~1.5 s each."""
        key = (entry, max_hops)
        pred = self._pred_cache.get(key)
        if pred is None:
            if len(self._pred_cache) >= 256:
                self._pred_cache.clear()
            pred = self._pred_cache[key] = nx.predecessor(self._G, entry, cutoff=max_hops)
        if target not in pred:
            return []
        return list(itertools.islice(_build_paths_from_predecessors({entry}, target, pred), MAX_PATHS))

    def _links(self, query: str, path: list[str], match: float, matched: str, decay: float
               ) -> tuple[list[CausalChainLink], float]:
        G = self._G
        qnode = CausalNode("query", "query", query)
        links: list[CausalChainLink] = []
        product, hops = 1.0, 0
        prev, via, via_ev, pending_hops = qnode, [matched], [], 0
        entry_is_doc = bool(G.nodes[path[0]].get("chunk_id"))
        if entry_is_doc:
            a = G.nodes[path[0]]
            nt = a.get("node_type")
            rel = "implements" if nt in ("function", "method") else "defines" if nt in ("class", "module") else \
                role_of(self._doc_text(path[0]), matched) if matched else "contextualizes"
            s = RELATIONSHIP_PRIOR[rel] * min(1.0, match)
            links.append(CausalChainLink(qnode, self._cnode(path[0]), rel, s,
                                         f"query terms match {a.get('name', path[0])}"))
            product *= s
            prev, via = self._cnode(path[0]), []
        for u, v in zip(path, path[1:]):
            e = G.edges[u, v]
            pending_hops += 1
            if not G.nodes[v].get("chunk_id"):           # an entity: fold into the next link
                via.append(str(G.nodes[v].get("name", v)))
                via_ev.append(e["evidence"])
                continue
            etype = e["edge_type"]
            if etype == "mentions" and via:
                rel = role_of(self._doc_text(v), via[-1])
            else:
                rel = EDGE_RELATIONSHIPS.get(etype, "contextualizes")
            w = min(1.0, max(0.0, float(e["weight"])))
            base = RELATIONSHIP_PRIOR[rel] * w
            s = base * decay ** (len(links) + pending_hops - 1)
            evidence = " | ".join(filter(None, via_ev + [e["evidence"]]))
            if via and prev is qnode:
                evidence = f"query names {via[0]}" + (f"; {evidence}" if evidence else "")
            elif via:
                evidence = f"via {', '.join(via)}: {evidence}"
            links.append(CausalChainLink(prev, self._cnode(v), rel, s, evidence[:300]))
            product *= base
            hops += pending_hops
            prev, via, via_ev, pending_hops = self._cnode(v), [], [], 0
        total_hops = max(hops, 1)
        return links, float(product * decay ** (total_hops - 1)) if links else 0.0

    # -- relevance --
    def _docs(self, ids: Sequence[str]) -> list[ContextDoc]:
        """Context documents in a canonical (sorted) order: the same set always makes the same prompt, so
        the LLM cache serves every repeat of it."""
        return [self.context_doc(c) for c in sorted(set(ids))]

    def _entropy(self, memo: dict, query: str, ids: Sequence[str]) -> float:
        key = ("H", frozenset(ids))
        if key not in memo:
            memo[key] = float(self.answer_model.estimate_entropy(query, self._docs(ids)))
        return memo[key]

    def _answer(self, memo: dict, query: str, ids: Sequence[str]) -> str:
        key = ("A", frozenset(ids))
        if key not in memo:
            memo[key] = self.answer_model.answer(query, self._docs(ids))
        return memo[key]

    def _dist(self, memo: dict, query: str, ids: Sequence[str]) -> dict[str, float]:
        key = ("D", frozenset(ids))
        if key not in memo:
            memo[key] = self.answer_model.answer_distribution(query, self._docs(ids))
        return memo[key]

    def information_contribution(self, query: str, chunk_id: str, already: Sequence[str],
                                 memo: dict | None = None) -> InformationContribution:
        memo = {} if memo is None else memo
        already = [c for c in already if c != chunk_id]
        base = self._entropy(memo, query, [])
        with_doc = self._entropy(memo, query, [chunk_id])
        with_all = self._entropy(memo, query, already)
        with_doc_all = self._entropy(memo, query, [*already, chunk_id])
        mi, gain = base - with_doc, with_all - with_doc_all
        return InformationContribution(mi, gain, mi - gain, gain, base - with_doc_all,
                                       base, with_doc, with_all, with_doc_all)

    def _probability(self, memo: dict, query: str, ids: Sequence[str], answer: str) -> float:
        key = ("P", frozenset(ids), answer)
        if key not in memo:
            memo[key] = float(self.answer_model.answer_probability(query, self._docs(ids), answer))
        return memo[key]

    def counterfactual_impact(self, query: str, chunk_id: str, context: Sequence[str],
                              memo: dict | None = None) -> CounterfactualImpact:
        memo = {} if memo is None else memo
        full = list(dict.fromkeys([*context, chunk_id]))
        without = [c for c in full if c != chunk_id]
        cur = self._answer(memo, query, full)
        if hasattr(self.answer_model, "answer_probability"):
            return self._likelihood_counterfactual(memo, query, full, without, cur)
        alt = self._answer(memo, query, without)
        mode_sim = answer_similarity(cur, alt)

        def expected(ids):
            return sum(p * answer_similarity(a, cur) for a, p in self._dist(memo, query, ids).items())

        e_with = expected(full)
        sim = min(1.0, expected(without) / e_with) if e_with > 1e-12 else mode_sim
        change_prob = float(min(1.0, max(0.0, 1.0 - sim)))
        return change_impact(change_prob, cur, alt, mode_sim)

    def _likelihood_counterfactual(self, memo: dict, query: str, full: list[str], without: list[str],
                                   cur: str) -> CounterfactualImpact:
        """changeProb = 1 - P(cur | C without D) / P(cur | C) from the answer model's log-probabilities. The answer
        without D is generated only when at least half of the answer's probability goes (it decides
        wouldChangeAnswer and the change type); below that the answer is taken to stay."""
        p_with = self._probability(memo, query, full, cur)
        p_without = self._probability(memo, query, without, cur)
        change_prob = float(min(1.0, max(0.0, 1.0 - p_without / p_with))) if p_with > 0 else 0.0
        alt, mode_sim = cur, 1.0
        if change_prob >= 0.5:
            alt = self._answer(memo, query, without)
            mode_sim = answer_similarity(cur, alt)
        return change_impact(change_prob, cur, alt, mode_sim)

    def assess_relevance(self, doc: Hit | str, query: str, context: Mapping[str, Any] | Sequence[str] | None = None,
                         options: CausalRetrievalOptions | None = None, memo: dict | None = None) -> CausalRelevance:
        """Causal relevance of one document. `context`: {"candidates": [...], "already_retrieved": [...],
        "ic_scale": bits} or just the candidate chunk ids (the counterfactual context)."""
        opts = (options or self.options).effective()
        memo = {} if memo is None else memo
        cid = doc.chunk_id if isinstance(doc, Hit) else str(doc)
        ctx = context if isinstance(context, Mapping) else {"candidates": list(context or [])}
        cands = list(dict.fromkeys([*ctx.get("candidates", []), cid]))
        ic = self.information_contribution(query, cid, ctx.get("already_retrieved", []), memo)
        cf = self.counterfactual_impact(query, cid, cands, memo)
        chain, chain_s = self.causal_chain(query, cid, opts.max_hops, opts.hop_decay, ctx.get("entities"))
        base_scale = 0.0 if getattr(self.answer_model, "entropy_is_surprisal", False) else ic.base_entropy
        scale = max(base_scale, float(ctx.get("ic_scale", 0.0)), max(ic.mutual_information, 0.0), 1e-9)
        ic_n = max(ic.mutual_information, 0.0) / scale
        w = opts.weights
        order = list(ctx.get("candidates", []))
        prior = 1.0 - order.index(cid) / len(order) if cid in order else 0.0
        score = (w.information_contribution * ic_n + w.counterfactual_impact * cf.change_prob
                 + w.causal_chain_strength * chain_s + w.shortlist_prior * prior) / (
            w.information_contribution + w.counterfactual_impact + w.causal_chain_strength + w.shortlist_prior)
        p_max = max(self._dist(memo, query, cands).values(), default=0.0)
        confidence = float(min(1.0, p_max) * (1.0 if chain else 0.7))
        hit = doc if isinstance(doc, Hit) else self._hit(cid)
        return CausalRelevance(hit, ic, cf, chain, float(chain_s), float(score), confidence)

    # -- retrieval --
    def retrieve(self, query: str, options: CausalRetrievalOptions | None = None,
                 within: Sequence[str] | None = None) -> CausalRetrievalResult:
        if not query or not query.strip():
            raise ValueError("query is empty")
        given = options or self.options
        opts = given.effective()
        qa = self.analyze_query(query)
        cands = self.candidates(query, opts, within)
        memo: dict = {}
        # ic scale: the largest single-document entropy reduction among the candidates
        base = self._entropy(memo, query, [])
        gains = [base - self._entropy(memo, query, [c]) for c in cands]
        # a surprisal-based model's no-context value is no ceiling of what one document explains
        scale = max(gains, default=0.0) if getattr(self.answer_model, "entropy_is_surprisal", False) \
            else max([base] + gains)
        ctx = {"candidates": cands, "already_retrieved": [], "ic_scale": scale, "entities": qa["entities"]}
        rel = {c: self.assess_relevance(self._hit(c), query, ctx, given, memo) for c in cands}
        order = sorted(cands, key=lambda c: (-rel[c].relevance_score, cands.index(c)))

        kept: list[str] = []
        filtered: list[dict] = []
        for c in order:
            r = rel[c]
            if r.relevance_score < opts.min_relevance:
                filtered.append({"chunk_id": c, "reason": "below_min_relevance", "score": r.relevance_score})
                continue
            if kept and opts.diversity_threshold > 0:   # 0 turns the filter (and its context sets) off
                ic = self.information_contribution(query, c, kept, memo)
                r.information_contribution = ic
                th = opts.diversity_threshold
                redundant = abs(ic.information_gain) <= th and ic.mutual_information > th
                if opts.mode == "precision" and ic.information_gain <= th and not r.counterfactual_impact.would_change_answer:
                    redundant = True
                if redundant:
                    filtered.append({"chunk_id": c, "reason": "redundant", "score": r.relevance_score,
                                     "information_gain": ic.information_gain, "redundancy": ic.redundancy})
                    continue
            kept.append(c)
            if len(kept) >= opts.max_docs:
                break
        ranked = []
        for i, c in enumerate(kept):
            r = rel[c]
            hit = self._hit(c, r.relevance_score, i + 1)
            r.document = hit
            ranked.append(RankedCausalDocument(hit, r, i + 1, self._explain(r, i + 1) if opts.include_explanations
                                               else None))
        complete = 1.0 - (self._entropy(memo, query, kept) / base) if base > 0 else 0.0
        metadata = {"queryAnalysis": qa, "retrievalStrategy": (
            f"causal/{opts.mode}: shortlist={opts.shortlist_size} (+{opts.graph_candidates} graph), "
            f"diversity_threshold={opts.diversity_threshold:g} bits, min_relevance={opts.min_relevance:g}"),
            "confidenceInCompleteness": float(min(1.0, max(0.0, complete))),
            "candidates": cands, "shortlist": self._last_shortlist, "filtered": filtered,
            "answer": self._answer(memo, query, cands), "effective_options": opts,
            "relevance": {c: rel[c] for c in cands}}
        return CausalRetrievalResult(ranked, len(cands), metadata)

    def retrieve_many(self, queries: list[str], k: int, within: list[list[str]] | None = None) -> list[list[Hit]]:
        """Retriever protocol: the causal ranking cut at k, padded (ranks continue) with the rest of the
        candidates in shortlist order, then BM25 order, so metrics@k compare with other retrievers."""
        out = []
        for i, q in enumerate(queries):
            w = within[i] if within else None
            res = self.retrieve(q, replace(self.options, max_docs=max(1, k)), within=w)
            hits = [d.document for d in res.documents][:k]
            seen = {h.chunk_id for h in hits}
            pad = list(res.metadata["candidates"]) + [h.chunk_id for h in self.index.search(q, k + len(seen), "bm25", w)]
            for cid in pad:
                if len(hits) >= k:
                    break
                if cid not in seen:
                    seen.add(cid)
                    hits.append(self._hit(cid, 0.0, len(hits) + 1))
            out.append(hits)
        return out

    # -- explanations --
    def _explain(self, r: CausalRelevance, rank: int | None) -> str:
        return explain(r, rank, self.answer_location, getattr(self.answer_model, "entropy_is_surprisal", False))

    def explain_retrieval(self, query: str, doc: Hit | str, was_retrieved: bool | None = None,
                          options: CausalRetrievalOptions | None = None) -> RetrievalExplanation:
        """Why `doc` was (not) retrieved for `query`: re-runs retrieval and reads its decisions."""
        cid = doc.chunk_id if isinstance(doc, Hit) else str(doc)
        res = self.retrieve(query, options)
        retrieved = {d.document.chunk_id: d for d in res.documents}
        actual = cid in retrieved
        reasons: list[str] = []
        if was_retrieved is not None and was_retrieved != actual:
            reasons.append(f"note: the caller says was_retrieved={was_retrieved}, this run says {actual}")
        if actual:
            d = retrieved[cid]
            return RetrievalExplanation(query, cid, True, d.explanation or self._explain(d.relevance, d.rank),
                                        reasons + [f"rank {d.rank} of {len(res.documents)}"], d.relevance)
        rel = res.metadata["relevance"].get(cid)
        if rel is None:
            reasons.append("not a candidate: neither the shortlist nor the graph neighbours of it contain it")
            summary = f"{cid} was not retrieved: it was never a candidate for this query."
            return RetrievalExplanation(query, cid, False, summary, reasons, None)
        why = next((f for f in res.metadata["filtered"] if f["chunk_id"] == cid), None)
        if why and why["reason"] == "redundant":
            reasons.append(f"redundant: information gain {why['information_gain']:.3f} bits given the higher-ranked "
                           f"documents (redundancy {why['redundancy']:.3f} bits)")
        elif why:
            reasons.append(f"causal relevance {why['score']:.2f} below min_relevance "
                           f"{res.metadata['effective_options'].min_relevance:.2f}")
        else:
            reasons.append(f"ranked below the max_docs={res.metadata['effective_options'].max_docs} cut")
        summary = f"{cid} was not retrieved: {reasons[-1]}. " + self._explain(rel, None)
        return RetrievalExplanation(query, cid, False, summary, reasons, rel)
