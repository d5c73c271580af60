"""What the tuning stages write about a fit, and what a later read accepts as intact (core/tuning/records.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from causal_assets.core.foundation.storage import write_parquet_atomic
from causal_assets.core.tuning.records import (ENCODER_COLUMNS, RERANKER_COLUMNS, kept_encoder, kept_tuning,
                                               reranker_intact, unfitted)


def test_an_unfitted_record_says_why_in_the_stage_s_columns():
    record = unfitted(RERANKER_COLUMNS, "b", "no tune split", version="")
    assert list(record.columns) == RERANKER_COLUMNS and record["adopted"].dtype == bool
    assert record.iloc[0][["benchmark", "reason", "version"]].tolist() == ["b", "no tune split", ""]


def test_an_encoder_record_that_adopted_nothing_is_kept_with_no_vectors(tmp_path):
    record = unfitted(ENCODER_COLUMNS, "b", "within the margin").assign(
        held_out_by_weight=json.dumps({"base": {"0.5": 0.7}}))
    vectors = tmp_path / "tuned_embeddings" / "b.parquet"
    write_parquet_atomic(pd.DataFrame({"chunk_id": []}), vectors)
    kept = kept_encoder(record, tmp_path / "tuned_encoder" / "b.parquet", vectors, tmp_path / "model", 3)
    assert kept is not None and kept[1].empty and kept[2] == {"base": {"0.5": 0.7}}
    # its vectors table gone, or figures that are not JSON (a record this stage did not write): fitted again
    assert kept_encoder(record, tmp_path / "x.parquet", tmp_path / "absent.parquet", tmp_path / "model", 3) is None
    with pytest.raises(ValueError):
        kept_encoder(record.assign(held_out_by_weight="{not json"), tmp_path / "x.parquet", vectors,
                     tmp_path / "model", 3)


def test_an_adopted_reranker_is_intact_only_with_all_its_members(tmp_path):
    record = unfitted(RERANKER_COLUMNS, "b", "beyond the margin").assign(adopted=True)
    (tmp_path / "member-0").mkdir()
    (tmp_path / "member-0" / "config.json").write_text("{}")
    assert reranker_intact(record, tmp_path, 1) and not reranker_intact(record, tmp_path, 2)
    assert reranker_intact(record.assign(adopted=False), tmp_path, 2)


def test_trials_of_several_configurations_are_not_kept(tmp_path):
    trials = pd.DataFrame({"config_version": ["a", "b"]})
    assert kept_tuning(trials, Path(tmp_path), "b") is None
    assert kept_tuning(trials.iloc[:1], Path(tmp_path), "b") is None   # its configuration file is not there
