"""The loop around a sampler: schedule, stages, mini-batches, sample collection, checkpoints.

The sampler (:mod:`csg.samplers`) is a pure update rule; this loop sets its
``lr`` and ``temperature`` for every iteration from the schedule, as an LR
scheduler would (the temperature is 0 in exploration stages, so no noise is
drawn there), and saves the model at the collection points of
:mod:`csg.schedules`. It can start from a :class:`csg.engine.checkpoint.LoopState`
(a resumed run) and hand its state to a checkpoint callback. Its phases, as the algorithm reads: an epoch
starts, steps its batches (the iteration's hyper-parameters, the step, the NaN check and logged row, a poll
for a stop), and ends (the epoch's numbers, a sample at a collection point, a checkpoint).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from csg.engine.accounting import Clock, check_finite, sync
from csg.engine.callbacks import LoopCallbacks, LoopEvent
from csg.engine.checkpoint import LoopState
from csg.engine.samples import SampleStore
from csg.engine.sampling import LoopChain
from csg.engine.devices import Precision
from csg.schedules import CollectionPoint, Schedule
from csg.engine.step.single import Step

__all__ = ["Hooks", "Lane", "Logger", "LoopSettings", "TrainResult", "train_chain", "train_chains"]

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
    first_step_at: float | None = None   # Unix time at the end of this loop's first iteration (None: it ran none)
    sampling: Any = None  # the sampler's temperatures and stage motion (csg.evaluation.monitor.SamplerReading), if measured
    epoch_rows: list[dict[str, Any]] = field(default_factory=list)  # each epoch's cycle, stage and train_loss


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


@dataclass
class LoopSettings:
    """What the loop is told beside its chains, schedule and step (the keywords of :func:`train_chain` and
    :func:`train_chains` build one): ``epochs``; the sampling stages' ``temperature``; the collection
    ``plan`` (:mod:`csg.schedules`), the same for every chain; the ``device`` of the batches; the
    ``precision`` (``None``: "32"); the ``logger`` (``None``: none); ``log_every_n_steps`` (the logged rows
    and the NaN check) and ``log_every_n_epochs`` (the log's epoch lines); the ``progress`` bar (``None``,
    ``True``: on a terminal, ``False``: never); the shared ``hooks`` (:class:`Hooks`); ``world_size``: the
    processes of one chain (DDP), each weighting its shard's loss; ``callbacks``: your objects called at the
    loop's phases (:mod:`csg.engine.callbacks`); ``task``: the likelihood's, which names the epoch's score
    (``train_acc_pct`` of classification, ``train_rmse`` of regression, from the step's hit counts or squared
    errors); ``monitor_every``: the sampler's temperatures measured every n-th sampling step
    (:mod:`csg.evaluation.monitor`; 0: not measured)."""

    epochs: int
    temperature: float
    plan: Sequence[CollectionPoint]
    device: torch.device
    precision: Precision | None = None
    logger: Logger | None = None
    log_every_n_steps: int = 50
    log_every_n_epochs: int = 1
    progress: bool | None = None
    hooks: Hooks | None = None
    world_size: int = 1
    callbacks: Sequence[Any] = ()
    task: str = "classification"
    monitor_every: int = 1


def _settings_of(settings: LoopSettings | None, keywords: dict[str, Any]) -> LoopSettings:
    """``settings``, or the :class:`LoopSettings` of the keywords (a misspelt one is a TypeError), not both."""
    if settings is None:
        return LoopSettings(**keywords)
    if keywords:
        raise TypeError(f"the loop takes settings or their keywords, not both: {', '.join(sorted(keywords))}")
    return settings


def train_chain(model: nn.Module, sampler: torch.optim.Optimizer, schedule: Schedule, loader, *,
                store: SampleStore | None, state: LoopState | None = None, sample_model: nn.Module | None = None,
                interaction=None, on_step: Callable[[int], None] | None = None, step: Step | None = None,
                settings: LoopSettings | None = None, **keywords: Any) -> TrainResult:
    """Run one chain for ``epochs`` epochs, saving a sample at each point of ``plan``.

    The chain's own parts are those of a :class:`Lane`; the rest (``epochs``, ``temperature``, ``plan``,
    ``device`` and the optional ``precision``, ``logger``, ``log_every_n_steps``, ``log_every_n_epochs``,
    ``progress``, ``hooks``, ``world_size``) is a :class:`LoopSettings`, given whole (``settings``) or by its
    keywords.

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
    settings = _settings_of(settings, keywords)
    hooks = settings.hooks or Hooks()
    precision = settings.precision or Precision("32", settings.device)
    lane = Lane(model, sampler, loader, store=store, state=state, sample_model=sample_model, interaction=interaction,
                on_step=on_step or hooks.on_step, checkpoint=hooks.checkpoint)
    shared = replace(hooks, on_step=None, checkpoint=None)  # the chain's own callbacks are the lane's now
    return train_chains([lane], schedule, step=step or Step(model, sampler, precision, interaction=interaction),
                        settings=replace(settings, precision=precision, hooks=shared))[0]


def train_chains(lanes: Sequence[Lane], schedule: Schedule, *, step: Callable, settings: LoopSettings | None = None,
                 **keywords: Any) -> list[TrainResult]:
    """Run the chains of ``lanes`` in lock-step on one schedule (see :func:`train_chain` for one chain);
    ``settings``: a :class:`LoopSettings`, or its keywords.

    One lane: ``step(x, y, scale)`` (:mod:`csg.engine.step.single`). Several: ``step(xs, ys)`` takes their K
    mini-batches and returns K losses and hit counts (:class:`csg.engine.step.stacked.StackedStep`,
    :class:`csg.engine.step.streamed.StreamedStep`); every chain
    keeps its own data order, noise, samples and checkpoints, and its wall time is its share (1/K) of the
    loop's. The lanes must start at the same position. ``hooks`` gives the shared checkpoint period and
    stop signal; a stop saves every lane's checkpoint.
    """
    return _LockStepLoop(lanes, schedule, step, _settings_of(settings, keywords)).run()


class _LockStepLoop:
    """The loop of :func:`train_chains` in the phases of the algorithm: an epoch starts (:meth:`start_epoch`),
    steps its batches (:meth:`step_batch`), polled for a stop after each (:meth:`stop_if_asked`), and ends
    (:meth:`end_epoch`). Each lane's position, step size, temperature, stage and samples are its
    :class:`~csg.engine.sampling.Chain`'s (the class a user's own loop steps a chain with: one stage switch and
    one collection for both); beside them the loop keeps the epoch's sums on the device."""

    def __init__(self, lanes: Sequence[Lane], schedule: Schedule, step: Callable, settings: LoopSettings):
        from csg.engine.loggers import NullLogger

        self.lanes, self.schedule, self.step, self.settings = list(lanes), schedule, step, settings
        self.precision = settings.precision or Precision("32", settings.device)
        self.logger: Logger = settings.logger or NullLogger()
        self.hooks = settings.hooks or Hooks()
        if self.hooks.on_step is not None or self.hooks.checkpoint is not None:
            raise ValueError("train_chains: on_step and checkpoint are each Lane's, not the shared Hooks'")
        self.several = len(lanes) > 1
        self.states = [lane.state or LoopState() for lane in lanes]
        if len({(s.epoch, s.batch, s.iteration) for s in self.states}) > 1:
            raise ValueError("chains stepped together must start at the same epoch and batch")
        self.first = self.states[0]
        self.loaders = [lane.loader for lane in lanes]
        self.batches = len(self.loaders[0])
        self.clock = Clock([s.seconds for s in self.states])
        self.chains = [LoopChain(lane.sampler, schedule, epochs=settings.epochs, batches_per_epoch=self.batches,
                                 temperature=settings.temperature, plan=settings.plan, store=lane.store, state=state,
                                 keep=False, monitor=int(settings.monitor_every),
                                 index=lane.chain if self.several else None)
                       for lane, state in zip(self.lanes, self.states)]
        self.started_at = self.first.iteration
        self.callbacks = LoopCallbacks(settings.callbacks)
        self.loss_sum: Tensor | None = None  # the epoch's loss and hit sums of every chain, on the device
        self.correct: Tensor | None = None

    @property
    def k(self) -> int:
        return self.chains[0].k

    @property
    def lr(self) -> float:
        return self.chains[0].lr

    @property
    def stage(self) -> str:
        return self.chains[0].stage

    def run(self) -> list[TrainResult]:
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        epochs = self.settings.epochs
        self.bar = tqdm(total=epochs * self.batches, initial=self.k, unit="it",
                        disable=None if self.settings.progress in (None, True) else True, dynamic_ncols=True)
        first_step_at = None
        with self.bar, logging_redirect_tqdm():
            for epoch in range(self.first.epoch, epochs):
                start_batch = self.start_epoch(epoch)
                for b, batch in enumerate(zip(*self.loaders), start=start_batch):
                    self.step_batch(epoch, b, batch)
                    first_step_at = first_step_at or time.time()
                    self.stop_if_asked(epoch, b)
                self.end_epoch(epoch)
        readings = [chain.diagnostics() for chain in self.chains]
        for chain in self.chains:
            if chain.monitor is not None:
                chain.monitor.close()
        return [TrainResult(iterations=self.k, epochs=epochs, seconds=seconds, samples=state.samples, state=state,
                            first_step_at=first_step_at, sampling=reading, epoch_rows=chain.epoch_rows)
                for seconds, state, reading, chain in zip(self.clock.shares(), self.states, readings, self.chains)]

    def start_epoch(self, epoch: int) -> int:
        """Tell the loaders and interactions the epoch starts; reset its sums (kept in a resumed epoch). Returns
        the batch it starts at."""
        start_batch = self.first.batch if epoch == self.first.epoch else 0
        for lane, state in zip(self.lanes, self.states):
            if lane.interaction is not None:
                lane.interaction.on_epoch_start(epoch, start_batch, lane.model, lane.loader, self.precision.autocast)
            if hasattr(lane.loader, "set_epoch"):
                lane.loader.set_epoch(epoch, start_batch)
            if start_batch == 0:
                state.loss_sum, state.correct, state.seen = 0.0, 0, 0
            lane.model.train()
        self.loss_sum = torch.tensor([s.loss_sum for s in self.states], device=self.settings.device)
        self.correct = torch.tensor([s.correct for s in self.states], device=self.settings.device,
                                    dtype=torch.float64 if self.settings.task == "regression" else torch.int64)
        self.call("on_epoch_start", epoch, self.k)
        return start_batch

    def call(self, phase: str, epoch: int, k: int, lanes: Sequence[int] | None = None, **more: Any) -> None:
        """Each chain's (of ``lanes``, default all) :class:`~csg.engine.callbacks.LoopEvent` to the callbacks of
        ``phase``."""
        if not self.callbacks:
            return
        for i in range(len(self.lanes)) if lanes is None else lanes:
            lane, chain = self.lanes[i], self.chains[i]
            self.callbacks(phase, LoopEvent(lane.chain, epoch, k, chain.stage, chain.chain_lr,
                                            chain.chain_temperature, lane.model, lane.sampler, **more))

    def set_hyperparameters(self, epoch: int) -> float:
        """Every chain's step size and temperature for iteration k (its interaction's scales on the
        schedule's); returns the schedule's temperature."""
        before = self.stage
        for lane, chain in zip(self.lanes, self.chains):
            chain.begin_step(*(lane.interaction.scales() if lane.interaction is not None else (1.0, 1.0)))
        if self.stage != before:
            self.call("on_stage_change", epoch, self.k, previous=before)
        return self.chains[0].schedule_temperature

    def step_batch(self, epoch: int, b: int, batch) -> None:
        """Iteration k: its hyper-parameters, the step of every chain, their callbacks, the epoch's sums; every
        ``log_every_n_steps`` iterations the NaN check and a logged row per chain."""
        device, world_size = self.settings.device, self.settings.world_size
        xs = [x.to(device, non_blocking=True) for x, _ in batch]
        ys = [y.to(device, non_blocking=True) for _, y in batch]
        temperature = self.set_hyperparameters(epoch)
        if self.several:
            loss, hits = self.step(xs, ys)
        else:
            loss, hits = self.step(xs[0], ys[0],
                                   world_size / self.loaders[0].global_batch_size(b) if world_size > 1 else None)
        for lane in self.lanes:
            if lane.interaction is not None:
                lane.interaction.after_update(self.k, temperature)
            if lane.on_step is not None:
                lane.on_step(self.k)
            if self.k == self.started_at and lane.check_state is not None:
                lane.check_state()
        size = ys[0].shape[0]
        self.loss_sum += loss * size
        self.correct += hits
        for state, chain in zip(self.states, self.chains):
            state.seen += size
            chain.end_step()
        self.bar.update()
        if self.k % self.settings.log_every_n_steps == 0:
            self.check_finite(epoch)
            losses = loss.reshape(-1).tolist()
            for i, lane in enumerate(self.lanes):
                extra = lane.interaction.log_values() if lane.interaction is not None else {}
                chain = self.chains[i]
                self.logger.log_step(self.k, {**({"chain": lane.chain} if self.several else {}), "loss": losses[i],
                                              "lr": chain.chain_lr, "temperature": chain.chain_temperature,
                                              "stage": self.stage, **extra})

    def check_finite(self, epoch: int) -> None:
        check_finite(self.loss_sum.tolist(), epoch, self.settings.epochs, self.k - 1, self.lr, self.states,
                      self.lanes)

    def stop_if_asked(self, epoch: int, b: int) -> None:
        """A stop asked for (``hooks.should_stop``): every chain's checkpoint after batch ``b``, then the stop
        error."""
        if self.hooks.should_stop is not None and self.hooks.should_stop():
            sync(self.states, epoch, b + 1, self.k, self.loss_sum, self.correct, self.clock)
            for lane, state in zip(self.lanes, self.states):
                if lane.checkpoint is not None:
                    lane.checkpoint(state)
            raise self.hooks.stop_error()

    def score(self, state: LoopState) -> dict[str, float]:
        """The epoch's score so far: ``train_acc_pct`` (classification) or ``train_rmse`` (regression, in the units
        the model sees)."""
        if self.settings.task == "regression":
            return {"train_rmse": (state.correct / max(state.seen, 1)) ** 0.5}
        return {"train_acc_pct": 100.0 * state.correct / max(state.seen, 1)}

    def end_epoch(self, epoch: int) -> None:
        """The NaN check; each chain's epoch numbers (log line, progress bar, logged row); its sample at a
        collection point; its position moved to the next epoch; its checkpoint every ``checkpoint_every``."""
        epochs, hooks = self.settings.epochs, self.hooks
        self.check_finite(epoch)
        sync(self.states, epoch, self.batches, self.k, self.loss_sum, self.correct, self.clock)
        for i, (lane, state, chain) in enumerate(zip(self.lanes, self.states, self.chains)):
            values = {
                **({"chain": lane.chain} if self.several else {}),
                "epoch": epoch, "cycle": self.schedule.cycle(self.k - 1), "stage": self.stage, "lr": chain.chain_lr,
                "temperature": chain.chain_temperature, "train_loss": state.loss_sum / max(state.seen, 1),
                **self.score(state), "seconds": state.seconds,
            }
            if (epoch + 1) % self.settings.log_every_n_epochs == 0 or epoch + 1 == epochs:
                score = (f"rmse {values['train_rmse']:.4g}" if "train_rmse" in values
                         else f"acc {values['train_acc_pct']:.2f}%")
                log.info(
                    "%sepoch %d/%d  cycle %d  %-11s lr %.4g  T %.3g  loss %.4f  %s",
                    f"chain {lane.chain + 1}  " if self.several else "", epoch + 1, epochs, values["cycle"],
                    self.stage, chain.chain_lr, chain.chain_temperature, values["train_loss"], score,
                )
            if not self.bar.disable and i == 0:
                self.bar.set_postfix(loss=f"{values['train_loss']:.4f}", stage=self.stage, samples=len(state.samples))
            self.logger.log_epoch(epoch, values)
            meta = {"train_loss": values["train_loss"]}  # end_epoch checks the warm restart with it
            if epoch in chain.collect_at and lane.interaction is not None:
                meta.update(lane.interaction.sample_metadata())
            record = chain.end_epoch(lane.sample_model or lane.model, **meta)  # a sample; the next epoch's position
            if record is not None:
                if "path" in record:
                    log.info("saved %s", Path(record["path"]).name)
                self.logger.log_sample(record["index"], record)
                self.call("on_sample", epoch, self.k - 1, [i], record=dict(record))
            self.call("on_epoch_end", epoch, self.k - 1, [i], values=dict(values))
            state.loss_sum, state.correct, state.seen = 0.0, 0, 0
            if lane.checkpoint is not None and hooks.checkpoint_every and (epoch + 1) % hooks.checkpoint_every == 0:
                lane.checkpoint(state)
