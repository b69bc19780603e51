"""The errors a run reports to the user as one line, without a traceback: what happened, with its facts.

Each says what happened, and is raised by the code that knows it:

- :class:`ConfigError`: the command is refused before it starts (a bad key or value: :attr:`~ConfigError.key`,
  :attr:`~ConfigError.value`, what is allowed); :class:`DataNotFoundError`, a data set that cannot be had;
  :class:`CommandRefused`, a command refused by train.py's checks, in their words;
- :class:`DamagedFileError`: a file the run reads back (a sample, a checkpoint, a manifest, a run's config or
  metrics) cannot be read or is not what its record says (:attr:`~DamagedFileError.path`);
- :class:`DivergenceError`: the loss became NaN or infinite (:attr:`~DivergenceError.loss`, the epoch, ...);
- :class:`Preempted`: a signal stopped the run (:attr:`~Preempted.signum`, :attr:`~Preempted.phase`, whether its
  checkpoint was written); :class:`Interrupted`: Ctrl-C, naming the phase it stopped.

Every one of them is an :class:`EndsRun`: :attr:`EndsRun.before_start` says whether it ended the command before
the run started (before :class:`csg.engine.rundir.RunDirectory` accepted it: nothing in the run directory was
changed). RunDirectory, which knows, records it (:func:`ended_before_start`); a file-system error that ends a
command there becomes a :class:`FileSystemFailure` (an ``OSError`` with the same errno, message and file). The
lines and exit codes are written in one place, :mod:`csg.launch.messages`.
"""

from __future__ import annotations

import signal
from pathlib import Path


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (library messages span many lines), or its type's name if it has none."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def describe(error: BaseException, limit: int | None = None) -> str:
    """``Type: first line`` of ``error`` (the line cut at ``limit`` characters), or ``Type`` if it has no message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:limit]}" if lines else type(error).__name__


class EndsRun:
    """What an error that ends a run knows of that run, as typed fields (a base of every error below).

    :attr:`before_start`: it ended the command before the run started (the run directory is as it was), set by
    :class:`csg.engine.rundir.RunDirectory` through :func:`ended_before_start`. :attr:`phase`: where a stop came
    (``None``: the training loop, or not a stop)."""

    before_start: bool = False
    phase: str | None = None


class CsgError(EndsRun, Exception):
    """Base class of the errors that end a run with a one-line message (and :attr:`exit_code`)."""

    exit_code = 1


class ConfigError(CsgError, ValueError):
    """Bad input, found before any training: names the config key and what is allowed."""

    exit_code = 2

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r} is not allowed: {allowed}")

    def __reduce__(self):
        """Pickled as its class, message and fields (a refusal raised in a worker process reaches its parent)."""
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(kind: type, args: tuple, state: dict) -> Exception:
    error = Exception.__new__(kind)
    error.args = args
    error.__dict__.update(state)
    return error


class DataNotFoundError(ConfigError):
    """A data set that is neither on disk nor downloadable."""

    def __init__(self, key: str, value, message: str):
        self.key, self.value, self.allowed = key, value, message
        CsgError.__init__(self, f"{key}={value!r}: {message}")


class CommandRefused(ConfigError):
    """A command train.py would refuse before starting: the message is train.py's line (without ``error:``);
    :attr:`key` names what was refused (an override's key, or ``overrides``: the command as a whole, refused by
    train.py's checks), :attr:`value` its value where one is known."""

    def __init__(self, message: str, *, key: str, value=None):
        self.key, self.value, self.allowed = key, value, message
        CsgError.__init__(self, message)


class DamagedFileError(ConfigError):
    """A file a run reads back (a sample, a checkpoint, a manifest, a run's config or metrics) that cannot be read,
    or is not what its record says (replaced, truncated, another program's file).

    :attr:`path`: the file (default: ``value``, where the key's value is the file); :attr:`key` and
    :attr:`value`: the setting that led to it (``samples``, ``trainer.checkpoint.resume``, ...), as a
    :class:`ConfigError` names them. A ConfigError (exit 2, the same line), so that whoever catches bad input
    catches it too: it is found before the run changes anything."""

    def __init__(self, key: str, value, allowed: str, *, path=None):
        self.path = Path(path if path is not None else value)
        super().__init__(key, value, allowed)


class DivergenceError(CsgError):
    """The loss became NaN or infinite during training: :attr:`loss`, and where and at what step size
    (:attr:`epoch` counted from 1, :attr:`iteration`, :attr:`lr`, :attr:`chain` counted from 0; ``None`` where
    the raiser does not know it)."""

    def __init__(self, message: str, *, loss: float | None = None, epoch: int | None = None,
                 iteration: int | None = None, lr: float | None = None, chain: int | None = None):
        self.loss, self.epoch, self.iteration, self.lr, self.chain = loss, epoch, iteration, lr, chain
        super().__init__(message)


class Preempted(EndsRun, BaseException):
    """A signal asked the run to stop: after a checkpoint of the step it came in (``phase`` None: the training
    loop; :attr:`checkpointed`), or at once, in ``phase`` (the words of :mod:`csg.engine.checkpoint`'s
    ``PREPARING``, ``STARTING``, ``EVALUATING``, ...). :attr:`signum`: the signal; :attr:`previous_handler`: the
    handler it goes back to (:func:`csg.engine.checkpoint.let_signal_act`).

    A ``BaseException``, as ``KeyboardInterrupt``: raised inside a user's data set or model (a signal while
    the data are read), no ``except Exception`` on its way turns it into another error."""

    def __init__(self, signum: int, previous_handler, phase: str | None = None):
        self.signum, self.previous_handler, self.phase = signum, previous_handler, phase
        self.checkpointed = phase is None
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} after saving a checkpoint" if phase is None
                         else f"stopped by {name} {phase}")


class Interrupted(EndsRun, KeyboardInterrupt):
    """Ctrl-C stopped the run in :attr:`phase` (the words of :mod:`csg.engine.checkpoint`, or ``None``): a
    ``KeyboardInterrupt``, raised from the one it replaces."""

    def __init__(self, phase: str | None = None, *, before_start: bool = False):
        self.phase, self.before_start = phase, before_start
        super().__init__()


class FileSystemFailure(EndsRun, OSError):
    """A file-system error (a full disk, a read-only file system, a path that is a file) that ended a command
    before its run started: an ``OSError`` with the errno, message and file of the one it replaces."""


def ended_before_start(error: BaseException) -> BaseException:
    """``error``, recorded as having ended its command before the run started (by
    :class:`csg.engine.rundir.RunDirectory`, leaving a run it did not accept): an :class:`EndsRun` gets
    :attr:`~EndsRun.before_start`; a ``KeyboardInterrupt`` becomes an :class:`Interrupted`, an ``OSError`` a
    :class:`FileSystemFailure` (raise it from ``error``); any other error is returned as it is (not one of the
    stops the protocol reports: its traceback shows)."""
    if isinstance(error, EndsRun):
        error.before_start = True
        return error
    if isinstance(error, KeyboardInterrupt):
        return Interrupted(before_start=True)
    if isinstance(error, OSError):
        if error.filename is not None:  # (errno, message, file, -, second file): OSError's own form, same line
            failure = FileSystemFailure(error.errno, error.strerror, error.filename, None, error.filename2)
        else:
            failure = FileSystemFailure(*error.args)
        failure.before_start = True
        return failure
    return error


def before_start(error: BaseException) -> bool:
    """Whether ``error`` ended its command before the run started (:func:`ended_before_start`)."""
    return isinstance(error, EndsRun) and error.before_start
