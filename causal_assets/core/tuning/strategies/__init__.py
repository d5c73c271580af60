"""How the tuner searches each kind of retriever (`kinds.Kind.tuning`): one function per strategy, called with the
run's `TuningContext` and the kind's name."""
