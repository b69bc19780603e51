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
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import shutil
from datetime import datetime
from pathlib import Path

from csg.errors import ConfigError

PENDING = ".hydra.pending"  # where Hydra writes this command's record (configs/config.yaml: hydra.output_subdir)
RECORD = ".hydra"  # the record of the run whose results the directory holds
EARLIER = "earlier"  # earlier runs moved aside by resume=false, one folder each

_RESULT_GLOBS = ("samples", "metrics.json", "checkpoint*.pt", "trace.pt", "evaluation_*.json", "epochs.csv",
                 "steps.csv", "wandb")


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

    ``leader``: the process that writes the directory (global rank 0) and its log; the others hold nothing.
    Use as a context manager around everything the command does; leaving it before :meth:`accept`
    undoes what the command wrote (see the module's docstring).
    """

    def __init__(self, path: str | Path, *, leader: bool = True):
        self.path, self.leader = Path(path), leader
        self.accepted = False
        self._held: list[tuple[logging.handlers.MemoryHandler, logging.Handler]] = []

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
            if error is not None:
                error.refused = True  # nothing was written: csg.cli says so, and keeps it out of the log
            self._release(write=False)
            if self.leader:
                self._discard()

    def accept(self, *, move_earlier: list[str] | None = None) -> None:
        """Every check passed: move ``move_earlier`` (names from :func:`earlier_results`) and the earlier
        record aside into ``earlier/<time>/``, make this command's record the directory's, write the held log."""
        if self.accepted:
            return
        if self.leader:
            if move_earlier:
                self._move_aside(move_earlier)
            pending = self.path / PENDING
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
        """Remove what this command wrote: the staged record, and the directory itself if that leaves it empty."""
        shutil.rmtree(self.path / PENDING, ignore_errors=True)
        try:
            self.path.rmdir()  # only when empty: the directory was made for this command
        except OSError:
            pass
