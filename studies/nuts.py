"""NumPyro's NUTS for the studies' reference posteriors: one settings class, :class:`NutsSettings`, and one runner,
:func:`run_nuts`, which every reference posterior of the studies is drawn with.

Each study keeps its own settings as a constant of its module, and passes what its posterior needs:

- :mod:`studies.accuracy.reference` (``ACCURACY_NUTS``): a NumPyro model function, the chains vectorised;
- :mod:`studies.benchmark.reference` (``NETWORK_NUTS``): a potential, one chain per worker process from its own
  random start, the warm-up run on its own so that its gradient evaluations are counted;
- :mod:`studies.part.reference` (``PART_NUTS``): a potential with a fixed dense mass matrix, the chains started at
  Laplace draws and run one after another.

NumPyro (JAX) rather than Pyro (PyTorch): its NUTS is compiled end to end by XLA. JAX and NumPyro are an optional
extra (``pip install -e ".[reference]"``), imported only when a chain runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from csg.errors import CsgError

__all__ = ["NutsRun", "NutsSettings", "require_numpyro", "run_nuts"]


def require_numpyro():
    """Import JAX in double precision (the samplers' traces are float64 too), or say what to install."""
    try:
        import jax
        import numpyro  # noqa: F401
    except ImportError as error:
        raise CsgError(f"the reference posteriors need NumPyro and JAX ({error.name} is missing): "
                       'pip install -e ".[reference]"  (or: make reference)') from None
    jax.config.update("jax_enable_x64", True)


@dataclass(frozen=True, kw_only=True)
class NutsSettings:
    """How a study runs NUTS: its chains and their lengths, the seed, NUTS's own settings, and how a study that draws
    random starts and runs chains in worker processes does so. ``warmup`` and ``samples`` have no default: each
    study states them in its constant."""

    warmup: int                 # warm-up iterations per chain (step size, and mass matrix where adapted): not kept
    samples: int                # draws kept per chain
    chains: int = 4             # independent chains
    seed: int = 0               # the PRNG key's seed, and that of the random starts where a study draws them
    target_accept: float = 0.8  # the acceptance probability the warm-up adapts the step size to (NumPyro's default)
    max_tree_depth: int = 10    # at most 2^depth - 1 leapfrog steps per draw (NumPyro's default)
    init_scale: float = 0.1     # the standard deviation of N(0, s^2) random starts, where a study draws them
    workers: int = 1            # processes running chains at once, where a study runs one chain per process

    def record(self, fields: tuple[str, ...]) -> dict[str, Any]:
        """The values of ``fields``, in that order: the settings as a study writes them into its results."""
        return {name: getattr(self, name) for name in fields}


@dataclass(frozen=True)
class NutsRun:
    """The draws of a NUTS run, grouped by chain, and the facts of the run.

    ``draws``: {site: array (chains, samples, ...)} for a model, an array (chains, samples, D) for a potential,
    float64; ``extra``: each collected field of the sampler's state (``diverging``, ``num_steps`` and those asked
    for), (chains, samples); ``seconds``: the wall-clock time of the warm-up and the sampling;
    ``gradient_evaluations``: the leapfrog steps (a gradient each) of the sampling, ``warmup_gradient_evaluations``
    those of the warm-up where counted (else None); ``step_size``: the adapted step size at the end."""

    draws: Any
    extra: dict[str, np.ndarray]
    seconds: float
    divergences: int
    gradient_evaluations: int
    warmup_gradient_evaluations: int | None
    step_size: np.ndarray


def run_nuts(settings: NutsSettings, *, model: Callable | None = None, potential_fn: Callable | None = None,
             model_args: tuple = (), init_params: Any = None, chain_method: str = "parallel",
             inverse_mass_matrix: Any = None, count_warmup: bool = False, key: int | None = None,
             extra_fields: tuple[str, ...] = ()) -> NutsRun:
    """``settings.chains`` NUTS chains of a NumPyro ``model(*model_args)`` or of a ``potential_fn`` (U(theta), where
    the target is exp(-U)).

    ``init_params``: the chains' starts (a leading axis of chains where there are several; None: NumPyro's own);
    ``chain_method``: NumPyro's, "parallel" (its default: one device a chain, else one after another),
    "sequential" or "vectorized"; ``inverse_mass_matrix``: a fixed one, (D, D) dense or (D,) diagonal, not adapted
    (None: a diagonal one adapted during the warm-up); ``count_warmup``: run the warm-up on its own and count its
    gradient evaluations; ``key``: the PRNG key's seed (None: ``settings.seed``); ``extra_fields``: the sampler's
    state fields to collect beside ``diverging`` and ``num_steps``."""
    if (model is None) == (potential_fn is None):
        given = "both" if model is not None else "neither"
        raise ValueError(f"run_nuts needs one of model= and potential_fn=, got {given}")
    require_numpyro()
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    fixed = inverse_mass_matrix is not None
    kernel = NUTS(model=model, potential_fn=potential_fn, target_accept_prob=settings.target_accept,
                  max_tree_depth=settings.max_tree_depth,
                  inverse_mass_matrix=jnp.asarray(inverse_mass_matrix) if fixed else None,
                  dense_mass=fixed and np.ndim(inverse_mass_matrix) == 2, adapt_mass_matrix=not fixed)
    mcmc = MCMC(kernel, num_warmup=settings.warmup, num_samples=settings.samples, num_chains=settings.chains,
                chain_method=chain_method, progress_bar=False)
    init_params = None if init_params is None else jax.tree.map(jnp.asarray, init_params)
    rng_key = jax.random.PRNGKey(settings.seed if key is None else key)
    fields = ("diverging", "num_steps", *extra_fields)
    started = time.perf_counter()
    warmup_steps = None
    if count_warmup:
        mcmc.warmup(rng_key, *model_args, init_params=init_params, extra_fields=("num_steps",), collect_warmup=True)
        warmup_steps = int(np.asarray(mcmc.get_extra_fields()["num_steps"]).sum())
        mcmc.run(mcmc.post_warmup_state.rng_key, *model_args, extra_fields=fields)
    else:
        mcmc.run(rng_key, *model_args, init_params=init_params, extra_fields=fields)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))  # JAX dispatches asynchronously
    seconds = time.perf_counter() - started
    extra = {name: np.asarray(value) for name, value in mcmc.get_extra_fields(group_by_chain=True).items()}
    draws = ({name: np.asarray(value, dtype=np.float64) for name, value in samples.items()}
             if isinstance(samples, dict) else np.asarray(samples, dtype=np.float64))
    return NutsRun(draws=draws, extra=extra, seconds=seconds, divergences=int(extra["diverging"].sum()),
                   gradient_evaluations=int(extra["num_steps"].sum()), warmup_gradient_evaluations=warmup_steps,
                   step_size=np.asarray(mcmc.last_state.adapt_state.step_size))
