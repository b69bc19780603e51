r"""The ICSGLD paper's samplers in the vectorised runner (:mod:`.chains`): reSGLD, CSGLD and ICSGLD x4.

**Budgets, counted in full**: a budget of B gradient evaluations is B in total across all chains of a method,
as for every other method: reSGLD runs 2 chains of B / 2 iterations, CSGLD one chain of B, ICSGLD x4 4 chains of
B / 4. A swap or a contour step costs no gradient (full-batch energies come with the gradients' evaluation).

**reSGLD** (replica exchange SGLD, Deng et al. 2020): chain 0 at T = 1, chain 1 at the setting's high temperature
:math:`T_{high}` (:attr:`.chains.Setting.explore` holds it; both chains at the same step h, whose stability limit
2 / L does not depend on T). Each iteration, after the gradients' evaluation, the two swap positions with
probability :math:`\min(1, S)`, :math:`\log S` = :func:`csg.samplers.replica.swap_log_ratio` of their energies at
temperatures 1 and :math:`T_{high}`, with correction 0 (the energies are exact:
:func:`csg.samplers.replica.bias_correction` of variance 0). The uniform of a swap comes from a stream of its
(target, seed), apart from the chains' noise, so that the other methods' noise does not depend on it. Only chain
0 (T = 1) is kept: its iterations are the accumulators, crossings and draws; chain 1 only explores.

**CSGLD and ICSGLD x4** (contour SGLD, Deng et al. 2020; its interacting form, Deng et al. 2022): one
:class:`csg.samplers.contour.EnergyPartition` holds the :math:`\theta` of every (setting, seed) as its groups:
CSGLD's one chain per group, ICSGLD x4's four chains sharing one :math:`\theta`, updated with their averaged
random field (the paper's Eq. 16). The partition as the authors set it for their 2-D simulation: m =
:data:`PARTITIONS` partitions over [min U - 1, max U + 1] (here min U is the target's lowest minimum and max U the
highest point of its minimum-energy paths, :mod:`.barriers`: the range that holds every barrier), the
stochastic-approximation step :math:`\min(3\cdot10^{-3}, 1 / (k^{0.6} + 100))`, the multiplier clipped to
[-5, 5], the forward difference of the authors' Appendix D.5 script, the field :math:`\theta(J)(1\{i = J\} -
\theta(i))` (ICSGLD's Eq. 8, for CSGLD too: the ICSGLD paper's CSGLD baseline is the same sampler with one
chain); energies above the range fall into an overflow partition (the authors' bandit code: multiplier 1, no
field). :math:`\zeta` is the setting's own value (:attr:`.chains.Setting.explore` holds it). Energies
enter in units of :math:`\Delta u` above the range's low end (the partition's low 0, width 1), so the
temperature the multiplier sees is :math:`T / \Delta u` (T = 1): the same multiplier, one partition object for
every setting and target.

**Importance weights**: a contour chain samples the density its multiplied gradient defines, so its mode weights
and core shares are weighted means over its kept iterations, each weighing :math:`\pi / \rho_\theta =
e^{(\Phi_\theta(U) - U)/T}` at the current :math:`\theta`
(:meth:`csg.samplers.contour.EnergyPartition.dynamics_log_weights`: :math:`\Phi_\theta'` is the multiplier as
applied, clipped, 1 in the overflow; 1 at the uniform start; capped at :math:`e^{80}` for the float32 accumulators; 0 for a diverged chain). This departs from
the paper's weight :math:`\theta(J)^\zeta`, which describes the sampled density only where the multiplier is
unclipped and :math:`\theta` smooth: in this study's first full run (2026-11-27) with the paper's weights,
:math:`\theta` ran away onto the partitions just above the light mode's minimum, the multiplier sat at its clip
in many iterations at :math:`\zeta` 4, and the estimators' errors grew with the budget. These weights are exact for the
continuous-time dynamics at a fixed :math:`\theta`; at a finite step, and with :math:`\theta` adapting (its normaliser
left out, as in the paper's weights), the estimator is not consistent (the report's "Consistency" line). For W2 a
contour run keeps :data:`.chains.CANDIDATES` positions with their weights, and :func:`resample` draws
:data:`.chains.DRAWS` of them by systematic resampling on the weights (the resampled draws, unweighted, enter the
same exact-assignment W2 as every method's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from csg.samplers.contour import EnergyPartition
from csg.samplers.replica import bias_correction, swap_log_ratio

PARTITIONS = 100              # m: the authors' 2-D simulation (ICSGLD paper, Appendix D.2)
LOG_WEIGHT_MAX = 80.0         # e^80 and a few thousand of them stay finite in the float32 accumulators
REPLICA, CONTOUR = "replica", "contour"


@dataclass(frozen=True)
class EnergyRange:
    low: float                # u_0 = min U - 1
    width: float              # Delta u: the range [min U - 1, max U + 1] over PARTITIONS - 1 partitions


def energy_range(barriers: pd.DataFrame) -> EnergyRange:
    """The contour partitions of one target from its barrier table (:func:`.barriers.barrier_table`): [min U - 1,
    max U + 1], min U its lowest minimum, max U the highest point of its minimum-energy paths, cut into
    :data:`PARTITIONS` - 1 partitions below the overflow."""
    low = float(barriers.energy_from.min()) - 1.0
    high = float(barriers.path_max.max()) + 1.0
    return EnergyRange(low, (high - low) / (PARTITIONS - 1))


def resample(draws: np.ndarray, weights: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` of ``draws`` by systematic resampling on ``weights`` (one uniform from ``seed``); all ``draws``
    with equal weights where no weight is positive."""
    weights = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0, posinf=0.0)
    total = weights.sum()
    if not total > 0:
        weights, total = np.ones(len(draws)), float(len(draws))
    points = (np.random.default_rng(seed).random() + np.arange(count)) / count
    index = np.searchsorted(np.cumsum(weights) / total, points, side="right")
    return draws[np.minimum(index, len(draws) - 1)]


class _Groups:
    """The contour groups of one chain count (1: CSGLD, 4: ICSGLD x4): their rows, one theta per group."""

    def __init__(self, ids: list[int], zeta: list[float], low: list[float], width: list[float], ends: list[int],
                 chains: int):
        self.chains = chains
        self.ids = torch.tensor(ids, dtype=torch.long)                      # original rows, group by group
        self.low = torch.tensor(low, dtype=torch.float64).repeat_interleave(chains)
        self.width = torch.tensor(width, dtype=torch.float64).repeat_interleave(chains)
        self.ends = torch.tensor(ends)
        zeta = torch.tensor(zeta, dtype=torch.float64)
        self.partition = EnergyPartition(0.0, 1.0, PARTITIONS, zeta=zeta, groups=len(zeta), difference="forward",
                                         overflow=True)
        self.temperature = 1.0 / torch.tensor(width, dtype=torch.float64)    # T / Delta u, T = 1
        self.current = self.ids.clone()

    def subset(self, k: int, position: Tensor) -> None:
        keep = self.ends > k
        if not bool(keep.all()):
            chain_keep = keep.repeat_interleave(self.chains)
            partition = self.partition
            partition.theta = partition.theta[keep]
            partition.zeta = partition.zeta[keep]
            self.temperature = self.temperature[keep]
            self.ids, self.low, self.width = (t[chain_keep] for t in (self.ids, self.low, self.width))
            self.ends = self.ends[keep]
        self.current = position[self.ids]

    def step(self, energy: Tensor, multiplier: Tensor, weight: Tensor) -> None:
        if not len(self.ids):
            return
        scaled = (energy[self.current].double() - self.low) / self.width
        scaled = torch.nan_to_num(scaled, nan=PARTITIONS, posinf=PARTITIONS, neginf=0.0)   # a diverged chain: overflow
        j = self.partition.index(scaled)
        multiplier[self.current] = self.partition.multiplier(j, self.temperature, scaled).to(multiplier.dtype)
        log_weight = self.partition.dynamics_log_weights(scaled, self.temperature).clamp_max(LOG_WEIGHT_MAX)
        finite = torch.isfinite(energy[self.current].double())
        weight[self.current] = torch.where(finite, log_weight.exp(), 0.0).to(weight.dtype)
        self.partition.update(j)


class Interactions:
    """What the replica and contour rows of a run add to the plain SGLD step: swaps, the gradient multiplier,
    the importance weights, the high temperature's noise. ``layout``: (block, seed position, chain) per row;
    ``ranges``: :class:`EnergyRange` per target; ``streams``: (target, seed, chain) -> noise stream."""

    def __init__(self, blocks: Sequence, layout: Sequence[tuple[int, int, int]], ranges: dict, streams: dict,
                 seed: int):
        rows = len(layout)
        self.noise = torch.ones(rows)              # sqrt(T) of each row's noise
        self.counted = torch.ones(rows)            # 0: a replica's hot chain, never kept
        low, high, hot, low_stream = [], [], [], []
        groups: dict[int, dict[str, list]] = {}
        for row, (b, s, c) in enumerate(layout):
            block = blocks[b]
            kind = block.method.kind
            if kind == REPLICA and c == 0:
                low.append(row), high.append(row + 1), hot.append(block.setting.explore)
                low_stream.append(streams[(block.target, block.seeds[s], 0)])
                self.noise[row + 1] = block.setting.explore ** 0.5
                self.counted[row + 1] = 0.0
            elif kind == CONTOUR:
                found = groups.setdefault(block.method.chains, {"ids": [], "zeta": [], "low": [], "width": [],
                                                                "ends": []})
                found["ids"].append(row)
                if c == 0:
                    energy = ranges[block.target]
                    for key, value in (("zeta", block.setting.explore), ("low", energy.low),
                                       ("width", energy.width), ("ends", block.iterations)):
                        found[key].append(value)
        self.replica = bool(low)
        self.contour = [_Groups(**found, chains=chains) for chains, found in sorted(groups.items())]
        self.active = self.replica or bool(self.contour)
        self.low_ids, self.high_ids = torch.tensor(low, dtype=torch.long), torch.tensor(high, dtype=torch.long)
        self.low, self.high = self.low_ids.clone(), self.high_ids.clone()
        self.hot = torch.tensor(hot, dtype=torch.float32)
        self.ends = torch.tensor([blocks[layout[r][0]].iterations for r in low], dtype=torch.long)
        self.low_stream, self.streams = torch.tensor(low_stream, dtype=torch.long), len(streams)
        self.correction = bias_correction(1.0, 2.0, 0.0)        # exact energies: 0
        self.generator = torch.Generator().manual_seed(7_919 + seed)
        self.swaps = 0

    def subset(self, k: int, keep: Tensor, position: Tensor) -> None:
        """Drop the rows whose chains ended at iteration ``k`` (``keep``: the surviving rows; ``position``: each
        original row's index among them)."""
        self.noise, self.counted = self.noise[keep], self.counted[keep]
        if self.replica:
            alive = self.ends > k
            self.low_ids, self.high_ids, self.hot, self.ends, self.low_stream = (
                t[alive] for t in (self.low_ids, self.high_ids, self.hot, self.ends, self.low_stream))
            self.low, self.high = position[self.low_ids], position[self.high_ids]
        for groups in self.contour:
            groups.subset(k, position)

    def swap(self, energy: Tensor, tensors: Sequence[Tensor]) -> None:
        """The replica swaps of this iteration, applied in place to every per-row tensor of ``tensors`` (the
        positions and what the landscape computed from them, ``energy`` among them)."""
        if not self.replica:
            return
        uniform = torch.rand(self.streams, generator=self.generator)[self.low_stream]
        log_s = swap_log_ratio(energy[self.low], energy[self.high], 1.0, self.hot, self.correction)
        accepted = uniform.log() < log_s
        if bool(accepted.any()):
            a, b = self.low[accepted], self.high[accepted]
            self.swaps += int(accepted.sum())
            for t in tensors:
                t[a], t[b] = t[b], t[a]

    def contour_step(self, energy: Tensor) -> tuple[Tensor, Tensor]:
        """The gradient multiplier of every row (1 but for contour rows) and its weight in the accumulators
        (contour rows: theta(J)^zeta m^zeta; a replica's hot chain: 0; others 1); adapts every theta."""
        multiplier, weight = torch.ones_like(self.counted), self.counted.clone()
        for groups in self.contour:
            groups.step(energy, multiplier, weight)
        return multiplier, weight
