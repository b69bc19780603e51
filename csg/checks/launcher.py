"""Whether the launcher a command names can run here: SLURM's clients, and a controller that answers them, for
``hydra/launcher=slurm``.

:func:`no_slurm` and :func:`no_controller` are what ``train.py`` refuses before Hydra starts
(:func:`csg.checks.preflight.check_command`) and what the launcher itself refuses in another Hydra app
(``hydra_plugins/csg_slurm_launcher.py``).
"""

from __future__ import annotations

__all__ = ["SLURM_CLIENTS", "no_controller", "no_slurm"]

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


def no_controller(choice: str = "slurm", timeout_s: float = 30.0) -> str | None:
    """The one-line refusal of ``hydra/launcher=<choice>`` where SLURM's clients are installed but no controller
    answers them (no ``slurm.conf`` and no DNS record of one, a controller that is down): ``scontrol ping`` must say
    a controller ``is UP``. Else sbatch prints its own error lines, and Hydra its traceback hint, after the sweep's
    folder is made. None where one answers (or ``scontrol`` is not installed: :func:`no_slurm` says so)."""
    import re
    import subprocess
    import threading

    try:
        ping = subprocess.Popen(["scontrol", "ping"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        return None
    timed_out = threading.Event()
    timer = threading.Timer(timeout_s, lambda: (timed_out.set(), ping.kill()))
    timer.start()
    lines = []
    try:
        for line in ping.stdout:  # as scontrol prints them: a missing slurm.conf it retries for 60 s, said at once
            lines.append(line.strip())
            if re.search(r"cannot stat file .* retrying", line):
                ping.kill()
                lines[-1] = line.split("error: ", 1)[-1].split(", retrying")[0].strip()
                break
        ping.wait()
    finally:
        timer.cancel()
        ping.stdout.close()
    lines = [line for line in lines if line]
    if any(re.search(r"\bis UP\b", line) for line in lines):
        return None
    why = f"no answer in {timeout_s:g} s" if timed_out.is_set() else lines[-1] if lines else \
        f"exit status {ping.returncode}"
    return (f"hydra/launcher={choice} is not allowed: a machine whose SLURM controller answers (scontrol ping: {why}); "
            "submit from a node of the cluster, or leave hydra/launcher out to run the sweep's jobs here")
