"""The lock of a run directory's one writer (:class:`RunLock`): ``fcntl.flock`` on ``<run_dir>/.lock``, with its
holder's record (pid, host, start time, command) in the file. What the run directory does with it:
:mod:`csg.engine.rundir`."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import sys
import time
from datetime import datetime
from pathlib import Path

from csg.errors import ConfigError

LOCK = ".lock"  # the lock file of the run directory's one writer (RunLock)

_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}  # flock unsupported here


class RunLock:
    """The lock of the run directory's one writer: ``fcntl.flock`` on ``<run_dir>/.lock``.

    :meth:`acquire` takes it without waiting, and records the holder (pid, host, start time, command) in the
    file; held by another process, it raises the one-line :class:`ConfigError` naming that holder, having
    changed nothing. :meth:`release` gives it back: ``remove=True`` removes the file (a command that ran),
    else the directory is left as it was before :meth:`acquire` (a refused command: a file it made removed,
    a stale one left behind by a crash put back byte for byte, with its times). Locks belong to the open file,
    so a second lock of the same directory in the same process is refused too.
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK
        self.held = False
        self._fd: int | None = None
        self._before: tuple[bytes, os.stat_result] | None = None  # a stale lock file's content and times

    def acquire(self) -> bool:
        """Take the lock: True; False where the file system has no locks (logged as a warning, nothing kept)."""
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # a planted link or FIFO: never followed
        for _ in range(100):  # a holder removing the file between our open and flock: open the new one
            try:
                fd, made = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                try:
                    fd, made = os.open(self.path, flags), False
                except FileNotFoundError:
                    continue
                except OSError as error:  # a symbolic link (ELOOP), a folder (EISDIR), ...
                    raise self._not_a_lock(error.strerror) from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise self._not_a_lock("it is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    raise self.refusal(fd) from None
                finally:
                    os.close(fd)
            except OSError as error:
                os.close(fd)
                if made:
                    self.path.unlink(missing_ok=True)
                if error.errno not in _NO_LOCKS:
                    raise
                logging.getLogger(__name__).warning(
                    "%s cannot be locked (%s: the file system has no locks): this run goes on, but a second "
                    "train.py in %s would not be refused", self.path, errno.errorcode.get(error.errno, error.errno),
                    self.path.parent)
                return False
            if not _same_file(fd, self.path):  # the holder removed it after our open: ours is not the lock
                os.close(fd)
                continue
            self._fd, self.held = fd, True
            if not made:
                self._before = (_read_all(fd), os.fstat(fd))
            _rewrite(fd, json.dumps(_holder()).encode())
            return True
        raise ConfigError("hydra.run.dir", str(self.path.parent), f"a run directory whose lock file {self.path} stays "
                          "in place: it was removed 100 times while this command tried to take it")

    def release(self, *, remove: bool) -> None:
        """Give the lock back; ``remove``: remove the lock file, else leave the directory as :meth:`acquire`
        found it."""
        if self._fd is None:
            return
        try:
            if remove or self._before is None:
                self.path.unlink(missing_ok=True)  # while held: no other process holds this file
            else:
                content, before = self._before
                _rewrite(self._fd, content)
                os.utime(self._fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)  # at once, even where a forked child still has the file open
            os.close(self._fd)
            self._fd, self.held = None, False

    def refusal(self, fd: int) -> ConfigError:
        """The one-line error of a command refused because another process holds the lock (``fd``: the file open)."""
        return ConfigError("hydra.run.dir", str(self.path.parent),
                           f"a run directory no other run is writing: {_holder_in(fd)} holds its lock {self.path}; "
                           "wait for that run to end, or use another hydra.run.dir")

    def _not_a_lock(self, why: str) -> ConfigError:
        return ConfigError("hydra.run.dir", str(self.path.parent),
                           f"a run directory whose lock file {self.path} is a regular file: {why}")


def _holder_in(fd: int) -> str:
    """Who holds the lock, in words, from what the holder wrote into the file."""
    record = None
    for _ in range(40):  # the holder writes itself in just after taking the lock
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"null")
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            return (f"{record.get('program', '?')} (pid {record.get('pid', '?')} on host {record.get('host', '?')}, "
                    f"started {record.get('started', '?')})")
        time.sleep(0.025)
    return "another process (it has not written who it is)"


def _holder() -> dict[str, object]:
    """What the lock file says of its holder: program, pid, host, start time, command line."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] not in ("", "-c", "-") else "python"
    return {"program": program, "pid": os.getpid(), "host": socket.gethostname(),
            "started": datetime.now().astimezone().isoformat(sep=" ", timespec="seconds"),
            "command": " ".join([program, *sys.argv[1:]])[:1000]}


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _rewrite(fd: int, content: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, content, 0)
    os.fsync(fd)
