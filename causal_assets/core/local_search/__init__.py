"""Local search over the entity graph (GraphRAG-style): a question is mapped to entities, their relationships,
text units and community reports fill a token-budgeted context, and a local model writes a causal analysis report
and the answer. The user-facing asset and files keep the name `causal_search`."""
