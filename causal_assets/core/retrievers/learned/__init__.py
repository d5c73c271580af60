"""Learned retrieval: the causal-relevance model and its retriever (`retriever`), and the candidate features it
is trained on (`features`)."""
