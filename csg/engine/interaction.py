r"""What the chains of one train.py run exchange: energies, a shared contour :math:`\theta`, replica swaps.

The loop (:func:`csg.engine.loop.train_chain`) asks an :class:`Interaction` three things per iteration:

- :meth:`Interaction.scales`: factors on the schedule's step size and temperature for this chain
  (a replica's rung of the temperature ladder; 1 otherwise);
- :meth:`Interaction.before_update`: the chain's energy estimate :math:`\hat U` of this mini-batch
  (:class:`EnergyEstimator`), and the keyword arguments of ``sampler.step`` (``energy=`` for the
  contour samplers of :mod:`csg.samplers.contour`);
- :meth:`Interaction.after_update`: replica exchange (:class:`ReplicaExchange`).

Chains are processes (``torchrun --nproc_per_node=P``, or P x the processes of one chain): only
scalars cross them, never parameters: ICSGHMC all-gathers P partition indices per step, reSGHMC P
energies per proposal, and a replica swap exchanges the temperatures (and step sizes) of two
chains, which is the same Markov chain as exchanging their positions.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from csg.engine import distributed
from csg.likelihoods import Categorical, Likelihood, own_parameters
from csg.samplers.replica import swap_log_ratio


class ChainCollectives:
    """Reductions inside one chain's processes (DDP) and gathers across the chains of a run."""

    def __init__(self, layout: distributed.Layout, device: torch.device):
        self.layout, self.device = layout, device

    def chain_sum(self, value: Tensor) -> Tensor:
        """The sum of ``value`` over the processes of this chain."""
        if self.layout.chain_size == 1:
            return value
        value = value.to(self.device).clone()
        dist.all_reduce(value, group=self.layout.group)
        return value

    def chain_mean(self, total: Tensor, count: int) -> Tensor:
        """sum(total) / sum(count) over this chain's processes (float64): a mean over the chain's whole batch."""
        pair = torch.stack([total.double(), torch.tensor(float(count), dtype=torch.float64, device=total.device)])
        pair = self.chain_sum(pair)
        return pair[0] / pair[1]

    def gather_chains(self, value: Tensor) -> Tensor:
        """One value per chain, in chain order (every process of a chain holds the same value)."""
        if not self.layout.distributed:
            return value.reshape(1)
        local = value.reshape(1).to(self.device)
        parts = [torch.empty_like(local) for _ in range(self.layout.world_size)]
        dist.all_gather(parts, local)
        return torch.cat(parts[:: self.layout.chain_size]).cpu()


class ControlVariate:
    r"""Variance-reduced energy (Deng et al. 2021, "Accelerating convergence of replica exchange SGLD
    via variance reduction"): with a snapshot :math:`\hat x` refreshed every ``every_epochs`` epochs,

    .. math::
        \tilde U(x) = \frac{N}{n}\sum_{i \in B}\big(\ell_i(x) - \ell_i(\hat x)\big) + U(\hat x),

    unbiased for :math:`U(x)` and of small variance while :math:`x` stays near :math:`\hat x`.
    :math:`U(\hat x)` is one pass over the chain's training batches; the snapshot's losses are taken
    in eval mode (as are the authors'), the current model's in training mode.
    """

    def __init__(self, every_epochs: int, start_epoch: int, likelihood: Likelihood | None = None):
        self.every_epochs, self.start_epoch = every_epochs, start_epoch
        self.likelihood = likelihood or Categorical()
        self.snapshot: nn.Module | None = None
        self.full_energy: float | None = None

    def due(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (epoch - self.start_epoch) % self.every_epochs == 0

    @torch.no_grad()
    def refresh(self, model: nn.Module, loader, epoch: int, num_data: int, collectives: ChainCollectives,
                autocast) -> None:
        module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        self.snapshot = copy.deepcopy(module).eval()
        total, count = torch.zeros((), dtype=torch.float64, device=collectives.device), 0
        loader.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(collectives.device, non_blocking=True), y.to(collectives.device, non_blocking=True)
            with autocast():
                total += self._nll(x, y).double()
            count += y.shape[0]
        self.full_energy = float(num_data * collectives.chain_mean(total, count))

    @torch.no_grad()
    def snapshot_energy(self, x: Tensor, y: Tensor, num_data: int, collectives: ChainCollectives, autocast) -> Tensor:
        with autocast():
            loss = self._nll(x, y)
        return num_data * collectives.chain_mean(loss, y.shape[0])

    def _nll(self, x: Tensor, y: Tensor) -> Tensor:
        """The snapshot's summed negative log-likelihood of a batch (its likelihood parameters included)."""
        return self.likelihood.total_nll(self.snapshot(x).float(), y, own_parameters(self.likelihood, self.snapshot))

    def state_dict(self) -> dict[str, Any]:
        snapshot = None if self.snapshot is None else {k: v.cpu() for k, v in self.snapshot.state_dict().items()}
        return {"snapshot": snapshot, "full_energy": self.full_energy}

    def load_state_dict(self, state: dict[str, Any], model: nn.Module) -> None:
        self.full_energy = state["full_energy"]
        if state["snapshot"] is not None:
            module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
            self.snapshot = copy.deepcopy(module).eval()
            self.snapshot.load_state_dict(state["snapshot"])


class EnergyEstimator:
    r""":math:`\hat U = N \cdot \bar\ell_B(x)`: N times the mean cross-entropy of the chain's mini-batch (the
    likelihood part of the energy, as in the authors' code), optionally through a :class:`ControlVariate`."""

    def __init__(self, num_data: int, collectives: ChainCollectives, control_variate: ControlVariate | None = None):
        self.num_data, self.collectives, self.control_variate = num_data, collectives, control_variate

    def __call__(self, mean_loss: Tensor, x: Tensor, y: Tensor, autocast) -> Tensor:
        energy = self.num_data * self.collectives.chain_mean(mean_loss.double() * y.shape[0], y.shape[0])
        cv = self.control_variate
        if cv is not None and cv.snapshot is not None:
            energy = energy - cv.snapshot_energy(x, y, self.num_data, self.collectives, autocast) + cv.full_energy
        return energy.detach()


class Interaction:
    """No interaction: plain chains. Subclasses add the energy-driven behaviour."""

    energy: Tensor | None = None

    def __init__(self, estimator: EnergyEstimator | None = None):
        self.estimator = estimator

    def scales(self) -> tuple[float, float]:
        """(step-size factor, temperature factor) of this chain now."""
        return 1.0, 1.0

    def on_epoch_start(self, epoch: int, start_batch: int, model: nn.Module, loader, autocast) -> None:
        cv = self.estimator.control_variate if self.estimator is not None else None
        if cv is not None and start_batch == 0 and cv.due(epoch):
            cv.refresh(model, loader, epoch, self.estimator.num_data, self.estimator.collectives, autocast)

    def before_update(self, mean_loss: Tensor, x: Tensor, y: Tensor, autocast) -> dict[str, Any]:
        if self.estimator is not None:
            self.energy = self.estimator(mean_loss, x, y, autocast)
        return {}

    def after_update(self, iteration: int, temperature: float) -> None:
        return None

    def sample_metadata(self) -> dict[str, Any]:
        return {}

    def log_values(self) -> dict[str, float]:
        return {} if self.energy is None else {"energy": float(self.energy)}

    def state_dict(self) -> dict[str, Any]:
        cv = self.estimator.control_variate if self.estimator is not None else None
        return {"control_variate": cv.state_dict() if cv is not None else None}

    def load_state_dict(self, state: dict[str, Any], model: nn.Module) -> None:
        cv = self.estimator.control_variate if self.estimator is not None else None
        if cv is not None and state.get("control_variate") is not None:
            cv.load_state_dict(state["control_variate"], model)


class ContourInteraction(Interaction):
    r"""CSGHMC / ICSGHMC: the energy goes to the contour sampler's step; a sample records its partition
    J and its log importance weight :math:`\kappa \log\theta(J)` (:math:`\kappa = \zeta` exactly; the
    authors' CIFAR code uses :math:`\kappa = 1` because :math:`\theta^\zeta` underflows for
    :math:`\zeta = 3\cdot 10^6`), :math:`-\infty` above the partitioned energy range (weight 0, as there)."""

    def __init__(self, estimator: EnergyEstimator, sampler, weight_exponent: float | None = None):
        super().__init__(estimator)
        self.sampler = sampler
        partition = sampler.partition
        self.weight_exponent = partition.zeta if weight_exponent is None else float(weight_exponent)

    def before_update(self, mean_loss, x, y, autocast) -> dict[str, Any]:
        super().before_update(mean_loss, x, y, autocast)
        return {"energy": self.energy}

    def sample_metadata(self) -> dict[str, Any]:
        partition = self.sampler.partition
        if self.energy is None:
            return {}
        j = partition.index(self.energy.reshape(1))
        above = float(self.energy) >= partition.low + partition.partitions * partition.width
        log_theta = float(partition.theta[0].clamp_min(torch.finfo(partition.theta.dtype).tiny).log()[j])
        return {"partition": int(j), "energy": float(self.energy),
                "log_weight": -math.inf if above else self.weight_exponent * log_theta}

    def log_values(self) -> dict[str, float]:
        values = super().log_values()  # the same keys at every step (the CSV logger's header is the first row's)
        if self.energy is not None:
            values["partition"] = int(self.sampler.partition.index(self.energy.reshape(1))[0])
        return values


class ReplicaExchange(Interaction):
    r"""reSGHMC / reSGLD over processes: chain c holds rung ``rung[c]`` of the ladder, at temperature
    :math:`T\,\tau_r` and step size :math:`\alpha\,\lambda_r`; every ``swap_every`` sampling iterations the
    neighbouring rungs (r, r + 1), alternately starting at r = 0 and r = 1, swap with probability
    :math:`\min(1, S)`, :math:`\log S = (1/T_r - 1/T_{r+1})(\hat U_r - \hat U_{r+1} - c)` with the fixed
    correction c in energy units (the ICSGLD paper's "correction of 4000"; :func:`csg.samplers.replica.
    swap_log_ratio`). Every process draws the same uniforms from a generator seeded by the run's seed,
    so all agree on every swap without a message beyond the P energies. Rung 0 (temperature T) is the
    one whose samples form the ensemble.
    """

    def __init__(self, estimator: EnergyEstimator, chain: int, temperatures: list[float], step_sizes: list[float],
                 correction: float, swap_every: int, seed: int):
        super().__init__(estimator)
        self.chain, self.temperatures, self.step_sizes = chain, list(temperatures), list(step_sizes)
        self.correction, self.swap_every = float(correction), int(swap_every)
        self.rung = list(range(len(temperatures)))  # rung of each chain
        self.generator = torch.Generator().manual_seed(seed)
        self.proposals = [0] * (len(temperatures) - 1)
        self.accepted = [0] * (len(temperatures) - 1)
        self.rounds = 0
        self.base_temperature = 0.0

    def scales(self) -> tuple[float, float]:
        r = self.rung[self.chain]
        return self.step_sizes[r], self.temperatures[r]

    def after_update(self, iteration: int, temperature: float) -> None:
        self.base_temperature = temperature
        if temperature <= 0 or iteration % self.swap_every:
            return
        energies = self.estimator.collectives.gather_chains(self.energy.reshape(1).double())
        chain_at = {r: c for c, r in enumerate(self.rung)}
        offset, self.rounds = self.rounds % 2, self.rounds + 1
        for low in range(offset, len(self.temperatures) - 1, 2):
            a, b = chain_at[low], chain_at[low + 1]
            t_low, t_high = temperature * self.temperatures[low], temperature * self.temperatures[low + 1]
            gap = 1.0 / t_low - 1.0 / t_high
            log_s = swap_log_ratio(energies[a], energies[b], t_low, t_high, gap * self.correction)
            uniform = torch.rand((), generator=self.generator, dtype=torch.float64)
            self.proposals[low] += 1
            if bool(uniform.log() < log_s):
                self.accepted[low] += 1
                self.rung[a], self.rung[b] = low + 1, low

    def sample_metadata(self) -> dict[str, Any]:
        r = self.rung[self.chain]  # after this iteration's swaps: the rung this position now belongs to
        return {"replica_rung": r, "temperature": self.base_temperature * self.temperatures[r],
                "energy": None if self.energy is None else float(self.energy)}

    def log_values(self) -> dict[str, float]:
        return {**super().log_values(), "replica_rung": self.rung[self.chain]}

    def swap_rates(self) -> list[float]:
        return [a / p if p else float("nan") for a, p in zip(self.accepted, self.proposals)]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rung": list(self.rung), "generator": self.generator.get_state(),
                "proposals": list(self.proposals), "accepted": list(self.accepted), "rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any], model: nn.Module) -> None:
        super().load_state_dict(state, model)
        self.rung, self.proposals, self.accepted = list(state["rung"]), list(state["proposals"]), list(state["accepted"])
        self.generator.set_state(state["generator"])
        self.rounds = int(state["rounds"])
