"""``csg.build``: the parts of a train.py command, built and not trained, for code that works on the task itself
(a reference sampler, a probe of the model) or steps a chain in its own loop (:class:`csg.Chain`).

The command is checked as train.py checks it (:func:`csg.check_command`) and composed from csg's configs; the parts
are those a run builds, by the same functions, so they are the run's: its data and model (:func:`build`), and on
:class:`Built` its schedule, sampler and parameter trace for any model and number of data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from csg.errors import CommandRefused
from csg.launch.api import check_command, checked_overrides
from csg.paths import CONFIGS

__all__ = ["Built", "build"]


@dataclass(frozen=True)
class Built:
    """What ``python train.py <overrides>`` would train, built and not trained (:func:`build`).

    ``config``: the composed config (read-only); ``settings``: its typed settings (``csg.engine.settings``'s
    ``RunSettings``, read once), from which the parts are built; ``data``: the data bundle (``train``,
    ``train_eval`` and ``test`` loaders, ``num_train``, ``num_classes``, ``input_shape``); ``model``: the network,
    freshly initialised under torch's current seed; ``ood``: the out-of-distribution loader of ``ood=`` (None for ``ood=none``). These three
    are None when built with ``data=False``. ``likelihood``: the command's :class:`csg.likelihoods.Likelihood`,
    built once and used by every part built from it."""

    config: Any
    data: Any = None
    model: Any = None
    ood: Any = None
    likelihood: Any = None
    settings: Any = None

    def new_model(self, num_classes: int, input_shape: Sequence[int]):
        """A fresh model of the command's ``model=`` for ``num_classes`` and ``input_shape``, as a run builds it
        (a ``_target_`` model, adapters, the likelihood's outputs and parameters included)."""
        from types import SimpleNamespace

        from csg.engine.build import build_model

        return build_model(self.settings, SimpleNamespace(num_classes=num_classes, input_shape=tuple(input_shape)),
                           self.likelihood)

    def schedule(self, total_steps: int):
        """The command's step-size schedule (:mod:`csg.schedules`) over ``total_steps`` iterations."""
        from csg.engine.build import build_schedule

        return build_schedule(self.settings.schedule, total_steps)

    def sampler(self, model, num_data: int, generator=None, device: str = "cpu"):
        """The command's sampler (a ``torch.optim.Optimizer``) over ``model``'s parameters, for ``num_data``
        training points; ``generator``: the ``torch.Generator`` of its noise."""
        import torch

        from csg.engine import distributed
        from csg.engine.build import build_sampler

        return build_sampler(self.settings, model, num_data, distributed.Layout(), torch.device(device), generator,
                             likelihood=self.likelihood)

    def trace(self, schedule, total_steps: int, model):
        """The command's parameter trace (``trace.enabled``; :class:`csg.evaluation.ess.ParameterTrace`) of
        ``model`` under ``schedule``, or None where the command traces nothing."""
        from csg.engine.build import plan_trace

        return plan_trace(self.settings.trace, schedule, total_steps, model)


def build(overrides: Sequence[str] = (), device: str = "cpu", data: bool = True) -> Built:
    """The parts of the command ``overrides`` as train.py builds them: the command checked first (a refusal is a
    :class:`~csg.errors.CommandRefused`, as :func:`csg.train`'s), composed from csg's configs, then its data,
    model and OOD loader on ``device`` (``data=False``: the config alone, nothing read)."""
    import torch
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from csg.engine.build import build_data_and_model, build_likelihood, build_ood_loader
    from csg.engine.settings import run_settings

    overrides = checked_overrides(overrides)
    message = check_command(overrides)
    if message is not None:
        raise CommandRefused(message, key="overrides", value=overrides)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    settings = run_settings(cfg)
    likelihood = build_likelihood(settings.likelihood)
    OmegaConf.set_readonly(cfg, True)
    if not data:
        return Built(config=cfg, likelihood=likelihood, settings=settings)
    bundle, model = build_data_and_model(settings, torch.device(device), likelihood=likelihood)
    ood, _ = build_ood_loader(settings, bundle)
    return Built(config=cfg, data=bundle, model=model, ood=ood, likelihood=likelihood, settings=settings)
