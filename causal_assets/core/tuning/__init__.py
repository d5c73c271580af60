"""Parameter search on a benchmark's train split: the hybrid fusion-weight sweep (`fusion`), the search over every
tunable retriever (`search`) and the versioned store of the winning configurations (`store`)."""
from causal_assets.core.tuning.fusion import best_weight, sweep_fusion_weight  # noqa: F401
