"""Errors a user can act on: each names the file, line or field and the offending value."""


class CausalAssetsError(Exception):
    """Base class for bad input detected by causal_assets."""


class CorpusError(CausalAssetsError):
    """A corpus source is missing, empty or malformed."""


class ConfigError(CausalAssetsError):
    """A registry or configuration file is invalid."""
