"""The sample files of a run: written atomically, recorded in a manifest, loaded and checked (:class:`SampleStore`).

Samples are written atomically to ``samples/`` (``samples/chainNN/`` for several
parallel chains) as ``torch.save``d dicts:
``{"state_dict", "index", "cycle", "epoch", "iteration", "lr", "temperature",
"train_loss"}``, named ``sample_0000_cycle00_epoch0047.pt`` so that names sort
in collection order, each followed by an atomic rewrite of the folder's
``manifest.json``, the record of the run's samples (:class:`SampleStore`): the
ensemble is what the manifests record, never what a folder happens to hold.
Which epochs yield them is :mod:`csg.schedules`'s plan.

A run that samples part of its model with the rest frozen (:mod:`csg.engine.part`) stores in each sample only
the state that changes (``part_keys``), and the rest once, in the folder's ``rest.pt`` (``{"state_dict"}``,
recorded in the manifest with its size and hash); :meth:`SampleStore.state_of` gives a member's whole state.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from csg.io.atomic import atomic_torch_save, atomic_write_json
from csg.errors import DamagedFileError, first_line

__all__ = ["MANIFEST", "MANIFEST_MAX_BYTES", "SampleStore", "cpu_state", "non_finite"]


MANIFEST = "manifest.json"  # in each store's folder: the samples the run recorded (SampleStore)
REST = "rest.pt"  # in each store's folder of a part-sampling run: the frozen rest of the model, once
MANIFEST_MAX_BYTES = 64 << 20  # a manifest entry is ~200 bytes
MANIFEST_FORMAT = 1  # the manifest's layout; another is refused when read
_SAMPLE_NAME = re.compile(r"sample_(\d{4,})_cycle(\d{2,})_epoch(\d{4,})\.pt")


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A sample's state: a detached CPU copy of ``model.state_dict()`` (the model trains on)."""
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}


class SampleStore:
    """The ``samples/`` directory of a run (``samples/chainNN/`` of one chain): atomic writes, the manifest,
    loading and checking.

    The ensemble is the samples the run recorded, never a listing of the folder: :meth:`save` writes a sample,
    then rewrites (atomically) the store's ``manifest.json``: ``{"format": 1, "chain", "planned", "samples":
    [{"file", "index", "cycle", "epoch", "chain", "bytes", "sha256"}, ...]}`` (``planned``: the samples the
    chain's collection plan will write, when the writer knew it). Stray copies (``samples/old/sample_*.pt``,
    ``sample_0000_... (copy).pt``) are in no manifest and join no ensemble. :meth:`recorded` lists the
    manifest's files; :meth:`start` writes a run's first manifest (none yet, or what a resumed chain's
    checkpoint records: :meth:`adopt`).

    :meth:`load` and :meth:`metadata` read a sample with ``torch.load(weights_only=True)`` (never unpickling
    anything but tensors and plain containers) and refuse a file that is not a complete sample with a
    one-line :class:`~csg.errors.DamagedFileError` (key ``samples``) naming the file and what is wrong with it;
    :meth:`verify` checks samples that way, and against their manifest's size and SHA-256, before any is used.
    """

    RECORD_KEYS = ("state_dict", "index", "cycle", "epoch")  # what every sample file holds (see save)

    def __init__(self, directory: str | Path, *, chain: int = 0, planned: int | None = None,
                 part_keys: tuple[str, ...] | None = None):
        self.directory = Path(directory)
        self.chain, self.planned, self.part_keys = int(chain), planned, part_keys
        self._entries: list[dict[str, Any]] | None = None  # the manifest this writer keeps (None: not begun)
        self._rest_entry: dict[str, Any] | None = None  # the manifest's record of rest.pt (None: none written)
        self._rests: dict[Path, dict[str, torch.Tensor]] = {}  # each folder's rest, read once (state_of)
        self._checked: dict[Path, tuple[int, int]] = {}  # files whose hash verify() matched: (size, mtime_ns)

    def save(self, model: torch.nn.Module, *, index: int, cycle: int, epoch: int, **metadata: Any) -> Path:
        """Write the ``index``-th sample atomically, then the manifest with it (and the samples before it).
        With ``part_keys``, the sample holds those keys, and the first save writes the rest to ``rest.pt``."""
        state = cpu_state(model)
        if self._entries is None:
            manifest = self.manifest() or {}
            self._entries, self._rest_entry = list(manifest.get("samples", [])), manifest.get("rest")
        if self.part_keys is not None:
            if self._rest_entry is None:
                rest_path = self.directory / REST
                atomic_torch_save({"state_dict": {k: v for k, v in state.items() if k not in self.part_keys}},
                                  rest_path)
                self._rest_entry = {"file": REST, "bytes": rest_path.stat().st_size, "sha256": _sha256(rest_path)}
            state = {name: state[name] for name in self.part_keys}
        path = self.directory / self.file_name(index, cycle, epoch)
        atomic_torch_save({"state_dict": state, "index": index, "cycle": cycle, "epoch": epoch, **metadata}, path)
        entries = [entry for entry in self._entries if entry["index"] < index]  # a resumed chain writes these again
        self._entries = [*entries, _entry(path, index, cycle, epoch, self.chain)]
        self._write_manifest()
        return path

    def state_of(self, path: str | Path) -> dict[str, torch.Tensor]:
        """The whole state dict of the sample ``path``: its own, over its folder's ``rest.pt`` where the manifest
        records one (a part-sampling run's frozen rest, read once per folder)."""
        path = self._path_of(path)
        state = self.load(path)["state_dict"]
        rest = self._rest_of(path.parent)
        return {**rest, **state} if rest else state

    def _rest_of(self, folder: Path) -> dict[str, torch.Tensor]:
        if folder not in self._rests:
            entry = (SampleStore(folder).manifest() or {}).get("rest")
            self._rests[folder] = {}
            if entry is not None:
                path = folder / REST
                self._verify_rest(path, entry)
                rest = _read_sample(path, mmap=False, keys=("state_dict",))["state_dict"]
                bad = non_finite(rest)
                if bad is not None:
                    raise DamagedFileError("samples", str(path), f"the frozen rest of the model, of finite weights: "
                                           f"its {bad} holds NaN or inf")
                self._rests[folder] = rest
        return self._rests[folder]

    def start(self) -> None:
        """Write the manifest a run begins with: the samples :meth:`adopt` took over, else none. Call it once
        the run writes (after every check), from the process that writes the samples."""
        self._entries = list(self._entries or [])
        self._write_manifest()

    def adopt(self, names: list[str]) -> None:
        """Begin from the samples a resumed chain's checkpoint records (file names in this folder, in order):
        each must be in the manifest with the same size and hash (a resume of a run from before manifests:
        each is read and recorded as it is). Raises :class:`DamagedFileError` (key ``samples``) naming the first
        missing, damaged or different file; writes nothing (:meth:`start` does)."""
        manifest_data = self.manifest() or {}
        listed = {entry["file"]: entry for entry in manifest_data.get("samples", [])}
        self._rest_entry = manifest_data.get("rest")
        manifest = self.directory / MANIFEST
        adopted = []
        for name in names:
            path = self.directory / name
            if listed and name not in listed:
                raise DamagedFileError("samples", str(path), f"a sample that {manifest} records: the checkpoint "
                                       "records it, the manifest does not (not this run's manifest)")
            self._verify_paths([path])
            record = self.metadata(path)
            adopted.append(listed.get(name) or _entry(path, int(record["index"]), int(record["cycle"]),
                                                      int(record["epoch"]), self.chain))
        self._entries = adopted

    @staticmethod
    def file_name(index: int, cycle: int, epoch: int) -> str:
        """The name of the ``index``-th sample, taken in ``cycle`` at the end of ``epoch``: names sort in order."""
        return f"sample_{index:04d}_cycle{cycle:02d}_epoch{epoch:04d}.pt"

    def paths(self) -> list[Path]:
        """Every file named like a sample below the directory, chain folders and stray copies included, sorted:
        what a folder holds, not the run's ensemble (that is :meth:`recorded`)."""
        return sorted(self.directory.glob("**/sample_*.pt"))

    def __len__(self) -> int:
        return len(self.paths())

    @property
    def manifest_path(self) -> Path:
        """``<directory>/manifest.json``: the record of the samples written to this folder."""
        return self.directory / MANIFEST

    def manifest(self) -> dict[str, Any] | None:
        """The store's manifest (``None`` when it has none); a one-line :class:`DamagedFileError` (key ``samples``)
        for one that cannot be read, or lists anything but this folder's sample files."""
        from csg.io.trust import UntrustedFile, not_a_regular_file, read_bytes

        path = self.manifest_path
        if not_a_regular_file(path) == "it does not exist":
            return None

        def refuse(why: str) -> DamagedFileError:
            return DamagedFileError("samples", str(path), f"a manifest of the samples written by train.py: {why}")

        try:
            data = json.loads(read_bytes(path, MANIFEST_MAX_BYTES))
        except UntrustedFile as error:
            raise refuse(error.reason) from None
        except (OSError, ValueError) as error:  # unreadable, not UTF-8, not JSON
            raise refuse(f"it cannot be read ({type(error).__name__})") from None
        entries = data.get("samples") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise refuse("it has no list of samples")
        if data.get("format", MANIFEST_FORMAT) != MANIFEST_FORMAT:  # none: a manifest of a run from before formats
            raise refuse(f"its format is {data['format']!r}, and this csg reads format {MANIFEST_FORMAT} (a manifest "
                         "another version of csg wrote: read it with that version)")
        for number, entry in enumerate(entries):
            name = _SAMPLE_NAME.fullmatch(str(entry.get("file", ""))) if isinstance(entry, dict) else None
            if name is None:
                raise refuse(f"its entry {number} names no sample file of this folder")
            if not all(isinstance(entry.get(key), int) for key in ("index", "cycle", "epoch", "bytes")):
                raise refuse(f"its entry {number} ({entry['file']}) lacks index, cycle, epoch or bytes")
            if [int(part) for part in name.groups()] != [entry["index"], entry["cycle"], entry["epoch"]]:
                raise refuse(f"its entry {number} ({entry['file']}) records another index, cycle or epoch than "
                             "its file's name")
            if entry["index"] != number:  # a chain's samples are numbered 0, 1, 2, ... as they are taken
                seen = "lists it twice" if entry["index"] < number else f"lacks sample {number}"
                raise refuse(f"its entry {number} is sample {entry['index']} ({entry['file']}): the manifest {seen} "
                             "(edited after the run)")
        planned = data.get("planned")
        if planned is not None and not isinstance(planned, int):
            raise refuse("its planned count is not a number")
        rest = data.get("rest")
        if rest is not None and not (isinstance(rest, dict) and rest.get("file") == REST
                                     and isinstance(rest.get("bytes"), int)):
            raise refuse(f"its rest entry names no {REST} of this folder")
        return data

    def manifest_sha256(self) -> str | None:
        """The SHA-256 of the store's manifest file (``None``: no manifest), as ``metrics.json`` records it of the
        samples it was computed from (:func:`csg.posterior.store.manifest_hashes`)."""
        return _sha256(self.manifest_path) if self.manifest_path.is_file() else None

    def manifest_entries(self) -> list[dict[str, Any]] | None:
        """The manifest's sample entries in collection order (``None``: no manifest)."""
        data = self.manifest()
        return None if data is None else list(data["samples"])

    def recorded(self) -> list[Path] | None:
        """The files of the samples the manifest records, in collection order (``None``: no manifest)."""
        entries = self.manifest_entries()
        return None if entries is None else [self.directory / entry["file"] for entry in entries]

    def _write_manifest(self) -> None:
        rest = {"rest": self._rest_entry} if self._rest_entry is not None else {}
        atomic_write_json(self.manifest_path, {"format": MANIFEST_FORMAT, "chain": self.chain, "planned": self.planned,
                                               "samples": self._entries, **rest})

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """A sample's record; :class:`DamagedFileError` naming the file when it is damaged or not a sample."""
        return _read_sample(Path(path), mmap=False)

    @staticmethod
    def metadata(path: str | Path) -> dict[str, Any]:
        """A sample's record without its ``state_dict`` (memory-mapped: the tensors are not read)."""
        record = _read_sample(Path(path), mmap=True)
        record.pop("state_dict", None)
        return record

    def verify(self, expected: list[str | Path] | None = None, *,
               model_state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Check that samples can be used, reading each one's record (memory-mapped) and its bytes.

        The samples checked: the store's manifest's, and ``expected`` (file names relative to the store's
        directory, ``sample_0000_cycle00_epoch0008.pt``, ``chain01/...``, or paths), e.g. the samples a
        checkpoint says were written. ``model_state``: a model's ``state_dict`` that every sample must fit (the
        same keys, each tensor of the same shape). Raises :class:`DamagedFileError` with key ``samples`` naming the
        first (in name order) missing file, file that is not a complete sample of train.py (truncated, empty,
        another format, a record without its keys), file whose size or SHA-256 is not what the manifest of its
        folder records (replaced, damaged), or sample that does not fit ``model_state``. Files are never
        found by listing the folder: a stray copy is not checked, as it is never used.
        """
        wanted = {self._path_of(name) for name in (expected or [])} | set(self.recorded() or [])
        self._verify_paths(sorted(wanted), model_state)

    def _path_of(self, name: str | Path) -> Path:
        """``name`` as a path: absolute, or already under this store's directory (as the store lists them, e.g.
        ``runs/x/samples/sample_...pt`` for a store of ``runs/x/samples``), as given; else relative to it."""
        path = Path(name)
        if path.is_absolute() or path.parts[:len(self.directory.parts)] == self.directory.parts:
            return path
        return self.directory / path

    def _verify_paths(self, paths: list[Path], model_state: Mapping[str, torch.Tensor] | None = None) -> None:
        manifests: dict[Path, dict[str, dict[str, Any]]] = {}
        for path in paths:
            if not path.exists():
                raise DamagedFileError("samples", str(path), "a sample file this run wrote: it is missing")
            if not path.is_file():
                raise DamagedFileError("samples", str(path), "a sample file: it is not a file")
            record = _read_sample(path, mmap=True)
            if path.parent not in manifests:
                entries = SampleStore(path.parent).manifest_entries() or []
                manifests[path.parent] = {entry["file"]: entry for entry in entries}
            entry = manifests[path.parent].get(path.name)
            if entry is not None:
                self._check_bytes(path, entry)
            bad = non_finite(record["state_dict"])
            if bad is not None:
                raise DamagedFileError("samples", str(path), f"a sample of finite weights: its {bad} holds NaN or inf")
            if model_state is not None:
                rest = self._rest_of(path.parent)
                problem = _misfit({**rest, **record["state_dict"]} if rest else record["state_dict"], model_state)
                if problem:
                    raise DamagedFileError("samples", str(path),
                                           f"a sample of the run's model: it does not fit ({problem})")

    def _verify_rest(self, path: Path, entry: dict[str, Any]) -> None:
        if not path.is_file():
            raise DamagedFileError("samples", str(path), "the frozen rest of the model that the manifest records: "
                                   "it is missing or not a file")
        self._check_bytes(path, entry)

    def _check_bytes(self, path: Path, entry: dict[str, Any]) -> None:
        """The file is the one its manifest records: its size, then (once per file and change) its SHA-256."""
        stat = path.stat()
        if stat.st_size != entry["bytes"]:
            raise DamagedFileError("samples", str(path), f"the sample file train.py wrote: it has {stat.st_size} "
                                   f"bytes, the manifest records {entry['bytes']} (damaged or replaced)")
        if entry.get("sha256") is None or self._checked.get(path) == (stat.st_size, stat.st_mtime_ns):
            return
        if _sha256(path) != entry["sha256"]:
            raise DamagedFileError("samples", str(path), "the sample file train.py wrote: its SHA-256 is not the one "
                                   "the manifest records (damaged or replaced)")
        self._checked[path] = (stat.st_size, stat.st_mtime_ns)


def _entry(path: Path, index: int, cycle: int, epoch: int, chain: int) -> dict[str, Any]:
    """A manifest entry of the sample file ``path``, with its size and SHA-256."""
    return {"file": path.name, "index": int(index), "cycle": int(cycle), "epoch": int(epoch), "chain": int(chain),
            "bytes": path.stat().st_size, "sha256": _sha256(path)}


def non_finite(state: Mapping[str, torch.Tensor]) -> str | None:
    """The first entry of ``state`` (a state dict) holding NaN or inf, else ``None`` (integer entries hold neither)."""
    for key, tensor in state.items():
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
            return key
    return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _read_sample(path: Path, mmap: bool, keys: tuple[str, ...] = SampleStore.RECORD_KEYS) -> dict[str, Any]:
    """``torch.load`` of a sample file (weights only), or a one-line :class:`DamagedFileError` saying what is wrong.
    A FIFO, device or socket in a sample's place is refused without being opened (it would block)."""
    from csg.io.trust import not_a_regular_file

    special = not_a_regular_file(path)
    if special is not None and special != "it does not exist":
        raise DamagedFileError("samples", str(path), f"a sample file: {special}")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise DamagedFileError("samples", str(path), "a sample file: it does not exist") from None
    except IsADirectoryError:
        raise DamagedFileError("samples", str(path), "a sample file: it is a directory") from None
    except PermissionError:
        raise DamagedFileError("samples", str(path), "a sample file this user can read: permission denied") from None
    except Exception as error:  # torch.load raises RuntimeError, UnpicklingError, EOFError, KeyError, ... by format
        raise DamagedFileError("samples", str(path),
                               f"a sample file written by train.py: {_unreadable(path, error)}") from None
    missing = [key for key in keys if not isinstance(record, dict) or key not in record]
    if missing:
        what = (f"a record without {', '.join(missing)}" if isinstance(record, dict)
                else f"a {type(record).__name__}")
        raise DamagedFileError("samples", str(path), f"a sample file written by train.py: it holds {what}")
    state = record["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DamagedFileError("samples", str(path),
                               "a sample file written by train.py: its state_dict is not a dict of tensors")
    return record


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load`` failed, in words: torch's own messages span many lines."""
    import zipfile

    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as os_error:
        return f"it cannot be read ({os_error.strerror})"
    if not head:
        return "it is empty"
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        return "it is truncated (a torch.save archive without its end)"
    if head != b"PK\x03\x04":
        return "it is not a file of torch.save (another format, or damaged from its start)"
    if "weights only" in str(error).lower() or "weights_only" in str(error):
        return "it holds Python objects other than tensors, which are not unpickled (torch.load weights_only=True)"
    return f"it is damaged ({type(error).__name__}: {first_line(error)[:160]})"


def _misfit(state: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor]) -> str:
    """How ``state`` differs from ``reference`` in keys or shapes ('' when it fits)."""
    missing, unexpected = [k for k in reference if k not in state], [k for k in state if k not in reference]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(f"unexpected keys {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
        return "; ".join(parts)
    for key, tensor in reference.items():
        if tuple(state[key].shape) != tuple(tensor.shape):
            return f"{key} has shape {list(state[key].shape)}, the model's {list(tensor.shape)}"
    return ""
