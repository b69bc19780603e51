"""A posterior as one file: :meth:`csg.Posterior.save` writes it, :meth:`csg.Posterior.load` reads it back on a
machine without the run directory.

The file is data only: tensors and text, never a pickle of code.

- ``.safetensors`` (the safetensors format, read without unpickling anything): tensor ``member00003/<key>`` is
  entry ``<key>`` of member 3's state dict, ``shared/<key>`` an entry every member holds alike; the header's
  metadata ``csg`` is a JSON document (below).
- ``.pt`` (``torch.save``, read back with ``torch.load(weights_only=True)``): ``{"csg": <the JSON document>,
  "states": [state dict, ...], "shared": {key: tensor}}``.

An entry equal in every member (a part-sampling run's frozen rest: :mod:`csg.engine.part`) is stored once, as
``shared``; each member holds the others, so a posterior over a last layer costs the layer per member.

The JSON document: ``format`` (:data:`FORMAT`), ``config`` (the run's saved config, YAML text: the model's
architecture is config, rebuilt from it by name, or through its ``_target_`` with ``trust_code``), ``metrics``
(its ``metrics.json``: ``num_classes`` and ``input_shape`` build the model without the data), ``names``,
``chains``, ``weights``, ``weighting`` (the members, as :class:`~csg.posterior.evaluate.EnsembleMembers` holds
them: cyclical-SWAG draws are saved as drawn), ``keys`` (the state dict's keys, the same for every member) and
``source`` (the run directory it came from, for the record). Reading checks all of it before any tensor is used:
a file that is not one of these, or whose tensors are not the members' it describes, is a one-line
:class:`~csg.errors.DamagedFileError` (key ``path``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from csg.engine.samples import non_finite
from csg.errors import ConfigError, DamagedFileError, describe
from csg.io.atomic import atomic_open, atomic_torch_save
from csg.io.trust import not_a_regular_file
from csg.posterior.inputs import weights_usable

__all__ = ["FORMAT", "SUFFIXES", "PosteriorFile", "check_members", "check_suffix", "loaded_config",
           "posterior_from_file", "read_posterior", "write_posterior"]

FORMAT = "csg.posterior/1"
SUFFIXES = (".safetensors", ".pt")
ALLOWED = "a file name ending in .safetensors (safetensors) or .pt (torch.save, read back weights-only)"
WHAT = "a posterior file written by Posterior.save"


@dataclass
class PosteriorFile:
    """What a posterior file holds: its JSON document's entries, and :meth:`states`, which streams the members'
    state dicts (on the CPU) from the file, one at a time, anew on every call."""

    path: Path
    config: str
    metrics: dict[str, Any]
    names: list[str]
    chains: list[int]
    weights: list[float]
    weighting: str
    keys: list[str]
    source: str
    stream: Callable[[], Iterator[dict[str, Tensor]]]
    shapes: Callable[[int], dict[str, tuple[int, ...]]]  # member -> {key: shape}, without reading the tensors

    def states(self) -> Iterator[dict[str, Tensor]]:
        """The members' state dicts, in order."""
        return self.stream()


def check_suffix(path: Path) -> str:
    """The format of ``path`` (``safetensors`` or ``torch``) from its suffix; a one-line ConfigError for any other."""
    if path.suffix not in SUFFIXES:
        raise ConfigError("path", str(path), ALLOWED)
    if path.suffix == ".safetensors":
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:
            raise ConfigError("path", str(path), f"{ALLOWED}: safetensors is not installed here (pip install "
                              "safetensors), use .pt") from None
        return "safetensors"
    return "torch"


def write_posterior(path: str | Path, *, config: str, metrics: dict[str, Any], names: list[str], chains: list[int],
                    weights: list[float], weighting: str, states: Iterable[dict[str, Tensor]], source: str) -> Path:
    """Write the posterior file ``path`` (atomically; its format from its suffix, :data:`SUFFIXES`). Memory: every
    member's tensors at once, twice for safetensors (which builds the file in memory before writing it)."""
    path = Path(path)
    kind = check_suffix(path)
    if not weights_usable([float(w) for w in weights]):
        raise ConfigError("weights", str(list(weights))[:80], "finite non-negative numbers with a finite positive "
                          "sum: the posterior file is not written")
    collected = [{key: tensor.detach().to("cpu").contiguous() for key, tensor in state.items()} for state in states]
    for index, state in enumerate(collected):
        bad = non_finite(state)
        if bad is not None:
            raise ConfigError("states", f"member {index}", f"members of finite weights (its {bad} holds NaN or inf): "
                              "the posterior file is not written")
    keys = list(collected[0]) if collected else []
    shared = _shared(collected, keys)
    collected = [{key: tensor for key, tensor in state.items() if key not in shared} for state in collected]
    document = json.dumps({"format": FORMAT, "config": config, "metrics": metrics, "names": names, "chains": chains,
                           "weights": weights, "weighting": weighting, "keys": keys, "source": source})
    try:
        if kind == "safetensors":
            from safetensors.torch import save

            # each tensor its own storage: safetensors refuses tensors sharing memory (tied weights)
            tensors = {f"member{i:05d}/{key}": tensor.clone() for i, state in enumerate(collected)
                       for key, tensor in state.items()}
            tensors.update({f"shared/{key}": tensor.clone() for key, tensor in shared.items()})
            with atomic_open(path) as handle:
                handle.write(save(tensors, metadata={"csg": document}))
        else:
            atomic_torch_save({"csg": document, "states": collected, "shared": shared}, path)
    except OSError as error:
        raise ConfigError("path", str(path), f"a file that can be written: {error.strerror or error}") from None
    return path


def _shared(states: list[dict[str, Tensor]], keys: list[str]) -> dict[str, Tensor]:
    """The entries equal in every one of two or more members (none where every entry is: each member keeps one)."""
    if len(states) < 2:
        return {}
    same = {key: states[0][key] for key in keys
            if all(key in s and s[key].shape == states[0][key].shape and torch.equal(s[key], states[0][key])
                   for s in states[1:])}
    return same if len(same) < len(keys) else {}


def read_posterior(path: str | Path) -> PosteriorFile:
    """The posterior file ``path``, checked (see the module); tensors are read only when :meth:`PosteriorFile.states`
    streams them."""
    path = Path(path)

    def damaged(why: str) -> DamagedFileError:
        return DamagedFileError("path", str(path), f"{WHAT}: {why}", path=path)

    special = not_a_regular_file(path)
    if special is not None:
        raise (ConfigError("path", str(path), f"a run directory or {WHAT}: {special}") if special ==
               "it does not exist" else damaged(special))
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head == b"PK\x03\x04":
        document, states, shapes = _read_torch(path, damaged)
    else:
        document, states, shapes = _read_safetensors(path, damaged)
    members = _checked_document(document, damaged)
    count = len(members["names"])
    for index in range(count):
        if sorted(shapes(index)) != sorted(members["keys"]):
            raise damaged(f"member {index} ({members['names'][index]}) holds other tensors than the keys it records")
    if shapes(count):
        raise damaged(f"it holds more members than the {count} its header names")
    for index, state in enumerate(states()):  # read once, before any is used: a NaN member would poison every mean
        bad = non_finite(state)
        if bad is not None:
            raise damaged(f"member {index} ({members['names'][index]}) holds NaN or inf in {bad}")
    return PosteriorFile(path=path, **members, stream=states, shapes=shapes)


def _checked_document(text: Any, damaged) -> dict[str, Any]:
    """The JSON document's entries, each of the type it must have; else ``damaged(why)``."""
    try:
        document = json.loads(text) if isinstance(text, str) else None
    except ValueError as error:
        raise damaged(f"its header is not JSON ({describe(error, limit=100)})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise damaged(f"its header is not one of format {FORMAT}")
    wanted = {"config": str, "metrics": dict, "names": list, "chains": list, "weights": list, "weighting": str,
              "keys": list, "source": str}
    wrong = [key for key, kind in wanted.items() if not isinstance(document.get(key), kind)]
    if wrong:
        raise damaged(f"its header lacks {', '.join(wrong)}")
    count = len(document["names"])
    if not count or len(document["chains"]) != count or len(document["weights"]) != count:
        raise damaged("its header's names, chains and weights are not one per member")
    if not weights_usable(document["weights"]) or not all(isinstance(c, int) for c in document["chains"]):
        raise damaged("its header's weights are not finite non-negative numbers with a finite positive sum, or its "
                      "chains not integers")
    metrics = document["metrics"]
    if not isinstance(metrics.get("num_classes"), int) or not isinstance(metrics.get("input_shape"), list):
        raise damaged("its metrics lack num_classes and input_shape (the model's shape)")
    return {key: document[key] for key in wanted}


def _read_safetensors(path: Path, damaged):
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            document = (handle.metadata() or {}).get("csg")
            tensor_shapes: dict[str, tuple[int, ...]] = {key: tuple(handle.get_slice(key).get_shape())
                                                         for key in handle.keys()}
    except Exception as error:  # noqa: BLE001 - safetensors' SafetensorError, a header it cannot parse
        raise damaged(f"it is neither a torch.save file nor a safetensors file ({describe(error, limit=120)})"
                      ) from None

    shared = {key[len("shared/"):]: shape for key, shape in tensor_shapes.items() if key.startswith("shared/")}

    def own(index: int) -> dict[str, tuple[int, ...]]:
        prefix = f"member{index:05d}/"
        return {key[len(prefix):]: shape for key, shape in tensor_shapes.items() if key.startswith(prefix)}

    def shapes(index: int) -> dict[str, tuple[int, ...]]:
        mine = own(index)
        return {**shared, **mine} if mine else {}

    def states() -> Iterator[dict[str, Tensor]]:
        index = 0
        while own(index):
            prefix = f"member{index:05d}/"
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                common = {key: handle.get_tensor(f"shared/{key}") for key in shared}
                yield {**common, **{key: handle.get_tensor(prefix + key) for key in own(index)}}
            index += 1

    return document, states, shapes


def _read_torch(path: Path, damaged):
    try:
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - torch.load's errors differ by what is wrong
        why = ("it holds Python objects other than tensors, which are not unpickled (torch.load weights_only=True)"
               if "weights_only" in str(error) or "weights only" in str(error).lower()
               else f"it cannot be read by torch.load ({type(error).__name__})")
        raise damaged(why) from None
    if not isinstance(record, dict) or not isinstance(record.get("states"), list):
        raise damaged("it is a torch.save file, but not a posterior's (no states)")
    states, shared = record["states"], record.get("shared", {})
    if not all(isinstance(s, dict) and all(isinstance(t, Tensor) for t in s.values()) for s in [*states, shared]):
        raise damaged("its states are not dicts of tensors")

    def shapes(index: int) -> dict[str, tuple[int, ...]]:
        if index >= len(states) or not states[index]:
            return {}
        return {key: tuple(t.shape) for key, t in {**shared, **states[index]}.items()}

    return record.get("csg"), lambda: ({**shared, **state} for state in states), shapes


def loaded_config(saved: PosteriorFile, trust_code: bool):
    """The run's config a posterior file carries, read as a run directory's is (:mod:`csg.io.trust`: YAML within
    limits, no ``_target_`` unless ``trust_code``) and checked as train.py checks a config; else a one-line
    :class:`~csg.errors.ConfigError` (key ``path``)."""
    from csg.checks.saved import check_saved_config
    from csg.reporting import UntrustedFile, parse_yaml

    try:
        cfg = parse_yaml(saved.config)
    except UntrustedFile as error:
        raise DamagedFileError("path", str(saved.path), f"{WHAT}: its config is refused: {error.reason}",
                               path=saved.path) from None
    except Exception as error:  # noqa: BLE001 - yaml's errors
        raise DamagedFileError("path", str(saved.path), f"{WHAT}: its config is not YAML "
                               f"({describe(error, limit=120)})", path=saved.path) from None
    return check_saved_config(cfg, lambda why: ConfigError("path", str(saved.path), f"{WHAT}: its config {why}"),
                              trust_code=trust_code)


def check_members(saved: PosteriorFile, reference: dict[str, Tensor]) -> None:
    """Every member of ``saved`` is a state dict of the model whose ``state_dict()`` is ``reference``: the same keys,
    each tensor of the same shape; else a one-line :class:`~csg.errors.DamagedFileError` (key ``path``)."""
    if sorted(saved.keys) != sorted(reference):
        missing = sorted(set(reference) - set(saved.keys))[:3]
        unexpected = sorted(set(saved.keys) - set(reference))[:3]
        raise DamagedFileError("path", str(saved.path), f"{WHAT}: its members are not state dicts of the model its "
                               f"config builds (missing {missing}, unexpected {unexpected})", path=saved.path)
    for index in range(len(saved.names)):
        for key, shape in saved.shapes(index).items():
            if tuple(shape) != tuple(reference[key].shape):
                raise DamagedFileError("path", str(saved.path), f"{WHAT}: member {index} ({saved.names[index]}) has "
                                       f"{key} of shape {list(shape)}, the model's {list(reference[key].shape)}",
                                       path=saved.path)


def posterior_from_file(path: Path, device: torch.device, trust_code: bool, model=None) -> dict[str, Any]:
    """What :class:`~csg.posterior.posterior.Posterior` is made of, from the posterior file ``path``: its config
    (:func:`loaded_config`), the model it builds on ``device`` (from a forked random state, without the data) or
    the caller's ``model`` (a module or factory: a file of :meth:`csg.Posterior.from_states` has no config), the
    members (each checked against the model: :func:`check_members`) and the run's metrics."""
    from types import SimpleNamespace

    from csg.checks.config import PRECISIONS
    from csg.engine.devices import Precision
    from csg.posterior.evaluate import EnsembleMembers
    from csg.posterior.inputs import build_run, own_random_state, run_likelihood
    from csg.likelihoods import attach
    from csg.posterior.sources import own_model, recorded_regression

    saved = read_posterior(path)
    if model is None and not saved.config:
        raise ConfigError("model", "None", "the module (or a factory of it) whose state dicts the file holds: "
                          f"{path} was saved from Posterior.from_states, without a config")
    cfg = loaded_config(saved, trust_code) if saved.config else None
    shape = SimpleNamespace(num_classes=int(saved.metrics["num_classes"]),
                            input_shape=tuple(int(size) for size in saved.metrics["input_shape"]))
    likelihood, target_scale = recorded_regression(saved.metrics, run_likelihood(
        cfg, path, key="path", config=f"{WHAT}: its config") if cfg is not None else None)
    if model is not None:
        model = attach(likelihood, own_model(model, device))
    else:
        with own_random_state(device):
            _, model = build_run(cfg, device, path, trust_code, shape=shape, key="path",
                                 config=f"{WHAT}: its config", likelihood=likelihood)
    check_members(saved, model.state_dict())
    model.eval()
    members = EnsembleMembers(list(saved.names), list(saved.chains), [float(w) for w in saved.weights],
                              saved.weighting, saved.states)
    precision = str(cfg.trainer.precision) if cfg is not None else str(saved.metrics.get("precision", "32"))
    bins = saved.metrics.get("ece_bins", 15)
    if precision not in PRECISIONS or not isinstance(bins, int) or bins < 1:
        raise DamagedFileError("path", str(path), f"{WHAT}: its metrics' precision ({precision!r}) or ece_bins "
                               f"({bins!r}) is not one csg writes", path=path)
    return dict(run_dir=None, source=path, cfg=cfg, metrics=saved.metrics, model=model, members=members,
                device=device, precision=Precision(precision, device), num_classes=shape.num_classes,
                input_shape=shape.input_shape, trust_code=trust_code, ece_bins=None if cfg is not None else bins,
                likelihood=likelihood, target_scale=target_scale)
