"""Sampling part of a pretrained network (``make part-sampling``): its runs.

For each seed, in order (each a ``train.py`` run, through :func:`csg.train`, into ``<runs>/<method>_seed<s>``):

1. ``sgd``: the MLP trained by SGD on the shipped digits (the ``sgd`` preset: a decreasing step, one sample, the
   final model): the pretrained network and the baseline;
2. ``last_layer``: cSGHMC on its last layer (``sampler.params=[7]``), the rest frozen at the SGD weights;
3. ``adapters``: cSGHMC on rank-4 low-rank adapters of every layer (``adapter=lora``, ``sampler.params=[*.lora_*]``),
   the rest frozen at the SGD weights;
4. ``full``: the whole network sampled by cSGHMC from scratch (the embedded default).

The part runs start from the SGD run's checkpoint (``model.weights``); each budget is :data:`EPOCHS` at the
scale. :func:`run_all` returns the run directories per (method, seed); :mod:`studies.part.report` tabulates them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EPOCHS", "METHODS", "REFERENCE_SEEDS", "SEEDS", "run_all", "run_dir"]

METHODS = ("sgd", "last_layer", "adapters", "full")
EPOCHS = {"full": {"sgd": 200, "last_layer": 100, "adapters": 100, "full": 200},
          "smoke": {"sgd": 10, "last_layer": 8, "adapters": 8, "full": 10}}
CYCLES = {"full": 4, "smoke": 2}
SEEDS = {"full": "0,1,2,3,4,5,6,7,8,9", "smoke": "0"}  # the seeds each scale runs unless --seeds says
# the seeds whose last layer is checked against NUTS unless reference_seeds=... says (about 25 minutes each on a
# shared core: the 2010 weights of the MLP's last layer); none at smoke scale unless asked (reference_seeds=0)
REFERENCE_SEEDS = {"full": "0,1,2", "smoke": ""}


def run_dir(runs: Path, method: str, seed: int) -> Path:
    return runs / f"{method}_seed{seed}"


def overrides(method: str, seed: int, scale: str, runs: Path) -> list[str]:
    """The train.py overrides of ``method`` at ``seed`` (the part methods read the SGD run of the same seed)."""
    epochs = EPOCHS[scale][method]
    common = [f"seed={seed}", f"trainer.epochs={epochs}", "logger=csv", "trainer.progress=false",
              f"hydra.run.dir={run_dir(runs, method, seed)}"]
    if method == "sgd":
        return ["sampler=sgd", *common]
    cyclical = ["sampler=csghmc", f"sampler.cycles={CYCLES[scale]}"]
    if scale == "smoke":
        cyclical.append("sampler.samples_per_cycle=1")
    weights = f"model.weights={run_dir(runs, 'sgd', seed) / 'checkpoint.pt'}"
    if method == "last_layer":
        return [*cyclical, weights, "sampler.params=[7]", *common]
    if method == "adapters":
        return [*cyclical, weights, "adapter=lora", "sampler.params=[*.lora_*]", *common]
    return [*cyclical, *common]


def run_all(runs: Path, seeds: list[int], scale: str, methods: tuple[str, ...] = METHODS) -> dict[tuple[str, int], Path]:
    """Run every method at every seed (a finished run is kept and not run again); their run directories. Every
    command is checked as train.py checks it before the first runs (the weights each part run reads are the SGD
    run's, written by then: checked without them)."""
    import csg
    from csg.errors import CommandRefused

    for seed in seeds:
        for method in methods:
            command = [o for o in overrides(method, seed, scale, runs) if not o.startswith("model.weights=")]
            message = csg.check_command(command)
            if message is not None:
                raise CommandRefused(message, key="overrides", value=command)
    done = {}
    for seed in seeds:
        for method in methods:
            target = run_dir(runs, method, seed)
            if not (target / "metrics.json").is_file():
                csg.train(overrides(method, seed, scale, runs))
            done[method, seed] = target
    return done
