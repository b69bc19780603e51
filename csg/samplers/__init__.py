r"""SG-MCMC samplers as ``torch.optim.Optimizer`` subclasses.

- :class:`SGLD`: stochastic gradient Langevin dynamics.
- :class:`SGHMC`: stochastic gradient Hamiltonian Monte Carlo (velocity form).
- :class:`PSGLD`: SGLD with an RMSprop preconditioner (Li et al. 2016).
- :mod:`csg.samplers.contour`: CSGLD / ICSGLD; :mod:`csg.samplers.replica`: replica exchange.
- :mod:`csg.samplers.custom`: a user's own ``torch.optim.Optimizer`` (``sampler.optimizer._target_``).

Both take the gradient of the MEAN mini-batch loss and sample
:math:`\exp(-U/T)`, :math:`U = N\,\overline{\ell} + \tfrac{N\,\mathrm{wd}}{2}\lVert\theta\rVert^2`
(:math:`\overline{\ell}` the mean loss). Temperature 0 makes
them SGD and heavy-ball SGD. The update rules themselves live in
:mod:`csg.samplers.functional`.
"""

from csg.samplers.base import SGMCMCOptimizer
from csg.samplers.psgld import PSGLD
from csg.samplers.sghmc import SGHMC
from csg.samplers.sgld import SGLD

__all__ = ["PSGLD", "SGLD", "SGHMC", "SGMCMCOptimizer", "UPDATE_RULES", "create_sampler"]

UPDATE_RULES = {"sgld": SGLD, "sghmc": SGHMC, "psgld": PSGLD}


def create_sampler(update: str, params, *, momentum: float = 0.0, **hyperparameters) -> SGMCMCOptimizer:
    """The sampler for update rule ``update`` ("sgld", "sghmc" or "psgld"), torch.optim-style.

    ``hyperparameters`` are the param-group keys (``lr``, ``num_data``,
    ``temperature``, ``weight_decay``; for pSGLD also ``alpha`` and ``eps``) and ``generator``;
    ``momentum`` is used by SGHMC only.
    """
    if update == "sghmc":
        return SGHMC(params, momentum=momentum, **hyperparameters)
    if update == "sgld":
        return SGLD(params, **hyperparameters)
    if update == "psgld":
        return PSGLD(params, **hyperparameters)
    raise ValueError(f"unknown update rule {update!r}; one of {', '.join(UPDATE_RULES)}")
