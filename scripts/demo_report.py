#!/usr/bin/env python
"""The embedded default's numbers, whether its ensemble is a sampling ensemble, and what its noise adds.

    python scripts/demo_report.py RUN_DIR --beside results/demo.csv        # make demo: this run beside the committed
    python scripts/demo_report.py RUN_DIR... --curvature --arms --out results/demo.md --csv results/demo.csv \\
        --restarts-csv results/demo_restarts.csv --long results/demo_long.csv                     # make demo-seeds
    python scripts/demo_report.py --from-csv --csv results/demo.csv --restarts-csv results/demo_restarts.csv \\
        --arms --long results/demo_long.csv --out results/demo.md                          # make demo-seeds-report

For each run: the ensemble's test error and NLL, its best member's NLL, its members' mean error, the two most
alike members (mean total variation of their test-set predictions) and the three checks of a sampling ensemble
(csg.evaluation.diversity.EnsembleGain.checks). With --curvature, the top Hessian eigenvalue of the mean training
loss at the last sample of each cycle, from which the next cycle restarts at lr0 (csg.evaluation.curvature), in
the runs with noise (T > 0: a noise-off control's restarts are not measured).
With --arms, the runs are arms of one budget told apart by (temperature, lr0): the default of
configs/data/mnist5k.yaml and its controls on the same seeds (T = 0: the same cycles without noise, a snapshot
ensemble; T = 1), with paired verdicts of the default against each (csg.evaluation.comparison) on the
ensemble's error and NLL. --from-csv writes the report from the CSVs alone (no run directory is read).
Exit status 1 when a run of the default fails a check; 2, with one line, on bad input.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from csg.errors import ConfigError  # noqa: E402
from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.reporting import markdown_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPE_KEYS = ("lr0", "temperature", "weight_decay", "momentum", "cycles", "explore", "hold_sampling_lr",
               "samples_per_cycle")
RUN_KEYS = ("method", "data", "num_data", "num_test", "model", "device", "epochs")
COLUMNS = ("budget", "seed", "temperature", "lr0", "ensemble_error_pct", "ensemble_nll", "best_member_nll",
           "nll_ratio", "mean_member_error_pct", "min_pairwise_tv", "members", "checks_passed", "threads",
           "train_seconds", "max_lr0_times_lambda",
           *(key for key in (*RUN_KEYS, *RECIPE_KEYS) if key not in ("temperature", "lr0")))
RESTART_COLUMNS = ("budget", "seed", "temperature", "lr0", "sample", "lambda_max", "lr0_times_lambda",
                   "stability_limit", "loss_before", "loss_restart_epoch", "epochs_to_loss_below_0.05")
# Equivalence margins of the verdicts, in the metric's units, fixed before the runs of the arms: 0.3 percentage
# points of test error is 3 of the 1000 test digits; 0.01 nats per test digit of NLL is about 4 % of the
# default's ensemble NLL.
MARGINS = {"ensemble_error_pct": 0.3, "ensemble_nll": 0.01}
METRICS = (("ensemble_error_pct", "ensemble error %", 2), ("ensemble_nll", "ensemble NLL", 4))


def default_arm() -> tuple[float, float]:
    """(temperature, lr0) of the embedded default: the recipe of configs/data/mnist5k.yaml."""
    from omegaconf import OmegaConf

    recipe = OmegaConf.load(ROOT / "configs" / "data" / "mnist5k.yaml").recipe
    return float(recipe.temperature), float(recipe.lr0)


def measure(run_dir: Path, curvature: bool) -> tuple[dict, list[dict]]:
    """One run's row (COLUMNS) and, with ``curvature``, one row per restart; plus ``_checks`` (for beside)."""
    import csg
    from csg.evaluation.diversity import ensemble_gain, member_probabilities

    posterior = csg.Posterior.load(run_dir, device="cpu")
    metrics = posterior.metrics
    gain = ensemble_gain(metrics, member_probabilities(posterior, posterior.data.test), posterior.names)
    checks = gain.checks()
    row = {"budget": _budget(metrics), "seed": metrics["seed"], "ensemble_error_pct": gain.ensemble_error_pct,
           "ensemble_nll": gain.ensemble_nll, "best_member_nll": gain.best_member_nll, "nll_ratio": gain.nll_ratio,
           "mean_member_error_pct": gain.mean_member_error_pct, "min_pairwise_tv": gain.min_pairwise_tv,
           "members": gain.members, "checks_passed": all(checks.values()), "threads": metrics.get("threads", ""),
           "train_seconds": metrics["wall_time_s"]["train"], "_checks": checks,
           **{key: metrics[key] for key in RUN_KEYS},
           **{key: posterior.cfg.sampler.get(key) for key in RECIPE_KEYS}}
    found = restarts(posterior) if curvature and float(row["temperature"]) > 0 else []
    for restart in found:
        restart.update(temperature=row["temperature"], lr0=row["lr0"])
    return row, found


def restarts(posterior) -> list[dict]:
    """lambda_max at the last sample of every cycle but the last: the point the next cycle restarts from."""
    from csg.evaluation.curvature import top_eigenvalue

    cfg = posterior.cfg.sampler
    lr0, momentum = float(cfg.lr0), float(cfg.get("momentum", 0.0) or 0.0)
    limit = 2.0 * (1.0 + momentum) if cfg.get("update_rule") == "sghmc" else 2.0
    last_of_cycle: dict[int, int] = {}
    for index, sample in enumerate(posterior.metrics["samples"]):
        last_of_cycle[int(sample["cycle"])] = index
    wanted = {index for cycle, index in last_of_cycle.items() if cycle < max(last_of_cycle)}
    batches = list(posterior.data.train_eval)
    with open(posterior.run_dir / "epochs.csv", newline="") as handle:
        epochs = list(csv.DictReader(handle))
    losses = {int(row["epoch"]): float(row["train_loss"]) for row in epochs}
    first_of_cycle: dict[int, int] = {}
    for row in epochs:
        first_of_cycle.setdefault(int(row["cycle"]), int(row["epoch"]))
    rows = []
    for index, (name, (model, _)) in enumerate(zip(posterior.names, posterior)):
        if index in wanted:
            eigenvalue = top_eigenvalue(model, batches)
            restart = first_of_cycle[int(posterior.metrics["samples"][index]["cycle"]) + 1]
            recovered = next((e - restart for e in sorted(losses) if e >= restart and losses[e] < 0.05), None)
            rows.append({"seed": posterior.metrics["seed"], "budget": _budget(posterior.metrics),
                         "sample": Path(name).stem, "lambda_max": eigenvalue, "lr0_times_lambda": lr0 * eigenvalue,
                         "stability_limit": limit, "loss_before": losses[restart - 1],
                         "loss_restart_epoch": losses[restart], "epochs_to_loss_below_0.05": recovered})
    return rows


def _budget(metrics: dict) -> str:
    return f"{metrics['epochs']} epochs / {metrics['cycles']} cycles"


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan)


def _arm(row: dict) -> tuple[float, float]:
    return float(row["temperature"]), float(row["lr0"])


def _label(arm: tuple[float, float], default: tuple[float, float]) -> str:
    temperature, lr0 = arm
    what = " (the default)" if arm == default else " (noise off: a snapshot ensemble)" if temperature == 0 else ""
    return f"T = {temperature:g}, lr0 {lr0:g}{what}"


# ---- the CSVs: the live path writes them and reads them back, so that --from-csv writes the same report ----

def table_csv(rows: list[dict], curvature: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        seen = [c["lr0_times_lambda"] for c in curvature
                if (c["seed"], c["budget"], _arm(c)) == (r["seed"], r["budget"], _arm(r))]
        writer.writerow({**r, "max_lr0_times_lambda": max(seen) if seen else ""})
    return buffer.getvalue()


def restarts_csv(curvature: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RESTART_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(curvature)
    return buffer.getvalue()


def read_csv(text: str, columns: tuple[str, ...], key: str) -> list[dict]:
    """The rows of a CSV this script wrote; a ConfigError naming ``key`` if a column is missing."""
    rows = list(csv.DictReader(io.StringIO(text)))
    missing = [c for c in columns if rows and c not in rows[0]]
    if not rows or missing:
        raise ConfigError(key, None, f"a CSV written by scripts/demo_report.py with the columns {', '.join(columns)}"
                          + (f" (missing: {', '.join(missing)})" if missing else " and at least one row"))
    return rows


def check_arms(rows: list[dict], default: tuple[float, float]) -> list[tuple[float, float]]:
    """The arms, the default first; a ConfigError unless they are one budget, the default among them with at
    least one other arm, every arm on the default's seeds."""
    budgets = sorted({r["budget"] for r in rows})
    if len(budgets) != 1:
        raise ConfigError("--arms", budgets, "runs of one budget (epochs / cycles)")
    arms = sorted({_arm(r) for r in rows}, key=lambda a: (a != default, a))
    if default not in arms or len(arms) < 2:
        raise ConfigError("--arms", [_label(a, default) for a in arms],
                          f"runs of the default (T = {default[0]:g}, lr0 {default[1]:g}) and of at least one other "
                          "(temperature, lr0)")
    seeds = {a: sorted(int(r["seed"]) for r in rows if _arm(r) == a) for a in arms}
    for arm in arms:
        if seeds[arm] != seeds[default] or len(set(seeds[arm])) != len(seeds[arm]):
            raise ConfigError("--arms", f"{_label(arm, default)}: seeds {seeds[arm]}",
                              f"each arm once on every seed of the default ({seeds[default]}): the verdicts "
                              "pair by seed")
    return arms


def verdicts(rows: list[dict], arms: list[tuple[float, float]]):
    """[(baseline arm, metric key, Verdict)]: the default (arms[0]) against every other arm on each metric, one
    Holm family."""
    from csg.evaluation.comparison import Paired, compare_paired

    def values(arm, key):
        return [float(r[key]) for r in sorted((r for r in rows if _arm(r) == arm), key=lambda r: int(r["seed"]))]

    pairs = [(arm, key) for arm in arms[1:] for key, _, _ in METRICS]
    found = compare_paired([Paired(values(arms[0], key), values(arm, key), margin=MARGINS[key])
                            for arm, key in pairs])
    return [(arm, key, verdict) for (arm, key), verdict in zip(pairs, found)]


# ---- the report ----

def markdown(rows: list[dict], curvature: list[dict], command: str, title: str, arms: bool = False,
             long_rows: list[dict] | None = None, probes: list[dict] | None = None) -> str:
    """The report from rows as read back from the CSVs (strings)."""
    default = default_arm()
    first = rows[0]
    chosen = check_arms(rows, default) if arms else []
    shown = [r for r in rows if _arm(r) == default] if arms else rows
    budgets = list(dict.fromkeys(r["budget"] for r in rows))
    threads = sorted({str(r["threads"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows})
    sampler = ", ".join(f"{key} {(shown or rows)[0][key]}" for key in RECIPE_KEYS if key != "cycles")
    lines = [
        f"# {title}",
        "",
        f"Scale: full runs of the embedded default (`python train.py`): {first['method']} on {first['data']} "
        f"({first['num_data']} training digits, {first['num_test']} test), model {first['model']}; "
        f"{'; '.join(budgets)}; seeds {_seeds(seeds)}. Command: `{command}`. Sampler: {sampler}"
        + (f"; and the same runs at {', '.join(_label(a, default) for a in chosen[1:])}" if arms else "")
        + f". On {first['device']} ({platform.machine()}, {platform.system()}) with {'/'.join(threads)} torch "
        "thread(s): a CPU run's last digits depend on the thread count. No paper number exists for this setting "
        "(the paper's MNIST runs are not public).",
        "",
    ]
    if arms:
        lines += [cold_posterior(shown[0]), "", members_sentence(shown, long_rows), ""]
    lines += [
        "A sampling ensemble is more than its best member. The checks (csg/evaluation/diversity.py): the "
        "ensemble's NLL at most 0.95 x its best member's, its error at most its members' mean error, and no two "
        "members closer than 0.001 in the mean total variation of their test-set predictions."
        + (" They ask for distinct members, not for noise: a snapshot ensemble whose members differ passes them "
           "too, so whether the noise adds anything is the question of the controls below." if arms else ""),
        "",
    ]
    if arms:
        lines += [f"The default (T = {default[0]:g}, lr0 {default[1]:g}), per seed:", ""]
    lines += [
        "| budget | seed | samples | ensemble error % | ensemble NLL | best member's NLL | ratio | members' mean "
        "error % | closest two members (mean TV) | checks | train seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for budget in budgets:
        block = [r for r in shown if r["budget"] == budget]
        for r in block:
            lines.append(f"| {budget} | {r['seed']} | {r['members']} | {float(r['ensemble_error_pct']):.2f} | "
                         f"{float(r['ensemble_nll']):.4f} | {float(r['best_member_nll']):.4f} | "
                         f"{float(r['nll_ratio']):.3f} | {float(r['mean_member_error_pct']):.2f} | "
                         f"{float(r['min_pairwise_tv']):.4f} | {'pass' if _passed(r) else 'FAIL'} | "
                         f"{float(r['train_seconds']):.0f} |")
        if len(block) > 1:
            lines.append(f"| {budget} | mean +- s.e. | | " + " | ".join(_summary(block)) + " | | |")
    if arms:
        lines += ["", *arms_section(rows, chosen, default, curvature, probes)]
    if curvature:
        arm_column = arms and len({_arm(c) for c in curvature}) > 1
        lines += ["", "Restarts against the curvature: lambda_max of the Hessian of the mean training loss at the "
                  "last sample of each cycle, from which the next cycle restarts at lr0 (power iteration, "
                  "csg/evaluation/curvature.py). Heavy-ball SGD is stable there while lr0 x lambda_max < 2 (1 + "
                  "momentum); beyond it the restart is a catapult: the training loss of the restart's epoch jumps, "
                  "then falls back.", ""]
        lines += markdown_table(
            [*(["arm"] if arm_column else []), "budget", "seed", "restart from", "lambda_max", "lr0 x lambda_max",
             "limit", "loss before", "loss in the restart's epoch", "epochs until loss < 0.05"],
            [[*([_label(_arm(c), default)] if arm_column else []), c["budget"], c["seed"], c["sample"],
              f"{float(c['lambda_max']):.2f}", f"{float(c['lr0_times_lambda']):.2f}",
              f"{float(c['stability_limit']):.1f}", f"{float(c['loss_before']):.4f}",
              f"{float(c['loss_restart_epoch']):.3f}", c["epochs_to_loss_below_0.05"] or "None"] for c in curvature],
            align=("l" if arm_column else "") + "lrlrrrrrr")
    return "\n".join(lines) + "\n"


def step_choice(hot: list[tuple[float, float]], curvature: list[dict], probes: list[dict] | None) -> str:
    """How the T = 1 arm's step was chosen (from the probes' CSV) and whether its restarts stayed stable."""
    text = ""
    if probes:
        probes = sorted(probes, key=lambda p: -float(p["lr0"]))
        tried = ", ".join(f"{float(p['max_lr0_times_lambda']):.2f} at lr0 {float(p['lr0']):g}"
                          for p in probes if p["max_lr0_times_lambda"] != "")
        runs = f"{len(probes)} probe run{'s' if len(probes) != 1 else ''}"
        text = ("Its step was chosen for stability alone, before any T = 1 arm was run, by probe runs on seed 0 "
                "(results/demo_t1_probes.csv): T = 1 at the default's lr0, then at half of it until the largest "
                "lr0 x lambda_max of its restarts stayed below the stability limit 2 (1 + momentum) = 2.2 "
                f"({tried}); {runs} in all, which looked at no test error or NLL. ")
    arm = hot[0]
    peaks = [float(c["lr0_times_lambda"]) for c in curvature if _arm(c) == arm]
    limits = [float(c["stability_limit"]) for c in curvature if _arm(c) == arm]
    text += f"The arm runs at lr0 {arm[1]:g} on every seed, and every run finished (a diverged run leaves no row)"
    if peaks:
        above = sum(p >= limit for p, limit in zip(peaks, limits))
        text += (f"; its {len(peaks)} restarts' lr0 x lambda_max reach {min(peaks):.2f}-{max(peaks):.2f}, "
                 f"{above} of them at or above the limit {max(limits):.1f}")
    return text + "."


def cold_posterior(row: dict) -> str:
    """What the default targets: the tempered posterior, and what T does to the prior (numbers from the row)."""
    n, wd, temperature = int(row["num_data"]), float(row["weight_decay"]), float(row["temperature"])
    precision = n * wd / temperature
    return (f"**The default targets a cold posterior.** Its sampling stages draw from exp(-U(theta) / T) with "
            f"U(theta) = N x mean training loss + (N wd / 2) ||theta||^2 (csg.samplers.SGHMC; N = {n}, wd = {wd:g}) "
            f"at T = {temperature:g}: the tempered posterior p(theta | D)^(1/T), whose likelihood and prior are "
            f"both raised to the power 1/T = {1 / temperature:g}. The prior it samples is therefore a Gaussian of "
            f"precision N wd / T = {precision:g} (standard deviation {precision ** -0.5:.3f} per weight), not the "
            f"N wd = {n * wd:g} (standard deviation {(n * wd) ** -0.5:.3f}) of the untempered (T = 1) posterior "
            "whose prior the weight decay states.")


def members_sentence(shown: list[dict], long_rows: list[dict] | None) -> str:
    """What the members are: not equilibrium draws, from the members' mean error at longer sampling stages."""
    first = shown[0]
    epochs, cycles, explore = int(first["epochs"]), int(first["cycles"]), float(first["explore"])
    stage = epochs / cycles * (1 - explore)
    here = _mean_se([float(r["mean_member_error_pct"]) for r in shown])
    text = (f"**The members are not equilibrium draws.** Each cycle's sampling stage lasts {stage:g} epochs after "
            "the noiseless exploration stage has optimised the net, and the members are taken at its last epochs: "
            f"their mean error is {here[0]:.2f} +- {here[1]:.2f} % here")
    if not long_rows:
        return text + "; at longer sampling stages it has not been measured (make demo-long)."
    longer = []
    for budget in dict.fromkeys(r["budget"] for r in long_rows):
        block = [r for r in long_rows if r["budget"] == budget]
        mean, se = _mean_se([float(r["mean_member_error_pct"]) for r in block])
        longer.append(f"{mean:.2f} +- {se:.2f} % at {budget}")
    return (text + f", but {' and '.join(longer)}, whose sampling stages are longer (results/demo_long.md, "
            f"seeds {_seeds(sorted({int(r['seed']) for r in long_rows}))}). Their error still depends on how long "
            f"the stage lasts, so in {stage:g} epochs the chain has not forgotten its optimised start: the "
            f"{epochs}-epoch members are states of a chain on its way from the trained net towards the tempered "
            "posterior (whose draws, judging by the longer stages, predict worse), not draws from its "
            "equilibrium.")


def arms_section(rows: list[dict], arms: list[tuple[float, float]], default: tuple[float, float],
                 curvature: list[dict], probes: list[dict] | None = None) -> list[str]:
    from csg.evaluation.comparison import interval_text, method_statement, tally

    seeds = sorted({int(r["seed"]) for r in rows})
    hot = [a for a in arms if a[0] == 1.0]
    lines = ["## The noise-off control and T = 1", "",
             f"The same cycles (budget, lr0 schedule, held sampling step, samples kept) on the same seeds "
             f"{_seeds(seeds)}, with only the temperature of the sampling stages (and, where said, lr0) changed. "
             "At T = 0 the sampling stage is heavy-ball SGD at the held step: a snapshot ensemble of the same 12 "
             f"epochs. T = 1 is the untempered posterior (prior precision N wd = "
             f"{int(rows[0]['num_data']) * float(rows[0]['weight_decay']):g})."]
    if hot:
        lines[-1] += " " + step_choice(hot, curvature, probes)
    table = []
    for arm in arms:
        block = [r for r in rows if _arm(r) == arm]
        seconds = statistics.fmean(float(r["train_seconds"]) for r in block)
        table.append([_label(arm, default), len(block), *_summary(block),
                      f"{sum(_passed(r) for r in block)} of {len(block)}", f"{seconds:.0f}"])
    lines += ["", *markdown_table(["arm", "seeds", "ensemble error %", "ensemble NLL", "best member's NLL", "ratio",
                                   "members' mean error %", "closest two members (mean TV)", "checks passed",
                                   "train seconds"], table, align="l" + "r" * 9)]
    for arm in arms:
        block = [r for r in rows if _arm(r) == arm]
        failed = [r for r in block if not _passed(r)]
        if arm != default and failed:
            tv = _mean_se([float(r["min_pairwise_tv"]) for r in block])
            lines += ["", f"{_label(arm, default)} fails the checks on {len(failed)} of {len(block)} seeds: its "
                      f"closest two members are {tv[0]:.4f} +- {tv[1]:.4f} apart in mean TV (at least 0.001 asked), "
                      "and its ensemble NLL is "
                      f"{statistics.fmean(float(r['nll_ratio']) for r in block):.3f} x its best member's."]
    found = verdicts(rows, arms)
    margins = "; ".join(f"{name}: +-{MARGINS[key]:g}" for key, name, _ in METRICS)
    lines += ["", method_statement(margin=f"{margins}, in the metric's units: percentage points of test error, "
                                          "where 0.3 is 3 of the 1000 test digits, and nats per test digit; fixed "
                                          "before these runs"),
              "", f"Method: the default (T = {default[0]:g}, lr0 {default[1]:g}); baseline: each other arm; "
              "difference = "
              "default - baseline, so a negative difference is the default's lower (better) error or NLL.", ""]
    table = []
    for arm, key, v in found:
        name, digits = next((n, d) for k, n, d in METRICS if k == key)
        means = [_mean_se([float(r[key]) for r in rows if _arm(r) == a]) for a in (default, arm)]
        table.append([_label(arm, default), name, *(f"{m:.{digits}f} +- {s:.{digits}f}" for m, s in means),
                      f"{v.difference:+.{digits}f} {interval_text(v.low, v.high, f'+.{digits}f')}",
                      f"{100 * v.confidence:.2f} %", f"{v.detectable:.{digits}f}", f"{v.p_holm:.3g}", v.verdict])
    lines += markdown_table(["baseline", "metric", "default", "baseline", "difference [interval]", "confidence",
                             "detectable", "p (Holm)", "verdict"], table, align="llrrrrrrl")
    lines += ["", f"Family: {len(found)} comparisons, one family: {tally([v for _, _, v in found])}."]
    return lines


SUMMARY = (("ensemble_error_pct", 2), ("ensemble_nll", 4), ("best_member_nll", 4), ("nll_ratio", 3),
           ("mean_member_error_pct", 2), ("min_pairwise_tv", 4))


def _summary(block: list[dict]) -> list[str]:
    cells = []
    for key, digits in SUMMARY:
        mean, se = _mean_se([float(r[key]) for r in block])
        cells.append(f"{mean:.{digits}f} +- {se:.{digits}f}")
    return cells


def _passed(row: dict) -> bool:
    return str(row["checks_passed"]) == "True"


def _seeds(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def beside(row: dict, committed: Path) -> str:
    """This run's numbers beside the committed mean +- s.e. over seeds of the default (results/demo.csv)."""
    lines = [f"this run (seed {row['seed']}, {row['threads']} threads): ensemble {row['ensemble_error_pct']:.2f} % "
             f"error, NLL {row['ensemble_nll']:.4f}; best member's NLL {row['best_member_nll']:.4f} (ratio "
             f"{row['nll_ratio']:.3f}); members' mean error {row['mean_member_error_pct']:.2f} %; closest two members "
             f"{row['min_pairwise_tv']:.4f} apart"]
    if committed.is_file():
        with open(committed, newline="") as handle:
            seeds = list(csv.DictReader(handle))
        if seeds and "temperature" in seeds[0]:
            seeds = [s for s in seeds if _arm(s) == _arm(row)]
        if seeds:
            error = _mean_se([float(s["ensemble_error_pct"]) for s in seeds])
            nll = _mean_se([float(s["ensemble_nll"]) for s in seeds])
            same = [s for s in seeds if s["seed"] == str(row["seed"])]
            lines.append(f"committed ({committed}, seeds {_seeds(sorted(int(s['seed']) for s in seeds))}, "
                         f"{'/'.join(sorted({s['threads'] for s in seeds}))} threads, T = "
                         f"{float(row['temperature']):g}, lr0 {float(row['lr0']):g}): ensemble {error[0]:.2f} +- "
                         f"{error[1]:.2f} % error, NLL {nll[0]:.4f} +- {nll[1]:.4f}"
                         + (f"; its seed {row['seed']}: {float(same[0]['ensemble_error_pct']):.2f} %, NLL "
                            f"{float(same[0]['ensemble_nll']):.4f}" if same else ""))
    lines += [f"  {'pass' if ok else 'FAIL'}: {name}" for name, ok in row["_checks"].items()]
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="*", help="finished run directories of train.py")
    parser.add_argument("--beside", type=Path, help="the committed per-seed CSV to print this run beside")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--csv", type=Path, help="write the per-run CSV here (with --from-csv: read it)")
    parser.add_argument("--restarts-csv", type=Path, help="write the restarts' CSV here (with --from-csv: read it)")
    parser.add_argument("--curvature", action="store_true", help="lambda_max at every restart of the runs with noise (a few seconds each)")
    parser.add_argument("--arms", action="store_true",
                        help="the runs are the default and its controls (other temperature / lr0): verdicts")
    parser.add_argument("--long", type=Path, help="results/demo_long.csv: the members' mean error at long stages")
    parser.add_argument("--probes", type=Path, help="results/demo_t1_probes.csv: the probe runs of T = 1's step")
    parser.add_argument("--from-csv", action="store_true", help="no run directory: the report from --csv alone")
    parser.add_argument("--command", default="make demo-seeds")
    parser.add_argument("--title", default="Embedded default: cSGHMC, MLP, mnist5k")
    args = parser.parse_args(argv)
    if args.from_csv:
        if args.runs:
            raise ConfigError("runs", [str(r) for r in args.runs], "none with --from-csv (the report reads --csv)")
        if args.curvature:
            raise ConfigError("--curvature", True, "not with --from-csv (it needs the runs' samples)")
        if args.csv is None or not args.csv.is_file():
            raise ConfigError("--csv", args.csv and str(args.csv), "an existing per-run CSV with --from-csv")
        if args.restarts_csv is not None and not args.restarts_csv.is_file():
            raise ConfigError("--restarts-csv", str(args.restarts_csv), "an existing restarts CSV with --from-csv")
        if args.out is None:
            raise ConfigError("--out", None, "a Markdown path with --from-csv (there is nothing else to write)")
    elif not args.runs:
        raise ConfigError("runs", None, "one or more run directories of train.py, or --from-csv --csv FILE")
    if args.probes is not None and not args.probes.is_file():
        raise ConfigError("--probes", str(args.probes), "an existing CSV of the T = 1 probe runs "
                          "(results/demo_t1_probes.csv)")
    if args.long is not None and not args.long.is_file():
        raise ConfigError("--long", str(args.long), "an existing CSV of make demo-long (results/demo_long.csv)")
    return args


def report(args: argparse.Namespace) -> int:
    default = default_arm()
    if args.from_csv:
        rows = read_csv(args.csv.read_text(), COLUMNS, "--csv")
        curvature = (read_csv(args.restarts_csv.read_text(), RESTART_COLUMNS, "--restarts-csv")
                     if args.restarts_csv else [])
    else:
        measured = [measure(run, args.curvature) for run in args.runs]
        order = lambda r: (_arm(r) != default, _arm(r), int(r["epochs"]), int(r["seed"]))  # noqa: E731
        live = sorted((row for row, _ in measured), key=order)
        for row in live:
            print(beside(row, args.beside) if args.beside else beside(row, Path("/nonexistent")))
        position = {(r["budget"], r["seed"], _arm(r)): i for i, r in enumerate(live)}
        found = sorted((c for _, restarts_ in measured for c in restarts_),
                       key=lambda c: position[(c["budget"], c["seed"], _arm(c))])
        # the report is written from the CSVs' text, so that --from-csv rewrites it identically
        table, restart_table = table_csv(live, found), restarts_csv(found)
        rows = read_csv(table, COLUMNS, "--csv")
        curvature = read_csv(restart_table, RESTART_COLUMNS, "--restarts-csv") if found else []
        if args.arms:
            check_arms(rows, default)  # before anything is written
        if args.csv:
            atomic_write_text(args.csv, table)
            print(f"wrote {args.csv}")
        if args.restarts_csv:
            atomic_write_text(args.restarts_csv, restart_table)
            print(f"wrote {args.restarts_csv}")
    if args.arms:
        check_arms(rows, default)
    long_rows = read_csv(args.long.read_text(), ("budget", "seed", "mean_member_error_pct"), "--long") \
        if args.long else None
    probes = read_csv(args.probes.read_text(), ("lr0", "seed", "max_lr0_times_lambda"), "--probes") \
        if args.probes else None
    if args.out:
        atomic_write_text(args.out, markdown(rows, curvature, args.command, args.title, args.arms, long_rows,
                                             probes))
        print(f"wrote {args.out}")
    judged = [r for r in rows if _arm(r) == default] if args.arms else rows
    return 0 if all(_passed(r) for r in judged) else 1


def main(argv: list[str] | None = None) -> int:
    from csg.launch.cli import run_or_exit

    return run_or_exit(lambda: report(parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
