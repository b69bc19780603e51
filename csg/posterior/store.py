"""Evaluating the samples a run stored: cycle weights, cyclical-SWAG draws, the ensemble's metrics.

:func:`ensemble_members` says which samples (or SWAG draws) make a finished run's ensemble and their weights
(:func:`evaluate_store` and :class:`csg.Posterior` both use it); :func:`evaluate_store` is what a run ends with
(it writes nothing); :func:`evaluate_run` evaluates a
finished run directory again, from its saved config, without training (``scripts/evaluate_run.py``);
:func:`format_metrics` is the table a run prints.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from csg.checks import config as checks
from csg.engine import distributed
from csg.io.atomic import atomic_write_json
from csg.engine.build import build_data_and_model, build_ood_loader
from csg.engine.collection import SampleStore
from csg.engine.devices import resolve_device
from csg.errors import ConfigError, describe
from csg.evaluation import METRIC_NAMES, equal_weights, evaluate_samples, harmonic_mean_weights, predict_probs
from csg.evaluation.weights import importance_weights
from csg.engine.loop import Precision


@dataclass
class EnsembleMembers:
    """The members of a finished run's ensemble, as :func:`evaluate_store` averages them.

    ``names``: each member's sample file (relative to ``samples/``) or cyclical-SWAG draw; ``chains``: its chain;
    ``weights``: its weight w_i in the average sum_i w_i p(y | x, theta_i) (they sum to 1); ``weighting``: their
    name (``equal``, ``harmonic``, ``importance``); ``extra``: what metrics.json records beside them (``swag``).
    :meth:`states` streams the members' state dicts in that order, one at a time (read from the sample files,
    or drawn from the cycles' Gaussians), anew on every call.
    """

    names: list[str]
    chains: list[int]
    weights: list[float]
    weighting: str
    stream: Callable[[], Iterator[dict[str, torch.Tensor]]]
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def states(self) -> Iterator[dict[str, torch.Tensor]]:
        """The members' state dicts (on the CPU), one at a time, in the order of :attr:`names`."""
        return self.stream()


def ensemble_members(
    cfg: DictConfig, model, store: SampleStore, data: Callable[[], Any], device, precision: Precision,
    layout: distributed.Layout | None = None, *, partial: bool = False,
) -> EnsembleMembers:
    """Which samples (or SWAG draws) of ``store`` make the run's ensemble, and their weights.

    The samples are those the run recorded (:func:`_sample_paths`: its manifests; ``partial``: an unfinished
    run's samples so far). Every one is checked first (complete, the file the manifest records, a sample of
    ``model``). Replica exchange: only the lowest
    temperature's (rung 0) samples. ``sampler.swag.draws_per_cycle > 0``: cyclical-SWAG draws, equal weights.
    Else contour samplers' importance weights, or ``evaluation.cycle_weights`` (equal, or harmonic: Appendix F,
    which evaluates each sample on the training set: ``data()`` is called for the run's data bundle then only).
    """
    layout = layout or distributed.Layout()
    paths = _sample_paths(store, int(cfg.sampler.get("chains", 1)), partial=partial)
    store.verify(paths, model_state=model.state_dict())  # each a complete sample of this model, before any is used
    if cfg.sampler.get("replica") is not None:  # the ensemble is the lowest temperature's samples
        paths = [path for path in paths if store.metadata(path).get("replica_rung", 0) == 0]
    chain_of = [_chain_of(path) for path in paths]
    swag = cfg.sampler.get("swag")
    if swag is not None and int(swag.draws_per_cycle) > 0:
        stream, names, chains, meta = _swag_draws(cfg, swag, store, paths, chain_of)
        return EnsembleMembers(names, chains, equal_weights(len(names)), "equal", stream, {"swag": meta})
    names = [str(path.relative_to(store.directory)) for path in paths]
    weights, weighting = _cycle_weights(cfg, model, store, paths, chain_of, data, device, precision, layout)
    return EnsembleMembers(names, chain_of, weights, weighting,
                           lambda: (store.load(path)["state_dict"] for path in paths))


def evaluate_store(
    cfg: DictConfig, model, store: SampleStore, data, device, precision: Precision, ood_loader=None, ood_source=None,
    layout: distributed.Layout | None = None, *, partial: bool = False,
) -> dict[str, Any]:
    """Metrics of the weighted ensemble (all chains pooled), of each chain and of every sample.

    The members and weights are :func:`ensemble_members`' (``partial``: an unfinished run's samples so far).
    One sample is loaded at a time. Under DDP every process evaluates its shard of the test set.
    """
    layout = layout or distributed.Layout()
    members = ensemble_members(cfg, model, store, lambda: data, device, precision, layout, partial=partial)
    names, chains, weights = members.names, members.chains, members.weights
    result = evaluate_samples(
        model,
        members.states(),
        weights,
        data.test,
        device,
        n_bins=cfg.evaluation.ece_bins,
        autocast=precision.autocast,
        ood_loader=ood_loader,
        groups=chains,
        gather=lambda t: distributed.gather_rows(t, layout),
    )
    per_sample = [
        {"file": name, "chain": chain, "weight": weight, **sample_metrics}
        for name, chain, weight, sample_metrics in zip(names, chains, weights, result.per_sample)
    ]
    metrics = {"ensemble": result.ensemble, "per_sample": per_sample, "cycle_weights": members.weighting,
               **members.extra}
    if result.group_ensembles:
        metrics["per_chain"] = [{"chain": chain, **m} for chain, m in result.group_ensembles.items()]
    if result.ood is not None:
        from csg.evaluation.ood import entropy_grid

        metrics["ood"] = {
            "name": str(cfg.ood.name), "source": ood_source, "entropy_grid": entropy_grid(data.num_classes).tolist(),
            "ensemble": result.ood,
            "per_sample": [{"file": name, **m} for name, m in zip(names, result.ood_per_sample)],
        }
    return metrics


def _sample_paths(store: SampleStore, chains: int = 1, *, partial: bool = False) -> list[Path]:
    """The samples the run recorded, in (chain, collection) order: what its manifests list (``samples/manifest.json``;
    ``samples/chainNN/manifest.json`` for each of ``chains`` > 1), never a listing of the folder, so that stray
    copies (``samples/old/``, ``sample_... (copy).pt``) join no ensemble.

    A run from before manifests (none in its folders): the files its ``metrics.json`` names (``per_sample``),
    which only a finished run has. A :class:`ConfigError` for: no samples folder; neither manifests nor a
    ``metrics.json`` naming the files; a chain's manifest missing, or a manifest recording fewer samples than its
    chain planned (a run that has not finished; ``partial``: the samples so far); no sample at all."""
    directory = store.directory
    if not directory.is_dir():
        raise ConfigError("samples", str(directory), "a folder holding the run's samples (sample_*.pt): it does not "
                          "exist")
    stores = [SampleStore(directory / f"chain{chain:02d}") for chain in range(chains)] if chains > 1 else [store]
    manifests = [one.manifest() for one in stores]
    if all(manifest is None for manifest in manifests):
        paths = _paths_from_metrics(store)
    else:
        paths = []
        for one, manifest in zip(stores, manifests):
            if manifest is None:
                if partial:  # a chain that has not begun
                    continue
                raise ConfigError("samples", str(one.manifest_path), "the record of a chain's samples: it is missing "
                                  f"(each of the run's {chains} chains writes one)")
            entries, planned = manifest["samples"], manifest.get("planned")
            if not partial and planned is not None and len(entries) < planned:
                raise ConfigError("run_dir", str(directory.parent), f"a finished run directory of train.py: "
                                  f"{one.manifest_path} records {len(entries)} of the {planned} samples planned, the "
                                  "run has not finished (the same train.py command resumes it from its checkpoint)")
            paths += [one.directory / entry["file"] for entry in entries]
    if not paths:
        raise ConfigError("samples", str(directory), "a folder holding the run's samples: its manifest records none")
    return paths


_RECORDED_NAME = re.compile(r"(chain\d{2,}/)?sample_\d{4,}_cycle\d{2,}_epoch\d{4,}\.pt")


def _paths_from_metrics(store: SampleStore) -> list[Path]:
    """The sample files a run from before manifests recorded: those its metrics.json's ``per_sample`` names."""
    from csg.io.trust import UntrustedFile, read_bytes

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


def _chain_of(path: Path) -> int:
    """The chain of a sample: NN of its ``chainNN`` folder, 0 for a one-chain run's ``samples/``."""
    match = re.fullmatch(r"chain(\d+)", path.parent.name)
    return int(match.group(1)) if match else 0


def _cycle_weights(cfg, model, store: SampleStore, paths, chain_of, data, device, precision, layout):
    """(weights of the stored samples, their name): contour importance weights, equal, or the harmonic-mean
    estimator of Appendix F (``data()``: the run's data bundle, whose training set it evaluates)."""
    contour = cfg.sampler.get("contour")
    if contour is not None and contour.get("ensemble_weights", "importance") == "importance":
        return importance_weights([store.metadata(path).get("log_weight", 0.0) for path in paths]), "importance"
    if cfg.evaluation.cycle_weights != "harmonic":
        return equal_weights(len(paths)), str(cfg.evaluation.cycle_weights)
    log_likelihoods, cycles, train_eval = [], [], data().train_eval
    for path, chain in zip(paths, chain_of):
        record = store.load(path)
        model.load_state_dict(record["state_dict"])
        probs, targets = predict_probs(model, train_eval, device, precision.autocast)
        probs, targets = distributed.gather_rows(probs, layout), distributed.gather_rows(targets, layout)
        log_likelihoods.append(probs.gather(1, targets[:, None]).double().clamp_min(1e-300).log().sum().item())
        cycles.append((chain, record["cycle"]))
    index = {key: i for i, key in enumerate(sorted(set(cycles)))}  # a cycle of one chain is one mode
    return harmonic_mean_weights(log_likelihoods, [index[c] for c in cycles]), "harmonic"


def _swag_draws(cfg, swag, store: SampleStore, paths, chain_of):
    """Cyclical SWAG: a Gaussian fitted to each cycle's snapshots (per chain) and ``draws_per_cycle`` draws of
    each, read one snapshot at a time. Returns (a function that streams the draws' state dicts anew, the same
    draws on every call; draw names; their chains; run metadata)."""
    from csg.data.bundle import derive_seed
    from csg.evaluation.swag import cyclical_swag

    cycle_of = [int(store.metadata(path)["cycle"]) for path in paths]
    draws, rank, scale, seed = int(swag.draws_per_cycle), int(swag.rank), float(swag.scale), int(cfg.seed)

    def stream() -> Iterator[dict[str, torch.Tensor]]:
        snapshots = (((chain, cycle), store.load(path)["state_dict"])
                     for path, chain, cycle in zip(paths, chain_of, cycle_of))
        generator = torch.Generator().manual_seed(derive_seed(seed, 7919))
        return (state for _, state in cyclical_swag(snapshots, draws, rank=rank, scale=scale, generator=generator))

    labels = [(chain, cycle, d) for chain, cycle in dict.fromkeys(zip(chain_of, cycle_of)) for d in range(draws)]
    names = [f"swag_chain{chain:02d}_cycle{cycle:02d}_draw{d:02d}" for chain, cycle, d in labels]
    meta = {"draws_per_cycle": draws, "rank": rank, "scale": scale, "snapshots": len(paths)}
    return stream, names, [chain for chain, _, _ in labels], meta


# What a re-evaluation may change: how the samples are evaluated (evaluation.*), where and in which precision
# (trainer.device, trainer.precision), how and from where the run's own data is read (data.eval_batch_size,
# data.num_workers, data.device_resident, data.root, data.download), and the out-of-distribution set (ood=<name>,
# ood.*). Everything else made the samples (data set, model, sampler, seed, epochs, ...) and is fixed by the run.
OVERRIDABLE = ("evaluation.*", "trainer.device", "trainer.precision", "data.eval_batch_size", "data.num_workers",
               "data.device_resident", "data.root", "data.download", "ood.*")
GROUPS = ("data", "model", "sampler", "trainer", "logger", "ood", "synthetic", "experiment")  # train.py's config groups
from csg.paths import CONFIGS  # noqa: E402
SAVED_CONFIG = ".hydra/config.yaml"


def evaluate_run(run_dir: str | Path, overrides: list[str] | None = None, *, trust_code: bool = False,
                 partial: bool = False) -> dict[str, Any]:
    """Evaluate the samples of a finished run again; writes ``evaluation_<cycle_weights>.json`` beside them.

    A run that has not finished (no ``metrics.json``, or a manifest with fewer samples than planned: still
    training, killed, preempted) is refused as :meth:`csg.Posterior.load` refuses it, unless ``partial``
    (``--partial``): then the samples its manifests record so far are evaluated, and written to
    ``evaluation_partial_<time>.json``, whose metrics say ``partial`` (:func:`format_metrics` too).

    ``overrides`` are ``key=value`` pairs applied to the run's saved config: keys it has that match
    :data:`OVERRIDABLE` (``evaluation.cycle_weights=harmonic``, ``trainer.device=cpu``, ``data.root=...``,
    ``ood.root=...``), or ``ood=<name>`` (configs/ood/<name>.yaml). Every check happens before anything is
    built or written, each failure a one-line :class:`ConfigError`: the run directory and its saved config
    (read as data: :func:`load_run_config`), the overrides (a key the config lacks, or one that made the
    samples), the values (as train.py checks them), where the data are read from (:func:`csg.io.trust.check_run_data`:
    not inside the run directory; CIFAR's pickled batches only from a ``data.root`` given here), the output
    file, and every sample file (complete, a sample of the run's model). ``trust_code``: build the ``_target_``
    objects the run's config names and read its data from where it says (``--trust-code``; :mod:`csg.io.trust`).
    """
    from csg.components import run_directory_targets
    from csg.io.trust import check_run_data

    run_dir = Path(run_dir)
    overrides = list(overrides or [])
    cfg = load_run_config(run_dir, trust_code=trust_code)
    finished = _check_finished(run_dir, cfg, partial)
    cfg = apply_overrides(cfg, overrides)
    with run_directory_targets():
        checks.validate(cfg)
        given = tuple(item.partition("=")[0].strip() for item in overrides)
        check_run_data(cfg, run_dir, trust_code=trust_code, given=given, ood=True)
        store, chains = SampleStore(run_dir / "samples"), int(cfg.sampler.get("chains", 1))
        paths = _sample_paths(store, chains, partial=partial)  # an unfinished run: refused unless partial
        progress = _progress(store, chains, len(paths), finished)
        target = run_dir / (f"evaluation_{cfg.evaluation.cycle_weights}.json" if progress is None else
                            f"evaluation_partial_{datetime.now():%Y-%m-%d_%H-%M-%S}.json")
        _check_writable(run_dir, target)
        store.verify(paths)  # damaged files, before the data is read
        device = resolve_device(str(cfg.trainer.device))
        try:
            data, model = build_data_and_model(cfg, device)
        except OmegaConfBaseException as error:  # a key the saved config lacks
            raise ConfigError("run_dir", str(run_dir), f"a run directory of train.py: its {SAVED_CONFIG} is not a "
                              f"train.py config ({describe(error, limit=160)})") from None
        ood_loader, ood_source = build_ood_loader(cfg, data)
        precision = Precision(str(cfg.trainer.precision), device)
        metrics = evaluate_store(cfg, model, store, data, device, precision, ood_loader, ood_source,
                                 partial=progress is not None)
    metrics.update(method=cfg.sampler.name, data=cfg.data.name, model=cfg.model.name, seed=int(cfg.seed))
    if progress is not None:
        metrics["partial"] = {**progress, "file": target.name}
    try:
        atomic_write_json(target, metrics)
    except OSError as error:
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: "
                          f"{error.strerror or error}") from None
    return metrics


def _check_finished(run_dir: Path, cfg: DictConfig, partial: bool) -> bool:
    """Whether the run has finished (its ``metrics.json``, as :meth:`csg.Posterior.load` reads it); a run without
    one is refused as Posterior.load refuses it, naming ``--partial``, unless ``partial``."""
    from csg.posterior.posterior import _finished_metrics

    missing = not (run_dir / "metrics.json").exists()
    if missing and partial and not cfg.get("synthetic"):
        return False
    try:
        _finished_metrics(run_dir, cfg)
    except ConfigError as error:
        if not missing or cfg.get("synthetic"):
            raise
        raise ConfigError(error.key, error.value, f"{error.allowed}; or evaluate the samples written so far with "
                          "--partial") from None
    return True


def _progress(store: SampleStore, chains: int, written: int, finished: bool) -> dict[str, Any] | None:
    """None for a finished run (``metrics.json``, every manifest complete); else ``{"samples", "planned",
    "finished": False}``: the samples recorded so far, and all chains' plan (None where no manifest says)."""
    stores = [SampleStore(store.directory / f"chain{chain:02d}") for chain in range(chains)] if chains > 1 else [store]
    planned = [manifest.get("planned") for manifest in (one.manifest() for one in stores) if manifest is not None]
    per_chain = max((count for count in planned if count is not None), default=None)  # one plan for every chain
    total = per_chain * chains if per_chain is not None else None
    if finished and (total is None or written >= total):
        return None
    return {"samples": written, "planned": total, "finished": False}


def load_run_config(run_dir: Path, *, trust_code: bool = False) -> DictConfig:
    """The saved config of a train.py run directory, read as data and checked as train.py checks a config; else a
    one-line ConfigError.

    Read as data (:mod:`csg.io.trust`): a regular file of YAML within the size and alias limits; without
    ``trust_code``, a config naming a ``_target_`` (or a resolver that is not OmegaConf's, Hydra's or csg's) is
    refused before anything is imported. With ``trust_code`` its targets are imported by train.py's checks, from
    the Python path (never the current folder: :func:`csg.components.run_directory_targets`)."""
    from csg.components import run_directory_targets
    from csg.io.trust import UntrustedFile, check_no_code, not_a_regular_file, read_yaml

    def refuse(why: str) -> ConfigError:
        return ConfigError("run_dir", str(run_dir), f"a run directory of train.py: {why}")

    if not run_dir.exists():
        raise refuse("it does not exist")
    if not run_dir.is_dir():
        raise refuse("it is a file, not a directory")
    saved = run_dir / SAVED_CONFIG
    special = not_a_regular_file(saved)
    if special == "it does not exist":
        raise refuse(f"it has no {SAVED_CONFIG} (not a run directory, or a run that was refused before it began)")
    if special is not None:
        raise refuse(f"its {SAVED_CONFIG} cannot be read: {special}")
    try:
        cfg = read_yaml(saved)
    except UntrustedFile as error:
        raise refuse(f"its {SAVED_CONFIG} is refused: {error.reason}") from None
    except Exception as error:  # yaml's errors, a binary file, an unreadable one
        raise refuse(f"its {SAVED_CONFIG} {_unreadable_yaml(error)}") from None
    if not isinstance(cfg, DictConfig):
        raise refuse(f"its {SAVED_CONFIG} is not a train.py config (a {type(cfg).__name__}, not a mapping)")
    absent = [key for key in ("data", "model", "sampler", "trainer", "evaluation", "ood", "seed") if key not in cfg]
    if absent:
        raise refuse(f"its {SAVED_CONFIG} is not a train.py config (no {', '.join(absent)})")
    check_no_code(cfg, trust_code)  # before train.py's checks, which import the targets they are given
    try:
        with run_directory_targets():
            checks.validate(cfg)
    except ConfigError as error:
        raise refuse(f"its {SAVED_CONFIG} fails train.py's checks ({error})") from None
    except Exception as error:  # a section that is not a mapping, an interpolation to nothing, ...
        raise refuse(f"its {SAVED_CONFIG} is not a train.py config ({describe(error, limit=160)})") from None
    return cfg


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """``cfg`` with the re-evaluation's ``key=value`` overrides; a :class:`ConfigError` for any other key."""
    cfg = copy.deepcopy(cfg)
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


def _leaf_keys(cfg: DictConfig) -> list[str]:
    """The dotted keys of the config's values (a list is one value), unresolved."""
    keys: list[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for name, item in node.items():
                walk(f"{prefix}.{name}" if prefix else str(name), item)
        else:
            keys.append(prefix)

    walk("", OmegaConf.to_container(cfg, resolve=False))
    return keys


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


def _check_writable(run_dir: Path, target: Path) -> None:
    """Refuse, before any work, a run directory where ``target`` cannot be written (atomically: a new file + rename)."""
    if target.is_dir() or (target.exists() and not target.is_file()):
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: "
                          f"{target.name} is a directory")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: this "
                          "user may not write into it (read-only)")


def _unreadable_yaml(error: Exception) -> str:
    import yaml

    if isinstance(error, yaml.YAMLError):
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or describe(error, limit=160)
        return f"is not YAML ({problem}{f', line {mark.line + 1}' if mark is not None else ''})"
    if isinstance(error, UnicodeDecodeError):
        return "is not text (not YAML)"
    return f"cannot be read ({describe(error, limit=160)})"


def format_metrics(metrics: dict[str, Any]) -> str:
    """A short table: the ensemble against every single sample (and every chain)."""

    def row(label: str, values: dict[str, float]) -> str:
        cells = [f"{values[key]:>9.2f}" if key == "test_error_pct" else f"{values[key]:>9.4f}" for key in METRIC_NAMES]
        return f"{label:<40}" + "".join(cells)

    ensemble = metrics["ensemble"]
    rows = [f"{'':<40}{'error %':>9}{'NLL':>9}{'ECE':>9}{'Brier':>9}"]
    rows.append(row(f"ensemble of {ensemble['num_samples']} ({metrics['cycle_weights']} weights)", ensemble))
    rows += [row(f"  chain {c['chain']} alone ({c['num_samples']} samples)", c) for c in metrics.get("per_chain", [])]
    rows += [row(f"  {str(Path(sample['file']).with_suffix(''))}", sample) for sample in metrics["per_sample"]]
    rows.append(row("best single sample (by NLL)", min(metrics["per_sample"], key=lambda s: s["nll"])))
    if "ood" in metrics:
        ood = metrics["ood"]
        rows.append(f"OOD ({ood['name']}): ensemble entropy {ood['ensemble']['entropy_mean']:.3f} nats, "
                    f"AUROC {ood['ensemble']['auroc']:.3f}; single samples: entropy "
                    f"{sum(s['entropy_mean'] for s in ood['per_sample']) / len(ood['per_sample']):.3f}, AUROC "
                    f"{sum(s['auroc'] for s in ood['per_sample']) / len(ood['per_sample']):.3f} (mean)")
    title = f"{metrics['method']} on {metrics['data']} ({metrics['model']}), seed {metrics['seed']}"
    if "partial" in metrics:  # evaluate_run(partial=True) of a run that has not finished
        partial = metrics["partial"]
        of = f" of {partial['planned']} planned" if partial.get("planned") is not None else ""
        title = (f"PARTIAL: a run that has not finished, its {partial['samples']}{of} samples so far (written to "
                 f"{partial.get('file', '?')})\n{title}")
    if "wall_time_s" in metrics:
        title += (
            f", T={metrics['temperature']:g}, {metrics['gradient_evaluations']} gradient evaluations, "
            f"{metrics['wall_time_s']['total']:.1f} s"
        )
    return "\n".join([title, *rows])
