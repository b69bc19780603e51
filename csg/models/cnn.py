"""The small MNIST CNN of the ICSGLD paper's landscape experiment (Deng et al. 2022, Section 5.1, Appendix D.1)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from csg.models.registry import register_model


class SmallCNN(nn.Sequential):
    """Two 5x5 convolutions (``filters`` and 2 x ``filters`` maps, each ReLU then 2x2 max-pooling), a
    fully connected ReLU layer of ``hidden`` units and a linear classifier.

    The paper (Appendix D.1, after Jarrett et al. 2009): conv layers of 32 and 64 feature maps, fully
    connected layers of 50 hidden nodes, 5 outputs. The authors' code (mnist_energy_exploration) pads the
    convolutions to keep 28x28 and 14x14 maps, so the classifier sees 2 x filters x 7 x 7 features; it
    ends in log-softmax, which the cross-entropy here applies.
    """

    def __init__(self, num_classes: int, in_channels: int = 1, image_size: int = 28, filters: int = 32,
                 hidden: int = 50):
        side = image_size // 4
        super().__init__(
            nn.Conv2d(in_channels, filters, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(filters, 2 * filters, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * filters * side * side, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )


@register_model
def small_cnn(num_classes: int = 5, input_shape: Sequence[int] = (1, 28, 28), filters: int = 32,
              hidden: int = 50) -> SmallCNN:
    channels, height, width = input_shape
    if height != width or height % 4:
        raise ValueError(f"small_cnn needs square images whose side divides by 4, not {tuple(input_shape)}")
    return SmallCNN(num_classes, channels, height, filters, hidden)
