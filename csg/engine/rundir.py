"""The run directory: what a run may find in it, and what a refused command leaves in it (nothing).

A run directory lives on a shared file system and outlives the command that made it, so:

- Hydra writes its record of the command (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``) into
  ``.hydra.pending/`` (``hydra.output_subdir`` in ``configs/config.yaml``), and the log file is opened only
  when a record is written (``delay: true``). :class:`RunDirectory` holds the log records back until the
  command is accepted: :meth:`RunDirectory.accept` (every check passed, training starts) moves the record to
  ``.hydra/`` and writes the held log; a command that ends before that (a refusal, Ctrl-C while building)
  removes ``.hydra.pending/`` and drops the held records. An earlier run's ``.hydra/``, log and results are
  never touched by a refused command, and a refused command in a new directory leaves none behind.
- :func:`earlier_results` lists what an earlier run left (samples, metrics, checkpoints, traces, CSV logs):
  a run that does not resume from that run's checkpoint never mixes them into its own ensemble. A run with
  ``trainer.checkpoint.resume=false`` moves them, with the earlier ``.hydra/``, into ``earlier/<time>/``
  (:meth:`RunDirectory.accept`), where they stay a complete run directory; any other run refuses them
  (:func:`refuse_earlier_results`).
- **One writer**: :class:`~csg.engine.runlock.RunLock` (``fcntl.flock`` on ``.lock`` in the run directory), taken by
  :meth:`RunDirectory.lock` before the command checks or writes anything of its own. A second command in a
  directory whose lock is held is refused in one line naming the holder (pid, host, start time, command, as
  the holder wrote them into the lock file), and changes nothing. Under torchrun / SLURM tasks only global
  rank 0 takes it; the other processes are the same run, and learn rank 0's answer (a refusal, on every
  process). The kernel drops the lock when its process ends, however it ends (a crash, ``kill -9``): a lock
  file left behind is stale, and the next command takes it over. A finished command removes the file.
  On a file system without locks (an NFS mount without ``lockd``, some FUSE file systems: ``flock`` fails
  with ENOLCK, EOPNOTSUPP, ...) the run goes on unlocked and logs a warning saying a second writer would not
  be refused; on NFS mounted ``nolock`` / ``local_lock=flock`` the lock holds only among the processes of
  one host. Hydra's record goes into ``.hydra.pending-<pid>/``, a folder of this process's own, so a
  command refused by the lock never touches the record of the run that holds it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import shutil
from datetime import datetime
from pathlib import Path

from csg.engine.runlock import LOCK, RunLock
from csg.errors import ConfigError, ended_before_start
from csg.reporting import EARLIER

PENDING = ".hydra.pending"  # + "-<pid>": where Hydra writes this command's record (configs/config.yaml)
RECORD = ".hydra"  # the record of the run whose results the directory holds

_RESULT_GLOBS = ("samples", "metrics.json", "checkpoint*.pt", "trace.pt", "evaluation_*.json", "epochs.csv",
                 "steps.csv", "wandb")


_ABSENT: set[Path] = set()  # folders a checked command's run directory would make (remember_absent)


def remember_absent(run_dir: str | Path) -> None:
    """Note the folders above ``run_dir`` (and itself) that do not exist yet, as the command's checks see them
    before Hydra makes them: a run refused before it starts removes those it leaves empty (``runs/<date>/``), not
    only its own directory. Each command's checks begin anew (:func:`forget_absent`)."""
    path = Path(run_dir).resolve()
    _ABSENT.update(folder for folder in [path, *path.parents] if not folder.exists())


def forget_absent() -> None:
    _ABSENT.clear()


def pending_name() -> str:
    """The folder (in the run directory) where Hydra writes this process's record of its command:
    ``.hydra.pending-<pid>`` (``hydra.output_subdir``, through the ``csg_pending`` resolver)."""
    return f"{PENDING}-{os.getpid()}"


def hydra_output_dir() -> Path:
    """The run directory Hydra made for this job (``hydra.run.dir``, or a sweep's job folder)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def earlier_results(run_dir: str | Path) -> list[str]:
    """The names of the entries of ``run_dir`` that an earlier run wrote (a samples folder counts only when it
    holds a sample), sorted."""
    run_dir = Path(run_dir)
    found = set()
    for pattern in _RESULT_GLOBS:
        for path in run_dir.glob(pattern):
            if path.name == "samples" and not any(path.glob("**/sample_*.pt")):
                continue
            found.add(path.name)
    return sorted(found)


_CSG_KEYS = {"sampler", "data", "model", "trainer"}   # a csg run's record (config.yaml) has them all


def foreign_entries(run_dir: str | Path) -> list[str]:
    """What in an existing ``run_dir`` csg did not write, sorted (empty: a new or empty folder, or one of csg's
    run folders). A folder is csg's when its ``.hydra/config.yaml`` is a csg run's record (read within the limits
    of :func:`csg.reporting.read_yaml`); without one, only this command's own makings may be there: a
    ``.hydra.pending-*`` folder and a lock file csg wrote (its holder's record)."""
    from csg.reporting import read_yaml

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    record = run_dir / RECORD / "config.yaml"
    if record.is_file():
        try:
            config = read_yaml(record)
        except Exception:  # noqa: BLE001 - unreadable, too large, not YAML: not csg's record
            config = None
        keys = set(config.keys()) if hasattr(config, "keys") else set()
        if _CSG_KEYS <= keys or "synthetic" in keys:
            return []
    foreign = []
    for entry in run_dir.iterdir():
        if entry.name.startswith(PENDING) or (entry.name == LOCK and _is_csg_lock(entry)):
            continue
        foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    return sorted(foreign)


def _is_csg_lock(path: Path) -> bool:
    """A lock file csg wrote: a regular file holding its holder's record (``pid``, ``host``, ...), or empty (taken,
    not yet written)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 4096:
            return False
        text = path.read_bytes()
        return not text or {"pid", "host"} <= set(json.loads(text))
    except (OSError, ValueError, TypeError):
        return False


def refuse_earlier_results(run_dir: str | Path, found: list[str], why: str) -> ConfigError:
    """The one-line error for a run that would mix ``found`` (an earlier run's results) into its own."""
    listed = ", ".join(f"{name}/" if (Path(run_dir) / name).is_dir() else name for name in found)
    return ConfigError(
        "hydra.run.dir", str(run_dir),
        f"a directory without another run's results: it holds {listed} {why}; use a new hydra.run.dir, or set "
        f"trainer.checkpoint.resume=false to move them into {Path(run_dir) / EARLIER}/<time>/ and start over",
    )


class RunDirectory:
    """One command's use of its run directory: logs held back and Hydra's record staged until :meth:`accept`.

    ``leader``: the process that writes the directory (global rank 0), its log and its lock; the others hold
    nothing. Use as a context manager around everything the command does, and call :meth:`lock` first thing;
    leaving it before :meth:`accept` undoes what the command wrote (see the module's docstring), and leaving
    it gives the lock back. An error that leaves it before :meth:`accept` ended the command before the run started:
    it is recorded so (:func:`csg.errors.ended_before_start`: :attr:`csg.errors.EndsRun.before_start`, Ctrl-C as
    :class:`csg.errors.Interrupted`, a file-system error as :class:`csg.errors.FileSystemFailure`).
    """

    def __init__(self, path: str | Path, *, leader: bool = True):
        self.path, self.leader = Path(path), leader
        self.accepted = False
        self._held: list[tuple[logging.handlers.MemoryHandler, logging.Handler]] = []
        self._lock: RunLock | None = None
        self._made: list[Path] = []  # folders lock() made for the lock file (a run_dir given outside Hydra)

    def __enter__(self) -> "RunDirectory":
        root = logging.getLogger()
        for index, handler in enumerate(root.handlers if self.leader else []):  # the others log no file
            if isinstance(handler, logging.FileHandler):
                memory = logging.handlers.MemoryHandler(capacity=1 << 30, flushLevel=logging.CRITICAL + 1,
                                                        target=handler, flushOnClose=False)
                memory.setLevel(handler.level)
                root.handlers[index] = memory
                self._held.append((memory, handler))
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if not self.accepted:
            self._release(write=False)
        if self._lock is not None:
            self._lock.release(remove=self.accepted)
            self._lock = None
        if not self.accepted and self.leader:
            self._discard()
        if not self.accepted and error is not None:
            # it ended the command before the run started, with nothing written: recorded on the error's type
            # (csg.errors.EndsRun.before_start), which csg.launch.messages reads (no log line, how to go on)
            stop = ended_before_start(error)
            if stop is not error:
                raise stop from error

    def lock(self, layout=None) -> None:
        """Become the directory's one writer (:class:`~csg.engine.runlock.RunLock`), before anything is checked or
        written: the leader takes the lock; a :class:`ConfigError` naming the holder if another process has it. Under a
        launcher (``layout``: a :class:`csg.engine.distributed.Layout` of several processes) every process learns the
        leader's answer and raises the same refusal: call it on every process, after the process group is up."""
        refusal: ConfigError | None = None
        if self.leader and self._lock is None:
            lock = RunLock(self.path)
            try:
                self._made = [folder for folder in [self.path, *self.path.parents] if not folder.exists()]
                self.path.mkdir(parents=True, exist_ok=True)
                if lock.acquire():
                    self._lock = lock
            except ConfigError as error:
                refusal = error
            except OSError as error:  # a read-only directory, a full disk: every process must hear of it
                refusal = ConfigError("hydra.run.dir", str(self.path), f"a run directory where {LOCK} can be "
                                      f"written: {error.strerror or error}")
        if layout is not None and getattr(layout, "distributed", False):
            import torch.distributed as dist

            shared = [(refusal.key, refusal.value, refusal.allowed) if refusal is not None else None]
            dist.broadcast_object_list(shared, src=0)
            refusal = ConfigError(*shared[0]) if shared[0] is not None else None
        if refusal is not None:
            raise refusal

    def accept(self, *, move_earlier: list[str] | None = None) -> None:
        """Every check passed: move ``move_earlier`` (names from :func:`earlier_results`) and the earlier
        record aside into ``earlier/<time>/``, make this command's record the directory's, write the held log."""
        if self.accepted:
            return
        if self.leader:
            if move_earlier:
                self._move_aside(move_earlier)
            pending = self.path / pending_name()
            if pending.is_dir():
                record = self.path / RECORD
                if record.exists():
                    shutil.rmtree(record)
                os.replace(pending, record)
        self.accepted = True
        self._release(write=True)

    def _move_aside(self, names: list[str]) -> Path:
        folder = self.path / EARLIER / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        folder.mkdir(parents=True)
        for name in [*names, RECORD]:
            if (self.path / name).exists():
                os.replace(self.path / name, folder / name)
        logging.getLogger(__name__).info("moved the earlier run's %s to %s", ", ".join(names), folder)
        return folder

    def _release(self, *, write: bool) -> None:
        root = logging.getLogger()
        for memory, handler in self._held:
            if memory in root.handlers:
                root.handlers[root.handlers.index(memory)] = handler
            if write:  # the memory handler took only records at the file handler's level
                for record in memory.buffer:
                    handler.handle(record)
            memory.buffer.clear()
        self._held = []

    def _discard(self) -> None:
        """Remove what this command wrote: its staged record, and the directory itself if that leaves it empty
        (with the folders above it that :meth:`lock` made, or that did not exist when the command was checked:
        :func:`remember_absent`)."""
        shutil.rmtree(self.path / pending_name(), ignore_errors=True)
        resolved = self.path.resolve()
        above = [folder for folder in resolved.parents if folder in _ABSENT]  # made by Hydra for this command
        for folder in [self.path, *[made for made in self._made if made != self.path], *above]:
            try:
                folder.rmdir()  # only when empty: the directory was made for this command
            except OSError:
                break
