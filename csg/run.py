"""One run from a composed config: check, build, train the chain(s), evaluate, write ``metrics.json``.

``train.py`` calls :func:`run` under Hydra (one process, or every process of a
``torchrun`` / SLURM job); tests and scripts may call it with any DictConfig
and an explicit ``run_dir``. :func:`evaluate_run` evaluates the samples of a
finished run again (e.g. with other cycle weights) without training.
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

from csg import config as checks
from csg import distributed
from csg.atomic import atomic_torch_save, atomic_write_json, atomic_write_text
from csg.checkpoint import PreemptionSignals, read_checkpoint, restore_checkpoint, save_checkpoint
from csg.collection import SampleStore, capacity, collection_points, eligible_epochs
from csg.devices import resolve_device, set_deterministic
from csg.errors import ConfigError
from csg.evaluation import METRIC_NAMES, equal_weights, evaluate_samples, harmonic_mean_weights, predict_probs
from csg.evaluation.weights import importance_weights
from csg.evaluation.ess import ParameterTrace, ess_summary
from csg.loggers import NullLogger, build_logger
from csg.stacking import make_stacked_step, why_not_stackable
from csg.step import make_step, prepare_model
from csg.training import Hooks, Lane, Precision, train_chains

log = logging.getLogger(__name__)


def seed_streams(seed: int, chain: int = 0) -> dict[str, int]:
    """Independent 63-bit seeds for model initialisation, data order and sampler noise of one chain.

    Chain 0 of a run with seed s uses the same seeds as a one-chain run with seed s.
    """
    entropy = seed if chain == 0 else [seed, chain]
    children = np.random.SeedSequence(entropy).spawn(3)
    init, data, noise = (int(child.generate_state(1, np.uint64)[0] >> np.uint64(1)) for child in children)
    return {"init": init, "data": data, "noise": noise}


def _swag_draws(cfg, swag, store: SampleStore, paths, chain_of):
    """Cyclical SWAG: a Gaussian fitted to each cycle's snapshots (per chain) and ``draws_per_cycle`` draws of
    each, read one snapshot at a time. Returns (state-dict stream, draw names, their chains, run metadata)."""
    import re

    from csg.data.bundle import derive_seed
    from csg.evaluation.swag import cyclical_swag

    cycle_of = [int(re.search(r"cycle(\d+)", p.name).group(1)) for p in paths]
    draws = int(swag.draws_per_cycle)
    snapshots = (((chain, cycle), store.load(path)["state_dict"]) for path, chain, cycle in zip(paths, chain_of, cycle_of))
    generator = torch.Generator().manual_seed(derive_seed(int(cfg.seed), 7919))
    stream = cyclical_swag(snapshots, draws, rank=int(swag.rank), scale=float(swag.scale), generator=generator)
    labels = [(chain, cycle, d) for chain, cycle in dict.fromkeys(zip(chain_of, cycle_of)) for d in range(draws)]
    names = [f"swag_chain{chain:02d}_cycle{cycle:02d}_draw{d:02d}" for chain, cycle, d in labels]
    meta = {"draws_per_cycle": draws, "rank": int(swag.rank), "scale": float(swag.scale), "snapshots": len(paths)}
    return (state for _, state in stream), names, [chain for chain, _, _ in labels], meta


def _experiment_preset() -> str | None:
    """The ``experiment=`` preset this run was composed with (None outside Hydra or without one)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def _options(node: DictConfig, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    options = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in options.items() if key not in drop}


def build_data_and_model(cfg: DictConfig, device: torch.device, data_seed: int = 0,
                         layout: distributed.Layout | None = None):
    """The run's data bundle (sharded for this process) and a freshly initialised model on ``device``."""
    from csg.data import build_data
    from csg.models import create_model

    layout = layout or distributed.Layout()
    data = build_data(
        cfg.data.name,
        seed=data_seed,
        device=device,
        rank=layout.chain_rank,
        world_size=layout.chain_size,
        eval_rank=layout.rank,
        eval_world_size=layout.world_size,
        **_options(cfg.data, drop=("name", "recipe")),
    )
    model = create_model(
        cfg.model.name, num_classes=data.num_classes, input_shape=data.input_shape, **_options(cfg.model)
    )
    return data, prepare_model(model.to(device), device)


def build_ood_loader(cfg: DictConfig, data, layout: distributed.Layout | None = None):
    """The out-of-distribution loader of ``cfg.ood`` (None for ``ood=none``) and its source."""
    from csg.data import build_ood

    layout = layout or distributed.Layout()
    built = build_ood(cfg.ood.name, like=data, batch_size=cfg.data.eval_batch_size, rank=layout.rank,
                      world_size=layout.world_size, **_options(cfg.ood))
    return built if built is not None else (None, None)


def build_schedule(cfg: DictConfig, total_steps: int):
    from csg.schedules import create_schedule

    return create_schedule(
        cfg.sampler.schedule,
        lr0=cfg.sampler.lr0,
        total_steps=total_steps,
        cycles=cfg.sampler.cycles,
        explore=cfg.sampler.explore,
        lr_final=cfg.sampler.get("lr_final"),
        gamma=cfg.sampler.get("gamma", 0.55),
        hold_sampling_lr=bool(cfg.sampler.get("hold_sampling_lr", False)),
        milestones=tuple(cfg.sampler.get("lr_milestones", (0.5, 0.75))),
        factor=float(cfg.sampler.get("lr_factor", 0.2)),
    )


def build_sampler(cfg: DictConfig, model, num_data: int, layout: distributed.Layout, device: torch.device, generator):
    """The sampler of ``cfg.sampler``: SGLD / SGHMC, or their contour forms when ``sampler.contour`` is set."""
    from csg.samplers import create_sampler

    options = dict(lr=cfg.sampler.lr0, num_data=num_data, temperature=cfg.sampler.temperature,
                   weight_decay=cfg.sampler.weight_decay, generator=generator)
    contour = cfg.sampler.get("contour")
    if contour is None:
        return create_sampler(cfg.sampler.update_rule, model.parameters(), momentum=cfg.sampler.momentum, **options)
    from csg.interaction import ChainCollectives
    from csg.samplers.contour import ContourSGHMC, ContourSGLD, EnergyPartition, default_sa_step

    sa_step = default_sa_step if contour.sa_step is None else (lambda k, omega=float(contour.sa_step): omega)
    partition = EnergyPartition(num_data * float(contour.low), num_data * float(contour.width), int(contour.partitions),
                                zeta=float(contour.zeta), sa_step=sa_step,
                                multiplier_clip=tuple(float(v) for v in contour.multiplier_clip),
                                difference=str(contour.get("difference", "backward")), device=device)
    gather = ChainCollectives(layout, device).gather_chains if interacts(cfg) == "contour" else None
    if cfg.sampler.update_rule == "sghmc":
        return ContourSGHMC(model.parameters(), partition=partition, momentum=cfg.sampler.momentum, gather=gather,
                            **options)
    return ContourSGLD(model.parameters(), partition=partition, gather=gather, **options)


def build_interaction(cfg: DictConfig, sampler, chain: int, layout: distributed.Layout, device: torch.device,
                      num_data: int, schedule, batches_per_epoch: int):
    """The :mod:`csg.interaction` of a contour or replica-exchange sampler (None for the others)."""
    from csg.data.bundle import derive_seed
    from csg.interaction import ChainCollectives, ContourInteraction, ControlVariate, EnergyEstimator, ReplicaExchange

    contour, replica = cfg.sampler.get("contour"), cfg.sampler.get("replica")
    if contour is None and replica is None:
        return None
    energy = cfg.sampler.get("energy") or {}
    control_variate = None
    if energy.get("variance_reduction", False):
        first = next((k for k in range(schedule.total_steps or 0) if schedule.sampling(k)), 0)
        control_variate = ControlVariate(int(energy.refresh_every_epochs), first // batches_per_epoch)
    estimator = EnergyEstimator(num_data, ChainCollectives(layout, device), control_variate)
    if contour is not None:
        return ContourInteraction(estimator, sampler, contour.get("weight_exponent"))
    return ReplicaExchange(estimator, chain, list(replica.temperatures), list(replica.step_sizes),
                           num_data * float(replica.correction), int(replica.swap_every),
                           derive_seed(int(cfg.seed), 104729))


def plan_collection(cfg: DictConfig, schedule, batches_per_epoch: int):
    """The collection points, or a ConfigError if ``samples_per_cycle`` does not fit."""
    epochs = cfg.trainer.epochs
    wanted = cfg.sampler.samples_per_cycle
    fits = capacity(eligible_epochs(schedule, epochs, batches_per_epoch))
    if wanted > fits:
        setting = f"trainer.epochs={epochs}, sampler.cycles={cfg.sampler.cycles}, sampler.explore={cfg.sampler.explore}"
        allowed = (
            f"1..{fits}: the sampling stage of each cycle holds {fits} epoch end{'s' if fits > 1 else ''} ({setting})"
            if fits
            else f"none fit: no cycle's sampling stage contains an epoch end ({setting}); "
            "raise trainer.epochs or lower sampler.cycles or sampler.explore"
        )
        raise ConfigError("sampler.samples_per_cycle", wanted, allowed)
    return collection_points(schedule, epochs, batches_per_epoch, wanted)


def plan_trace(cfg: DictConfig, schedule, total_steps: int, model) -> ParameterTrace | None:
    """The parameter trace of ``cfg.trace``, or a ConfigError if the run is too short to fill it."""
    if not cfg.trace.enabled:
        return None
    available = sum(1 for k in range(cfg.trace.burnin, total_steps) if schedule.sampling(k))
    if cfg.trace.samples > available:
        raise ConfigError(
            "trace.samples", cfg.trace.samples,
            f"at most {available}: the sampling-stage iterations after trace.burnin={cfg.trace.burnin} "
            f"in {total_steps} iterations; raise trainer.epochs",
        )
    return ParameterTrace(model, burnin=cfg.trace.burnin, samples=cfg.trace.samples, keep=schedule.sampling)


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
    """Refuse a checkpoint of another config before anything is loaded from it.

    Hydra has already written this command's config into ``<run dir>/.hydra/``; a refusal puts back the
    files of the run the checkpoint belongs to, so that the directory still describes its samples."""
    saved = checkpoint["config"]
    for key in sorted(set(saved) | set(current), key=lambda k: (not k.endswith(".name"), k)):  # a changed choice first
        if saved.get(key) != current.get(key):
            for name, text in (checkpoint.get("hydra_files") or {}).items():
                atomic_write_text(path.parent / ".hydra" / name, text)
            raise ConfigError(
                "trainer.checkpoint.resume", True,
                f"a checkpoint made with this config; {path} has {key}={saved.get(key)!r}, this run {current.get(key)!r} "
                "(use another hydra.run.dir, or trainer.checkpoint.resume=false to start over)",
            )


def _hydra_files(run_dir: Path) -> dict[str, str]:
    """The texts of ``<run dir>/.hydra/*.yaml`` (Hydra's record of the command), kept in the checkpoints."""
    folder = run_dir / ".hydra"
    return {path.name: path.read_text() for path in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train the chain(s) as ``cfg`` says; return the metrics written to ``run_dir/metrics.json``."""
    started = time.perf_counter()
    checks.validate(cfg)
    run_dir = Path(run_dir if run_dir is not None else _hydra_output_dir())
    layout = distributed.setup(int(cfg.sampler.get("chains", 1)), str(cfg.trainer.device))
    try:
        _check_interacting_layout(cfg, layout)
        metrics = _run(cfg, run_dir, layout, started)
    except BaseException:
        distributed.teardown(layout, wait=False)  # the others may never reach a barrier: let the error end the job
        raise
    distributed.teardown(layout)
    return metrics


def interacts(cfg: DictConfig) -> str | None:
    """"contour" (ICSGHMC: chains share theta), "replica" (reSGHMC), or None: chains that must step together."""
    chains = int(cfg.sampler.get("chains", 1))
    if cfg.sampler.get("replica") is not None:
        return "replica"
    if cfg.sampler.get("contour") is not None and bool(cfg.sampler.contour.interacting) and chains > 1:
        return "contour"
    return None


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


def _run(cfg: DictConfig, run_dir: Path, layout: distributed.Layout, started: float) -> dict[str, Any]:
    _quiet_other_ranks(layout)
    device = resolve_device(str(cfg.trainer.device), layout)
    set_deterministic(bool(cfg.trainer.get("deterministic", False)))
    precision = Precision(str(cfg.trainer.precision), device)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resuming = bool(cfg.trainer.checkpoint.resume) and any(run_dir.glob("checkpoint*.pt"))
    logger = (build_logger(cfg.logger.name, run_dir, resolved, resume=resuming, **_options(cfg.logger))
              if layout.is_global_zero else NullLogger())
    chains = []
    try:
        prepared = [_prepare_chain(cfg, chain, layout, device, precision, run_dir) for chain in layout.local_chains()]
        ood_loader, ood_source = build_ood_loader(cfg, prepared[0]["data"], layout)  # bad OOD input: before training
        together = _stack_chains(cfg, prepared, layout, precision)
        for group in [prepared] if together else [[chain] for chain in prepared]:
            chains.extend(_fit_chains(cfg, group, layout, device, precision, run_dir, logger))
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
    finally:
        logger.close()
    if layout.is_global_zero:
        print(format_metrics(metrics))
    return metrics


def _prepare_chain(cfg: DictConfig, chain: int, layout: distributed.Layout, device: torch.device,
                   precision: Precision, run_dir: Path) -> dict[str, Any]:
    """Build one chain: data, model, schedule, sampler; restore its checkpoint when there is one.

    A checkpoint is read and its config compared with this run's first, before any data or model is built."""
    suffix = f"_chain{chain:02d}" if layout.chains > 1 else ""
    checkpoint_path = run_dir / f"checkpoint{suffix}.pt"
    fingerprint = {**config_fingerprint(cfg), RESOLVED_DEVICE: device.type}
    saved = None
    if cfg.trainer.checkpoint.resume and checkpoint_path.exists():
        saved = read_checkpoint(checkpoint_path)
        _check_same_config(saved, fingerprint, checkpoint_path)
    seeds = seed_streams(int(cfg.seed), chain)
    random.seed(seeds["init"])
    np.random.seed(seeds["init"] % 2**32)
    torch.manual_seed(seeds["init"])
    data, model = build_data_and_model(cfg, device, data_seed=seeds["data"], layout=layout)
    total_steps = cfg.trainer.epochs * len(data.train)
    schedule = build_schedule(cfg, total_steps)
    plan = plan_collection(cfg, schedule, len(data.train))
    trace = plan_trace(cfg, schedule, total_steps, model)
    if cfg.trainer.sync_batchnorm and layout.chain_size > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=layout.group)
    sampler = build_sampler(cfg, model, data.num_train, layout, device,
                            torch.Generator(device=device).manual_seed(seeds["noise"]))  # the same in every process of a chain
    interaction = build_interaction(cfg, sampler, chain, layout, device, data.num_train, schedule, len(data.train))
    trained_model = model
    if layout.chain_size > 1:
        trained_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, process_group=layout.group
        )
    store = SampleStore(run_dir / "samples" / f"chain{chain:02d}" if layout.chains > 1 else run_dir / "samples")

    state = None
    if saved is not None:
        state = restore_checkpoint(saved, model=model, sampler=sampler, scaler=precision.scaler, device=device)
        if interaction is not None and saved.get("interaction") is not None:
            interaction.load_state_dict(saved["interaction"], model)
        if trace is not None and saved.get("trace") is not None:
            draws, trace.count = saved["trace"]
            trace.buffer[: trace.count] = draws
        log.info("resumed chain %d from %s at epoch %d, batch %d", chain, checkpoint_path, state.epoch + 1, state.batch)

    hydra_files = _hydra_files(run_dir)

    def checkpoint(loop_state) -> None:
        if layout.is_chain_leader:
            extra = {"config": fingerprint, "trace": (trace.draws.clone(), trace.count) if trace is not None else None,
                     "interaction": interaction.state_dict() if interaction is not None else None,
                     "hydra_files": hydra_files}
            save_checkpoint(checkpoint_path, model=model, sampler=sampler, state=loop_state,
                            scaler=precision.scaler, extra=extra, device=device)

    return {"chain": chain, "data": data, "model": model, "trained_model": trained_model, "sampler": sampler,
            "schedule": schedule, "plan": plan, "trace": trace, "store": store, "state": state,
            "checkpoint": checkpoint, "total_steps": total_steps, "interaction": interaction}


def _stack_chains(cfg: DictConfig, prepared: list[dict[str, Any]], layout: distributed.Layout,
                  precision: Precision) -> bool:
    """Whether this process's chains step together (``trainer.stack_chains=true``).

    Where they cannot it is a one-line error naming the reason, before any training; chains resumed from
    checkpoints at different points go on one after another."""
    if not cfg.trainer.get("stack_chains", False) or len(prepared) < 2:
        return False
    reason = why_not_stackable([c["model"] for c in prepared],
                               interacting=any(c["interaction"] is not None for c in prepared),
                               precision=precision.name, processes_per_chain=layout.chain_size)
    if reason is not None:
        raise ConfigError("trainer.stack_chains", True, f"false: {reason}")
    positions = {(s.epoch, s.batch) if s is not None else (0, 0) for s in (c["state"] for c in prepared)}
    if len(positions) > 1:
        log.warning("the chains' checkpoints are at different points %s: they go on one after another", sorted(positions))
        return False
    return True


def _fit_chains(cfg: DictConfig, group: list[dict[str, Any]], layout: distributed.Layout, device: torch.device,
                precision: Precision, run_dir: Path, logger) -> list[dict[str, Any]]:
    """Train the prepared chains of ``group`` together (one chain, or stacked chains); a preemption signal saves
    every chain's checkpoint and raises Preempted."""
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
        ", stepped together" if len(group) > 1 else "", cfg.trainer.epochs, len(data.train), len(group[0]["plan"]),
        device, run_dir,
    )
    lanes = [Lane(c["trained_model"], c["sampler"], c["data"].train, store=c["store"] if layout.is_chain_leader else None,
                  state=c["state"], sample_model=c["model"], interaction=c["interaction"], on_step=c["trace"],
                  checkpoint=c["checkpoint"], chain=c["chain"]) for c in group]
    setting = cfg.trainer.get("compile", "auto")
    if len(group) > 1:
        step = make_stacked_step(setting, [c["model"] for c in group], [c["sampler"] for c in group], precision, device)
    else:
        step = make_step(setting, group[0]["trained_model"], group[0]["sampler"], precision, device,
                         interaction=group[0]["interaction"], world_size=layout.chain_size)
    with PreemptionSignals(list(cfg.trainer.checkpoint.signals)) as signals:
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
                       "interaction": prepared["interaction"], "sampler": prepared["sampler"]})
    return fitted


def evaluate_store(
    cfg: DictConfig, model, store: SampleStore, data, device, precision: Precision, ood_loader=None, ood_source=None,
    layout: distributed.Layout | None = None,
) -> dict[str, Any]:
    """Metrics of the weighted ensemble (all chains pooled), of each chain and of every sample.

    One sample is loaded at a time. Under DDP every process evaluates its shard of the test set.
    """
    layout = layout or distributed.Layout()
    paths = store.paths()
    if not paths:
        raise ConfigError("samples", str(store.directory), "a run directory with at least one sample")
    if cfg.sampler.get("replica") is not None:  # the ensemble is the lowest temperature's samples
        paths = [path for path in paths if store.metadata(path).get("replica_rung", 0) == 0]
    chain_of = [int(p.parent.name.removeprefix("chain")) if p.parent.name.startswith("chain") else 0 for p in paths]
    swag = cfg.sampler.get("swag")
    extra: dict[str, Any] = {}
    if swag is not None and int(swag.draws_per_cycle) > 0:
        states, names, chains, extra["swag"] = _swag_draws(cfg, swag, store, paths, chain_of)
        weights, cycle_weights = equal_weights(len(names)), "equal"
    else:
        states = (store.load(path)["state_dict"] for path in paths)
        names, chains = [str(path.relative_to(store.directory)) for path in paths], chain_of
        weights, cycle_weights = _cycle_weights(cfg, model, store, paths, chain_of, data, device, precision, layout)
    result = evaluate_samples(
        model,
        states,
        weights,
        data.test,
        device,
        n_bins=cfg.evaluation.ece_bins,
        autocast=precision.autocast,
        ood_loader=ood_loader,
        groups=chains,
        gather=lambda t: distributed.gather_rows(t, layout),
    )
    per_sample = [
        {"file": name, "chain": chain, "weight": weight, **sample_metrics}
        for name, chain, weight, sample_metrics in zip(names, chains, weights, result.per_sample)
    ]
    metrics = {"ensemble": result.ensemble, "per_sample": per_sample, "cycle_weights": cycle_weights, **extra}
    if result.group_ensembles:
        metrics["per_chain"] = [{"chain": chain, **m} for chain, m in result.group_ensembles.items()]
    if result.ood is not None:
        from csg.evaluation.ood import entropy_grid

        metrics["ood"] = {
            "name": str(cfg.ood.name), "source": ood_source, "entropy_grid": entropy_grid(data.num_classes).tolist(),
            "ensemble": result.ood,
            "per_sample": [{"file": name, **m} for name, m in zip(names, result.ood_per_sample)],
        }
    return metrics


def _cycle_weights(cfg, model, store: SampleStore, paths, chain_of, data, device, precision, layout):
    """(weights of the stored samples, their name): equal, or the harmonic-mean estimator of Appendix F."""
    contour = cfg.sampler.get("contour")
    if contour is not None and contour.get("ensemble_weights", "importance") == "importance":
        return importance_weights([store.metadata(path).get("log_weight", 0.0) for path in paths]), "importance"
    if cfg.evaluation.cycle_weights != "harmonic":
        return equal_weights(len(paths)), str(cfg.evaluation.cycle_weights)
    log_likelihoods, cycles = [], []
    for path, chain in zip(paths, chain_of):
        record = store.load(path)
        model.load_state_dict(record["state_dict"])
        probs, targets = predict_probs(model, data.train_eval, device, precision.autocast)
        probs, targets = distributed.gather_rows(probs, layout), distributed.gather_rows(targets, layout)
        log_likelihoods.append(probs.gather(1, targets[:, None]).double().clamp_min(1e-300).log().sum().item())
        cycles.append((chain, record["cycle"]))
    index = {key: i for i, key in enumerate(sorted(set(cycles)))}  # a cycle of one chain is one mode
    return harmonic_mean_weights(log_likelihoods, [index[c] for c in cycles]), "harmonic"


def interaction_summary(chains: list[dict[str, Any]]) -> dict[str, Any]:
    """What the chains' interaction ended with: theta of the contour samplers, swap rates of replica exchange."""
    from csg.interaction import ContourInteraction, ReplicaExchange

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


def evaluate_run(run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Evaluate the samples of a finished run again; writes ``evaluation_<cycle_weights>.json`` beside them.

    ``overrides`` are dotted ``key=value`` pairs applied to the run's saved
    config (``evaluation.cycle_weights=harmonic``, ``trainer.device=cpu``, ...).
    """
    run_dir = Path(run_dir)
    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.exists():
        raise ConfigError("run_dir", str(run_dir), "a run directory of train.py (with .hydra/config.yaml)")
    cfg = OmegaConf.merge(OmegaConf.load(saved), OmegaConf.from_dotlist(list(overrides or [])))
    checks.validate(cfg)
    device = resolve_device(str(cfg.trainer.device))
    data, model = build_data_and_model(cfg, device)
    ood_loader, ood_source = build_ood_loader(cfg, data)
    precision = Precision(str(cfg.trainer.precision), device)
    metrics = evaluate_store(cfg, model, SampleStore(run_dir / "samples"), data, device, precision, ood_loader, ood_source)
    metrics.update(method=cfg.sampler.name, data=cfg.data.name, model=cfg.model.name, seed=int(cfg.seed))
    atomic_write_json(run_dir / f"evaluation_{cfg.evaluation.cycle_weights}.json", metrics)
    return metrics


def format_metrics(metrics: dict[str, Any]) -> str:
    """A short table: the ensemble against every single sample (and every chain)."""

    def row(label: str, values: dict[str, float]) -> str:
        cells = [f"{values[key]:>9.2f}" if key == "test_error_pct" else f"{values[key]:>9.4f}" for key in METRIC_NAMES]
        return f"{label:<40}" + "".join(cells)

    ensemble = metrics["ensemble"]
    rows = [f"{'':<40}{'error %':>9}{'NLL':>9}{'ECE':>9}{'Brier':>9}"]
    rows.append(row(f"ensemble of {ensemble['num_samples']} ({metrics['cycle_weights']} weights)", ensemble))
    rows += [row(f"  chain {c['chain']} alone ({c['num_samples']} samples)", c) for c in metrics.get("per_chain", [])]
    rows += [row(f"  {str(Path(sample['file']).with_suffix(''))}", sample) for sample in metrics["per_sample"]]
    rows.append(row("best single sample (by NLL)", min(metrics["per_sample"], key=lambda s: s["nll"])))
    if "ood" in metrics:
        ood = metrics["ood"]
        rows.append(f"OOD ({ood['name']}): ensemble entropy {ood['ensemble']['entropy_mean']:.3f} nats, "
                    f"AUROC {ood['ensemble']['auroc']:.3f}; single samples: entropy "
                    f"{sum(s['entropy_mean'] for s in ood['per_sample']) / len(ood['per_sample']):.3f}, AUROC "
                    f"{sum(s['auroc'] for s in ood['per_sample']) / len(ood['per_sample']):.3f} (mean)")
    title = f"{metrics['method']} on {metrics['data']} ({metrics['model']}), seed {metrics['seed']}"
    if "wall_time_s" in metrics:
        title += (
            f", T={metrics['temperature']:g}, {metrics['gradient_evaluations']} gradient evaluations, "
            f"{metrics['wall_time_s']['total']:.1f} s"
        )
    return "\n".join([title, *rows])


def _hydra_output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
