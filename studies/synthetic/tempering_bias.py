"""Wang, Dai & Atchade (AISTATS 2024): cyclical MCMC mis-weights unequal-variance modes.

Two studies:

- ``mixture1d`` (their Figure 1): cyclical random-walk Metropolis on
  0.5 N(5, 1) + 0.5 N(-5, c^2), c in {1, 0.1}; the weight of N(5, 1) is the
  fraction of end-of-cycle samples closest to it.
- ``mog25`` (their Figure 2): the 25-component grid with equal (0.2) or
  unequal (0.2 / i) variances; estimated weights of all components and the
  x-marginal of component 25. The same targets are also sampled with cSGLD
  (cyclical step size, noise always on, one sample at the end of each cycle),
  which the papers do not report.

The K cycles of the paper's single chain are split over ``chains`` independent
chains of K / chains cycles each, all in one tensor. At mid-cycle beta is
0.001 and the chain forgets where the cycle began, so the split changes
nothing but the wall time.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig

from csg.reporting import markdown_table, write_text
from csg.errors import ConfigError
from studies.paper import paper_value
from csg.schedules import Cyclical
from studies.synthetic.chains import ChainGroup, run_chains
from studies.synthetic.coverage import component_weights
from studies.synthetic.cyclical_mcmc import cyclical_rwm
from studies.targets import create_target

log = logging.getLogger(__name__)


MIXTURE1D_KEYS = ("name", "output_dir", "cs", "cycle_length", "cycles", "chains", "repeats", "proposal_variance", "r",
                  "floor")
MOG25_KEYS = ("name", "output_dir", "start", "rwm", "csgld")
RWM_KEYS = ("cycle_length", "cycles", "chains", "proposal_scale", "r", "floor")
CSGLD_KEYS = ("lr0", "cycles", "cycle_length", "chains")
PAPER_CS = (1.0, 0.1)  # the c of Wang et al.'s Figure 1: the table compares each weight with the paper's


def _validate_tempering(cfg: DictConfig, key: str) -> None:
    """beta(t) = max((1 + cos(2 pi t^r)) / 2, floor): r > 0, and a floor in (0, 1] (the proposal divides by beta)."""
    from studies.synthetic import checks

    checks.finite(cfg, f"{key}.r", minimum=0, strict=True)
    checks.finite(cfg, f"{key}.floor", minimum=0, strict=True, maximum=1)


def _validate_split(cfg: DictConfig, key: str) -> tuple[int, int]:
    from studies.synthetic import checks

    cycles, chains = checks.integer(cfg, f"{key}.cycles"), checks.integer(cfg, f"{key}.chains")
    if cycles % chains:
        raise ConfigError(f"{key}.cycles", cycles, f"a multiple of {key}.chains={chains} (the cycles are split evenly "
                          "over the chains)")
    return cycles, chains


def validate_mixture1d(cfg: DictConfig) -> None:
    """Check every key of ``synthetic=wang_mixture1d`` (``cfg`` is the run config) before any work."""
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", MIXTURE1D_KEYS)
    checks.number_list(cfg, "synthetic.cs", choices=PAPER_CS)
    length = checks.integer(cfg, "synthetic.cycle_length")
    cycles, chains = _validate_split(cfg, "synthetic")
    repeats = checks.integer(cfg, "synthetic.repeats")
    checks.finite(cfg, "synthetic.proposal_variance", minimum=0, strict=True)
    _validate_tempering(cfg, "synthetic")
    # the kept states and their component indices; the schedule's betas and proposal scales per step of a cycle
    checks.fits_in_memory(
        {"synthetic.cycles": cycles, "synthetic.repeats": repeats, "synthetic.cycle_length": length},
        lambda s: 100 * s["synthetic.cycles"] * s["synthetic.repeats"] + 100 * s["synthetic.cycle_length"],
        "the kept states")


def validate_mog25(cfg: DictConfig) -> None:
    """Check every key of ``synthetic=wang_mog25`` (``cfg`` is the run config) before any work."""
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", MOG25_KEYS)
    checks.mapping(cfg, "synthetic.start", ("low", "high"))
    low = checks.finite(cfg, "synthetic.start.low")
    high = checks.finite(cfg, "synthetic.start.high")
    if not high > low:
        raise ConfigError("synthetic.start.high", high, f"a number above synthetic.start.low={low:g}")
    checks.mapping(cfg, "synthetic.rwm", RWM_KEYS)
    length = checks.integer(cfg, "synthetic.rwm.cycle_length")
    cycles, chains = _validate_split(cfg, "synthetic.rwm")
    checks.finite(cfg, "synthetic.rwm.proposal_scale", minimum=0, strict=True)
    _validate_tempering(cfg, "synthetic.rwm")
    checks.mapping(cfg, "synthetic.csgld", CSGLD_KEYS)
    checks.number_list(cfg, "synthetic.csgld.lr0")
    csgld_cycles = checks.integer(cfg, "synthetic.csgld.cycles")
    # one sample per cycle, its last step: the exploration proportion 1 - 1.5 / cycle_length must be >= 0
    csgld_length = checks.integer(cfg, "synthetic.csgld.cycle_length", minimum=2)
    csgld_chains = checks.integer(cfg, "synthetic.csgld.chains")
    sizes = {"synthetic.rwm.cycles": cycles, "synthetic.csgld.cycles": csgld_cycles,
             "synthetic.csgld.chains": csgld_chains, "synthetic.rwm.cycle_length": length,
             "synthetic.csgld.cycle_length": csgld_length}

    def estimate(s):
        # the kept samples, their 25 component densities and the 2000 resamples (int64) of the exact-draw
        # baseline; the per-step schedules
        samples = max(s["synthetic.rwm.cycles"], s["synthetic.csgld.cycles"] * s["synthetic.csgld.chains"])
        return (samples * (32 + 600 + 2000 * 8 * 2) + 100 * s["synthetic.rwm.cycle_length"]
                + 48 * s["synthetic.csgld.cycle_length"] * s["synthetic.csgld.cycles"])

    checks.fits_in_memory(sizes, estimate, "the samples and the exact-draw baseline")


def _split(cycles: int, chains: int) -> int:
    if cycles % chains:
        raise ValueError(f"cycles={cycles} must be a multiple of chains={chains}")
    return cycles // chains


def run_mixture1d(cfg: DictConfig, output_dir: Path, seed: int) -> dict[str, Any]:
    """Wang et al. Figure 1 and its weights; writes mixture1d.csv and figure1.png."""
    from studies.synthetic import plots

    generator = torch.Generator().manual_seed(seed)
    per_chain = _split(cfg.cycles, cfg.chains)
    rows, figure_rows = [], []
    started = time.perf_counter()
    for c in cfg.cs:
        target = create_target("mixture1d", c=float(c))
        count = cfg.repeats * cfg.chains
        start = torch.randn(count, 1, generator=generator, dtype=torch.float64)  # nu_0 = N(0, 1)
        kept = cyclical_rwm(
            target, cycle_length=cfg.cycle_length, cycles=per_chain, chains=count,
            proposal_variance=lambda beta: cfg.proposal_variance / beta, start=start,
            r=cfg.r, floor=cfg.floor, generator=generator,
        )  # (cycles per chain, repeats x chains, 1)
        first = (target.component(kept) == 0).to(torch.float64)  # closest to N(5, 1)
        per_repeat = first.reshape(per_chain, cfg.repeats, cfg.chains).mean(dim=(0, 2))
        weight = per_repeat.mean().item()
        value, _ = paper_value("on-cyclical-mcmc-aistats2024", "fig1", "cyclical RWM", "weight_of_N(5,1)",
                               dataset=f"mixture1d_c{float(c):g}")
        rows.append({
            "c": float(c), "weight_estimate": weight, "true_weight": 0.5, "paper_value": value,
            "stderr": per_repeat.std().item() / math.sqrt(cfg.repeats), "repeats": cfg.repeats,
            "cycles_per_repeat": cfg.cycles, "cycle_length": cfg.cycle_length, "chains_per_repeat": cfg.chains,
        })
        figure_rows.append({"target": target, "samples": kept.flatten(), "c": float(c), "weight": weight})
        log.info("c = %g: weight of N(5, 1) = %.4f (paper %.3f)", c, weight, value)
    seconds = time.perf_counter() - started
    table = pd.DataFrame(rows)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text(output_dir / "mixture1d.csv", table.to_csv(index=False))
    write_text(output_dir / "mixture1d.md", _mixture1d_markdown(table, cfg, seconds, seed))
    plots.mixture1d_figure(figure_rows, output_dir / "figure1.png")
    return {"study": "mixture1d", "seconds": seconds, "table": rows}


def _mixture1d_markdown(table: pd.DataFrame, cfg: DictConfig, seconds: float, seed: int) -> str:
    full = cfg.cycles == 1000 and cfg.cycle_length == 5000
    lines = [
        "# Cyclical MCMC on 0.5 N(5, 1) + 0.5 N(-5, c^2) (Wang et al. 2024, Figure 1)",
        "",
        f"Scale: {'full (the paper' + chr(39) + 's K and L)' if full else 'smoke'}: K = {cfg.cycles} cycles of "
        f"L = {cfg.cycle_length} random-walk Metropolis steps (proposal N(x, {cfg.proposal_variance:g} / beta), "
        f"beta floored at {cfg.floor:g}), one sample per cycle, split over {cfg.chains} independent chains; "
        f"{cfg.repeats} independent repeats for the standard error; seed {seed}; {seconds:.0f} s. "
        "Command: `make cyclical-mcmc`.",
        "",
    ]
    lines += markdown_table(["c", "weight of N(5, 1), ours", "true", "paper"],
                            [[f"{r.c:g}", f"{r.weight_estimate:.3f} +- {r.stderr:.3f}", f"{r.true_weight:g}",
                              f"{r.paper_value:g}"] for r in table.itertuples()], align="rrrr")
    lines += ["", "With equal variances tempering by powering mixes and the weight is right; with c = 0.1 the "
              "powered density is a witch's hat whose narrow peak the chain rarely finds, and N(5, 1) is "
              "over-weighted, as the paper reports."]
    return "\n".join(lines) + "\n"


def _mog25_markdown(summary: pd.DataFrame, cfg: DictConfig, seconds: float, seed: int) -> str:
    lines = [
        "# Mixture weights on the 25-component grid (Wang et al. 2024, Figure 2) and cSGLD on the same targets",
        "",
        f"Scale: cyclical RWM with the paper's L = {cfg.rwm.cycle_length} and K = {cfg.rwm.cycles} cycles (the paper: "
        f"K = 50000), split over {cfg.rwm.chains} chains; cSGLD: {cfg.csgld.chains} chains x {cfg.csgld.cycles} cycles "
        f"of {cfg.csgld.cycle_length} steps, noise always on, the last iterate of each cycle kept; seed {seed}; "
        f"{seconds:.0f} s. Command: `make cyclical-mcmc`.",
        "",
        "Total-variation distance of the estimated weights from the true ones (1/25 each), beside the distance that "
        "the same number of EXACT draws shows by chance; components 1-5 have the largest variances in the unequal "
        "setting (0.2 / i), 21-25 the smallest. A ratio near 1 means no detectable bias.",
        "",
    ]
    lines += markdown_table(
        ["method", "variances", "samples", "TV from true", "TV of exact draws", "ratio", "weight of 1-5 (true 0.2)",
         "weight of 21-25 (true 0.2)"],
        [[r.method, r.setting, r.samples, f"{r.tv_from_true:.3f}", f"{r.tv_of_exact_draws:.3f}",
          f"{r.tv_from_true / r.tv_of_exact_draws:.1f}", f"{r.weight_components_1_5:.3f}",
          f"{r.weight_components_21_25:.3f}"] for r in summary.itertuples()], align="llrrrrrr")
    lines += ["", "In the unequal setting components 1-5 are both the widest and the x = -4 column of the grid, so "
              "compare each unequal row with the equal-variance row of the same method, which has the same geometry.",
              "", "## Does the method share the bias?", "",
              "One run per method and setting: a reading of that run (thresholds: TV beyond twice the exact draws' "
              "and a tilt above 0.05), not a verdict with statistics (csg.evaluation.comparison needs repeats).", ""]
    for method, rows in summary.groupby("method", sort=False):
        equal, unequal = (rows[rows.setting == s].iloc[0] for s in ("equal", "unequal"))
        tilt = (unequal.weight_components_1_5 - unequal.weight_components_21_25) - (
            equal.weight_components_1_5 - equal.weight_components_21_25)
        off = unequal.tv_from_true > 2 * unequal.tv_of_exact_draws
        verdict = ("in this run, tilted towards the wide modes" if off and tilt > 0.05 else
                   "in this run, no tilt to wide modes, but the weights are off" if off else "in this run, neither")
        lines.append(
            f"- {method}: {verdict}. Unequal variances: TV "
            f"{unequal.tv_from_true:.3f} (exact draws: {unequal.tv_of_exact_draws:.3f}); the five widest components "
            f"hold {unequal.weight_components_1_5:.3f} and the five narrowest {unequal.weight_components_21_25:.3f} "
            f"(true 0.2 each), a tilt towards the wide ones of {tilt:+.3f} beyond the equal-variance run."
        )
    lines += ["", "The papers do not report cSGLD here. A step size above twice a component's variance makes "
              "SGLD unstable in that component, so large-step exploration throws chains out of narrow modes; "
              "0.01 is below twice the smallest variance (2 x 0.2 / 25 = 0.016), 0.09 is not.",
              "", "Per-component weights: mog25_weights.csv; the x-marginal of component 25: mog25_component25.csv; "
              "figures: figure2.png (cyclical RWM), figure2_csgld.png."]
    return "\n".join(lines) + "\n"


def uniform_tv_baseline(samples: int, components: int = 25, draws: int = 2000, seed: int = 0) -> float:
    """Mean total-variation distance between the empirical weights of ``samples`` exact draws and uniform weights.

    The yardstick for "no bias": a perfect sampler with this many samples is this far off by chance.
    """
    generator = torch.Generator().manual_seed(seed)
    counts = torch.multinomial(torch.full((components,), 1.0 / components), samples * draws, replacement=True,
                               generator=generator).reshape(draws, samples)
    weights = torch.stack([torch.bincount(row, minlength=components) for row in counts]).double() / samples
    return 0.5 * (weights - 1.0 / components).abs().sum(1).mean().item()


def _summarise(method: str, setting: str, target, samples: torch.Tensor, rows: list, panels: list,
               marginals: list) -> None:
    assignment = target.component(samples)
    weights = component_weights(assignment, 25)
    for i in range(25):
        rows.append({"method": method, "setting": setting, "component": i + 1, "variance": target.variances[i].item(),
                     "weight_estimate": weights[i].item(), "true_weight": 1 / 25, "samples": samples.shape[0]})
    marginal = samples[assignment == 24, 0]
    marginals.append({"method": method, "setting": setting, "samples": marginal.numel(),
                      "x_mean": marginal.mean().item() if marginal.numel() else float("nan"),
                      "x_sd": marginal.std().item() if marginal.numel() > 1 else float("nan"),
                      "true_mean": 4.0, "true_sd": target.variances[24].sqrt().item()})
    panels.append({"label": f"{method}, {setting} variance", "weights": weights.numpy(), "marginal_samples": marginal,
                   "marginal_sd": target.variances[24].sqrt().item()})


def run_mog25(cfg: DictConfig, output_dir: Path, seed: int) -> dict[str, Any]:
    """Wang et al. Figure 2, and cSGLD on the same targets; writes mog25_*.csv and figures."""
    from studies.synthetic import plots

    generator = torch.Generator().manual_seed(seed)
    rows, summary, marginals, rwm_panels, csgld_panels = [], [], [], [], []
    started = time.perf_counter()
    for setting in ("equal", "unequal"):
        target = create_target("mog25_wang", unequal=setting == "unequal")
        rwm = cfg.rwm
        per_chain = _split(rwm.cycles, rwm.chains)
        start = cfg.start.low + (cfg.start.high - cfg.start.low) * torch.rand(rwm.chains, 2, generator=generator)
        kept = cyclical_rwm(
            target, cycle_length=rwm.cycle_length, cycles=per_chain, chains=rwm.chains,
            proposal_variance=lambda beta: rwm.proposal_scale * beta ** -0.5, start=start.to(torch.float32),
            r=rwm.r, floor=rwm.floor, generator=generator,
        ).reshape(-1, 2).double()
        _summarise("cyclical RWM", setting, target, kept, rows, rwm_panels, marginals)
        log.info("cyclical RWM, %s variances: %d samples", setting, kept.shape[0])

        csgld = cfg.csgld
        steps = csgld.cycle_length * csgld.cycles
        for lr0 in csgld.lr0:
            # one sample per cycle: its last iteration (proportion (C - 1) / C) is the only "sampling" step;
            # the noise stays on throughout
            schedule = Cyclical(float(lr0), steps, csgld.cycles, 1.0 - 1.5 / csgld.cycle_length)
            group = ChainGroup("csgld", schedule, chains=csgld.chains, noise_in_exploration=True)
            result = run_chains(target, [group], steps=steps, repeats=1, start_low=cfg.start.low,
                                start_high=cfg.start.high, generator=generator, dtype=torch.float32)["csgld"]
            _summarise(f"cSGLD lr0={float(lr0):g}", setting, target, result.pooled(0).double(), rows, csgld_panels,
                       marginals)
    seconds = time.perf_counter() - started

    table = pd.DataFrame(rows)
    for (method, setting), group in table.groupby(["method", "setting"], sort=False):
        weights = torch.tensor(group.weight_estimate.values)
        samples = int(group.samples.iloc[0])
        wide, narrow = weights[:5].sum().item(), weights[-5:].sum().item()
        summary.append({
            "method": method, "setting": setting, "samples": samples,
            "tv_from_true": 0.5 * (weights - 1 / 25).abs().sum().item(),
            "tv_of_exact_draws": uniform_tv_baseline(samples, seed=seed),
            "weight_components_1_5": wide, "weight_components_21_25": narrow,
        })
    summary = pd.DataFrame(summary)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text(output_dir / "mog25_weights.csv", table.to_csv(index=False))
    write_text(output_dir / "mog25_summary.csv", summary.to_csv(index=False))
    write_text(output_dir / "mog25_component25.csv", pd.DataFrame(marginals).to_csv(index=False))
    write_text(output_dir / "mog25.md", _mog25_markdown(summary, cfg, seconds, seed))
    plots.mog25_weights_figure(
        rwm_panels, output_dir / "figure2.png",
        f"Cyclical RWM on the 25-component mixture, K = {cfg.rwm.cycles}, L = {cfg.rwm.cycle_length} "
        "(Wang et al. 2024, Figure 2)",
    )
    plots.mog25_weights_figure(
        csgld_panels, output_dir / "figure2_csgld.png",
        f"cSGLD on the same targets: {cfg.csgld.chains} chains x {cfg.csgld.cycles} cycles of "
        f"{cfg.csgld.cycle_length} steps, one sample per cycle",
    )
    return {"study": "mog25", "seconds": seconds, "summary": summary.to_dict("records")}
