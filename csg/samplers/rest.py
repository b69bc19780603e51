r"""A sampler for part of a model, plain SGD for the rest, stepped as one ``torch.optim.Optimizer``.

``sampler.rest=sgd`` (:mod:`csg.engine.part`): the sampled parameters :math:`\theta_s` follow the sampler, the
others :math:`\theta_r` follow

.. math::
    \theta_r \leftarrow \theta_r - \mathrm{lr}\, \nabla_{\theta_r} \overline{\ell}

(heavy-ball with the given momentum), at the same step size, without noise or prior. The param groups are the
sampler's followed by SGD's, the same dicts: whoever sets ``lr`` and ``temperature`` on every group, as the
training loop does from the schedule, sets both (SGD ignores the temperature).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["WithOptimisedRest"]


class WithOptimisedRest(torch.optim.Optimizer):
    """``sampler`` for its own parameters and ``torch.optim.SGD(rest, momentum=momentum)`` for ``rest``.

    :meth:`step` steps the sampler (with ``step``'s keyword arguments), then SGD; :meth:`state_dict` is
    ``{"sampler": ..., "rest": ...}``; :attr:`generator` is the sampler's noise generator."""

    def __init__(self, sampler: torch.optim.Optimizer, rest, *, momentum: float = 0.0):
        rest = list(rest)
        lr = sampler.param_groups[0]["lr"]
        super().__init__([p for group in sampler.param_groups for p in group["params"]] + rest, {"lr": lr})
        self.sampler = sampler
        self.rest = torch.optim.SGD(rest, lr=lr, momentum=momentum)
        self.param_groups = [*sampler.param_groups, *self.rest.param_groups]

    @property
    def generator(self) -> torch.Generator | None:
        return getattr(self.sampler, "generator", None)

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.sampler.step(**kwargs)
        self.rest.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.sampler.zero_grad(set_to_none=set_to_none)
        self.rest.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict(), "rest": self.rest.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state_dict["sampler"])
        self.rest.load_state_dict(state_dict["rest"])
        self.param_groups = [*self.sampler.param_groups, *self.rest.param_groups]
