"""Preconditioned SGLD (Li et al. 2016): SGLD with an RMSprop diagonal preconditioner."""

from __future__ import annotations

import torch

from csg.samplers.base import SGMCMCOptimizer


class PSGLD(SGMCMCOptimizer):
    r"""pSGLD, as used by the ICSGLD paper's bandit (and, with contour weights, pCSGLD / pICSGLD).

    With :math:`d = g + \mathrm{wd}\,\theta` (g the MEAN mini-batch loss gradient):

    .. math::
        V \leftarrow \alpha V + (1 - \alpha)\, g \odot g, \qquad
        G = 1 / (\lambda + \sqrt{V}),

        \theta \leftarrow \theta - \mathrm{lr}\; G \odot d + \sqrt{2\,\mathrm{lr}\,T/N}\;\sqrt{G} \odot \xi.

    The small :math:`\Gamma(\theta)` correction term of Li et al. is dropped, as in their
    experiments. ``temperature=0`` is RMSprop-preconditioned SGD. Param-group keys: ``lr``,
    ``num_data``, ``temperature``, ``weight_decay``, ``alpha`` (0.99), ``eps`` (:math:`\lambda`, 1e-5) and
    ``initial_square_avg`` (:math:`V_0`, 0 as torch's RMSprop; the ICSGLD authors' bandit starts from ones).
    """

    def __init__(self, params, lr: float = 1e-3, *, num_data: float, temperature: float = 1.0,
                 weight_decay: float = 0.0, alpha: float = 0.99, eps: float = 1e-5, initial_square_avg: float = 0.0,
                 generator: torch.Generator | None = None):
        if not 0.0 <= alpha < 1.0 or eps <= 0 or initial_square_avg < 0:
            raise ValueError(f"need 0 <= alpha < 1, eps > 0 and initial_square_avg >= 0, got alpha={alpha}, eps={eps}, "
                             f"initial_square_avg={initial_square_avg}")
        defaults = dict(lr=lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay, alpha=alpha,
                        eps=eps, initial_square_avg=initial_square_avg)
        super().__init__(params, defaults, generator)

    def _hyperparameters(self, group):
        return {}

    def _draw_noise(self, params, values):
        return None  # drawn per parameter inside the preconditioned update below

    def _update(self, group, params, grads, hyper, noise):
        squares = []
        for p in params:
            state = self.state[p]
            if "square_avg" not in state:
                state["square_avg"] = torch.full_like(p, group.get("initial_square_avg", 0.0),
                                                      memory_format=torch.preserve_format)
            squares.append(state["square_avg"])
        torch._foreach_mul_(squares, group["alpha"])
        torch._foreach_addcmul_(squares, grads, grads, value=1.0 - group["alpha"])
        preconditioners = torch._foreach_sqrt(squares)
        torch._foreach_add_(preconditioners, group["eps"])
        torch._foreach_reciprocal_(preconditioners)
        directions = grads if group["weight_decay"] == 0 else torch._foreach_add(grads, params, alpha=group["weight_decay"])
        torch._foreach_addcmul_(params, preconditioners, directions, value=-group["lr"])
        noise_var = 2.0 * group["lr"] * group["temperature"] / group["num_data"]
        if noise_var > 0:
            noise = [torch.randn(p.shape, generator=self.generator, device=p.device, dtype=p.dtype) for p in params]
            torch._foreach_mul_(noise, torch._foreach_sqrt(preconditioners))
            torch._foreach_add_(params, noise, alpha=noise_var**0.5)
