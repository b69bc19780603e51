"""One chain of cyclical SG-MCMC in any training loop: the step size and stage of every iteration, when to collect,
the samples taken (:class:`Chain`, public as ``csg.Chain``).

Zhang et al. (2020), Algorithm 1: at iteration k the step size is the schedule's alpha_k (eq. 1 for the cyclical
one); while the cycle's proportion r(k) is below beta (exploration) the update runs without noise (T = 0: SGD or
SGD with momentum), after it (sampling) with the temperature T, and samples are taken at the end of the sampling
stage's last epochs (:mod:`csg.schedules`'s plan). csg's own loop (:mod:`csg.engine.loop`) steps each of
its chains through this class, so your loop and ``csg-train`` share one implementation of the stage switch and of
collection. Your loop::

    chain = Chain(sampler, schedule, epochs=epochs, batches_per_epoch=len(loader), temperature=T,
                  samples_per_cycle=3)
    for epoch in range(epochs):
        for x, y in loader:
            chain.begin_step()                 # the sampler's lr and temperature for this iteration
            sampler.zero_grad()
            loss_fn(model(x), y).backward()    # the MEAN mini-batch loss
            sampler.step()
            chain.end_step()
        chain.end_epoch(model)                 # a sample when the plan says so
    states = chain.sample_states()             # CPU state dicts, in collection order
    print(chain.diagnostics())                 # the sampler's temperatures against T, its stages' motion
    posterior = csg.Posterior.from_states(model, states, input_shape=(1, 28, 28), names=chain.sample_names())
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from csg.engine.checkpoint import LoopState
from csg.engine.samples import SampleStore, cpu_state
from csg.schedules import CollectionPoint, collection_points, Schedule

__all__ = ["Chain", "LoopChain"]


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_arguments(sampler, schedule, epochs, batches_per_epoch, temperature, samples_per_cycle,
                     strict: bool = True) -> None:
    """:class:`Chain`'s arguments, each refused in one line naming it (issue 74: they were taken without a word);
    ``strict`` False (csg's own loop, whose config checks have judged its sampler and schedule already): the
    numbers only."""
    import math

    from csg.errors import ConfigError

    for key, value in (("epochs", epochs), ("batches_per_epoch", batches_per_epoch),
                       ("samples_per_cycle", samples_per_cycle)):
        if not _whole(value):
            raise ConfigError(key, value, "a whole number >= 1")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ConfigError("temperature", temperature, "a finite number >= 0: T of the sampling stages")
    if not strict:
        return
    if not isinstance(sampler, torch.optim.Optimizer):
        raise ConfigError("sampler", type(sampler).__name__, "a torch.optim.Optimizer: a csg sampler (csg.samplers)")
    if temperature > 0 and "temperature" not in sampler.defaults:
        raise ConfigError("sampler", type(sampler).__name__, "a sampler whose param groups take a temperature (a "
                          "csg sampler: csg.samplers); this optimizer would ignore T and add no noise (temperature=0 "
                          "for a noise-free ensemble)")
    if not isinstance(schedule, Schedule):
        raise ConfigError("schedule", type(schedule).__name__, "a csg.schedules.Schedule")
    if schedule.total_steps not in (None, epochs * batches_per_epoch):
        raise ConfigError("schedule", f"{schedule.total_steps} steps", f"a schedule over the chain's epochs x "
                          f"batches_per_epoch = {epochs * batches_per_epoch} iterations")


def _check_store(store) -> None:
    """``store``: a folder (not a file) or a SampleStore, or None."""
    from csg.errors import ConfigError

    if store is None:
        return
    if not isinstance(store, (str, Path, SampleStore)):
        raise ConfigError("store", type(store).__name__, "a folder (str or Path) or a csg SampleStore, or None")
    folder = store.directory if isinstance(store, SampleStore) else Path(store)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("store", str(folder), "a folder for the samples (this is a file)")


def _check_fresh(store: SampleStore) -> None:
    """Before a new chain's first sample: its folder holds no samples (a new chain writing into another run's
    samples would replace that run's manifest, and the run would be lost)."""
    from csg.errors import ConfigError

    folder = store.directory
    held = (max(len(store.manifest_entries() or []), len(list(folder.glob("sample_*.pt"))))
            if folder.is_dir() else 0)
    if held:
        raise ConfigError("store", str(folder), f"an empty or new folder for a new chain (to go on with the chain "
                          f"that wrote it, load its state first: state= or load_state_dict): it holds {held} "
                          "samples, which this chain would overwrite")


class Chain:
    """The schedule position, stage switch and collection of one chain of ``sampler`` (a csg sampler, or any
    ``torch.optim.Optimizer`` whose param groups take ``lr`` and ``temperature``).

    ``schedule`` (:mod:`csg.schedules`) spans ``epochs * batches_per_epoch`` iterations; ``temperature`` is T of
    the sampling stages (0 while exploring). The collection ``plan`` is the last ``samples_per_cycle`` epochs
    of each cycle that end in a sampling stage (or the given list of
    :class:`~csg.schedules.CollectionPoint`). ``store``: a run's ``samples/`` folder (a path or a
    :class:`~csg.engine.samples.SampleStore`: samples written atomically, with their manifest, in csg's format);
    ``None`` keeps the samples in memory as CPU copies (``keep=False``: records only). ``state`` (a
    :class:`~csg.engine.checkpoint.LoopState`) resumes a chain; :meth:`state_dict` / :meth:`load_state_dict` save
    and restore it as torch's modules do (checkpoint the model and the sampler beside it: the sampler's state holds
    its noise generator). ``monitor`` (default on): a :class:`~csg.evaluation.monitor.SamplingMonitor` of the sampler,
    whose temperatures and stage motion :meth:`diagnostics` reads (an integer n measures every n-th sampling step;
    ``False``: none). A resumed chain's diagnostics cover the steps since it resumed. Given each epoch's
    ``train_loss`` (``end_epoch(model, train_loss=...)``), a warm restart that diverges (a cycle's exploration ending
    more than :data:`csg.engine.accounting.RESTART_NATS` above an earlier cycle's) stops the chain with a
    :class:`~csg.errors.DivergenceError` before that cycle's samples, as in csg's own loop.
    """

    _strict = True  # the sampler and schedule checked (csg's own loop: LoopChain)
    index: int | None = None  # the chain's number in a run of several (LoopChain), named in its messages

    def __init__(self, sampler: torch.optim.Optimizer, schedule: Schedule, *, epochs: int, batches_per_epoch: int,
                 temperature: float, samples_per_cycle: int = 1, plan: Sequence[CollectionPoint] | None = None,
                 store: SampleStore | str | Path | None = None, state: LoopState | None = None,
                 keep: bool | None = None, monitor: bool | int = True):
        from csg.evaluation.monitor import SamplingMonitor

        _check_arguments(sampler, schedule, epochs, batches_per_epoch, temperature, samples_per_cycle, self._strict)
        self.sampler, self.schedule, self.temperature = sampler, schedule, float(temperature)
        self.epochs, self.batches_per_epoch = int(epochs), int(batches_per_epoch)
        self.plan = self._checked_plan(plan, samples_per_cycle)
        self.collect_at = {point.epoch: point for point in self.plan}
        self.state = state or LoopState()
        if self._strict:
            _check_store(store)
        self._resumed = state is not None  # a chain going on from a state: its store holds its samples
        self.epoch_rows: list[dict[str, Any]] = []  # each epoch's cycle, stage and train_loss given to end_epoch
        self.store = SampleStore(store, planned=len(self.plan)) if isinstance(store, (str, Path)) else store
        self._adopt = isinstance(store, (str, Path))  # a folder of ours: take over what a restored state records
        self.keep = self.store is None if keep is None else keep
        self.kept: list[dict[str, torch.Tensor]] = []  # the samples' states, when kept in memory
        if isinstance(monitor, bool) or monitor == 0:
            every = 1 if monitor else None
        elif isinstance(monitor, int) and monitor > 0:
            every = monitor
        else:
            raise ValueError(f"monitor: True, False or an integer n >= 1 (measure every n-th sampling step), got "
                             f"{monitor!r}")
        self.monitor = SamplingMonitor(sampler, every=every) if every is not None else None
        self._last_set()

    def _checked_plan(self, plan, samples_per_cycle: int) -> list[CollectionPoint]:
        """The given plan, checked: CollectionPoints at distinct epochs of the run, in order; else the schedule's."""
        from csg.errors import ConfigError

        if plan is None:
            try:
                return collection_points(self.schedule, self.epochs, self.batches_per_epoch, samples_per_cycle)
            except ValueError as error:  # a sampling stage shorter than samples_per_cycle
                raise ConfigError("samples_per_cycle", samples_per_cycle, f"at most the epoch ends of each cycle's "
                                  f"sampling stage ({error})") from None
        points = list(plan)
        if not all(isinstance(point, CollectionPoint) for point in points):
            raise ConfigError("plan", type(next(p for p in points if not isinstance(p, CollectionPoint))).__name__,
                              "a list of csg.schedules.CollectionPoint (epoch, cycle, iteration)")
        epochs = [point.epoch for point in points]
        if any(not 0 <= e < self.epochs for e in epochs) or epochs != sorted(set(epochs)):
            raise ConfigError("plan", epochs, f"distinct epochs in 0..{self.epochs - 1}, in order (one sample at the "
                              "end of each)")
        return points

    def _last_set(self) -> None:
        """The step size, temperature and stage last set: iteration k-1's for a chain at k > 0 (a resumed chain's
        records and stage changes continue as the uninterrupted chain's), iteration 0's stage before the first."""
        k = self.state.iteration
        self.lr, self.schedule_temperature, self.stage = self.hyperparameters(k - 1 if k > 0 else 0)
        if k == 0:
            self.schedule_temperature = 0.0
        self.chain_lr, self.chain_temperature = self.lr, self.schedule_temperature

    @property
    def k(self) -> int:
        """The next iteration (0-based, over the whole run)."""
        return self.state.iteration

    @property
    def samples(self) -> list[dict[str, Any]]:
        """A record per sample taken, in order, each with its index, cycle, epoch, iteration, lr and temperature,
        what :meth:`end_epoch` was given (such as ``train_loss``) and, with a store, its ``path``."""
        return self.state.samples

    def hyperparameters(self, k: int | None = None) -> tuple[float, float, str]:
        """The schedule's step size, temperature and stage at iteration ``k`` (default: the next): alpha_k, and T
        in a sampling stage, else 0."""
        k = self.k if k is None else k
        sampling = self.schedule.sampling(k)
        return self.schedule.lr(k), self.temperature if sampling else 0.0, "sampling" if sampling else "exploration"

    def begin_step(self, lr_scale: float = 1.0, temperature_scale: float = 1.0) -> tuple[float, float]:
        """Set every param group's ``lr`` and ``temperature`` for the next iteration (the schedule's, times the
        scales an interaction between chains gives); returns them."""
        if self.k >= self.epochs * self.batches_per_epoch:
            from csg.errors import ConfigError

            raise ConfigError("epochs", self.epochs, f"iterations within the chain's epochs x batches_per_epoch = "
                              f"{self.epochs * self.batches_per_epoch}: the loop runs past the chain's plan")
        self.lr, self.schedule_temperature, self.stage = self.hyperparameters()
        self.chain_lr, self.chain_temperature = self.lr * lr_scale, self.schedule_temperature * temperature_scale
        for group in self.sampler.param_groups:
            group["lr"], group["temperature"] = self.chain_lr, self.chain_temperature
        return self.chain_lr, self.chain_temperature

    def end_step(self) -> None:
        """The iteration is done: the chain moves to the next."""
        self.state.iteration += 1
        self.state.batch += 1

    def end_epoch(self, model: torch.nn.Module, **metadata: Any) -> dict[str, Any] | None:
        """The epoch is done: ``model``'s state becomes the next sample when the plan says so (its record, with
        ``metadata`` such as the epoch's ``train_loss``, is returned; else None), and the chain moves to the next
        epoch."""
        if not isinstance(model, torch.nn.Module):
            from csg.errors import ConfigError

            raise ConfigError("model", type(model).__name__, "the torch.nn.Module the sampler steps (its state is "
                              "the sample)")
        if isinstance(metadata.get("train_loss"), (int, float)):  # the warm restart's check, before any sample
            from csg.engine.accounting import check_restart

            self.epoch_rows.append({"cycle": self.schedule.cycle(max(self.k - 1, 0)), "stage": self.stage,
                                    "train_loss": float(metadata["train_loss"])})
            check_restart(self.epoch_rows, getattr(self.schedule, "lr0", self.lr), len(self.state.samples),
                          self.index)
        epoch = self.state.epoch
        point = self.collect_at.get(epoch)
        record = self.collect(model, point, **metadata) if point is not None else None
        self.state.epoch, self.state.batch = epoch + 1, 0
        return record

    def collect(self, model: torch.nn.Module, point: CollectionPoint, **metadata: Any) -> dict[str, Any]:
        """Take ``model``'s state as the next sample (at ``point`` of the plan), written to the store or kept."""
        meta = {"iteration": point.iteration, "lr": self.chain_lr, "temperature": self.chain_temperature,
                **metadata}
        index = len(self.state.samples)
        record = {"index": index, "cycle": point.cycle, "epoch": point.epoch, **meta}
        if self.store is not None:
            if self._strict and not self._resumed and not self.state.samples:
                _check_fresh(self.store)
                self._resumed = True  # checked once: the samples from here on are this chain's
            if self._adopt:  # the samples a restored state records must be this folder's, intact (checked once)
                self.store.directory.mkdir(parents=True, exist_ok=True)
                self.store.adopt([Path(r["path"]).name for r in self.state.samples])
                self._adopt = False
            record["path"] = str(self.store.save(model, index=index, cycle=point.cycle, epoch=point.epoch, **meta))
        if self.keep:
            self.kept.append(cpu_state(model))
        self.state.samples.append(record)
        return record

    def diagnostics(self):
        """The sampler's temperatures against T and its sampling stages' motion so far
        (:class:`~csg.evaluation.monitor.SamplerReading`; ``str()`` of it reads them in one line), None without a
        monitor."""
        return self.monitor.reading() if self.monitor is not None else None

    def sample_states(self) -> list[dict[str, torch.Tensor]]:
        """The samples' state dicts in collection order (read back, weights only, from a store)."""
        if self.keep or self.store is None:
            return list(self.kept)
        paths = [Path(record["path"]) for record in self.state.samples]
        self.store.verify(paths)  # a sample changed on disk since it was written: DamagedFileError naming it
        return [self.store.state_of(path) for path in paths]

    def sample_names(self) -> list[str]:
        """Each sample's file name in csg's format (``sample_0000_cycle00_epoch0003.pt``), in collection order:
        the names a :class:`csg.Posterior` of :meth:`sample_states` gives its members."""
        return [SampleStore.file_name(r["index"], r["cycle"], r["epoch"]) for r in self.state.samples]

    def state_dict(self) -> dict[str, Any]:
        """The chain's position and samples (with the kept states when there is no store), and its plan."""
        return {"loop": asdict(self.state), "kept": list(self.kept), "plan": [asdict(p) for p in self.plan],
                "iterations": self.epochs * self.batches_per_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position and samples of :meth:`state_dict` (with a store, the samples it records must be
        in the folder, intact: checked at the next sample, a one-line :class:`~csg.errors.DamagedFileError`). A
        state of another chain's plan or length (another schedule, epochs or samples per cycle) is refused in one
        line (:class:`~csg.errors.ConfigError`), the chain left as it was."""
        from csg.errors import ConfigError

        if not isinstance(state, dict) or not isinstance(state.get("loop"), dict) or "kept" not in state:
            raise ConfigError("state_dict", type(state).__name__ if not isinstance(state, dict) else sorted(state)[:4],
                              "a Chain.state_dict() (keys loop, kept, plan)")
        here = ([asdict(p) for p in self.plan], self.epochs * self.batches_per_epoch)
        if "plan" in state and (state["plan"], state.get("iterations")) != here:
            raise ConfigError("state_dict", f"a chain of {state.get('iterations')} iterations collecting at epochs "
                              f"{[p['epoch'] for p in state['plan']]}", f"a state of this chain's plan ({here[1]} "
                              f"iterations, epochs {[p['epoch'] for p in here[0]]}): the schedule, epochs or "
                              "samples per cycle differ")
        try:
            loop = LoopState(**state["loop"])
        except TypeError as error:
            raise ConfigError("state_dict", sorted(state["loop"]), f"a Chain.state_dict()'s loop ({error})") from None
        self.state, self.kept, self._resumed = loop, list(state["kept"]), True
        self._last_set()


class LoopChain(Chain):
    """A :class:`Chain` of csg's own loop: its sampler (a wrapper, a user's optimizer) and schedule were judged by the
    run's config checks, so only the numbers are checked here."""

    _strict = False

    def __init__(self, *args: Any, index: int | None = None, **options: Any):
        super().__init__(*args, **options)
        self.index = index
