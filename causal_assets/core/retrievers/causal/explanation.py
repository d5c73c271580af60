"""The text of a causal retrieval's explanation: what removing the document does to the answer, the bits it removes
and the chain that links it to the query, read from the measurements alone (there are no hand-written cause rules)."""
from __future__ import annotations

from typing import Callable

from causal_assets.core.retrievers.causal.results import CausalRelevance


def explain(r: CausalRelevance, rank: int | None, answer_location: Callable[[str, str], str],
            entropy_is_surprisal: bool) -> str:
    """The explanation of `r` at `rank` (None: not retrieved), from its measurements only; `answer_location`
    (chunk id, answer) names the line the answer comes from, or "" when it cannot."""
    cid = r.document.chunk_id
    parts = [f"{cid}" + (f" ranked {rank}" if rank else "") + f" (causal relevance {r.relevance_score:.2f})."]
    cf = r.counterfactual_impact
    if cf.would_change_answer:
        without = f'"{cf.answer_without[:120]}"' if cf.answer_without else "no answer"
        parts.append(f"Removing it changes the answer ({cf.change_type.replace('_', ' ')}, {cf.change_severity}, "
                     f"p={cf.change_prob:.2f}): with it \"{cf.answer_with[:120]}\", without it {without}.")
        where = answer_location(cid, cf.answer_with)
        if where:
            parts.append(f"That answer comes from {where}.")
    elif cf.change_type == "confidence_change":
        parts.append(f"Removing it keeps the answer \"{cf.answer_with[:120]}\" but lowers confidence "
                     f"(p={cf.change_prob:.2f}).")
    else:
        parts.append("Removing it does not change the answer.")
    ic = r.information_contribution
    what = "the question's surprisal" if entropy_is_surprisal else "answer entropy"
    parts.append(f"It reduces {what} by {ic.mutual_information:.2f} bits on its own; "
                 f"information gain {ic.information_gain:.2f} bits, redundancy {ic.redundancy:.2f} bits.")
    if r.causal_chain:
        chain = " -> ".join([r.causal_chain[0].from_node.label[:40]] +
                            [f"[{l.relationship}] {l.to_node.label}" for l in r.causal_chain])
        parts.append(f"Causal chain (strength {r.chain_strength:.2f}): {chain}.")
    else:
        parts.append("No graph chain links it to the query's entities.")
    return " ".join(parts)
