#!/usr/bin/env python
"""The GPU path in one command (``make gpu-check``): every part of csg that touches a device, run on CUDA, each under
its own time limit, most important first, with a one-line verdict per part.

Parts, in order:

1. ``gpu-tests``: ``pytest -m gpu`` (the suite's GPU tests);
2. ``main-*``: the main command (``python -m csg``, what ``csg-train`` runs) on CIFAR-format data the check writes
   itself, in every data path and precision: data held on the device (compiled and captured where
   ``trainer.compile=auto`` does so), a loader with 2 workers, ``bf16-mixed``, eager (``trainer.compile=false``);
3. ``last-layer``: the last layer sampled from the weights of ``main-device``'s run; ``lora``: low-rank adapters;
4. ``two-chains``: ``sampler.chains=2`` in one process;
5. ``resume``: a run stopped by SIGTERM after its first sample (tests/gate.py: the run waits there for the signal)
   and resumed, against an uninterrupted run: the largest difference of their samples, beside the largest
   difference of two uninterrupted runs, all with ``trainer.deterministic=true``: it passes only bit for bit;
6. ``torchrun``: two processes on the machine's GPUs (``sampler.chains=2``, a process per chain); on one GPU the
   run must refuse in one line before training (NCCL takes a GPU per process);
7. ``bench-gpu``: ``scripts/bench_gpu.py`` with K = 1, 2, 4 chains (processes, vmap, streams) at its smoke size
   (the code paths on CUDA; ``make bench-gpu`` measures);
8. ``last-layer-100``: ``scripts/bench_part.py``: 100 last-layer members evaluated with the trunk once.

It installs nothing and reads no network. Without CUDA it stops at once with one line; ``--dry-run`` runs every
part on the CPU at tiny budgets (a check that every part's code runs, not a measure: ``make test`` runs it).
Each part runs under its limit or what is left of ``--budget-s``, whichever is smaller; one that would have
less than 30 s is listed as not run. Writes ``<out>/gpu-check.md`` and
``<out>/gpu-check.csv`` (part, verdict, seconds, what it found) with the machine.

    python3 scripts/gpu_check.py [--dry-run] [--budget-s 480] [--out results/bench]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MIN_PART_S = 30.0  # a part starts only with this much of the budget left (or its whole limit, if smaller)


class Check:
    """The parts' shared settings: the device, the budgets, the folder they run in, the data they read."""

    def __init__(self, dry: bool, work: Path):
        self.dry, self.work = dry, work
        self.device = "cpu" if dry else "cuda"
        self.data = work / "data"
        self.common = [f"data.root={self.data}", "data=cifar10", f"trainer.device={self.device}", "logger=none",
                       "trainer.progress=false", "data.eval_batch_size=256",
                       *(["model=small_cnn", "trainer.epochs=4", "data.batch_size=16"] if dry else
                         ["model=resnet18", "trainer.epochs=4", "data.batch_size=64"]),
                       "sampler.cycles=2", "sampler.explore=0.5", "sampler.samples_per_cycle=1", "sampler.lr0=0.05"]

    def train(self, name: str, *overrides: str, limit: float, runner: list[str] | None = None):
        """``python -m csg`` (or ``runner``) with the common overrides and ``overrides`` into ``work/name``."""
        command = [*(runner or [sys.executable, "-m", "csg"]), *self.common, *overrides,
                   f"hydra.run.dir={self.work / name}"]
        return run(command, self.work, limit)


def run(command: list[str], cwd: Path, limit: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """``command`` in a session of its own; past ``limit`` every process of it is killed (torchrun's workers too,
    not only the launcher) and ``subprocess.TimeoutExpired`` raised."""
    # the clone's csg and tests import from any folder, where csg is not installed (the GPU machine: PYTHONPATH)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": path, **(env or {})}, start_new_session=True)
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(command, limit, output=out, stderr=err) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _last_line(process: subprocess.CompletedProcess) -> str:
    """The process's one-line error where it printed one, else its last line."""
    lines = [line for line in (process.stderr + process.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error")]
    return (errors or lines or [""])[-1][:200]


def _metrics(folder: Path) -> str:
    import json

    ensemble = json.loads((folder / "metrics.json").read_text())["ensemble"]
    return f"{ensemble['num_samples']} members, error {ensemble['test_error_pct']:.1f} %, NLL {ensemble['nll']:.3f}"


def _run_part(check: Check, name: str, overrides: tuple[str, ...], limit: float) -> tuple[str, str]:
    done = check.train(name, *overrides, limit=limit)
    if done.returncode != 0:
        return "fail", _last_line(done)
    return "pass", _metrics(check.work / name)


def _samples(folder: Path) -> list[dict]:
    """The run's samples, as its manifest records them (read weights-only)."""
    from csg.engine.samples import SampleStore

    store = SampleStore(folder / "samples")
    return [store.state_of(path) for path in store.paths()]


def _largest_difference(first: Path, second: Path) -> float:
    pairs = list(zip(_samples(first), _samples(second), strict=True))
    return max(float((a[k].double() - b[k].double()).abs().max())
               for a, b in pairs for k in a if a[k].is_floating_point())


def part_resume(check: Check, limit: float) -> tuple[str, str]:
    from tests import gate

    # data held on the device: its augmentation is a function of (seed, epoch, batch), so a resume can be exact
    # (a loader with workers draws the augmentation after a mid-epoch resume anew: docs/scale-out.md)
    args = ["trainer.checkpoint.every_n_epochs=1", "data.device_resident=true", "trainer.deterministic=true"]
    for name in ("whole", "again"):
        done = check.train(name, *args, limit=limit / 5)
        if done.returncode != 0:
            return "fail", f"{name}: {_last_line(done)}"
    barrier, cut = check.work / "barrier", check.work / "cut"
    process = gate.start(barrier, ROOT / "train.py", [*check.common, *args, f"hydra.run.dir={cut}"], check.work)
    try:
        gate.signal_when_waiting(process, barrier, signal.SIGTERM, timeout=limit / 5)
        process.communicate(timeout=limit / 5)
    finally:
        if process.poll() is None:
            process.kill()
    if process.returncode != -signal.SIGTERM or not (cut / "checkpoint.pt").exists():
        return "fail", f"SIGTERM: exit {process.returncode}, checkpoint {(cut / 'checkpoint.pt').exists()}"
    resumed = check.train("cut", *args, limit=limit / 5)
    if resumed.returncode != 0 or "resumed chain 0" not in (cut / "train.log").read_text():
        return "fail", f"resume: {_last_line(resumed)}"
    stopped, twice = _largest_difference(check.work / "whole", cut), _largest_difference(check.work / "whole",
                                                                                       check.work / "again")
    # trainer.deterministic=true: bit for bit (docs/scale-out.md), so any difference fails
    found = f"stopped and resumed vs whole: {stopped:.3g}; two whole runs: {twice:.3g}"
    return ("pass" if stopped == 0 else "fail"), found


def part_torchrun(check: Check, limit: float) -> tuple[str, str]:
    import torch

    runner = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "csg"]
    done = check.train("torchrun", "sampler.chains=2", limit=limit, runner=runner)
    gpus = torch.cuda.device_count() if not check.dry else 0
    if not check.dry and gpus < 2:  # one GPU: the documented refusal, one line before training
        line = _last_line(done)
        trained = (check.work / "torchrun" / "samples").exists()
        refused = done.returncode != 0 and "trainer.device" in line and not trained
        return ("pass" if refused else "fail"), f"1 GPU, refused as documented: {line}" if refused else line
    if done.returncode != 0:
        return "fail", _last_line(done)
    return "pass", _metrics(check.work / "torchrun")


def part_script(check: Check, script: str, arguments: list[str], limit: float) -> tuple[str, str]:
    out = check.work / script
    done = run([sys.executable, str(ROOT / "scripts" / script), *arguments, "--out", str(out)], check.work, limit)
    if done.returncode != 0:
        return "fail", _last_line(done)
    written = sorted(p.name for p in out.glob("*.md"))
    return "pass", f"wrote {', '.join(written)}" if written else "ran"


def parts(check: Check) -> list[tuple[str, float, object]]:
    """(name, time limit in seconds, the part) in the order they run."""
    pytest_args = ["-m", "gpu", "-q", "-p", "no:cacheprovider", "--timeout", "300"] + ([] if check.dry else
                                                                                        ["-n", "3"])
    return [
        ("gpu-tests", 40 if check.dry else 330, lambda limit: _pytest(check, pytest_args, limit)),
        ("main-device", 60, lambda limit: _run_part(check, "main-device", ("data.device_resident=true",), limit)),
        ("main-loader", 60, lambda limit: _run_part(check, "main-loader", ("data.device_resident=false",
                                                                          "data.num_workers=2"), limit)),
        ("main-bf16", 60, lambda limit: _run_part(check, "main-bf16", ("trainer.precision=bf16-mixed",), limit)),
        ("main-eager", 60, lambda limit: _run_part(check, "main-eager", ("trainer.compile=false",), limit)),
        ("last-layer", 60, lambda limit: _run_part(check, "last-layer", (
            f"model.weights={check.work / 'main-device' / 'checkpoint.pt'}",
            f"sampler.params=[{'9' if check.dry else 'linear'}]"), limit)),
        ("lora", 60, lambda limit: _run_part(check, "lora", ("adapter=lora", "sampler.params=[*.lora_*]"), limit)),
        ("two-chains", 60, lambda limit: _run_part(check, "two-chains", ("sampler.chains=2",), limit)),
        ("resume", 150, lambda limit: part_resume(check, limit)),
        ("torchrun", 90, lambda limit: part_torchrun(check, limit)),
        ("bench-gpu", 150, lambda limit: part_script(check, "bench_gpu.py", (
            ["--device", "cpu", "--smoke", "--model", "mlp", "--epochs", "1", "--chains", "1", "2", "--processes",
             "1"] if check.dry else
            ["--smoke", "--epochs", "1", "--chains", "1", "2", "4", "--processes", "1", "4"]), limit)),
        ("last-layer-100", 90, lambda limit: part_script(check, "bench_part.py", ["--rounds", "1", *(
            ["--smoke"] if check.dry else ["--device", "cuda"])], limit)),
    ]


PART_NAMES = ("gpu-tests", "main-device", "main-loader", "main-bf16", "main-eager", "last-layer", "lora", "two-chains",
              "resume", "torchrun", "bench-gpu", "last-layer-100")


def _pytest(check: Check, arguments: list[str], limit: float) -> tuple[str, str]:
    done = run([sys.executable, "-m", "pytest", *arguments], ROOT, limit,
               {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    summary = _last_line(done).strip("= ")
    if check.dry:  # on the CPU every gpu test skips: collected and skipped is the dry run's pass
        return ("pass" if done.returncode in (0, 5) and "skipped" in summary else "fail"), summary
    return ("pass" if done.returncode == 0 and "passed" in summary else "fail"), summary


def machine(dry: bool) -> str:
    import torch

    where = "CPU dry run" if dry else f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return (f"{where}, torch {torch.__version__}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"commit {commit.stdout.strip() or 'unknown'}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="every part on the CPU at tiny budgets")
    parser.add_argument("--budget-s", type=float, default=480.0, help="the whole check's time (default 8 minutes)")
    parser.add_argument("--out", type=Path, default=None, help="the record's folder (default results/bench; a "
                        "--dry-run must name its own: that folder holds the GPU's record)")
    parser.add_argument("--parts", nargs="+", metavar="PART", choices=PART_NAMES,
                        help="only these parts (default: all), in the check's order: " + ", ".join(PART_NAMES))
    args = parser.parse_args(argv)
    if not args.budget_s > 0:
        print(f"error: --budget-s={args.budget_s:g} is not allowed: a number of seconds > 0", file=sys.stderr)
        return 2
    if args.dry_run and args.out is None:
        print("error: --dry-run writes a CPU record: name its folder with --out (make gpu-check DRY=1 writes "
              "build/gpu-check; results/bench/gpu-check.md holds the GPU's record)", file=sys.stderr)
        return 2
    args.out = args.out or ROOT / "results" / "bench"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("error: make gpu-check needs a CUDA GPU (torch.cuda.is_available() is False here); "
              "--dry-run runs every part on the CPU", file=sys.stderr)
        return 2
    from csg.data.cifar import write_stand_in

    started, rows = time.monotonic(), []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        check = Check(args.dry_run, Path(folder))
        write_stand_in(check.data, train=256 if check.dry else 4096, test=64 if check.dry else 1024)
        for name, limit, part in parts(check):
            if args.parts and name not in args.parts:
                continue
            left = args.budget_s - (time.monotonic() - started)
            if left < min(limit, MIN_PART_S):  # each part gets its limit, or what is left of the budget
                rows.append((name, "not run", 0.0, f"out of time: {left:.0f} s left of {args.budget_s:.0f}"))
                continue
            begun, limit = time.monotonic(), min(limit, left)
            try:
                verdict, found = part(limit)
            except subprocess.TimeoutExpired as stopped:  # where it was: its last line
                last = [line for line in f"{stopped.stderr or ''}{stopped.output or ''}".splitlines() if line.strip()]
                verdict, found = "timeout", f"stopped at its limit of {limit:.0f} s" + (
                    f"; last: {last[-1][:120]}" if last else "")
            except Exception as error:  # noqa: BLE001 - a part's failure is its verdict; the others still run
                first = str(error).splitlines()[0][:160] if str(error) else ""
                verdict, found = "fail", f"{type(error).__name__}: {first}"
            rows.append((name, verdict, time.monotonic() - begun, found))
            print(f"{name}: {verdict} ({rows[-1][2]:.0f} s) {found}", flush=True)
    write(args.out, machine(args.dry_run), rows)
    return 0 if all(verdict == "pass" for _, verdict, _, _ in rows) else 1


def write(out: Path, where: str, rows: list[tuple[str, str, float, str]]) -> None:
    from csg.io.atomic import atomic_write_text
    from csg.reporting import markdown_table

    out.mkdir(parents=True, exist_ok=True)
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(["part", "verdict", "seconds", "found"])
    writer.writerows([(name, verdict, f"{seconds:.1f}", found) for name, verdict, seconds, found in rows])
    atomic_write_text(out / "gpu-check.csv", table.getvalue())
    passed = sum(verdict == "pass" for _, verdict, _, _ in rows)
    lines = [f"# make gpu-check\n", f"{where}. {passed} of {len(rows)} parts passed.\n"]
    lines += markdown_table(["part", "verdict", "seconds", "found"],
                            [[name, verdict, f"{seconds:.1f}", found.replace("|", "/")]
                             for name, verdict, seconds, found in rows], align="llrl")
    atomic_write_text(out / "gpu-check.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
