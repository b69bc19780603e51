"""Figures of the synthetic studies (matplotlib, written atomically as PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from csg.reporting import atomic_open  # noqa: E402


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    with atomic_open(path) as handle:
        fig.savefig(handle, format=path.suffix.lstrip(".") or "png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def save_png_pdf(fig, path: str | Path) -> Path:
    """Save ``fig`` as ``path`` (.png) and beside it as .pdf (both atomically); returns the PNG's path."""
    path = Path(path).with_suffix(".png")
    for suffix in (".pdf", ".png"):
        with atomic_open(path.with_suffix(suffix)) as handle:
            fig.savefig(handle, format=suffix.lstrip("."), dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def density_panels(panels, path, title: str, limit: float = 6.0, bins: int = 150) -> Path:
    """One row of 2-D densities; each panel is (title, samples (n, 2)) or (title, (xs, ys, density grid))."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.2))
    for ax, (label, data) in zip(np.atleast_1d(axes), panels):
        if isinstance(data, tuple):
            xs, ys, density = (t.numpy() for t in data)
            ax.pcolormesh(xs, ys, density, shading="auto", cmap="viridis")
        else:
            points = data.numpy()
            ax.hist2d(points[:, 0], points[:, 1], bins=bins, range=[[-limit, limit], [-limit, limit]], cmap="viridis")
        ax.set_xlim(-limit, limit)
        ax.set_ylim(-limit, limit)
        ax.set_aspect("equal")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("$x_1$")
    np.atleast_1d(axes)[0].set_ylabel("$x_2$")
    fig.suptitle(title)
    return save(fig, path)


def mixture1d_figure(rows, path) -> Path:
    """Wang et al. Figure 1: estimated vs true density (left), the powered density (right), per c."""
    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 3.2 * len(rows)), squeeze=False)
    grid = torch.linspace(-9, 9, 1200, dtype=torch.float64)
    for (ax_left, ax_right), row in zip(axes, rows):
        target, samples, c, weight = row["target"], row["samples"], row["c"], row["weight"]
        density = torch.exp(-target.energy(grid[:, None]))
        ax_left.hist(samples.numpy(), bins=240, range=(-9, 9), density=True, color="tab:blue", alpha=0.45,
                     label="cyclical MCMC samples")
        ax_left.plot(grid, density, color="black", lw=1, label="true density")
        ax_left.set_title(f"c = {c:g}: weight of N(5, 1) estimated {weight:.3f} (true 0.5)", fontsize=10)
        ax_left.set_xlabel("x")
        ax_left.legend(fontsize=8)
        powered = torch.exp(-0.001 * target.energy(grid[:, None]))
        ax_right.plot(grid, powered / torch.trapezoid(powered, grid), color="tab:red")
        ax_right.set_title(f"c = {c:g}: powered density $\\Pi^{{0.001}}$", fontsize=10)
        ax_right.set_xlabel("x")
    fig.suptitle("Cyclical MCMC on 0.5 N(5, 1) + 0.5 N(-5, c^2) (Wang et al. 2024, Figure 1)")
    fig.tight_layout()
    return save(fig, path)


def mog25_weights_figure(panels, path, title: str) -> Path:
    """Top: the x-marginal of component 25 per setting; bottom: estimated weights of the 25 components."""
    fig, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 7), squeeze=False)
    for column, panel in enumerate(panels):
        top, bottom = axes[0, column], axes[1, column]
        x = panel["marginal_samples"].numpy()
        sd = panel["marginal_sd"]
        grid = np.linspace(4 - 5 * sd, 4 + 5 * sd, 400)
        if len(x):
            top.hist(x, bins=30, density=True, color="tab:blue", alpha=0.45, label=f"estimate ({len(x)} samples)")
        top.plot(grid, np.exp(-0.5 * ((grid - 4) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)), "--", color="tab:blue",
                 label="true")
        top.set_title(f"{panel['label']}: x-marginal of component 25", fontsize=10)
        top.legend(fontsize=8)
        components = np.arange(1, len(panel["weights"]) + 1)
        bottom.bar(components, panel["weights"], color="tab:orange")
        bottom.axhline(1 / len(components), color="black", lw=1, ls="--", label="true weight 1/25")
        bottom.set_xlabel("component i (variance 0.2 or 0.2 / i)")
        bottom.set_ylabel("estimated weight")
        bottom.set_title(f"{panel['label']}: estimated weights", fontsize=10)
        bottom.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)
