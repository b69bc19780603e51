"""A run's saved config read back: the boundary between a run directory's YAML and what loads it as a posterior.

:func:`load_run_config` reads a train.py run's saved config (``.hydra/config.yaml``) as data and checks it as
train.py checks a config (:func:`check_saved_config`); :func:`apply_overrides` applies a re-evaluation's overrides
(:data:`OVERRIDABLE`); :func:`check_no_code` and :func:`check_run_data` are what loading a run trusts
(:mod:`csg.io.trust` says why); :func:`saved_config_errors` turns a key the saved config lacks into one line;
:func:`config_yaml` is the config as a posterior file carries it. :mod:`csg.posterior` reads runs through these,
and holds no config machinery of its own.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from csg.checks import config as checks
from csg.components import has_target
from csg.errors import ConfigError, DamagedFileError, describe
from csg.io.trust import OPT_IN, SAFE_RESOLVERS, UNPICKLING, UntrustedFile, not_a_regular_file
from csg.paths import CONFIGS

__all__ = ["GROUPS", "OVERRIDABLE", "SAVED_CONFIG", "apply_overrides", "check_no_code", "check_run_data",
           "check_saved_config", "config_yaml", "flat_leaves", "load_run_config", "saved_config_errors"]

_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.-]*)\s*:")

# What a re-evaluation may change: how the samples are evaluated (evaluation.*), where and in which precision
# (trainer.device, trainer.precision), how and from where the run's own data is read (data.eval_batch_size,
# data.num_workers, data.device_resident, data.root, data.download), and the out-of-distribution set (ood=<name>,
# ood.*). Everything else made the samples (data set, model, sampler, seed, epochs, ...) and is fixed by the run.
OVERRIDABLE = ("evaluation.*", "trainer.device", "trainer.precision", "data.eval_batch_size", "data.num_workers",
               "data.device_resident", "data.root", "data.download", "ood.*")
GROUPS = ("data", "model", "sampler", "trainer", "logger", "ood", "synthetic", "experiment")  # train.py's config groups
SAVED_CONFIG = ".hydra/config.yaml"


def load_run_config(run_dir: Path, *, trust_code: bool = False) -> DictConfig:
    """The saved config of a train.py run directory, read as data and checked as train.py checks a config; else a
    one-line ConfigError.

    Read as data (:mod:`csg.io.trust`): a regular file of YAML within the size and alias limits; without
    ``trust_code``, a config naming a ``_target_`` (or a resolver that is not OmegaConf's, Hydra's or csg's) is
    refused before anything is imported. With ``trust_code`` its targets are imported by train.py's checks, from
    the Python path (never the current folder: :func:`csg.components.run_directory_targets`)."""
    from csg.reporting import read_yaml

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
    and names no code (:func:`check_no_code`, unless ``trust_code``); else ``refuse(why)`` raised
    (``why``: "is not a train.py config (...)", "fails train.py's checks (...)")."""
    from csg.components import run_directory_targets

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


def check_no_code(cfg: DictConfig, trust_code: bool) -> None:
    """Refuse a run's config that would import or call anything: a ``_target_`` anywhere (data, model, sampler,
    ood, any nested node), or an interpolation of a resolver outside :data:`SAFE_RESOLVERS`; a one-line
    :class:`~csg.errors.ConfigError` naming the key and its value. Nothing when ``trust_code``."""
    if trust_code:
        return
    for key, value in _walk("", OmegaConf.to_container(cfg, resolve=False)):
        if key == "_target_" or key.endswith("._target_"):
            raise ConfigError(key, value, "a run directory's config is read as data: csg builds only its own "
                              "components, by name (data.name, model.name, sampler.update_rule), and imports or calls "
                              f"no _target_ a run names; {OPT_IN}")
        for resolver in _RESOLVER.findall(value) if isinstance(value, str) else ():
            if resolver not in SAFE_RESOLVERS:
                raise ConfigError(key, value, f"a run directory's config is read as data: interpolations of "
                                  f"OmegaConf's, Hydra's and csg's own resolvers only, not {resolver}; {OPT_IN}")


def check_run_data(cfg: DictConfig, run_dir: Path, *, trust_code: bool, given: tuple[str, ...] = (),
                   ood: bool = False) -> None:
    """Before a run's data set (and, with ``ood``, its out-of-distribution set) is read: refuse a root inside the
    run directory, and a data set whose files are unpickled (:data:`UNPICKLING`) from a root the run's config names
    (``given``: the keys the caller set, e.g. ``data.root`` on evaluate_run.py's command line). One line naming the
    key; nothing when ``trust_code``."""
    if trust_code:
        return
    sections = ["data", "ood"] if ood and str(OmegaConf.select(cfg, "ood.name", default="none")) != "none" else ["data"]
    inside = Path(run_dir).resolve()
    for section in sections:
        root = _root(cfg, section)
        if root is not None and (root == inside or inside in root.parents):
            raise ConfigError(f"{section}.root", str(OmegaConf.select(cfg, f"{section}.root")),
                              f"a data root outside the run directory being loaded: it is {root}, inside {inside}, "
                              f"whose files come with the run; name your own copy ({section}.root=...), or {OPT_IN}")
    name = str(OmegaConf.select(cfg, "data.name", default=""))
    if name in UNPICKLING and not has_target(cfg.data) and "data.root" not in given:
        raise ConfigError("data.name", name, f"a data set read without unpickling: reading it unpickles "
                          f"{UNPICKLING[name]} (pickle can run code) from data.root={_root(cfg, 'data')}, a root the "
                          f"run's config names; name your own copy (evaluate_run.py RUN data.root=...), or {OPT_IN}")


def _root(cfg: DictConfig, section: str) -> Path | None:
    """``<section>.root`` as the data set reads it (resolved, ``~`` expanded, from the current folder), or None."""
    try:
        root = OmegaConf.select(cfg, f"{section}.root", default=None)
    except Exception:  # noqa: BLE001 - an interpolation to nothing: the data set's reader says so later
        return None
    if not isinstance(root, str) or not root.strip():
        return None
    return Path(os.path.abspath(Path(root).expanduser())).resolve()


def _walk(prefix: str, node: Any):
    """(dotted key, value) of every key and leaf of a plain container, a mapping's keys included."""
    if isinstance(node, dict):
        for name, item in node.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            if isinstance(item, (dict, list)):
                if str(name) == "_target_":
                    yield key, item
                yield from _walk(key, item)
            else:
                yield key, item
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _walk(f"{prefix}.{index}", item) if isinstance(item, (dict, list)) else [(f"{prefix}.{index}",
                                                                                                   item)]


def config_yaml(cfg: DictConfig | None) -> str:
    """``cfg`` as YAML text, unresolved (what a posterior file carries; "" for none)."""
    return OmegaConf.to_yaml(cfg) if cfg is not None else ""


@contextlib.contextmanager
def saved_config_errors(source: Path, key: str = "run_dir",
                        config: str = f"a run directory of train.py: its {SAVED_CONFIG}") -> Iterator[None]:
    """Within it, a key the saved config lacks (an error of OmegaConf's) is a one-line ConfigError naming ``key``
    (``source``) and ``config``, what holds the config."""
    try:
        yield
    except OmegaConfBaseException as error:
        raise ConfigError(key, str(source), f"{config} is not a train.py config ({describe(error, limit=160)})"
                          ) from None
