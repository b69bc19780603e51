"""The errors a run reports to the user as one line, without a traceback."""

from __future__ import annotations


class CsgError(Exception):
    """Base class of the errors that end a run with a one-line message."""

    exit_code = 1


class ConfigError(CsgError, ValueError):
    """Bad input, found before any training: names the config key and what is allowed."""

    exit_code = 2

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r} is not allowed: {allowed}")


class DataNotFoundError(ConfigError):
    """A data set that is neither on disk nor downloadable."""

    def __init__(self, key: str, value, message: str):
        self.key, self.value, self.allowed = key, value, message
        CsgError.__init__(self, f"{key}={value!r}: {message}")


class DivergenceError(CsgError):
    """The loss became NaN or infinite during training."""
