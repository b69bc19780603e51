"""The loop around a sampler: schedule, stages, mini-batches, sample collection, checkpoints.

The sampler (:mod:`csg.samplers`) is a pure update rule; this loop sets its
``lr`` and ``temperature`` for every iteration from the schedule, as an LR
scheduler would (the temperature is 0 in exploration stages, so no noise is
drawn there), and saves the model at the collection points of
:mod:`csg.engine.collection`. It can start from a :class:`csg.engine.checkpoint.LoopState`
(a resumed run) and hand its state to a checkpoint callback.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from csg.engine.checkpoint import LoopState
from csg.engine.collection import CollectionPoint, SampleStore
from csg.errors import DivergenceError
from csg.schedules import Schedule
from csg.engine.step.single import Step

log = logging.getLogger(__name__)


class Logger(Protocol):
    """What the loop reports to (see :mod:`csg.engine.loggers`)."""

    def log_step(self, step: int, values: dict[str, Any]) -> None: ...

    def log_epoch(self, epoch: int, values: dict[str, Any]) -> None: ...

    def log_sample(self, index: int, values: dict[str, Any]) -> None: ...


@dataclass
class TrainResult:
    """What a chain's loop ended with; ``state``: its position at the end (what a last checkpoint would hold)."""

    iterations: int = 0
    epochs: int = 0
    seconds: float = 0.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    state: LoopState | None = None


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

    :func:`train_chains` takes the shared ones (``checkpoint_every``, ``should_stop``, ``stop_error``); there,
    ``on_step`` and ``checkpoint`` belong to each :class:`Lane`.
    """

    on_step: Callable[[int], None] | None = None
    checkpoint: Callable[[LoopState], None] | None = None
    checkpoint_every: int = 0
    should_stop: Callable[[], bool] | None = None
    stop_error: Callable[[], BaseException] | None = None


@dataclass
class Lane:
    """One chain in the loop: its model, sampler, mini-batches, sample store, state and own callbacks.

    ``chain`` (0-based) names it in logged rows, and as chain + 1 in log lines, when several lanes step together.
    ``on_step(k)`` and ``checkpoint(state)`` are as in :class:`Hooks`, for this chain. ``check_state()`` is
    called once, after the loop's first step (when a sampler has made its state): it raises where the chain's
    state could not be checkpointed, before any checkpoint has promised a resume.
    """

    model: nn.Module
    sampler: torch.optim.Optimizer
    loader: Any
    store: SampleStore | None = None
    state: LoopState | None = None
    sample_model: nn.Module | None = None
    interaction: Any = None
    on_step: Callable[[int], None] | None = None
    checkpoint: Callable[[LoopState], None] | None = None
    chain: int = 0
    check_state: Callable[[], None] | None = None


def _check_finite(loss_sums: list[float], epoch: int, epochs: int, iteration: int, lr: float,
                  states: Sequence[LoopState], lanes: Sequence[Lane]) -> None:
    for loss_sum, state, lane in zip(loss_sums, states, lanes):
        if not math.isfinite(loss_sum):
            which = f"chain {lane.chain + 1}: " if len(lanes) > 1 else ""
            if state.samples:
                where = f" in {lane.store.directory}" if lane.store is not None else ""
                kept = f"the {len(state.samples)} samples already written{where} are kept"
            else:
                kept = "no sample had been written yet"
            raise DivergenceError(
                f"{which}training loss became {loss_sum} in epoch {epoch + 1}/{epochs} (by iteration {iteration}, "
                f"lr={lr:.4g}); stopped; {kept}; a smaller sampler.lr0 (or, diverging at a warm restart after a long "
                "sampling stage, a lower sampler.temperature) may help"
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
    (:mod:`csg.engine.interaction`) scales this chain's step size and temperature, estimates
    its energy for the sampler, and exchanges replicas after the update. ``step``
    (:mod:`csg.engine.step.single`) is the iteration itself: eager by default, or compiled and
    captured. The loss and accuracy are summed on the device; the host reads
    them only at the NaN checks and at the end of an epoch.
    """
    hooks = hooks or Hooks()
    precision = precision or Precision("32", device)
    lane = Lane(model, sampler, loader, store=store, state=state, sample_model=sample_model, interaction=interaction,
                on_step=on_step or hooks.on_step, checkpoint=hooks.checkpoint)
    shared = replace(hooks, on_step=None, checkpoint=None)  # the chain's own callbacks are the lane's now
    return train_chains(
        [lane], schedule, epochs=epochs, temperature=temperature, plan=plan, device=device,
        step=step or Step(model, sampler, precision, interaction=interaction), precision=precision, logger=logger,
        log_every_n_steps=log_every_n_steps, log_every_n_epochs=log_every_n_epochs, progress=progress, hooks=shared,
        world_size=world_size,
    )[0]


def train_chains(
    lanes: Sequence[Lane],
    schedule: Schedule,
    *,
    epochs: int,
    temperature: float,
    plan: Sequence[CollectionPoint],
    device: torch.device,
    step: Callable,
    precision: Precision | None = None,
    logger: Logger | None = None,
    log_every_n_steps: int = 50,
    log_every_n_epochs: int = 1,
    progress: bool | None = None,
    hooks: Hooks | None = None,
    world_size: int = 1,
) -> list[TrainResult]:
    """Run the chains of ``lanes`` in lock-step on one schedule (see :func:`train_chain` for one chain).

    One lane: ``step(x, y, scale)`` (:mod:`csg.engine.step.single`). Several: ``step(xs, ys)`` takes their K
    mini-batches and returns K losses and hit counts (:class:`csg.engine.step.stacked.StackedStep`,
    :class:`csg.engine.step.streamed.StreamedStep`); every chain
    keeps its own data order, noise, samples and checkpoints, and its wall time is its share (1/K) of the
    loop's. The lanes must start at the same position. ``hooks`` gives the shared checkpoint period and
    stop signal; a stop saves every lane's checkpoint.
    """
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from csg.engine.loggers import NullLogger

    precision = precision or Precision("32", device)
    logger = logger or NullLogger()
    hooks = hooks or Hooks()
    if hooks.on_step is not None or hooks.checkpoint is not None:
        raise ValueError("train_chains: on_step and checkpoint are each Lane's, not the shared Hooks'")
    several = len(lanes) > 1
    collect_at = {point.epoch: point for point in plan}
    states = [lane.state or LoopState() for lane in lanes]
    if len({(s.epoch, s.batch, s.iteration) for s in states}) > 1:
        raise ValueError("chains stepped together must start at the same epoch and batch")
    first = states[0]
    loaders = [lane.loader for lane in lanes]
    batches = len(loaders[0])
    clock = _Clock([s.seconds for s in states])
    k = started_at = first.iteration
    bar = tqdm(total=epochs * batches, initial=k, unit="it", disable=None if progress in (None, True) else True,
               dynamic_ncols=True)
    lr, stage = schedule.lr(k), "exploration"
    chain_lr, chain_temperature = [lr] * len(lanes), [0.0] * len(lanes)  # each chain's: schedule x interaction scales
    with bar, logging_redirect_tqdm():
        for epoch in range(first.epoch, epochs):
            start_batch = first.batch if epoch == first.epoch else 0
            for lane, state in zip(lanes, states):
                if lane.interaction is not None:
                    lane.interaction.on_epoch_start(epoch, start_batch, lane.model, lane.loader, precision.autocast)
                if hasattr(lane.loader, "set_epoch"):
                    lane.loader.set_epoch(epoch, start_batch)
                if start_batch == 0:
                    state.loss_sum, state.correct, state.seen = 0.0, 0, 0
                lane.model.train()
            loss_sum = torch.tensor([s.loss_sum for s in states], device=device)
            correct = torch.tensor([s.correct for s in states], device=device)
            for b, batch in enumerate(zip(*loaders), start=start_batch):
                xs = [x.to(device, non_blocking=True) for x, _ in batch]
                ys = [y.to(device, non_blocking=True) for _, y in batch]
                lr = schedule.lr(k)
                stage = "sampling" if schedule.sampling(k) else "exploration"
                current_temperature = temperature if stage == "sampling" else 0.0
                for i, lane in enumerate(lanes):
                    lr_scale, temperature_scale = lane.interaction.scales() if lane.interaction is not None else (1.0, 1.0)
                    chain_lr[i], chain_temperature[i] = lr * lr_scale, current_temperature * temperature_scale
                    for group in lane.sampler.param_groups:
                        group["lr"], group["temperature"] = chain_lr[i], chain_temperature[i]
                if several:
                    loss, hits = step(xs, ys)
                else:
                    loss, hits = step(xs[0], ys[0], world_size / loaders[0].global_batch_size(b) if world_size > 1 else None)
                for lane in lanes:
                    if lane.interaction is not None:
                        lane.interaction.after_update(k, current_temperature)
                    if lane.on_step is not None:
                        lane.on_step(k)
                    if k == started_at and lane.check_state is not None:
                        lane.check_state()
                size = ys[0].shape[0]
                loss_sum += loss * size
                correct += hits
                for state in states:
                    state.seen += size
                k += 1
                bar.update()
                if k % log_every_n_steps == 0:
                    _check_finite(loss_sum.tolist(), epoch, epochs, k - 1, lr, states, lanes)
                    losses = loss.reshape(-1).tolist()
                    for i, lane in enumerate(lanes):
                        extra = lane.interaction.log_values() if lane.interaction is not None else {}
                        logger.log_step(k, {**({"chain": lane.chain} if several else {}), "loss": losses[i],
                                            "lr": chain_lr[i], "temperature": chain_temperature[i], "stage": stage,
                                            **extra})
                if hooks.should_stop is not None and hooks.should_stop():
                    _sync(states, epoch, b + 1, k, loss_sum, correct, clock)
                    for lane, state in zip(lanes, states):
                        if lane.checkpoint is not None:
                            lane.checkpoint(state)
                    raise hooks.stop_error()
            _check_finite(loss_sum.tolist(), epoch, epochs, k - 1, lr, states, lanes)
            _sync(states, epoch, batches, k, loss_sum, correct, clock)
            for i, (lane, state) in enumerate(zip(lanes, states)):
                values = {
                    **({"chain": lane.chain} if several else {}),
                    "epoch": epoch, "cycle": schedule.cycle(k - 1), "stage": stage, "lr": chain_lr[i],
                    "temperature": chain_temperature[i], "train_loss": state.loss_sum / max(state.seen, 1),
                    "train_acc_pct": 100.0 * state.correct / max(state.seen, 1), "seconds": state.seconds,
                }
                if (epoch + 1) % log_every_n_epochs == 0 or epoch + 1 == epochs:
                    log.info(
                        "%sepoch %d/%d  cycle %d  %-11s lr %.4g  T %.3g  loss %.4f  acc %.2f%%",
                        f"chain {lane.chain + 1}  " if several else "", epoch + 1, epochs, values["cycle"], stage,
                        chain_lr[i], chain_temperature[i], values["train_loss"], values["train_acc_pct"],
                    )
                if not bar.disable and i == 0:
                    bar.set_postfix(loss=f"{values['train_loss']:.4f}", stage=stage, samples=len(state.samples))
                logger.log_epoch(epoch, values)
                if epoch in collect_at:
                    _collect(lane, state, collect_at[epoch], epoch, values, chain_lr[i], chain_temperature[i], logger)
                state.epoch, state.batch = epoch + 1, 0
                state.loss_sum, state.correct, state.seen = 0.0, 0, 0
                if lane.checkpoint is not None and hooks.checkpoint_every and (epoch + 1) % hooks.checkpoint_every == 0:
                    lane.checkpoint(state)
    elapsed = clock.shares()
    return [TrainResult(iterations=k, epochs=epochs, seconds=seconds, samples=state.samples, state=state)
            for seconds, state in zip(elapsed, states)]


def _collect(lane: Lane, state: LoopState, point: CollectionPoint, epoch: int, values: dict[str, Any], lr: float,
             temperature: float, logger: Logger) -> None:
    """Save the lane's model as the next sample (when it has a store) and record it."""
    meta = {"iteration": point.iteration, "lr": lr, "temperature": temperature, "train_loss": values["train_loss"],
            **(lane.interaction.sample_metadata() if lane.interaction is not None else {})}
    index = len(state.samples)
    record = {"index": index, "cycle": point.cycle, "epoch": epoch, **meta}
    if lane.store is not None:
        path = lane.store.save(lane.sample_model or lane.model, index=index, cycle=point.cycle, epoch=epoch, **meta)
        record["path"] = str(path)
        log.info("saved %s", path.name)
    state.samples.append(record)
    logger.log_sample(index, record)


class _Clock:
    """Each chain's training seconds: what it had when the loop started plus its share of the loop's wall time."""

    def __init__(self, seconds: list[float]):
        self.before, self.started = seconds, time.perf_counter()

    def shares(self) -> list[float]:
        share = (time.perf_counter() - self.started) / len(self.before)
        return [before + share for before in self.before]


def _sync(states: Sequence[LoopState], epoch: int, batch: int, k: int, loss_sum: Tensor, correct: Tensor,
          clock: _Clock) -> None:
    for state, loss, hits, seconds in zip(states, loss_sum.tolist(), correct.tolist(), clock.shares()):
        state.epoch, state.batch, state.iteration = epoch, batch, k
        state.loss_sum, state.correct = loss, int(hits)
        state.seconds = seconds
