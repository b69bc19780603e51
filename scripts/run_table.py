#!/usr/bin/env python
"""Write a run's metrics.json as a Markdown table (ensemble against every sample).

    python scripts/run_table.py RUN_DIR OUTPUT.md [--title TEXT]

Used by `make demo` to record the latest measured numbers under results/.
"""

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from csg.atomic import atomic_write_text  # noqa: E402
from csg.evaluation import METRIC_NAMES  # noqa: E402

HEADERS = {"test_error_pct": "test error %", "nll": "NLL", "ece": "ECE (15 bins)", "brier": "Brier"}


def markdown(metrics: dict, title: str, command: str) -> str:
    def cells(values: dict) -> str:
        return " | ".join(f"{values[k]:.2f}" if k == "test_error_pct" else f"{values[k]:.4f}" for k in METRIC_NAMES)

    lines = [
        f"# {title}",
        "",
        f"Scale: full run of the embedded default. Command: `{command}`. Seed {metrics['seed']}; "
        f"{metrics['method']} on {metrics['data']} ({metrics['num_data']} training images), model {metrics['model']}, "
        f"T = {metrics['temperature']:g}, {metrics['epochs']} epochs, {metrics['gradient_evaluations']} gradient "
        f"evaluations; {metrics['wall_time_s']['total']:.0f} s on {metrics['device']} "
        f"({platform.machine()}, {platform.system()}). No paper number exists for this setting "
        "(the paper's MNIST runs are not public).",
        "",
        "| predictor | " + " | ".join(HEADERS[k] for k in METRIC_NAMES) + " |",
        "|---|" + "---:|" * len(METRIC_NAMES),
        f"| **ensemble of {metrics['ensemble']['num_samples']}** ({metrics['cycle_weights']} weights) | "
        + cells(metrics["ensemble"]) + " |",
    ]
    lines += [f"| {Path(s['file']).stem} | {cells(s)} |" for s in metrics["per_sample"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--title", default="Embedded default: cSGHMC, MLP, mnist5k")
    parser.add_argument("--command", default="make demo")
    args = parser.parse_args()
    metrics = json.loads((args.run_dir / "metrics.json").read_text())
    atomic_write_text(args.output, markdown(metrics, args.title, args.command))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
