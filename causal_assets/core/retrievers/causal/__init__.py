"""Causal retrieval: documents ranked by how much they change the answer (`retriever.CausalRetriever`), the answer
models it asks (`answer_model`) and the documented cause rules (`causes`)."""
