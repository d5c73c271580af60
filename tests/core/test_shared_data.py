"""Shared test data: tests find the shared data through the settings' `shared_data` (../shared/data or
CAUSAL_ASSETS_SHARED_DATA), never a path of one machine, and a missing data set fails under CI instead of
skipping silently."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from causal_assets.settings import Settings
from tests import conftest

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_hard_codes_a_shared_data_path():
    offenders = []
    for f in TESTS.rglob("*.py"):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""["'](/work|/home|/Users)/[^"']*shared""", line):
                offenders.append(f"{f.relative_to(TESTS)}:{i}")
    assert offenders == []


def test_shared_data_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CAUSAL_ASSETS_SHARED_DATA", str(tmp_path))
    assert Settings.from_env().shared_data == tmp_path


def test_missing_data_skips_locally_and_fails_in_ci(monkeypatch, tmp_path):
    missing = tmp_path / "nope.jsonl"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        conftest.require(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run every test"):
        conftest.require(missing)
    present = tmp_path / "here.jsonl"
    present.write_text("{}")
    assert conftest.require(present) == present
