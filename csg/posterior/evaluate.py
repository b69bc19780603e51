"""Evaluating the samples a run stored: cycle weights, cyclical-SWAG draws, the ensemble's metrics.

:func:`ensemble_members` says which samples (or SWAG draws) make a finished run's ensemble and their weights
(:func:`evaluate_store` and :class:`csg.Posterior` both use it); :func:`evaluate_store` is what a run ends with
(it writes nothing); :func:`evaluate_run` evaluates a finished run directory again, from its saved config
(read by :func:`csg.checks.saved.load_run_config`), without training (``scripts/evaluate_run.py``); :func:`format_metrics` is
the table a run prints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from csg.checks import config as checks
from csg.checks.saved import apply_overrides, check_run_data, load_run_config, saved_config_errors
from csg.engine import distributed
from csg.engine.build import build_data_and_model, build_likelihood, build_ood_loader
from csg.engine.devices import Precision, resolve_device
from csg.engine.samples import SampleStore
from csg.engine.settings import EvaluationSettings, SwagSettings, run_settings
from csg.errors import ConfigError
from csg.evaluation import METRIC_NAMES, equal_weights, evaluate_samples, harmonic_mean_weights, predict_probs
from csg.evaluation.diagnostics import sampling_lines
from csg.evaluation.regression import evaluate_regression_samples
from csg.evaluation.spread import member_spread, spread_examples
from csg.evaluation.weights import importance_weights
from csg.io.atomic import atomic_write_json
from csg.components import Config, label
from csg.posterior.store import chain_stores, check_recorded_members, finished_metrics, manifest_hashes, sample_paths

__all__ = ["EnsembleMembers", "ensemble_members", "evaluate_run", "evaluate_store", "format_metrics"]


@dataclass
class EnsembleMembers:
    """The members of a finished run's ensemble, as :func:`evaluate_store` averages them.

    ``names``: each member's sample file (relative to ``samples/``) or cyclical-SWAG draw; ``chains``: its chain;
    ``weights``: its weight w_i in the average sum_i w_i p(y | x, theta_i) (they sum to 1); ``weighting``: their
    name (``equal``, ``harmonic``, ``importance``); ``extra``: what metrics.json records beside them (``swag``).
    :meth:`states` streams the members' state dicts in that order, one at a time (read from the sample files,
    or drawn from the cycles' Gaussians), anew on every call.
    """

    names: list[str]
    chains: list[int]
    weights: list[float]
    weighting: str
    stream: Callable[[], Iterator[dict[str, torch.Tensor]]]
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def states(self) -> Iterator[dict[str, torch.Tensor]]:
        """The members' state dicts (on the CPU), one at a time, in the order of :attr:`names`."""
        return self.stream()


def ensemble_members(
    settings: EvaluationSettings, model, store: SampleStore, data: Callable[[], Any], device, precision: Precision,
    layout: distributed.Layout | None = None, *, likelihood, partial: bool = False,
) -> EnsembleMembers:
    """Which samples (or SWAG draws) of ``store`` make the run's ensemble, and their weights.

    The samples are those the run recorded (:func:`csg.posterior.store.sample_paths`: its manifests; ``partial``:
    an unfinished run's samples so far). Every one is checked first (complete, the file the manifest records, a
    sample of ``model``). ``settings`` (the run's :class:`~csg.engine.settings.EvaluationSettings`) choose them:
    replica exchange, only the lowest temperature's (rung 0) samples; ``swag``, cyclical-SWAG draws, equal weights;
    else contour samplers' importance weights, or ``cycle_weights`` (equal, or harmonic: Appendix F, which
    evaluates each sample on the training set under ``likelihood``, the run's: ``data()`` is called for the run's
    data bundle then only).
    """
    layout = layout or distributed.Layout()
    paths = sample_paths(store, settings.chains, partial=partial)
    store.verify(paths, model_state=model.state_dict())  # each a complete sample of this model, before any is used
    if settings.replica:  # the ensemble is the lowest temperature's samples
        paths = [path for path in paths if store.metadata(path).get("replica_rung", 0) == 0]
    chain_of = [_chain_of(path) for path in paths]
    if settings.swag is not None:
        stream, names, chains, meta = _swag_draws(settings.seed, settings.swag, store, paths, chain_of)
        return EnsembleMembers(names, chains, equal_weights(len(names)), "equal", stream, {"swag": meta})
    names = [str(path.relative_to(store.directory)) for path in paths]
    weights, weighting = _cycle_weights(settings, model, store, paths, chain_of, data, device, precision, layout,
                                        likelihood)
    return EnsembleMembers(names, chain_of, weights, weighting,
                           lambda: (store.state_of(path) for path in paths))


def evaluate_store(
    settings: EvaluationSettings, model, store: SampleStore, data, device, precision: Precision, ood_loader=None,
    ood_source=None, layout: distributed.Layout | None = None, *, likelihood, partial: bool = False,
) -> dict[str, Any]:
    """Metrics of the weighted ensemble (all chains pooled), of each chain and of every sample.

    The members and weights are :func:`ensemble_members`' (``partial``: an unfinished run's samples so far).
    One sample is loaded at a time. Under DDP every process evaluates its shard of the test set. With more than
    one chain, ``diagnostics``: do the chains agree (:func:`csg.evaluation.diagnostics.chain_diagnostics` of the
    members' test log-likelihoods). ``settings``: the run's :class:`~csg.engine.settings.EvaluationSettings`;
    ``likelihood``: the run's, built once.
    """
    from csg.engine.part import head_of, select_part

    layout = layout or distributed.Layout()
    members = ensemble_members(settings, model, store, lambda: data, device, precision, layout, partial=partial,
                               likelihood=likelihood)
    names, chains, weights = members.names, members.chains, members.weights
    if likelihood.task == "regression":  # a mixture of Gaussians (csg.evaluation.regression)
        result = evaluate_regression_samples(model, members.states(), weights, data.test, device, likelihood,
                                             target_scale=getattr(data, "target_scale", None),
                                             autocast=precision.autocast, groups=chains,
                                             gather=lambda t: distributed.gather_rows(t, layout))
    else:
        result = evaluate_samples(  # head: a sampled last layer on a frozen trunk, the trunk runs once
            model, members.states(), weights, data.test, device, n_bins=settings.ece_bins,
            autocast=precision.autocast, ood_loader=ood_loader, groups=chains,
            gather=lambda t: distributed.gather_rows(t, layout), keep_examples=spread_examples(data.num_classes),
            head=head_of(model, select_part(model, settings.params, settings.rest)))
    per_sample = [
        {"file": name, "chain": chain, "weight": weight, **sample_metrics}
        for name, chain, weight, sample_metrics in zip(names, chains, weights, result.per_sample)
    ]
    metrics = {"ensemble": result.ensemble, "per_sample": per_sample, "cycle_weights": members.weighting,
               "manifests": manifest_hashes(store, settings.chains), **members.extra}
    if result.group_ensembles:
        metrics["per_chain"] = [{"chain": chain, **m} for chain, m in result.group_ensembles.items()]
    if result.member_probs is not None:  # how far apart are the members? (csg.evaluation.spread)
        metrics["spread"] = member_spread(result.member_probs, weights).to_dict()
    if len(set(chains)) > 1:  # do the chains agree? (ArviZ, imported for multi-chain runs only)
        from csg.evaluation.diagnostics import chain_diagnostics

        metrics["diagnostics"] = chain_diagnostics(result.log_likelihoods, chains, result.predicted).to_dict()
    if settings.reference is not None:  # read again: the scores name the file they were made with
        from csg.evaluation.reference_predictive import score_result

        metrics["reference"] = score_result(result, settings.reference)
    if result.ood is not None:
        from csg.evaluation.ood import entropy_grid

        metrics["ood"] = {
            "name": settings.ood, "source": ood_source, "entropy_grid": entropy_grid(data.num_classes).tolist(),
            "ensemble": result.ood,
            "per_sample": [{"file": name, **m} for name, m in zip(names, result.ood_per_sample)],
        }
    return metrics


def _chain_of(path: Path) -> int:
    """The chain of a sample: NN of its ``chainNN`` folder, 0 for a one-chain run's ``samples/``."""
    match = re.fullmatch(r"chain(\d+)", path.parent.name)
    return int(match.group(1)) if match else 0


def _cycle_weights(settings: EvaluationSettings, model, store: SampleStore, paths, chain_of, data, device, precision,
                   layout, likelihood):
    """(weights of the stored samples, their name): contour importance weights, equal, or the harmonic-mean
    estimator of Appendix F (``data()``: the run's data bundle, whose training set it evaluates)."""
    if settings.importance:
        return importance_weights([store.metadata(path).get("log_weight", 0.0) for path in paths]), "importance"
    if settings.cycle_weights != "harmonic":
        return equal_weights(len(paths)), settings.cycle_weights
    log_likelihoods, cycles, train_eval = [], [], data().train_eval
    for path, chain in zip(paths, chain_of):
        record = store.metadata(path)
        model.load_state_dict(store.state_of(path))
        if likelihood.task == "regression":  # the likelihood's own log density of the targets it trained on
            per_example = _regression_log_likelihoods(model, train_eval, likelihood, device, precision)
            log_likelihoods.append(distributed.gather_rows(per_example, layout).sum().item())
        else:
            probs, targets = predict_probs(model, train_eval, device, precision.autocast)
            probs, targets = distributed.gather_rows(probs, layout), distributed.gather_rows(targets, layout)
            log_likelihoods.append(probs.gather(1, targets[:, None]).double().clamp_min(1e-300).log().sum().item())
        cycles.append((chain, record["cycle"]))
    index = {key: i for i, key in enumerate(sorted(set(cycles)))}  # a cycle of one chain is one mode
    return harmonic_mean_weights(log_likelihoods, [index[c] for c in cycles]), "harmonic"


@torch.no_grad()
def _regression_log_likelihoods(model, loader, likelihood, device, precision: Precision):
    """Each training example's log-likelihood (float64, on the CPU) under a regression sample: -nll of its outputs
    and its own likelihood parameters (a noise precision it sampled)."""
    from csg.likelihoods import own_parameters

    model.eval()
    params, values = own_parameters(likelihood, model), []
    for x, y in loader:
        with precision.autocast():
            output = model(x.to(device, non_blocking=True))
        values.append(-likelihood.nll(output.float(), y.to(device, non_blocking=True), params).double().cpu())
    return torch.cat(values)


def _swag_draws(seed: int, swag: SwagSettings, store: SampleStore, paths, chain_of):
    """Cyclical SWAG: a Gaussian fitted to each cycle's snapshots (per chain) and ``draws_per_cycle`` draws of
    each, read one snapshot at a time. Returns (a function that streams the draws' state dicts anew, the same
    draws on every call; draw names; their chains; run metadata)."""
    from csg.data.bundle import derive_seed
    from csg.evaluation.swag import cyclical_swag

    cycle_of = [int(store.metadata(path)["cycle"]) for path in paths]
    draws, rank, scale = swag.draws_per_cycle, swag.rank, swag.scale

    def stream() -> Iterator[dict[str, torch.Tensor]]:
        snapshots = (((chain, cycle), store.state_of(path))
                     for path, chain, cycle in zip(paths, chain_of, cycle_of))
        generator = torch.Generator().manual_seed(derive_seed(seed, 7919))
        return (state for _, state in cyclical_swag(snapshots, draws, rank=rank, scale=scale, generator=generator))

    labels = [(chain, cycle, d) for chain, cycle in dict.fromkeys(zip(chain_of, cycle_of)) for d in range(draws)]
    names = [f"swag_chain{chain:02d}_cycle{cycle:02d}_draw{d:02d}" for chain, cycle, d in labels]
    meta = {"draws_per_cycle": draws, "rank": rank, "scale": scale, "snapshots": len(paths)}
    return stream, names, [chain for chain, _, _ in labels], meta


def evaluate_run(run_dir: str | Path, overrides: list[str] | None = None, *, trust_code: bool = False,
                 partial: bool = False) -> dict[str, Any]:
    """Evaluate the samples of a finished run again; writes ``evaluation_<cycle_weights>.json`` beside them.

    A run that has not finished (no ``metrics.json``, or a manifest with fewer samples than planned: still
    training, killed, preempted) is refused as :meth:`csg.Posterior.load` refuses it, unless ``partial``
    (``--partial``): then the samples its manifests record so far are evaluated, and written to
    ``evaluation_partial_<time>.json``, whose metrics say ``partial`` (:func:`format_metrics` too).

    ``overrides`` are ``key=value`` pairs applied to the run's saved config: keys it has that match
    :data:`~csg.checks.saved.OVERRIDABLE` (``evaluation.cycle_weights=harmonic``, ``trainer.device=cpu``,
    ``data.root=...``, ``ood.root=...``), or ``ood=<name>`` (configs/ood/<name>.yaml). Every check happens before
    anything is built or written, each failure a one-line :class:`ConfigError`: the run directory and its saved
    config (read as data: :func:`~csg.checks.saved.load_run_config`), the overrides (a key the config lacks, or
    one that made the samples), the values (as train.py checks them), where the data are read from (:func:`csg.checks.saved.check_run_data`:
    not inside the run directory; CIFAR's pickled batches only from a ``data.root`` given here), the output
    file, and every sample file (complete, a sample of the run's model). ``trust_code``: build the ``_target_``
    objects the run's config names and read its data from where it says (``--trust-code``; :mod:`csg.io.trust`).
    """
    from csg.components import run_directory_targets

    run_dir = Path(run_dir)
    overrides = list(overrides or [])
    cfg = load_run_config(run_dir, trust_code=trust_code)
    recorded = _check_finished(run_dir, cfg, partial)
    cfg = apply_overrides(cfg, overrides)
    with run_directory_targets():
        checks.validate(cfg)
        given = tuple(item.partition("=")[0].strip() for item in overrides)
        check_run_data(cfg, run_dir, trust_code=trust_code, given=given, ood=True)
        store, chains = SampleStore(run_dir / "samples"), int(cfg.sampler.get("chains", 1))
        paths = sample_paths(store, chains, partial=partial, recorded=recorded)  # unfinished: refused unless partial
        progress = _progress(store, chains, len(paths), recorded is not None)
        target = run_dir / (f"evaluation_{cfg.evaluation.cycle_weights}.json" if progress is None else
                            f"evaluation_partial_{datetime.now():%Y-%m-%d_%H-%M-%S}.json")
        _check_writable(run_dir, target)
        store.verify(paths)  # damaged files, before the data is read
        device = resolve_device(str(cfg.trainer.device))
        with saved_config_errors(run_dir):  # a key the saved config lacks: one line
            settings = run_settings(cfg)
            likelihood = build_likelihood(settings.likelihood)  # once, for the model and the evaluation
            data, model = build_data_and_model(settings, device, likelihood=likelihood)
        ood_loader, ood_source = build_ood_loader(settings, data)
        precision = Precision(str(cfg.trainer.precision), device)
        metrics = evaluate_store(settings.evaluation, model, store, data, device, precision, ood_loader,
                                 ood_source, partial=progress is not None, likelihood=likelihood)
    if recorded is not None and progress is None:
        check_recorded_members(run_dir, [row["file"] for row in metrics["per_sample"]], recorded)
    metrics.update(method=label(cfg, "sampler"), data=label(cfg, "data"), model=label(cfg, "model"),
                   seed=int(cfg.seed))
    if progress is not None:
        metrics["partial"] = {**progress, "file": target.name}
    try:
        atomic_write_json(target, metrics)
    except OSError as error:
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: "
                          f"{error.strerror or error}") from None
    return metrics


def _check_finished(run_dir: Path, cfg: Config, partial: bool) -> dict[str, Any] | None:
    """The ``metrics.json`` of a finished run (as :meth:`csg.Posterior.load` reads it), ``None`` for an unfinished
    one with ``partial``; a run without one is refused as Posterior.load refuses it, naming ``--partial``."""
    missing = not (run_dir / "metrics.json").exists()
    if missing and partial and not cfg.get("synthetic"):
        return None
    try:
        return finished_metrics(run_dir, cfg)
    except ConfigError as error:
        if not missing or cfg.get("synthetic"):
            raise
        raise ConfigError(error.key, error.value, f"{error.allowed}; or evaluate the samples written so far with "
                          "--partial") from None


def _progress(store: SampleStore, chains: int, written: int, finished: bool) -> dict[str, Any] | None:
    """None for a finished run (``metrics.json``, every manifest complete); else ``{"samples", "planned",
    "finished": False}``: the samples recorded so far, and all chains' plan (None where no manifest says)."""
    stores = chain_stores(store, chains)
    planned = [manifest.get("planned") for manifest in (one.manifest() for one in stores) if manifest is not None]
    per_chain = max((count for count in planned if count is not None), default=None)  # one plan for every chain
    total = per_chain * chains if per_chain is not None else None
    if finished and (total is None or written >= total):
        return None
    return {"samples": written, "planned": total, "finished": False}


def _check_writable(run_dir: Path, target: Path) -> None:
    """Refuse, before any work, a run directory where ``target`` cannot be written (atomically: a new file + rename)."""
    if target.is_dir() or (target.exists() and not target.is_file()):
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: "
                          f"{target.name} is a directory")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise ConfigError("run_dir", str(run_dir), f"a run directory where {target.name} can be written: this "
                          "user may not write into it (read-only)")


REGRESSION_COLUMNS = ("rmse", "log_likelihood", "coverage_95", "calibration_error")  # format_metrics' table


def format_metrics(metrics: dict[str, Any]) -> str:
    """A short table: the ensemble against every single sample (and every chain)."""

    ensemble = metrics["ensemble"]
    regression = "rmse" in ensemble
    names = REGRESSION_COLUMNS if regression else METRIC_NAMES

    def row(label: str, values: dict[str, float]) -> str:
        cells = [f"{values[key]:>9.2f}" if key == "test_error_pct" else f"{values[key]:>9.4f}" for key in names]
        return f"{label:<40}" + "".join(cells)

    rows = [f"{'':<40}" + "".join(f"{heading:>9}" for heading in (
        ("RMSE", "test LL", "cover95", "PIT err") if regression else ("error %", "NLL", "ECE", "Brier")))]
    rows.append(row(f"ensemble of {ensemble['num_samples']} ({metrics['cycle_weights']} weights)", ensemble))
    rows += [row(f"  chain {c['chain']} alone ({c['num_samples']} samples)", c) for c in metrics.get("per_chain", [])]
    rows += [row(f"  {str(Path(sample['file']).with_suffix(''))}", sample) for sample in metrics["per_sample"]]
    rows.append(row("best single sample (by test LL)", max(metrics["per_sample"], key=lambda s: s["log_likelihood"]))
                if regression else row("best single sample (by NLL)", min(metrics["per_sample"], key=lambda s: s["nll"])))
    if "ood" in metrics:
        ood = metrics["ood"]
        rows.append(f"OOD ({ood['name']}): ensemble entropy {ood['ensemble']['entropy_mean']:.3f} nats, "
                    f"AUROC {ood['ensemble']['auroc']:.3f}; single samples: entropy "
                    f"{sum(s['entropy_mean'] for s in ood['per_sample']) / len(ood['per_sample']):.3f}, AUROC "
                    f"{sum(s['auroc'] for s in ood['per_sample']) / len(ood['per_sample']):.3f} (mean)")
    if "diagnostics" in metrics:
        rows.append(f"chains: {metrics['diagnostics']['reading']}")
    rows += sampling_lines(metrics.get("sampling"), metrics.get("spread"), metrics.get("sampling_check"))
    if "reference" in metrics:
        scores = metrics["reference"]
        rows.append(f"against the reference {Path(scores['file']).name}: " + "; ".join(
            f"{where} agreement {scores[where]['agreement']:.4f}, total variation {scores[where]['total_variation']:.4f}"
            for where in ("test", "ood") if where in scores))
    title = f"{metrics['method']} on {metrics['data']} ({metrics['model']}), seed {metrics['seed']}"
    if "partial" in metrics:  # evaluate_run(partial=True) of a run that has not finished
        partial = metrics["partial"]
        of = f" of {partial['planned']} planned" if partial.get("planned") is not None else ""
        title = (f"PARTIAL: a run that has not finished, its {partial['samples']}{of} samples so far (written to "
                 f"{partial.get('file', '?')})\n{title}")
    if "wall_time_s" in metrics:
        title += (
            f", T={metrics['temperature']:g}, {metrics['gradient_evaluations']} gradient evaluations, "
            f"{metrics['wall_time_s']['total']:.1f} s"
        )
    return "\n".join([title, *rows])
