"""The SLURM path: the launcher's waiting (everywhere), then against a running SLURM: sweeps, tasks, time limits,
requeues, scancel, a paper target.

The tests of csg/launch/slurm.py run everywhere (fake jobs, a fake squeue). One private single-node cluster serves the
whole session for the others (tests/slurm/cluster.py: munged, slurmctld and slurmd
of Debian's slurm-wlm, as root, in a temporary folder, without accounting). Where the binaries are missing (or
this is not root) every test here is skipped with the reason; `.ci/run` installs them. Every job is a CPU job
of 1 CPU (2 for the 2-task job) with OMP_NUM_THREADS=1, and every wait has a deadline.

The requeue after a time limit needs a job that is still training when SLURM signals it, which SLURM does
on its own 30-second clock: that scenario starts first, in the background (its runs sleep in their data
loading rather than compute, and from their first checkpoint on wait there for the signal,
tests/slurm/slow_data.py), and is checked last. No test races a signal: a job waits for its signal (SLURM's,
or the test's `scancel`, after which the test opens the job's barrier).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_same_samples, doc_blocks, make_dry_run
from tests.slurm.cluster import LocalSlurm, why_not

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
REASON = why_not()


def on_the_cluster(test):
    """Marked ``slurm``, and skipped with the reason where no cluster can start here."""
    return pytest.mark.slurm(pytest.mark.skipif(REASON is not None, reason=REASON or "")(test))


# The README's commands on a local SLURM: start the cluster, (export SLURM_CONF), a sweep, a paper target, the tests
README = doc_blocks("scale-out.md", "SLURM: your cluster, and one on this machine")[1]
START, EXPORT, SWEEP, PAPER, PYTEST = README
assert START[1:3] == ["-m", "tests.slurm.cluster"] and START[-1] == "&", START
assert EXPORT[0] == "export" and SWEEP[1:3] == ["train.py", "-m"] and PAPER[0] == "make" and PYTEST[1:] == [
    "-m", "pytest", "-m", "slurm"], README
# the job shape of the README's sweep (CPU, one task, one CPU) without its sweep over samplers; a failed job is
# reported 2 s after it leaves the queue; no driver waits longer than DEADLINE_MIN (the tests' own guard against a
# hang, besides their timeouts)
DEADLINE_MIN = 4
GUARD = ["hydra.launcher.result_grace_s=2", f"hydra.launcher.deadline_min={DEADLINE_MIN}"]
CPU_JOBS = [*[w for w in SWEEP[3:] if not w.startswith("sampler=")], *GUARD]
# a few seconds a run: 2 epochs, 2 cycles of 1 sample; lr0 = 0.1 and T = 1 keep 2 processes within round-off of
# one (tests/engine/test_distributed.py says why)
TINY = ["trainer.epochs=2", "sampler.cycles=2", "sampler.explore=0", "sampler.samples_per_cycle=1", "logger=none",
        "trainer.progress=false", "data.recipe.lr0=0.1", "data.recipe.temperature=1.0"]
# runs that take wall time (each training item sleeps 10 ms) but little CPU, on the framework's item-by-item path
SLOW = ["data=custom", "data._target_=tests.slurm.slow_data.slow_blobs", "data.num_classes=3", "data.batch_size=16",
        "model=custom", "model._target_=tests.own_components.tiny_net", "sampler=csgld", "sampler.cycles=2",
        "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false", "trainer.device=cpu"]
# the requeue: a 1-minute limit and SIGUSR2 20 s before it. SLURM checks time limits every 30 s and signals up to
# 30 s early, so the signal comes 10 to 40 s after a start: not before Python has started (the hazard of a longer
# delay). The run does not race it: from its first checkpoint on, it waits in its data until the signal has come
# (+data.hold, tests/slurm/slow_data.py), then goes on and stops; the requeued job runs its 8 slow epochs (about 5 s)
REQUEUE_EPOCHS = 8
TIME_LIMIT = ("hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=20", "hydra.launcher.max_num_timeout=20")


def _env(cluster: LocalSlurm) -> dict[str, str]:
    env = {k: v for k, v in cluster.env().items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _sweep_command(sweep_dir: Path, *args: str, limit: tuple[str, ...] = ("hydra.launcher.timeout_min=10",)) -> list[str]:
    return [sys.executable, str(TRAIN), "-m", *CPU_JOBS, *limit, *args, f"hydra.sweep.dir={sweep_dir}"]


def _start(cluster: LocalSlurm, command: list[str], log: Path) -> subprocess.Popen:
    """``command`` in the background (the repository as working directory), its output into ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(command, cwd=ROOT, env=_env(cluster), stdout=out, stderr=subprocess.STDOUT, text=True)


def _finish(process: subprocess.Popen, log: Path, timeout: float) -> tuple[int, str]:
    """Wait for a background command (killed at ``timeout``); its exit status and output."""
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
        raise AssertionError(f"{process.args} still running after {timeout:.0f} s:\n{log.read_text()}") from None
    return code, log.read_text()


def _sweep(cluster: LocalSlurm, sweep_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(_sweep_command(sweep_dir, *args), cwd=ROOT, env=_env(cluster), capture_output=True,
                          text=True, timeout=timeout)


def _run_dir(sweep_dir: Path, number: int) -> Path:
    (found,) = sweep_dir.glob(f"{number}_*")
    return found


# -- the launcher's waiting, without a cluster ---------------------------------------------------------------------
def _job(folder: Path, job_id: str, tasks: int = 1):
    from submitit.slurm.slurm import SlurmJob

    return SlurmJob(folder=folder / ".submitit" / "%j", job_id=job_id, tasks=tuple(range(tasks)))


def _result(job, value, kind: str = "success", task: int = 0) -> None:
    from submitit.core.utils import cloudpickle_dump

    path = job.task(task).paths.result_pickle
    path.parent.mkdir(parents=True, exist_ok=True)
    cloudpickle_dump((kind, value), path)


class FakeSqueue:
    """squeue's answers in turn (the last one repeated); a fake clock that sleeping advances."""

    def __init__(self, *answers):
        self.answers, self.calls, self.now = list(answers), 0, 0.0

    def states(self, job_ids):
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_run_s_one_line_error_becomes_the_job_s_recorded_failure(capsys):
    from csg.launch.slurm import JobFailed, call_recording_exit

    def fails(code, line=None):
        if line:
            print(line, file=sys.stderr)
        raise SystemExit(code)

    with pytest.raises(JobFailed, match="^error: training loss became nan in epoch 1$"):
        call_recording_exit(fails, 1, "error: training loss became nan in epoch 1")
    with pytest.raises(JobFailed, match="exit status 2 and no one-line error"):
        call_recording_exit(fails, 2)
    for code in (-1, 128 + 15, 128 + 12, 0):  # requeued by submitit, stopped by a signal (may come back), done
        with pytest.raises(SystemExit):
            call_recording_exit(fails, code, "stopped by SIGTERM after saving a checkpoint")
    assert sys.stderr is not None and "error: training loss" in capsys.readouterr().err  # the line still printed
    assert call_recording_exit(lambda x: x + 1, 1) == 2


def test_the_wait_reads_results_and_reports_jobs_that_left_the_queue_without_one(tmp_path):
    from csg.launch.slurm import wait_for_jobs

    done, failed, cancelled, requeued = (_job(tmp_path, f"7_{k}") for k in range(4))
    _result(done, "finished")
    _result(failed, "Traceback ...\ncsg.launch.slurm.JobFailed: error: a bad value", kind="error")
    # squeue: 7_2 has been cancelled; 7_3 is not listed at first (between its requeue and its return), then pending,
    # then running: not reported after the 5 s of grace, but read when its result comes (at 20 s)
    squeue = FakeSqueue({"7_2": "CANCELLED"}, {"7_2": "CANCELLED", "7_3": "PENDING"},
                        {"7_2": "CANCELLED", "7_3": "RUNNING"})

    def late_result(seconds):  # 7_3 writes its result 20 s into the wait
        squeue.sleep(seconds)
        if squeue.now >= 20 and not requeued.task(0).paths.result_pickle.exists():
            _result(requeued, "after a requeue")

    outcomes = wait_for_jobs([done, failed, cancelled, requeued], grace_s=5, squeue=squeue, clock=squeue.clock,
                             sleep=late_result)
    assert [o.result for o in outcomes] == ["finished", None, None, "after a requeue"]
    assert outcomes[1].problem == "error: a bad value" and outcomes[1].state is None
    assert outcomes[2].problem == "ended without a result (SLURM: CANCELLED)" and outcomes[2].state == "CANCELLED"
    assert 5 <= squeue.now < 30


def test_a_job_of_several_tasks_is_read_from_task_0_once_it_has_left_the_queue(tmp_path):
    from csg.launch.slurm import wait_for_jobs

    job = _job(tmp_path, "8", tasks=2)
    _result(job, "rank 0's")  # rank 1 was killed without a result
    squeue = FakeSqueue({"8": "RUNNING"}, {})
    (outcome,) = wait_for_jobs([job], grace_s=3, squeue=squeue, clock=squeue.clock, sleep=squeue.sleep)
    assert outcome.result == "rank 0's" and outcome.problem is None


def test_the_wait_ends_at_its_deadline_and_names_the_jobs_left_waiting(tmp_path):
    from csg.launch.slurm import wait_for_jobs

    job = _job(tmp_path, "9_0")
    squeue = FakeSqueue({"9_0": "PENDING"})
    (outcome,) = wait_for_jobs([job], deadline_min=0.5, squeue=squeue, clock=squeue.clock, sleep=squeue.sleep)
    assert outcome.problem == ("still PENDING after deadline_min=0.5: not waited for, left to SLURM (scancel 9_0 "
                               "stops it)")
    assert 30 <= squeue.now <= 32
    assert squeue.calls <= 12  # squeue asked every 2 s at first, then less often


def test_squeue_that_cannot_answer_is_one_warning_for_the_whole_wait(tmp_path, monkeypatch, capsys):
    from csg.launch.slurm import Squeue

    fake = tmp_path / "squeue"
    fake.write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    squeue = Squeue()
    assert [squeue.states(["3_0"]) for _ in range(3)] == [None, None, None]
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: squeue cannot tell the jobs' states (squeue: error: Unable to contact")
    fake.write_text("#!/bin/sh\nprintf '3_0|RUNNING\\n3_1|CANCELLED\\n'\n")
    assert squeue.states(["3_0", "3_1"]) == {"3_0": "RUNNING", "3_1": "CANCELLED"}
    fake.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    assert squeue.states(["3_0"]) == {}  # forgotten by SLURM: neither queued nor running


# -- the cluster and what runs in the background ------------------------------------------------------------------
def _python(words: list[str]) -> list[str]:
    """The README's ``.venv/bin/python`` as this test's interpreter (which may be another environment's)."""
    assert words[0] == ".venv/bin/python", words
    return [sys.executable, *words[1:]]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The README's ``python -m tests.slurm.cluster --nodes 2 --root ... &`` in a temporary folder, until the session
    ends (SIGTERM: it cancels the jobs and stops its daemons). Two nodes where this host has two names
    (tests/slurm/cluster.py: node_names), else one."""
    root = tmp_path_factory.mktemp("slurm")
    words = _python(START[:-1])
    words[words.index("--root") + 1] = str(root)
    log = root.parent / "cluster.log"
    with open(log, "w") as out:
        process = subprocess.Popen(words, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 90
    while f"export SLURM_CONF={root / 'slurm.conf'}" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the README's cluster did not start:\n{log.read_text()}")
        time.sleep(0.3)
    handle = LocalSlurm(root, nodes=int(words[words.index("--nodes") + 1]))  # the running cluster's commands
    try:
        yield handle
    finally:
        process.terminate()
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture(autouse=True)
def _no_job_left(request, tmp_path):
    """A test that fails leaves none of its jobs behind (those whose submitit folder is in its tmp_path)."""
    yield
    if REASON is None and "cluster" in request.fixturenames:
        cluster = request.getfixturevalue("cluster")
        for job in {path.name for path in tmp_path.glob("**/.submitit/[0-9]*")} & set(cluster.jobs()):
            cluster.run("scancel", job, check=False)


class Scenario:
    """The time-limit run on the cluster and the same run uninterrupted on this machine, both in the background."""

    def __init__(self, cluster: LocalSlurm, folder: Path):
        self.cluster, self.folder = cluster, folder
        args = [*SLOW, f"trainer.epochs={REQUEUE_EPOCHS}"]
        self.sweep_dir, self.reference_dir = folder / "limited", folder / "reference"
        held = [f"+data.once={self.sweep_dir}/0_*/checkpoint.pt", f"+data.hold={folder / 'signalled'}"]
        self.driver = _start(cluster, _sweep_command(self.sweep_dir, *args, *held, limit=TIME_LIMIT),
                             folder / "driver.log")
        self.reference = _start(cluster, [sys.executable, str(TRAIN), *args, f"hydra.run.dir={self.reference_dir}"],
                                folder / "reference.log")

    def job_ids(self) -> set[str]:
        return {path.name for path in (self.sweep_dir / ".submitit").glob("[0-9]*")}

    def stop(self) -> None:
        for process in (self.driver, self.reference):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        for job in self.job_ids():
            self.cluster.run("scancel", job, check=False)


@pytest.fixture(scope="module")
def requeue_scenario(cluster, tmp_path_factory):
    scenario = Scenario(cluster, tmp_path_factory.mktemp("requeue"))
    yield scenario
    scenario.stop()


@pytest.fixture(scope="module")
def paper_target(cluster, tmp_path_factory):
    """``scripts/reproduce.py table1 --scale smoke --launcher slurm --seeds 0`` at a tiny budget, in the background,
    two jobs at a time (a CPU of the cluster stays free for the other tests): (its process, its runs and output
    folders, its log)."""
    folder = tmp_path_factory.mktemp("paper")
    runs, out, log = folder / "runs", folder / "out", folder / "driver.log"
    # the README's `make table1 ...` as make spells it out (without installing), at TINY's budget
    dry = make_dry_run(*PAPER[1:])
    assert dry.returncode == 0, dry.stderr
    expanded = dry.stdout.strip().splitlines()
    assert len(expanded) == 1 and "scripts/reproduce.py" in expanded[0], expanded
    command = [*_python(shlex.split(expanded[0])), "--runs", str(runs), "--out", str(out), *TINY, *GUARD,
               "hydra.launcher.array_parallelism=2"]
    process = _start(cluster, command, log)
    yield process, runs, out, log
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)
    for job in {path.name for path in runs.glob("**/.submitit/[0-9]*")} & set(cluster.jobs()):
        cluster.run("scancel", job, check=False)


@pytest.fixture(scope="module")
def one_process_sweep(cluster, tmp_path_factory, requeue_scenario):
    """The README's two-point sweep through hydra/launcher=slurm (cSGLD, SGLD): (the finished process, its folder).
    The first test asks for it: the requeue scenario starts with it."""
    sweep_dir = tmp_path_factory.mktemp("sweep") / "runs"
    points = [w for w in SWEEP[3:] if w.startswith("sampler=")]  # the README's sweep, at TINY's budget
    return _sweep(cluster, sweep_dir, *TINY, *points), sweep_dir


# -- the tests ------------------------------------------------------------------------------------------------------
@on_the_cluster
def test_a_sweep_runs_one_job_per_point_each_with_its_metrics(cluster, one_process_sweep):
    process, sweep_dir = one_process_sweep
    assert process.returncode == 0, process.stderr
    metrics = sorted(sweep_dir.glob("*/metrics.json"))
    assert [path.parent.name for path in metrics] == ["0_csgld_mnist5k_seed0", "1_sgld_mnist5k_seed0"]
    assert [json.loads(path.read_text())["ensemble"]["num_samples"] for path in metrics] == [2, 1]  # SGLD: the last
    jobs = sorted(path.name for path in (sweep_dir / ".submitit").glob("[0-9]*_*"))
    assert len(jobs) == 2 and all(re.fullmatch(r"\d+_[01]", job) for job in jobs), jobs  # one array task per point
    # this cluster keeps no accounting (sacct fails), and the driver never asks it: no line about it
    assert cluster.run("sacct", check=False).returncode != 0
    assert "sacct" not in process.stdout + process.stderr


@on_the_cluster
def test_a_job_of_two_tasks_gives_the_samples_of_one_process(cluster, one_process_sweep, tmp_path):
    one_process, one_dir = one_process_sweep
    assert one_process.returncode == 0, one_process.stderr
    process = _sweep(cluster, tmp_path, *TINY, "sampler=sgld", "hydra.launcher.tasks_per_node=2")
    assert process.returncode == 0, process.stderr
    run_dir = _run_dir(tmp_path, 0)
    assert_same_samples(_run_dir(one_dir, 1), run_dir, atol=1e-5)  # the README's tolerance
    assert json.loads((run_dir / "metrics.json").read_text())["processes"] == 2  # two tasks joined by gloo
    (job,) = (tmp_path / ".submitit").glob("[0-9]*")
    assert sorted(p.name for p in job.glob("*_result.pkl")) == [f"{job.name}_0_result.pkl", f"{job.name}_1_result.pkl"]


@on_the_cluster
def test_a_job_on_two_nodes_gives_the_samples_of_one_process(cluster, one_process_sweep, tmp_path):
    if len(cluster.nodes) < 2:
        pytest.skip("this host has one name that resolves to it, so the test cluster has one node")
    one_process, one_dir = one_process_sweep
    assert one_process.returncode == 0, one_process.stderr
    process = _sweep(cluster, tmp_path, *TINY, "sampler=sgld", "hydra.launcher.nodes=2")
    assert process.returncode == 0, process.stderr
    run_dir = _run_dir(tmp_path, 0)
    assert_same_samples(_run_dir(one_dir, 1), run_dir, atol=1e-5)
    assert json.loads((run_dir / "metrics.json").read_text())["processes"] == 2
    (job,) = (tmp_path / ".submitit").glob("[0-9]*")
    logs = "".join(path.read_text() for path in job.glob("*_log.out"))
    assert "node=0(2)" in logs and "node=1(2)" in logs, logs  # one task on each node (submitit's JobEnvironment)


@on_the_cluster
def test_a_run_that_fails_is_one_line_and_the_other_runs_are_kept(cluster, tmp_path):
    # lr0 = 1e12 makes the loss NaN in the first epoch: the run stops with its one-line error (exit status 1)
    process = _sweep(cluster, tmp_path, *TINY, "sampler=sgld", "sampler.lr0=0.1,1e12")
    assert process.returncode == 1, process.stderr
    assert (_run_dir(tmp_path, 0) / "metrics.json").exists()  # the other run finished and is kept
    lines = [line for line in process.stderr.splitlines() if line.startswith("job ")]
    assert len(lines) == 1, process.stderr
    (job,) = (tmp_path / ".submitit").glob("*_1")
    log = job / f"{job.name}_0_log.err"
    assert lines[0].startswith(f"job {job.name} (#1 ")
    assert "failed: error: training loss became nan" in lines[0], lines[0]
    assert f"log: {log};" in lines[0] and log.exists()
    assert f"run directory: {_run_dir(tmp_path, 1)}" in lines[0]
    assert "1 of 2 jobs failed or ended without a result" in process.stderr
    assert "Traceback" not in process.stderr


@on_the_cluster
def test_a_job_signalled_before_python_started_is_reported(cluster, tmp_path, paper_target):
    # (paper_target: the paper target starts here, in the background, beside the tests that use little CPU)
    # the batch script kills itself with SIGUSR2 before srun starts Python: no task, no result file
    process = _sweep(cluster, tmp_path, *TINY, "sampler=sgld", "hydra.launcher.setup=['kill -USR2 $$']")
    assert process.returncode == 1, process.stderr
    (line,) = [line for line in process.stderr.splitlines() if line.startswith("job ")]
    (job,) = (tmp_path / ".submitit").glob("[0-9]*")
    assert line.startswith(f"job {job.name} (#0 ") and "ended without a result (SLURM: FAILED)" in line, line
    assert f"log: {job / (job.name + '_0_log.err')}" in line
    assert f"run directory: {tmp_path / '0_sgld_mnist5k_seed0'} (no checkpoint yet" in line, line
    assert "Traceback" not in process.stderr


@on_the_cluster
def test_the_driver_stops_waiting_at_its_deadline(cluster, tmp_path):
    # a job that cannot start within the hour: the driver reports it at deadline_min (6 s), left to SLURM
    process = _sweep(cluster, tmp_path, *TINY, "sampler=sgld", "hydra.launcher.deadline_min=0.1",
                     "+hydra.launcher.additional_parameters.begin='now+3600'", timeout=120)
    assert process.returncode == 1, process.stderr
    (job,) = (tmp_path / ".submitit").glob("[0-9]*")
    assert f"job {job.name} (#0 " in process.stderr
    assert f"still PENDING after deadline_min=0.1: not waited for, left to SLURM (scancel {job.name} stops it)" in \
        process.stderr
    assert job.name in cluster.jobs()  # left queued, as the line says (the test's clean-up cancels it)


@on_the_cluster
def test_a_sweep_sbatch_refuses_is_one_line(cluster, tmp_path):
    # the launcher's default of 8 GPUs a node, on a cluster without GPUs
    command = [a for a in _sweep_command(tmp_path, *TINY, "sampler=sgld") if "gpus_per_node" not in a]
    process = subprocess.run(command, cwd=ROOT, env=_env(cluster), capture_output=True, text=True, timeout=120)
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert process.returncode == 2 and len(lines) == 1, process.stderr  # not sbatch's lines, nor Hydra's hint
    assert lines[0].startswith("error: sbatch refused the sweep's 1 job, nothing was submitted: sbatch: error: ")


@pytest.mark.skipif(any(shutil.which(c) is None for c in ("sbatch", "srun", "scontrol")),
                    reason="needs SLURM's clients")
def test_a_sweep_where_no_slurm_controller_answers_is_one_line_before_hydra_starts(tmp_path):
    # sbatch and srun installed, no controller to answer them (no slurm.conf, no DNS record of one)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_", "SLURM_"))}
    env["SLURM_CONF"] = str(tmp_path / "absent.conf")
    command = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=slurm", "seed=0,1", "logger=none",
               f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    process = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert process.returncode == 2 and len(lines) == 1, process.stderr
    assert lines[0].startswith("error: hydra/launcher=slurm is not allowed: a machine whose SLURM controller answers "
                               "(scontrol ping: "), lines[0]
    assert lines[0].endswith("submit from a node of the cluster, or leave hydra/launcher out to run the sweep's "
                             "jobs here")
    assert list(tmp_path.iterdir()) == []  # nothing written


@on_the_cluster
def test_scancel_checkpoints_and_the_same_sweep_resumes(cluster, tmp_path):
    plain = [*SLOW, "trainer.epochs=8"]
    reference = _start(cluster, [sys.executable, str(TRAIN), *plain, f"hydra.run.dir={tmp_path / 'reference'}"],
                       tmp_path / "reference.log")
    sweep_dir, barrier = tmp_path / "runs", tmp_path / "barrier"
    # from its first checkpoint on the job waits in its data until the test has cancelled it: it cannot end first
    args = [*plain, f"+data.once={sweep_dir}/0_*/checkpoint.pt", f"+data.barrier={barrier}"]
    driver = _start(cluster, _sweep_command(sweep_dir, *args), tmp_path / "first.log")
    waiting, deadline = Path(f"{barrier}.waiting"), time.monotonic() + 120
    while not waiting.exists() and time.monotonic() < deadline and driver.poll() is None:
        time.sleep(0.5)
    (job,) = (sweep_dir / ".submitit").glob("[0-9]*")
    assert waiting.exists(), f"the job never waited for its signal:\n{(tmp_path / 'first.log').read_text()}"
    cluster.run("scancel", job.name)  # SIGTERM: the run checkpoints after its step and stops
    barrier.touch()  # only now: the step that follows the signal sees it
    code, first = _finish(driver, tmp_path / "first.log", timeout=90)
    assert code == 1, first
    run_dir = _run_dir(sweep_dir, 0)
    (line,) = [line for line in first.splitlines() if line.startswith("job ")]
    assert f"job {job.name} (#0 " in line and "ended without a result (SLURM: CANCELLED)" in line, line
    assert f"run directory: {run_dir} (its checkpoint is kept: the same sweep with hydra.sweep.dir={sweep_dir} " \
           "resumes it)" in line, line
    assert "stopped by SIGTERM after saving a checkpoint" in (job / f"{job.name}_0_log.err").read_text()
    again = _sweep(cluster, sweep_dir, *args)  # the same command
    assert again.returncode == 0, again.stderr
    assert "resumed chain 0 from" in (run_dir / "train.log").read_text()
    code, output = _finish(reference, tmp_path / "reference.log", timeout=120)
    assert code == 0, output
    assert_same_samples(tmp_path / "reference", run_dir)  # bit for bit


@on_the_cluster
def test_a_paper_target_runs_on_the_cluster_and_writes_its_table(paper_target):
    process, runs, out, log = paper_target
    code, output = _finish(process, log, timeout=300)
    assert code == 0, output
    assert "hydra/launcher=slurm" in output  # the sweep went through the SLURM launcher
    # the paper's 8 methods and the 2 constant-step baselines (issue 54)
    assert len(list(runs.glob("sweep0/*/metrics.json"))) == 10
    assert len(list((runs / "sweep0" / ".submitit").glob("[0-9]*_*"))) == 10  # one job per method
    table = (out / "table1.md").read_text()
    for method in ("SGD", "cSGLD", "cSGHMC", "SGLD (constant step)"):
        assert f"| {method} |" in table


@on_the_cluster
def test_a_time_limited_job_is_signalled_requeued_and_resumed_bit_for_bit(requeue_scenario):
    scenario = requeue_scenario
    code, output = _finish(scenario.driver, scenario.folder / "driver.log", timeout=240)
    assert code == 0, output
    (job,) = scenario.job_ids()
    logs = "".join(path.read_text() for path in sorted((scenario.sweep_dir / ".submitit" / job).glob("*_log.*")))
    assert "Requeued job" in logs, logs  # signalled at least once, and requeued by submitit
    run_dir = _run_dir(scenario.sweep_dir, 0)
    assert "resumed chain 0 from" in (run_dir / "train.log").read_text()
    code, output = _finish(scenario.reference, scenario.folder / "reference.log", timeout=120)
    assert code == 0, output
    assert_same_samples(scenario.reference_dir, run_dir)  # bit for bit


@pytest.mark.parametrize("prints, sleeps, why", [
    ("Slurmctld(primary) at head is UP", 0, None),
    ("scontrol: error: s_p_parse_file: cannot stat file /x/slurm.conf: No such file or directory, retrying in 1sec "
     "up to 60sec", 60, "s_p_parse_file: cannot stat file /x/slurm.conf: No such file or directory"),
    ("", 60, "no answer in 1 s"),
    ("Slurmctld(primary) at head is DOWN", 0, "Slurmctld(primary) at head is DOWN"),
])
def test_the_controller_check_reads_scontrol_as_it_prints(tmp_path, monkeypatch, prints, sleeps, why):
    """A missing slurm.conf (scontrol retries it for 60 s) is said at once; silence, after the time limit."""
    from csg.checks.launcher import no_controller

    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\n{'echo ' + repr(prints) if prints else ':'}\nexec sleep {sleeps}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    refusal = no_controller(timeout_s=1.0)
    assert time.monotonic() - started < 10
    if why is None:
        assert refusal is None
    else:
        assert refusal.startswith(f"hydra/launcher=slurm is not allowed: a machine whose SLURM controller answers "
                                  f"(scontrol ping: {why}); "), refusal
