"""Cyclical SG-MCMC in a Lightning run: :class:`CyclicalSGMCMC`, a ``lightning.pytorch`` callback (``pip install
"csg[lightning]"``).

Any LightningModule whose ``configure_optimizers`` returns a csg sampler (:mod:`csg.samplers`: SGLD, SGHMC, ...,
or any optimizer whose param groups take ``lr`` and ``temperature``) becomes a cyclical SG-MCMC run: the callback
steps one :class:`csg.Chain` (Zhang et al. 2020, Algorithm 1: the step size alpha_k of the schedule, eq. 1, and
the temperature T while sampling, 0 while exploring, set before every training batch; a sample at the end of the
epochs the collection plan names), and :meth:`CyclicalSGMCMC.posterior` gives the :class:`csg.Posterior` of the
samples. It is csg's own stage switch and collection (the class ``csg-train``'s loop steps its chains through).

Resume: the chain's position and samples are the callback's state, saved in Lightning's checkpoints and restored
by ``trainer.fit(..., ckpt_path=...)`` (the sampler's state, with its noise generator, is the optimizer's: Lightning
saves it too). Several processes (Lightning's DDP strategy): the gradients are averaged by Lightning, each
process draws its own sampler's noise (give every process the same generator seed so that the replicas stay
equal), and only global rank 0 writes samples to ``store``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import csg  # noqa: F401  (csg first: its torchvision guard, before lightning imports torchvision)
from csg.engine.sampling import Chain
from csg.errors import ConfigError
from csg.schedules import Schedule

log = logging.getLogger(__name__)

try:
    from lightning.pytorch.callbacks import Callback
except ImportError as error:  # pragma: no cover - the extra is not installed
    raise ImportError("csg.integrations.lightning needs Lightning: pip install 'csg[lightning]'") from error

__all__ = ["CyclicalSGMCMC"]


class CyclicalSGMCMC(Callback):
    """One chain of cyclical SG-MCMC over a Lightning ``fit``.

    ``schedule``: a :class:`csg.schedules.Schedule` over the run's ``max_epochs * num_training_batches``
    iterations, or a callable that makes one from that number (``lambda steps: Cyclical(lr0=0.1,
    total_steps=steps, cycles=4, explore=0.8)``). ``temperature``: T of the sampling stages. The plan takes the
    last ``samples_per_cycle`` epochs of each cycle that end in a sampling stage. ``store``: a folder to write the
    samples to in csg's format (atomic files and a manifest), else they are kept in memory as CPU copies.
    ``module``: the attribute of the LightningModule whose state is a sample (``"net"``; default: the whole
    module). ``set_epoch``: call the training loader's ``set_epoch(epoch)`` at each epoch's start (csg's loaders:
    their order is a function of the seed and the epoch), where it has one.
    """

    def __init__(self, schedule: Schedule | Callable[[int], Schedule], *, temperature: float,
                 samples_per_cycle: int = 1, store: str | Path | None = None, module: str | None = None,
                 set_epoch: bool = True):
        self.schedule, self.temperature, self.samples_per_cycle = schedule, float(temperature), int(samples_per_cycle)
        self.store, self.module, self.set_epoch = store, module, set_epoch
        self.chain: Chain | None = None
        self._restored: dict[str, Any] | None = None

    def _target(self, pl_module) -> torch.nn.Module:
        if self.module is None:
            return pl_module
        target = getattr(pl_module, self.module, None)
        if not isinstance(target, torch.nn.Module):
            raise ConfigError("module", self.module, f"an attribute of {type(pl_module).__name__} that is a module")
        return target

    def on_train_start(self, trainer, pl_module) -> None:
        """Make the chain: the sampler, the schedule over the run's iterations, the plan (and a restored state)."""
        optimizers = trainer.optimizers
        if len(optimizers) != 1 or "temperature" not in getattr(optimizers[0], "defaults", {}):
            # a torch optimizer whose groups merely carry a "temperature" key would ignore it: no noise
            have = ", ".join(type(o).__name__ for o in optimizers) or "no optimizer"
            raise ConfigError("configure_optimizers", have, "one csg sampler (csg.samplers: its param groups "
                              "take lr and temperature)")
        self._target(pl_module)  # module=: an attribute that is a module, before the first epoch
        batches, epochs = trainer.num_training_batches, trainer.max_epochs
        if not isinstance(batches, int) or epochs is None or epochs < 1:
            raise ConfigError("max_epochs", str(epochs), "a number of epochs, over a loader with a length: the "
                              "schedule spans max_epochs x batches per epoch")
        if trainer.accumulate_grad_batches != 1:  # the chain counts batches; the sampler would step every n
            raise ConfigError("accumulate_grad_batches", str(trainer.accumulate_grad_batches), "1: each batch is "
                              "one iteration of the chain (a larger batch size accumulates instead)")
        if trainer.max_steps not in (None, -1) and trainer.max_steps < epochs * batches:
            raise ConfigError("max_steps", str(trainer.max_steps), f"-1 or at least max_epochs x batches per epoch "
                              f"= {epochs * batches}: the schedule and its samples span them all")
        schedule = self.schedule if isinstance(self.schedule, Schedule) else self.schedule(epochs * batches)
        if schedule.total_steps not in (None, epochs * batches):
            raise ConfigError("schedule", f"{schedule.total_steps} iterations", f"a schedule over the run's "
                              f"max_epochs x batches per epoch = {epochs * batches} iterations")
        rank_zero = trainer.global_rank == 0
        self.chain = Chain(trainer.optimizers[0], schedule, epochs=epochs, batches_per_epoch=batches,
                           temperature=self.temperature, samples_per_cycle=self.samples_per_cycle,
                           store=self.store if rank_zero else None, keep=None if rank_zero else False)
        if self._restored is not None:
            self._resume(trainer, pl_module, epochs, batches)
        elif trainer.current_epoch or trainer.global_step:
            raise ConfigError("ckpt_path", f"epoch {trainer.current_epoch}", "a checkpoint that holds "
                              "CyclicalSGMCMC's state (this one was saved without it)")
        self._set_epoch(trainer)  # Lightning made the epoch's iterator already: csg's loader reads it lazily

    def _set_epoch(self, trainer) -> None:
        loader = trainer.train_dataloader
        if self.set_epoch and hasattr(loader, "set_epoch"):
            loader.set_epoch(trainer.current_epoch)

    def _resume(self, trainer, pl_module, epochs: int, batches: int) -> None:
        """The restored chain, checked against where Lightning resumes: the same run (epochs, batches per epoch),
        at an epoch's end (a checkpoint after an epoch's last batch, before its end was seen: that end now)."""
        restored, self._restored = self._restored, None
        if (restored.get("epochs"), restored.get("batches")) != (epochs, batches):
            raise ConfigError("max_epochs", f"{epochs} x {batches} batches", f"the checkpoint's run: "
                              f"{restored.get('epochs')} x {restored.get('batches')} (its schedule and samples)")
        self.chain.load_state_dict({key: restored[key] for key in ("loop", "kept")})
        state = self.chain.state
        if state.batch == batches and state.epoch == trainer.current_epoch - 1:
            self.chain.end_epoch(self._target(pl_module))
        if (state.epoch, state.batch) != (trainer.current_epoch, 0):
            raise ConfigError("ckpt_path", f"epoch {trainer.current_epoch}", f"a checkpoint saved at an epoch's end "
                              f"(ModelCheckpoint's default); the chain stopped at epoch {state.epoch}, batch "
                              f"{state.batch}")

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        """The training loader's epoch order (``set_epoch(epoch)``, where it has one and ``set_epoch`` is on)."""
        self._set_epoch(trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        """The sampler's ``lr`` (alpha_k) and ``temperature`` (T while sampling, else 0) for this iteration."""
        self.chain.begin_step()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """The iteration is done: the chain moves to the next."""
        self.chain.end_step()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """A sample (the module's state, or its ``module`` attribute's) when the plan names this epoch, with the
        epoch's ``train_loss`` where the module logs one."""
        loss = trainer.callback_metrics.get("train_loss")
        metadata = {"train_loss": float(loss)} if isinstance(loss, torch.Tensor) and loss.numel() == 1 else {}
        self.chain.end_epoch(self._target(pl_module), **metadata)

    def on_train_end(self, trainer, pl_module) -> None:
        """The sampler's temperatures against T and its sampling stages' motion (:meth:`diagnostics`), logged by
        the chain's first process."""
        reading = self.diagnostics()
        if reading is not None and trainer.global_rank == 0:
            log.info("sampler: %s", reading)
        chain = self.chain
        if chain is not None and chain.state.epoch < chain.epochs and trainer.global_rank == 0:
            log.warning("the run stopped at epoch %d of %d (max_time, max_steps, early stopping or should_stop): %d "
                        "of the %d planned samples taken; resume from its last checkpoint (ckpt_path=) for the "
                        "rest", chain.state.epoch, chain.epochs, len(chain.samples), len(chain.plan))

    def diagnostics(self):
        """Does the chain sample? The sampler's configurational and kinetic temperatures against T and its sampling
        stages' relaxation (:meth:`csg.Chain.diagnostics`, :mod:`csg.evaluation.monitor`), None before training."""
        return self.chain.diagnostics() if self.chain is not None else None

    def state_dict(self) -> dict[str, Any]:
        """The chain's position and samples, and the run's epochs and batches per epoch (Lightning saves it in its
        checkpoints)."""
        if self.chain is None:
            return self._restored or {}
        return {**self.chain.state_dict(), "epochs": self.chain.epochs, "batches": self.chain.batches_per_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The state of :meth:`state_dict` (from a Lightning checkpoint), applied when training starts."""
        self._restored = dict(state_dict) if state_dict else None

    @property
    def samples(self) -> list[dict[str, Any]]:
        """A record per sample taken (:attr:`csg.Chain.samples`)."""
        return self.chain.samples if self.chain is not None else []

    def sample_states(self) -> list[dict[str, torch.Tensor]]:
        """The samples' state dicts (CPU), in collection order."""
        return self.chain.sample_states() if self.chain is not None else []

    def posterior(self, model: torch.nn.Module | Callable[[], torch.nn.Module], *, input_shape, **options: Any):
        """The :class:`csg.Posterior` of the samples (:meth:`csg.Posterior.from_states`): ``model`` the module
        they are states of (the LightningModule, or its ``module`` attribute), ``input_shape`` one input's shape;
        ``options`` as ``from_states`` takes them (``device``, ``precision``, ...)."""
        from csg.posterior.posterior import Posterior

        return Posterior.from_states(model, self.sample_states(), input_shape=input_shape,
                                     names=self.chain.sample_names(), **options)
