"""csg: cyclical stochastic-gradient MCMC for Bayesian deep learning.

Rooms of the package:

- :mod:`csg.samplers`: SGLD and SGHMC as ``torch.optim.Optimizer`` subclasses;
- :mod:`csg.schedules`: cyclical (eq. 1 of Zhang et al. 2020), decreasing and constant step sizes, and which epochs
  yield samples;
- :mod:`csg.engine.samples`: the sample files;
- :mod:`csg.engine.sampling`: one chain's stage switch and collection (``csg.Chain``, for your own loop too);
  :mod:`csg.engine.loop`: csg's loop around it; :mod:`csg.engine.step.single`: one iteration, eager, compiled or
  captured;
- :mod:`csg.evaluation`: metrics and the Bayesian model average;
- :mod:`csg.data`, :mod:`csg.models`: registries of data sets and models; :mod:`csg.components`: a user's own
  data set, model and sampler named by ``_target_`` (``data=custom``, ``model=custom``, ``sampler=custom``);
- :mod:`csg.engine.settings`: a config -> its typed settings, read once; :mod:`csg.engine.build`: the settings ->
  the run's objects; :mod:`csg.launch.run`: the life of one run (what ``train.py``
  calls); :mod:`csg.posterior.evaluate`: the finished run's samples -> metrics;
- :mod:`studies.experiments`: paper tables from runs, and the registry of every paper target;
- ``csg.train([...])`` (:mod:`csg.launch.api`): what ``train.py`` runs, from Python, returning the run's
  ``csg.Posterior`` (:mod:`csg.posterior`): its samples, weights, ``predict``, ``uncertainty``, ``evaluate``,
  ``diagnostics``, ``save`` and ``to_inference_data``; ``csg.compare([...])`` (:mod:`csg.posterior.compare`): runs
  side by side, with the shared statistics' verdicts.
- ``csg-train`` / ``python -m csg`` (:mod:`csg.__main__`, what a clone's ``train.py`` runs) and ``csg-reproduce``
  (:mod:`studies.reproduce`): the commands of an installed csg.
"""

__version__ = "0.1.0"

from csg import _torchvision_compat

_torchvision_compat.install()  # lets torchvision (and timm, torchmetrics) import next to a CPU-only torch


def process_rank() -> int:
    """This process's global rank as torchrun or SLURM set it (0 outside them): rank 0 writes the run directory."""
    import os

    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def _register_resolvers() -> None:
    """OmegaConf resolvers of the configs: which file logs, which process saves Hydra's .hydra folder."""
    from omegaconf import OmegaConf

    rank = process_rank

    OmegaConf.register_new_resolver("csg_log_file", lambda name: f"{name}.log" if rank() == 0 else f"{name}_rank{rank()}.log",
                                    replace=True)
    OmegaConf.register_new_resolver("csg_rank0", lambda value: value if rank() == 0 else None, replace=True)
    OmegaConf.register_new_resolver("csg_pending", _pending_name, replace=True)
    OmegaConf.register_new_resolver("csg_run_stamp", _run_stamp, replace=True)
    # a number times a factor: the constant-step baselines' step, half the data set's alpha_0 (configs/sampler/)
    OmegaConf.register_new_resolver("csg_times", lambda value, factor: float(value) * float(factor), replace=True)
    OmegaConf.register_new_resolver("csg_label", _label, replace=True)
    OmegaConf.register_new_resolver("csg_per_chain", _per_chain, replace=True)


def _per_chain(budget, chains, default):
    """``${csg_per_chain:${.epochs_all_chains},${sampler.chains},200}``: the epochs of each chain, ``default`` when no
    budget over all chains is given, else the budget split over the chains (a non-integer where it does not
    divide: the config check then refuses ``trainer.epochs_all_chains`` in one line)."""
    if budget is None:
        return default
    share = budget / max(int(chains), 1)
    return int(share) if float(share).is_integer() else share


def _label(group: str, *, _root_) -> str:
    """``${csg_label:data}``: the run's name for the option of ``group`` (:func:`csg.components.label`)."""
    from csg.components import label

    return label(_root_, group)


def _pending_name() -> str:
    """``.hydra.pending-<pid>``: this process's folder for Hydra's record (:func:`csg.engine.rundir.pending_name`)."""
    from csg.engine.rundir import pending_name

    return pending_name()


def _run_stamp() -> str:
    """``<date>/<time>`` for a run directory; under torchrun ``<date>/torchrun-<id>``, the same in every process."""
    import os
    from datetime import datetime

    global _STAMP
    if _STAMP is None:
        now = datetime.now()
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and run_id:
            _STAMP = f"{now:%Y-%m-%d}/torchrun-{run_id[:12]}"
        else:
            _STAMP = f"{now:%Y-%m-%d}/{now:%H-%M-%S}"
    return _STAMP


_STAMP: str | None = None


_LAZY = {"Posterior": ("csg.posterior", "Posterior"), "train": ("csg.launch.api", "train"),
         "check_command": ("csg.launch.api", "check_command"), "build": ("csg.launch.parts", "build"),
         "register_study": ("csg.launch.studies", "register_study"), "run_study": ("csg.launch.studies", "run_study"),
         "compare": ("csg.posterior.compare", "compare"), "Chain": ("csg.engine.sampling", "Chain"),
         "seed_streams": ("csg.engine.build", "seed_streams")}


def __getattr__(name: str):
    """``csg.Posterior`` (:mod:`csg.posterior`), ``csg.train`` and ``csg.check_command`` (:mod:`csg.launch.api`:
    a command run or checked as train.py does), ``csg.build`` (:mod:`csg.launch.parts`: its parts built, not
    trained), ``csg.register_study`` and ``csg.run_study`` (:mod:`csg.launch.studies`: a config key whose train.py
    jobs are a study's, and such a job run), ``csg.compare``
    (:mod:`csg.posterior.compare`), ``csg.Chain`` (:mod:`csg.engine.sampling`: a chain in your own loop) and
    ``csg.seed_streams`` (:func:`csg.engine.build.seed_streams`: a run's init, data and noise seeds), imported at
    first use: importing ``csg`` stays light (no Hydra, no models)."""
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'csg' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


_register_resolvers()
