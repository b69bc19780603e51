r"""Each target's barriers, measured: minimum-energy paths between neighbouring minima by the string method.

A barrier is not assumed from a formula: between two minima :math:`a, b` of U the *minimum-energy path* is the
curve along which the gradient is parallel to the curve, and its highest point is the saddle a chain must pass;
the escape barrier of a is :math:`\max_{\text{path}} U - U(a)`. The simplified string method (E, Ren and
Vanden-Eijnden 2007, J. Chem. Phys. 126, 164103) finds it: a string of images from a to b, each image moved down
the gradient, then the images redistributed at equal arc length, until the string stops moving
(:func:`minimum_energy_path`). It is written here because it is ten lines on the targets' own vectorised
gradients; scipy has no path method. The top is refined by maximising U along the segments on either side of the highest image.

Which pairs (:func:`barrier_table`): the two-mode mixtures' two minima; on the grids, every pair of horizontal or
vertical neighbours (40); the network, every pair of its main minima. Minima are found by L-BFGS (scipy) from the
mixtures' means or the network's modes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import torch

from studies.targets import GaussianMixture


def _energy_and_grad(target, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(target, GaussianMixture):
        return target.energy(x), target.grad(x)
    return target.energy_and_grad(x)


def minimum(target, start: np.ndarray) -> np.ndarray:
    """The local minimum of U that L-BFGS reaches from ``start``."""
    from scipy.optimize import minimize

    def fun(z):
        energy, grad = _energy_and_grad(target, torch.from_numpy(z)[None])
        return float(energy[0]), grad[0].numpy()

    return minimize(fun, np.asarray(start, dtype=np.float64), jac=True, method="L-BFGS-B",
                    options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 10_000}).x


def _redistribute(path: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The images of ``path`` (pairs, images, dim) moved to equal arc length (linear interpolation)."""
    step = (path[:, 1:] - path[:, :-1]).norm(dim=-1)
    length = torch.cat([torch.zeros_like(step[:, :1]), step.cumsum(1)], 1)
    length = length / length[:, -1:].clamp_min(1e-300)
    index = torch.searchsorted(length.contiguous(), s.expand(len(path), -1).contiguous()).clamp(1, path.shape[1] - 1)
    low, high = length.gather(1, index - 1), length.gather(1, index)
    t = ((s - low) / (high - low).clamp_min(1e-300))[..., None]
    below = path.gather(1, (index - 1)[..., None].expand(-1, -1, path.shape[-1]))
    above = path.gather(1, index[..., None].expand(-1, -1, path.shape[-1]))
    return below + t * (above - below)


def minimum_energy_path(target, a: np.ndarray, b: np.ndarray, *, images: int = 41, step: float, iterations: int,
                        tolerance: float = 1e-7) -> tuple[np.ndarray, np.ndarray]:
    """Strings from each ``a[i]`` to ``b[i]`` ((pairs, dim) arrays; their ends fixed), relaxed by gradient steps of
    ``step`` and redistributed after each. Returns the images (pairs, images, dim) and their energies."""
    a, b = torch.as_tensor(np.atleast_2d(a), dtype=torch.float64), torch.as_tensor(np.atleast_2d(b), dtype=torch.float64)
    s = torch.linspace(0, 1, images, dtype=torch.float64)[None]
    path = a[:, None] + s[..., None] * (b - a)[:, None]
    for _ in range(iterations):
        _, grad = _energy_and_grad(target, path.reshape(-1, path.shape[-1]))
        moved = path.clone()
        moved[:, 1:-1] -= step * grad.reshape(path.shape)[:, 1:-1]
        moved = _redistribute(moved, s)
        change = (moved - path).abs().max()
        path = moved
        if change < tolerance:
            break
    energy, _ = _energy_and_grad(target, path.reshape(-1, path.shape[-1]))
    return path.numpy(), energy.reshape(path.shape[:2]).numpy()


def _peak(target, path: np.ndarray, energy: np.ndarray) -> float:
    """The highest point of a path: U maximised along the two segments around the highest image (a barrier top
    can be sharper than the images' spacing)."""
    from scipy.optimize import minimize_scalar

    i = int(np.clip(np.argmax(energy), 1, len(energy) - 2))
    best = float(energy[i])
    for a, b in ((path[i - 1], path[i]), (path[i], path[i + 1])):
        def minus(t, a=a, b=b):
            with torch.no_grad():
                return -float(_energy_and_grad(target, torch.from_numpy(a + t * (b - a))[None])[0][0])

        found = minimize_scalar(minus, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-10})
        best = max(best, -float(found.fun))
    return best


def pairs(name: str, minima: np.ndarray) -> list[tuple[int, int]]:
    """The pairs of minima whose barriers are reported (module docstring)."""
    if name in ("mog25", "wang25"):
        return [(i, j) for i, j in itertools.combinations(range(len(minima)), 2)
                if math.isclose(np.abs(minima[i] - minima[j]).sum(), 2.0, abs_tol=0.2)]
    return list(itertools.combinations(range(len(minima)), 2))


def barrier_table(name: str, target, starts: np.ndarray, scale: float) -> pd.DataFrame:
    """One row per pair and direction: the minima's energies, the path's highest point, the escape barrier.
    ``starts``: where the minima are sought (the means, or the network's modes); ``scale``: the largest curvature
    L, which sets the string's step (0.25 / L)."""
    minima = np.stack([minimum(target, start) for start in starts])
    with torch.no_grad():
        depth = _energy_and_grad(target, torch.from_numpy(minima))[0].numpy()
    chosen = pairs(name, minima)
    a, b = minima[[i for i, _ in chosen]], minima[[j for _, j in chosen]]
    iterations = 4000 if isinstance(target, GaussianMixture) else 60_000
    paths, energy = minimum_energy_path(target, a, b, step=0.25 / scale, iterations=iterations)
    rows = []
    for (i, j), path, path_energy in zip(chosen, paths, energy):
        top = _peak(target, path, path_energy)
        interior = path_energy[1:-1]
        dips = int(((interior[1:-1] < interior[:-2]) & (interior[1:-1] < interior[2:])).sum())
        for start, other in ((i, j), (j, i)):
            rows.append({"target": name, "from": start, "to": other, "energy_from": float(depth[start]),
                         "energy_to": float(depth[other]), "path_max": top, "barrier": top - float(depth[start]),
                         "intermediate_minima": dips})
    return pd.DataFrame(rows)
