"""A finished run directory read as data: its saved config, its metrics, the samples it recorded.

:func:`load_run_config` reads and checks a run's saved config (``.hydra/config.yaml``; :mod:`csg.io.trust`),
:func:`apply_overrides` applies a re-evaluation's overrides to it (:data:`OVERRIDABLE`), :func:`finished_metrics`
reads the ``metrics.json`` of a finished run, and :func:`sample_paths` lists the samples a run recorded (its
manifests, never a listing of its folder). Evaluating them is :mod:`csg.posterior.evaluate`'s.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from csg.checks import config as checks
from csg.engine.samples import SampleStore
from csg.errors import ConfigError, DamagedFileError, describe
from csg.io.trust import UntrustedFile, not_a_regular_file, read_bytes
from csg.paths import CONFIGS

__all__ = ["GROUPS", "MAX_METRICS_BYTES", "OVERRIDABLE", "SAVED_CONFIG", "apply_overrides", "chain_stores",
           "check_recorded_members", "check_saved_config", "finished_metrics", "flat_leaves", "load_run_config",
           "manifest_hashes", "sample_paths"]

# What a re-evaluation may change: how the samples are evaluated (evaluation.*), where and in which precision
# (trainer.device, trainer.precision), how and from where the run's own data is read (data.eval_batch_size,
# data.num_workers, data.device_resident, data.root, data.download), and the out-of-distribution set (ood=<name>,
# ood.*). Everything else made the samples (data set, model, sampler, seed, epochs, ...) and is fixed by the run.
OVERRIDABLE = ("evaluation.*", "trainer.device", "trainer.precision", "data.eval_batch_size", "data.num_workers",
               "data.device_resident", "data.root", "data.download", "ood.*")
GROUPS = ("data", "model", "sampler", "trainer", "logger", "ood", "synthetic", "experiment")  # train.py's config groups
SAVED_CONFIG = ".hydra/config.yaml"
MAX_METRICS_BYTES = 256 << 20  # metrics.json of a run of thousands of samples is a few MB


def load_run_config(run_dir: Path, *, trust_code: bool = False) -> DictConfig:
    """The saved config of a train.py run directory, read as data and checked as train.py checks a config; else a
    one-line ConfigError.

    Read as data (:mod:`csg.io.trust`): a regular file of YAML within the size and alias limits; without
    ``trust_code``, a config naming a ``_target_`` (or a resolver that is not OmegaConf's, Hydra's or csg's) is
    refused before anything is imported. With ``trust_code`` its targets are imported by train.py's checks, from
    the Python path (never the current folder: :func:`csg.components.run_directory_targets`)."""
    from csg.io.trust import read_yaml

    def refuse(why: str) -> ConfigError:
        return ConfigError("run_dir", str(run_dir), f"a run directory of train.py: {why}")

    def damaged(why: str) -> DamagedFileError:
        return DamagedFileError("run_dir", str(run_dir), f"a run directory of train.py: {why}", path=saved)

    if not run_dir.exists():
        raise refuse("it does not exist")
    if not run_dir.is_dir():
        raise refuse("it is a file, not a directory")
    saved = run_dir / SAVED_CONFIG
    special = not_a_regular_file(saved)
    if special == "it does not exist":
        raise refuse(f"it has no {SAVED_CONFIG} (not a run directory, or a run that was refused before it began)")
    if special is not None:
        raise damaged(f"its {SAVED_CONFIG} cannot be read: {special}")
    try:
        cfg = read_yaml(saved)
    except UntrustedFile as error:
        raise damaged(f"its {SAVED_CONFIG} is refused: {error.reason}") from None
    except Exception as error:  # yaml's errors, a binary file, an unreadable one
        raise damaged(f"its {SAVED_CONFIG} {_unreadable_yaml(error)}") from None
    return check_saved_config(cfg, lambda why: refuse(f"its {SAVED_CONFIG} {why}"), trust_code=trust_code)


def check_saved_config(cfg: Any, refuse: Callable[[str], ConfigError], *, trust_code: bool) -> DictConfig:
    """``cfg``, a run's saved config read as data, once it is a train.py config that passes train.py's checks
    and names no code (:func:`csg.io.trust.check_no_code`, unless ``trust_code``); else ``refuse(why)`` raised
    (``why``: "is not a train.py config (...)", "fails train.py's checks (...)")."""
    from csg.components import run_directory_targets
    from csg.io.trust import check_no_code

    if not isinstance(cfg, DictConfig):
        raise refuse(f"is not a train.py config (a {type(cfg).__name__}, not a mapping)")
    absent = [key for key in ("data", "model", "sampler", "trainer", "evaluation", "ood", "seed") if key not in cfg]
    if absent:
        raise refuse(f"is not a train.py config (no {', '.join(absent)})")
    if "callbacks" in cfg:  # the loop's callbacks made no sample: a posterior neither imports nor needs them
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            del cfg["callbacks"]
    check_no_code(cfg, trust_code)  # before train.py's checks, which import the targets they are given
    try:
        with run_directory_targets():
            checks.validate(cfg)
    except ConfigError as error:
        raise refuse(f"fails train.py's checks ({error})") from None
    except Exception as error:  # a section that is not a mapping, an interpolation to nothing, ...
        raise refuse(f"is not a train.py config ({describe(error, limit=160)})") from None
    return cfg


def _unreadable_yaml(error: Exception) -> str:
    import yaml

    if isinstance(error, yaml.YAMLError):
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or describe(error, limit=160)
        return f"is not YAML ({problem}{f', line {mark.line + 1}' if mark is not None else ''})"
    if isinstance(error, UnicodeDecodeError):
        return "is not text (not YAML)"
    return f"cannot be read ({describe(error, limit=160)})"


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """``cfg`` with the re-evaluation's ``key=value`` overrides; a :class:`ConfigError` for any other key."""
    cfg = copy.deepcopy(cfg)
    if "evaluation" in cfg and "reference" not in cfg.evaluation:  # a run saved before csg had the key
        with open_dict(cfg):
            cfg.evaluation.reference = None
    choices = [item for item in overrides if item.partition("=")[0].strip() == "ood"]
    for item in choices + [item for item in overrides if item not in choices]:  # ood=<name> before ood.* keys
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("override", item, f"key=value; the keys that may be overridden: {_overridable(cfg)}")
        if key == "ood":  # a group choice: configs/ood/<name>.yaml, as train.py composes it
            options = sorted(path.stem for path in (CONFIGS / "ood").glob("*.yaml"))
            if text not in options:
                raise ConfigError("ood", text, f"one of {', '.join(options)}")
            cfg.ood = OmegaConf.load(CONFIGS / "ood" / f"{text}.yaml")
            continue
        leaves = _leaf_keys(cfg)
        if key not in leaves:
            raise ConfigError(key, text, _not_a_key(cfg, key, leaves))
        if not _is_overridable(key) or key == "ood.name":
            saved = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
            what = "the out-of-distribution set is chosen as ood=<name>" if key == "ood.name" else (
                f"fixed by the run: its samples were made with {key}={saved}")
            raise ConfigError(key, text, f"{what}; the keys that may be overridden: {_overridable(cfg)}")
        if not text.strip():
            raise ConfigError(key, text, "a value (none given)")
        if "${" in text:
            raise ConfigError(key, text, "a plain value, not an interpolation")
        try:
            value = OmegaConf.from_dotlist([f"value={text}"])["value"]
        except Exception:  # not a YAML value
            raise ConfigError(key, text, "a value as train.py takes it (a number, a word, true/false)") from None
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def flat_leaves(cfg: DictConfig) -> dict[str, Any]:
    """``{dotted key: value}`` of every value of ``cfg`` (a list is one value), interpolations unresolved."""
    from csg.reporting import flat_keys

    return flat_keys(OmegaConf.to_container(cfg, resolve=False))


def _leaf_keys(cfg: DictConfig) -> list[str]:
    """The dotted keys of the config's values (a list is one value), unresolved."""
    return list(flat_leaves(cfg))


def _is_overridable(key: str) -> bool:
    return any(key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern for pattern in OVERRIDABLE)


def _overridable(cfg: DictConfig) -> str:
    """The keys of this run's config that may be overridden, and the ood=<name> choice."""
    keys = [key for key in _leaf_keys(cfg) if _is_overridable(key) and key != "ood.name"]
    options = "|".join(sorted(path.stem for path in (CONFIGS / "ood").glob("*.yaml")))
    return ", ".join([*keys, f"ood=<{options}>"])


def _not_a_key(cfg: DictConfig, key: str, leaves: list[str]) -> str:
    """Why ``key`` is no key to override: a config group, a section, or a key the run's config lacks."""
    if key.split(".")[0] in GROUPS and "." not in key:
        chosen = OmegaConf.select(cfg, f"{key}.name", throw_on_resolution_failure=False)
        made = f"its samples were made with {key}={chosen}" if chosen is not None else "a config group it chose"
        return f"fixed by the run: {made}; the keys that may be overridden: {_overridable(cfg)}"
    if any(leaf.startswith(key + ".") for leaf in leaves):
        return f"a key with a value, not a section; the keys that may be overridden: {_overridable(cfg)}"
    close = difflib.get_close_matches(key, leaves, n=3, cutoff=0.75)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"a key of the run's config, which has no {key}{hint}; the keys that may be overridden: {_overridable(cfg)}"


def finished_metrics(run_dir: Path, cfg: DictConfig) -> dict[str, Any]:
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
