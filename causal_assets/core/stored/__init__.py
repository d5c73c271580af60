"""What the stages read back from storage: a corpus's materialized artifacts (`artifacts`), tuned configurations by
version (`tuned`), model folders written whole (`models`), and the rule that keeps the last fit when its inputs are
the same (`reuse`)."""
