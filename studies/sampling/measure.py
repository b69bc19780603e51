"""One run of the sampling study measured as the study needs it: through :func:`csg.train` (or read back from its
folder, :class:`csg.Posterior`), its ensemble's total variation to the NUTS predictive on the whole test set and on
each of its two fixed halves (:data:`HALF_SEED`: the oracle tunes on half A, is scored on half B), its NLL on the
held-out digits no run trains or is scored on (the posterior benchmark's validation set,
:func:`studies.benchmark.tuning.validation_batches`), and what the run writes of its spread and temperatures.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from csg.paths import ROOT

__all__ = ["HALF_SEED", "REFERENCE", "halves", "measure"]

REFERENCE = ROOT / "results" / "benchmark" / "reference"
HALF_SEED = 73  # one split of the 1000 test digits into halves A and B for every run


@functools.lru_cache(maxsize=None)
def halves(examples: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """The test set's halves A and B: the indices of one seeded permutation's first and second half."""
    order = np.random.default_rng(HALF_SEED).permutation(examples)
    return np.sort(order[: examples // 2]), np.sort(order[examples // 2:])


@functools.lru_cache(maxsize=None)
def _reference(temperature: float) -> np.ndarray:
    with np.load(REFERENCE / f"mnist_mlp_T{temperature:g}.npz", allow_pickle=False) as npz:
        return npz["test_probs"].astype(np.float64)


@functools.lru_cache(maxsize=1)
def _validation():
    from studies.benchmark.tuning import validation_batches

    return validation_batches()


def measure(overrides: list[str], run_dir: Path, temperature: float) -> dict:
    """Train ``overrides`` into ``run_dir`` (unless it holds a finished run) and return its row; a chain csg stops
    as diverged is a row whose ``check`` says so."""
    import csg
    from csg.errors import DivergenceError

    if (run_dir / "metrics.json").is_file():
        posterior = csg.Posterior.load(run_dir, device="cpu")
    else:
        if run_dir.is_dir():  # the study's own run, stopped before it finished (a killed pool): run it again
            import shutil

            shutil.rmtree(run_dir)
        try:
            posterior = csg.train([*overrides, f"hydra.run.dir={run_dir}"])
        except DivergenceError as error:
            return {"check": f"stopped: {str(error).splitlines()[0][:200]}", "validation_nll": float("inf")}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    probs = posterior.predict_loader(posterior.data.test).double().cpu().numpy()
    per_example = 0.5 * np.abs(probs - _reference(temperature)).sum(axis=1)
    half_a, half_b = halves(len(per_example))
    sampling, spread = metrics.get("sampling") or {}, metrics.get("spread") or {}
    return {"members": spread.get("members"), "epochs": metrics["examples_processed"] / metrics["num_data"],
            "tv": float(per_example.mean()), "tv_a": float(per_example[half_a].mean()),
            "tv_b": float(per_example[half_b].mean()),
            "validation_nll": float(posterior.evaluate(loader=_validation(), ood_loader=False)["nll"]),
            "nll": metrics["ensemble"]["nll"], "mutual_information": spread.get("mutual_information"),
            "tv_to_average": spread.get("tv_to_average"), "effective_members": spread.get("effective_members"),
            "configurational": sampling.get("configurational"), "kinetic": sampling.get("kinetic"),
            "relaxation": sampling.get("relaxation"), "check": metrics.get("sampling_check") or ""}
