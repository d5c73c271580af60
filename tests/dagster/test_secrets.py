"""The LLM API key never reaches Dagster logs, materialization metadata or Parquet (issue: secrets only via EnvVar)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dagster import DagsterInstance, materialize

from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from causal_assets.defs.labels import candidate_pools, mc_labels, mc_trials
from causal_assets.resources import llm_from_settings
from causal_assets.settings import Settings
from tests.helpers.endpoint import FakeOpenAI

SECRET = "sk-live-NeverLogThis0123456789abcdef"


@pytest.mark.slow
def test_api_key_stays_out_of_logs_metadata_and_parquet(resources, tmp_path, monkeypatch):
    monkeypatch.setenv("CAUSAL_ASSETS_LLM_API_KEY", SECRET)
    monkeypatch.setenv("CAUSAL_ASSETS_LLM_MODEL", "fake-model")
    # A careless server that reflects the Authorization header in its errors (three times: more than the retries, so
    # an errored call with the server's message is journalled and stored), then answers.
    with FakeOpenAI(script=["echo_auth_500"] * 3) as server, DagsterInstance.ephemeral() as instance:
        monkeypatch.setenv("CAUSAL_ASSETS_LLM_BASE_URL", server.url)
        settings = Settings.from_env()
        assert SECRET not in repr(settings)  # the settings know that a key is set, never its value
        # The resource as the code location builds it: the key is read through EnvVar when the step starts.
        llm = llm_from_settings(settings, cache_path=str(tmp_path / "calls.sqlite"), max_retries=2)
        res = {**resources, "llm": llm}
        upstream = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges]
        assert materialize(upstream, resources=res, partition_key="hotpotqa", instance=instance).success
        result = materialize(upstream + [candidate_pools, mc_trials, mc_labels], resources=res, instance=instance,
                             partition_key="hotpotqa", selection=[candidate_pools, mc_trials, mc_labels],
                             run_config={"ops": {"candidate_pools": {"config": {"max_questions": 1, "size": 4}},
                                                 "mc_trials": {"config": {"budget": 8, "outcome": "success"}},
                                                 "mc_labels": {"config": {"budget": 8, "outcome": "success"}}}})
        assert result.success
        assert all(r["auth"] == f"Bearer {SECRET}" for r in server.requests)  # the key was really used
        logs = "\n".join(str(e) for e in instance.all_logs(result.run_id))
        metadata = "\n".join(str(e.materialization.metadata) for e in result.get_asset_materialization_events())
    assert SECRET not in logs and SECRET not in metadata
    import pandas as pd

    calls = pd.read_parquet(f"{resources['storage'].base_path}/solver_calls/hotpotqa.parquet")
    assert (calls["status"] == "error").sum() == 1  # the reflected-key error really was recorded (redacted)
    for f in Path(resources["storage"].base_path).rglob("*.parquet"):
        assert SECRET.encode() not in f.read_bytes(), f
    assert SECRET.encode() not in (tmp_path / "calls.sqlite").read_bytes()
