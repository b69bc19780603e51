"""Whether the launcher a command names can run here: SLURM's clients for ``hydra/launcher=slurm``.

:func:`no_slurm` is what ``train.py`` refuses before Hydra starts (:func:`csg.checks.preflight.check_command`)
and what the launcher itself refuses in another Hydra app (``hydra_plugins/csg_slurm_launcher.py``).
"""

from __future__ import annotations

__all__ = ["SLURM_CLIENTS", "no_slurm"]

SLURM_CLIENTS = ("sbatch", "srun")  # what submitit's SLURM executor runs on the driver's machine


def no_slurm(choice: str = "slurm") -> str | None:
    """The one-line refusal of ``hydra/launcher=<choice>`` on a machine without SLURM's clients on PATH (submitit
    itself stops with a RuntimeError traceback once Hydra has started), else None."""
    import shutil

    missing = [command for command in SLURM_CLIENTS if shutil.which(command) is None]
    if not missing:
        return None
    return (f"hydra/launcher={choice} is not allowed: a machine with SLURM's {' and '.join(missing)} on PATH (this "
            "one has none); leave hydra/launcher out to run the sweep's jobs here, one after another")
