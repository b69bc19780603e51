r"""The ICSGLD paper's direct test of its main claim (Deng et al. 2022, Appendix D.5, Figure 7).

At the same budget, many interacting short chains (ICSGLD x P10: 10 chains sharing one :math:`\theta`,
:math:`10^6` iterations) estimate :math:`\theta` with a smaller variance than one long chain (CSGLD x T10:
:math:`10^7` iterations), ICSGLD's Corollary 1: the covariance of the stochastic approximation shrinks by
P. Target :math:`0.4\,N(-6, 1) + 0.6\,N(4, 1)`, :math:`U(x) = -\log \pi(x)`. The settings are those of the
authors' script (``simulations/validation_of_reduced_variance.r`` in their repository):

- SGLD step lr 0.1 at T = 1 on the gradient times the multiplier, the gradient with + 0.03 N(0, 1) noise;
- 100 energy partitions of width :math:`\Delta u = 1` from 0.15, the partition index taken from the exact
  energy; :math:`\zeta = 0.9`; SA step :math:`\omega_k = 1 / (k^{0.6} + 100)`; :math:`\theta` uniform and
  every chain at x = 0 at the start;
- the random field :math:`H_i = \theta(J)(1\{i = J\} - \theta(i))` (ICSGLD Eq. 8), averaged over the P
  chains of a group (Eq. 16), at the partition J of the chain after its move; the next move's multiplier
  :math:`1 + \zeta T (\log\theta(J + 1) - \log\theta(J)) / \Delta u` (``difference="forward"``, the authors'
  script, unclipped) or :math:`1 + \zeta T (\log\theta(J) - \log\theta(J - 1)) / \Delta u` clipped to
  [-5, 5] (``"backward"``: the paper's Eq. and :class:`csg.samplers.contour.EnergyPartition`);
- 10 repeats. :math:`\theta^\zeta` normalised over partitions 1 .. 10 (energies 1.15 .. 11.15; partition
  0 is empty, the lowest energy being 1.43) estimates the density of states: the fixed point of the random
  field has :math:`\theta(i)^\zeta \propto \pi(\{x: U(x) \in \text{partition } i\})`, computed here exactly.

Why a loop of its own instead of :class:`csg.samplers.contour.ContourSGLD`: CSGLD x T10 is :math:`10^7`
sequential steps of 10 one-dimensional chains, and the torch sampler spends about 0.7 ms a step on such
tiny tensors (two hours). This loop takes the same rules (tests/studies/test_synthetic.py checks its multiplier and
:math:`\theta` update against :class:`EnergyPartition`'s) in NumPy, with the noise drawn in blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from csg.reporting import markdown_table

WEIGHTS, MEANS = (0.4, 0.6), (-6.0, 4.0)
LOW, WIDTH, PARTITIONS, SHOWN = 0.15, 1.0, 100, range(1, 11)  # the partitions compared (the authors' 2..11)
LR, TEMPERATURE, ZETA, GRAD_NOISE = 0.1, 1.0, 0.9, 0.03
METHODS = {"ICSGLD x P10": 10, "CSGLD x T10": 1}  # chains sharing theta; the one chain runs 10 times as long
BLOCK = 4096  # steps of noise drawn at once


def energy(x: np.ndarray) -> np.ndarray:
    """U(x) = -log(0.4 N(x; -6, 1) + 0.6 N(x; 4, 1))."""
    logs = [math.log(w) - 0.5 * (x - m) ** 2 for w, m in zip(WEIGHTS, MEANS)]
    return -np.logaddexp(*logs) + 0.5 * math.log(2 * math.pi)


def grad(x: np.ndarray) -> np.ndarray:
    """U'(x): the responsibilities times (x - mean)."""
    a, b = (math.log(w) - 0.5 * (x - m) ** 2 for w, m in zip(WEIGHTS, MEANS))
    first = 1.0 / (1.0 + np.exp(b - a))
    return first * (x - MEANS[0]) + (1.0 - first) * (x - MEANS[1])


def partition_index(u: np.ndarray) -> np.ndarray:
    return np.clip(np.floor((u - LOW) / WIDTH), 0, PARTITIONS - 2).astype(np.int64)


def exact_density_of_states(points: int = 2_000_001, limit: float = 16.0) -> np.ndarray:
    """The mass of each partition under the target (midpoint rule on a fine grid), shape (PARTITIONS,)."""
    x = np.linspace(-limit, limit, points)
    u = energy(x)
    mass = np.exp(-u) * (x[1] - x[0])
    index = np.clip(np.floor((u - LOW) / WIDTH), 0, PARTITIONS - 1).astype(np.int64)
    return np.bincount(index, weights=mass, minlength=PARTITIONS)


def multiplier(theta: np.ndarray, j: np.ndarray, difference: str) -> np.ndarray:
    """The gradient multiplier of each chain (theta: (groups, m), j: (groups, chains))."""
    rows = np.arange(theta.shape[0])[:, None]
    if difference == "forward":
        step = np.log(theta[rows, np.minimum(j + 1, PARTITIONS - 1)]) - np.log(theta[rows, j])
        return 1.0 + ZETA * TEMPERATURE * step / WIDTH
    step = np.log(theta[rows, j]) - np.log(theta[rows, np.maximum(j - 1, 0)])
    return np.clip(1.0 + ZETA * TEMPERATURE * step / WIDTH, -5.0, 5.0)


def update_theta(theta: np.ndarray, j: np.ndarray, omega: float) -> None:
    """theta += omega * mean over each group's chains of theta(J) (1{i = J} - theta(i)), in place."""
    groups, chains = j.shape
    rows = np.arange(groups)[:, None]
    theta_j = theta[rows, j]
    visits = np.bincount((rows * PARTITIONS + j).ravel(), weights=theta_j.ravel(), minlength=groups * PARTITIONS)
    field = visits.reshape(groups, PARTITIONS) - theta * theta_j.sum(1, keepdims=True)
    theta += omega / chains * field
    np.maximum(theta, np.finfo(theta.dtype).tiny, out=theta)


def run_method(chains: int, steps: int, repeats: int, seed: int, difference: str = "forward") -> np.ndarray:
    """theta after ``steps`` iterations of ``chains`` chains sharing it, for each of ``repeats``: (repeats, m)."""
    rng = np.random.default_rng(seed)
    theta = np.full((repeats, PARTITIONS), 1.0 / PARTITIONS)
    x = np.zeros((repeats, chains))
    j = np.zeros((repeats, chains), dtype=np.int64)  # the authors start at the first partition
    scale = math.sqrt(2 * LR * TEMPERATURE)
    for start in range(0, steps, BLOCK):
        count = min(BLOCK, steps - start)
        noise = rng.standard_normal((count, 2, repeats, chains))
        for i in range(count):
            k = start + i + 1
            g = grad(x) + GRAD_NOISE * noise[i, 0]
            x = x - LR * multiplier(theta, j, difference) * g + scale * noise[i, 1]
            j = partition_index(energy(x))
            update_theta(theta, j, 1.0 / (k**0.6 + 100.0))
    return theta


def density_of_states(theta: np.ndarray) -> np.ndarray:
    """theta^zeta normalised over the compared partitions: (repeats, len(SHOWN))."""
    shown = theta[:, list(SHOWN)] ** ZETA
    return shown / shown.sum(1, keepdims=True)


@dataclass
class VarianceResult:
    partitions: pd.DataFrame  # partition, energy range, exact, and per method mean and sd
    summary: pd.DataFrame     # method, total variance, mean absolute error, iterations, chains


def run_variance(steps: int = 1_000_000, repeats: int = 10, seed: int = 0,
                 difference: str = "forward") -> VarianceResult:
    """ICSGLD x P10 (``steps`` iterations) and CSGLD x T10 (10 x ``steps``), ``repeats`` times each."""
    exact = exact_density_of_states()[list(SHOWN)]
    exact = exact / exact.sum()
    rows = {"partition": list(SHOWN), "energy_low": [LOW + i * WIDTH for i in SHOWN],
            "energy_high": [LOW + (i + 1) * WIDTH for i in SHOWN], "exact": exact}
    summary = []
    for number, (method, chains) in enumerate(METHODS.items()):
        length = steps if chains > 1 else 10 * steps
        estimates = density_of_states(run_method(chains, length, repeats, seed * 100 + number, difference))
        mean, sd = estimates.mean(0), estimates.std(0, ddof=1)
        rows[f"{method} mean"], rows[f"{method} sd"] = mean, sd
        summary.append({"method": method, "chains": chains, "iterations": length,
                        "gradient_evaluations": chains * length, "repeats": repeats,
                        "total_variance": float((sd**2).sum()), "mean_abs_error": float(np.abs(mean - exact).mean())})
    return VarianceResult(pd.DataFrame(rows), pd.DataFrame(summary))


KEYS = ("name", "output_dir", "steps", "repeats", "difference")
DIFFERENCES = ("forward", "backward")


def validate(cfg) -> None:
    """Check every key of ``synthetic=icsgld_variance`` (``cfg`` is the run config) before any work."""
    from csg.errors import ConfigError
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", KEYS)
    checks.integer(cfg, "synthetic.steps")
    repeats = checks.integer(cfg, "synthetic.repeats")
    if repeats < 2:
        raise ConfigError("synthetic.repeats", repeats, "an integer >= 2 (a variance over repeats)")
    checks.choice(cfg, "synthetic.difference", DIFFERENCES)
    # a block of noise for 10 chains per repeat, and the exact density of states on its grid
    checks.fits_in_memory({"synthetic.repeats": repeats}, lambda s: BLOCK * 2 * 10 * 8 * 2 * s["synthetic.repeats"],
                          "the noise drawn per block")


def run(study, output_dir, seed: int) -> dict:
    """``python train.py synthetic=icsgld_variance``: the runs, CSVs, Markdown and figure."""
    import time

    from csg.reporting import write_text

    started = time.perf_counter()
    result = run_variance(steps=int(study.steps), repeats=int(study.repeats), seed=seed,
                          difference=str(study.difference))
    seconds = time.perf_counter() - started
    output_dir = Path(output_dir)
    write_text(output_dir / "variance.csv", result.partitions.to_csv(index=False))
    # the run's record beside the summary: `icsgld-variance --report-only` rebuilds the report from the CSVs
    summary = result.summary.assign(seed=seed, seconds=seconds, difference=str(study.difference))
    write_text(output_dir / "variance_summary.csv", summary.to_csv(index=False))
    write_text(output_dir / "variance.md", _markdown(result, study, seed, seconds))
    _figure(result, output_dir / "variance.png")
    summary = result.summary.set_index("method")
    return {"seconds": seconds, "total_variance": summary.total_variance.to_dict(),
            "mean_abs_error": summary.mean_abs_error.to_dict()}


RUN_COLUMNS = ("seed", "seconds", "difference")  # variance_summary.csv's record of the run


def rewrite(out: Path) -> Path:
    """``make icsgld-variance-report``: variance.md again from the CSVs a previous run wrote into ``out``
    (variance.csv, and variance_summary.csv with its :data:`RUN_COLUMNS`), running nothing; the figure is left
    as the run drew it."""
    from types import SimpleNamespace

    from csg.reporting import write_text
    from csg.errors import ConfigError

    out = Path(out)
    missing = [name for name in ("variance.csv", "variance_summary.csv") if not (out / name).exists()]
    if missing:
        raise ConfigError("--out", str(out), f"a folder of a previous `make icsgld-variance` (no {', '.join(missing)})")
    partitions, summary = pd.read_csv(out / "variance.csv"), pd.read_csv(out / "variance_summary.csv")
    absent = [column for column in RUN_COLUMNS if column not in summary]
    if absent:
        raise ConfigError("--out", str(out), f"a variance_summary.csv that records its run ({', '.join(absent)} "
                          "missing)")
    run = summary.iloc[0]
    icsgld = summary.set_index("method").loc["ICSGLD x P10"]
    study = SimpleNamespace(steps=int(icsgld.iterations), repeats=int(icsgld.repeats), difference=str(run.difference))
    result = VarianceResult(partitions, summary.drop(columns=list(RUN_COLUMNS)))
    path = out / "variance.md"
    write_text(path, _markdown(result, study, int(run.seed), float(run.seconds)))
    return path


def _markdown(result: VarianceResult, study, seed: int, seconds: float) -> str:
    from csg.evaluation.comparison import interval_text

    full = int(study.steps) == 1_000_000 and int(study.repeats) == 10
    summary = result.summary.set_index("method")
    icsgld, csgld = summary.loc["ICSGLD x P10"], summary.loc["CSGLD x T10"]
    ratio = csgld.total_variance / icsgld.total_variance
    lines = [
        "# ICSGLD Appendix D.5: variance of theta, many interacting short chains against one long chain"
        + ("" if full else " (REDUCED SIZE)"), "",
        f"Scale: {'full (the paper: 10 chains x 10^6 iterations against 1 chain x 10^7, 10 repeats)' if full else 'reduced'}: "
        f"{int(icsgld.gradient_evaluations):,} gradient evaluations per method and repeat, {int(study.repeats)} repeats, "
        f"seed {seed}; multiplier difference `{study.difference}`; {seconds:.0f} s on CPU. Command: "
        + ("`make icsgld-variance`" if study.difference == "forward"
           else f"`python train.py synthetic=icsgld_variance synthetic.difference={study.difference}`")
        + ". Target 0.4 N(-6, 1) + 0.6 N(4, 1); lr 0.1, T = 1, zeta = 0.9, 100 partitions of "
        "width 1 from 0.15, SA step 1 / (k^0.6 + 100), the authors' script's settings "
        "(studies/synthetic/icsgld_variance.py). The density-of-states estimate is theta^zeta normalised over "
        "partitions 1-10; exact: the target's mass in each partition. The paper shows this as a figure only "
        "(Figure 7): ICSGLD x P10's band visibly narrower than CSGLD x T10's.", "",
    ]
    lines += markdown_table(["method", "sum over partitions of the variance over repeats",
                             "mean abs. error of the mean estimate"],
                            [[m, f"{r.total_variance:.3g}", f"{r.mean_abs_error:.4f}"] for m, r in summary.iterrows()],
                            align="lrr")
    table = result.partitions
    if _collapsed(table):
        verdicts = []
        lines += ["", "No verdicts: " + _equilibrium(table)]
    else:
        verdicts = partition_verdicts(table, int(study.repeats))
        lines += ["", f"The summed variance of CSGLD x T10 is {ratio:.2f} times ICSGLD x P10's (a ratio of sums, not "
                  "tested: the partitions' estimates are normalised together, so they are not independent). "
                  + verdict_sentence(verdicts, int(study.repeats)), "", _equilibrium(table)]
    columns = ["partition", "energy", "exact", "ICSGLD x P10 mean +- 2 sd", "CSGLD x T10 mean +- 2 sd"]
    align = "rlrrr"
    if verdicts:
        columns += ["variance ratio ICSGLD / CSGLD [simultaneous 95 % interval]", "detectable ratio", "verdict"]
        align += "rrl"
    rows = []
    for index, (_, r) in enumerate(table.iterrows()):
        row = [int(r.partition), f"{r.energy_low:.2f} - {r.energy_high:.2f}", f"{r.exact:.3g}",
               f"{r['ICSGLD x P10 mean']:.3g} +- {2 * r['ICSGLD x P10 sd']:.2g}",
               f"{r['CSGLD x T10 mean']:.3g} +- {2 * r['CSGLD x T10 sd']:.2g}"]
        if verdicts:
            v = verdicts[index]
            row += [f"{math.exp(v.difference):.3g} {interval_text(v.low, v.high, '.3g', math.exp)}",
                    f"{math.exp(-v.detectable):.2g} or {math.exp(v.detectable):.2g}", v.verdict]
        rows.append(row)
    lines += ["", *markdown_table(columns, rows, align=align)]
    return "\n".join(lines) + "\n"


def partition_verdicts(table: pd.DataFrame, repeats: int) -> list:
    """Per partition, ICSGLD x P10's variance over the repeats against CSGLD x T10's: the F-test of
    :func:`csg.evaluation.comparison.compare_variances`, one Holm family across the partitions;
    ``helps``: ICSGLD x P10's variance is the smaller. The two methods' repeats are independent (each its own
    seed); the test takes each method's estimates over its repeats as normal."""
    from csg.evaluation.comparison import VarianceRatio, compare_variances

    return compare_variances([VarianceRatio(r["ICSGLD x P10 sd"], repeats, r["CSGLD x T10 sd"], repeats)
                              for _, r in table.iterrows()])


def verdict_sentence(verdicts: list, repeats: int) -> str:
    """What the per-partition verdicts say, with the family, the method and the smallest detectable ratio."""
    from csg.evaluation.comparison import tally

    by = {name: [str(i + 1) for i, v in enumerate(verdicts) if v.verdict == name] for name in
          ("helps", "hurts", "inconclusive")}
    said = {"helps": "ICSGLD x P10's variance is the smaller", "hurts": "CSGLD x T10's variance is the smaller",
            "inconclusive": "inconclusive"}
    parts = [f"{said[name]} in {len(found)} of {len(verdicts)} partitions ({', '.join(found)})"
             for name, found in by.items() if found]
    detectable = [math.exp(v.detectable) for v in verdicts if math.isfinite(v.detectable)]
    return (f"Per partition (verdicts: the F-test of the two variances over {repeats} independent repeats each, "
            "on the log ratio, one directional Holm family across the "
            f"{len(verdicts)} partitions with simultaneous 95 % intervals compatible with it, an interval ending at "
            "ratio 1 where its partition is rejected; csg.evaluation.comparison.compare_variances): " + "; ".join(parts)
            + f"; in all, {tally(verdicts)}. No equivalence margin: with {repeats} repeats per method the test finds a "
            f"variance ratio only beyond {min(detectable):.2g} (80 % power, either way) at the family's level"
            " ('detectable': below 1 / it or above it). The F-test takes each method's estimates over its repeats "
            f"as normal, which it is sensitive to and {repeats} repeats cannot check.")


def _collapsed(table: pd.DataFrame) -> bool:
    return max(table[f"{method} mean"].iloc[0] for method in METHODS) > 0.99


def _equilibrium(table: pd.DataFrame) -> str:
    """Where the mean estimates sit: near the density of states, or collapsed onto the lowest visited partition."""
    first = max(table[f"{method} mean"].iloc[0] for method in METHODS)
    if first > 0.99:
        return (f"theta collapsed onto partition 1 (theta^zeta {first:.3f} against the exact {table.exact.iloc[0]:.3f}): "
                "partition 0 is never visited, theta(0) vanishes, and the backward difference at J = 1 drives the "
                "multiplier to its clip in every step there; the variances left are of numbers at the floating-point "
                "floor.")
    errors = {method: (table[f"{method} mean"] - table.exact).abs().mean() for method in METHODS}
    return ("Both means sit off the exact values (the authors' 'biased equilibrium'), by a mean absolute error of "
            + " and ".join(f"{e:.4f} ({m})" for m, e in errors.items())
            + "; this report does not test whether those differ.")


def _figure(result: VarianceResult, path: Path) -> None:
    """Left: the estimates (mean +- 2 sd) and the exact density of states; right: the sd of each method."""
    import matplotlib.pyplot as plt

    from studies.synthetic import plots

    table = result.partitions
    centre = (table.energy_low + table.energy_high) / 2
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    for method, colour in zip(METHODS, ("#7570B3", "#E7298A")):
        mean, sd = table[f"{method} mean"], table[f"{method} sd"]
        left.plot(centre, mean, color=colour, label=method)
        left.fill_between(centre, (mean - 2 * sd).clip(lower=1e-12), mean + 2 * sd, color=colour, alpha=0.3)
        right.plot(centre, sd, color=colour, marker="o", label=method)
    left.plot(centre, table.exact, color="black", lw=1.5, ls="--", label="exact")
    left.set_yscale("log")
    left.set_ylabel("density of states (theta^zeta, normalised)")
    left.set_title("ICSGLD Figure 7: mean +- 2 sd over repeats")
    right.set_yscale("log")
    right.set_ylabel("sd over repeats")
    right.set_title("spread of the estimate")
    for ax in (left, right):
        ax.set_xlabel("energy")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    plots.save_png_pdf(fig, path)
