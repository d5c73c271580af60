"""Asset checks, wired in-op: each stage yields the result of `core.checks` on the exact partition it has just
written. Blocking checks stop downstream steps of the run when a table would poison them (a stale embedding, a
posting pointing at a missing chunk, a pool with unknown documents); the others are reported in the UI."""
from dagster import AssetCheckResult, AssetCheckSpec

from causal_assets.core.outputs.checks import CheckOutcome


def spec(asset: str, name: str, description: str, blocking: bool = True) -> AssetCheckSpec:
    return AssetCheckSpec(name, asset=asset, blocking=blocking, description=description)


def check_result(asset: str, name: str, outcome: CheckOutcome) -> AssetCheckResult:
    return AssetCheckResult(check_name=name, asset_key=asset, passed=outcome.passed, metadata=outcome.metadata)
