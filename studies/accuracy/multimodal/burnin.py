r"""The network's shared burn-in (:func:`burn_in`): every method of a seed starts where it ended."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from studies.accuracy.multimodal import chains, targets
from studies.accuracy.multimodal.landscapes import NetworkRows


def burn_in(prepared, seeds: Sequence[int], iterations: int, step: float) -> tuple[dict, pd.DataFrame]:
    """The network's shared burn-in: per seed, its 4 box starts (:func:`.chains.start_points`) run ``iterations``
    of SGLD at h = ``step`` / L (float64, the seed's own noise stream, so a seed's end points do not depend on the
    other seeds run with it). Every method of the seed starts from these end points (a single chain from the
    first), so the runs ask about hopping between modes, not descent to them; the burn-in's gradients are no
    method's (the same for all). Returns the end points per seed and a table of them: energy above the lowest
    minimum, whether 2 (U - U_min) <= :data:`.chains.ESCAPE` (arrived), and the mode."""
    index = targets.TARGETS.index(prepared.name)
    x = torch.cat([chains.start_points(index, seed, len(prepared.low), prepared.low, prepared.high) for seed in seeds])
    generators = [torch.Generator().manual_seed(7_777 + 1_000_003 * (index + 1) + seed) for seed in seeds]
    lr, chunk = step / prepared.scale, 1000
    done = 0
    while done < iterations:
        count = min(chunk, iterations - done)
        noise = torch.cat([torch.randn(count, 4, x.shape[-1], generator=g, dtype=torch.float64) for g in generators], 1)
        for k in range(count):
            _, grad = prepared.target.energy_and_grad(x)
            x = x - lr * grad + math.sqrt(2 * lr) * noise[k]
        done += count
    with torch.no_grad():
        energy = prepared.target.energy(x)
    rows = NetworkRows(prepared.target, prepared.target.means, torch.from_numpy(prepared.covariances), len(x),
                       dtype=torch.float64, floor=prepared.floor)
    mode, _, _ = rows.regions(x)
    ends = {seed: x[4 * i:4 * i + 4].clone() for i, seed in enumerate(seeds)}
    table = pd.DataFrame({"target": prepared.name, "seed": np.repeat(list(seeds), 4), "chain": np.tile(range(4), len(seeds)),
                          "iterations": iterations, "step": step, "above": (energy - prepared.floor).numpy(),
                          "arrived": (2 * (energy - prepared.floor) <= chains.ESCAPE).numpy(), "mode": mode.numpy()})
    return ends, table
