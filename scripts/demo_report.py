#!/usr/bin/env python
"""The embedded default's numbers and whether its ensemble is a sampling ensemble.

    python scripts/demo_report.py RUN_DIR --beside results/demo.csv        # make demo: this run beside the committed
    python scripts/demo_report.py RUN_DIR... --curvature --out results/demo.md --csv results/demo.csv   # make demo-seeds

For each run: the ensemble's test error and NLL, its best member's NLL, its members' mean error, the two most
alike members (mean total variation of their test-set predictions) and the three checks of a sampling ensemble
(csg.evaluation.diversity.EnsembleGain.checks). With --curvature, the top Hessian eigenvalue of the mean training
loss at the last sample of each cycle, from which the next cycle restarts at lr0 (csg.evaluation.curvature).
Exit status 1 when a run fails a check.
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

from csg.io.atomic import atomic_write_text  # noqa: E402

RECIPE_KEYS = ("lr0", "temperature", "weight_decay", "momentum", "cycles", "explore", "hold_sampling_lr",
               "samples_per_cycle")
COLUMNS = ("budget", "seed", "ensemble_error_pct", "ensemble_nll", "best_member_nll", "nll_ratio", "mean_member_error_pct",
           "min_pairwise_tv", "members", "checks_passed", "threads", "train_seconds")


def measure(run_dir: Path, curvature: bool) -> tuple[dict, list[dict]]:
    """One run's row (COLUMNS) and, with ``curvature``, one row per restart."""
    import csg
    from csg.evaluation.diversity import ensemble_gain, member_probabilities

    posterior = csg.Posterior.load(run_dir, device="cpu")
    metrics = posterior.metrics
    gain = ensemble_gain(metrics, member_probabilities(posterior, posterior.data.test), posterior.names)
    checks = gain.checks()
    row = {"budget": _budget(metrics), "seed": metrics["seed"], "ensemble_error_pct": gain.ensemble_error_pct, "ensemble_nll": gain.ensemble_nll,
           "best_member_nll": gain.best_member_nll, "nll_ratio": gain.nll_ratio,
           "mean_member_error_pct": gain.mean_member_error_pct, "min_pairwise_tv": gain.min_pairwise_tv,
           "members": gain.members, "checks_passed": all(checks.values()), "threads": metrics.get("threads", ""),
           "train_seconds": metrics["wall_time_s"]["train"], "_checks": checks, "_metrics": metrics,
           "_closest": gain.closest_pair,
           "_sampler": {key: posterior.cfg.sampler.get(key) for key in RECIPE_KEYS}}
    return row, restarts(posterior) if curvature else []


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


def markdown(rows: list[dict], curvature: list[dict], command: str, title: str) -> str:
    metrics = rows[0]["_metrics"]
    sampler = ", ".join(f"{key} {value}" for key, value in rows[0]["_sampler"].items() if key != "cycles")
    budgets = list(dict.fromkeys(r["budget"] for r in rows))
    threads = sorted({str(r["threads"]) for r in rows})
    lines = [
        f"# {title}",
        "",
        f"Scale: full runs of the embedded default (`python train.py`): {metrics['method']} on {metrics['data']} "
        f"({metrics['num_data']} training digits, {metrics['num_test']} test), model {metrics['model']}; "
        f"{'; '.join(budgets)}; seeds {', '.join(sorted({str(r['seed']) for r in rows}))}. Command: `{command}`. "
        f"Sampler: {sampler}. On {metrics['device']} ({platform.machine()}, {platform.system()}) with "
        f"{'/'.join(threads)} torch thread(s): a CPU run's last digits depend on the thread count. No paper number "
        "exists for this setting (the paper's MNIST runs are not public).",
        "",
        "A sampling ensemble is more than its best member. The checks (csg/evaluation/diversity.py): the "
        "ensemble's NLL at most 0.95 x its best member's, its error at most its members' mean error, and no two "
        "members closer than 0.001 in the mean total variation of their test-set predictions.",
        "",
        "| budget | seed | samples | ensemble error % | ensemble NLL | best member's NLL | ratio | members' mean "
        "error % | closest two members (mean TV) | checks | train seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for budget in budgets:
        block = [r for r in rows if r["budget"] == budget]
        for r in block:
            lines.append(f"| {budget} | {r['seed']} | {r['members']} | {r['ensemble_error_pct']:.2f} | "
                         f"{r['ensemble_nll']:.4f} | {r['best_member_nll']:.4f} | {r['nll_ratio']:.3f} | "
                         f"{r['mean_member_error_pct']:.2f} | {r['min_pairwise_tv']:.4f} | "
                         f"{'pass' if r['checks_passed'] else 'FAIL'} | {r['train_seconds']:.0f} |")
        if len(block) > 1:
            cells = []
            for key, digits in SUMMARY:
                mean, se = _mean_se([float(r[key]) for r in block])
                cells.append(f"{mean:.{digits}f} +- {se:.{digits}f}")
            lines.append(f"| {budget} | mean +- s.e. | | " + " | ".join(cells) + " | | |")
    if curvature:
        lines += ["", "Restarts against the curvature: lambda_max of the Hessian of the mean training loss at the "
                  "last sample of each cycle, from which the next cycle restarts at lr0 (power iteration, "
                  "csg/evaluation/curvature.py). Heavy-ball SGD is stable there while lr0 x lambda_max < 2 (1 + "
                  "momentum); beyond it the restart is a catapult: the training loss of the restart's epoch jumps, "
                  "then falls back.", "",
                  "| budget | seed | restart from | lambda_max | lr0 x lambda_max | limit | loss before | loss in "
                  "the restart's epoch | epochs until loss < 0.05 |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {c['budget']} | {c['seed']} | {c['sample']} | {c['lambda_max']:.2f} | "
                  f"{c['lr0_times_lambda']:.2f} | {c['stability_limit']:.1f} | {c['loss_before']:.4f} | "
                  f"{c['loss_restart_epoch']:.3f} | {c['epochs_to_loss_below_0.05']} |" for c in curvature]
    return "\n".join(lines) + "\n"


SUMMARY = (("ensemble_error_pct", 2), ("ensemble_nll", 4), ("best_member_nll", 4), ("nll_ratio", 3),
           ("mean_member_error_pct", 2), ("min_pairwise_tv", 4))


def table_csv(rows: list[dict], curvature: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*COLUMNS, "max_lr0_times_lambda"], extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        seen = [c["lr0_times_lambda"] for c in curvature if (c["seed"], c["budget"]) == (r["seed"], r["budget"])]
        writer.writerow({**r, "max_lr0_times_lambda": max(seen) if seen else ""})
    return buffer.getvalue()


def beside(row: dict, committed: Path) -> str:
    """This run's numbers beside the committed mean +- s.e. over seeds (results/demo.csv)."""
    lines = [f"this run (seed {row['seed']}, {row['threads']} threads): ensemble {row['ensemble_error_pct']:.2f} % "
             f"error, NLL {row['ensemble_nll']:.4f}; best member's NLL {row['best_member_nll']:.4f} (ratio "
             f"{row['nll_ratio']:.3f}); members' mean error {row['mean_member_error_pct']:.2f} %; closest two members "
             f"{row['min_pairwise_tv']:.4f} apart"]
    if committed.is_file():
        with open(committed, newline="") as handle:
            seeds = list(csv.DictReader(handle))
        error = _mean_se([float(s["ensemble_error_pct"]) for s in seeds])
        nll = _mean_se([float(s["ensemble_nll"]) for s in seeds])
        same = [s for s in seeds if s["seed"] == str(row["seed"])]
        lines.append(f"committed ({committed}, seeds {', '.join(s['seed'] for s in seeds)}, "
                     f"{'/'.join(sorted({s['threads'] for s in seeds}))} threads): ensemble {error[0]:.2f} +- "
                     f"{error[1]:.2f} % error, NLL {nll[0]:.4f} +- {nll[1]:.4f}"
                     + (f"; its seed {row['seed']}: {float(same[0]['ensemble_error_pct']):.2f} %, NLL "
                        f"{float(same[0]['ensemble_nll']):.4f}" if same else ""))
    lines += [f"  {'pass' if ok else 'FAIL'}: {name}" for name, ok in row["_checks"].items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished run directories of train.py")
    parser.add_argument("--beside", type=Path, help="the committed per-seed CSV to print this run beside")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--csv", type=Path, help="write the per-seed CSV here")
    parser.add_argument("--curvature", action="store_true", help="lambda_max at every restart (a few seconds each)")
    parser.add_argument("--command", default="make demo-seeds")
    parser.add_argument("--title", default="Embedded default: cSGHMC, MLP, mnist5k")
    args = parser.parse_args()
    measured = [measure(run, args.curvature) for run in args.runs]
    rows = sorted((row for row, _ in measured), key=lambda r: (r["_metrics"]["epochs"], r["seed"]))
    order = {(r["budget"], r["seed"]): i for i, r in enumerate(rows)}
    curvature = sorted((c for _, restarts_ in measured for c in restarts_), key=lambda c: order[(c["budget"], c["seed"])])
    for row in rows:
        print(beside(row, args.beside) if args.beside else beside(row, Path("/nonexistent")))
    if args.out:
        atomic_write_text(args.out, markdown(rows, curvature, args.command, args.title))
        print(f"wrote {args.out}")
    if args.csv:
        atomic_write_text(args.csv, table_csv(rows, curvature))
        print(f"wrote {args.csv}")
    return 0 if all(r["checks_passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
