"""``hydra/launcher=slurm``: Hydra's submitit SLURM launcher, with jobs that never leave the driver waiting.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, so this subclass lives here (beside
csg: installed with it by its wheel, or found on ``sys.path`` through a clone's ``train.py`` folder); what it
does is in :mod:`csg.launch.slurm`. Two methods
of the upstream class change:

- ``__call__`` (runs in the job): our one-line error (``SystemExit``) becomes a result submitit records;
- ``launch`` (runs in the driver): the upstream body, except that it refuses in one line on a machine without
  SLURM's ``sbatch`` and ``srun``, or whose controller does not answer (:mod:`csg.checks.launcher`), and that it
  waits with :func:`csg.launch.slurm.wait_for_jobs` (result files and ``squeue``) instead of ``job.results()``
  (result files and ``sacct``), and reports every job without a result in one line before Hydra raises for the
  first of them.

Two settings are added to the upstream ones (``configs/hydra/launcher/slurm.yaml``): ``result_grace_s`` and
``deadline_min``.
"""

import contextlib
import io
import logging
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf, open_dict

from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]  # the folder holding hydra_plugins/: the jobs import this module


@dataclass
class CsgSlurmQueueConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.csg_slurm_launcher.SlurmLauncher"
    # seconds a job that has left the queue has for its result file to appear (a shared file system shows
    # another node's file late) before it is reported as ended without a result
    result_grace_s: float = 30.0
    # minutes after which the driver stops waiting and reports the jobs still queued or running (left to
    # SLURM); null: wait while squeue lists them
    deadline_min: Optional[float] = None


ConfigStore.instance().store(group="hydra/launcher", name="csg_submitit_slurm", node=CsgSlurmQueueConf(),
                             provider="csg")


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    def __init__(self, result_grace_s: float = 30.0, deadline_min: Optional[float] = None, **params: Any) -> None:
        super().__init__(**params)
        self.result_grace_s, self.deadline_min = float(result_grace_s), deadline_min

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        from csg.launch.slurm import call_recording_exit

        return call_recording_exit(super().__call__, *args, **kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # upstream's launch (hydra-submitit-launcher 1.2), up to its last line
        import submitit

        from csg.checks.launcher import no_controller, no_slurm
        from csg.launch.slurm import refuse_sweep

        refusal = no_slurm() or no_controller()  # train.py refuses these before Hydra starts; another app gets them here
        if refusal is not None:
            refuse_sweep(refusal)
        assert self.config is not None
        num_jobs = len(job_overrides)
        assert num_jobs > 0
        params = dict(self.params)
        # the jobs unpickle this launcher: put its folder on their PYTHONPATH (after the user's setup lines)
        params["setup"] = [*(params.get("setup") or []),
                           f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"]
        init_params = {"folder": params["submitit_folder"]}
        specific_init_keys = {"max_num_timeout"}
        init_params.update(**{f"{self._EXECUTOR}_{x}": y for x, y in params.items() if x in specific_init_keys})
        init_keys = specific_init_keys | {"submitit_folder"}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {x if x in baseparams else f"{self._EXECUTOR}_{x}": y for x, y in params.items() if x not in init_keys}
        executor.update_parameters(**params)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        job_params: List[Any] = []
        for idx, overrides in enumerate(job_overrides):
            idx = initial_job_idx + idx
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        said = io.StringIO()  # submitit prints sbatch's error lines before raising them: they go in our one line
        try:
            with contextlib.redirect_stderr(said):
                jobs = executor.map_array(self, *zip(*job_params))
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as error:
            from csg.errors import first_line

            why = [line for line in f"{said.getvalue()}\n{error}".strip().splitlines() if line.strip()]
            refuse_sweep(f"sbatch refused the sweep's {num_jobs} job{'s' if num_jobs > 1 else ''}, nothing was "
                         f"submitted: {why[-1].strip() if why else first_line(error)}")
        sys.stderr.write(said.getvalue())  # a submission that went through: whatever sbatch said, as it said it
        # instead of upstream's `return [j.results()[0] for j in jobs]`
        return self._collect(jobs, [list(o) for o in job_overrides], initial_job_idx, sweep_dir)

    def _collect(self, jobs, overrides: List[List[str]], first: int, sweep_dir: Path) -> List[JobReturn]:
        from csg.errors import describe
        from csg.launch.slurm import JobFailed, problem_line, wait_for_jobs

        outcomes = wait_for_jobs(jobs, grace_s=self.result_grace_s, deadline_min=self.deadline_min)
        returns, problems = [], []
        for offset, (job, outcome, job_overrides) in enumerate(zip(jobs, outcomes, overrides)):
            result = outcome.result
            if outcome.problem is None and isinstance(result, JobReturn) and result.status == JobStatus.COMPLETED:
                returns.append(result)
                continue
            if outcome.problem is not None:  # the job's own failure (recorded), or SLURM's word on a job without one
                problem = outcome.problem if outcome.state else f"failed: {outcome.problem}"
            elif isinstance(result, JobReturn):  # an exception in the run, kept by Hydra's run_job
                problem = f"failed: {describe(result._return_value)}"
            else:
                problem = f"returned {type(result).__name__}, not a Hydra job result"
            line = problem_line(job, first + offset, filter_overrides(job_overrides), problem,
                                self._run_dir(job_overrides, first + offset, job.job_id), sweep_dir,
                                resumable=outcome.state is not None)
            print(line, file=sys.stderr, flush=True)
            problems.append(len(returns))
            returns.append(JobReturn(overrides=job_overrides, status=JobStatus.FAILED))
        for index in problems:  # Hydra raises the first one's (after "Error executing job with overrides: ...")
            returns[index].return_value = JobFailed(
                f"{len(problems)} of {len(jobs)} jobs failed or ended without a result (each in a line above: the job, "
                f"its log, its run directory); the runs that finished are in {sweep_dir}")
        return returns

    def _run_dir(self, overrides: List[str], number: int, job_id: str) -> Optional[Path]:
        """The run directory of a sweep point (hydra.sweep.dir / hydra.sweep.subdir as the job composes them)."""
        try:
            assert self.hydra_context is not None and self.config is not None
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config.hydra.job) as job:
                job.num, job.id = number, job_id
            return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        except Exception:  # noqa: BLE001 - the line then names the log only
            return None
