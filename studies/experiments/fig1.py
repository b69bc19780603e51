"""cSG-MCMC Figure 1: the cyclical step size against the traditional decreasing one.

Both are the schedules the CIFAR-10 runs use (configs/sampler/csgld.yaml and sgld.yaml with the
cifar10 recipe): 200 epochs of 782 iterations, lr0 = 0.5; cyclical with M = 4 cycles (eq. 1),
decreasing polynomially (exponent 0.55) to 0.01; the shaded parts are the sampling stages.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from csg.reporting import write_text
from csg.schedules import create_schedule

EPOCHS, BATCHES = 200, 782  # CIFAR: 50000 / 64 rounded up


def schedules(epochs: int = EPOCHS, batches: int = BATCHES, points: int = 2000) -> pd.DataFrame:
    """The two schedules at ``points`` evenly spaced iterations: columns schedule, iteration, epoch, lr, sampling."""
    total = epochs * batches
    kinds = {
        "cyclical (cSG-MCMC, M = 4, beta = 0.8)": create_schedule("cyclical", lr0=0.5, total_steps=total, cycles=4,
                                                                  explore=0.8),
        "decreasing (SG-MCMC)": create_schedule("decreasing", lr0=0.5, total_steps=total, lr_final=0.01, gamma=0.55,
                                                explore=0.75),
    }
    rows = []
    for name, schedule in kinds.items():
        for k in sorted({round(i * (total - 1) / (points - 1)) for i in range(points)}):
            rows.append({"schedule": name, "iteration": k, "epoch": k / batches, "lr": schedule.lr(k),
                         "sampling": schedule.sampling(k)})
    return pd.DataFrame(rows)


def render(out_dir: str | Path) -> Path:
    """fig1.csv, fig1.png and fig1.pdf in ``out_dir``."""
    import matplotlib.pyplot as plt

    from studies.synthetic import plots

    out_dir = Path(out_dir)
    frame = schedules()
    write_text(out_dir / "fig1.csv", frame.to_csv(index=False))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (name, group), color in zip(frame.groupby("schedule", sort=False), ("tab:red", "tab:blue")):
        ax.plot(group.epoch, group.lr, color=color, lw=1.8, label=name)
        ax.fill_between(group.epoch, 0, group.lr, where=group.sampling, color=color, alpha=0.15, lw=0)
    ax.set_xlabel("epoch (782 iterations each)")
    ax.set_ylabel("step size")
    ax.set_title("cSG-MCMC Figure 1: cyclical and decreasing step sizes (shaded: sampling stage)")
    ax.legend(fontsize=8)
    ax.set_xlim(0, EPOCHS)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    return plots.save_png_pdf(fig, out_dir / "fig1.png")
