"""Causal retrieval: documents ranked by how much they change the answer (`retriever.CausalRetriever`) and the
answer models it asks (`answer_model`)."""
