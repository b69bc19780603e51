"""cSG-MCMC Figure 3 (Section 5.2): are the samples of a cyclical chain from different modes?

(a) MDS of the 12 samples' weights of cSGLD and of SGLD, from their pairwise Euclidean distances;
(b) test error of :math:`\\theta(\\lambda) = \\lambda\\theta_1 + (1-\\lambda)\\theta_2` between samples
    of neighbouring cycles of cSGLD, and between 4 evenly spaced samples of SGLD: a bump in the
    middle means the two samples lie in different modes;
(c) ensemble test error against the number of cycles M for cSGLD and Snapshot-SGD, same budget.

Batch-norm running statistics are interpolated along with the weights (the paper does not say);
integer buffers are taken from :math:`\\theta_2`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

import csg
from csg.reporting import write_text
from studies.experiments import comparisons
from studies.experiments.aggregate import mean_and_stderr, refuse_runs, runs_to_report
from studies.experiments.comparisons import Claim
from studies.experiments.sweeps import TableSpec, expand, expected_runs, missing_runs
from studies.experiments.tables import ERROR

CYCLES = "1,2,4,5"  # each divides both budgets (200 and 80 epochs)
SPEC = TableSpec(
    name="fig3",
    title="cSG-MCMC Figure 3",
    presets={"full": "fig3", "smoke": "fig3_smoke"},
    data={"full": "cifar100", "smoke": "mnist5k"},
    paper_data=("cifar100",),
    seeds={"full": "0", "smoke": "0"},
    sweeps=(
        ("sampler=csgld", "data={data}", "seed={seeds}"),  # M = 4, 12 samples: panels a, b and M = 4 of c
        ("sampler=sgld", "sampler.samples_per_cycle=12", "data={data}", "seed={seeds}"),
        ("sampler=csgld", "sampler.cycles=1,2,5", "data={data}", "seed={seeds}"),
        ("sampler=snapshot_sgd", f"sampler.cycles={CYCLES}", "data={data}", "seed={seeds}"),
    ),
    label=lambda run, budget: str(run["sampler.name"]),
    metrics=(),
)
CLAIMS = (Claim("cSGLD", "Snapshot-SGD", (ERROR.paper_name,)),)
CLAIMS_TEXT = ("The paper's claim (Section 5.2, Figure 3c): \"given a fixed M, cSG-MCMC yields substantially lower test "
               "errors than Snapshot\": cSGLD against Snapshot-SGD at each M, in ensemble test error. Per run: "
               "`fig3_cycles_runs.csv`; the comparisons: `fig3_comparisons.csv`.")
LAMBDAS = tuple(i / 10 for i in range(11))
FIG3_SAMPLERS = ("csgld", "sgld", "snapshot_sgd")  # the samplers of the panels


def _floating(state_dict: dict[str, Tensor]) -> list[str]:
    return [k for k, v in state_dict.items() if torch.is_floating_point(v)]


def pairwise_distances(state_dicts: Sequence[dict[str, Tensor]]) -> np.ndarray:
    """Euclidean distances between the samples' floating-point entries (weights and batch-norm statistics).

    From the Gram matrix, accumulated entry by entry in float64, so no sample is flattened whole.
    """
    n = len(state_dicts)
    gram = torch.zeros(n, n, dtype=torch.float64)
    for key in _floating(state_dicts[0]):
        stacked = torch.stack([sd[key].detach().reshape(-1).to(torch.float64) for sd in state_dicts])
        gram += stacked @ stacked.T
    squared = gram.diag()[:, None] + gram.diag()[None, :] - 2 * gram
    distances = squared.clamp_min(0).sqrt()
    distances.fill_diagonal_(0)
    return distances.numpy()


def mds_embedding(distances: np.ndarray, seed: int = 0) -> np.ndarray:
    """Two-dimensional metric MDS (scikit-learn's SMACOF from the classical solution) of a distance matrix."""
    from sklearn.manifold import MDS

    mds = MDS(n_components=2, metric="precomputed", init="classical_mds", n_init=1, random_state=seed)
    return mds.fit_transform(distances)


def interpolate(first: dict[str, Tensor], second: dict[str, Tensor], lam: float) -> dict[str, Tensor]:
    """:math:`\\lambda\\,\\theta_1 + (1 - \\lambda)\\,\\theta_2` on floating entries; the rest from ``second``."""
    return {k: lam * first[k] + (1 - lam) * v if torch.is_floating_point(v) else v.clone() for k, v in second.items()}


def interpolation_errors(model: torch.nn.Module, first, second, loader, device, lambdas=LAMBDAS) -> list[float]:
    """Test error (%) of the model at each point of the straight line between two samples."""
    from csg.evaluation import predict_probs

    errors = []
    for lam in lambdas:
        model.load_state_dict(interpolate(first, second, lam))
        probs, targets = predict_probs(model, loader, device)
        errors.append(100.0 * (probs.argmax(1) != targets).double().mean().item())
    return errors


def _posterior(run_dir: Path, device: str | torch.device = "auto", data_root: str | None = None) -> csg.Posterior:
    """The run's posterior (:meth:`csg.Posterior.load`): its config read as data (YAML within limits, no
    ``_target_``), each of the samples it recorded checked before any is used (a damaged file, or a run that has
    not finished, is a one-line error naming it), its model built; its test data (:attr:`~csg.Posterior.data`) read
    from ``data_root`` when given, else from the root its config names, checked (never inside the run directory,
    never CIFAR's pickles from a root the run names)."""
    return csg.Posterior.load(run_dir, device=device, data_root=data_root)


def _samples(posterior: csg.Posterior) -> list[tuple[dict, dict[str, Tensor]]]:
    """({"index", "cycle"}, state_dict) of each sample of the run (its manifest, never a listing of its folder: stray
    copies join no panel), in collection order, on the CPU; ``index``: the sample's place in its chain."""
    taken: dict[int, int] = {}
    metas = []
    for chain, cycle in zip(posterior.chains, posterior.cycles, strict=True):
        metas.append({"index": taken.get(chain, 0), "cycle": cycle})
        taken[chain] = taken.get(chain, 0) + 1
    return list(zip(metas, posterior.states(), strict=True))


def _data_root(run: pd.Series, data_root: str | None) -> str | None:
    """Where panel (b) reads the run's test data: ``data_root`` (the caller's ``data.root=``) when given; else the
    run's own ``data.root`` when it is written as the default root of its data set resolves here (its
    ``configs/data`` file's, e.g. ``${oc.env:CSG_DATA,data}`` -> ``data``: the reader's own folder), taken as the
    reader's; else None: the root the run's config names, from which :meth:`csg.Posterior.load`'s data never
    unpickle CIFAR."""
    from omegaconf import OmegaConf

    from csg.paths import CONFIGS

    if data_root is not None:
        return data_root
    default = CONFIGS / "data" / f"{run['data.name']}.yaml"  # our own config file, not the run's
    raw = run.get("data.root")  # as the run's config says it, unresolved
    if isinstance(raw, str) and default.is_file() and raw == OmegaConf.load(default).get("root"):
        return raw
    return None


def _pick(done: pd.DataFrame, method: str, cycles: int | None = None) -> pd.Series | None:
    """The finished run of ``method`` (with ``cycles`` cycles) of the lowest seed, if any."""
    if done.empty:
        return None
    rows = done[done["sampler.name"] == method]
    if cycles is not None:
        rows = rows[rows["metrics.cycles"] == cycles]
    return rows.sort_values("seed").iloc[0] if len(rows) else None


def report(runs_dir: str | Path, out_dir: str | Path, scale: str, *, epochs: int, seeds: str | None = None,
           device: str = "auto", data_root: str | None = None) -> list[dict[str, str]]:
    """fig3_{mds,interpolation,cycles}.csv, fig3.md and fig3.png/.pdf from the runs; returns the missing runs.

    Panel (b) reads the test data from ``data_root`` when given, else from the data set's default root (never CIFAR's
    pickles from a root the run's config names: :func:`_data_root`, :func:`_posterior`).

    A folder that does not exist, or holds no finished run of the figure's samplers, is a
    :class:`~csg.errors.ConfigError` (``--runs``) and nothing is written."""
    runs = runs_to_report(runs_dir, "fig3")
    missing = missing_runs(runs, expected_runs(expand(SPEC, scale, epochs, seeds)))
    done = runs[runs.status == "done"]
    if "sampler.name" not in done or not done["sampler.name"].isin(FIG3_SAMPLERS).any():
        raise refuse_runs(runs_dir, "fig3", f"none of its {len(done)} finished runs is of {', '.join(FIG3_SAMPLERS)}")
    out_dir = Path(out_dir)
    mds_rows, line_rows, notes = [], [], []

    chosen = {"cSGLD": _pick(done, "csgld", 4), "SGLD": _pick(done, "sgld")}
    if all(run is not None for run in chosen.values()):
        posteriors = {label: _posterior(Path(run.run_dir), device, _data_root(run, data_root) if label == "cSGLD"
                                        else None) for label, run in chosen.items()}
        samples = {label: _samples(posterior) for label, posterior in posteriors.items()}
        labels = [label for label, items in samples.items() for _ in items]
        metas = [meta for items in samples.values() for meta, _ in items]
        states = [sd for items in samples.values() for _, sd in items]
        distances = pairwise_distances(states)
        xy = mds_embedding(distances)
        for label, meta, (x, y) in zip(labels, metas, xy):
            mds_rows.append({"method": label, "sample": meta["index"], "cycle": meta["cycle"], "x": x, "y": y})
        for label in samples:
            idx = [i for i, lab in enumerate(labels) if lab == label]
            block = distances[np.ix_(idx, idx)]
            if len(idx) > 1:
                notes.append(f"{label}: mean distance between its samples {block[np.triu_indices(len(idx), 1)].mean():.2f}")
            cycle_of = np.array([metas[i]["cycle"] for i in idx])
            same = (cycle_of[:, None] == cycle_of[None, :]) & ~np.eye(len(idx), dtype=bool)
            if same.any() and (~same & ~np.eye(len(idx), dtype=bool)).any():
                notes.append(f"{label}: within a cycle {block[same].mean():.2f}, between cycles "
                             f"{block[~same & ~np.eye(len(idx), dtype=bool)].mean():.2f}")
        model, test, dev = posteriors["cSGLD"].model, posteriors["cSGLD"].data.test, posteriors["cSGLD"].device
        for label, items in samples.items():
            if label == "cSGLD":  # the last sample of each cycle, neighbouring cycles paired
                last = {}
                for meta, sd in items:
                    last[meta["cycle"]] = sd
                ends = [last[c] for c in sorted(last)]
            else:  # 4 evenly spaced samples of the single chain
                ends = [items[round(i * (len(items) - 1) / 3)][1] for i in range(4)]
            for pair, (second, first) in enumerate(zip(ends, ends[1:])):
                for lam, error in zip(LAMBDAS, interpolation_errors(model, first, second, test, dev)):
                    line_rows.append({"method": label, "pair": f"{pair}-{pair + 1}", "lambda": lam,
                                      "test_error_pct": error})

    cycles, per_run, verdicts = pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    if len(done):
        swept = done[done["sampler.name"].isin(["csgld", "snapshot_sgd"])].copy()
        if len(swept):
            swept["method"] = swept["sampler.name"].map({"csgld": "cSGLD", "snapshot_sgd": "Snapshot-SGD"})
            cycles = mean_and_stderr(swept, ["method", "metrics.cycles"], "metrics.ensemble.test_error_pct")
            cycles = cycles.rename(columns={"metrics.cycles": "cycles"}).sort_values(["method", "cycles"])
            per_run = pd.DataFrame({"M": swept["metrics.cycles"].astype(int), "method": swept.method,
                                    "seed": swept.seed.astype(int),
                                    ERROR.paper_name: swept["metrics.ensemble.test_error_pct"],
                                    "run_dir": swept.run_dir}).sort_values(["M", "method", "seed"])
            verdicts = comparisons.compare(per_run, CLAIMS, (ERROR,), group="M")

    mds, lines = pd.DataFrame(mds_rows), pd.DataFrame(line_rows)
    first = done.iloc[0] if len(done) else None
    cycle_seeds = sorted(set(per_run.seed)) if len(per_run) else []
    text = _markdown(scale, runs_dir, first, mds, lines, cycles, notes, missing, verdicts, cycle_seeds)
    write_text(out_dir / "fig3_mds.csv", mds.to_csv(index=False))
    write_text(out_dir / "fig3_interpolation.csv", lines.to_csv(index=False))
    write_text(out_dir / "fig3_cycles.csv", cycles.to_csv(index=False))
    write_text(out_dir / "fig3_cycles_runs.csv", per_run.to_csv(index=False))
    write_text(out_dir / "fig3_comparisons.csv", verdicts.to_csv(index=False))
    write_text(out_dir / "fig3.md", text)
    if len(mds) or len(lines) or len(cycles):
        _figure(mds, lines, cycles, scale, first, out_dir / "fig3.png")
    return missing


def bumps(lines: pd.DataFrame) -> pd.DataFrame:
    """Per (method, pair): the largest test error inside the line minus the larger of its two ends."""
    rows = []
    for (method, pair), group in lines.groupby(["method", "pair"], sort=False):
        ends = group[group["lambda"].isin([0.0, 1.0])].test_error_pct.max()
        rows.append({"method": method, "pair": pair, "bump": group.test_error_pct.max() - ends})
    return pd.DataFrame(rows)


def _markdown(scale, runs_dir, first, mds, lines, cycles, notes, missing, verdicts=None, seeds=()) -> str:
    setting = (f"{first['data.name']}, {first['model.name']}, {int(first['metrics.epochs'])} epochs"
               if first is not None else "no runs")
    smoke = scale == "smoke"
    out = [f"# cSG-MCMC Figure 3: diversity of the samples{' (SMOKE SCALE)' if smoke else ''}", "",
           f"Scale: {'**smoke** (the shipped MNIST digits with the MLP, not the paper CIFAR-100 ResNet-18)' if smoke else '**full**'}; "
           f"{setting}; panels (a) and (b) from the lowest seed's runs, (c) from seed{'s' if len(seeds) > 1 else ''} "
           f"{', '.join(map(str, seeds)) or 'none'}. Runs: `{runs_dir}`. Command: `make fig3{' SCALE=smoke' if smoke else ''}`. "
           "The paper gives the panels as pictures only (no numbers): cSG-MCMC's samples form 4 clusters in "
           "weight space where SG-MCMC's form one; lines between cSG-MCMC samples of neighbouring cycles show "
           "an error spike, SG-MCMC's are flat; cSGLD's error is below Snapshot's at every M.", ""]
    if len(mds):
        out += ["(a) MDS of the weights: " + "; ".join(notes) + ".", ""]
    if len(lines):
        table = bumps(lines)
        out += ["(b) Largest rise of the test error inside each line above its ends (percentage points):", "",
                "| method | pair | bump |", "|---|---|---:|"]
        out += [f"| {r.method} | {r.pair} | {r.bump:.2f} |" for r in table.itertuples()]
        out.append("")
    if len(cycles):
        out += ["(c) Ensemble test error (%) against the number of cycles M (same epoch budget):", "",
                "| method | M | test error % | seeds |", "|---|---:|---:|---:|"]
        out += [f"| {r.method} | {int(r.cycles)} | {r.mean:.2f} | {int(r.n)} |" for r in cycles.itertuples()]
        out.append("")
        out += comparisons.markdown(verdicts if verdicts is not None else pd.DataFrame(), (ERROR,), CLAIMS_TEXT,
                                    group="M", heading="Comparisons of (c):")
    if missing:
        out += [f"Missing runs ({len(missing)}):", ""] + ["- " + " ".join(f"{k}={v}" for k, v in m.items())
                                                        for m in missing] + [""]
    return "\n".join(out).rstrip() + "\n"


def _figure(mds, lines, cycles, scale, first, path: Path) -> None:
    import matplotlib.pyplot as plt

    from studies.synthetic import plots

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    ax = axes[0]
    for method, group in (mds.groupby("method", sort=False) if len(mds) else []):
        if method == "cSGLD":
            for cycle, part in group.groupby("cycle"):
                ax.scatter(part.x, part.y, s=40, label=f"cSGLD cycle {int(cycle) + 1}")
        else:
            ax.scatter(group.x, group.y, s=40, marker="x", color="black", label=method)
    ax.set_title("(a) MDS of the samples' weights")
    ax.set_xlabel("MDS 1")
    ax.set_ylabel("MDS 2")
    ax = axes[1]
    for (method, pair), group in (lines.groupby(["method", "pair"], sort=False) if len(lines) else []):
        ax.plot(group["lambda"], group.test_error_pct, ls="-" if method == "cSGLD" else "--",
                label=f"{method} {pair}")
    ax.set_title("(b) test error between two samples")
    ax.set_xlabel("lambda (theta = lambda theta_1 + (1 - lambda) theta_2)")
    ax.set_ylabel("test error (%)")
    ax = axes[2]
    for method, group in (cycles.groupby("method", sort=False) if len(cycles) else []):
        ax.errorbar(group.cycles, group["mean"], yerr=group.stderr.fillna(0), marker="o", label=method, capsize=3)
    ax.set_title("(c) ensemble test error against cycles M")
    ax.set_xlabel("number of cycles M")
    ax.set_ylabel("test error (%)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    where = f"{first['data.name']}, {first['model.name']}" if first is not None else ""
    fig.suptitle(f"cSG-MCMC Figure 3 ({'smoke scale, ' if scale == 'smoke' else ''}{where})")
    plots.save_png_pdf(fig, path)
