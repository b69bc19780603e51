"""Three interleaved spirals in the plane: a map-style Dataset of (2-d point, class)."""

from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset


class Spirals(Dataset):
    """``per_class`` noisy points on each of ``classes`` spiral arms, drawn once from ``seed``."""

    def __init__(self, per_class: int, classes: int = 3, noise: float = 0.2, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        radius = torch.linspace(0.1, 1.0, per_class).repeat(classes)
        label = torch.arange(classes).repeat_interleave(per_class)
        angle = 4.0 * radius + label * (2 * math.pi / classes) + noise * torch.randn(len(label), generator=generator)
        self.points = torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1)
        self.labels = label.tolist()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.points[index], self.labels[index]


def load(per_class: int = 500, test_per_class: int = 200, noise: float = 0.2, seed: int = 0):
    """What ``data._target_`` names: (train, test), drawn from different seeds."""
    return Spirals(per_class, noise=noise, seed=seed), Spirals(test_per_class, noise=noise, seed=seed + 1)
