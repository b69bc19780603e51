"""A user's own sampler (``sampler=custom sampler.optimizer._target_=my_project.samplers.MySGLD``).

Any :class:`torch.optim.Optimizer` class (or factory) constructed as::

    optimizer(params, lr=lr0, num_data=N, temperature=T, weight_decay=wd, **other keys of sampler.optimizer)

plus ``generator=`` (the chain's seeded :class:`torch.Generator` for its noise) when it accepts one. The
loop (:func:`csg.engine.loop.train_chains`) sets every param group's ``lr`` and ``temperature`` before each
step from the schedule, exactly as for the built-in samplers (temperature 0 in exploration stages); the
sampler reads them from its groups. Its ``state_dict`` goes into the checkpoints; the generator's state
and the global random states travel with them too, so a resumed chain repeats the uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import torch

from csg.errors import ConfigError
from csg.components import accepts, call, locate

KEY = "sampler.optimizer._target_"
REQUIRED_GROUP_KEYS = ("lr", "temperature")
SAMPLER_KEYWORDS = ("num_data", "temperature")  # what makes an optimizer a sampler of exp(-U/T), U = N x mean loss


def check_takes_sampler_keywords(factory, path: str) -> None:
    """Refuse, before training, a callable that takes no ``num_data`` or ``temperature`` (by name or through
    ``**kwargs``): a plain optimizer such as ``torch.optim.SGD``, whose csg counterparts are named."""
    missing = [name for name in SAMPLER_KEYWORDS if not accepts(factory, name)]
    if not missing:
        return
    plain = getattr(factory, "__module__", "").startswith("torch.optim")
    hint = ("; a plain torch optimizer: csg's own are sampler=sgd (SGD), sampler=sgdm (SGD with momentum), "
            "sampler=snapshot_sgd / snapshot_sgdm (their ensembles), sampler=psgld (RMSprop's preconditioner, "
            "sampling)" if plain else
            "; csg/samplers/custom.py shows the signature, examples/own_project/own_project/sampler.py an example")
    raise ConfigError(KEY, path, f"a torch.optim.Optimizer that samples: it takes params, lr, num_data, temperature "
                      f"and weight_decay; {path} takes no {' and no '.join(missing)}{hint}")


def create_custom_sampler(path: str, params, *, lr: float, num_data: int, temperature: float, weight_decay: float,
                          generator: torch.Generator | None = None, **options: Any) -> torch.optim.Optimizer:
    """The user's optimizer at ``path`` over ``params``, checked: an Optimizer whose groups carry lr and temperature."""
    factory = locate(path, KEY)
    check_takes_sampler_keywords(factory, path)
    extra = {"generator": generator} if generator is not None and accepts(factory, "generator") else {}
    sampler = call(factory, KEY, path, "a torch.optim.Optimizer taking params, lr, num_data, temperature and "
                   "weight_decay", params=params, lr=lr, num_data=num_data, temperature=temperature,
                   weight_decay=weight_decay, **options, **extra)
    if not isinstance(sampler, torch.optim.Optimizer):
        raise ConfigError(KEY, path, f"a torch.optim.Optimizer; it made a {type(sampler).__name__}")
    for index, group in enumerate(sampler.param_groups):
        absent = [key for key in REQUIRED_GROUP_KEYS if key not in group]
        if absent:
            raise ConfigError(KEY, path, f"an optimizer whose param groups hold lr and temperature (the loop sets "
                              f"them every iteration); group {index} has no {' and no '.join(absent)}")
    return sampler
