"""Many independent SG-MCMC chains on an analytic target, in one vectorised loop.

Each :class:`ChainGroup` is a method (a schedule and its stage rules) run as a
tensor of shape (repeats x chains, dim) by the same :mod:`csg.samplers`
optimizers that train networks. The target has no data, so the samplers run
with N = 1: the "mean loss" is the energy U itself, lr multiplies grad U and
the noise variance is 2 lr T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from csg.samplers import create_sampler
from csg.schedules import Schedule
from studies.targets import Target


@dataclass
class ChainGroup:
    """One method: ``chains`` parallel chains per repeat under one schedule.

    - ``temperature``: T in the sampling stage;
    - ``noise_in_exploration``: keep the noise on in exploration stages (the
      authors' 25-Gaussian code does); otherwise exploration runs at T = 0;
    - ``temperature_correction``: scale T by (1 - lr / 2), i.e. noise variance
      2 lr (1 - lr / 2), as the authors' 25-Gaussian MATLAB code does;
    - samples are the positions after every step in a sampling stage.
    """

    name: str
    schedule: Schedule
    chains: int = 1
    update_rule: str = "sgld"
    momentum: float = 0.0
    temperature: float = 1.0
    noise_in_exploration: bool = False
    temperature_correction: bool = False


@dataclass
class ChainSamples:
    """Kept positions of one group: ``samples[s, r, c]`` is the s-th kept step of chain c of repeat r."""

    group: ChainGroup
    samples: Tensor  # (kept steps, repeats, chains, dim)
    kept_steps: Tensor  # iteration index of each kept step

    def pooled(self, repeat: int) -> Tensor:
        """All samples of one repeat, its chains pooled: shape (kept steps x chains, dim)."""
        return self.samples[:, repeat].reshape(-1, self.samples.shape[-1])


def run_chains(
    target: Target,
    groups: list[ChainGroup],
    *,
    steps: int,
    repeats: int,
    start: Tensor | None = None,
    start_low: float = -10.0,
    start_high: float = 10.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> dict[str, ChainSamples]:
    """Run every group for ``steps`` iterations and return its kept samples.

    Chains start uniform on [start_low, start_high]^dim (the authors' code:
    [-10, 10]^2) unless ``start`` gives the positions (repeats x chains, dim)
    for every group. Gradients are ``target.noisy_grad``, computed for all
    groups in one call; groups with the same update rule share one sampler,
    one param group each.
    """
    generator = generator or torch.Generator().manual_seed(0)
    params, plans, buffers = [], [], []
    for group in groups:
        count = repeats * group.chains
        if start is not None:
            position = start.to(dtype).clone()
        else:
            position = start_low + (start_high - start_low) * torch.rand(count, target.dim, generator=generator, dtype=dtype)
        params.append(torch.nn.Parameter(position))
        sampling = [group.schedule.sampling(k) for k in range(steps)]
        plans.append(([group.schedule.lr(k) for k in range(steps)], sampling))
        buffers.append(torch.empty(sum(sampling), count, target.dim, dtype=dtype))

    samplers, slots = {}, []
    for group, param in zip(groups, params):
        key = (group.update_rule, group.momentum)
        if key not in samplers:
            samplers[key] = create_sampler(
                group.update_rule, [param], lr=1.0, num_data=1, momentum=group.momentum, generator=generator
            )
        else:
            samplers[key].add_param_group({"params": [param]})
        slots.append(samplers[key].param_groups[-1])

    sizes = [param.shape[0] for param in params]
    cursors = [0] * len(groups)
    for k in range(steps):
        for group, slot, (lrs, sampling) in zip(groups, slots, plans):
            lr = lrs[k]
            temperature = group.temperature if sampling[k] or group.noise_in_exploration else 0.0
            if group.temperature_correction:
                temperature *= 1.0 - lr / 2.0
            slot["lr"] = lr
            slot["temperature"] = temperature
        positions = torch.cat([param.detach() for param in params])
        for param, grad in zip(params, target.noisy_grad(positions, generator).split(sizes)):
            param.grad = grad
        for sampler in samplers.values():
            sampler.step()
        for index, (param, (_, sampling)) in enumerate(zip(params, plans)):
            if sampling[k]:
                buffers[index][cursors[index]] = param.detach()
                cursors[index] += 1

    return {
        group.name: ChainSamples(
            group,
            buffer.reshape(buffer.shape[0], repeats, group.chains, target.dim),
            torch.tensor([k for k, keep in enumerate(plan[1]) if keep]),
        )
        for group, buffer, plan in zip(groups, buffers, plans)
    }
