r"""Sample part of a network (``sampler.params``), the rest frozen or optimised (``sampler.rest``).

With parameters split as :math:`\theta = (\theta_s, \theta_r)`, the sampler draws the sampled part from the
posterior *conditional on the rest*,

.. math::
    p(\theta_s \mid \mathcal{D}, \theta_r) \propto \exp\!\big(-U(\theta_s; \theta_r)/T\big), \qquad
    U(\theta_s; \theta_r) = N\,\overline{\ell}(\theta_s, \theta_r) + \tfrac{N\,\mathrm{wd}}{2}\lVert\theta_s\rVert^2,

so the prior, the noise and ``num_data`` act on :math:`\theta_s` alone. ``sampler.rest=frozen``: :math:`\theta_r`
keeps its values (``model.weights``, or its initialisation), takes no gradient, and the modules that hold only
frozen parameters stay in evaluation mode, so their BatchNorm statistics are frozen too (a pretrained trunk
is used as it was trained). ``sampler.rest=sgd``: :math:`\theta_r` follows plain SGD at the schedule's step
size, without noise or prior (:class:`csg.samplers.WithOptimisedRest`): each sample is then a whole model.

``sampler.params`` is a list of patterns, each a parameter name glob (``fc.*``, ``*.lora_*``) or a module name
(``layer4``: every parameter below it). :func:`select_part` resolves them; :func:`freeze_rest` applies
``frozen``; a run that samples a part with the rest frozen stores per sample only the state that can change
(:attr:`SampledPart.sample_keys`), and the rest once (:class:`csg.engine.samples.SampleStore`).
"""

from __future__ import annotations

import fnmatch
import types
from dataclasses import dataclass

from torch import nn

from csg.errors import ConfigError

__all__ = ["REST_MODES", "SampledPart", "freeze_rest", "head_of", "select_part"]

REST_MODES = ("frozen", "sgd")


@dataclass(frozen=True)
class SampledPart:
    """Which parameters a run samples: ``sampled`` (their names, in ``named_parameters`` order), ``rest`` (the
    others' names), ``mode`` (``frozen`` or ``sgd``), and ``sample_keys``: the state-dict keys a sample must
    store (every key when the rest is optimised; else the sampled parameters and the buffers of modules that are
    not frozen). ``whole``: every parameter is sampled (no ``sampler.params``)."""

    sampled: tuple[str, ...]
    rest: tuple[str, ...]
    mode: str
    sample_keys: tuple[str, ...]

    @property
    def whole(self) -> bool:
        return not self.rest

    @property
    def stores_part(self) -> bool:
        """Whether a sample holds less than the whole state (the rest frozen and stored once)."""
        return not self.whole and self.mode == "frozen"


def select_part(model: nn.Module, patterns: list[str] | None, mode: str = "frozen") -> SampledPart:
    """The :class:`SampledPart` of ``model`` for ``sampler.params`` = ``patterns`` (None or empty: the whole
    model) and ``sampler.rest`` = ``mode``; a one-line ConfigError for a pattern that matches no parameter or
    for an unknown mode."""
    if mode not in REST_MODES:
        raise ConfigError("sampler.rest", mode, " | ".join(REST_MODES))
    names = [name for name, _ in model.named_parameters()]
    if not patterns:
        return SampledPart(tuple(names), (), mode, tuple(model.state_dict()))
    if isinstance(patterns, str):
        raise ConfigError("sampler.params", patterns, "a list of patterns, e.g. sampler.params=[fc.*] "
                          "(a parameter name glob or a module name)")
    chosen = set()
    for pattern in patterns:
        matched = {name for name in names if _matches(name, str(pattern))}
        if not matched:
            raise ConfigError("sampler.params", list(patterns), f"patterns that each match a parameter; "
                              f"{pattern!r} matches none (the model's: {_some(names)})")
        chosen |= matched
    sampled = tuple(name for name in names if name in chosen)
    rest = tuple(name for name in names if name not in chosen)
    if mode == "sgd" or not rest:
        return SampledPart(sampled, rest, mode, tuple(model.state_dict()))
    frozen_modules = {name for name, _ in _frozen_modules(model, set(sampled))}
    keys = tuple(key for key in model.state_dict()
                 if key in chosen or (key not in names and key.rpartition(".")[0] not in frozen_modules))
    return SampledPart(sampled, rest, mode, keys)


def check_trainable(model: nn.Module, part: SampledPart, patterns) -> None:
    """Every parameter of a chosen ``part`` takes gradients in the model as built (before :func:`freeze_rest`): a
    parameter the model itself freezes (``requires_grad=False``) cannot be sampled; a one-line ConfigError naming
    it, where torch would say ``element 0 of tensors does not require grad``."""
    if part.whole:
        return
    sampled = set(part.sampled)
    fixed = [name for name, parameter in model.named_parameters() if name in sampled and not parameter.requires_grad]
    if fixed:
        raise ConfigError("sampler.params", list(patterns), f"patterns that match parameters that train; "
                          f"{_some(fixed)} {'is' if len(fixed) == 1 else 'are'} frozen by the model itself "
                          "(requires_grad=False)")


def _matches(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or name.startswith(pattern + ".")


def _frozen_modules(model: nn.Module, sampled: set[str]):
    """The modules none of whose own or descendants' parameters is sampled (a dropout or activation among them)."""
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if not {f"{prefix}{p}" for p, _ in module.named_parameters()} & sampled:
            yield name, module


def freeze_rest(model: nn.Module, part: SampledPart) -> None:
    """``sampler.rest=frozen``: the rest's parameters take no gradient, and every module holding only frozen
    state stays in evaluation mode whatever ``model.train()`` is called (its BatchNorm uses and keeps its running
    statistics, its dropout is off). Nothing to do for a whole model or ``sampler.rest=sgd``."""
    if part.whole or part.mode != "frozen":
        return
    rest = set(part.rest)
    for name, parameter in model.named_parameters():
        if name in rest:
            parameter.requires_grad_(False)
    for _, module in _frozen_modules(model, set(part.sampled)):
        module.train = types.MethodType(_stay_in_eval, module)
        module.training = False


def _stay_in_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    """``nn.Module.train`` of a frozen module: itself and its children stay in evaluation mode."""
    return nn.Module.train(self, False)


def _some(names: list[str], shown: int = 6) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def head_of(model: nn.Module, part: SampledPart) -> str | None:
    """The name of the submodule whose parameters are exactly the sampled ones, with the rest frozen (a sampled
    last layer: its ensemble is evaluated with the trunk once, :class:`csg.evaluation.heads.TrunkFeatures`, which
    checks that its output is the model's); None for any other part."""
    if not part.stores_part:
        return None
    sampled = set(part.sampled)
    for name, module in model.named_modules():
        if name and {f"{name}.{p}" for p, _ in module.named_parameters()} == sampled:
            return name if all(key.startswith(f"{name}.") for key in part.sample_keys) else None
    return None
