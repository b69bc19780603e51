"""The 2-D landscape of the ICSGLD paper (Deng et al. 2022, Section 5.2 and Appendix D.2)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from studies.targets.base import Target


class ICSGLDLandscape(Target):
    r"""U(x) = 0.2 |x|^2 - 2 (cos 2 pi x_1 + cos 2 pi x_2) + 1{|x|^2 > 20} (|x|^2 - 20).

    Twenty-five isolated modes near the integer points of [-2, 2]^2. The
    authors' code adds 0.25 N(0, I) to the gradient and 0.25 N(0, 1) to the
    energy (``grad_noise``, ``energy_noise``).
    """

    dim = 2

    def __init__(self, radius_sq: float = 20.0, **noise: float):
        super().__init__(**noise)
        self.radius_sq = radius_sq

    def energy(self, x: Tensor) -> Tensor:
        r2 = x.pow(2).sum(-1)
        u = 0.2 * r2 - 2.0 * torch.cos(2 * math.pi * x).sum(-1)
        return u + torch.clamp(r2 - self.radius_sq, min=0.0)

    def grad(self, x: Tensor) -> Tensor:
        r2 = x.pow(2).sum(-1, keepdim=True)
        g = 0.4 * x + 4 * math.pi * torch.sin(2 * math.pi * x)
        return g + 2.0 * x * (r2 > self.radius_sq).to(x)
