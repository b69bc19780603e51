"""Experiment loggers: ``none``, ``csv`` (files in the run directory) and ``wandb`` (offline by default).

All three take the same calls from the training loop: ``log_step`` (every few
iterations: loss, lr, temperature, stage), ``log_epoch``, ``log_sample``,
``log_summary`` (final metrics) and ``close``.
"""

from __future__ import annotations

import csv
import functools
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from csg.errors import ConfigError
from csg.io.atomic import atomic_write_text


class NullLogger:
    def log_step(self, step: int, values: dict[str, Any]) -> None:
        pass

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        pass

    def log_sample(self, index: int, values: dict[str, Any]) -> None:
        pass

    def log_summary(self, values: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class CSVLogger(NullLogger):
    """Writes one row per epoch to ``epochs.csv`` and one per logged step to ``steps.csv``.

    ``append`` (a resumed run): the files of the interrupted run keep their rows and the new ones follow.
    ``resumed_at``: per chain, the (epoch, iteration) its checkpoint resumes from; the interrupted run's rows past
    it (an epoch or steps logged after the last checkpoint) are dropped, since the resumed run logs them again.
    """

    def __init__(self, directory: str | Path, append: bool = False,
                 resumed_at: dict[int, tuple[int, int]] | None = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.append = append
        self.resumed_at = resumed_at or {}
        self._files: dict[str, tuple[Any, csv.DictWriter]] = {}

    def _keeps(self, name: str, row: dict[str, str]) -> bool:
        """Whether a row of the interrupted run comes before its chain's checkpoint."""
        chain = int(row["chain"]) if row.get("chain") else next(iter(self.resumed_at), 0)
        if chain not in self.resumed_at:
            return True
        epoch, iteration = self.resumed_at[chain]
        return int(row["epoch"]) < epoch if name == "epochs.csv" else int(row["step"]) <= iteration

    def _drop_rows_past_the_checkpoint(self, path: Path, name: str) -> None:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            fields, rows = reader.fieldnames or [], list(reader)
        kept = [row for row in rows if self._keeps(name, row)]
        if len(kept) < len(rows):
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(kept)
            atomic_write_text(path, buffer.getvalue())

    def _write(self, name: str, row: dict[str, Any]) -> None:
        if name not in self._files:
            path = self.directory / name
            continued = self.append and path.exists() and path.stat().st_size > 0
            if continued and self.resumed_at:
                self._drop_rows_past_the_checkpoint(path, name)
            handle = open(path, "a" if continued else "w", newline="")
            writer = csv.DictWriter(handle, fieldnames=list(row))
            if not continued:
                writer.writeheader()
            self._files[name] = (handle, writer)
        handle, writer = self._files[name]
        writer.writerow(row)
        handle.flush()

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        self._write("steps.csv", {"step": step, **values})

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        self._write("epochs.csv", values)

    def close(self) -> None:
        for handle, _ in self._files.values():
            handle.close()
        self._files.clear()


class WandbLogger(NullLogger):
    """Weights & Biases; ``mode="offline"`` (the default) needs neither network nor account."""

    def __init__(self, directory: str | Path, config: dict[str, Any], *, project: str, mode: str = "offline",
                 entity: str | None = None, group: str | None = None, run_name: str | None = None,
                 tags: list[str] | None = None):
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        try:
            self.run = wandb.init(project=project, entity=entity, group=group, name=run_name, tags=tags, mode=mode,
                                  dir=str(directory), config=config, reinit="finish_previous")
        except Exception as error:  # noqa: BLE001 - wandb's errors (a server that is not wandb's, a refused key)
            import re

            said = " ".join(re.sub(r"<[^>]*>", " ", str(error)).split())[:200]  # a server's HTML page, as text
            raise ConfigError("logger.mode", mode, f"a wandb run wandb.init can start (it failed: "
                              f"{type(error).__name__}: {said}; server {os.environ.get('WANDB_BASE_URL') or WANDB_URL}"
                              "): logger.mode=offline logs into the run folder and `wandb sync` uploads it later"
                              ) from None
        self.run.define_metric("train/global_step")
        self.run.define_metric("train/*", step_metric="train/global_step")
        self.run.define_metric("epoch")
        self.run.define_metric("epoch/*", step_metric="epoch")

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        self.run.log({"train/global_step": step, **{f"train/{key}": value for key, value in values.items()}})

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None:
        self.run.log({"epoch": epoch, **{f"epoch/{key}": value for key, value in values.items() if key != "epoch"}})

    def log_sample(self, index: int, values: dict[str, Any]) -> None:
        self.run.log({"sample/index": index, **{f"sample/{k}": v for k, v in values.items() if k != "path"}})

    def log_summary(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.run.summary[key] = value

    def close(self) -> None:
        self.run.finish()


LOGGERS = ("none", "csv", "wandb")
WANDB_MODES = ("offline", "online", "disabled")
WANDB_URL = "https://api.wandb.ai"  # wandb's server, unless WANDB_BASE_URL names another


def wandb_server() -> tuple[str, str, int]:
    """(URL, host, port) of wandb's server: ``WANDB_BASE_URL``, else :data:`WANDB_URL`; a malformed one (no http(s),
    no host, a port out of range, a broken IPv6 address) is a one-line ConfigError naming the variable."""
    from urllib.parse import urlsplit

    url = os.environ.get("WANDB_BASE_URL") or WANDB_URL
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:  # a port past 65535, an unclosed IPv6 bracket
        raise ConfigError("WANDB_BASE_URL", url, f"the http(s) URL of a wandb server ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("WANDB_BASE_URL", url, "the http(s) URL of a wandb server, such as https://api.wandb.ai")
    return url, parts.hostname, port or (80 if parts.scheme == "http" else 443)


def check_wandb_online(options: Mapping[str, Any]) -> None:
    """``logger.mode=online``: wandb's server (``WANDB_BASE_URL``, else :data:`WANDB_URL`) can be reached from this
    machine (a TCP connection within 5 s); else a one-line ConfigError saying to log offline: wandb itself would
    fail with a ``CommError`` after the run had started. Other modes need no network."""
    mode = str(options.get("mode", "offline"))
    if mode == "disabled":
        return
    url, host, port = wandb_server()  # wandb validates the URL in every mode but disabled
    if mode != "online":
        return
    why = _unreachable(host, port)
    if why is not None:
        raise ConfigError("logger.mode", "online", f"offline or disabled on a machine that cannot reach wandb "
                          f"({host}:{port}: {why}): logger.mode=offline logs into the run folder, and `wandb sync "
                          "<run folder>/wandb/offline-run-*` uploads it later from a machine with network")


@functools.lru_cache(maxsize=8)
def _unreachable(host: str, port: int, timeout: float = 5.0) -> str | None:
    """Why a TCP connection to ``host:port`` fails (once per process and address), else None."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


def build_logger(name: str, directory: str | Path, config: dict[str, Any], *, resume: bool = False,
                 resumed_at: dict[int, tuple[int, int]] | None = None, **options: Any) -> NullLogger:
    """The logger ``name``; ``resume``: the run continues from a checkpoint (the CSV files are appended to, less
    their rows past ``resumed_at``, each chain's (epoch, iteration))."""
    if name == "none":
        return NullLogger()
    if name == "csv":
        return CSVLogger(directory, append=resume, resumed_at=resumed_at)
    if name == "wandb":
        return WandbLogger(directory, config, **options)
    raise ConfigError("logger.name", name, f"one of {', '.join(LOGGERS)}")
