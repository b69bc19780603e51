from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run where CUDA is visible and are skipped, with the reason, everywhere else."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible); run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def run_train(tmp_path):
    """Run ``python train.py <args>`` in a fresh run directory; returns (CompletedProcess, run_dir)."""

    def _run(*args: str, run_dir: Path | None = None, timeout: float = 300) -> tuple[subprocess.CompletedProcess, Path]:
        run_dir = run_dir or tmp_path / "run"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HYDRA_"))}
        env["PYTHONUNBUFFERED"] = "1"
        process = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={run_dir}", "trainer.progress=false"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        return process, run_dir

    return _run
