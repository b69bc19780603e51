"""Evaluating the samples a run stored: cycle weights, cyclical-SWAG draws, the ensemble's metrics.

:func:`evaluate_store` is what a run ends with (it writes nothing); :func:`evaluate_run` evaluates a
finished run directory again, from its saved config, without training (``scripts/evaluate_run.py``);
:func:`format_metrics` is the table a run prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from csg import config as checks
from csg import distributed
from csg.atomic import atomic_write_json
from csg.build import build_data_and_model, build_ood_loader
from csg.collection import SampleStore
from csg.devices import resolve_device
from csg.errors import ConfigError
from csg.evaluation import METRIC_NAMES, equal_weights, evaluate_samples, harmonic_mean_weights, predict_probs
from csg.evaluation.weights import importance_weights
from csg.training import Precision


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
