"""The posterior benchmark's contenders: what each method is as ``train.py`` overrides, at a gradient budget.

Every contender runs ``python train.py experiment=posterior_benchmark ...`` (here in-process, :func:`csg.train`), so it
is csg as a user runs it, scored against the reference of its temperature (``evaluation.reference``). A budget is
the total number of epochs over all of a method's chains (``BUDGETS``; the preset has 10 batches an epoch, so 200
epochs are 2000 gradient evaluations of a 100-example batch): a method of K chains runs K chains of budget / K
epochs, so parallel chains and ensembles pay for every member.

=====================  ==========================================================================================
``cSGHMC``             the embedded default: 4 cosine cycles, noise-free exploration (beta 0.8), 3 samples a cycle
``cSGLD``              the same cycles with SGLD's update
``SGHMC``, ``SGLD``    constant step (``sghmc_constant``, ``sgld_constant``): noise in the last 25 %, 20 samples
``Snapshot-SGDM``      cSGHMC with the noise off (T = 0): the same cycles and samples; the control for noise
``cSGHMC x4``          4 independent cSGHMC chains of budget / 4 epochs, pooled
``deep ensemble x5``   5 independent SGD-momentum runs of budget / 5 epochs (momentum 0.9; cSGHMC's update at T = 0
                       with one cycle: a cosine decay over the first 80 % of the epochs, then the step held at
                       0.095 lr0 for the rest, as the recipe's sampling stage), their final models
``cycSWAG``            cyclical SWAG: a Gaussian fitted to each cycle's snapshots, 10 draws per cycle
=====================  ==========================================================================================

Where a budget leaves a chain too few epochs for its sampler's default cycles or samples, :func:`overrides` lowers
them to what fits (at least one epoch end in every sampling stage) and says so in the run's overrides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUDGETS", "CONTENDERS", "Contender", "fitted", "overrides", "run_contender"]

BUDGETS = {"0.2x": 40, "1x": 200, "4x": 800}  # epochs over all chains; 1x is the embedded default's 200


@dataclass(frozen=True)
class Contender:
    name: str
    sampler: tuple[str, ...]        # train.py overrides of the method
    chains: int = 1
    cycles: int = 4                 # cycles per chain where the budget allows
    samples: int = 3                # samples per cycle where the budget allows
    explore: float = 0.8            # the share of a cycle without samples (the sampler's own explore)
    temperature_follows: bool = True  # False: the method's temperature is its own (0 for the optimisers)
    min_samples: int = 1            # samples a cycle needs (cycSWAG: 2 snapshots for a Gaussian)


CONTENDERS = {c.name: c for c in (
    Contender("cSGHMC", ("sampler=csghmc",)),
    Contender("cSGLD", ("sampler=csgld",)),
    Contender("SGHMC", ("sampler=sghmc_constant",), cycles=1, samples=20, explore=0.75),
    Contender("SGLD", ("sampler=sgld_constant",), cycles=1, samples=20, explore=0.75),
    Contender("Snapshot-SGDM", ("sampler=csghmc", "sampler.name=snapshot_sgdm_control", "sampler.temperature=0"),
              temperature_follows=False),
    Contender("cSGHMC x4", ("sampler=csghmc",), chains=4),
    Contender("deep ensemble x5", ("sampler=csghmc", "sampler.name=deep_ensemble", "sampler.temperature=0",
                                   "sampler.momentum=0.9"),
              chains=5, cycles=1, samples=1, temperature_follows=False),
    Contender("cycSWAG", ("sampler=cycswag",), samples=5, explore=0.85, temperature_follows=False, min_samples=2),
)}


def fitted(contender: Contender, budget_epochs: int, batches_per_epoch: int = 10) -> tuple[int, int, int]:
    """(epochs per chain, cycles, samples per cycle) of ``contender`` at a budget of ``budget_epochs`` epochs over all
    its chains: fewer, longer cycles where a chain is short (module docstring), each cycle's samples at most the
    epoch ends its sampling stage holds, by csg's own collection rule (:mod:`csg.schedules`: a cycle need not
    end on an epoch end); ``batches_per_epoch``: the preset's 10."""
    from csg.schedules import capacity, eligible_epochs
    from csg.schedules import Cyclical

    if budget_epochs % contender.chains:
        raise ValueError(f"{contender.name}: a budget of {budget_epochs} epochs does not split over "
                         f"{contender.chains} chains")
    epochs = budget_epochs // contender.chains

    def fits(cycles: int) -> int:  # the samples each cycle's sampling stage can hold
        schedule = Cyclical(1.0, epochs * batches_per_epoch, cycles, contender.explore)
        return capacity(eligible_epochs(schedule, epochs, batches_per_epoch))

    cycles = contender.cycles
    while cycles > 1 and (epochs // cycles < 5 or fits(cycles) < contender.min_samples):
        cycles -= 1  # fewer, longer cycles where the budget is short
    if fits(cycles) < contender.min_samples:
        raise ValueError(f"{contender.name}: {epochs} epochs per chain leave no room for {contender.min_samples} "
                         "samples")
    return epochs, cycles, max(1, min(contender.samples, fits(cycles)))


def overrides(name: str, budget_epochs: int, seed: int, temperature: float, *, lr0: float | None = None,
              reference: str | Path | None = None, run_dir: str | Path | None = None,
              extra: tuple[str, ...] = ()) -> list[str]:
    """The train.py overrides of contender ``name`` at a budget of ``budget_epochs`` epochs over all its chains."""
    contender = CONTENDERS[name]
    epochs, cycles, samples = fitted(contender, budget_epochs)
    words = ["experiment=posterior_benchmark", *contender.sampler, f"seed={seed}", f"trainer.epochs={epochs}",
             f"sampler.cycles={cycles}", f"sampler.samples_per_cycle={samples}", "logger=none",
             "trainer.progress=false"]
    if contender.chains > 1:
        words.append(f"sampler.chains={contender.chains}")
    if contender.temperature_follows:
        words.append(f"sampler.temperature={temperature:g}")
    if lr0 is not None:
        words.append(f"sampler.lr0={lr0:g}")
    if reference is not None:
        words.append(f"evaluation.reference={reference}")
    if run_dir is not None:
        words.append(f"hydra.run.dir={run_dir}")
    return [*words, *extra]


def run_contender(name: str, budget_epochs: int, seed: int, temperature: float, run_dir: Path, *,
                  lr0: float | None = None, reference: str | Path | None = None,
                  extra: tuple[str, ...] = ()) -> dict:
    """Train contender ``name`` (in this process) into ``run_dir`` and return its row: the ensemble's metrics, its
    distance from the reference (where given), its members, gradient evaluations and training seconds."""
    import csg

    posterior = csg.train(overrides(name, budget_epochs, seed, temperature, lr0=lr0, reference=reference,
                                run_dir=run_dir, extra=extra))
    metrics = posterior.metrics
    ensemble, ood = metrics["ensemble"], metrics.get("ood", {}).get("ensemble", {})
    row = {"method": name, "budget_epochs": budget_epochs, "seed": seed, "temperature": temperature,
           "lr0": float(posterior.cfg.sampler.lr0), "members": int(ensemble["num_samples"]),
           "gradient_evaluations": int(metrics["gradient_evaluations"]),
           "train_seconds": float(metrics["wall_time_s"]["train"]),
           "error_pct": float(ensemble["test_error_pct"]), "nll": float(ensemble["nll"]), "ece": float(ensemble["ece"]),
           "ood_auroc": float(ood["auroc"]) if "auroc" in ood else float("nan")}
    scores = metrics.get("reference")
    if scores is not None:
        row.update(agreement=scores["test"]["agreement"], tv=scores["test"]["total_variation"])
        if "ood" in scores:
            row.update(ood_agreement=scores["ood"]["agreement"], ood_tv=scores["ood"]["total_variation"])
    return row
