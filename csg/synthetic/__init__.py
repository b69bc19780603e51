"""Synthetic studies on analytic targets, run from ``train.py synthetic=<study>``.

- ``table4``: cSG-MCMC Table 4 and Figures 2, 5 (mode coverage on 25 Gaussians);
- ``wang_mixture1d``: Wang et al. 2024 Figure 1 (cyclical MCMC on a 1-D mixture);
- ``wang_mog25``: Wang et al. 2024 Figure 2, plus cSGLD on the same targets;
- ``icsgld_sim``: the ICSGLD paper's 2-D simulation (Section 5.2, Figure 6);
- ``icsgld_variance``: the ICSGLD paper's variance of theta, ICSGLD x P10 against CSGLD x T10 (Appendix D.5, Figure 7);
- ``icsgld_mnist``: the ICSGLD paper's loss of SGD, SGLD and ICSGLD on MNIST digits 0-4 (Section 5.1, Figure 2a):
  real digits, not an analytic target, but a study of its own like the others.

Each study writes its CSV, Markdown and PNG files into ``synthetic.output_dir``
(the make targets point it at ``results/``) or else the run directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from csg.errors import ConfigError

log = logging.getLogger(__name__)


def _studies():
    from csg.synthetic import icsgld_mnist, icsgld_simulation, icsgld_variance, mode_coverage, tempering_bias

    return {"table4": mode_coverage.run, "wang_mixture1d": tempering_bias.run_mixture1d,
            "wang_mog25": tempering_bias.run_mog25, "icsgld_sim": icsgld_simulation.run,
            "icsgld_variance": icsgld_variance.run, "icsgld_mnist": icsgld_mnist.run}


_POSITIVE_INTS = {
    "table4": ("steps", "repeats", "parallel_chains", "coverage.min_samples"),
    "wang_mixture1d": ("cycle_length", "cycles", "chains", "repeats"),
    "icsgld_sim": ("steps", "repeats", "checkpoints", "pilot_steps"),
    "icsgld_variance": ("steps", "repeats"),
    "icsgld_mnist": ("iterations", "partitions", "filters", "hidden"),
    "wang_mog25": ("rwm.cycle_length", "rwm.cycles", "rwm.chains", "csgld.cycles", "csgld.cycle_length", "csgld.chains"),
}
_SPLITS = {"wang_mixture1d": ("cycles", "chains"), "wang_mog25": ("rwm.cycles", "rwm.chains")}


def validate(cfg: DictConfig) -> None:
    """Check a study's sizes before it runs; raise ConfigError naming the key."""
    from omegaconf import OmegaConf

    from csg import config as checks

    checks.non_negative_int(cfg, "seed")
    study = cfg.synthetic
    for key in _POSITIVE_INTS.get(study.name, ()):
        checks.positive_int(cfg, f"synthetic.{key}")
    if study.name in _SPLITS:
        cycles, chains = (OmegaConf.select(study, key) for key in _SPLITS[study.name])
        if cycles % chains:
            key = _SPLITS[study.name][0]
            raise ConfigError(f"synthetic.{key}", cycles, f"a multiple of synthetic.{_SPLITS[study.name][1]}={chains}")
    if study.name == "table4":
        checks.number(cfg, "synthetic.coverage.radius", minimum=0, strict=True)
    if study.name == "icsgld_sim":
        from csg.synthetic.icsgld_simulation import Protocol

        if study.steps <= Protocol.warm_up_p5 + Protocol.thin:
            raise ConfigError("synthetic.steps", study.steps, f"an integer above {Protocol.warm_up_p5 + Protocol.thin} "
                              f"(the P5 chains' warm-up, then every {Protocol.thin}th iteration is a sample)")
        if study.pilot_steps <= Protocol.pilot_warm_up + Protocol.thin:
            raise ConfigError("synthetic.pilot_steps", study.pilot_steps,
                              f"an integer above {Protocol.pilot_warm_up + Protocol.thin} (the pilot's warm-up, then "
                              f"every {Protocol.thin}th iteration)")
    if study.name == "icsgld_variance":
        checks.one_of(cfg, "synthetic.difference", ("forward", "backward"))
        if study.repeats < 2:
            raise ConfigError("synthetic.repeats", study.repeats, "at least 2 (a variance over repeats)")
    if study.name == "icsgld_mnist":
        classes = checks.positive_int(cfg, "synthetic.classes")
        if not 2 <= classes <= 10:
            raise ConfigError("synthetic.classes", classes, "an integer from 2 to 10 (the first classes of the MNIST digits)")
        for key in ("eta", "temperature", "zeta", "width", "sa_step"):
            checks.number(cfg, f"synthetic.{key}", minimum=0, strict=True)
        checks.number(cfg, "synthetic.prior_precision", minimum=0)
        for key in ("batch_size", "max_images"):
            if study.get(key) is not None:
                checks.positive_int(cfg, f"synthetic.{key}")
        from csg.synthetic.icsgld_mnist import METHODS

        methods = list(study.get("methods") or [])
        if not methods or any(m not in METHODS for m in methods):
            raise ConfigError("synthetic.methods", methods, f"a list of {', '.join(METHODS)}")
    if study.name == "wang_mog25":
        for index, lr0 in enumerate(study.csgld.lr0):
            if not checks._is_number(lr0) or lr0 <= 0:
                raise ConfigError(f"synthetic.csgld.lr0[{index}]", lr0, "a number > 0")


def run_study(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the study ``cfg.synthetic`` describes; returns its summary."""
    from csg.atomic import atomic_write_json
    from csg.run import _hydra_output_dir

    study = cfg.synthetic
    studies = _studies()
    if study.name not in studies:
        raise ConfigError("synthetic.name", study.name, f"one of {', '.join(studies)}")
    validate(cfg)
    run_dir = Path(run_dir if run_dir is not None else _hydra_output_dir())
    output_dir = Path(study.output_dir) if study.get("output_dir") else run_dir
    result = studies[study.name](study, output_dir, int(cfg.seed))
    atomic_write_json(run_dir / "metrics.json", {"seed": int(cfg.seed), "output_dir": str(output_dir), **result})
    log.info("%s: %.1f s; results in %s", study.name, result["seconds"], output_dir)
    print(f"{study.name}: wrote results to {output_dir} ({result['seconds']:.0f} s)")
    return result
