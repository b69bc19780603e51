r"""What a chain's row sees at each iteration: the gradient, and which mode it is in.

The chains (:mod:`.chains`) hold thousands of rows in one tensor; a *landscape* gives, for every row at once,

- ``grad``: :math:`\nabla U(x)` of the row's target;
- ``soft``: (rows, modes) weights that sum to 1, whose mean over a chain's draws estimates the mode weights:
  a mixture's responsibilities :math:`r_k(x) = w_k N(x \mid \mu_k, \sigma_k^2 I) / p(x)` (unbiased from exact
  draws, :math:`E_p[r_k] = w_k`), the network's region indicators;
- ``mode``, ``inside``: (rows,) the mode a row is nearest (the largest ``soft``) and whether it lies in that
  mode's core: for a mixture within Table 4's radius of its centre, scaled to the mode (0.25 of the paper's sd
  :math:`\sqrt{0.03}`, so :math:`1.443\,\sigma_k`; exactly 0.25 on the paper's grid); for the network within the
  99 % ellipsoid of the mode's Gaussian fit. The cores do not overlap. Crossings and Table 4's coverage count
  cores, so that a chain dithering on a boundary crosses nothing;
- ``far``: (rows,) the squared distance to that mode in its own units (a mixture: :math:`|x - \mu_k|^2 /
  \sigma_k^2`; the network: :math:`2 (U(x) - U_{min})`, its Gaussian equivalent, since 4 % of the network's
  posterior lies more than 200 squared Mahalanobis units from every fit, along ridges where a unit is nearly
  linear), by which the chains tell a chain that has left the target;
- ``energy`` (an attribute after each ``step``, where ``with_energy`` is set): (rows,) U(x), which the contour and
  replica-exchange rows need (:mod:`.contour`): a mixture's :math:`-\log p(x)` from the same logits as ``soft``,
  the network's energy, which its gradient computes anyway.

Rows are dropped as their chains finish (:meth:`subset`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from studies.targets import GaussianMixture

CORE_RADIUS = 0.25 / math.sqrt(0.03)   # Table 4's radius in units of the paper's component sd
CORE_CHI2_7 = 18.475                   # the 99 % quantile of chi-square with 7 degrees of freedom


class MixtureRows:
    """Each row's own 2-D mixture (all with the same number of components), gathered per row; where every
    mixture has the same means (the two grids) they are shared and the distances come from one matrix product."""

    def __init__(self, mixtures: list[GaussianMixture], index: Tensor, dtype: torch.dtype = torch.float32):
        counts = {len(m.weights) for m in mixtures}
        if len(counts) != 1:
            raise ValueError(f"one component count per landscape, got {sorted(counts)}")
        means = torch.stack([m.means for m in mixtures]).to(dtype)            # (targets, K, dim)
        precision = torch.stack([1 / m.variances for m in mixtures]).to(dtype)
        log_norm = torch.stack([m._log_norm for m in mixtures]).to(dtype)
        radius2 = torch.stack([CORE_RADIUS**2 * m.variances for m in mixtures]).to(dtype)
        self.shared = means[0] if bool((means == means[0]).all()) else None
        self.modes = means.shape[1]
        self.with_energy, self.energy = False, None
        self._per_row(means, precision, log_norm, radius2, index)

    def _per_row(self, means, precision, log_norm, radius2, index) -> None:
        self.index = index
        self.means = None if self.shared is not None else means[index]
        self.precision, self.log_norm, self.radius2 = precision[index], log_norm[index], radius2[index]
        self.rows = torch.arange(len(index))
        self._tables = (means, precision, log_norm, radius2)

    def subset(self, keep: Tensor) -> MixtureRows:
        new = object.__new__(MixtureRows)
        new.shared, new.modes = self.shared, self.modes
        new.with_energy, new.energy = self.with_energy, None
        new._per_row(*self._tables, self.index[keep])
        return new

    def step(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """grad U = sum_k r_k (x - mu_k) / sigma_k^2; the responsibilities r; the nearest mode, in its core?, how far."""
        if self.shared is None:
            diff = x[:, None, :] - self.means
            square = (diff * diff).sum(-1)
        else:
            square = (x * x).sum(-1, keepdim=True) - 2 * (x @ self.shared.T) + (self.shared * self.shared).sum(-1)
        logits = self.log_norm - 0.5 * square * self.precision
        soft = torch.softmax(logits, -1)
        if self.with_energy:
            self.energy = -torch.logsumexp(logits, -1)
        pull = soft * self.precision
        if self.shared is None:
            grad = (pull[..., None] * diff).sum(1)
        else:
            grad = x * pull.sum(-1, keepdim=True) - pull @ self.shared
        mode = soft.argmax(-1)
        nearest = square[self.rows, mode]
        return grad, soft, mode, nearest < self.radius2[self.rows, mode], nearest * self.precision[self.rows, mode]


class NetworkRows:
    """The network's gradient for every row; modes: Gaussian fits (means, covariances) of the reference's modes;
    ``floor``: the lowest minimum's energy."""

    def __init__(self, network, means: Tensor, covariances: Tensor, rows: int, dtype: torch.dtype = torch.float32,
                 floor: float = 0.0):
        self.network, self.rows, self.floor = network, rows, floor
        chol = torch.linalg.cholesky(torch.as_tensor(covariances, dtype=torch.float64))
        self.whiten = torch.linalg.inv(chol).transpose(-1, -2).to(dtype)   # (K, dim, dim): z = (x - m) @ whiten
        self.centres = torch.as_tensor(means, dtype=dtype)
        self.half_logdet = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1).to(dtype)
        self.modes = len(self.centres)
        self.with_energy, self.energy = False, None

    def subset(self, keep: Tensor) -> NetworkRows:
        new = object.__new__(NetworkRows)
        new.__dict__.update(self.__dict__)
        new.rows = int(keep.numel())
        return new

    def regions(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The mode of each row (the largest Gaussian-fit log density -d^2 / 2 - log det / 2), whether it lies in
        that mode's 99 % ellipsoid, and its squared Mahalanobis distance d^2 to that mode."""
        z = torch.einsum("rd,kde->rke", x, self.whiten) - torch.einsum("kd,kde->ke", self.centres, self.whiten)
        distance = z.pow(2).sum(-1)
        mode = torch.argmax(-0.5 * distance - self.half_logdet, -1)
        nearest = distance.gather(1, mode[:, None])[:, 0]
        return mode, nearest < CORE_CHI2_7, nearest

    def step(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        energy, grad = self.network.energy_and_grad(x)
        self.energy = energy
        mode, inside, _ = self.regions(x)
        soft = torch.nn.functional.one_hot(mode, self.modes).to(x.dtype)
        return grad, soft, mode, inside, 2 * (energy - self.floor)
