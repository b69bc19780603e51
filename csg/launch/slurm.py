"""SLURM jobs that always end in a result: what ``hydra/launcher=slurm`` adds to Hydra's submitit launcher.

Hydra's submitit launcher submits one job per sweep point and then waits in ``job.results()``: submitit's
``Job.wait`` loops until the job's result file exists or its ``SlurmInfoWatcher`` (``sacct``) calls the job
finished. Two things made that wait endless:

- a job whose run stops with our one-line error ends in ``SystemExit`` (:func:`csg.launch.cli.run_or_exit`), which
  submitit's ``process_job`` does not catch (it catches ``Exception``), so no result file is written;
- a job that dies without a result (cancelled, killed, out of memory, signalled before Python started) is seen
  by ``sacct`` only, and where SLURM keeps no accounting ``sacct`` fails on every poll ("Bypassing sacct error",
  one line per job and poll): the state stays UNKNOWN, which submitit counts as not finished.

So (``hydra_plugins/csg_slurm_launcher.py`` holds the launcher, a subclass of the submitit one):

- in the job, :func:`call_recording_exit` turns our ``SystemExit`` into :class:`JobFailed` carrying the line
  the run printed: submitit records it as the job's result. A preemption exit (submitit's requeue, or a
  checkpoint after SIGTERM / SIGUSR1 / SIGUSR2) is left alone: a requeued job comes back;
- in the driver, :func:`wait_for_jobs` replaces ``job.results()``: it reads each job's result file as soon as it
  exists, and asks ``squeue`` (never ``sacct``) whether the other jobs are still queued or running; a job that
  has left the queue without a result (after ``result_grace_s``, for a shared file system's delay), or is still
  waiting at the optional ``deadline_min``, is reported in one line naming the job, its log file and its run
  directory, and the other jobs' results are kept.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from hydra.errors import CompactHydraException

# exit statuses of a job that stopped to be requeued or preempted (it may come back): submitit's own exit after
# `scontrol requeue` (-1), and our checkpoint-then-signal exits (128 + signal, csg.engine.checkpoint.let_signal_act)
PREEMPTION_EXITS = {-1, *(128 + int(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2))}
# SLURM job states after which a job will not run again; any other state (PENDING, RUNNING, REQUEUED,
# COMPLETING, ...) means it may still write a result
FINAL_STATES = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}


class JobFailed(CompactHydraException):
    """A job's run failed or ended without a result: one line, printed by Hydra without a traceback."""


def refuse_sweep(line: str) -> NoReturn:
    """End the driver with the one line ``error: <line>`` and exit status 2, as every refusal: a sweep that cannot
    be submitted (no SLURM here, no controller answering, sbatch refusing its parameters). Hydra would add a line
    about ``HYDRA_FULL_ERROR`` to an exception; it does not catch ``SystemExit``."""
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


# -- in the job ------------------------------------------------------------------------------------------------------
class _LastLine:
    """``sys.stderr`` as it was, remembering the last line written that starts with one of ``prefixes``."""

    def __init__(self, stream, prefixes: tuple[str, ...] = ("error:", "interrupted")):
        self.stream, self.prefixes, self.line, self._partial = stream, prefixes, None, ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines[-1][-4096:]
        for line in reversed(lines[:-1]):
            if line.strip().startswith(self.prefixes):
                self.line = line.strip()
                break
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def call_recording_exit(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, with a ``SystemExit`` of a failed run raised as :class:`JobFailed`.

    submitit writes a raised ``Exception`` into the job's result file (a ``SystemExit`` it lets pass, and the
    job then has no result). The message is the run's one-line error as printed on stderr (``error: ...``),
    else the exit status. A preemption exit (:data:`PREEMPTION_EXITS`) and a clean exit (0) pass unchanged."""
    original = sys.stderr
    recorder = sys.stderr = _LastLine(original)
    try:
        return function(*args, **kwargs)
    except SystemExit as stop:
        code = stop.code
        if code is None or code == 0 or code in PREEMPTION_EXITS:
            raise
        raise JobFailed(recorder.line or f"the run ended with exit status {code} and no one-line error") from None
    finally:
        if sys.stderr is recorder:
            sys.stderr = original


# -- in the driver ---------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """How one job ended: ``result`` (what its task 0 returned) or ``problem`` (one line: why there is none)."""

    result: Any = None
    problem: str | None = None
    state: str | None = None  # SLURM's last word on the job, when it has left the queue without a result


class Squeue:
    """The SLURM states of jobs, from ``squeue`` (``sacct`` needs accounting, which many clusters lack)."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self.warned = False

    def states(self, job_ids: Sequence[str]) -> dict[str, str] | None:
        """{job id: state} of the jobs squeue lists (finished ones too, while SLURM remembers them); None when
        squeue cannot answer (then nothing is concluded; one warning for the whole wait)."""
        bases = sorted({job_id.split("_")[0] for job_id in job_ids})
        command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T", f"--jobs={','.join(bases)}"]
        try:
            answer = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as error:
            return self._warn(f"{type(error).__name__}: {error}")
        if answer.returncode != 0:
            if "invalid job id" in answer.stderr.lower():
                return {}  # every job listed has left SLURM's memory: none is queued or running
            return self._warn(answer.stderr.strip().splitlines()[0] if answer.stderr.strip() else
                              f"exit status {answer.returncode}")
        states = {}
        for line in answer.stdout.splitlines():
            job_id, _, state = line.strip().partition("|")
            if job_id:
                states[job_id] = state.strip().split()[0] if state.strip() else "UNKNOWN"
        return states

    def _warn(self, why: str) -> None:
        if not self.warned:
            print(f"warning: squeue cannot tell the jobs' states ({why}); waiting for their results and asking "
                  "again", file=sys.stderr, flush=True)
            self.warned = True
        return None


def _result_paths(job) -> list[Path]:
    """The result file of every task of ``job`` (a submitit Job)."""
    return [job.task(k).paths.result_pickle for k in range(job.num_tasks)]


def read_outcome(job) -> Outcome:
    """The outcome in task 0's result file (which must exist): a result, or the failure submitit recorded."""
    from submitit.core.utils import pickle_load

    kind, value = pickle_load(_result_paths(job)[0])
    if kind == "success":
        return Outcome(result=value)
    lines = [line for line in str(value).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "an error without a message"
    prefix = f"{JobFailed.__module__}.{JobFailed.__qualname__}: "
    return Outcome(problem=last[len(prefix):] if last.startswith(prefix) else last)


def wait_for_jobs(jobs: Sequence, *, grace_s: float = 30.0, deadline_min: float | None = None,
                  squeue: Squeue | None = None, poll_max_s: float = 20.0,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> list[Outcome]:
    """Wait until every job has a result, has left the queue without one, or ``deadline_min`` has passed.

    Result files are looked at every second; ``squeue`` is asked every 2 s at first, then less often (up to
    ``poll_max_s``), for all jobs at once. A job squeue no longer lists as queued or running gets ``grace_s``
    more for its result file to appear (a shared file system shows another node's file late)."""
    squeue = squeue or Squeue()
    start = clock()
    outcomes: dict[int, Outcome] = {}
    gone_since: dict[int, tuple[float, str]] = {}
    next_squeue = start
    while True:
        now = clock()
        for index, job in enumerate(jobs):
            if index in outcomes:
                continue
            paths = _result_paths(job)
            if all(path.exists() for path in paths):
                outcomes[index] = read_outcome(job)
            elif index in gone_since and now - gone_since[index][0] >= grace_s:
                state = gone_since[index][1]
                outcomes[index] = read_outcome(job) if paths[0].exists() else Outcome(
                    problem=f"ended without a result (SLURM: {state})", state=state)
        waiting = [index for index in range(len(jobs)) if index not in outcomes]
        if not waiting:
            return [outcomes[index] for index in range(len(jobs))]
        if now >= next_squeue:
            states = squeue.states([jobs[index].job_id for index in waiting])
            if states is not None:
                for index in waiting:
                    state = states.get(jobs[index].job_id)
                    if (state is None or state in FINAL_STATES) and index not in gone_since:
                        gone_since[index] = (clock(), state or "no longer listed by squeue")
                    elif state is not None and state not in FINAL_STATES:
                        gone_since.pop(index, None)  # requeued: it runs again
            next_squeue = clock() + min(poll_max_s, max(2.0, (clock() - start) / 4))
        if deadline_min is not None and clock() - start >= deadline_min * 60:
            states = squeue.states([jobs[index].job_id for index in waiting]) or {}
            for index in waiting:
                state = states.get(jobs[index].job_id, "state unknown")
                outcomes[index] = Outcome(problem=f"still {state} after deadline_min={deadline_min:g}: not waited "
                                                  f"for, left to SLURM (scancel {jobs[index].job_id} stops it)",
                                          state=state)
            return [outcomes[index] for index in range(len(jobs))]
        sleep(1.0)


def log_file(job) -> Path:
    """Task 0's error log (its output log where stderr goes there)."""
    task = job.task(0)
    return task.paths.stderr if task.paths.stderr.exists() or not task.paths.stdout.exists() else task.paths.stdout


def problem_line(job, number: int, overrides: Sequence[str], problem: str, run_dir: Path | None,
                 sweep_dir: Path, resumable: bool) -> str:
    """One line for a job without a result: the job, what happened, its log file, its run directory and (for a job
    that was stopped: ``resumable``) how to go on."""
    line = f"job {job.job_id} (#{number} {' '.join(overrides)}) {problem}; log: {log_file(job)}"
    if run_dir is None:
        return line
    if not resumable:
        return f"{line}; run directory: {run_dir}"
    again = f"the same sweep with hydra.sweep.dir={sweep_dir}"
    if any(run_dir.glob("checkpoint*.pt")):
        return f"{line}; run directory: {run_dir} (its checkpoint is kept: {again} resumes it)"
    return f"{line}; run directory: {run_dir} (no checkpoint yet: {again} runs it again)"
