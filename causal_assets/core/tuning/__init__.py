"""Parameter search on a benchmark's train split: the hybrid fusion-weight sweep (`fusion`), the search over every
tunable retriever (`search`) and the versioned store of the winning configurations (`store`)."""
