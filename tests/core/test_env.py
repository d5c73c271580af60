"""Environment settings name the variable and the bad value."""
import pytest

from causal_assets.core.env import positive_int
from causal_assets.core.errors import ConfigError


def test_positive_int(monkeypatch):
    monkeypatch.delenv("CA_TEST_N", raising=False)
    assert positive_int("CA_TEST_N", 4) == 4
    monkeypatch.setenv("CA_TEST_N", " 8 ")
    assert positive_int("CA_TEST_N", 4) == 8
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("CA_TEST_N", bad)
        with pytest.raises(ConfigError, match=f"CA_TEST_N='{bad}': expected a positive integer"):
            positive_int("CA_TEST_N", 4)
