"""The ICSGLD simulation as a study, ``train.py synthetic=icsgld_sim`` (:func:`validate` its keys, :func:`run`
it), and its report: results/icsgld/simulation.md (the table and every setting beside the paper's and the authors'
notebooks') and its figure; :func:`rewrite` rebuilds the report from the CSVs a run left."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from csg.evaluation.comparison import Unpaired, Verdict, compare_unpaired, interval_text, method_statement, tally
from csg.reporting import markdown_table
from studies.synthetic.icsgld_measures import BINS, LIMIT
from studies.synthetic.icsgld_simulation import Protocol, SimulationResult, run_simulation

FOCUS = "ICSGLD x P5"  # the paper's method: each other method is compared with it
METRICS = {"kl": "final KL (k-NN)", "hist_kl": "histogram KL", "mode_tv": "mode TV"}  # each: lower is better
# equivalence margins, absolute, in each metric's units (nats for the KLs): the smallest change of a sampler's
# distance to the target counted as a difference, the same whichever method is the baseline
MARGINS = {"kl": 0.02, "hist_kl": 0.02, "mode_tv": 0.01}
CONTOUR = ("CSGLD x T5", "ICSGLD x P5")  # the methods whose theta starts from the pilot SGLD run's histogram

# (setting, the paper's Appendix D.2, the authors' notebooks (simulations/ at c3affa9), ours, why ours differs)
SETTINGS = [
    ("target, noise", "U(x) = 0.2 |x|^2 - 2 (cos 2 pi x1 + cos 2 pi x2) (+ the penalty beyond |x|^2 = 20)",
     "same; + 0.25 N(0, I) on gradients and 0.25 N(0, 1) on energies", "same", ""),
    ("budget", "ICSGLD 80,000 iterations of 5 chains; T5 methods 5 times as long", "P5: 80,000; CSGLD: 400,000; "
     "cycSGLD: 200,000", "P5: 80,000; T5: 400,000", "cycSGLD at the paper's equal budget"),
    ("starts", "-", "P5: (0, -1), (0, 0), (-1, 0), (0, 1), (1, 0); cycSGLD (0, 0); CSGLD (2, 2)", "same", ""),
    ("samples", "-", "every 20th iteration after 1000 (P5) or 5000 (T5)", "same", ""),
    ("partitions", "100 of width 0.125", "[min U - 1, max U + 1] on the 500 x 500 grid of [-2.5, 2.5]^2 = [-5, 7.5] "
     "in 100; J = clip(floor + 1, 1, 99) (ICSGLD), min(floor, 98) (CSGLD)", "100 of 0.125 from -5, "
     "J = clip(floor, 0, 99)", "the shift by one relabels theta and changes nothing else"),
    ("multiplier", "1 + zeta T (log theta(J) - log theta(J - 1)) / du", "ICSGLD: that (backward), unclipped; CSGLD: "
     "log theta(J + 1) - log theta(J) (forward), unclipped", "same", ""),
    ("random field", "theta(J) (1{i = J} - theta(i)), averaged over the chains (Eq. 8, 16)", "ICSGLD: that; CSGLD: "
     "theta(J)^zeta (1{i = J} - theta(i)), Deng et al. 2020", "same (`EnergyPartition(field_exponent=...)`)", ""),
    ("theta's start", "\"a proper initialization ... by pre-training the model long enough time through SGLD\"",
     "histogram of the partitions of 750 samples of a 20,000-iteration SGLD pilot from (0, 0), + 1e-4",
     "same, one pilot per repeat", ""),
    ("SA step, zeta, lr, T", "min(3e-3, 1 / (k^0.6 + 100)); 0.75; 3e-3; 1", "same", "same", ""),
    ("domain", "-", "CSGLD and ICSGLD reject a move out of [-2.5, 2.5]^2", "same", ""),
    ("reSGLD", "lr 1e-3 .. 5e-3, T 1 .. 5, correction estimated every 100 iterations, initial correction 30",
     "initial variance 25 (the figure's file is var25); every 100 iterations 10 noisy energies; each step every "
     "neighbouring pair in turn, correction (1/T_j - 1/T_i)^2 hat_var; samples from T = 1", "same", ""),
    ("cycSGLD", "initial lr 1e-2, 10 cycles", "cosine, 10 cycles; samples only while lr < 0.009", "same", ""),
    ("SGLD", "5 chains, lr 3e-3, T 1", "same", "same", ""),
    ("KL", "\"KL divergence\", mean and s.e. over 20 repeats", "k-NN estimate of KL(true || samples) (Perez-Cruz "
     "2008) against a file of true samples, on every prefix of the samples; the ICSGLD notebook resamples by "
     "theta(J)^zeta for its figure", "the same estimator against 50,000 exact draws on [-2.5, 2.5]^2, at 10 points "
     "of the run; the contour samples enter with their weights (the nearest sample's share of the weight replaces "
     "1/m)", "how their true samples were drawn, and how the KL notebook weighted the contour samples, is not in "
     "the repository; resampled copies count as samples without bringing new points, which raises the estimate "
     "(README)"),
    ("repeats", "20", "the notebooks are single runs; the 20-repeat driver is not in the repository",
     "20, vectorised, one seed", ""),
]


def settings(protocol: Protocol) -> list[tuple[str, ...]]:
    """:data:`SETTINGS`, with theta's start as this run made it."""
    if protocol.pilot_steps == Protocol.pilot_steps:
        return SETTINGS
    kept = len(range(protocol.pilot_warm_up + 1, protocol.pilot_steps, protocol.thin))
    start = (f"histogram of the partitions of {kept:,} samples of a {protocol.pilot_steps:,}-iteration SGLD pilot "
             "from (0, 0), + 1e-4, one pilot per repeat")
    why = ("the paper's \"long enough\": with the notebooks' pilot, theta under-fills the lowest partitions (see "
           f"theta TV); the pilot's {protocol.pilot_steps:,} iterations are not counted in the budget, as in the "
           "notebooks: the contour methods spend more gradients than the others (see the top)")
    return [(row[0], row[1], row[2], start, why) if row[0] == "theta's start" else row for row in SETTINGS]


def markdown(result: SimulationResult, study, seed: int, seconds: float, protocol: Protocol | None = None) -> str:
    protocol = protocol or Protocol()
    full = int(study.steps) == 80_000 and int(study.repeats) == 20
    notebook = protocol.pilot_steps == Protocol.pilot_steps
    command = ("`make icsgld-sim`" if notebook else "`python scripts/reproduce.py icsgld-sim --out <dir> "
               f"synthetic.pilot_steps={protocol.pilot_steps}`")
    but = "" if notebook else " but the length of theta's pilot run"
    final = result.final.set_index("method")
    budget, pilot = 5 * int(study.steps), protocol.pilot_steps
    lines = ["# ICSGLD Section 5.2: the 25-mode 2-D landscape" + ("" if full else " (REDUCED SIZE)"), ""]
    if not notebook:
        lines += [f"> **Not an equal budget, not a headline**: this run's {pilot:,}-iteration pilot (the notebooks': "
                  f"{Protocol.pilot_steps:,}) gives the contour methods ({', '.join(CONTOUR)}) {pilot:,} gradient "
                  f"evaluations per repeat beyond the {budget:,} of every method, counted in no curve: its verdicts "
                  f"compare them at {budget + pilot:,} with the others at {budget:,}. It asks whether the notebooks' "
                  "pilot is long enough for theta's start (theta TV below), a question asked after the notebooks' "
                  "setting was inconclusive; the comparison of the methods is the notebooks' setting "
                  "(results/icsgld/simulation.md, `make icsgld-sim`).", ""]
    lines += [
        f"Scale: {'full (the paper: 5 chains x 80,000 steps or 1 chain x 400,000, 20 repeats)' if full else 'reduced'}: "
        f"{budget:,} gradient evaluations per method and repeat, and for the contour methods ({', '.join(CONTOUR)}) "
        f"the {pilot:,} of the pilot SGLD run that starts their theta, not counted in the curves (as in the "
        f"notebooks; the table's last column), {int(study.repeats)} repeats, seed "
        f"{seed}; {seconds:.0f} s on CPU. Command: {command}. Every setting is the authors' notebooks'{but} "
        "(table below). KL: the notebooks' k-nearest-neighbour estimate of KL(p || q) against 50,000 exact draws, "
        "the contour methods' samples weighted by their importance weights; histogram KL: KL(q_hat || p) of the "
        f"weighted samples in {BINS}x{BINS} bins of [-{LIMIT:g}, {LIMIT:g}]^2 against exact bin masses; mode TV: "
        "total variation between the sampled and the true masses of the 25 modes. The paper gives the KL curves as a "
        "figure only (its Figure 6), no numbers: ICSGLD x P5 lowest, then reSGLD x P5, CSGLD x T5 / cycSGLD x T5, "
        "SGLD x P5 highest.", "",
    ]
    lines += markdown_table(
        ["method", "final KL (k-NN), mean +- s.e.", "histogram KL", "mode TV", "modes with >= 20% of their mass",
         "samples per repeat", "gradients per repeat, pilot included"],
        [[m, f"{r.kl:.3f} +- {r.kl_stderr:.3f}", f"{r.hist_kl:.3f} +- {r.hist_kl_stderr:.3f}",
          f"{r.mode_tv:.3f} +- {r.mode_tv_stderr:.3f}", f"{r.modes_visited:.1f}", f"{int(r.samples):,}",
          gradients(m, budget, pilot)] for m, r in final.iterrows()], align="lrrrrrr")
    lines += comparison_lines(result, None if notebook else (budget, pilot)) + repeat_lines(result.repeats)
    lines += ["", "## Settings", ""]
    lines += markdown_table(["setting", "paper (Appendix D.2)", "authors' notebooks", "ours", "why ours differs"],
                            settings(protocol))
    return "\n".join(lines) + "\n"


def comparisons(repeats: pd.DataFrame) -> list[tuple[str, str, Verdict]]:
    """The report's family: :data:`FOCUS` against each other method on each of :data:`METRICS`, over their
    repeats, unpaired (each method draws its repeats from a random stream of its own, so repeat r of two
    methods shares nothing but the exact draws that every KL is measured against): Welch's t, Holm across the
    family, equivalence within the absolute margins of :data:`MARGINS`. Returns (other, metric, verdict);
    difference = FOCUS - other, so ``helps``: FOCUS is lower."""
    if repeats is None or repeats.empty or FOCUS not in set(repeats.method):
        return []
    focus = repeats[repeats.method == FOCUS]
    pairs = [(other, metric) for metric in METRICS for other in dict.fromkeys(repeats.method) if other != FOCUS]
    tests = [Unpaired(focus[metric].to_numpy(), repeats.loc[repeats.method == other, metric].to_numpy(),
                      margin=MARGINS[metric])
             for other, metric in pairs]
    return [(other, metric, verdict) for (other, metric), verdict in zip(pairs, compare_unpaired(tests))]


def gradients(method: str, budget: int, pilot: int) -> str:
    """A method's gradient evaluations per repeat: the budget, plus the pilot run for the contour methods."""
    return f"{budget + pilot:,} ({budget:,} + {pilot:,} pilot)" if method in CONTOUR else f"{budget:,}"


def comparison_lines(result: SimulationResult, unequal: tuple[int, int] | None = None) -> list[str]:
    """Where ICSGLD x P5 stands against each other method, with verdicts (:func:`comparisons`), and the means'
    order on the final KL, marked as no verdict. ``unequal``: (budget, pilot) of a run whose longer pilot gives the
    contour methods more gradients than the others, said in the standing sentence."""
    final = result.final.set_index("method")
    order = ", ".join(f"{m} {v:.3f}" for m, v in final.kl.sort_values().items())
    family = comparisons(result.repeats)
    if not family:
        return ["", f"Final KL, lowest first (means, not a verdict): {order}."]
    repeats = int(result.repeats.groupby("method").size().min())
    kl = [(other, v) for other, metric, v in family if metric == "kl"]
    said = {"helps": "below", "hurts": "above", "equivalent": "level with", "both fail": "failing alike with",
            "inconclusive": "not resolved against"}
    groups = {word: [other for other, v in kl if said[v.verdict] == word] for word in dict.fromkeys(said.values())}
    standing = "; ".join(f"{word} {', '.join(others)}" for word, others in groups.items() if others)
    tested = [v for _, _, v in family if v.n > 1]
    known = [(v.detectable / abs(final.loc[other, metric]), other, metric) for other, metric, v in family
             if math.isfinite(v.detectable) and final.loc[other, metric]]
    budgets = ("" if unequal is None else f" ({FOCUS} and CSGLD x T5 at {sum(unequal):,} gradient evaluations per "
               f"repeat, the others at {unequal[0]:,}: not an equal budget)")
    lines = ["", f"{FOCUS}'s final KL against each other method's (verdicts below){budgets}: {standing}. Final KL, "
             f"lowest first (means, not a verdict): {order}.", "", "## Comparisons", "",
             f"{FOCUS} against each other method on each metric of the table above, over {repeats} repeats each "
             "(csg.evaluation.comparison.compare_unpaired). The repeats are not paired: each method draws them from a "
             "random stream of its own, sharing only the 50,000 exact draws every KL is measured against; lower is "
             "better for all three metrics. "
             + method_statement(margin=f"absolute, in each metric's units: final KL +-{MARGINS['kl']:g} nats, histogram "
                                f"KL +-{MARGINS['hist_kl']:g} nats, mode TV +-{MARGINS['mode_tv']:g}; the smallest "
                                "change of a sampler's distance to the target we would count as a difference, the "
                                "same whichever method is the baseline",
                                pairing=f"Welch's t on the repeats, difference = {FOCUS} - the other"), ""]
    rows = []
    for other, metric, v in family:
        interval = f"{v.difference:+.3f} {interval_text(v.low, v.high, '+.3f')}" if v.n > 1 else f"{v.difference:+.3f}"
        rows.append([other, METRICS[metric], interval, f"+-{v.margin:.3f}", f"{v.detectable:.3f}", v.verdict])
    lines += markdown_table([f"{FOCUS} -", "metric", "difference [simultaneous 95 % interval]", "margin", "detectable",
                             "verdict"], rows, align="llrrrl")
    lines += ["", f"Family: {len(tested)} comparisons, one Holm family: {tally([v for _, _, v in family])}."]
    if known:
        (low, a, m), (high, b, n) = min(known), max(known)
        lines[-1] += (f" The smallest difference each could detect, relative to the other method's mean: from "
                      f"{100 * low:.0f} % ({a}, {METRICS[m]}) to {100 * high:.0f} % ({b}, {METRICS[n]}).")
    return lines


def repeat_lines(repeats: pd.DataFrame) -> list[str]:
    """Each method's spread over repeats, and for the contour methods how the repeats' KL follows the
    concentration of their importance weights (weight ESS share: (sum w)^2 / (n sum w^2)) and the distance of
    their final theta's density of states to the exact one (theta TV)."""
    if repeats is None or repeats.empty:
        return []
    lines = ["", "## Over the repeats", "", "Each repeat's final k-NN KL (simulation_repeats.csv): median, quartiles "
             "and worst; for the contour methods, the effective share of the samples under their importance weights "
             "(1: equal weights) and the total variation between the density of states implied by the final theta "
             "(`EnergyPartition.density_of_states`) and the exact one (`exact_density_of_states`), each with its "
             "median, its worst, and Spearman's correlation with the KL over the repeats.", ""]
    rows = []
    for method, block in repeats.groupby("method", sort=False):
        kl, share = block.kl, block.weight_ess
        row = [method, f"{kl.median():.3f}", f"{kl.quantile(0.25):.3f} .. {kl.quantile(0.75):.3f}", f"{kl.max():.3f}"]
        tv = block.theta_tv
        if share.min() < 1 - 1e-9:
            row += [f"{share.median():.3f} ({share.min():.3f})", f"{kl.corr(share, method='spearman'):+.2f}",
                    f"{tv.median():.3f} ({tv.max():.3f})", f"{kl.corr(tv, method='spearman'):+.2f}"]
        else:
            row += ["1", "-", "-", "-"]
        rows.append(row)
    lines += markdown_table(["method", "KL median", "KL quartiles", "KL worst", "weight ESS share, median (lowest)",
                             "corr(KL, share)", "theta TV, median (worst)", "corr(KL, theta TV)"], rows,
                            align="lrrrrrrr")
    for method, block in repeats[repeats.theta_tv.notna()].groupby("method", sort=False):
        worst = block.nlargest(2, "kl")
        ranks = block.theta_tv.rank(ascending=False)
        lines.append("")
        lines.append(f"{method}'s two worst repeats (KL " + " and ".join(f"{v:.3f}" for v in worst.kl) + ") rank "
                     + " and ".join(f"{int(ranks[i])}" for i in worst.index) + f" of {len(block)} by theta TV "
                     "(1: farthest from the exact density of states).")
    return lines


RUN_COLUMNS = ("seed", "seconds", "pilot_steps")  # simulation.csv's record of the run, beside the table


def rewrite(out: Path) -> Path:
    """``make icsgld-sim-report``: simulation.md again from the CSVs a previous run wrote into ``out`` (its
    seed, time and pilot from simulation.csv's :data:`RUN_COLUMNS`), running nothing. The figure is left as the
    run drew it: its data do not change."""
    from types import SimpleNamespace

    from csg.reporting import write_text
    from csg.errors import ConfigError

    out = Path(out)
    names = ("simulation.csv", "simulation_curve.csv", "simulation_modes.csv", "simulation_repeats.csv")
    missing = [name for name in names if not (out / name).exists()]
    if missing:
        raise ConfigError("--out", str(out), f"a folder of a previous `make icsgld-sim` (no {', '.join(missing)})")
    final, curves, modes, repeats = (pd.read_csv(out / name) for name in names)
    absent = [column for column in RUN_COLUMNS if column not in final]
    if absent:
        raise ConfigError("--out", str(out), f"a simulation.csv that records its run ({', '.join(absent)} missing)")
    run = final.iloc[0]
    study = SimpleNamespace(steps=int(run.gradient_evaluations) // 5, repeats=int(run.repeats))
    result = SimulationResult(final.drop(columns=list(RUN_COLUMNS)), curves, modes, repeats)
    path = out / "simulation.md"
    write_text(path, markdown(result, study, int(run.seed), float(run.seconds),
                                     Protocol(pilot_steps=int(run.pilot_steps))))
    return path


def figure(result: SimulationResult, path: Path) -> None:
    import matplotlib.pyplot as plt

    from studies.synthetic import plots

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method, group in result.curves.groupby("method", sort=False):
        ax.plot(group.gradient_evaluations, group.kl, label=method, lw=2 if "ICSGLD" in method else 1.2, marker=".")
        ax.fill_between(group.gradient_evaluations, group.kl - group.kl_stderr, group.kl + group.kl_stderr, alpha=0.2)
    ax.set_xlabel("gradient evaluations per repeat (5 chains, or one chain 5 times as long)")
    ax.set_ylabel("KL(true || sampled), k-NN estimate")
    ax.set_yscale("log")
    ax.set_title("ICSGLD Figure 6: convergence on the 25-mode landscape")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    plots.save_png_pdf(fig, path)


KEYS = ("name", "output_dir", "steps", "repeats", "checkpoints", "pilot_steps")


def validate(cfg) -> None:
    """Check every key of ``synthetic=icsgld_sim`` (``cfg`` is the run config) before any work; raise ConfigError."""
    from csg.errors import ConfigError
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", KEYS)
    steps = checks.integer(cfg, "synthetic.steps")
    repeats = checks.integer(cfg, "synthetic.repeats")
    checkpoints = checks.integer(cfg, "synthetic.checkpoints")
    pilot_steps = checks.integer(cfg, "synthetic.pilot_steps", optional=f"the notebooks' {Protocol.pilot_steps}")
    protocol = Protocol()
    if steps <= protocol.warm_up_p5 + protocol.thin:
        raise ConfigError("synthetic.steps", steps, f"an integer above {protocol.warm_up_p5 + protocol.thin} "
                          f"(the P5 chains' warm-up, then every {protocol.thin}th iteration is a sample)")
    if checkpoints > steps:
        raise ConfigError("synthetic.checkpoints", checkpoints, f"at most synthetic.steps={steps} (points of the KL "
                          "curve, at least one iteration apart)")
    if pilot_steps is not None and pilot_steps <= protocol.pilot_warm_up + protocol.thin:
        raise ConfigError("synthetic.pilot_steps", pilot_steps,
                          f"an integer above {protocol.pilot_warm_up + protocol.thin} (the pilot's warm-up, then "
                          f"every {protocol.thin}th iteration)")
    # each method's kept points and weights (twice: the k-NN KL joins them), the k-NN trees, the histograms
    checks.fits_in_memory({"synthetic.steps": steps, "synthetic.repeats": repeats},
                          lambda s: 30 * s["synthetic.steps"] * s["synthetic.repeats"] + 30_000 * s["synthetic.repeats"],
                          "the kept samples")


def run(study, output_dir, seed: int) -> dict:
    """``python train.py synthetic=icsgld_sim``: the simulation, its CSVs, Markdown and figure."""
    import time

    from csg.reporting import write_text

    started = time.perf_counter()
    protocol = Protocol(pilot_steps=int(study.get("pilot_steps", Protocol.pilot_steps)))
    result = run_simulation(steps=int(study.steps), repeats=int(study.repeats), checkpoints=int(study.checkpoints),
                            seed=seed, protocol=protocol)
    output_dir = Path(output_dir)
    seconds = time.perf_counter() - started
    # the run's seed, time and pilot go with the table: `icsgld-sim --report-only` rebuilds the report from the CSVs
    final = result.final.assign(seed=seed, seconds=seconds, pilot_steps=protocol.pilot_steps)
    write_text(output_dir / "simulation.csv", final.to_csv(index=False))
    write_text(output_dir / "simulation_curve.csv", result.curves.to_csv(index=False))
    write_text(output_dir / "simulation_modes.csv", result.modes.to_csv(index=False))
    write_text(output_dir / "simulation_repeats.csv", result.repeats.to_csv(index=False))
    write_text(output_dir / "simulation.md", markdown(result, study, seed, seconds, protocol))
    figure(result, output_dir / "simulation.png")
    final = result.final.set_index("method")
    return {"seconds": seconds, "kl": final.kl.to_dict(), "mode_tv": final.mode_tv.to_dict()}
