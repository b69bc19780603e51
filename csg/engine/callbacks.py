"""Your callbacks in csg's loop: objects named by ``_target_`` under the config's ``callbacks`` (Hydra's convention,
as lightning-hydra-template's callbacks), called at the phases of cyclical SG-MCMC.

A callback is any object with one or more of these methods, each given a :class:`LoopEvent`:

- ``on_epoch_start(event)``: before the epoch's first batch (a resumed epoch: before its next batch);
- ``on_stage_change(event)``: before the first iteration of a new stage (``event.stage``, after
  ``event.previous``: exploration -> sampling as the cycle's proportion r(k) reaches beta, sampling ->
  exploration at a warm restart);
- ``on_sample(event)``: a sample was taken (``event.record``: its index, cycle, epoch, iteration, lr,
  temperature, train_loss and file);
- ``on_epoch_end(event)``: the epoch is done (``event.values``: its train_loss, train_acc_pct, cycle, stage, lr,
  temperature, seconds), after its sample.

What they may change: nothing the chain relies on. They run in the process that logs (global rank 0), once for
each of its chains (``event.chain``; under torchrun with a process group per chain, chain 0's), and get the chain's
own ``model`` and ``sampler`` to read (write your own files, log, plot); the step size and temperature are set from
the schedule before every iteration, so a callback that changes a param group's ``lr`` or ``temperature`` stops the
run with one line naming it (it would change this iteration's step and no other); a change to the parameters or the
sampler's state is not the sampler's dynamics any more (and, under DDP, reaches one process only). csg checkpoints no state of theirs: a resumed run calls them from where it
resumes. An exception a callback raises stops the run as any error does (samples already written are kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checks before training read PHASES without importing torch
    import torch

__all__ = ["PHASES", "LoopCallbacks", "LoopEvent", "build_callbacks", "check_spec", "has_a_phase"]

PHASES = ("on_epoch_start", "on_stage_change", "on_sample", "on_epoch_end")


@dataclass(frozen=True)
class LoopEvent:
    """Where one chain is: ``chain`` (0-based), ``epoch`` (0-based), ``iteration`` k (the next to run at a start
    or stage change, the last run at an end or sample), its ``stage`` (``exploration`` or ``sampling``), ``lr``
    and ``temperature`` (the last set), its ``model`` and ``sampler``; ``previous``: the stage before a change;
    ``values``: an epoch's end numbers; ``record``: a sample's record."""

    chain: int
    epoch: int
    iteration: int
    stage: str
    lr: float
    temperature: float
    model: torch.nn.Module
    sampler: torch.optim.Optimizer
    previous: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None


def has_a_phase(callback: Any) -> bool:
    """Whether ``callback`` (an object, or a class) defines at least one of :data:`PHASES`."""
    return any(callable(getattr(callback, phase, None)) for phase in PHASES)


class LoopCallbacks:
    """The callbacks of one loop, called in their order (the config's ``callbacks``, by name) at each phase."""

    def __init__(self, callbacks: Sequence[Any] = ()):
        self.callbacks = list(callbacks)
        self._by_phase = {phase: [getattr(c, phase) for c in self.callbacks if callable(getattr(c, phase, None))]
                          for phase in PHASES}

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def __call__(self, phase: str, event: LoopEvent) -> None:
        for method in self._by_phase[phase]:
            before = _hyperparameters(event.sampler)
            method(event)
            after = _hyperparameters(event.sampler)
            if after != before:
                from csg.errors import ConfigError

                changed = next(key for b, a in zip(before, after) for key in ("lr", "temperature")
                               if b.get(key) != a.get(key))
                raise ConfigError("callbacks", type(getattr(method, "__self__", method)).__name__,
                                  f"a callback that observes: its {phase} changed the sampler's {changed} (csg sets lr "
                                  "and temperature from the schedule at every iteration; choose them with "
                                  "sampler.lr0, the schedule's keys and sampler.temperature)")


def _hyperparameters(sampler) -> list[dict[str, Any]]:
    return [{key: group.get(key) for key in ("lr", "temperature")} for group in getattr(sampler, "param_groups", [])]


def build_callbacks(specs: dict[str, Any] | None) -> list[Any]:
    """The callbacks of the config's ``callbacks`` (a plain mapping: name -> ``{_target_: dotted.path, **keyword
    arguments}``), built in its order; each is checked to define at least one of :data:`PHASES`. A failure is a
    one-line :class:`~csg.errors.ConfigError` naming ``callbacks.<name>``."""
    from csg.components import TARGET, call, locate
    from csg.errors import ConfigError

    built = []
    for name, spec in (specs or {}).items():
        key = f"callbacks.{name}"
        check_spec(key, spec)
        path = spec[TARGET]
        made = call(locate(path, f"{key}._target_"), key, path, "a callback that builds",
                    **{k: v for k, v in spec.items() if k != TARGET})
        if not has_a_phase(made):
            raise ConfigError(key, path, f"an object with one of the methods {', '.join(PHASES)} "
                              f"(it built a {type(made).__name__})")
        built.append(made)
    return built


def check_spec(key: str, spec: Any) -> None:
    """One entry of ``callbacks``: a mapping with a ``_target_`` (a one-line ConfigError naming ``key`` else)."""
    from csg.components import TARGET
    from csg.errors import ConfigError

    if not isinstance(spec, dict) or not isinstance(spec.get(TARGET), str) or not spec[TARGET].strip():
        raise ConfigError(key, str(spec)[:80], "a mapping with _target_ (the dotted path of your callback's class "
                          "or factory) and its keyword arguments, e.g. +callbacks.mine._target_=my_project.Printer")
