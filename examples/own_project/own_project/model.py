"""A small residual network for points in the plane."""

from __future__ import annotations

from torch import nn


class SpiralNet(nn.Module):
    """``input -> width -> (depth residual tanh blocks) -> num_classes`` logits."""

    def __init__(self, num_classes: int, input_shape: tuple[int, ...], width: int = 64, depth: int = 2):
        super().__init__()
        self.embed = nn.Linear(input_shape[0], width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Tanh(), nn.Linear(width, width)) for _ in range(depth))
        self.head = nn.Sequential(nn.Tanh(), nn.Linear(width, num_classes))

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)
