r"""The study's targets: posteriors whose barriers we control, each an energy on many chains at once.

**Two-mode mixtures** ``barrier<b>`` (:func:`two_mode`): in 2-D,
:math:`p(x) = 0.75\,N(x \mid (-d/2, 0), I) + 0.25\,N(x \mid (d/2, 0), I)`, the separation d solved
(:func:`separation`) so that the light mode's escape barrier, the highest energy on the minimum-energy path
between the two minima less the light mode's minimum, is b nats (b = 2, 4, 8, 12, 16); the heavy mode's is
b + log 3 (about b + 1.1). Equal variances make the path the segment between the means (the target is symmetric
about that axis), where :func:`separation` finds the barrier; :mod:`.barriers` measures it again in 2-D.

**The paper's grid** ``mog25`` (cSG-MCMC Appendix A.1): 25 equally weighted modes on {-4, ..., 4}^2, variance
0.03: neighbours 2 apart, barriers of about 1 / (2 x 0.03) - log 2, 16 nats. **Wang et al.'s variant**
``wang25`` (Section 4.2.1): the same grid with variances 0.2 / i, i = 1..25: barriers from 2 to 60 nats,
unequal, and curvatures from 5 to 125, so that one step size cannot suit every mode.

**The network** ``network`` (:class:`StepNetwork`): 1-D regression :math:`y = f_\theta(x) + \epsilon`,
:math:`\epsilon \sim N(0, s^2)`, with a 1-2-1 tanh network written by its units' locations and slopes,

.. math::
    f_\theta(x) = b + v_1 \tanh(e^{a_1}(x - c_1)) + v_2 \tanh(e^{a_2}(x - c_2)),\quad
    c_2 = c_1 + \operatorname{softplus}(\delta),

:math:`\theta = (c_1, \delta, a_1, a_2, v_1, v_2, b)`, a Gaussian prior :math:`N(0, \tau_i^2)` on each. Positive
slopes remove the sign flips and ordered locations the permutation of the two units, so no two modes are copies
of each other. The data are three steps of a function that two units can fit only two of: which two are the
modes. :math:`U = \sum_i (y_i - f_\theta(x_i))^2 / (2 s^2) + \sum_j \theta_j^2 / (2 \tau_j^2)`: at the noise
s = 0.3 of issue 36 its minimum-energy paths climb 3.4 to 4.7 nats, at s = 0.15 (:data:`NETWORK_NOISE`) 9 to 13.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from studies.targets import GaussianMixture, grid_means
from studies.targets.base import Target

TWO_MODE_WEIGHTS = (0.75, 0.25)
BARRIERS = (2, 4, 8, 12, 16)
NETWORK_NOISE = 0.15


def _line_energy(d: float, t: np.ndarray) -> np.ndarray:
    """U at (t, 0) of the two-mode mixture whose means are (-d/2, 0) and (d/2, 0) (up to a constant)."""
    heavy, light = TWO_MODE_WEIGHTS
    return -np.logaddexp(math.log(heavy) - 0.5 * (t + d / 2) ** 2, math.log(light) - 0.5 * (t - d / 2) ** 2)


def line_barriers(d: float) -> tuple[float, float]:
    """(light, heavy): each mode's escape barrier along the segment between the means, at separation ``d``."""
    from scipy.optimize import minimize_scalar

    t = np.linspace(-d / 2, d / 2, 4001)
    u = _line_energy(d, t)
    top = minimize_scalar(lambda s: -_line_energy(d, s), bounds=(t[max(np.argmax(u) - 1, 0)], t[min(np.argmax(u) + 1, 4000)]),
                          method="bounded", options={"xatol": 1e-10})
    light = minimize_scalar(lambda s: _line_energy(d, s), bounds=(0.0, d), method="bounded", options={"xatol": 1e-10})
    heavy = minimize_scalar(lambda s: _line_energy(d, s), bounds=(-d, 0.0), method="bounded", options={"xatol": 1e-10})
    peak = -top.fun
    return float(peak - light.fun), float(peak - heavy.fun)


def separation(barrier: float) -> float:
    """The separation d of the means at which the light mode's escape barrier is ``barrier`` nats."""
    from scipy.optimize import brentq

    return float(brentq(lambda d: line_barriers(d)[0] - barrier, 3.0, 40.0, xtol=1e-12))


def two_mode(barrier: float) -> GaussianMixture:
    """``barrier<b>``: 0.75 N((-d/2, 0), I) + 0.25 N((d/2, 0), I), the light mode's barrier ``barrier`` nats."""
    d = separation(barrier)
    means = torch.tensor([[-d / 2, 0.0], [d / 2, 0.0]], dtype=torch.float64)
    return GaussianMixture(means, torch.tensor([1.0, 1.0]), torch.tensor(TWO_MODE_WEIGHTS))


def paper_grid() -> GaussianMixture:
    """``mog25``: cSG-MCMC Appendix A.1, 25 equal modes on {-4, ..., 4}^2, variance 0.03."""
    return GaussianMixture(grid_means(), torch.tensor(0.03))


def wang_grid() -> GaussianMixture:
    """``wang25``: Wang et al. 2024 Section 4.2.1, the grid with variances 0.2 / i, i = 1..25, equal weights."""
    return GaussianMixture(grid_means(), 0.2 / torch.arange(1, 26, dtype=torch.float64))


def step_data(n: int = 45, noise: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x on [-3, 3]; y = three steps 0.5 tanh(6 (x + 2)) + 0.55 tanh(6 x) + 0.45 tanh(6 (x - 2)) + N(0, noise^2)."""
    x = np.linspace(-3.0, 3.0, n)
    heights, centres = np.array([0.5, 0.55, 0.45]), np.array([-2.0, 0.0, 2.0])
    y = (heights * np.tanh(6.0 * (x[:, None] - centres))).sum(1) + noise * np.random.default_rng(seed).normal(size=n)
    return x, y


class StepNetwork(Target):
    """The 1-2-1 tanh network's posterior (module docstring); ``theta`` has shape (..., 7), any float dtype."""

    dim = 7
    names = ("c1", "delta", "a1", "a2", "v1", "v2", "b")
    prior_sd = (2.0, 1.5, 1.0, 1.0, 2.0, 2.0, 2.0)

    def __init__(self, noise: float = NETWORK_NOISE, n: int = 45, seed: int = 0):
        super().__init__()
        x, y = step_data(n, noise, seed)
        self.x, self.y, self.noise = torch.from_numpy(x), torch.from_numpy(y), float(noise)
        self.tau = torch.tensor(self.prior_sd, dtype=torch.float64)

    def predict(self, theta: Tensor, x: Tensor | None = None) -> Tensor:
        """f_theta at the inputs ``x`` (default the data's): shape (..., inputs)."""
        x = (self.x if x is None else x).to(theta)
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
        """U and grad U of (..., 7) by the chain rule written out: one pass, no autograd (the chains' hot loop)."""
        shape = theta.shape
        theta = theta.reshape(-1, self.dim)
        x, y, tau2 = self.x.to(theta), self.y.to(theta), self.tau.to(theta) ** 2
        c1, delta, a1, a2, v1, v2, b = (column[:, None] for column in theta.unbind(-1))
        e1, e2 = a1.exp(), a2.exp()
        z1, z2 = e1 * (x - c1), e2 * (x - c1 - torch.nn.functional.softplus(delta))
        t1, t2 = torch.tanh(z1), torch.tanh(z2)
        r = (b + v1 * t1 + v2 * t2 - y) / self.noise**2          # dU/df at each point
        d1, d2 = r * v1 * (1 - t1 * t1), r * v2 * (1 - t2 * t2)   # dU/dz of each unit
        g2 = (d2 * e2).sum(-1)
        grad = torch.stack([-(d1 * e1).sum(-1) - g2, -g2 * torch.sigmoid(delta[:, 0]), (d1 * z1).sum(-1),
                            (d2 * z2).sum(-1), (r * t1).sum(-1), (r * t2).sum(-1), r.sum(-1)], -1) + theta / tau2
        energy = 0.5 * self.noise**2 * (r * r).sum(-1) + 0.5 * (theta * theta / tau2).sum(-1)
        return energy.reshape(shape[:-1]), grad.reshape(shape)

    def numpyro_model(self):
        """The same posterior as a NumPyro model (site ``theta``)."""
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist

        tau, x, y, noise = jnp.asarray(self.tau.numpy()), jnp.asarray(self.x.numpy()), jnp.asarray(self.y.numpy()), self.noise

        def model():
            theta = numpyro.sample("theta", dist.Normal(0.0, tau).to_event(1))
            c2 = theta[0] + jnp.logaddexp(0.0, theta[1])
            f = theta[6] + theta[4] * jnp.tanh(jnp.exp(theta[2]) * (x - theta[0])) + theta[5] * jnp.tanh(jnp.exp(theta[3]) * (x - c2))
            numpyro.sample("y", dist.Normal(f, noise), obs=y)

        return model


@dataclass(frozen=True)
class Spec:
    """A target of the study: how to build it, what it is, where its chains start (uniform on a box)."""

    name: str
    label: str
    build: Callable[[], Target]
    nominal: str          # the barrier it was built for, in words

    def start_box(self, target: Target) -> tuple[np.ndarray, np.ndarray]:
        """Low and high corners of the uniform start distribution: the mixtures' means and 3 sd around them (the
        grids: the paper's U(-10, 10)^2); the network: +-2 prior sd."""
        if self.name in ("mog25", "wang25"):
            return np.full(2, -10.0), np.full(2, 10.0)
        if isinstance(target, GaussianMixture):
            reach = 3 * float(target.variances.max().sqrt())
            means = target.means.numpy()
            return means.min(0) - reach, means.max(0) + reach
        tau = target.tau.numpy()
        return -2 * tau, 2 * tau


SPECS = {spec.name: spec for spec in (
    *(Spec(f"barrier{b}", f"two modes, barrier {b} nats", (lambda b=b: two_mode(b)), f"{b} nats (light mode)")
      for b in BARRIERS),
    Spec("mog25", "the paper's 25-Gaussian grid (variance 0.03)", paper_grid, "about 16 nats"),
    Spec("wang25", "Wang et al.'s grid, variances 0.2 / i", wang_grid, "2 to 60 nats, unequal"),
    Spec("network", f"1-2-1 tanh network, noise {NETWORK_NOISE}", StepNetwork, "about 10 nats (s = 0.15)"),
)}
MIXTURES = tuple(name for name in SPECS if name != "network")
TARGETS = tuple(SPECS)


def create(name: str) -> Target:
    return SPECS[name].build()
