"""Text utilities shared by the indexes, the graph, the retrievers and the labelling: the analyzer (index terms),
rule-based entity extraction, entity keys and title matching, and answer normalisation."""
