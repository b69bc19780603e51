"""The life of one run: devices and processes, chains built and trained, checkpoints, signals, metrics.json.

``train.py`` calls :func:`run` under Hydra (one process, or every process of a
``torchrun`` / SLURM job); tests and scripts may call it with any DictConfig
and an explicit ``run_dir``. Each chain is prepared by :mod:`csg.engine.chain` (its objects from
:mod:`csg.engine.build`) and trained by :mod:`csg.engine.loop`; the finished store is evaluated by
:mod:`csg.posterior.evaluate`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from csg.checks import config as checks
from csg.components import label
from csg.engine import distributed
from csg.io.atomic import atomic_torch_save, atomic_write_json
from csg.reporting import DIVERGED
from csg.engine.build import build_ood_loader, interaction_kind
from csg.engine.prior import prior_record
from csg.engine.callbacks import build_callbacks
from csg.engine.chain import FittedChain, PreparedChain, prepare_chain
from csg.engine.checkpoint import EVALUATING, STARTING, TRAINING, Preempted, PreemptionSignals
from csg.engine.samples import SampleStore
from csg.engine.settings import RunSettings, node_options, run_settings
from csg.data.bundle import unscaled_targets
from csg.engine.devices import Precision, resolve_device, set_deterministic, set_threads
from csg.errors import ConfigError, DivergenceError, Interrupted
from csg.evaluation.ess import ess_summary
from csg.posterior.evaluate import evaluate_store, format_metrics
from csg.engine.loggers import NullLogger, build_logger, check_wandb_online
from csg.engine.rundir import RunDirectory, earlier_results, hydra_output_dir, refuse_earlier_results
from csg.engine.step.stacked import make_stacked_step, why_not_stackable
from csg.engine.step.streamed import make_streamed_step, why_not_streamed
from csg.engine.step.single import make_step
from csg.engine.loop import Hooks, Lane, LoopSettings, train_chains

log = logging.getLogger(__name__)



def _experiment_preset() -> str | None:
    """The ``experiment=`` preset this run was composed with (None outside Hydra or without one)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train the chain(s) as ``cfg`` says; return the metrics written to ``run_dir/metrics.json``.

    Everything that can refuse the command (the config, the run directory's earlier results, a checkpoint,
    the data, the model's fit to the data, the collection plan) is checked before the run directory is
    changed at all (:class:`csg.engine.rundir.RunDirectory`)."""
    import csg

    started, threads = time.perf_counter(), torch.get_num_threads()
    run_dir = Path(run_dir if run_dir is not None else hydra_output_dir())
    with _threads_restored(threads), RunDirectory(run_dir, leader=csg.process_rank() == 0) as directory:
        checks.validate(cfg)
        settings = run_settings(cfg, fingerprint=True)  # the typed settings every builder takes, read once
        # from here to the end a preemption signal stops the run with one line (csg.launch.cli): saved, or where it was
        with PreemptionSignals(list(cfg.trainer.checkpoint.signals)) as signals:
            layout = distributed.setup(int(cfg.sampler.get("chains", 1)), str(cfg.trainer.device))
            try:
                directory.lock(layout)  # one writer per run directory: a second command here is refused, naming the first
                distributed.check_interacting_layout(interaction_kind(settings.sampler), settings.sampler.chains, layout)
                metrics = _run(cfg, settings, directory, layout, started, signals)
            except BaseException as error:
                distributed.teardown(layout, wait=False)  # the others may never reach a barrier: let the error end the job
                if isinstance(error, DivergenceError) and csg.process_rank() == 0:
                    atomic_write_json(run_dir / DIVERGED, {"error": str(error).splitlines()[0], "epoch": error.epoch,
                                                           "lr": error.lr, "chain": error.chain})
                if isinstance(error, KeyboardInterrupt) and not isinstance(error, Interrupted):
                    raise Interrupted(signals.phase) from error  # where Ctrl-C stopped the run, for its line
                raise
            distributed.teardown(layout)
    return metrics


@contextlib.contextmanager
def _threads_restored(threads: int):
    """torch's thread count as the caller had it once the run ends (``trainer.threads`` sets it for the run only:
    ``csg.train`` runs in the caller's process)."""
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _to_first_step(chains: list[FittedChain]) -> float | None:
    """Seconds from this process's start (the interpreter, every import, the checks) to the end of its first
    training step; ``None`` where unknown (off Linux, or a resumed run that stepped no more)."""
    from csg.launch.timing import process_start_time

    started, first = process_start_time(), [c.trained.first_step_at for c in chains if c.trained.first_step_at]
    return min(first) - started if started is not None and first else None


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
    """(resume from checkpoints, the earlier results that ``resume=false`` moves aside), as
    ``trainer.checkpoint.resume`` says: true (or auto) resumes a run directory's earlier run and says so first;
    false moves it aside and starts over; never refuses a directory holding one; always refuses one without a
    checkpoint. A directory holding an earlier run's results with no checkpoint to resume them from is refused."""
    mode = cfg.trainer.checkpoint.resume
    found = earlier_results(run_dir)
    if mode is False:
        return False, found
    checkpoint = any(name.startswith("checkpoint") for name in found)
    if mode == "never" and found:
        raise ConfigError("trainer.checkpoint.resume", mode, f"a run directory without an earlier run; {run_dir} "
                          f"holds {', '.join(found)} (another hydra.run.dir, or trainer.checkpoint.resume=false to move "
                          "them into earlier/<time>/ and start over)")
    if mode == "always" and not checkpoint:
        raise ConfigError("trainer.checkpoint.resume", mode, f"a run directory with a checkpoint to resume; {run_dir} "
                          "has none (trainer.checkpoint.resume=true starts a run where there is none)")
    if found and not checkpoint:
        raise refuse_earlier_results(run_dir, found, "and no checkpoint to resume them from")
    if found:
        log.info("resuming the run in %s from its checkpoint (trainer.checkpoint.resume=never refuses instead, false "
                 "starts over)", run_dir)
    return bool(found), []


def _run(cfg: DictConfig, settings: RunSettings, directory: RunDirectory, layout: distributed.Layout, started: float,
         signals: PreemptionSignals) -> dict[str, Any]:
    run_dir = directory.path
    _quiet_other_ranks(layout)
    device = resolve_device(str(cfg.trainer.device), layout)
    set_threads(cfg.trainer.get("threads"))  # before any tensor work: the run's float reductions depend on it
    set_deterministic(bool(cfg.trainer.get("deterministic", False)))
    precision = Precision(str(cfg.trainer.precision), device)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resuming, move_aside = _earlier_results_to_move(cfg, run_dir)
    prepared: list[PreparedChain] = []
    for chain in layout.local_chains():  # the first builds the likelihood once its checkpoint is compared; all share it
        prepared.append(prepare_chain(settings, chain, layout, device, precision, run_dir, resuming,
                                      prepared[0].likelihood if prepared else None))
    likelihood = prepared[0].likelihood  # every chain's, the loop's and the evaluation's
    ood_loader, ood_source = build_ood_loader(settings, prepared[0].data, layout)  # bad OOD input: before training
    if cfg.evaluation.get("reference") is not None:  # a reference made on other inputs: before training
        from csg.evaluation.reference_predictive import check_run_reference

        check_run_reference(str(cfg.evaluation.reference), prepared[0].data.test, prepared[0].data.num_train)
    method = _stack_chains(cfg, prepared, layout, precision)
    specs = cfg.get("callbacks")  # the user's, built (and checked) before training, where the run logs
    callbacks = build_callbacks(OmegaConf.to_container(specs, resolve=True) if specs else None
                                ) if layout.is_global_zero else []
    if layout.is_global_zero and cfg.logger.name == "wandb":  # again where the run is: a SLURM node may lack network
        check_wandb_online(cfg.logger)
    directory.accept(move_earlier=move_aside)  # every check passed: from here on the run writes
    signals.phase = STARTING
    distributed.barrier(layout)  # no process writes before the earlier results are moved aside
    for chain in prepared:  # each chain's manifest: no sample yet, or those its checkpoint records
        if layout.is_chain_leader:
            chain.store.start()
    resumed_at = {c.chain: (c.state.epoch, c.state.iteration) for c in prepared if c.state is not None}
    logger = (build_logger(cfg.logger.name, run_dir, resolved, resume=resuming, resumed_at=resumed_at,
                           **node_options(cfg.logger)) if layout.is_global_zero else NullLogger())
    chains: list[FittedChain] = []
    unscaled = unscaled_targets(prepared[0].data)
    if unscaled and layout.is_global_zero:
        log.warning("%s: a step tuned for unit-scale targets may diverge or crawl", unscaled)
    try:
        try:
            for group in [prepared] if method else [[chain] for chain in prepared]:
                chains.extend(_fit_chains(cfg, group, layout, device, precision, run_dir, logger, signals, method,
                                          callbacks))
        except DivergenceError as error:
            if not unscaled:
                raise
            raise DivergenceError(f"{error}; {unscaled}", loss=error.loss, epoch=error.epoch,
                                  iteration=error.iteration, lr=error.lr, chain=error.chain) from None
        signals.phase = EVALUATING
        signals.raise_if_received()  # a signal after the loop's last poll
        distributed.barrier(layout)
        data, model = chains[-1].prepared.data, chains[-1].prepared.model
        evaluation_start = time.perf_counter()
        metrics = evaluate_store(settings.evaluation, model, SampleStore(run_dir / "samples"), data, device,
                                 precision, ood_loader, ood_source, layout, likelihood=likelihood)
        epochs = int(cfg.trainer.epochs)
        metrics.update(
            study=str(cfg.get("study", "adhoc")),
            preset=_experiment_preset(),
            method=label(cfg, "sampler"),
            schedule=str(cfg.sampler.schedule),
            cycles=int(cfg.sampler.cycles),
            data=label(cfg, "data"),
            model=label(cfg, "model"),
            seed=int(cfg.seed),
            temperature=float(cfg.sampler.temperature),
            prior=prior_record(data.num_train, **settings.prior.arguments()),
            num_data=data.num_train,
            num_test=data.num_test,
            num_classes=int(data.num_classes),
            input_shape=[int(size) for size in data.input_shape],  # with num_classes: csg.Posterior builds the model alone
            task=data.task,
            **({"target_scale": data.target_scale.as_dict()} if data.target_scale is not None else {}),
            epochs=epochs,
            chains=layout.chains,
            cost={"epochs_per_chain": epochs, "epochs_all_chains": epochs * layout.chains},
            processes=layout.world_size,
            gradient_evaluations=sum(c.trained.iterations for c in chains),
            examples_processed=epochs * data.num_train * layout.chains,
            wall_time_s={
                "train": sum(c.trained.seconds for c in chains),
                "evaluate": time.perf_counter() - evaluation_start,
                "total": time.perf_counter() - started,
                "to_first_step": _to_first_step(chains),
            },
            device=str(device),
            threads=torch.get_num_threads(),  # a CPU run's numbers depend on it (float reductions)
            data_source=data.source,
            samples=[s for c in chains for s in c.trained.samples],
            **interaction_summary(chains),
        )
        metrics.update(_sampling_diagnostics(chains, metrics))
        if chains[-1].prepared.trace is not None:
            trace, trained = chains[-1].prepared.trace, chains[-1].trained
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
                chain.prepared.checkpoint(chain.trained.state)
        raise
    finally:
        logger.close()
    if layout.is_global_zero:
        print(format_metrics(metrics))
    return metrics


def _sampling_diagnostics(chains: list[FittedChain], metrics: dict[str, Any]) -> dict[str, Any]:
    """metrics.json's ``sampling`` (the sampler's temperatures and stage motion, this process's chains:
    :mod:`csg.evaluation.monitor`) and ``sampling_check``: the end-of-run line, or None
    (:mod:`csg.evaluation.sampling_check`)."""
    from csg.engine.interaction import ContourInteraction
    from csg.evaluation.monitor import SamplerReading
    from csg.evaluation.sampling_check import sampling_check

    readings = [c.trained.sampling for c in chains]
    sampling = (SamplerReading.combine(readings) if any(r is not None for r in readings) else
                SamplerReading(note="trainer.monitor_every=0 turned the monitor off")).to_dict()
    contour = isinstance(chains[-1].prepared.interaction, ContourInteraction)
    check = sampling_check(sampling, metrics.get("spread"), epochs=chains[0].trained.epoch_rows,
                           judge_temperatures=not contour, regression=metrics if metrics.get("task") == "regression"
                           else None)
    return {"sampling": sampling, "sampling_check": check}


def temperature_source(cfg: DictConfig) -> str:
    """Where the run's T comes from, for its first log line: the data set's recipe, or a setting."""
    raw = OmegaConf.to_container(cfg.sampler, resolve=False).get("temperature")
    if isinstance(raw, str) and "data.recipe.temperature" in raw:
        return f"data={label(cfg, 'data')}'s recipe"
    return "sampler.temperature, as set"


def _stack_chains(cfg: DictConfig, prepared: list[PreparedChain], layout: distributed.Layout,
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
    interacting = any(c.interaction is not None for c in prepared)
    if method == "vmap":
        reason = why_not_stackable([c.model for c in prepared], interacting=interacting,
                                   precision=precision.name, processes_per_chain=layout.chain_size)
    else:
        reason = why_not_streamed(len(prepared), interacting=interacting, precision=precision.name,
                                  processes_per_chain=layout.chain_size)
    if reason is not None:
        raise ConfigError("trainer.stack_chains", value, f"false: {reason}")
    positions = {(s.epoch, s.batch) if s is not None else (0, 0) for s in (c.state for c in prepared)}
    if len(positions) > 1:
        log.warning("the chains' checkpoints are at different points %s: they go on one after another", sorted(positions))
        return None
    return method


def _fit_chains(cfg: DictConfig, group: list[PreparedChain], layout: distributed.Layout, device: torch.device,
                precision: Precision, run_dir: Path, logger, signals: PreemptionSignals,
                method: str | None = None, callbacks: list | None = None) -> list[FittedChain]:
    """Train the prepared chains of ``group`` together (one chain, or several by ``method``: "vmap" or
    "streams", see :func:`_stack_chains`); a preemption signal (``signals``) saves every chain's checkpoint after
    the step it came in and raises Preempted."""
    first = group[0]
    data, total_steps = first.data, first.total_steps
    if layout.is_global_zero and first.chain == layout.local_chains()[0]:
        if cfg.sampler.schedule == "cyclical" and total_steps % cfg.sampler.cycles:
            log.warning("%d iterations do not split into %d equal cycles: the last %d start a partial cycle "
                        "(no samples there)", total_steps, cfg.sampler.cycles, total_steps % cfg.sampler.cycles)
    chains = ", ".join(str(c.chain + 1) for c in group)
    log.info(
        "%s on %s (%s, %d parameters), T = %g (%s), chain%s %s of %d on %d process(es)%s: %d epochs x %d "
        "iterations, %d samples planned per chain, device %s, run dir %s",
        label(cfg, "sampler"), label(cfg, "data"), label(cfg, "model"),
        sum(p.numel() for p in first.model.parameters()), float(cfg.sampler.temperature), temperature_source(cfg),
        "s" if len(group) > 1 else "", chains, layout.chains, layout.chain_size,
        _together(method, device) if len(group) > 1 else "", cfg.trainer.epochs, len(data.train), len(first.plan),
        device, run_dir,
    )
    lanes = [Lane(c.trained_model, c.sampler, c.data.train, store=c.store if layout.is_chain_leader else None,
                  state=c.state, sample_model=c.model, interaction=c.interaction, on_step=c.trace,
                  checkpoint=c.checkpoint, chain=c.chain, check_state=c.check_state) for c in group]
    setting = cfg.trainer.get("compile", "auto")
    likelihood = first.likelihood
    objective = dict(likelihood=likelihood, num_data=data.num_train)
    if len(group) > 1:
        make = make_streamed_step if method == "streams" else make_stacked_step
        step = make(setting, [c.model for c in group], [c.sampler for c in group], precision, device, **objective)
    else:
        step = make_step(setting, first.trained_model, first.sampler, precision, device,
                         interaction=first.interaction, world_size=layout.chain_size, **objective)
    signals.phase = TRAINING
    with signals.deferred():
        hooks = Hooks(
            checkpoint_every=int(cfg.trainer.checkpoint.every_n_epochs),
            should_stop=lambda: distributed.any_true(signals.received is not None, layout, device),
            stop_error=signals.preempted,
        )
        settings = LoopSettings(
            epochs=cfg.trainer.epochs,
            temperature=cfg.sampler.temperature,
            plan=first.plan,
            device=device,
            precision=precision,
            logger=logger if layout.is_global_zero else None,
            log_every_n_steps=cfg.trainer.log_every_n_steps,
            log_every_n_epochs=cfg.trainer.log_every_n_epochs,
            progress=cfg.trainer.progress and layout.is_global_zero,
            hooks=hooks,
            world_size=layout.chain_size,
            callbacks=callbacks or (),
            task=likelihood.task,
            monitor_every=int(cfg.trainer.get("monitor_every", 1)),
        )
        results = train_chains(lanes, first.schedule, step=step, settings=settings)
    for prepared, trained in zip(group, results):
        for record in trained.samples:
            record["chain"] = prepared.chain
    return [FittedChain(prepared, trained) for prepared, trained in zip(group, results)]


def _together(method: str | None, device: torch.device) -> str:
    """How the log line says several chains go: vectorised, or in lock-step on streams (or one after another)."""
    if method == "streams":
        return ", in lock-step, each on its own CUDA stream" if device.type == "cuda" else ", in lock-step (no CUDA streams: one after another)"
    return ", stepped together"


def interaction_summary(chains: list[FittedChain]) -> dict[str, Any]:
    """What the chains' interaction ended with: theta of the contour samplers, swap rates of replica exchange."""
    from csg.engine.interaction import ContourInteraction, ReplicaExchange

    interaction = chains[-1].prepared.interaction
    if isinstance(interaction, ContourInteraction):
        partition = chains[-1].prepared.sampler.partition
        return {"contour": {"theta": partition.theta[0].tolist(), "updates": partition.updates,
                            "low": partition.low, "width": partition.width, "zeta": partition.zeta,
                            "weight_exponent": interaction.weight_exponent}}
    if isinstance(interaction, ReplicaExchange):
        return {"replica": {"temperatures": interaction.temperatures, "step_sizes": interaction.step_sizes,
                            "correction": interaction.correction, "swap_rates": interaction.swap_rates(),
                            "proposals": interaction.proposals}}
    return {}
