"""One run from a composed config: check, build, train one chain, evaluate, write ``metrics.json``.

``train.py`` calls :func:`run` under Hydra; tests and scripts may call it with
any DictConfig and an explicit ``run_dir``. :func:`evaluate_run` evaluates the
samples of a finished run again (e.g. with other cycle weights) without
training.
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
from csg.atomic import atomic_torch_save, atomic_write_json
from csg.collection import SampleStore, capacity, collection_points, eligible_epochs
from csg.errors import ConfigError
from csg.evaluation import METRIC_NAMES, equal_weights, evaluate_samples, harmonic_mean_weights, predict_probs
from csg.evaluation.ess import ParameterTrace, ess_summary
from csg.loggers import build_logger
from csg.training import Precision, train_chain

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device", name, "cpu or auto: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device", name, "cpu or auto: MPS is not available on this machine")
    return device


def seed_streams(seed: int) -> dict[str, int]:
    """Independent 63-bit seeds for model initialisation, data order and sampler noise."""
    children = np.random.SeedSequence(seed).spawn(3)
    init, data, noise = (int(child.generate_state(1, np.uint64)[0] >> np.uint64(1)) for child in children)
    return {"init": init, "data": data, "noise": noise}


def _options(node: DictConfig, drop: tuple[str, ...] = ("name",)) -> dict[str, Any]:
    options = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in options.items() if key not in drop}


def build_data_and_model(cfg: DictConfig, device: torch.device, data_seed: int = 0):
    """The run's data bundle and a freshly initialised model on ``device``."""
    from csg.data import build_data
    from csg.models import create_model

    data = build_data(
        cfg.data.name,
        generator=torch.Generator().manual_seed(data_seed),
        device=device,
        **_options(cfg.data, drop=("name", "recipe")),
    )
    model = create_model(
        cfg.model.name, num_classes=data.num_classes, input_shape=data.input_shape, **_options(cfg.model)
    )
    return data, model.to(device)


def build_ood_loader(cfg: DictConfig, data):
    """The out-of-distribution loader of ``cfg.ood`` (None for ``ood=none``) and its source."""
    from csg.data import build_ood

    built = build_ood(cfg.ood.name, like=data, batch_size=cfg.data.eval_batch_size, **_options(cfg.ood))
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
    )


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


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train one chain as ``cfg`` says and return the metrics written to ``run_dir/metrics.json``."""
    from csg.samplers import create_sampler

    started = time.perf_counter()
    checks.validate(cfg)
    run_dir = Path(run_dir if run_dir is not None else _hydra_output_dir())
    device = resolve_device(str(cfg.trainer.device))
    seeds = seed_streams(int(cfg.seed))
    random.seed(seeds["init"])
    np.random.seed(seeds["init"] % 2**32)
    torch.manual_seed(seeds["init"])

    data, model = build_data_and_model(cfg, device, data_seed=seeds["data"])
    ood_loader, ood_source = build_ood_loader(cfg, data)
    total_steps = cfg.trainer.epochs * len(data.train)
    schedule = build_schedule(cfg, total_steps)
    plan = plan_collection(cfg, schedule, len(data.train))
    trace = plan_trace(cfg, schedule, total_steps, model)
    sampler = create_sampler(
        cfg.sampler.update_rule,
        model.parameters(),
        lr=cfg.sampler.lr0,
        num_data=data.num_train,
        temperature=cfg.sampler.temperature,
        weight_decay=cfg.sampler.weight_decay,
        momentum=cfg.sampler.momentum,
        generator=torch.Generator(device=device).manual_seed(seeds["noise"]),
    )
    precision = Precision(str(cfg.trainer.precision), device)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    logger = build_logger(cfg.logger.name, run_dir, resolved, **_options(cfg.logger))
    if cfg.sampler.schedule == "cyclical" and total_steps % cfg.sampler.cycles:
        log.warning(
            "%d iterations do not split into %d equal cycles: the last %d start a partial cycle (no samples there)",
            total_steps, cfg.sampler.cycles, total_steps % cfg.sampler.cycles,
        )
    log.info(
        "%s on %s (%s, %d parameters): %d epochs x %d iterations, %d samples planned, device %s, run dir %s",
        cfg.sampler.name, cfg.data.name, cfg.model.name, sum(p.numel() for p in model.parameters()),
        cfg.trainer.epochs, len(data.train), len(plan), device, run_dir,
    )
    store = SampleStore(run_dir / "samples")
    try:
        trained = train_chain(
            model, sampler, schedule, data.train,
            epochs=cfg.trainer.epochs,
            temperature=cfg.sampler.temperature,
            plan=plan,
            store=store,
            device=device,
            precision=precision,
            logger=logger,
            log_every_n_steps=cfg.trainer.log_every_n_steps,
            log_every_n_epochs=cfg.trainer.log_every_n_epochs,
            progress=cfg.trainer.progress,
            on_step=trace,
        )
        evaluation_start = time.perf_counter()
        metrics = evaluate_store(cfg, model, store, data, device, precision, ood_loader, ood_source)
        metrics.update(
            method=cfg.sampler.name,
            data=cfg.data.name,
            model=cfg.model.name,
            seed=int(cfg.seed),
            temperature=float(cfg.sampler.temperature),
            num_data=data.num_train,
            epochs=trained.epochs,
            gradient_evaluations=trained.iterations,
            examples_processed=trained.epochs * data.num_train,
            wall_time_s={
                "train": trained.seconds,
                "evaluate": time.perf_counter() - evaluation_start,
                "total": time.perf_counter() - started,
            },
            device=str(device),
            data_source=data.source,
            samples=trained.samples,
        )
        if trace is not None:
            atomic_torch_save(trace.draws, run_dir / "trace.pt")
            metrics["ess"] = ess_summary(trace.draws.numpy(), trained.seconds, trained.iterations)
            log.info("ESS over %d draws: median %.0f, min %.0f", trace.count, metrics["ess"]["median"], metrics["ess"]["min"])
        atomic_write_json(run_dir / "metrics.json", metrics)
        logger.log_summary({f"ensemble/{k}": v for k, v in metrics["ensemble"].items()})
    finally:
        logger.close()
    print(format_metrics(metrics))
    return metrics


def evaluate_store(
    cfg: DictConfig, model, store: SampleStore, data, device, precision: Precision, ood_loader=None, ood_source=None
) -> dict[str, Any]:
    """Metrics of the weighted ensemble and of every sample, loading one sample at a time."""
    paths = store.paths()
    if not paths:
        raise ConfigError("samples", str(store.directory), "a run directory with at least one sample")
    if cfg.evaluation.cycle_weights == "harmonic":
        log_likelihoods, cycles = [], []
        for path in paths:
            record = store.load(path)
            model.load_state_dict(record["state_dict"])
            probs, targets = predict_probs(model, data.train_eval, device, precision.autocast)
            log_likelihoods.append(probs.gather(1, targets[:, None]).double().clamp_min(1e-300).log().sum().item())
            cycles.append(record["cycle"])
        weights = harmonic_mean_weights(log_likelihoods, cycles)
    else:
        weights = equal_weights(len(paths))
    result = evaluate_samples(
        model,
        (store.load(path)["state_dict"] for path in paths),
        weights,
        data.test,
        device,
        n_bins=cfg.evaluation.ece_bins,
        autocast=precision.autocast,
        ood_loader=ood_loader,
    )
    per_sample = [
        {"file": path.name, "weight": weight, **sample_metrics}
        for path, weight, sample_metrics in zip(paths, weights, result.per_sample)
    ]
    metrics = {"ensemble": result.ensemble, "per_sample": per_sample, "cycle_weights": str(cfg.evaluation.cycle_weights)}
    if result.ood is not None:
        from csg.evaluation.ood import entropy_grid

        metrics["ood"] = {
            "name": str(cfg.ood.name), "source": ood_source, "entropy_grid": entropy_grid(data.num_classes).tolist(),
            "ensemble": result.ood,
            "per_sample": [{"file": p.name, **m} for p, m in zip(paths, result.ood_per_sample)],
        }
    return metrics


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
    """A short table: the ensemble against every single sample."""

    def row(label: str, values: dict[str, float]) -> str:
        cells = [f"{values[key]:>9.2f}" if key == "test_error_pct" else f"{values[key]:>9.4f}" for key in METRIC_NAMES]
        return f"{label:<32}" + "".join(cells)

    ensemble = metrics["ensemble"]
    rows = [f"{'':<32}{'error %':>9}{'NLL':>9}{'ECE':>9}{'Brier':>9}"]
    rows.append(row(f"ensemble of {ensemble['num_samples']} ({metrics['cycle_weights']} weights)", ensemble))
    rows += [row(f"  {Path(sample['file']).stem}", sample) for sample in metrics["per_sample"]]
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
