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

log = logging.getLogger(__name__)


def _modules():
    from studies.synthetic import (icsgld_mnist, icsgld_simulation_report, icsgld_variance, mode_coverage,
                                       tempering_bias)

    return {"table4": (mode_coverage, "run", "validate"),
            "wang_mixture1d": (tempering_bias, "run_mixture1d", "validate_mixture1d"),
            "wang_mog25": (tempering_bias, "run_mog25", "validate_mog25"),
            "icsgld_sim": (icsgld_simulation_report, "run", "validate"),
            "icsgld_variance": (icsgld_variance, "run", "validate"),
            "icsgld_mnist": (icsgld_mnist, "run", "validate")}


def _studies():
    return {name: getattr(module, run) for name, (module, run, _) in _modules().items()}


def validate(cfg: DictConfig) -> None:
    """Check every key the study ``cfg.synthetic`` reads, and the seed, before it runs; raise ConfigError naming
    the first bad key. Each study's own checks (and the list of its keys: any other is refused) are its module's
    ``validate``; the keys every study has (name, output_dir) and the seed are checked here."""
    from studies.synthetic import checks

    modules = _modules()
    checks.mapping(cfg, "synthetic", None, what=" (a study: synthetic=table4, ...)")
    checks.choice(cfg, "synthetic.name", tuple(modules))
    checks.seed(cfg)
    checks.output_dir(cfg, "synthetic.output_dir")
    module, _, validate_study = modules[cfg.synthetic.name]
    getattr(module, validate_study)(cfg)


def run_study(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the study ``cfg.synthetic`` describes in ``run_dir`` (default Hydra's output folder), as train.py runs
    it (:func:`csg.run_study`: the folder locked, the study checked, then :func:`run_in`); returns its summary."""
    import csg

    return csg.run_study(cfg, run_dir)


def run_in(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """The study ``cfg.synthetic``, checked already, run with its results in ``run_dir`` (or its
    ``output_dir``) and its summary written to ``run_dir/metrics.json``."""
    from csg.reporting import write_json

    study = cfg.synthetic
    output_dir = Path(study.output_dir) if study.get("output_dir") else run_dir
    result = _studies()[study.name](study, output_dir, int(cfg.seed))
    write_json(run_dir / "metrics.json", {"seed": int(cfg.seed), "output_dir": str(output_dir), **result})
    log.info("%s: %.1f s; results in %s", study.name, result["seconds"], output_dir)
    print(f"{study.name}: wrote results to {output_dir} ({result['seconds']:.0f} s)")
    return result
