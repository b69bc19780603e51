"""The loop around a sampler: schedule, stages, mini-batches, sample collection.

The sampler (:mod:`csg.samplers`) is a pure update rule; this loop sets its
``lr`` and ``temperature`` for every iteration from the schedule, as an LR
scheduler would (the temperature is 0 in exploration stages, so no noise is
drawn there), and saves the model at the collection points of
:mod:`csg.collection`.
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
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from csg.collection import CollectionPoint, SampleStore
from csg.errors import DivergenceError
from csg.schedules import Schedule

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

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)


def _check_finite(loss_sum: torch.Tensor, epoch: int, epochs: int, iteration: int, lr: float, store: SampleStore) -> None:
    value = float(loss_sum)
    if not math.isfinite(value):
        raise DivergenceError(
            f"training loss became {value} in epoch {epoch + 1}/{epochs} (by iteration {iteration}, lr={lr:.4g}); "
            f"stopped; the {len(store)} samples already written in {store.directory} are kept"
        )


def train_chain(
    model: nn.Module,
    sampler: torch.optim.Optimizer,
    schedule: Schedule,
    loader: DataLoader,
    *,
    epochs: int,
    temperature: float,
    plan: Sequence[CollectionPoint],
    store: SampleStore,
    device: torch.device,
    precision: Precision | None = None,
    logger: Logger | None = None,
    log_every_n_steps: int = 50,
    log_every_n_epochs: int = 1,
    progress: bool | None = None,
    on_step: Callable[[int], None] | None = None,
) -> TrainResult:
    """Run one chain for ``epochs`` epochs, saving a sample at each point of ``plan``.

    Every iteration k: ``lr = schedule.lr(k)``; the temperature is
    ``temperature`` if ``schedule.sampling(k)`` else 0. The loss is the mean
    cross-entropy of the mini-batch. A NaN or infinite loss (checked every
    ``log_every_n_steps`` iterations and before every sample) raises
    :class:`csg.errors.DivergenceError`; samples already written stay.
    ``on_step(k)`` (optional) is called after the update of iteration k.
    """
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from csg.loggers import NullLogger

    precision = precision or Precision("32", device)
    logger = logger or NullLogger()
    collect_at = {point.epoch: point for point in plan}
    samples: list[dict[str, Any]] = []
    start = time.perf_counter()
    k = 0
    bar = tqdm(total=epochs * len(loader), unit="it", disable=None if progress in (None, True) else True, dynamic_ncols=True)
    with bar, logging_redirect_tqdm():
        for epoch in range(epochs):
            model.train()
            loss_sum = torch.zeros((), device=device)
            correct = torch.zeros((), device=device, dtype=torch.long)
            seen = 0
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                lr = schedule.lr(k)
                stage = "sampling" if schedule.sampling(k) else "exploration"
                current_temperature = temperature if stage == "sampling" else 0.0
                for group in sampler.param_groups:
                    group["lr"] = lr
                    group["temperature"] = current_temperature
                loss, logits = _step(model, sampler, precision, x, y)
                if on_step is not None:
                    on_step(k)
                loss_sum += loss * y.shape[0]
                correct += (logits.argmax(1) == y).sum()
                seen += y.shape[0]
                k += 1
                bar.update()
                if k % log_every_n_steps == 0:
                    _check_finite(loss_sum, epoch, epochs, k - 1, lr, store)
                    logger.log_step(k, {"loss": float(loss), "lr": lr, "temperature": current_temperature, "stage": stage})
            _check_finite(loss_sum, epoch, epochs, k - 1, lr, store)
            values = {
                "epoch": epoch, "cycle": schedule.cycle(k - 1), "stage": stage, "lr": lr,
                "temperature": current_temperature, "train_loss": float(loss_sum) / seen,
                "train_acc_pct": 100.0 * float(correct) / seen, "seconds": time.perf_counter() - start,
            }
            if (epoch + 1) % log_every_n_epochs == 0 or epoch + 1 == epochs:
                log.info(
                    "epoch %d/%d  cycle %d  %-11s lr %.4g  T %.3g  loss %.4f  acc %.2f%%", epoch + 1, epochs,
                    values["cycle"], stage, lr, current_temperature, values["train_loss"], values["train_acc_pct"],
                )
            if not bar.disable:
                bar.set_postfix(loss=f"{values['train_loss']:.4f}", stage=stage, samples=len(samples))
            logger.log_epoch(epoch, values)
            if epoch in collect_at:
                point = collect_at[epoch]
                meta = {"iteration": point.iteration, "lr": lr, "temperature": current_temperature,
                        "train_loss": values["train_loss"]}
                index = len(samples)
                path = store.save(model, index=index, cycle=point.cycle, epoch=epoch, **meta)
                record = {"index": index, "cycle": point.cycle, "epoch": epoch, "path": str(path), **meta}
                samples.append(record)
                log.info("saved %s", path.name)
                logger.log_sample(index, record)
    return TrainResult(iterations=k, epochs=epochs, seconds=time.perf_counter() - start, samples=samples)


def _step(model: nn.Module, sampler: torch.optim.Optimizer, precision: Precision, x, y):
    """One update on the mean cross-entropy of (x, y); returns the detached loss and logits."""
    with precision.autocast():
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    sampler.zero_grad(set_to_none=True)
    if precision.scaler is not None:
        precision.scaler.scale(loss).backward()
        precision.scaler.step(sampler)
        precision.scaler.update()
    else:
        loss.backward()
        sampler.step()
    return loss.detach(), logits.detach()
