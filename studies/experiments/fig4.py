"""cSG-MCMC Figure 4: empirical CDF of the predictive entropy on an out-of-distribution set."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from csg.reporting import markdown_table, write_text
from studies.experiments import comparisons
from studies.experiments.aggregate import read_metrics, refuse_runs, runs_to_report
from studies.experiments.comparisons import Claim
from studies.experiments.sweeps import Metric, SweepPlan

METHODS = {"sgd": "SGD", "sgdm": "SGDM", "snapshot_sgdm": "Snapshot", "sgld": "SGLD", "sghmc": "SGHMC",
           "csgld": "cSGLD", "csghmc": "cSGHMC"}
# full: MLP on MNIST against notMNIST on disk; smoke: the shipped digits against letters drawn from fonts
SWEEPS = SweepPlan(
    presets={"full": "fig4", "smoke": "fig4_smoke"},
    seeds={"full": "0", "smoke": "0"},
    sweeps=((f"sampler={','.join(METHODS)}", "seed={seeds}"),),
)

ENTROPY = Metric("ood_entropy_mean", "mean entropy on OOD (nats)", lambda r: r["ood_entropy_mean"], digits=3,
                 lower_is_better=False, margin=0.05,
                 margin_note="0.05 nats, about 2 % of the largest entropy (ln 10 = 2.303)")
CLAIMS = tuple(Claim(method, baseline, (ENTROPY.paper_name,)) for method, baseline in (
    ("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"), ("cSGLD", "Snapshot"), ("cSGHMC", "Snapshot"), ("SGLD", "SGD"),
    ("SGHMC", "SGDM")))
CLAIMS_TEXT = ("The paper's claims (Section 5.3, Figure 4): \"the uncertainty estimates from cSGHMC and cSGLD are better "
               "than the other methods\", \"Snapshot achieves less entropy than cSG-MCMC\", and \"the traditional "
               "SG-MCMC methods also provide better uncertainty estimation compared to their optimization "
               "counterparts\": cSGLD against SGLD and Snapshot, cSGHMC against SGHMC and Snapshot, SGLD against SGD, "
               "SGHMC against SGDM, in mean entropy on the OOD set (higher: less sure of the letters; the paper shows "
               "curves, and a summary of them is our choice). Per run: `fig4_runs.csv`; the comparisons: "
               "`fig4_comparisons.csv`.")


def report(runs_dir: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """fig4.csv (method, entropy, ecdf), fig4.md (summary) and fig4.png from the runs under ``runs_dir``.

    A folder that does not exist, or holds no finished run of the figure's methods with OOD metrics, is a
    :class:`~csg.errors.ConfigError` (``--runs``) and nothing is written."""
    from studies.synthetic import plots

    runs = runs_to_report(runs_dir, "fig4")
    done = runs[(runs.status == "done") & runs["sampler.name"].isin(METHODS)] if "sampler.name" in runs else runs[:0]
    curves, summary = [], []
    for row in done.itertuples():
        metrics = read_metrics(row.run_dir)
        ood = metrics.get("ood")
        if ood is None:
            continue
        label = METHODS.get(metrics.get("method"))
        if label is None:
            continue
        for h, f in zip(ood["entropy_grid"], ood["ensemble"]["entropy_ecdf"]):
            curves.append({"method": label, "seed": metrics["seed"], "entropy": h, "ecdf": f})
        summary.append({
            "method": label, "seed": metrics["seed"], "data": metrics["data"], "ood": ood["name"],
            "samples": metrics["ensemble"]["num_samples"], "test_error_pct": metrics["ensemble"]["test_error_pct"],
            "ood_entropy_mean": ood["ensemble"]["entropy_mean"], "ood_auroc": ood["ensemble"]["auroc"],
            "epochs": metrics["epochs"], "source": ood["source"],
        })
    if not summary:
        finished = int((runs.status == "done").sum())
        raise refuse_runs(runs_dir, "fig4", f"none of its {finished} finished runs is of {', '.join(METHODS)} with an "
                          "out-of-distribution set (ood=...)")
    order = list(METHODS.values())
    curves = pd.DataFrame(curves)
    summary = pd.DataFrame(summary).sort_values("method", key=lambda c: c.map(order.index))
    missing = sorted(set(METHODS.values()) - set(summary.method))
    out_dir = Path(out_dir)
    verdicts = comparisons.compare(summary, CLAIMS, (ENTROPY,))
    text = _markdown(summary, missing, runs_dir, verdicts)
    write_text(out_dir / "fig4.csv", curves.to_csv(index=False))
    write_text(out_dir / "fig4_runs.csv", summary.to_csv(index=False))
    write_text(out_dir / "fig4_comparisons.csv", verdicts.to_csv(index=False))
    write_text(out_dir / "fig4.md", text)
    _figure(curves, summary, out_dir / "fig4.png", plots)
    return summary


def _markdown(summary: pd.DataFrame, missing: list[str], runs_dir, verdicts: pd.DataFrame | None = None) -> str:
    data, epochs = summary.data.iloc[0], summary.epochs.iloc[0]
    smoke = data != "mnist"
    lines = [
        "# cSG-MCMC Figure 4: predictive entropy on out-of-distribution letters" + (" (SMOKE SCALE)" if smoke else ""),
        "",
        f"Scale: {'smoke' if smoke else 'full'}: MLP 784-200-200-200-10 trained on {data} for {epochs} epochs, "
        f"each method's own schedule and samples; out-of-distribution set: {summary.ood.iloc[0]} "
        f"({summary.source.iloc[0]}); seeds {sorted(set(summary.seed))}; runs in `{runs_dir}`. "
        f"Command: `make fig4{' SCALE=smoke' if smoke else ''}`. The paper shows only the curves (no numbers): a "
        "curve lower at small entropies means fewer confident predictions on letters.",
        "",
    ]
    lines += markdown_table(["method", "samples", "test error % (in distribution)",
                             "mean entropy on OOD (nats; max ln 10 = 2.303)", "AUROC of entropy"],
                            [[r.method, r.samples, f"{r.test_error_pct:.2f}", f"{r.ood_entropy_mean:.3f}",
                              f"{r.ood_auroc:.3f}"] for r in summary.itertuples()], align="lrrrr")
    ranking = summary.groupby("method", sort=False).ood_entropy_mean.mean().sort_values(ascending=False).index.tolist()
    seeds = sorted(set(summary.seed))
    lines += [
        "",
        f"Ranked by mean entropy on the OOD set{', mean over seeds' if len(seeds) > 1 else ''}, most uncertain first"
        f"{' (' + comparisons.ONE_SEED + ')' if len(seeds) == 1 else ''}: {', '.join(ranking)}. The paper's curves put "
        "cSGLD and cSGHMC lowest at small entropies (most uncertain), then SGLD and SGHMC, then Snapshot, then "
        "SGD and SGDM. Read the ranking together with the test error: a sampler that fits the digits worse is "
        "also less sure of the letters.",
        "",
    ]
    if verdicts is not None:
        lines += comparisons.markdown(verdicts, (ENTROPY,), CLAIMS_TEXT)
    lines = lines[:-1] if lines[-1] == "" else lines
    if missing:
        lines += ["", "Missing runs: " + ", ".join(missing)]
    return "\n".join(lines) + "\n"


def _figure(curves: pd.DataFrame, summary: pd.DataFrame, path: Path, plots) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, group in curves.groupby("method", sort=False):
        mean = group.groupby("entropy").ecdf.mean()
        ax.plot(mean.index, mean.values, label=method, lw=2 if method.startswith("c") else 1.2,
                ls="-" if method.startswith("c") else "--")
    ax.set_xlabel("entropy of the predictive distribution (nats)")
    ax.set_ylabel("empirical CDF on out-of-distribution letters")
    scale = "smoke scale, " if summary.data.iloc[0] != "mnist" else ""
    ax.set_title(f"cSG-MCMC Figure 4 ({scale}MLP trained on {summary.data.iloc[0]})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    plots.save_png_pdf(fig, path)
