"""The last fit is kept for the same inputs version and fitted again otherwise (`core.stored.reuse.reuse_or_fit`),
and a model folder is renamed into place only when its fit was adopted (`core.stored.models.fit_into`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from causal_assets.core.stored.models import fit_into
from causal_assets.core.stored.reuse import reuse_or_fit
from causal_assets.core.foundation.storage import write_parquet_atomic

COLUMNS = ["benchmark", "version", "model"]


class Fits:
    """A fit that counts its calls and writes a model file the record names."""

    def __init__(self, models: Path):
        self.calls, self.models = 0, models

    def __call__(self) -> str:
        self.calls += 1
        self.models.mkdir(parents=True, exist_ok=True)
        (self.models / "weights.bin").write_bytes(b"w")
        return "fitted"


def kept_if_model(models: Path):
    return lambda table: "kept" if (models / table["model"].iloc[0]).is_file() else None


@pytest.fixture
def stored(tmp_path):
    record = tmp_path / "record.parquet"
    write_parquet_atomic(pd.DataFrame([{"benchmark": "b", "version": "v1", "model": "weights.bin"}]), record)
    fit = Fits(tmp_path / "models")
    fit()
    fit.calls = 0
    return record, fit


def test_the_same_version_with_its_files_intact_is_kept_without_a_fit(stored):
    record, fit = stored
    assert reuse_or_fit(record, "v1", fit, kept_if_model(fit.models), columns=COLUMNS) == ("kept", True)
    assert fit.calls == 0


def test_another_version_a_missing_record_or_refit_fits_again(stored, tmp_path):
    record, fit = stored
    assert reuse_or_fit(record, "v2", fit, kept_if_model(fit.models)) == ("fitted", False)
    assert reuse_or_fit(tmp_path / "absent.parquet", "v1", fit, kept_if_model(fit.models)) == ("fitted", False)
    assert reuse_or_fit(record, "v1", fit, kept_if_model(fit.models), refit=True) == ("fitted", False)
    assert fit.calls == 3


def test_a_missing_model_file_fits_again(stored):
    record, fit = stored
    (fit.models / "weights.bin").unlink()
    assert reuse_or_fit(record, "v1", fit, kept_if_model(fit.models)) == ("fitted", False)


def test_a_table_this_stage_did_not_write_fits_again_rather_than_fails(stored, tmp_path):
    record, fit = stored
    # other columns, no version column, an empty table, several versions, a value the reader cannot parse
    assert reuse_or_fit(record, "v1", fit, kept_if_model(fit.models), columns=["benchmark", "version"])[1] is False
    assert reuse_or_fit(record, "v1", fit, kept_if_model(fit.models), column="inputs_version")[1] is False
    empty = tmp_path / "empty.parquet"
    write_parquet_atomic(pd.DataFrame(columns=COLUMNS), empty)
    assert reuse_or_fit(empty, "v1", fit, kept_if_model(fit.models))[1] is False
    mixed = tmp_path / "mixed.parquet"
    write_parquet_atomic(pd.DataFrame([{"version": "v1"}, {"version": "v2"}]), mixed)
    assert reuse_or_fit(mixed, "v1", fit, lambda table: "kept")[1] is False

    def unparsable(table):
        raise ValueError("not JSON")
    assert reuse_or_fit(record, "v1", fit, unparsable) == ("fitted", False)
    assert fit.calls == 5


@dataclass
class Result:
    adopted: bool


def test_a_model_folder_is_renamed_into_place_only_when_adopted(tmp_path):
    target = tmp_path / "encoder-v1"

    def writes(adopted: bool):
        def fit(partial: Path) -> Result:
            (partial / "config.json").write_text(str(adopted))
            return Result(adopted)
        return fit

    assert not fit_into(target, writes(False)).adopted and not target.exists()
    assert fit_into(target, writes(True)).adopted and (target / "config.json").read_text() == "True"
    # a rejected fit leaves the adopted folder whole, and no partial directory behind
    fit_into(target, writes(False))
    assert (target / "config.json").read_text() == "True"
    assert [p.name for p in tmp_path.iterdir()] == ["encoder-v1"]


def test_reused_entries_are_linked_in_and_the_target_itself_never_written(tmp_path):
    target = tmp_path / "reranker-v1"
    (target / "member-0").mkdir(parents=True)
    (target / "member-0" / "weights.bin").write_bytes(b"first")

    def fit(partial: Path) -> Result:
        assert (partial / "member-0" / "weights.bin").read_bytes() == b"first"
        (partial / "member-1").mkdir()
        (partial / "member-1" / "weights.bin").write_bytes(b"second")
        return Result(True)

    fit_into(target, fit, reuse=("member-0",))
    assert sorted(p.name for p in target.iterdir()) == ["member-0", "member-1"]
