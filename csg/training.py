"""The loop around a sampler: schedule, stages, mini-batches, sample collection, checkpoints.

The sampler (:mod:`csg.samplers`) is a pure update rule; this loop sets its
``lr`` and ``temperature`` for every iteration from the schedule, as an LR
scheduler would (the temperature is 0 in exploration stages, so no noise is
drawn there), and saves the model at the collection points of
:mod:`csg.collection`. It can start from a :class:`csg.checkpoint.LoopState`
(a resumed run) and hand its state to a checkpoint callback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from csg.checkpoint import LoopState
from csg.collection import CollectionPoint, SampleStore
from csg.errors import DivergenceError
from csg.schedules import Schedule
from csg.step import Step

log = logging.getLogger(__name__)


class Logger(Protocol):
    """What the loop reports to (see :mod:`csg.loggers`)."""

    def log_step(self, step: int, values: dict[str, Any]) -> None: ...

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None: ...

    def log_sample(self, index: int, values: dict[str, Any]) -> None: ...


@dataclass
class TrainResult:
    iterations: int = 0
    epochs: int = 0
    seconds: float = 0.0
    samples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Precision:
    """Autocast and loss scaling for ``precision`` in {"32", "bf16-mixed", "16-mixed"}."""

    name: str
    device: torch.device

    def __post_init__(self):
        self.dtype = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[self.name]
        self.scaler = torch.amp.GradScaler(self.device.type) if self.name == "16-mixed" else None

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The autocast context (none for "32"); ``cache=False`` inside a CUDA graph capture."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache)


@dataclass
class Hooks:
    """Optional callbacks of the loop.

    - ``on_step(k)``: after the update of iteration k;
    - ``checkpoint(state)``: at the end of every ``checkpoint_every`` epochs (0: never) and before a stop;
    - ``should_stop()``: polled after every step; True saves a checkpoint and raises ``stop_error()``.
    """

    on_step: Callable[[int], None] | None = None
    checkpoint: Callable[[LoopState], None] | None = None
    checkpoint_every: int = 0
    should_stop: Callable[[], bool] | None = None
    stop_error: Callable[[], BaseException] | None = None


def _check_finite(loss_sum: float, epoch: int, epochs: int, iteration: int, lr: float, state: LoopState,
                  store: SampleStore | None) -> None:
    if not math.isfinite(loss_sum):
        where = f" in {store.directory}" if store is not None else ""
        raise DivergenceError(
            f"training loss became {loss_sum} in epoch {epoch + 1}/{epochs} (by iteration {iteration}, lr={lr:.4g}); "
            f"stopped; the {len(state.samples)} samples already written{where} are kept"
        )


def train_chain(
    model: nn.Module,
    sampler: torch.optim.Optimizer,
    schedule: Schedule,
    loader,
    *,
    epochs: int,
    temperature: float,
    plan: Sequence[CollectionPoint],
    store: SampleStore | None,
    device: torch.device,
    precision: Precision | None = None,
    logger: Logger | None = None,
    log_every_n_steps: int = 50,
    log_every_n_epochs: int = 1,
    progress: bool | None = None,
    on_step: Callable[[int], None] | None = None,
    hooks: Hooks | None = None,
    state: LoopState | None = None,
    world_size: int = 1,
    sample_model: nn.Module | None = None,
    interaction=None,
    step: Step | None = None,
) -> TrainResult:
    """Run one chain for ``epochs`` epochs, saving a sample at each point of ``plan``.

    Every iteration k: ``lr = schedule.lr(k)``; the temperature is
    ``temperature`` if ``schedule.sampling(k)`` else 0. The loss is the mean
    cross-entropy of the global mini-batch (with ``world_size`` > 1 each process
    weights its shard so that DDP's gradient average is that mean exactly). A
    NaN or infinite loss (checked every ``log_every_n_steps`` iterations and
    before every sample) raises :class:`csg.errors.DivergenceError`; samples
    already written stay. ``state`` resumes a run; ``store=None`` writes no
    samples (a DDP process other than the chain's first); ``sample_model`` is
    what a sample saves (the model inside a DDP wrapper); ``interaction``
    (:mod:`csg.interaction`) scales this chain's step size and temperature, estimates
    its energy for the sampler, and exchanges replicas after the update. ``step``
    (:mod:`csg.step`) is the iteration itself: eager by default, or compiled and
    captured. The loss and accuracy are summed on the device; the host reads
    them only at the NaN checks and at the end of an epoch.
    """
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from csg.loggers import NullLogger

    precision = precision or Precision("32", device)
    logger = logger or NullLogger()
    hooks = hooks or Hooks()
    on_step = on_step or hooks.on_step
    sample_model = sample_model or model
    step = step or Step(model, sampler, precision, interaction=interaction)
    collect_at = {point.epoch: point for point in plan}
    state = state or LoopState()
    batches = len(loader)
    started = time.perf_counter() - state.seconds
    k = state.iteration
    bar = tqdm(total=epochs * batches, initial=k, unit="it", disable=None if progress in (None, True) else True,
               dynamic_ncols=True)
    lr, stage, current_temperature = schedule.lr(k), "exploration", 0.0
    chain_lr, chain_temperature = lr, 0.0  # this chain's: the schedule's times the interaction's scales
    with bar, logging_redirect_tqdm():
        for epoch in range(state.epoch, epochs):
            start_batch = state.batch if epoch == state.epoch else 0
            if interaction is not None:
                interaction.on_epoch_start(epoch, start_batch, model, loader, precision.autocast)
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch, start_batch)
            if start_batch == 0:
                state.loss_sum, state.correct, state.seen = 0.0, 0, 0
            model.train()
            loss_sum = torch.tensor(state.loss_sum, device=device)
            correct = torch.tensor(state.correct, device=device)
            for b, (x, y) in enumerate(loader, start=start_batch):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                lr = schedule.lr(k)
                stage = "sampling" if schedule.sampling(k) else "exploration"
                current_temperature = temperature if stage == "sampling" else 0.0
                lr_scale, temperature_scale = interaction.scales() if interaction is not None else (1.0, 1.0)
                for group in sampler.param_groups:
                    group["lr"] = lr * lr_scale
                    group["temperature"] = current_temperature * temperature_scale
                chain_lr, chain_temperature = lr * lr_scale, current_temperature * temperature_scale
                scale = world_size / loader.global_batch_size(b) if world_size > 1 else None
                loss, hits = step(x, y, scale)
                if interaction is not None:
                    interaction.after_update(k, current_temperature)
                if on_step is not None:
                    on_step(k)
                loss_sum += loss * y.shape[0]
                correct += hits
                state.seen += y.shape[0]
                k += 1
                bar.update()
                if k % log_every_n_steps == 0:
                    _check_finite(float(loss_sum), epoch, epochs, k - 1, lr, state, store)
                    extra = interaction.log_values() if interaction is not None else {}
                    logger.log_step(k, {"loss": float(loss), "lr": chain_lr, "temperature": chain_temperature, "stage": stage,
                                        **extra})
                if hooks.should_stop is not None and hooks.should_stop():
                    _sync(state, epoch, b + 1, k, loss_sum, correct, started)
                    if hooks.checkpoint is not None:
                        hooks.checkpoint(state)
                    raise hooks.stop_error()
            _check_finite(float(loss_sum), epoch, epochs, k - 1, lr, state, store)
            _sync(state, epoch, batches, k, loss_sum, correct, started)
            values = {
                "epoch": epoch, "cycle": schedule.cycle(k - 1), "stage": stage, "lr": chain_lr,
                "temperature": chain_temperature, "train_loss": state.loss_sum / max(state.seen, 1),
                "train_acc_pct": 100.0 * state.correct / max(state.seen, 1), "seconds": state.seconds,
            }
            if (epoch + 1) % log_every_n_epochs == 0 or epoch + 1 == epochs:
                log.info(
                    "epoch %d/%d  cycle %d  %-11s lr %.4g  T %.3g  loss %.4f  acc %.2f%%", epoch + 1, epochs,
                    values["cycle"], stage, chain_lr, chain_temperature, values["train_loss"], values["train_acc_pct"],
                )
            if not bar.disable:
                bar.set_postfix(loss=f"{values['train_loss']:.4f}", stage=stage, samples=len(state.samples))
            logger.log_epoch(epoch, values)
            if epoch in collect_at:
                point = collect_at[epoch]
                meta = {"iteration": point.iteration, "lr": chain_lr, "temperature": chain_temperature,
                        "train_loss": values["train_loss"],
                        **(interaction.sample_metadata() if interaction is not None else {})}
                index = len(state.samples)
                record = {"index": index, "cycle": point.cycle, "epoch": epoch, **meta}
                if store is not None:
                    path = store.save(sample_model, index=index, cycle=point.cycle, epoch=epoch, **meta)
                    record["path"] = str(path)
                    log.info("saved %s", path.name)
                state.samples.append(record)
                logger.log_sample(index, record)
            state.epoch, state.batch = epoch + 1, 0
            state.loss_sum, state.correct, state.seen = 0.0, 0, 0
            if hooks.checkpoint is not None and hooks.checkpoint_every and (epoch + 1) % hooks.checkpoint_every == 0:
                hooks.checkpoint(state)
    return TrainResult(iterations=k, epochs=epochs, seconds=time.perf_counter() - started, samples=state.samples)


def _sync(state: LoopState, epoch: int, batch: int, k: int, loss_sum, correct, started: float) -> None:
    state.epoch, state.batch, state.iteration = epoch, batch, k
    state.loss_sum, state.correct = float(loss_sum), int(correct)
    state.seconds = time.perf_counter() - started
