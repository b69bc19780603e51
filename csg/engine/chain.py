"""One chain of a run, prepared for the loop: its objects, its checkpoint, its samples on disk.

:func:`prepare_chain` builds a chain from the run's settings (:class:`~csg.engine.settings.RunSettings`: data,
model, schedule, collection plan, trace, sample store, sampler, interaction), restores its checkpoint when the run
resumes, and returns a :class:`PreparedChain`; once trained it is a :class:`FittedChain`. Before anything is built,
a checkpoint of another config is refused (:func:`csg.engine.settings.config_fingerprint`), and before training a
sample folder holding what the checkpoint does not record (:func:`check_samples_on_disk`). :mod:`csg.launch.run`
prepares every chain of the process, then trains them.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from csg.engine import distributed
from csg.engine.build import (build_data_and_model, build_interaction, build_likelihood, build_part, build_sampler,
                              build_schedule, load_model_weights, optimise_rest, plan_collection, plan_trace,
                              seed_streams)
from csg.engine.checkpoint import LoopState, read_checkpoint, restore_checkpoint, save_checkpoint, saved_states
from csg.engine.samples import SampleStore
from csg.engine.settings import RunSettings
from csg.engine.devices import Precision
from csg.engine.loop import TrainResult
from csg.engine.part import freeze_rest
from csg.engine.rundir import refuse_earlier_results
from csg.errors import ConfigError
from csg.schedules import CollectionPoint, Schedule

if TYPE_CHECKING:
    from csg.data.bundle import DataBundle
    from csg.engine.interaction import Interaction
    from csg.evaluation.ess import ParameterTrace

__all__ = ["FittedChain", "PreparedChain", "RESOLVED_DEVICE", "check_samples_on_disk", "prepare_chain"]

log = logging.getLogger(__name__)

RESOLVED_DEVICE = "device type"  # where trainer.device=auto put the chain: a CPU chain does not resume on a GPU


def _check_same_config(checkpoint: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint of another config before anything is loaded from it."""
    saved = checkpoint["config"]
    for key in sorted(set(saved) | set(current), key=lambda k: (not k.endswith(".name"), k)):  # a changed choice first
        if saved.get(key) != current.get(key):
            raise ConfigError(
                "trainer.checkpoint.resume", True,
                f"a checkpoint made with this config; {path} has {key}={saved.get(key)!r}, this run {current.get(key)!r} "
                "(use another hydra.run.dir, or trainer.checkpoint.resume=false to move that run aside and start over)",
            )


@dataclass
class PreparedChain:
    """One chain built for the loop (:func:`prepare_chain`), restored from its checkpoint where it resumes.

    - ``chain``: its 0-based index in the run; ``data``: its data bundle (this process's shard);
    - ``model``: the model a sample saves; ``trained_model``: what the loop steps (``model``, or its DDP wrapper
      when the chain spans several processes);
    - ``sampler``, ``schedule`` (over ``total_steps`` iterations), ``plan``: the epochs that yield samples,
      ``trace``: the parameter trace (None: off), ``store``: the chain's sample folder, ``interaction``: its
      contour or replica-exchange coupling (None: an independent chain);
    - ``state``: the loop's position restored from the checkpoint (None: a fresh chain);
    - for its checkpoint (:meth:`checkpoint`): ``checkpoint_path``, the config ``fingerprint`` it records, the
      sampler's noise ``generator``, the ``precision`` (its loss scaler), the ``device``, whether this process
      ``writes_checkpoints`` (the chain's first) and whether the run ``checkpoints`` at all;
    - ``likelihood``: the run's :class:`csg.likelihoods.Likelihood`, built once and shared by its chains.
    """

    chain: int
    data: DataBundle
    model: torch.nn.Module
    trained_model: torch.nn.Module
    sampler: torch.optim.Optimizer
    schedule: Schedule
    total_steps: int
    plan: list[CollectionPoint]
    trace: ParameterTrace | None
    store: SampleStore
    interaction: Interaction | None
    state: LoopState | None
    checkpoint_path: Path
    fingerprint: dict[str, Any]
    generator: torch.Generator
    precision: Precision
    device: torch.device
    writes_checkpoints: bool
    checkpoints: bool
    likelihood: Any

    def checkpoint(self, loop_state: LoopState) -> None:
        """Save the chain at ``loop_state`` (from the chain's first process; the others write nothing)."""
        if self.writes_checkpoints:
            trace, interaction = self.trace, self.interaction
            extra = {"config": self.fingerprint,
                     "trace": (trace.draws.clone(), trace.count) if trace is not None else None,
                     "interaction": interaction.state_dict() if interaction is not None else None,
                     "noise_generator": self.generator.get_state()}
            save_checkpoint(self.checkpoint_path, model=self.model, sampler=self.sampler, state=loop_state,
                            scaler=self.precision.scaler, extra=extra, device=self.device)

    def check_state(self) -> None:
        """Raise where the model's and sampler's state could not be checkpointed, when the run checkpoints: as
        built or restored (before the run directory is changed), and again after the first step."""
        if self.checkpoints:
            saved_states(self.model, self.sampler, own_storage=False)


@dataclass
class FittedChain:
    """A chain after the loop: the :class:`PreparedChain` and what its loop ended with."""

    prepared: PreparedChain
    trained: TrainResult


def prepare_chain(settings: RunSettings, chain: int, layout: distributed.Layout, device: torch.device,
                  precision: Precision, run_dir: Path, resuming: bool, likelihood=None) -> PreparedChain:
    """Build one chain: data, model, schedule, sampler; restore its checkpoint when there is one. ``likelihood``:
    the run's, built once for all its chains (None: built here, once the checkpoint's config is compared: the first
    chain's, which :mod:`csg.launch.run` hands to the others).

    A checkpoint is read and its config compared with this run's first, before any data or model is built;
    its samples are checked once the collection plan is known (:func:`check_samples_on_disk`)."""
    if not settings.fingerprint:  # a checkpoint without it would resume any config
        raise ValueError("prepare_chain takes the settings of run_settings(cfg, fingerprint=True)")
    suffix = f"_chain{chain:02d}" if layout.chains > 1 else ""
    checkpoint_path = run_dir / f"checkpoint{suffix}.pt"
    fingerprint = {**settings.fingerprint, RESOLVED_DEVICE: device.type}
    saved = None
    if resuming and checkpoint_path.exists():
        saved = read_checkpoint(checkpoint_path)
        _check_same_config(saved, fingerprint, checkpoint_path)
    seeds = seed_streams(int(settings.seed), chain)
    random.seed(seeds["init"])
    np.random.seed(seeds["init"] % 2**32)
    torch.manual_seed(seeds["init"])
    likelihood = likelihood if likelihood is not None else build_likelihood(settings.likelihood)
    local = layout.local_chains()  # the first chain's build checks the memory of all of them, before any model
    data, model = build_data_and_model(settings, device, data_seed=seeds["data"], layout=layout,
                                       chains=len(local) if chain == local[0] else 0, likelihood=likelihood)
    load_model_weights(settings.model, model)
    part = build_part(settings, model)
    total_steps = settings.trainer.epochs * len(data.train)
    schedule = build_schedule(settings.schedule, total_steps)
    plan = plan_collection(settings.schedule, schedule, len(data.train))
    trace = plan_trace(settings.trace, schedule, total_steps, model)
    store = SampleStore(run_dir / "samples" / f"chain{chain:02d}" if layout.chains > 1 else run_dir / "samples",
                        chain=chain, planned=len(plan), part_keys=part.sample_keys if part.stores_part else None)
    if resuming:
        check_samples_on_disk(run_dir, store, saved, checkpoint_path, plan)
    if settings.trainer.sync_batchnorm and layout.chain_size > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=layout.group)
    freeze_rest(model, part)  # after the BatchNorm conversion: the frozen modules it makes stay in evaluation mode
    if not part.whole:
        log.info("chain %d samples %d of %d parameter tensors (sampler.params); the rest %s", chain,
                 len(part.sampled), len(part.sampled) + len(part.rest), part.mode)
    generator = torch.Generator(device=device).manual_seed(seeds["noise"])  # the same in every process of a chain
    sampler = build_sampler(settings, model, data.num_train, layout, device, generator, part, likelihood=likelihood)
    interaction = build_interaction(settings, sampler, chain, layout, device, data.num_train, schedule, len(data.train),
                                    likelihood=likelihood)
    sampler = optimise_rest(settings.sampler, model, sampler, part)
    trained_model = model
    if layout.chain_size > 1:
        trained_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, process_group=layout.group
        )
    state = None
    if saved is not None:
        state = restore_checkpoint(saved, model=model, sampler=sampler, scaler=precision.scaler, device=device)
        if interaction is not None and saved.get("interaction") is not None:
            interaction.load_state_dict(saved["interaction"], model)
        if saved.get("noise_generator") is not None:  # a user's sampler may not keep it in its state_dict
            generator.set_state(saved["noise_generator"])
        if trace is not None and saved.get("trace") is not None:
            draws, trace.count = saved["trace"]
            trace.buffer[: trace.count] = draws
        log.info("resumed chain %d from %s at epoch %d, batch %d", chain, checkpoint_path, state.epoch + 1, state.batch)
    prepared = PreparedChain(
        chain=chain, data=data, model=model, trained_model=trained_model, sampler=sampler, schedule=schedule,
        total_steps=total_steps, plan=plan, trace=trace, store=store, interaction=interaction, state=state,
        checkpoint_path=checkpoint_path, fingerprint=fingerprint, generator=generator, precision=precision,
        device=device, writes_checkpoints=layout.is_chain_leader,
        # a state no checkpoint could hold: refused before any checkpoint promises a resume
        checkpoints=settings.trainer.checkpoints,
        likelihood=likelihood,
    )
    prepared.check_state()  # as built (or restored): refused before the run directory is changed; again after the first step
    return prepared


def check_samples_on_disk(run_dir: Path, store: SampleStore, saved: dict[str, Any] | None, checkpoint_path: Path,
                          plan: list[CollectionPoint]) -> None:
    """The samples in ``store`` (its files, and its manifest's entries) are the ones the chain's checkpoint
    records, all readable and as the manifest records them, plus at most those of the plan's collection points
    the resumed chain has yet to reach (written after the checkpoint, before a stop: the chain writes them
    again). Anything else is an earlier run's, refused before training. The store then begins from the
    checkpoint's samples (:meth:`SampleStore.adopt`; its manifest is written once the run is accepted)."""
    on_disk = {str(path.relative_to(store.directory)) for path in store.paths()}
    on_disk |= {entry["file"] for entry in store.manifest_entries() or []}

    def refuse(names, why: str) -> ConfigError:
        shown = [str((store.directory / name).relative_to(run_dir)) for name in sorted(names)[:3]]
        return refuse_earlier_results(run_dir, shown + (["..."] if len(names) > 3 else []), why)

    if saved is None:
        if on_disk:
            raise refuse(on_disk, f"and no checkpoint ({checkpoint_path.name}) to resume them from")
        return
    recorded = [Path(record["path"]).name for record in saved["loop"]["samples"] if "path" in record]
    resumed_epoch = int(saved["loop"]["epoch"])
    to_come = {SampleStore.file_name(index, point.cycle, point.epoch)
               for index, point in enumerate(plan) if point.epoch >= resumed_epoch}
    foreign = on_disk - set(recorded) - to_come
    if foreign:
        raise refuse(foreign, f"that {checkpoint_path.name} does not record")
    store.adopt(recorded)
