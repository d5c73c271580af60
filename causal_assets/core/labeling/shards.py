"""Question-range shards of a Monte Carlo labelling run, for backfills across processes or machines.

Shard `i` of `n` is the `i`-th contiguous slice of the benchmark's labelling questions, in the pool's (stable)
question order, so "shard 2 of 8" always means the same questions while the candidate pools are unchanged and a
failed shard can be re-run alone.
"""
from __future__ import annotations


def shard_slice(n_questions: int, shard: int, shards: int) -> tuple[int, int]:
    """[start, stop) of shard `shard` of `shards` over `n_questions` questions; sizes differ by at most one."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard {shard} of {shards}: expected 0 <= shard < shards")
    base, extra = divmod(n_questions, shards)
    start = shard * base + min(shard, extra)
    return start, start + base + (1 if shard < extra else 0)


def shard_questions(query_ids: list[str], shard: int, shards: int) -> list[str]:
    start, stop = shard_slice(len(query_ids), shard, shards)
    return query_ids[start:stop]
