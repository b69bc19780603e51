"""A user's own components, named in a config by ``_target_`` (Hydra's convention): data, model, sampler.

``data._target_``, ``model._target_`` and ``sampler.optimizer._target_`` are dotted paths
(``my_project.nets.TwoLayer``) to a callable; the other keys of the group are its keyword arguments
(a nested ``_target_`` among them is built by :func:`hydra.utils.instantiate`). A path the user typed on
train.py's command line is imported as ``python -m`` imports: from the installed packages and from the directory
the command runs in. A run directory's targets (read back from its saved config, only with ``trust_code``:
:mod:`csg.io.trust`) are resolved inside :func:`run_directory_targets`, which never puts the current folder on
``sys.path``: a module shipped inside a run directory is not imported by evaluating the run from its folder.

Every failure is a one-line :class:`~csg.errors.ConfigError` naming the key: a path that does not
import, an object that is not callable, a call that raises. What the call must return is checked where
it is used (:mod:`csg.data.custom`, :mod:`csg.models.custom`, :mod:`csg.samplers.custom`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from csg.errors import ConfigError, describe

TARGET = "_target_"
Config = Mapping[str, Any]  # a composed train.py config (an omegaconf DictConfig: csg.engine.settings), read by key
_FROM_RUN_DIRECTORY: ContextVar[bool] = ContextVar("csg_targets_from_run_directory", default=False)


@contextlib.contextmanager
def run_directory_targets() -> Iterator[None]:
    """Within it, :func:`locate` resolves the targets of a run directory's saved config: it does not put the
    current folder on ``sys.path`` (as it does for a target typed on train.py's command line)."""
    token = _FROM_RUN_DIRECTORY.set(True)
    try:
        yield
    finally:
        _FROM_RUN_DIRECTORY.reset(token)


def has_target(node: Any) -> bool:
    """Whether a config node names a user's component (has a ``_target_`` key)."""
    return isinstance(node, Mapping) and TARGET in node.keys()  # a DictConfig: `in node` is False for a `???` value


def select(cfg: Config, key: str, default: Any = None) -> Any:
    """The value at dotted ``key`` of a config (``model.num_classes``), ``default`` where a part of the path is
    absent or not a mapping, or the value is a mandatory one never given (a DictConfig's ``???``), as
    ``OmegaConf.select(cfg, key, default=...)`` reads such keys. An interpolation is resolved; one that does not
    resolve raises. Mapping keys only: no list index (``a.0``, ``a[0]``) and no relative key (``.a``), which
    OmegaConf's select also takes."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node is _ABSENT:
            return default
    return node


_ABSENT = object()


def keyword_arguments(values: Mapping[str, Any], framework_keys: tuple[str, ...], key: str) -> dict[str, Any]:
    """A user's component's keyword arguments: the keys of its group's ``values`` (plain, resolved) but
    ``_target_`` and ``framework_keys``.

    A nested mapping with its own ``_target_`` is built by Hydra's ``instantiate``; a failure there is a
    ConfigError naming ``key`` (the group)."""
    from hydra.utils import instantiate

    options = {str(k): v for k, v in values.items() if str(k) not in (TARGET, *framework_keys)}
    if not options:
        return {}
    try:
        return instantiate(options, _convert_="all")
    except Exception as error:  # noqa: BLE001 - Hydra's message, in one line
        raise ConfigError(key, str(values.get(TARGET)), f"keyword arguments that build: {describe(error)}") from None


def target_of(cfg: Config, key: str) -> str:
    """The dotted path at ``key`` (e.g. ``model._target_``), or a ConfigError when none was given."""
    value = select(cfg, key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, value, "the dotted path of a callable, e.g. my_project.nets.TwoLayer (none given)")
    return value.strip()


def locate(path: str, key: str) -> Callable[..., Any]:
    """The callable at dotted ``path`` (Hydra's ``get_object``); a ConfigError naming ``key`` when it does not
    import or is not callable. The current folder is put on ``sys.path`` first (as ``python -m`` does), except
    inside :func:`run_directory_targets`."""
    from hydra.utils import get_object

    from_run = _FROM_RUN_DIRECTORY.get()
    if not from_run and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m`: a module of the directory the command runs in
    hydra_log = logging.getLogger("hydra.utils")  # get_object logs its failure too: the one line below says it
    disabled, hydra_log.disabled = hydra_log.disabled, True
    try:
        found = get_object(path)
    except Exception as error:  # noqa: BLE001 - an import error, or any error the module raises on import
        cause = error.__cause__ or error
        where = "the installed packages or the Python path" if from_run else (
            "the installed packages or the directory you run in")
        why = _missing_attribute(path) or describe(cause)
        top = path.partition(".")[0]
        if from_run and isinstance(cause, ModuleNotFoundError) and cause.name == top and (
                Path(top).is_dir() or Path(f"{top}.py").is_file()):
            why += (f" (the folder you run in holds {top}, but a run directory's code is imported from the Python "
                    "path only: PYTHONPATH=. puts this folder on it)")
        raise ConfigError(key, path, f"a dotted path that imports (from {where}): {why}") from None
    finally:
        hydra_log.disabled = disabled
    if not callable(found):
        raise ConfigError(key, path, f"a callable (a class or function); it is a {type(found).__name__}")
    return found


def _missing_attribute(path: str) -> str | None:
    """Where ``path`` names a module that imports and an attribute it lacks (``my_project.models.TinyCNNN``): that,
    with the closest name it has; else None (Hydra's own message says what failed: a module that does not exist,
    or one that raises on import)."""
    import difflib
    import importlib
    import pkgutil

    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        try:
            found: Any = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
                continue  # this prefix is no module: a shorter one may be
            return None
        except Exception:  # noqa: BLE001 - the module raises on import: Hydra's message has it
            return None
        for depth, attribute in enumerate(parts[end:], start=end):
            if not hasattr(found, attribute):
                names = [n for n in dir(found) if not n.startswith("_")]
                if hasattr(found, "__path__"):  # a package: its modules too, imported or not
                    names += [module.name for module in pkgutil.iter_modules(found.__path__)]
                close = difflib.get_close_matches(attribute, names, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                what = "module or attribute" if hasattr(found, "__path__") else "attribute"  # a package: either
                return f"{'.'.join(parts[:depth])} has no {what} {attribute!r}{hint}"
            found = getattr(found, attribute)
        return None
    return None


# where a group that names a user's callable keeps its _target_, for its label
LABEL_TARGETS = {"data": "_target_", "model": "_target_", "sampler": "optimizer._target_"}


def label(cfg: Any, group: str) -> str:
    """What runs of ``cfg`` are called by their ``group`` (``data``, ``model``, ``sampler``): the option's ``name``,
    except that ``custom`` (data=custom, model=custom, sampler=custom) is called by the last part of the user's
    ``_target_`` (``my_project.nets.TwoLayer``: ``TwoLayer``) once one is given. Run directories, logs and
    metrics.json carry it (the ``csg_label`` resolver of the configs)."""
    name = str(select(cfg, f"{group}.name", default=group))
    if name != "custom" or group not in LABEL_TARGETS:
        return name
    try:
        target = select(cfg, f"{group}.{LABEL_TARGETS[group]}")
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve: the checks say so
        target = None
    return str(target).rpartition(".")[2] if isinstance(target, str) and target else name


def accepts(function: Callable[..., Any], name: str, *, by_name: bool = False) -> bool:
    """Whether ``function`` takes keyword ``name``: by name, or (unless ``by_name``) through ``**kwargs``."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the documented keywords
        return True
    return any(p.name == name and p.kind is not p.POSITIONAL_ONLY or p.kind is p.VAR_KEYWORD and not by_name
               for p in parameters)


def call(function: Callable[..., Any], key: str, path: str, what: str, **kwargs: Any) -> Any:
    """``function(**kwargs)``; its exception becomes a ConfigError naming ``key`` (the user's code is at fault)."""
    try:
        return function(**kwargs)
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the user's code raises, the answer is one line
        given = ", ".join(sorted(k for k in kwargs if k != "params")) or "no keywords"
        raise ConfigError(key, path, f"{what}; called with {given}: {describe(error)}") from None
