"""Partition definitions shared by the stage modules."""
from dagster import StaticPartitionsDefinition

from causal_assets.core.corpus.registry import available_corpora

# One partition per registered corpus whose data is present; `default` is always there.
corpus_partitions = StaticPartitionsDefinition(available_corpora())
