r"""Does the chain sample? The experiments that say why (issue 73), on the posterior benchmark's NUTS-referenced network.

The task is ``python train.py experiment=posterior_benchmark`` (an MLP 49-32-10, 1930 weights, on 1000 shipped
digits averaged to 7 x 7; N = 1000, 10 batches an epoch, 200 epochs = 2000 steps), at T = 1 and at the embedded
default's T = 0.2, whose NUTS references (``make reference-network``) give the posterior predictive (committed,
``results/benchmark/reference/``) and the draws themselves (``data/reference-network/draws_T<T>.npy``, out of git).
Every run goes through csg's public API (:func:`csg.train`), as a user's would, and is scored by what the run itself
writes: ``metrics.json``'s ``reference`` (total variation of the ensemble's predictive to NUTS's on the test set),
``spread`` (the members' mutual information and total variation to their average) and ``sampling`` (the
temperatures, the stages' relaxation).

Arms, each beside its control with the noise off (T = 0: the same steps, an optimiser):

Every arm takes lr0 = 0.4, the posterior benchmark's choice for cSGHMC at 200 epochs on this task (4 x the mnist5k
recipe's 0.1, which leaves the network undertrained here: 2000 steps).

- **from a NUTS draw** (a drift check, not a test of stationarity: 2000 steps cover about a twelfth of the steps the
  noise needs to cross the prior's scale, so a correct sampler barely moves): SGHMC (the recipe's momentum 0.1, so
  nearly SGLD) and SGLD at one constant step, the recipe's held sampling
  step 0.095 x lr0 = 0.038, for all 200 epochs, a sample every 10 epochs (20 samples 100 steps apart), started
  at a NUTS draw (seed s at chain s mod 4's draw 250 (s div 4 + 1)): does the chain stay as near the reference's
  predictive as the draw it starts from, with and without noise;
- **dose-response of the sampling stage**: cSGHMC at the recipe (4 cycles, 3 samples at the ends of each
  cycle's last 3 epochs) with beta in {0.8, 0.5, 0.2, 0} (the sampling stage from 20 % of each cycle to all of it)
  and the sampling stage's step ``sampler.sampling_lr`` in {0.095, 0.3} x lr0.

Seeds 0-4 (``--seeds``). The reference's own numbers (its mutual information, an exact draw's total variation to the
predictive) come from 400 of its draws, 100 evenly spaced of each chain, and at the arms' member counts (12, 20)
from 50 random subsets of them (the plug-in mutual information and a member's TV to the average shrink with the
number of members).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from csg.paths import ROOT

__all__ = ["ARMS", "Arm", "main", "nuts_draws", "reference_spread", "run_arm", "run_dose", "write_csv"]

TEMPERATURES = (1.0, 0.2)
DRAWS = Path("data") / "reference-network"
REFERENCE = ROOT / "results" / "benchmark" / "reference"
SUBSET_SIZES, SUBSETS = (12, 20), 50  # the reference's spread at the arms' member counts, over 50 random subsets
HELD = 0.095  # the recipe's held sampling step as a fraction of lr0: (1 + cos(0.8 pi)) / 2
LR0 = 0.4  # the posterior benchmark's pick for cSGHMC at 200 epochs (held-out NLL, results/benchmark/*_tuning.csv)
COMMON = ("experiment=posterior_benchmark", f"sampler.lr0={LR0}", "ood=none", "logger=none", "trainer.progress=false",
          "trainer.checkpoint.every_n_epochs=0", "trainer.threads=1")


@dataclass(frozen=True)
class Arm:
    """One arm: its name, the study part it belongs to, its overrides, whether it starts at a NUTS draw."""

    name: str
    part: str
    overrides: tuple[str, ...]
    from_draw: bool = False


def _constant(update: str) -> tuple[str, ...]:
    """One constant step, the recipe's held sampling step, for all 200 epochs (a sampling stage throughout: 20
    cycles of explore 0), a sample at each 10-epoch cycle's end: 20 samples 100 steps apart."""
    return ("sampler=csghmc", f"sampler.update_rule={update}", f"sampler.momentum={0.1 if update == 'sghmc' else 0.0}",
            f"sampler.sampling_lr={HELD}", "sampler.explore=0", "sampler.cycles=20", "sampler.samples_per_cycle=1")


ARMS = (
    Arm("SGHMC from NUTS", "from a NUTS draw", _constant("sghmc"), True),
    Arm("SGLD from NUTS", "from a NUTS draw", _constant("sgld"), True),
    *(Arm(f"cSGHMC beta {beta:g}, step {step:g} lr0", "dose", ("sampler=csghmc", f"sampler.explore={beta}",
                                                              f"sampler.sampling_lr={step}"))
      for step in (HELD, 0.3) for beta in (0.8, 0.5, 0.2, 0.0)),
)


def nuts_draws(temperature: float, folder: Path = DRAWS) -> np.ndarray:
    """The NUTS draws of ``temperature`` (chains, draws, weights), as make reference-network writes them."""
    path = Path(folder) / f"draws_T{temperature:g}.npy"
    if not path.is_file():
        raise SystemExit(f"error: {path} is missing: make reference-network writes the NUTS draws there (~20 min)")
    return np.load(path, allow_pickle=False)  # (chains, samples, D)


def _state_of(theta: np.ndarray, template: dict) -> dict:
    """The flat weights ``theta`` (the task's layout: each Linear's weight, then its bias) as a state dict."""
    import torch

    state, offset = {}, 0
    for key, value in template.items():
        state[key] = torch.from_numpy(np.asarray(theta[offset: offset + value.numel()], np.float32)).reshape(value.shape)
        offset += value.numel()
    assert offset == len(theta), "the draws' layout is not the model's"
    return state


@functools.lru_cache(maxsize=None)
def _template(temperature: float) -> dict:
    """The task's model's state dict (its keys and shapes), built once per temperature in a process."""
    import csg
    from studies.benchmark.task import command

    return csg.build(command(temperature)).model.state_dict()


def run_arm(arm: Arm, temperature: float, seed: int, noise: bool, runs: Path, draws_dir: Path = DRAWS,
            extra: tuple[str, ...] = ()) -> dict:
    """One run of ``arm`` at ``temperature`` (or T = 0 where ``noise`` is off) and ``seed``: its row (``extra``:
    more overrides, after the arm's)."""
    import torch

    import csg
    from csg.errors import DivergenceError

    folder = "".join(c if c.isalnum() or c in "._-" else "_" for c in arm.name)
    label = f"T{temperature:g}/{folder}{'' if noise else '_noise_off'}/seed{seed}"
    run_dir = runs / label
    overrides = [*COMMON, *arm.overrides, f"seed={seed}", f"sampler.temperature={temperature if noise else 0}",
                 f"evaluation.reference={REFERENCE / f'mnist_mlp_T{temperature:g}.npz'}",
                 *extra, f"hydra.run.dir={run_dir}"]
    if arm.from_draw:
        draws = nuts_draws(temperature, draws_dir)
        chain, index = seed % draws.shape[0], min(250 * (seed // draws.shape[0] + 1), draws.shape[1] - 1)
        start = run_dir.parent / f"start_seed{seed}.pt"
        start.parent.mkdir(parents=True, exist_ok=True)
        torch.save(_state_of(draws[chain, index], _template(temperature)), start)
        overrides.append(f"model.weights={start}")
    if (run_dir / "metrics.json").is_file():
        metrics = json.loads((run_dir / "metrics.json").read_text())
    else:
        try:
            metrics = csg.train(overrides).metrics
        except DivergenceError as error:  # a diverged chain is a result of its arm, not the study's end
            return {"temperature": temperature, "part": arm.part, "arm": arm.name, "noise": noise, "seed": seed,
                    "check": f"stopped: {str(error).splitlines()[0][:200]}"}
    sampling, spread = metrics["sampling"], metrics["spread"]
    return {"temperature": temperature, "part": arm.part, "arm": arm.name, "noise": noise, "seed": seed,
            "members": spread["members"], "tv": metrics["reference"]["test"]["total_variation"],
            "agreement": metrics["reference"]["test"]["agreement"], "nll": metrics["ensemble"]["nll"],
            "mutual_information": spread["mutual_information"], "tv_to_average": spread["tv_to_average"],
            "effective_members": spread["effective_members"],
            "configurational": sampling.get("configurational"), "kinetic": sampling.get("kinetic"),
            "relaxation": sampling.get("relaxation"), "gradient_evaluations": metrics["gradient_evaluations"],
            "check": metrics.get("sampling_check") or ""}


def reference_spread(temperature: float, per_chain: int = 100, draws_dir: Path = DRAWS,
                     sizes: tuple[int, ...] = SUBSET_SIZES) -> dict:
    """The reference's mutual information and an exact draw's mean total variation to the predictive, on the test
    set, from ``per_chain`` evenly spaced draws of each NUTS chain."""
    import torch

    from csg.evaluation.spread import member_spread
    from studies.benchmark.reference import predictive
    from studies.benchmark.task import load_task

    draws = nuts_draws(temperature, draws_dir)
    picked = draws[:, np.linspace(0, draws.shape[1] - 1, per_chain).astype(int)].reshape(-1, draws.shape[-1])
    task, _ = load_task(temperature)
    probs = torch.from_numpy(predictive(picked, task.test_x, task.layers))
    spread = member_spread(probs)
    row = {"temperature": temperature, "draws": len(picked), "mutual_information": spread.mutual_information,
           "tv_to_average": spread.tv_to_average, "effective_members": spread.effective_members}
    generator = np.random.default_rng(0)
    for size in sizes:  # as many exact draws as an arm has members: the plug-in MI and TV shrink with S
        subsets = [member_spread(probs[generator.choice(len(picked), size, replace=False)]) for _ in range(SUBSETS)]
        row[f"mutual_information_S{size}"] = float(np.mean([s.mutual_information for s in subsets]))
        row[f"tv_to_average_S{size}"] = float(np.mean([s.tv_to_average for s in subsets]))
    return row


def _job(job: tuple) -> dict:
    return run_arm(*job)


def run_dose(seeds, temperatures, runs: Path, out: Path, workers: int = 2, draws: Path = DRAWS) -> None:
    """The first slice's runs (:data:`ARMS` at ``temperatures`` and ``seeds``, each with its noise-off control) and
    the reference's spread, written as CSVs into ``out``."""
    references = [reference_spread(t, draws_dir=draws) for t in temperatures]
    jobs = [(arm, t, seed, noise, runs.resolve(), draws.resolve()) for t in temperatures for arm in ARMS
            for noise in (True, False) for seed in seeds]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        rows = list(pool.map(_job, jobs))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "sampling_study_runs.csv", rows)
    write_csv(out / "sampling_study_reference.csv", references)


def main(argv: list[str] | None = None) -> int:
    """The first slice alone (the whole study: :mod:`studies.sampling.run`), then the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--temperatures", default="1,0.2")
    parser.add_argument("--runs", type=Path, default=Path("runs") / "sampling-study")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sampling")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws", type=Path, default=DRAWS, help="the NUTS draws' folder (make reference-network)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the committed CSVs")
    args = parser.parse_args(argv)
    from studies.sampling.report import write_report

    if not args.report_only:
        run_dose([int(s) for s in args.seeds.split(",")], [float(t) for t in args.temperatures.split(",")],
                 args.runs, args.out, args.workers, args.draws)
    write_report(args.out)
    return 0


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as a CSV at ``path``, written atomically (the columns: every key, in order of first appearance)."""
    import io

    from csg.reporting import write_text

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue())


if __name__ == "__main__":
    raise SystemExit(main())
