"""make gpu-check (scripts/gpu_check.py) without a GPU: its CPU dry run passes every part, so that the check cannot rot
while no GPU is at hand, and the real check stops in one line where CUDA is missing."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

PARTS = ["gpu-tests", "main-device", "main-loader", "main-bf16", "main-eager", "last-layer", "lora", "two-chains",
         "resume", "torchrun", "bench-gpu", "last-layer-100"]


def _check(*arguments: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


# each kind of part once (the main-* variants, lora and two-chains are main-device's code with other overrides, each
# tested on the CPU in its own test; torchrun's part is csg-train under torchrun, which tests/engine/test_distributed.py
# and the own project's README run): in half the time of all 12 parts
DISTINCT = ["gpu-tests", "main-device", "last-layer", "resume", "bench-gpu", "last-layer-100"]


@pytest.mark.timeout(600)
def test_the_dry_run_passes_each_kind_of_part_and_writes_the_table(tmp_path):
    done = _check("--dry-run", "--out", str(tmp_path), "--parts", *reversed(DISTINCT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(tmp_path / "gpu-check.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["part"] for row in rows] == DISTINCT  # in the check's order
    assert [row["verdict"] for row in rows] == ["pass"] * len(DISTINCT), rows
    found = {row["part"]: row["found"] for row in rows}
    assert found["resume"] == "stopped and resumed vs whole: 0; two whole runs: 0"  # bit for bit on the CPU
    assert found["main-device"].startswith("2 members") and "wrote part.md" == found["last-layer-100"]
    report = (tmp_path / "gpu-check.md").read_text()
    assert report.startswith("# make gpu-check\n") and "CPU dry run" in report and "6 of 6 parts passed" in report


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the check would run")
def test_without_cuda_the_check_is_one_line_and_writes_nothing(tmp_path):
    done = _check("--out", str(tmp_path), timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: make gpu-check needs a CUDA GPU")
    assert not any(tmp_path.iterdir())


def test_a_part_out_of_time_is_listed_not_hidden(tmp_path):
    done = _check("--dry-run", "--budget-s", "1", "--out", str(tmp_path), timeout=120)
    assert done.returncode == 1
    with open(tmp_path / "gpu-check.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["part"] for row in rows] == PARTS and [row["verdict"] for row in rows] == ["not run"] * len(PARTS)
    assert rows[0]["found"].startswith("out of time:")
    assert "0 of 12 parts passed" in (tmp_path / "gpu-check.md").read_text()


@pytest.mark.parametrize("arguments, fragment", [
    (("--dry-run", "--budget-s", "-5", "--out", "OUT"), "--budget-s=-5 is not allowed: a number of seconds > 0"),
    (("--dry-run",), "--dry-run writes a CPU record: name its folder with --out"),
])
def test_a_bad_budget_or_a_dry_run_over_the_gpus_record_is_one_line_and_writes_nothing(tmp_path, arguments, fragment):
    record = ROOT / "results" / "bench" / "gpu-check.md"
    before = record.read_bytes() if record.exists() else None
    done = _check(*(str(tmp_path / "out") if a == "OUT" else a for a in arguments), timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and fragment in lines[0], done.stderr
    assert not (tmp_path / "out").exists() and (record.read_bytes() if record.exists() else None) == before


def test_its_commands_import_the_clones_csg_from_any_folder_and_a_timeout_says_where_it_was(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))  # the GPU machine: csg is not installed, its wheels are
    done = gpu_check.run([sys.executable, "-S", "-c", "import sys; print(sys.path)"], tmp_path, 30)
    assert str(ROOT) in done.stdout and str(tmp_path / "site") in done.stdout
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        gpu_check.run([sys.executable, "-c", "import time; print('at step 3', flush=True); time.sleep(30)"], tmp_path, 2)
    assert "at step 3" in stopped.value.output
