"""The part-sampling study's table: error, NLL, ECE, mutual information, time and disk per method, mean +- s.e.
over seeds, and the verdicts of each sampled part against the SGD model and against the whole network sampled
(:func:`csg.evaluation.comparison.compare_paired`, paired by seed, Holm-corrected across the report)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import Paired, compare_paired, mean_se
from csg.io.atomic import atomic_write_text
from csg.studies.part.study import CYCLES, EPOCHS, METHODS

__all__ = ["LABELS", "collect", "report"]

LABELS = {"sgd": "SGD (the pretrained model)", "last_layer": "cSGHMC last layer, rest frozen",
          "adapters": "cSGHMC low-rank adapters (rank 4), rest frozen", "full": "cSGHMC whole network, from scratch"}
METRICS = (("test_error_pct", "error %", 2), ("nll", "NLL", 4), ("ece", "ECE", 4),
           ("mutual_information", "MI (nats)", 4))
CLAIMS = (("last_layer", "sgd"), ("adapters", "sgd"), ("last_layer", "full"), ("adapters", "full"))


def _disk_bytes(run: Path) -> int:
    return sum(path.stat().st_size for path in (run / "samples").rglob("*.pt"))


def collect(runs: dict[tuple[str, int], Path]) -> pd.DataFrame:
    """One row per run: method, seed, the ensemble's metrics, members, training seconds and sample bytes."""
    rows = []
    for (method, seed), run in sorted(runs.items(), key=lambda item: (METHODS.index(item[0][0]), item[0][1])):
        metrics = json.loads((run / "metrics.json").read_text())
        ensemble = metrics["ensemble"]
        rows.append({"method": method, "seed": seed, **{key: ensemble.get(key, math.nan) for key, _, _ in METRICS},
                     "members": ensemble["num_samples"], "train_s": metrics["wall_time_s"]["train"],
                     "sample_bytes": _disk_bytes(run), "epochs": metrics["epochs"]})
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame, out: Path, scale: str, command: str) -> Path:
    """Write ``<out>/part_sampling.{csv,md}`` from :func:`collect`'s frame."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "part_sampling.csv", frame.to_csv(index=False))
    seeds = sorted(frame.seed.unique())
    lines = ["# Sampling part of a pretrained network: the last layer or low-rank adapters", "",
             f"Scale: {scale} ({'the study' if scale == 'full' else 'short budgets, a look at the pipeline'}); seeds {', '.join(map(str, seeds))}; command `{command}`. The MLP of the embedded default "
             "on the shipped MNIST digits (mnist5k: 4000 training, 1000 test). SGD trains it "
             f"({EPOCHS[scale]['sgd']} epochs, the `sgd` preset); cSGHMC then samples its last layer or rank-4 adapters "
             f"of every layer ({EPOCHS[scale]['last_layer']} epochs, {CYCLES[scale]} cycles), the rest frozen at the SGD "
             f"weights, against cSGHMC on the whole network from scratch ({EPOCHS[scale]['full']} epochs). The "
             "sampled part's posterior is conditional on the frozen rest (docs/part.md). No paper reports this "
             "setting: no paper number exists.", "",
             "| method | error % | NLL | ECE | MI (nats) | members | train s | bytes of samples |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for method in METHODS:
        block = frame[frame.method == method]
        if block.empty:
            continue
        cells = [mean_se(block[key], digits) for key, _, digits in METRICS]
        lines.append(f"| {LABELS[method]} | {' | '.join(cells)} | {int(block.members.iloc[0])} | "
                     f"{block.train_s.mean():.1f} | {int(block.sample_bytes.mean()):,} |")
    lines += ["", "Mean +- standard error over the seeds. MI: the mean mutual information between the label and the "
              "parameters on the test set (the members' disagreement; 0 for one model). Bytes: the run's sample "
              "files (a part run: its samples and the frozen rest once).", "", *_reading(frame), *_verdicts(frame)]
    atomic_write_text(out / "part_sampling.md", "\n".join(lines) + "\n")
    return out / "part_sampling.md"


def _reading(frame: pd.DataFrame) -> list[str]:
    """What the table says, in numbers taken from it: each part against the whole network sampled."""
    means = frame.groupby("method")[["mutual_information", "train_s", "sample_bytes"]].mean()
    if "full" not in means.index:
        return []
    full = means.loc["full"]
    lines = ["Reading (means over the seeds; the claims themselves are the verdicts below):", ""]
    for method in ("last_layer", "adapters"):
        if method in means.index:
            part = means.loc[method]
            lines.append(f"- {LABELS[method]}: its members disagree {part.mutual_information / full.mutual_information:.3f}x "
                         f"as much as the whole network's (MI), in {part.train_s / full.train_s:.2f}x its training "
                         f"time and {part.sample_bytes / full.sample_bytes:.3f}x its sample bytes.")
    return lines + [""]


def _verdicts(frame: pd.DataFrame) -> list[str]:
    """Each claim on error and NLL, paired by seed, Holm-corrected across the report; no equivalence margin."""
    family, names = [], []
    for method, baseline in CLAIMS:
        a = frame[frame.method == method].set_index("seed")
        b = frame[frame.method == baseline].set_index("seed")
        common = sorted(set(a.index) & set(b.index))
        if not common:
            continue
        for key, label in (("test_error_pct", "error %"), ("nll", "NLL")):
            family.append(Paired(a.loc[common, key].tolist(), b.loc[common, key].tolist()))
            names.append(f"{LABELS[method]} against {LABELS[baseline]}, {label}")
    if not family:
        return []
    lines = ["Verdicts (differences method - baseline, paired by seed, 95 % intervals Holm-corrected across the "
             f"{len(family)} comparisons; no equivalence margin is stated, so none can be \"equivalent\"):", ""]
    for name, verdict in zip(names, compare_paired(family)):
        detectable = "" if math.isnan(verdict.detectable) else f"; smallest detectable {verdict.detectable:.3g}"
        lines.append(f"- {name}: {verdict.describe()}{detectable}")
    return lines
