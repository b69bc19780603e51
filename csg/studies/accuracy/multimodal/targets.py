r"""The multimodal targets: two Gaussian mixtures and a small network, each an energy on many chains at once.

**Mixtures** (:class:`csg.studies.targets.GaussianMixture`), :math:`p(x) = \sum_k w_k N(x \mid \mu_k, \sigma_k^2 I)` with
unequal weights and variances (Wang et al. 2024: cyclical schedules weigh unequal-variance modes wrongly):

- ``mixture2d``: 5 modes on a pentagon of radius 3 (neighbours 3.5 apart);
- ``mixture10d``: 5 modes at 3 q_k, q_k orthonormal in 10-D (every pair 4.2 apart).

Their exact mode weights are the :math:`w_k`, and the responsibilities
:math:`r_k(x) = w_k N(x \mid \mu_k, \sigma_k^2 I) / p(x)` estimate them without bias from any exact sample,
overlap or none: :math:`E_p[r_k(x)] = \int w_k N(x \mid \mu_k, \sigma_k^2 I)\,dx = w_k`.

**Network** (:class:`StepNetwork`): 1-D regression :math:`y = f_\theta(x) + \epsilon`, :math:`\epsilon \sim
N(0, s^2)`, with a 1-2-1 tanh network written by its units' locations and slopes,

.. math::
    f_\theta(x) = b + v_1 \tanh(e^{a_1}(x - c_1)) + v_2 \tanh(e^{a_2}(x - c_2)),\quad
    c_2 = c_1 + \operatorname{softplus}(\delta),

:math:`\theta = (c_1, \delta, a_1, a_2, v_1, v_2, b)` with a Gaussian prior :math:`N(0, \tau_i^2)` on each.
Positive slopes remove the sign flips and ordered locations the permutation of the two units, so no two modes
are copies of each other. The data are three steps of a function that two units can fit only two of: which two
(or one wide unit over two steps) are the modes, with unequal masses and shapes. The posterior is
:math:`\exp(-U)`, :math:`U = \sum_i (y_i - f_\theta(x_i))^2 / (2 s^2) + \sum_j \theta_j^2 / (2 \tau_j^2)`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from csg.studies.targets import GaussianMixture
from csg.studies.targets.base import Target


def pentagon_mixture() -> GaussianMixture:
    """``mixture2d``: weights 0.35 .. 0.08, variances 0.15 .. 0.5 (the heaviest mode is not the widest)."""
    angles = 2 * math.pi * torch.arange(5, dtype=torch.float64) / 5
    means = 3.0 * torch.stack([angles.cos(), angles.sin()], 1)
    return GaussianMixture(means, torch.tensor([0.5, 0.3, 0.15, 0.4, 0.2]),
                           torch.tensor([0.35, 0.25, 0.2, 0.12, 0.08]))


def orthogonal_mixture(dim: int = 10) -> GaussianMixture:
    """``mixture10d``: 5 modes at 3 q_k (q_k orthonormal, fixed by seed 0), weights 0.3 .. 0.1, variances 0.3 .. 1."""
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(dim, dim)))
    means = torch.from_numpy(3.0 * q[:5])
    return GaussianMixture(means, torch.tensor([1.0, 0.6, 0.4, 0.8, 0.3]),
                           torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1]))


def step_data(n: int = 45, noise: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x on [-3, 3]; y = three steps 0.5 tanh(6 (x + 2)) + 0.55 tanh(6 x) + 0.45 tanh(6 (x - 2)) + N(0, noise^2)."""
    x = np.linspace(-3.0, 3.0, n)
    heights, centres = np.array([0.5, 0.55, 0.45]), np.array([-2.0, 0.0, 2.0])
    y = (heights * np.tanh(6.0 * (x[:, None] - centres))).sum(1) + noise * np.random.default_rng(seed).normal(size=n)
    return x, y


class StepNetwork(Target):
    """The 1-2-1 tanh network's posterior (module docstring); ``theta`` has shape (..., 7)."""

    dim = 7
    names = ("c1", "delta", "a1", "a2", "v1", "v2", "b")
    prior_sd = (2.0, 1.5, 1.0, 1.0, 2.0, 2.0, 2.0)

    def __init__(self, noise: float = 0.3, n: int = 45, seed: int = 0):
        super().__init__()
        x, y = step_data(n, noise, seed)
        self.x, self.y, self.noise = torch.from_numpy(x), torch.from_numpy(y), float(noise)
        self.tau = torch.tensor(self.prior_sd, dtype=torch.float64)

    def predict(self, theta: Tensor, x: Tensor | None = None) -> Tensor:
        """f_theta at the inputs ``x`` (default the data's): shape (..., inputs)."""
        x = self.x if x is None else x
        x = x.to(theta)
        c1 = theta[..., 0:1]
        c2 = c1 + torch.nn.functional.softplus(theta[..., 1:2])
        unit1 = theta[..., 4:5] * torch.tanh(theta[..., 2:3].exp() * (x - c1))
        unit2 = theta[..., 5:6] * torch.tanh(theta[..., 3:4].exp() * (x - c2))
        return theta[..., 6:7] + unit1 + unit2

    def energy(self, theta: Tensor) -> Tensor:
        residual = self.y.to(theta) - self.predict(theta)
        return residual.pow(2).sum(-1) / (2 * self.noise**2) + (theta / self.tau.to(theta)).pow(2).sum(-1) / 2

    def grad(self, theta: Tensor) -> Tensor:
        return self.energy_and_grad(theta)[1]

    def energy_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """U and grad U in one autograd pass."""
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            energy = self.energy(leaf)
            (gradient,) = torch.autograd.grad(energy.sum(), leaf)
        return energy.detach(), gradient

    def numpyro_model(self):
        """The same posterior as a NumPyro model (site ``theta``; ``f``, the fit at the data, deterministic)."""
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist

        tau, x, y, noise = jnp.asarray(self.tau.numpy()), jnp.asarray(self.x.numpy()), jnp.asarray(self.y.numpy()), self.noise

        def model():
            theta = numpyro.sample("theta", dist.Normal(0.0, tau).to_event(1))
            c1 = theta[0]
            c2 = c1 + jnp.logaddexp(0.0, theta[1])
            f = theta[6] + theta[4] * jnp.tanh(jnp.exp(theta[2]) * (x - c1)) + theta[5] * jnp.tanh(jnp.exp(theta[3]) * (x - c2))
            numpyro.sample("y", dist.Normal(f, noise), obs=y)

        return model


MIXTURES = {"mixture2d": pentagon_mixture, "mixture10d": orthogonal_mixture}
TARGETS = ("mixture2d", "mixture10d", "network")


def create(name: str) -> Target:
    if name == "network":
        return StepNetwork()
    return MIXTURES[name]()
