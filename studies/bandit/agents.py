"""The bandit's reward model and agents: P chains of a 2 x 100 ReLU network under one update rule.

The settings are the ICSGLD authors' (configs/bandit/mushroom.yaml), in their units: the energy is
U = N x the mini-batch's mean squared error with N = the buffer's capacity (4096), step sizes and the weight
decay act on U, and RMSprop averages the squares of grad(U) / batch. :class:`Agent` converts them once to
:mod:`csg.samplers`' units (gradients of the mean loss, N as ``num_data``):

- SGLD / SGD: lr x N, weight decay / N;
- pSGLD (RMSprop): with c = N / batch, their G = 1 / (lambda + sqrt(V)) on grad(U) / batch is ours on the mean
  gradient divided by c, so lr x batch, lambda / c and V_0 / c^2; the noise sqrt(2 lr T G) is then the same.

Every agent predicts the reward of both actions with the importance-weighted average of its P chains'
current networks (and, for MC dropout, over several dropout masks) and takes the best action; EpsGreedy
explores at rate epsilon. Training fits the reward of the action taken (squared error); each chain draws
its own mini-batch from the buffer without replacement, as the authors' loop does. The update rules:
SGLD at temperature 0 (ConstSGD, Dropout), RMSprop as PSGLD at temperature 0 (EpsGreedy), PSGLD (pSGLD) and
:class:`csg.samplers.contour.ContourPSGLD` with one theta per chain group (pCSGLD: one chain; pICSGLD: P
chains sharing theta, ICSGLD Eq. 16), whose importance weights are theta(J)^zeta + reg. The contour agents index
the energy as the authors' code does (configs/bandit/mushroom.yaml: ``contour.first``, ``contour.lag``): J is
floored at 1, and the multiplier and theta's update read each chain's J of the previous iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from csg.samplers import PSGLD, SGLD
from csg.samplers.contour import ContourPSGLD, EnergyPartition


THETA_EVERY = 100


class ChainMLP(nn.Module):
    """``chains`` independent networks features -> hidden -> hidden -> outputs (ReLU), evaluated with batched
    matmuls; ``dropout`` after the last hidden layer (the authors' DropoutNet), in training and prediction."""

    def __init__(self, chains: int, features: int, hidden: int = 100, outputs: int = 2, dropout: float = 0.0):
        super().__init__()
        sizes = [features, hidden, hidden, outputs]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes, sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's initialisation, per chain
            self.weights.append(nn.Parameter(torch.empty(chains, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(chains, 1, fan_out).uniform_(-bound, bound)))
        self.dropout = dropout

    def forward(self, x: Tensor, dropout_generator: torch.Generator | None = None) -> Tensor:
        """(batch, features), the same for every chain, or (chains, batch, features) -> (chains, batch, outputs)."""
        h = x if x.dim() == 3 else x.expand(self.weights[0].shape[0], *x.shape)
        last = len(self.weights) - 1
        for layer, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if layer < last:
                h = torch.relu(h)
            if layer == last - 1 and self.dropout > 0:
                keep = torch.rand(h.shape, generator=dropout_generator) >= self.dropout
                h = h * keep / (1.0 - self.dropout)
        return h


@dataclass
class AgentSpec:
    """One agent of the bandit table (configs/bandit/mushroom.yaml: ``agents``), in the authors' units."""

    name: str
    update: str                 # sgld | psgld
    chains: int = 4
    iterations: int = 16        # training iterations per step of the bandit
    lr: float = 1e-6            # on the energy N x MSE
    temperature: float = 0.0
    lr_decay: float = 1.0       # lr x this before every step's training
    epsilon: float = 0.0
    dropout: float = 0.0
    masks: int = 1              # dropout masks averaged per prediction
    contour: dict[str, Any] | None = None  # {"interacting": bool, "sa_step": float}
    alpha: float = 0.99         # RMSprop's average of squared gradients: the paper's preconditioner learning rate 0.01
    eps: float = 1e-3           # RMSprop's lambda in G = 1 / (lambda + sqrt(V)) (Appendix D.3: 0.001)
    initial_square_avg: float = 1.0  # V_0 (the authors' code: ones)


@dataclass
class Setting:
    """What the bandit shares across agents: the buffer, the weight decay and the contour partitions."""

    capacity: int = 4096        # N: the energy is N x the mean squared error
    batch_size: int = 512
    hidden: int = 100
    weight_decay: float = 1e-2  # on the energy, added to its gradient
    partition: dict[str, Any] | None = None  # low, width (energy units), partitions, zeta, overflow, warm, reg
    warm_steps: int = 0         # bandit steps before theta adapts (the authors' warm-up)


class Agent:
    def __init__(self, spec: AgentSpec, features: int, setting: Setting, *, seed: int):
        self.spec, self.setting = spec, setting
        torch.manual_seed(seed)
        self.model = ChainMLP(spec.chains, features, setting.hidden, 2, spec.dropout)
        self.generator = torch.Generator().manual_seed(seed + 1)
        n, batch = setting.capacity, setting.batch_size
        self.weight_decay = setting.weight_decay / n  # folded into the gradient, so RMSprop sees it as theirs does
        self.steps = 0
        self.partition: EnergyPartition | None = None
        self.weights = torch.ones(spec.chains)
        self.trace: list[dict[str, float]] = []   # one row per step (contour agents)
        self.thetas: list[dict[str, float]] = []  # theta of the first group every THETA_EVERY steps
        common = dict(num_data=n, temperature=spec.temperature, generator=torch.Generator().manual_seed(seed + 2))
        if spec.update == "sgld":
            if spec.contour is not None:
                raise ValueError(f"agent {spec.name}: contour agents use update psgld")
            self.sampler = SGLD(self.model.parameters(), lr=spec.lr * n, **common)
            return
        if spec.update != "psgld":
            raise ValueError(f"unknown update {spec.update!r}; one of sgld, psgld")
        c = n / batch
        rmsprop = dict(lr=spec.lr * batch, alpha=spec.alpha, eps=spec.eps / c,
                       initial_square_avg=spec.initial_square_avg / c**2)
        if spec.contour is None:
            self.sampler = PSGLD(self.model.parameters(), **common, **rmsprop)
            return
        p = setting.partition
        omega = float(spec.contour["sa_step"])
        self.reg = float(p["reg"])
        # the authors' indexing: J >= first (their clip(U / du, 1, m - 1)) and, with lag, the step and theta's update
        # read the partition of the chain's previous iteration (their self.J; the first one is the top partition)
        self.floor = float(p["low"]) + int(p.get("first", 0)) * float(p["width"])
        self.lag = bool(p.get("lag", False))
        self.previous = torch.full((spec.chains,), math.inf)
        self.partition = EnergyPartition(float(p["low"]), float(p["width"]), int(p["partitions"]),
                                         zeta=float(p["zeta"]), groups=1 if spec.contour.get("interacting", True) else spec.chains,
                                         sa_step=lambda k: omega if self.steps > setting.warm_steps else 0.0,
                                         multiplier_clip=(-math.inf, math.inf), overflow=bool(p["overflow"]))
        self.sampler = ContourPSGLD(self.model.parameters(), partition=self.partition, chains=spec.chains,
                                    **common, **rmsprop)

    @torch.no_grad()
    def act(self, contexts: Tensor) -> Tensor:
        predictions = torch.stack([self.model(contexts, self.generator) for _ in range(self.spec.masks)]).mean(0)
        weights = self.weights / self.weights.sum()
        actions = (predictions * weights[:, None, None]).sum(0).argmax(1)
        if self.spec.epsilon > 0:
            explore = torch.rand(len(actions), generator=self.generator) < self.spec.epsilon
            actions = torch.where(explore, torch.randint(0, 2, actions.shape, generator=self.generator), actions)
        return actions

    def train(self, contexts: Tensor, actions: Tensor, rewards: Tensor) -> None:
        """One bandit step's training on the buffer: ``iterations`` updates, each chain on its own mini-batch."""
        self.steps += 1
        for group in self.sampler.param_groups:
            group["lr"] *= self.spec.lr_decay
        self.model.train()
        chains, batch = self.spec.chains, min(self.setting.batch_size, len(contexts))
        energies, multipliers = [], []
        for _ in range(self.spec.iterations):
            index = torch.rand(chains, len(contexts), generator=self.generator).argsort(1)[:, :batch]
            predicted = self.model(contexts[index], self.generator)  # (chains, batch, 2)
            taken = predicted.gather(2, actions[index][..., None]).squeeze(2)
            losses = (taken - rewards[index]).pow(2).mean(1)  # each chain's mean squared error
            self.sampler.zero_grad(set_to_none=True)
            losses.sum().backward()
            with torch.no_grad():
                for p in self.model.parameters():
                    p.grad.add_(p, alpha=self.weight_decay)
            if self.partition is None:
                self.sampler.step()
                continue
            energy = self.setting.capacity * losses.detach()
            energies.append(energy)
            self._contour_step(energy)
            multipliers.append(self.sampler.last_multiplier)
        if self.partition is not None:
            self._record(torch.stack(energies), torch.stack(multipliers))

    def _contour_step(self, energy: Tensor) -> None:
        """The contour update at these energies (one per chain). The importance weights theta(J)^zeta + reg are
        those of this iteration's energies under theta before its update, as the authors' ``step`` returns them."""
        energy = energy.clamp_min(self.floor)
        self.weights = self.partition.importance_weights(self.partition.index(energy)).float() + self.reg
        stepped, self.previous = (self.previous, energy) if self.lag else (energy, energy)
        self.sampler.step(energy=stepped)

    def _record(self, energies: Tensor, multipliers: Tensor) -> None:
        """One row of the contour trace per bandit step, over its iterations and chains."""
        partition = self.partition
        j = partition.index(energies.reshape(-1))
        flattened = partition.flattened(j)
        theta = partition.theta
        step = self.steps - 1  # the bandit's step; 0: the training after the initial random plays
        self.trace.append({
            "step": step, "energy_median": float(energies.median()),
            "flattened_fraction": float(flattened.double().mean()),
            "lowest_partition": int(j.min()),
            "multiplier_min": float(multipliers.min()), "multiplier_max": float(multipliers.max()),
            "theta_max": float(theta.max()), "theta_top": float(theta[:, -1].mean()),
            "weight_max_share": float(self.weights.max() / self.weights.sum()),
        })
        if step % THETA_EVERY == 0:
            self.thetas += [{"step": step, "partition": i, "theta": float(v)} for i, v in enumerate(theta[0])]
