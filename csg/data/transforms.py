"""Image transforms as batched tensor operations, for data sets held whole in (device) memory.

:class:`BatchAugment` is ``RandomCrop(size, padding)`` + ``RandomHorizontalFlip()`` +
``Normalize(mean, std)`` of torchvision, applied to a whole uint8 batch at once:
zero padding, a crop offset drawn uniformly per image, a flip with probability
1/2 per image. With the data set on the GPU, augmentation never touches the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class Normalize:
    """uint8 (N, C, H, W) in [0, 255] -> float32, standardised per channel."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self._shift, self._scale = 255.0 * self.mean, 1.0 / (255.0 * self.std)

    def __call__(self, images: Tensor) -> Tensor:
        # (x / 255 - mean) / std, as one cast and two in-place operations
        shift, scale = self._shift.to(images.device), self._scale.to(images.device)
        return images.to(torch.float32, copy=True).sub_(shift).mul_(scale)


class BatchAugment:
    """Random crop with zero padding and horizontal flip of a uint8 batch, then normalisation.

    ``generator`` (at the call) draws the offsets and flips; it must live on the images' device.
    """

    def __init__(self, normalize: Normalize, padding: int = 4, flip: bool = True):
        self.normalize, self.padding, self.flip = normalize, padding, flip

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        n, _, h, w = images.shape
        p = self.padding
        if p:
            padded = torch.nn.functional.pad(images, (p, p, p, p))
            dy = torch.randint(0, 2 * p + 1, (n,), generator=generator, device=images.device)
            dx = torch.randint(0, 2 * p + 1, (n,), generator=generator, device=images.device)
            rows = (dy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]  # (n, 1, h, 1)
            cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, None, :]  # (n, 1, 1, w)
            batch = torch.arange(n, device=images.device)[:, None, None, None]
            channel = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
            images = padded[batch, channel, rows, cols]
        if self.flip:
            flip = torch.rand(n, generator=generator, device=images.device) < 0.5
            images = torch.where(flip[:, None, None, None], images.flip(-1), images)
        return self.normalize(images)
