"""A finished run directory read as data: its metrics and the samples it recorded.

:func:`finished_metrics` reads the ``metrics.json`` of a finished run, and :func:`sample_paths` lists the samples a
run recorded (its manifests, never a listing of its folder). Its saved config is read by
:func:`csg.checks.saved.load_run_config`; evaluating the samples is :mod:`csg.posterior.evaluate`'s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from csg.components import Config
from csg.engine.samples import SampleStore
from csg.errors import ConfigError, DamagedFileError, describe
from csg.io.trust import UntrustedFile, not_a_regular_file, read_bytes

__all__ = ["MAX_METRICS_BYTES", "chain_stores", "check_recorded_members", "finished_metrics", "manifest_hashes",
           "sample_paths"]

MAX_METRICS_BYTES = 256 << 20  # metrics.json of a run of thousands of samples is a few MB


def finished_metrics(run_dir: Path, cfg: Config) -> dict[str, Any]:
    """metrics.json of a finished training run; a one-line ConfigError for anything else."""

    def refuse(why: str) -> ConfigError:
        return ConfigError("run_dir", str(run_dir), f"a finished run directory of train.py (with metrics.json): {why}")

    def damaged(why: str) -> DamagedFileError:
        return DamagedFileError("run_dir", str(run_dir), f"a finished run directory of train.py (with metrics.json): "
                                f"{why}", path=path)

    if cfg.get("synthetic"):
        raise refuse(f"it is a study on analytic targets (synthetic={cfg.synthetic.get('name', '?')}), which has "
                     "no posterior of a network")
    path = run_dir / "metrics.json"
    special = not_a_regular_file(path)
    if special == "it does not exist":
        raise refuse("it has none: the run has not finished (the same train.py command resumes it from its "
                     "checkpoint)" if any(run_dir.glob("checkpoint*.pt")) else "it has none: the run has not finished")
    if special is not None:
        raise damaged(f"its metrics.json cannot be read: {special}")
    try:
        metrics = json.loads(read_bytes(path, MAX_METRICS_BYTES).decode("utf-8"))
    except UntrustedFile as error:
        raise damaged(f"its metrics.json cannot be read: {error.reason}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise damaged(f"its metrics.json cannot be read ({describe(error, limit=120)})") from None
    if not isinstance(metrics, dict) or "ensemble" not in metrics:
        raise refuse("its metrics.json is not one of a finished run (no ensemble)")
    return metrics


def chain_stores(store: SampleStore, chains: int) -> list[SampleStore]:
    """The sample store of each chain: ``samples/`` for one chain, ``samples/chainNN/`` for each of several."""
    if chains > 1:
        return [SampleStore(store.directory / f"chain{chain:02d}") for chain in range(chains)]
    return [store]


def manifest_hashes(store: SampleStore, chains: int = 1) -> dict[str, str]:
    """``{manifest: SHA-256}`` of each chain's manifest (its path relative to the run directory): what
    ``metrics.json`` records (``manifests``) of the samples it was computed from."""
    hashes = {}
    for one in chain_stores(store, chains):
        digest = one.manifest_sha256()
        if digest is not None:
            hashes[str(one.manifest_path.relative_to(store.directory.parent))] = digest
    return hashes


def check_recorded_members(run_dir: Path, names: list[str], metrics: dict[str, Any]) -> None:
    """The members about to be used (``names``) are the ones the run's ``metrics.json`` was computed from (its
    ``per_sample`` files, in order); else a one-line :class:`DamagedFileError` naming metrics.json. A manifest
    edited after the run (a sample listed twice, one dropped with its ``planned`` count lowered) is refused
    here when its hash was not recorded (a run from before ``manifests``)."""
    rows = metrics.get("per_sample")
    if not isinstance(rows, list):
        return
    recorded = [row.get("file") if isinstance(row, dict) else None for row in rows]
    if recorded != list(names):
        differ = next((i for i, (a, b) in enumerate(zip(recorded, names)) if a != b), min(len(recorded), len(names)))
        raise DamagedFileError("run_dir", str(run_dir), f"a run whose samples are those its metrics.json was computed "
                               f"from: its manifests give {len(names)} members, metrics.json records "
                               f"{len(recorded)}, first differing at member {differ} (edited after the run)",
                               path=run_dir / "metrics.json")


def sample_paths(store: SampleStore, chains: int = 1, *, partial: bool = False,
                 recorded: dict[str, Any] | None = None) -> list[Path]:
    """The samples the run recorded, in (chain, collection) order: what its manifests list (``samples/manifest.json``;
    ``samples/chainNN/manifest.json`` for each of ``chains`` > 1), never a listing of the folder, so that stray
    copies (``samples/old/``, ``sample_... (copy).pt``) join no ensemble.

    A run from before manifests (none in its folders): the files its ``metrics.json`` names (``per_sample``),
    which only a finished run has. A :class:`ConfigError` for: no samples folder; neither manifests nor a
    ``metrics.json`` naming the files; a chain's manifest missing, or a manifest recording fewer samples than its
    chain planned (a run that has not finished; ``partial``: the samples so far); no sample at all. ``recorded``:
    the run's ``metrics.json``; a :class:`DamagedFileError` for a manifest whose SHA-256 is not the one it records
    (:func:`manifest_hashes`: edited or replaced after the run)."""
    directory = store.directory
    if not directory.is_dir():
        raise ConfigError("samples", str(directory), "a folder holding the run's samples (sample_*.pt): it does not "
                          "exist")
    stores = chain_stores(store, chains)
    manifests = [one.manifest() for one in stores]
    if all(manifest is None for manifest in manifests):
        paths = _paths_from_metrics(store)
    else:
        paths = []
        for one, manifest in zip(stores, manifests):
            if manifest is None:
                if partial:  # a chain that has not begun
                    continue
                raise DamagedFileError("samples", str(one.manifest_path), "the record of a chain's samples: it is "
                                       f"missing (each of the run's {chains} chains writes one)")
            entries, planned = manifest["samples"], manifest.get("planned")
            if not partial and planned is not None and len(entries) < planned:
                raise ConfigError("run_dir", str(directory.parent), f"a finished run directory of train.py: "
                                  f"{one.manifest_path} records {len(entries)} of the {planned} samples planned, the "
                                  "run has not finished (the same train.py command resumes it from its checkpoint)")
            paths += [one.directory / entry["file"] for entry in entries]
    if not paths:
        raise ConfigError("samples", str(directory), "a folder holding the run's samples: its manifest records none")
    hashes = (recorded or {}).get("manifests")
    if isinstance(hashes, dict) and not partial:  # partial: the samples so far, not the finished run's
        for name, digest in manifest_hashes(store, chains).items():
            if hashes.get(name) != digest:
                raise DamagedFileError("samples", str(directory.parent / name), "the record of the samples the run's "
                                       "metrics.json was computed from: its SHA-256 is not the one metrics.json "
                                       "records (edited or replaced after the run)")
    return paths


_RECORDED_NAME = re.compile(r"(chain\d{2,}/)?sample_\d{4,}_cycle\d{2,}_epoch\d{4,}\.pt")


def _paths_from_metrics(store: SampleStore) -> list[Path]:
    """The sample files a run from before manifests recorded: those its metrics.json's ``per_sample`` names."""
    manifest = store.manifest_path.relative_to(store.directory.parent)
    path = store.directory.parent / "metrics.json"

    def refuse(why: str) -> ConfigError:
        return ConfigError("samples", str(store.directory), f"a folder with the record of the run's samples "
                           f"({manifest}): it has none, {why}; the samples of a run are never taken from a listing "
                           "of its folder")

    try:
        metrics = json.loads(read_bytes(path, 256 << 20))
    except (UntrustedFile, OSError, ValueError):
        raise refuse("and no readable metrics.json names them (a run that has not finished)") from None
    rows = metrics.get("per_sample") if isinstance(metrics, dict) else None
    if not isinstance(rows, list) or not rows:
        raise refuse("and its metrics.json names none")
    if "swag" in metrics:
        raise refuse("and its metrics.json names cyclical-SWAG draws, not the sample files (a run from before "
                     "manifests: train it again)")
    names = [row.get("file") if isinstance(row, dict) else None for row in rows]
    if not all(isinstance(name, str) and _RECORDED_NAME.fullmatch(name) for name in names):
        raise refuse("and its metrics.json's per_sample names other files than the run's samples")
    return [store.directory / name for name in names]
