"""The life of one run: devices and processes, chains built and trained, checkpoints, signals, metrics.json.

``train.py`` calls :func:`run` under Hydra (one process, or every process of a
``torchrun`` / SLURM job); tests and scripts may call it with any DictConfig
and an explicit ``run_dir``. The objects come from :mod:`csg.engine.build`; the
finished store is evaluated by :mod:`csg.posterior.store`.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from csg.checks import config as checks
from csg.engine import distributed
from csg.io.atomic import atomic_torch_save, atomic_write_json
from csg.engine.build import (build_data_and_model, build_interaction, build_ood_loader, build_sampler, build_schedule,
                       interacts, node_options, plan_collection, plan_trace, seed_streams)
from csg.engine.checkpoint import (EVALUATING, STARTING, TRAINING, Preempted, PreemptionSignals, read_checkpoint,
                            restore_checkpoint, save_checkpoint, saved_states)
from csg.engine.collection import SampleStore
from csg.engine.devices import resolve_device, set_deterministic
from csg.errors import ConfigError
from csg.evaluation.ess import ess_summary
from csg.posterior.store import evaluate_store, format_metrics
from csg.engine.loggers import NullLogger, build_logger
from csg.engine.rundir import RunDirectory, earlier_results, hydra_output_dir, refuse_earlier_results
from csg.engine.step.stacked import make_stacked_step, why_not_stackable
from csg.engine.step.streamed import make_streamed_step, why_not_streamed
from csg.engine.step.single import make_step
from csg.engine.loop import Hooks, Lane, Precision, train_chains

log = logging.getLogger(__name__)


def _experiment_preset() -> str | None:
    """The ``experiment=`` preset this run was composed with (None outside Hydra or without one)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


_NOT_IN_FINGERPRINT = {"trainer.progress", "trainer.log_every_n_steps", "trainer.log_every_n_epochs",
                       "trainer.checkpoint", "logger", "hydra"}


def config_fingerprint(cfg: DictConfig) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it (all but logging and checkpointing)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if prefix in _NOT_IN_FINGERPRINT or prefix.split(".")[0] in _NOT_IN_FINGERPRINT:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value

    walk("", OmegaConf.to_container(cfg, resolve=True))
    return flat


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


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train the chain(s) as ``cfg`` says; return the metrics written to ``run_dir/metrics.json``.

    Everything that can refuse the command (the config, the run directory's earlier results, a checkpoint,
    the data, the model's fit to the data, the collection plan) is checked before the run directory is
    changed at all (:class:`csg.engine.rundir.RunDirectory`)."""
    import csg

    started = time.perf_counter()
    run_dir = Path(run_dir if run_dir is not None else hydra_output_dir())
    with RunDirectory(run_dir, leader=csg.process_rank() == 0) as directory:
        checks.validate(cfg)
        # from here to the end a preemption signal stops the run with one line (csg.launch.cli): saved, or where it was
        with PreemptionSignals(list(cfg.trainer.checkpoint.signals)) as signals:
            layout = distributed.setup(int(cfg.sampler.get("chains", 1)), str(cfg.trainer.device))
            try:
                directory.lock(layout)  # one writer per run directory: a second command here is refused, naming the first
                _check_interacting_layout(cfg, layout)
                metrics = _run(cfg, directory, layout, started, signals)
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    error.phase = signals.phase  # where Ctrl-C stopped the run, for its line
                distributed.teardown(layout, wait=False)  # the others may never reach a barrier: let the error end the job
                raise
            distributed.teardown(layout)
    return metrics


def _check_interacting_layout(cfg: DictConfig, layout: distributed.Layout) -> None:
    kind = interacts(cfg)
    if kind is not None and not layout.distributed:
        chains = int(cfg.sampler.chains)
        what = "share one theta" if kind == "contour" else "exchange replicas"
        raise ConfigError(
            "sampler.chains", chains,
            f"1 without a launcher: {chains} chains that {what} step together, one process (group) each; run "
            f"`torchrun --standalone --nproc_per_node={chains} train.py ...` (or a SLURM job with {chains} tasks)",
        )


def _quiet_other_ranks(layout: distributed.Layout) -> None:
    """Only global rank 0 writes the log: the other processes keep warnings on the console."""
    if layout.is_global_zero:
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def _earlier_results_to_move(cfg: DictConfig, run_dir: Path) -> tuple[bool, list[str]]:
    """(resume from checkpoints, the earlier results that ``resume=false`` moves aside).

    A directory holding an earlier run's results with no checkpoint to resume them from is refused."""
    found = earlier_results(run_dir)
    if not cfg.trainer.checkpoint.resume:
        return False, found
    if found and not any(name.startswith("checkpoint") for name in found):
        raise refuse_earlier_results(run_dir, found, "and no checkpoint to resume them from")
    return bool(found), []


def _run(cfg: DictConfig, directory: RunDirectory, layout: distributed.Layout, started: float,
         signals: PreemptionSignals) -> dict[str, Any]:
    run_dir = directory.path
    _quiet_other_ranks(layout)
    device = resolve_device(str(cfg.trainer.device), layout)
    set_deterministic(bool(cfg.trainer.get("deterministic", False)))
    precision = Precision(str(cfg.trainer.precision), device)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resuming, move_aside = _earlier_results_to_move(cfg, run_dir)
    prepared = [_prepare_chain(cfg, chain, layout, device, precision, run_dir, resuming)
                for chain in layout.local_chains()]
    ood_loader, ood_source = build_ood_loader(cfg, prepared[0]["data"], layout)  # bad OOD input: before training
    method = _stack_chains(cfg, prepared, layout, precision)
    directory.accept(move_earlier=move_aside)  # every check passed: from here on the run writes
    signals.phase = STARTING
    distributed.barrier(layout)  # no process writes before the earlier results are moved aside
    for chain in prepared:  # each chain's manifest: no sample yet, or those its checkpoint records
        if layout.is_chain_leader:
            chain["store"].start()
    logger = (build_logger(cfg.logger.name, run_dir, resolved, resume=resuming, **node_options(cfg.logger))
              if layout.is_global_zero else NullLogger())
    chains = []
    try:
        for group in [prepared] if method else [[chain] for chain in prepared]:
            chains.extend(_fit_chains(cfg, group, layout, device, precision, run_dir, logger, signals, method))
        signals.phase = EVALUATING
        signals.raise_if_received()  # a signal after the loop's last poll
        distributed.barrier(layout)
        data, model = chains[-1]["data"], chains[-1]["model"]
        evaluation_start = time.perf_counter()
        metrics = evaluate_store(cfg, model, SampleStore(run_dir / "samples"), data, device, precision,
                                 ood_loader, ood_source, layout)
        epochs = int(cfg.trainer.epochs)
        metrics.update(
            study=str(cfg.get("study", "adhoc")),
            preset=_experiment_preset(),
            method=cfg.sampler.name,
            schedule=str(cfg.sampler.schedule),
            cycles=int(cfg.sampler.cycles),
            data=cfg.data.name,
            model=cfg.model.name,
            seed=int(cfg.seed),
            temperature=float(cfg.sampler.temperature),
            num_data=data.num_train,
            num_test=data.num_test,
            num_classes=int(data.num_classes),
            input_shape=[int(size) for size in data.input_shape],  # with num_classes: csg.Posterior builds the model alone
            epochs=epochs,
            chains=layout.chains,
            cost={"epochs_per_chain": epochs, "epochs_all_chains": epochs * layout.chains},
            processes=layout.world_size,
            gradient_evaluations=sum(c["trained"].iterations for c in chains),
            examples_processed=epochs * data.num_train * layout.chains,
            wall_time_s={
                "train": sum(c["trained"].seconds for c in chains),
                "evaluate": time.perf_counter() - evaluation_start,
                "total": time.perf_counter() - started,
            },
            device=str(device),
            threads=torch.get_num_threads(),  # a CPU run's numbers depend on it (float reductions)
            data_source=data.source,
            samples=[s for c in chains for s in c["trained"].samples],
            **interaction_summary(chains),
        )
        if chains[-1]["trace"] is not None:
            trace, trained = chains[-1]["trace"], chains[-1]["trained"]
            if layout.is_global_zero:
                atomic_torch_save(trace.draws, run_dir / "trace.pt")
            metrics["ess"] = ess_summary(trace.draws.numpy(), trained.seconds, trained.iterations)
            log.info("ESS over %d draws: median %.0f, min %.0f", trace.count, metrics["ess"]["median"], metrics["ess"]["min"])
        if layout.is_global_zero:
            atomic_write_json(run_dir / "metrics.json", metrics)
            logger.log_summary({f"ensemble/{k}": v for k, v in metrics["ensemble"].items()})
    except (Preempted, KeyboardInterrupt):
        if signals.phase == EVALUATING:  # training had ended: record its end, so that the same command only evaluates
            for chain in chains:
                chain["checkpoint"](chain["trained"].state)
        raise
    finally:
        logger.close()
    if layout.is_global_zero:
        print(format_metrics(metrics))
    return metrics


def _prepare_chain(cfg: DictConfig, chain: int, layout: distributed.Layout, device: torch.device,
                   precision: Precision, run_dir: Path, resuming: bool) -> dict[str, Any]:
    """Build one chain: data, model, schedule, sampler; restore its checkpoint when there is one.

    A checkpoint is read and its config compared with this run's first, before any data or model is built;
    its samples are checked once the collection plan is known (:func:`_check_samples_on_disk`)."""
    suffix = f"_chain{chain:02d}" if layout.chains > 1 else ""
    checkpoint_path = run_dir / f"checkpoint{suffix}.pt"
    fingerprint = {**config_fingerprint(cfg), RESOLVED_DEVICE: device.type}
    saved = None
    if resuming and checkpoint_path.exists():
        saved = read_checkpoint(checkpoint_path)
        _check_same_config(saved, fingerprint, checkpoint_path)
    seeds = seed_streams(int(cfg.seed), chain)
    random.seed(seeds["init"])
    np.random.seed(seeds["init"] % 2**32)
    torch.manual_seed(seeds["init"])
    local = layout.local_chains()  # the first chain's build checks the memory of all of them, before any model
    data, model = build_data_and_model(cfg, device, data_seed=seeds["data"], layout=layout,
                                       chains=len(local) if chain == local[0] else 0)
    total_steps = cfg.trainer.epochs * len(data.train)
    schedule = build_schedule(cfg, total_steps)
    plan = plan_collection(cfg, schedule, len(data.train))
    trace = plan_trace(cfg, schedule, total_steps, model)
    store = SampleStore(run_dir / "samples" / f"chain{chain:02d}" if layout.chains > 1 else run_dir / "samples",
                        chain=chain, planned=len(plan))
    if resuming:
        _check_samples_on_disk(run_dir, store, saved, checkpoint_path, plan)
    if cfg.trainer.sync_batchnorm and layout.chain_size > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=layout.group)
    generator = torch.Generator(device=device).manual_seed(seeds["noise"])  # the same in every process of a chain
    sampler = build_sampler(cfg, model, data.num_train, layout, device, generator)
    interaction = build_interaction(cfg, sampler, chain, layout, device, data.num_train, schedule, len(data.train))
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

    def checkpoint(loop_state) -> None:
        if layout.is_chain_leader:
            extra = {"config": fingerprint, "trace": (trace.draws.clone(), trace.count) if trace is not None else None,
                     "interaction": interaction.state_dict() if interaction is not None else None,
                     "noise_generator": generator.get_state()}
            save_checkpoint(checkpoint_path, model=model, sampler=sampler, state=loop_state,
                            scaler=precision.scaler, extra=extra, device=device)

    def check_state() -> None:  # a state no checkpoint could hold: refused before any checkpoint promises a resume
        if int(cfg.trainer.checkpoint.every_n_epochs) > 0 or len(cfg.trainer.checkpoint.signals) > 0:
            saved_states(model, sampler, own_storage=False)

    check_state()  # as built (or restored): refused before the run directory is changed; again after the first step
    return {"chain": chain, "data": data, "model": model, "trained_model": trained_model, "sampler": sampler,
            "schedule": schedule, "plan": plan, "trace": trace, "store": store, "state": state,
            "checkpoint": checkpoint, "check_state": check_state, "total_steps": total_steps,
            "interaction": interaction}


def _check_samples_on_disk(run_dir: Path, store: SampleStore, saved: dict[str, Any] | None, checkpoint_path: Path,
                           plan) -> None:
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


def _stack_chains(cfg: DictConfig, prepared: list[dict[str, Any]], layout: distributed.Layout,
                  precision: Precision) -> str | None:
    """How this process's chains go together (``trainer.stack_chains``): "vmap" (``true``: stepped together
    over stacked parameters, :mod:`csg.engine.step.stacked`), "streams" (each chain's own step on its own CUDA stream in
    the lock-step loop, :mod:`csg.engine.step.streamed`), or None (one after another, each trained whole: ``false``).

    Where the chosen method cannot run them it is a one-line error naming the reason, before any training;
    chains resumed from checkpoints at different points go on one after another."""
    value = cfg.trainer.get("stack_chains", False)
    method = checks.stack_method(value)
    if method is None or len(prepared) < 2:
        return None
    interacting = any(c["interaction"] is not None for c in prepared)
    if method == "vmap":
        reason = why_not_stackable([c["model"] for c in prepared], interacting=interacting,
                                   precision=precision.name, processes_per_chain=layout.chain_size)
    else:
        reason = why_not_streamed(len(prepared), interacting=interacting, precision=precision.name,
                                  processes_per_chain=layout.chain_size)
    if reason is not None:
        raise ConfigError("trainer.stack_chains", value, f"false: {reason}")
    positions = {(s.epoch, s.batch) if s is not None else (0, 0) for s in (c["state"] for c in prepared)}
    if len(positions) > 1:
        log.warning("the chains' checkpoints are at different points %s: they go on one after another", sorted(positions))
        return None
    return method


def _fit_chains(cfg: DictConfig, group: list[dict[str, Any]], layout: distributed.Layout, device: torch.device,
                precision: Precision, run_dir: Path, logger, signals: PreemptionSignals,
                method: str | None = None) -> list[dict[str, Any]]:
    """Train the prepared chains of ``group`` together (one chain, or several by ``method``: "vmap" or
    "streams", see :func:`_stack_chains`); a preemption signal (``signals``) saves every chain's checkpoint after
    the step it came in and raises Preempted."""
    data, total_steps = group[0]["data"], group[0]["total_steps"]
    if layout.is_global_zero and group[0]["chain"] == layout.local_chains()[0]:
        if cfg.sampler.schedule == "cyclical" and total_steps % cfg.sampler.cycles:
            log.warning("%d iterations do not split into %d equal cycles: the last %d start a partial cycle "
                        "(no samples there)", total_steps, cfg.sampler.cycles, total_steps % cfg.sampler.cycles)
    chains = ", ".join(str(c["chain"] + 1) for c in group)
    log.info(
        "%s on %s (%s, %d parameters), chain%s %s of %d on %d process(es)%s: %d epochs x %d iterations, "
        "%d samples planned per chain, device %s, run dir %s",
        cfg.sampler.name, cfg.data.name, cfg.model.name, sum(p.numel() for p in group[0]["model"].parameters()),
        "s" if len(group) > 1 else "", chains, layout.chains, layout.chain_size,
        _together(method, device) if len(group) > 1 else "", cfg.trainer.epochs, len(data.train), len(group[0]["plan"]),
        device, run_dir,
    )
    lanes = [Lane(c["trained_model"], c["sampler"], c["data"].train, store=c["store"] if layout.is_chain_leader else None,
                  state=c["state"], sample_model=c["model"], interaction=c["interaction"], on_step=c["trace"],
                  checkpoint=c["checkpoint"], chain=c["chain"], check_state=c["check_state"]) for c in group]
    setting = cfg.trainer.get("compile", "auto")
    if len(group) > 1:
        make = make_streamed_step if method == "streams" else make_stacked_step
        step = make(setting, [c["model"] for c in group], [c["sampler"] for c in group], precision, device)
    else:
        step = make_step(setting, group[0]["trained_model"], group[0]["sampler"], precision, device,
                         interaction=group[0]["interaction"], world_size=layout.chain_size)
    signals.phase = TRAINING
    with signals.deferred():
        hooks = Hooks(
            checkpoint_every=int(cfg.trainer.checkpoint.every_n_epochs),
            should_stop=lambda: distributed.any_true(signals.received is not None, layout, device),
            stop_error=signals.preempted,
        )
        results = train_chains(
            lanes, group[0]["schedule"],
            epochs=cfg.trainer.epochs,
            temperature=cfg.sampler.temperature,
            plan=group[0]["plan"],
            device=device,
            step=step,
            precision=precision,
            logger=logger if layout.is_global_zero else None,
            log_every_n_steps=cfg.trainer.log_every_n_steps,
            log_every_n_epochs=cfg.trainer.log_every_n_epochs,
            progress=cfg.trainer.progress and layout.is_global_zero,
            hooks=hooks,
            world_size=layout.chain_size,
        )
    fitted = []
    for prepared, trained in zip(group, results):
        for record in trained.samples:
            record["chain"] = prepared["chain"]
        fitted.append({"data": prepared["data"], "model": prepared["model"], "trained": trained, "trace": prepared["trace"],
                       "interaction": prepared["interaction"], "sampler": prepared["sampler"],
                       "checkpoint": prepared["checkpoint"]})
    return fitted


def _together(method: str | None, device: torch.device) -> str:
    """How the log line says several chains go: vectorised, or in lock-step on streams (or one after another)."""
    if method == "streams":
        return ", in lock-step, each on its own CUDA stream" if device.type == "cuda" else ", in lock-step (no CUDA streams: one after another)"
    return ", stepped together"


def interaction_summary(chains: list[dict[str, Any]]) -> dict[str, Any]:
    """What the chains' interaction ended with: theta of the contour samplers, swap rates of replica exchange."""
    from csg.engine.interaction import ContourInteraction, ReplicaExchange

    interaction = chains[-1].get("interaction")
    if isinstance(interaction, ContourInteraction):
        partition = chains[-1]["sampler"].partition
        return {"contour": {"theta": partition.theta[0].tolist(), "updates": partition.updates,
                            "low": partition.low, "width": partition.width, "zeta": partition.zeta,
                            "weight_exponent": interaction.weight_exponent}}
    if isinstance(interaction, ReplicaExchange):
        return {"replica": {"temperatures": interaction.temperatures, "step_sizes": interaction.step_sizes,
                            "correction": interaction.correction, "swap_rates": interaction.swap_rates(),
                            "proposals": interaction.proposals}}
    return {}
