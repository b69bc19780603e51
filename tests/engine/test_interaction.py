"""Chains that interact inside train.py: ICSGHMC's shared theta, reSGHMC's swaps, the variance-reduced energy."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from csg.engine import distributed
from csg.data.bundle import EpochBatches, InMemoryDataset, InMemoryLoader
from csg.evaluation.weights import importance_weights
from csg.engine.interaction import ChainCollectives, ControlVariate, EnergyEstimator, ReplicaExchange
from tests.engine.test_distributed import _torchrun

SHORT = ["trainer.epochs=4", "sampler.samples_per_cycle=2", "sampler.chains=2", "trainer.progress=false"]  # csv logger


def _loader(n=256, batch=32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 5, generator=generator), torch.randint(0, 3, (n,), generator=generator)
    loader = InMemoryLoader(InMemoryDataset(x, y), EpochBatches(n, batch, shuffle=True, seed=seed))
    return loader


def test_control_variate_makes_the_energy_exact_at_its_snapshot_and_less_noisy_near_it():
    torch.manual_seed(0)
    model, loader = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)), _loader()
    collectives = ChainCollectives(distributed.Layout(), torch.device("cpu"))
    cv = ControlVariate(every_epochs=1, start_epoch=0)
    plain, reduced = EnergyEstimator(256, collectives), EnergyEstimator(256, collectives, cv)
    cv.refresh(model, loader, 0, 256, collectives, contextlib.nullcontext)
    full = cv.full_energy

    def energies(estimator):
        loader.set_epoch(1)
        return torch.stack([estimator(F.cross_entropy(model(x), y).detach(), x, y, contextlib.nullcontext)
                            for x, y in loader])

    at_snapshot = energies(reduced)
    assert torch.allclose(at_snapshot, torch.full_like(at_snapshot, full), rtol=0, atol=1e-9)
    with torch.no_grad():  # move a little away from the snapshot: the control variate still removes most noise
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    noisy, corrected = energies(plain), energies(reduced)
    assert corrected.var() < 0.2 * noisy.var()
    assert abs(corrected.mean() - noisy.mean()) < 3 * noisy.std() / math.sqrt(len(noisy))  # same expectation


def test_replica_exchange_swaps_rungs_with_the_metropolis_probability():
    """Two chains, energies fixed: rung swaps happen at rate min(1, S) and move the temperatures along."""

    class Fixed:
        def __init__(self, energies):
            self.collectives, self.values = self, torch.tensor(energies, dtype=torch.float64)

        def gather_chains(self, value):
            return self.values.clone()

    # chain 0 (rung 0, T = 1) has the HIGHER energy: log S = (1/1 - 1/2)(10 - 8 - c) with c = 1: S = e^0.5 > 1
    replica = ReplicaExchange(Fixed([10.0, 8.0]), chain=0, temperatures=[1.0, 2.0], step_sizes=[1.0, 0.5],
                              correction=1.0, swap_every=1, seed=0)
    replica.energy = torch.tensor(10.0)
    replica.after_update(0, temperature=1.0)
    assert replica.rung == [1, 0] and replica.scales() == (0.5, 2.0)
    # the other way round: S = exp(0.5 (8 - 10 - 1)) = e^-1.5, accepted that often over many rounds
    accepted = 0
    for seed in range(4000):
        replica = ReplicaExchange(Fixed([8.0, 10.0]), chain=0, temperatures=[1.0, 2.0], step_sizes=[1.0, 1.0],
                                  correction=1.0, swap_every=1, seed=seed)
        replica.energy = torch.tensor(8.0)
        replica.after_update(0, temperature=1.0)
        accepted += replica.rung == [1, 0]
    assert abs(accepted / 4000 - math.exp(-1.5)) < 3 * math.sqrt(math.exp(-1.5) / 4000)
    replica.after_update(1, temperature=0.0)  # exploration stage: no proposal
    assert replica.proposals == [1]


def test_importance_weights_normalise_and_drop_minus_infinity():
    assert importance_weights([math.log(1.0), math.log(3.0), -math.inf]) == pytest.approx([0.25, 0.75, 0.0])
    assert importance_weights([-math.inf, -math.inf]) == [0.5, 0.5]


def test_interacting_chains_need_a_process_each(run_train):
    process, _ = run_train("sampler=icsghmc", *SHORT)
    assert process.returncode == 2
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sampler.chains" in lines[0] and "torchrun" in lines[0] and "Traceback" not in lines[0]


def test_icsghmc_over_two_processes_shares_theta_and_weights_its_samples(tmp_path):
    args = ["sampler=icsghmc", *SHORT, "sampler.energy.variance_reduction=false", "sampler.explore=0.5", "sampler.contour.low=0.0", "sampler.contour.width=0.05",
            "sampler.contour.partitions=20", "sampler.contour.zeta=5", "sampler.contour.sa_step=0.05",
            "trainer.checkpoint.every_n_epochs=1"]
    process = _torchrun(tmp_path, tmp_path / "run", *args)
    assert process.returncode == 0, process.stderr
    run_dir = tmp_path / "run"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    states = [torch.load(run_dir / f"checkpoint_chain0{c}.pt", weights_only=False)["sampler"]["contour"] for c in (0, 1)]
    # one theta for both chains, adapted (not uniform) for every sampling iteration: 2 epochs x 63 batches
    assert torch.equal(states[0]["theta"], states[1]["theta"]) and states[0]["updates"] == 126
    theta = states[0]["theta"][0]
    assert theta.max() > 2.0 / 20 and metrics["contour"]["theta"] == pytest.approx(theta.tolist())
    records = [torch.load(p) for p in sorted((run_dir / "samples").glob("chain0*/*.pt"))]
    assert len(records) == 4 and metrics["cycle_weights"] == "importance"
    expected = importance_weights([r["log_weight"] for r in records])
    assert [s["weight"] for s in metrics["per_sample"]] == pytest.approx(expected)
    assert len(set(round(w, 6) for w in expected)) > 1  # the partitions differ, so do the weights


def test_resghmc_over_two_processes_keeps_the_cold_rung_samples(tmp_path):
    # with the variance-reduced energy (refreshed at the first sampling epoch)
    args = ["sampler=resghmc", *SHORT, "sampler.explore=0.5", "sampler.replica.temperatures=[1.0,3.0]",
            "sampler.replica.step_sizes=[1.0,1.0]", "sampler.replica.correction=0.0",
            "data.recipe.temperature=1.0"]  # the rungs' factors times the T = 1 the replica settings are made for
    process = _torchrun(tmp_path, tmp_path / "run", *args)
    assert process.returncode == 0, process.stderr
    run_dir = tmp_path / "run"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    records = {str(p.relative_to(run_dir / "samples")): torch.load(p) for p in (run_dir / "samples").glob("chain0*/*.pt")}
    cold = sorted(name for name, r in records.items() if r["replica_rung"] == 0)
    assert len(records) == 4 and len(cold) == 2  # at each collection point exactly one chain holds rung 0
    assert sorted(s["file"] for s in metrics["per_sample"]) == cold
    assert all(r["temperature"] == (1.0 if r["replica_rung"] == 0 else 3.0) for r in records.values())
    rate = metrics["replica"]["swap_rates"][0]
    assert metrics["replica"]["proposals"] == [63] and 0.0 < rate < 1.0
