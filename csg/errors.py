"""The errors a run reports to the user as one line, without a traceback."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (library messages span many lines), or its type's name if it has none."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def describe(error: BaseException, limit: int | None = None) -> str:
    """``Type: first line`` of ``error`` (the line cut at ``limit`` characters), or ``Type`` if it has no message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:limit]}" if lines else type(error).__name__


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
