"""The bandit's reward model and agents: P chains of a 2 x 100 ReLU network under one update rule.

Every agent predicts the reward of both actions with the average over its P chains' current networks
(and, for MC dropout, over several dropout masks) and takes the best action; EpsGreedy explores at rate
epsilon. Training fits the reward of the action taken (squared error) on mini-batches of the data buffer;
each chain's gradient is that of its own mean loss. The update rules are :mod:`csg.samplers`: SGLD at
temperature 0 (ConstSGD, Dropout), RMSprop as PSGLD at temperature 0 (EpsGreedy), PSGLD (pSGLD) and
:class:`csg.samplers.contour.ContourPSGLD` with one theta per chain group (pCSGLD: one chain; pICSGLD: P
chains sharing theta, ICSGLD Eq. 16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from csg.samplers import PSGLD, SGLD
from csg.samplers.contour import ContourPSGLD, EnergyPartition


class ChainMLP(nn.Module):
    """``chains`` independent networks features -> hidden -> hidden -> outputs (ReLU), evaluated with batched matmuls."""

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
        """(batch, features) -> (chains, batch, outputs)."""
        h = x.expand(self.weights[0].shape[0], *x.shape)
        for layer, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if layer < len(self.weights) - 1:
                h = torch.relu(h)
                if self.dropout > 0:
                    keep = torch.rand(h.shape, generator=dropout_generator) >= self.dropout
                    h = h * keep / (1.0 - self.dropout)
        return h


@dataclass
class AgentSpec:
    """One agent of the bandit table (configs/bandit/mushroom.yaml: ``agents``)."""

    name: str
    update: str                 # sgld | psgld
    chains: int = 4
    iterations: int = 16        # training iterations per step of the bandit
    lr: float = 1e-3            # on the mean squared error
    temperature: float = 0.0
    lr_decay: float = 1.0       # lr x this after every bandit step
    epsilon: float = 0.0
    dropout: float = 0.0
    masks: int = 1              # dropout masks averaged per prediction
    contour: dict[str, Any] | None = None  # {"interacting": bool, "sa_step": float}
    alpha: float = 0.99         # RMSprop's average of squared gradients: the paper's preconditioner learning rate 0.01
    eps: float = 1e-3           # RMSprop's regularizer lambda in G = 1 / (lambda + sqrt(V)) (Appendix D.3: 0.001)


class Agent:
    def __init__(self, spec: AgentSpec, features: int, *, hidden: int, capacity: int, partition: dict[str, Any],
                 seed: int):
        self.spec = spec
        torch.manual_seed(seed)
        self.model = ChainMLP(spec.chains, features, hidden, 2, spec.dropout)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.capacity = capacity
        self.partition = None
        params = self.model.parameters()
        common = dict(lr=spec.lr, num_data=capacity, temperature=spec.temperature,
                      generator=torch.Generator().manual_seed(seed + 2))
        rmsprop = dict(alpha=spec.alpha, eps=spec.eps)
        if spec.contour is not None:
            groups = 1 if spec.contour.get("interacting", True) else spec.chains
            omega = float(spec.contour["sa_step"])
            self.partition = EnergyPartition(capacity * float(partition["low"]), capacity * float(partition["width"]),
                                             int(partition["partitions"]), zeta=float(partition["zeta"]),
                                             groups=groups, sa_step=lambda k: omega)
            self.sampler = ContourPSGLD(params, partition=self.partition, chains=spec.chains, **common, **rmsprop)
        elif spec.update == "psgld":
            self.sampler = PSGLD(params, **common, **rmsprop)
        elif spec.update == "sgld":
            self.sampler = SGLD(params, **common)
        else:
            raise ValueError(f"unknown update {spec.update!r}; one of sgld, psgld")

    @torch.no_grad()
    def act(self, contexts: Tensor) -> Tensor:
        predictions = torch.stack([self.model(contexts, self.generator) for _ in range(self.spec.masks)])
        actions = predictions.mean(dim=(0, 1)).argmax(1)
        if self.spec.epsilon > 0:
            explore = torch.rand(len(actions), generator=self.generator) < self.spec.epsilon
            actions = torch.where(explore, torch.randint(0, 2, actions.shape, generator=self.generator), actions)
        return actions

    def train(self, contexts: Tensor, actions: Tensor, rewards: Tensor, batch_size: int) -> None:
        self.model.train()
        for group in self.sampler.param_groups:
            group["num_data"] = len(contexts)
        for _ in range(self.spec.iterations):
            index = torch.randint(0, len(contexts), (min(batch_size, len(contexts)),), generator=self.generator)
            predicted = self.model(contexts[index], self.generator)  # (chains, batch, 2)
            taken = predicted.gather(2, actions[index].expand(self.spec.chains, -1)[..., None]).squeeze(2)
            losses = (taken - rewards[index]).pow(2).mean(1)  # each chain's mean squared error
            self.sampler.zero_grad(set_to_none=True)
            losses.sum().backward()
            if self.partition is not None:
                self.sampler.step(energy=self.capacity * losses.detach())
            else:
                self.sampler.step()
        for group in self.sampler.param_groups:
            group["lr"] *= self.spec.lr_decay
