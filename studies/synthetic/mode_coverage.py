"""cSG-MCMC Table 4 and Figures 2 and 5: mode coverage of SGLD and cSGLD on the 25-Gaussian mixture.

For each preset (``paper`` text or ``official_code``), four methods run
``repeats`` times: SGLD and cSGLD with one chain, and with ``parallel_chains``
chains whose samples are pooled. A mode is covered when more than
``min_samples`` samples lie within ``radius`` of its centre (Appendix A.1).
All methods, repeats and presets run as one vectorised loop.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from csg.reporting import markdown_table, write_text
from csg.errors import ConfigError
from studies.paper import paper_value
from csg.schedules import Cyclical, Decreasing
from studies.synthetic.chains import ChainGroup, run_chains
from studies.synthetic.coverage import mode_coverage
from studies.targets import create_target

log = logging.getLogger(__name__)

METHODS = ("SGLD", "cSGLD", "Parallel SGLD", "Parallel cSGLD")


KEYS = ("name", "output_dir", "target", "steps", "repeats", "parallel_chains", "start", "coverage", "presets", "notes")
PRESET_KEYS = ("sgld", "csgld", "noise_in_exploration", "temperature_correction")
SGLD_KEYS = ("a", "b", "gamma", "hold")
CSGLD_KEYS = ("lr0", "cycles", "explore", "exact_length", "burnin_steps")
TARGETS = ("mog25",)  # the cSG-MCMC grid; coverage counts its 25 centres and the table compares with the paper's


def validate(cfg: DictConfig) -> None:
    """Check every key of ``synthetic=table4`` (``cfg`` is the run config) before any work; raise ConfigError."""
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", KEYS)
    checks.mapping(cfg, "synthetic.target", ("name", "variance", "grad_noise"))
    checks.choice(cfg, "synthetic.target.name", TARGETS)
    checks.finite(cfg, "synthetic.target.variance", minimum=0, strict=True)
    checks.finite(cfg, "synthetic.target.grad_noise", minimum=0)
    steps = checks.integer(cfg, "synthetic.steps")
    repeats = checks.integer(cfg, "synthetic.repeats")
    parallel = checks.integer(cfg, "synthetic.parallel_chains")
    checks.mapping(cfg, "synthetic.start", ("low", "high"))
    low = checks.finite(cfg, "synthetic.start.low")
    high = checks.finite(cfg, "synthetic.start.high")
    if not high > low:
        raise ConfigError("synthetic.start.high", high, f"a number above synthetic.start.low={low:g}")
    checks.mapping(cfg, "synthetic.coverage", ("radius", "min_samples"))
    checks.finite(cfg, "synthetic.coverage.radius", minimum=0, strict=True)
    checks.integer(cfg, "synthetic.coverage.min_samples")
    checks.mapping(cfg, "synthetic.notes", METHODS)
    for method in METHODS:
        checks.text(cfg, f"synthetic.notes.{method}")
    presets = checks.mapping(cfg, "synthetic.presets", None)
    if not len(presets):
        raise ConfigError("synthetic.presets", presets, "at least one preset (paper, official_code)")
    shortest = {}
    for name in presets:
        if not checks.NAME.match(str(name)):
            raise ConfigError(f"synthetic.presets.{name}", checks.get(cfg, f"synthetic.presets.{name}"),
                              "a preset whose name has only letters, digits, _ and - (it names files)")
        shortest[name] = _validate_preset(cfg, f"synthetic.presets.{name}")
    name, (need, why) = max(shortest.items(), key=lambda item: item[1][0])
    if steps < need:
        raise ConfigError("synthetic.steps", steps, f"an integer >= {need} (preset {name}: {why})")
    # per preset: the kept positions of 2 + 2 parallel_chains chains per repeat, and each group's per-step schedule
    checks.fits_in_memory(
        {"synthetic.steps": steps, "synthetic.repeats": repeats, "synthetic.parallel_chains": parallel},
        lambda s: len(presets) * s["synthetic.steps"] * (
            16 * s["synthetic.repeats"] * (2 + 2 * s["synthetic.parallel_chains"]) + 160),
        "the kept samples")


def _validate_preset(cfg: DictConfig, key: str) -> tuple[int, str]:
    """Check one preset; return the fewest steps its cSGLD schedule works with, and why."""
    from studies.synthetic import checks

    checks.mapping(cfg, key, PRESET_KEYS)
    checks.mapping(cfg, f"{key}.sgld", SGLD_KEYS)
    a = checks.finite(cfg, f"{key}.sgld.a", minimum=0, strict=True)
    b = checks.finite(cfg, f"{key}.sgld.b", minimum=0, strict=True)
    gamma = checks.finite(cfg, f"{key}.sgld.gamma", minimum=0)
    checks.integer(cfg, f"{key}.sgld.hold", minimum=0, optional="no hold")
    log_first = math.log(a) - gamma * math.log(b)  # the first (largest) step size a b^-gamma, in logs
    if log_first >= math.log(sys.float_info.max):  # Decreasing.lr would overflow
        raise ConfigError(f"{key}.sgld.a", a, f"a smaller number: the first step size a b^-gamma (b={b:g}, "
                          f"gamma={gamma:g}) must be a finite number")
    checks.mapping(cfg, f"{key}.csgld", CSGLD_KEYS)
    lr0 = checks.finite(cfg, f"{key}.csgld.lr0", minimum=0, strict=True)
    cycles = checks.integer(cfg, f"{key}.csgld.cycles")
    exact = checks.get(cfg, f"{key}.csgld.exact_length") is not None and checks.boolean(cfg, f"{key}.csgld.exact_length")
    if checks.get(cfg, f"{key}.csgld.burnin_steps") is not None:
        if checks.get(cfg, f"{key}.csgld.explore") is not None:
            raise ConfigError(f"{key}.csgld.explore", checks.get(cfg, f"{key}.csgld.explore"),
                              f"null when {key}.csgld.burnin_steps is set (one of the two sets the exploration stage)")
        burnin = checks.integer(cfg, f"{key}.csgld.burnin_steps", minimum=0)
        # the cycles must be longer than burnin_steps, so that each keeps a sample
        need = cycles * (burnin + 1) if not exact else cycles * burnin + 1
        why = f"{cycles} cycles of more than {burnin} burn-in steps each"
    else:
        if checks.get(cfg, f"{key}.csgld.explore") is None:
            raise ConfigError(f"{key}.csgld.explore", None, "a finite number in [0, 1), or null with "
                              f"{key}.csgld.burnin_steps set (one of the two sets the exploration stage)")
        explore = checks.finite(cfg, f"{key}.csgld.explore", minimum=0, maximum=1, below=True)
        # each cycle's sampling stage, (1 - explore) x its length, must hold a step
        per_cycle = 1.0 / (1.0 - explore)
        need = cycles * math.ceil(per_cycle - 1e-9) if not exact else math.ceil(cycles * per_cycle - 1e-9)
        why = f"{cycles} cycles whose sampling stage ({1 - explore:g} of a cycle) holds a step"
    checks.boolean(cfg, f"{key}.noise_in_exploration")
    if checks.boolean(cfg, f"{key}.temperature_correction") and max(lr0, math.exp(log_first)) > 2:
        key_lr = f"{key}.csgld.lr0" if lr0 > 2 else f"{key}.sgld.a"
        raise ConfigError(key_lr, checks.get(cfg, key_lr), f"step sizes <= 2 with {key}.temperature_correction=true "
                          "(noise variance 2 lr (1 - lr / 2) must not be negative)")
    return max(need, cycles), why


def _schedules(preset: DictConfig, steps: int):
    sgld, csgld = preset.sgld, preset.csgld
    decreasing = Decreasing(sgld.a, sgld.b, sgld.gamma, hold=sgld.get("hold") or 0)
    exact = bool(csgld.get("exact_length", False))
    length = steps / csgld.cycles if exact else steps // csgld.cycles
    explore = csgld.burnin_steps / length if csgld.get("burnin_steps") is not None else csgld.explore
    return decreasing, Cyclical(csgld.lr0, steps, csgld.cycles, explore, exact_length=exact)


def groups_for(cfg: DictConfig) -> list[ChainGroup]:
    """One chain group per (preset, method)."""
    groups = []
    for preset_name, preset in cfg.presets.items():
        decreasing, cyclical = _schedules(preset, cfg.steps)
        rules = dict(noise_in_exploration=preset.noise_in_exploration, temperature_correction=preset.temperature_correction)
        for method in METHODS:
            schedule = cyclical if "cSGLD" in method else decreasing
            chains = cfg.parallel_chains if method.startswith("Parallel") else 1
            groups.append(ChainGroup(f"{preset_name}/{method}", schedule, chains=chains, **rules))
    return groups


def run(cfg: DictConfig, output_dir: Path, seed: int) -> dict[str, Any]:
    """Run the study and write table4.csv, table4.md and the figures into ``output_dir``."""
    from studies.synthetic import plots

    target = create_target(**OmegaConf.to_container(cfg.target, resolve=True))
    started = time.perf_counter()
    samples = run_chains(
        target, groups_for(cfg), steps=cfg.steps, repeats=cfg.repeats,
        start_low=cfg.start.low, start_high=cfg.start.high, generator=torch.Generator().manual_seed(seed),
    )
    seconds = time.perf_counter() - started
    log.info("%d chain groups x %d steps in %.1f s", len(samples), cfg.steps, seconds)

    rows = []
    for name, result in samples.items():
        preset, method = name.split("/")
        covered = [
            mode_coverage(result.pooled(r), target.means, cfg.coverage.radius, cfg.coverage.min_samples)
            for r in range(cfg.repeats)
        ]
        mean = sum(covered) / len(covered)
        stderr = torch.tensor(covered, dtype=torch.float64).std().item() / math.sqrt(len(covered))
        value, paper_stderr = paper_value("csgmcmc-iclr2020", "table4", method, "modes_covered")
        gap = abs(mean - value) > 2 * math.sqrt(stderr**2 + paper_stderr**2)
        rows.append({
            "method": method, "preset": preset, "chains": result.group.chains, "repeats": cfg.repeats,
            "steps_per_chain": cfg.steps, "mean": mean, "stderr": stderr, "paper_value": value,
            "paper_stderr": paper_stderr, "difference": mean - value,
            "note": cfg.notes[method] if gap else "agrees with the paper within 2 standard errors",
            "runs": " ".join(map(str, covered)),
        })
    table = pd.DataFrame(rows)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text(output_dir / "table4.csv", table.to_csv(index=False))
    write_text(output_dir / "table4.md", markdown(table, cfg, seconds, seed))

    grid = target.grid_density(-6, 6, 300)
    for preset in cfg.presets:
        for figure, chains_label, prefix in (("figure2", "4 parallel chains", "Parallel "), ("figure5", "one chain", "")):
            panels = [("target density", grid)]
            panels += [(f"{prefix}{m}: {samples[f'{preset}/{prefix}{m}'].pooled(0).shape[0]} samples",
                        samples[f"{preset}/{prefix}{m}"].pooled(0)) for m in ("SGLD", "cSGLD")]
            plots.density_panels(
                panels, output_dir / f"{figure}_{preset}.png",
                f"25-Gaussian mixture, {chains_label}, preset {preset} (cSG-MCMC {figure.replace('figure', 'Figure ')}; repeat 0)",
            )
    return {"study": "table4", "seconds": seconds, "table": rows}


def markdown(table: pd.DataFrame, cfg: DictConfig, seconds: float, seed: int) -> str:
    full = cfg.steps == 50000 and cfg.repeats == 10 and cfg.parallel_chains == 4
    scale = "full (the paper's size)" if full else "smoke (smaller than the paper's 50000 steps x 10 repeats; the notes describe the full-scale gaps)"
    lines = [
        "# cSG-MCMC Table 4: mode coverage on the 25-Gaussian mixture",
        "",
        f"Scale: {scale}: {cfg.steps} steps per chain, {cfg.repeats} repeats, "
        f"{cfg.parallel_chains} chains for the parallel methods; seed {seed}; {seconds:.0f} s for all runs. "
        f"A mode is covered when more than {cfg.coverage.min_samples} samples lie within {cfg.coverage.radius} of "
        "its centre. Command: `make table4`.",
        "",
        "Presets: `paper` is the paper's text (SGLD lr 0.05 k^-0.55; cSGLD lr0 0.09, M = 30, beta = 1/4, exploration "
        "without noise); `official_code` is the authors' MATLAB settings (SGLD lr 0.043 then 0.043 (t - 500)^-0.55; "
        "cSGLD lr0 0.07, M = 30, cycle 50000/30, noise always on, the first 50 steps of each cycle dropped, noise "
        "variance 2 lr (1 - lr/2)). Both use the code's noisy gradient grad U + N(0, I) and start uniform on "
        "[-10, 10]^2.",
        "",
    ]
    lines += markdown_table(
        ["method", "preset", "ours (mean +- s.e.)", "paper", "difference", "note"],
        [[row.method, row.preset, f"{row.mean:.1f} +- {row.stderr:.2f}",
          f"{row.paper_value:g} +- {row.paper_stderr:g}", f"{row.difference:+.1f}", row.note]
         for row in table.itertuples()], align="llrrrl")
    lines += ["", "Per-run counts are in table4.csv (`runs`). Figures: figure2_<preset>.png (parallel), "
              "figure5_<preset>.png (single chain)."]
    return "\n".join(lines) + "\n"
