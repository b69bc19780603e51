r"""Contour SGLD / SGHMC (Deng et al. 2020) and their interacting form, ICSGLD (Deng et al. 2022).

The energy range is cut into ``m`` partitions :math:`[u_{i}, u_{i+1})` of width :math:`\Delta u`; a
self-adapting vector :math:`\theta` (one value per partition, summing to 1) flattens the target
:math:`\pi(x) \propto e^{-U(x)/T}` into :math:`\varpi_\theta(x) \propto \pi(x) / \theta^\zeta(J(x))`,
:math:`J(x)` the partition of :math:`U(x)` (ICSGLD paper, Eq. 2 and Appendix B.1):

- the sampler moves along the gradient scaled by the multiplier
  :math:`1 + \zeta T\,(\log\theta(J) - \log\theta(J-1))/\Delta u` (negative where a partition is
  over-visited: the chain climbs out of it); ``difference="forward"`` takes
  :math:`\log\theta(J+1) - \log\theta(J)` instead, as the authors' script of the ICSGLD paper's Appendix
  D.5 does: the backward difference divides by :math:`\theta` of the partition below the lowest one the
  chain can reach, which vanishes, and :math:`\theta` then collapses onto that lowest partition
  (tests/samplers/test_contour_and_replica.py);
- :math:`\theta` follows stochastic approximation with the random field
  :math:`H_i(\theta, x) = \theta(J(x))\,(1\{i = J(x)\} - \theta(i))` (ICSGLD Eq. 8) and step sizes
  :math:`\omega_k`; its fixed point is :math:`\theta(i) \propto \pi(X_i)^{1/\zeta}`, the partition
  masses for :math:`\zeta = 1`;
- ICSGLD: P chains share ONE :math:`\theta`, updated with the average of their random fields (Eq. 16);
  only the P partition indices need to cross processes (``gather``), never the parameters;
- a sample :math:`x` is weighted by :math:`\theta(J(x))^\zeta` in averages (importance sampling).

The energy :math:`\hat U` (on the full-data scale, e.g. N x the mean mini-batch loss, plus the prior)
is passed to :meth:`ContourSGLD.step`. At temperature 0 (an exploration stage of train.py) the step
is the plain one (multiplier 1) and :math:`\theta` stays as it is. The multiplier and the update of :math:`\theta` both use the
partition of this step's energy (the authors' code lags the multiplier by one iteration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from csg.samplers.psgld import PSGLD
from csg.samplers.sghmc import SGHMC
from csg.samplers.sgld import SGLD


def default_sa_step(k: int) -> float:
    """The stochastic-approximation step of the authors' simulation: min(3e-3, 1 / (k^0.6 + 100))."""
    return min(3e-3, 1.0 / (k**0.6 + 100.0))


class EnergyPartition:
    r"""The partitions of the energy axis and the self-adapting :math:`\theta` of each chain group.

    Args:
        low: :math:`u_0`, the lower edge of the first partition (energies below fall into it).
        width: :math:`\Delta u`.
        partitions: m (energies above :math:`u_0 + m\Delta u` fall into the last).
        zeta: :math:`\zeta > 0`: one number, or one per group (a tensor of ``groups`` values: vectorised runs of
            several settings at once).
        groups: independent :math:`\theta` vectors; the chains are laid out group by group
            (``chains = groups x chains_per_group``), the chains of a group share their :math:`\theta`.
        sa_step: :math:`\omega_k` as a function of the update count k = 1, 2, ...
        multiplier_clip: the multiplier is clipped to this interval (the authors' code: [-5, 5]).
        difference: ``"backward"`` (the paper's Eq.: log theta(J) - log theta(J - 1)) or ``"forward"``
            (log theta(J + 1) - log theta(J), the authors' Appendix D.5 script).
        overflow: the last partition holds every energy from :math:`u_0 + (m-1)\Delta u` up and stands outside
            the flattening, as in the authors' bandit code: a chain there moves with multiplier 1, adds
            nothing to theta's update (the field is averaged over the chains below it, and is zero when
            there are none) and has importance weight 0. Without it (the default) the last partition is an
            ordinary one and only energies above :math:`u_0 + m\Delta u` get multiplier 1.
        field_exponent: a in the random field :math:`\theta(J)^a (1\{i = J\} - \theta(i))`: 1 is ICSGLD's Eq. 8
            (the default); :math:`\zeta` is the field of the original CSGLD (Deng et al. 2020), which the
            authors' CSGLD simulation notebook uses.
    """

    def __init__(self, low: float, width: float, partitions: int, *, zeta: float, groups: int = 1,
                 sa_step: Callable[[int], float] = default_sa_step, multiplier_clip: tuple[float, float] = (-5.0, 5.0),
                 difference: str = "backward", overflow: bool = False, field_exponent: float = 1.0,
                 dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None):
        per_group = isinstance(zeta, Tensor)
        if width <= 0 or partitions < 2 or groups < 1 or bool((torch.as_tensor(zeta) <= 0).any()):
            raise ValueError("need width > 0, partitions >= 2, zeta > 0 and groups >= 1")
        if per_group and zeta.numel() != groups:
            raise ValueError(f"zeta holds {zeta.numel()} values: one number, or one per group ({groups})")
        if difference not in ("backward", "forward"):
            raise ValueError(f"difference={difference!r}: backward or forward")
        self.difference, self.overflow, self.field_exponent = difference, bool(overflow), float(field_exponent)
        self.low, self.width, self.partitions = float(low), float(width), int(partitions)
        self.zeta = zeta.to(dtype).reshape(groups, 1).to(device) if per_group else float(zeta)
        self.sa_step, self.multiplier_clip = sa_step, multiplier_clip
        self.theta = torch.full((groups, partitions), 1.0 / partitions, dtype=dtype, device=device)
        self.updates = 0

    @property
    def groups(self) -> int:
        """The number of independent theta vectors (rows); chains that share one row are ICSGLD."""
        return self.theta.shape[0]

    def index(self, energy: Tensor) -> Tensor:
        """J: the partition of each energy (long tensor of the energies' shape)."""
        j = torch.floor((energy.to(self.theta.dtype) - self.low) / self.width)
        return j.clamp(0, self.partitions - 1).long()

    def flattened(self, j: Tensor) -> Tensor:
        """Whether each partition index takes part in the flattening (all but the overflow partition)."""
        return j < self.partitions - 1 if self.overflow else torch.ones_like(j, dtype=torch.bool)

    def _by_group(self, values: Tensor) -> Tensor:
        """(groups, chains per group), on theta's device (indices gathered across processes may arrive on the CPU)."""
        return values.to(self.theta.device).reshape(self.groups, -1)

    def _temperature(self, temperature) -> float | Tensor:
        """A number, or one temperature per group as a (groups, 1) column."""
        if isinstance(temperature, Tensor):
            return temperature.to(self.theta.device, self.theta.dtype).reshape(self.groups, 1)
        return temperature

    def multipliers(self, temperature: float | Tensor) -> Tensor:
        r"""The multiplier of every partition of every group, (groups, m):
        :math:`1 + \zeta T (\log\theta(i) - \log\theta(i-1)) / \Delta u` (i - 1 floored at 0), clipped;
        forward: :math:`\log\theta(i+1) - \log\theta(i)` (i + 1 capped at the last flattened partition: m - 1,
        or m - 2 with an overflow partition, whose theta no update touches); 1 in the overflow partition.
        ``temperature``: a number, or one per group (a tensor of ``groups`` values)."""
        log_theta = self.theta.clamp_min(torch.finfo(self.theta.dtype).tiny).log()
        i = torch.arange(self.partitions, device=self.theta.device)
        if self.difference == "forward":
            top = self.partitions - 1 - int(self.overflow)   # the last flattened partition: never the overflow's theta
            upper, lower = log_theta[:, (i + 1).clamp_max(top)], log_theta
        else:
            upper, lower = log_theta, log_theta[:, (i - 1).clamp_min(0)]
        factor = (1.0 + self.zeta * self._temperature(temperature) * (upper - lower) / self.width)
        factor = factor.clamp(*self.multiplier_clip)
        return torch.where(self.flattened(i), factor, torch.ones_like(factor))

    def multiplier(self, j: Tensor, temperature: float | Tensor, energy: Tensor | None = None) -> Tensor:
        """The multiplier of each chain's partition ``j`` (:meth:`multipliers`).

        With ``energy`` (the energies ``j`` came from), 1 above the partitioned range: the plain
        gradient keeps the chain from drifting off where the flattened density would be improper."""
        factor = self.multipliers(temperature).gather(1, self._by_group(j)).reshape(-1)
        if energy is None:
            return factor
        above = energy.reshape(-1).to(factor.device, factor.dtype) >= self.low + self.partitions * self.width
        return torch.where(above, torch.ones_like(factor), factor)

    def multiplier_of(self, energy: Tensor, temperature: float) -> Tensor:
        """The multiplier at these energies (:meth:`multiplier` of their partitions, 1 above the range)."""
        return self.multiplier(self.index(energy), temperature, energy)

    def random_field(self, j: Tensor) -> Tensor:
        r"""The average over each group's chains of :math:`H_i = \theta(J)^a(1\{i=J\} - \theta(i))`: (groups, m)
        (a = ``field_exponent``; with ``overflow``, over the group's chains below the overflow partition)."""
        j = self._by_group(j)
        counted = self.flattened(j).to(self.theta.dtype)
        theta_j = self.theta.gather(1, j).pow(self.field_exponent) * counted  # (groups, P)
        visits = torch.zeros_like(self.theta).scatter_add_(1, j, theta_j)  # sum_p theta(J_p) 1{i = J_p}
        return (visits - self.theta * theta_j.sum(1, keepdim=True)) / counted.sum(1, keepdim=True).clamp_min(1.0)

    def update(self, j: Tensor) -> None:
        r""":math:`\theta \leftarrow \theta + \omega_k \bar H(\theta, x)` (Eq. 16); the sum stays 1."""
        self.updates += 1
        self.theta.add_(self.random_field(j), alpha=self.sa_step(self.updates))
        self.theta.clamp_(min=torch.finfo(self.theta.dtype).tiny)

    def importance_weights(self, j: Tensor) -> Tensor:
        r""":math:`\theta(J)^\zeta` of each chain's current sample (0 in the overflow partition)."""
        j = self._by_group(j)
        weights = self.theta.gather(1, j).pow(self.zeta)
        return torch.where(self.flattened(j), weights, torch.zeros_like(weights)).reshape(-1)

    def dynamics_log_weights(self, energy: Tensor, temperature: float | Tensor) -> Tensor:
        r"""The log importance weight :math:`\log \pi(x) / \rho_\theta(x) = (\Phi_\theta(U) - U) / T` of each
        chain's energy under the density the multiplied dynamics sample at the current :math:`\theta`.

        A Langevin diffusion with drift :math:`-m(U)\nabla U` samples :math:`\rho_\theta \propto
        e^{-\Phi_\theta(U)/T}`, :math:`\Phi_\theta' = m` (the :meth:`multipliers` as applied: clipped, the chosen
        difference, 1 in the overflow partition and above the range), so with :math:`\Phi_\theta(u_0) = u_0`

        .. math::
            \Phi_\theta(U) - U = \Delta u \Big[\sum_{i < J} (m_i - 1) + (m_J - 1)(s - J)\Big],
            \qquad s = \min\big((U - u_0) / \Delta u,\ m\big).

        It equals :meth:`importance_weights`' :math:`\zeta \log\theta(J)` (the paper's weight, Eq. 2) up to a
        constant only where no multiplier is clipped and :math:`\theta` varies smoothly; where :math:`\theta`
        runs away or the multiplier sits at its clip, only these weights describe what the chain samples (the
        multimodal study, studies/accuracy/multimodal/contour.py). :math:`\theta`'s normaliser is left out,
        as in the paper's weights. ``temperature``: a number, or one per group; > 0."""
        scaled = (energy.reshape(-1).to(self.theta.device, self.theta.dtype) - self.low) / self.width
        j = self._by_group(self.index(energy))
        excess = self.multipliers(temperature) - 1.0
        below = torch.cumsum(excess, 1) - excess                          # sum over i < J of (m_i - 1)
        within = self._by_group(scaled.clamp_max(self.partitions)) - j     # s - J (negative below u_0)
        total = below.gather(1, j) + excess.gather(1, j) * within
        return (self.width * total / self._temperature(temperature)).reshape(-1)

    def density_of_states(self) -> Tensor:
        r"""Each group's estimate of the density of states :math:`\theta_\star(i) = \int_{X_i} \pi(x) dx`,
        normalised: (groups, m). Sampling from :math:`\pi(x) / \theta(J(x))^\zeta`, the field
        :math:`\theta(J)^a (1\{i = J\} - \theta(i))` has its fixed point at
        :math:`\theta \propto \theta_\star^{1 / (1 + \zeta - a)}`: :math:`\theta_\star` itself for CSGLD's a = zeta,
        :math:`\theta_\star^{1/\zeta}` for ICSGLD's a = 1 (the paper's Section 4.1); so the estimate is
        :math:`\theta^{1 + \zeta - a}`, normalised."""
        estimate = self.theta.pow(1.0 + self.zeta - self.field_exponent)
        return estimate / estimate.sum(1, keepdim=True)

    def state_dict(self) -> dict[str, Any]:
        """theta and the number of its updates, for a checkpoint."""
        return {"theta": self.theta.clone(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore theta and its update count from :meth:`state_dict`."""
        self.theta.copy_(state["theta"])
        self.updates = int(state["updates"])


class _Contour:
    """The contour step around an SGLD / SGHMC update: scale the gradient, then adapt theta."""

    partition: EnergyPartition
    capturable_rule = False  # the step reads the energy's partition on the host: it runs eagerly

    def _setup_contour(self, partition: EnergyPartition, chains: int, gather: Callable[[Tensor], Tensor] | None):
        if chains % partition.groups:
            raise ValueError(f"chains={chains} is not a multiple of the partition's groups={partition.groups}")
        self.partition, self.chains, self.gather = partition, chains, gather
        self.last_multiplier: Tensor | None = None  # the multiplier of each chain at the last step
        self.last_index: Tensor | None = None

    @torch.no_grad()
    def step(self, closure=None, *, energy: Tensor):
        """One step. ``energy``: the current energy estimate of each chain (shape (chains,) or a scalar)."""
        energy = torch.as_tensor(energy).detach().reshape(-1).to(self.partition.theta.device)
        j = self.partition.index(energy)
        temperature = self.param_groups[0]["temperature"]
        self.last_multiplier = self.partition.multiplier(j, temperature, energy)
        loss = super().step(closure)
        if temperature == 0:  # an exploration stage (optimisation): theta adapts in sampling stages only
            return loss
        # ICSGLD across processes: only the partition indices travel, and every process applies the same field
        self.partition.update(self.gather(j) if self.gather is not None else j)
        self.last_index = j
        return loss

    def _update(self, group, params, grads, hyper, noise):
        """The base sampler's update (next in the MRO) on the multiplied gradient, weight decay folded in."""
        folded = {**group, "weight_decay": 0.0}
        super()._update(folded, params, self._scaled(group, params, grads), self._hyperparameters(folded), noise)

    def _scaled(self, group, params, grads) -> list[Tensor]:
        multiplier = self.last_multiplier.to(params[0].dtype)
        scaled = []
        for p, g in zip(params, grads):
            d = g if group["weight_decay"] == 0 else g + group["weight_decay"] * p
            factor = multiplier.reshape(-1, *[1] * (p.dim() - 1)) if self.chains > 1 else multiplier.reshape(())
            scaled.append(d * factor)
        return scaled

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["contour"] = self.partition.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        contour = state_dict.pop("contour", None)
        super().load_state_dict(state_dict)
        if contour is not None:
            self.partition.load_state_dict(contour)


class ContourSGLD(_Contour, SGLD):
    r"""CSGLD, and ICSGLD when several chains share a :class:`EnergyPartition` group.

    The SGLD step of :class:`csg.samplers.SGLD` on the multiplied gradient:

    .. math::
        \theta \leftarrow \theta - \mathrm{lr}\,m(J)\,(g + \mathrm{wd}\,\theta) + \mathcal{N}(0, 2\,\mathrm{lr}\,T/N),

    then the stochastic-approximation update of the partition's :math:`\theta`. With ``chains > 1``
    every parameter holds one chain per row of its first dimension (vectorised simulations).

    Args:
        partition: the :class:`EnergyPartition` (its ``groups`` divide ``chains``).
        chains: chains held by these parameters (1 for a network).
        gather: for ICSGLD over processes, a function all-gathering the chains' partition indices.
        lr, num_data, temperature, weight_decay, generator: as :class:`csg.samplers.SGLD`.

    Example::

        partition = EnergyPartition(low=0.0, width=10.0, partitions=100, zeta=3e4)
        sampler = ContourSGLD(model.parameters(), lr=1e-6, num_data=N, partition=partition)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        sampler.step(energy=N * loss.detach())
    """

    def __init__(self, params, lr: float = 1e-2, *, num_data: float, partition: EnergyPartition, chains: int = 1,
                 temperature: float = 1.0, weight_decay: float = 0.0, gather=None,
                 generator: torch.Generator | None = None):
        super().__init__(params, lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay,
                         generator=generator)
        self._setup_contour(partition, chains, gather)


class ContourSGHMC(_Contour, SGHMC):
    r"""Contour SGHMC (ICSGHMC with shared groups): :class:`csg.samplers.SGHMC` on the multiplied gradient."""

    def __init__(self, params, lr: float = 1e-2, *, num_data: float, partition: EnergyPartition, chains: int = 1,
                 momentum: float = 0.9, temperature: float = 1.0, weight_decay: float = 0.0, gather=None,
                 generator: torch.Generator | None = None):
        super().__init__(params, lr, num_data=num_data, momentum=momentum, temperature=temperature,
                         weight_decay=weight_decay, generator=generator)
        self._setup_contour(partition, chains, gather)


class ContourPSGLD(_Contour, PSGLD):
    r"""pCSGLD / pICSGLD (the ICSGLD paper's bandit): :class:`csg.samplers.PSGLD` on the multiplied gradient."""

    def __init__(self, params, lr: float = 1e-3, *, num_data: float, partition: EnergyPartition, chains: int = 1,
                 temperature: float = 1.0, weight_decay: float = 0.0, alpha: float = 0.99, eps: float = 1e-5,
                 initial_square_avg: float = 0.0, gather=None, generator: torch.Generator | None = None):
        super().__init__(params, lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay,
                         alpha=alpha, eps=eps, initial_square_avg=initial_square_avg, generator=generator)
        self._setup_contour(partition, chains, gather)
