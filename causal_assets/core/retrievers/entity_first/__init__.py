"""Entity-first retrieval: the retriever (`retriever.EntityFirstRetriever`), the ranker that orders a question's
candidates by the entities they cover (`ranker`), and the LLM-backed query entity extractor (`llm_entities`)."""
