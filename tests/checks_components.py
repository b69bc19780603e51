"""Data sets and models that break the contract late: in a later item, in training's batches, in the step."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from tests.own_components import blobs


class Items(Dataset):
    """Gaussian-blob items (4 features, labels 0..2), with ``change(index, (x, y))`` making item ``index`` bad;
    ``length`` (default: the number of items) is what ``__len__`` says."""

    def __init__(self, count: int, change=None, length: int | None = None, seed: int = 0):
        inputs, labels = blobs(count, seed=seed)[0].tensors
        self.items = [(inputs[i], int(labels[i])) for i in range(count)]
        self.change, self.length = change, length

    def __len__(self):
        return len(self.items) if self.length is None else self.length

    def __getitem__(self, index):
        item = self.items[index]  # an IndexError past the real items, as a list's
        return self.change(index, item) if self.change is not None else item


def late_float_label():
    """Item 5 of the training set has the label 1.0: a float, not an integer."""
    return Items(40, lambda i, item: (item[0], 1.0) if i == 5 else item), Items(20)


def late_large_label():
    """Item 7 of the test set has label 5 (the data set has 3 classes: data.num_classes=3)."""
    return Items(40), Items(20, lambda i, item: (item[0], 5) if i == 7 else item)


def late_other_shape():
    """Item 3 of the training set has 5 features, the others 4."""
    return Items(40, lambda i, item: (torch.zeros(5), item[1]) if i == 3 else item), Items(20)


def lying_length():
    """The training set says it holds 60 items; it holds 40."""
    return Items(40, length=60), Items(20)


def float_label_tensor():
    """A TensorDataset whose labels are float32."""
    train, test = blobs(40)
    return TensorDataset(train.tensors[0], train.tensors[1].float()), test


def int32_labels():
    """Items whose labels are int32 tensors, served item by item: batched as int64 all the same."""
    change = (lambda i, item: (item[0], torch.tensor(item[1], dtype=torch.int32)))
    return Items(40, change), Items(20, change)


class ShapeShifter(Items):
    """Items whose inputs grow by one feature from their second read on: right before training, wrong in it."""

    def __init__(self, count: int):
        super().__init__(count)
        self.reads = [0] * count

    def __getitem__(self, index):
        self.reads[index] += 1
        x, y = super().__getitem__(index)
        return (torch.zeros(5) if self.reads[index] > 1 else x), y


def shape_shifter():
    return ShapeShifter(40), Items(20)


def blobs_plus_one(n: int = 41):
    """Blobs with a training set of ``n`` items: 2 x 20 + 1, a last batch of one at batch size 20."""
    train, _ = blobs(n)
    return train, blobs(20)[1]


def frozen_net(num_classes: int, input_shape):
    net = nn.Sequential(nn.Linear(input_shape[0], 8), nn.ReLU(), nn.Linear(8, num_classes))
    net.requires_grad_(False)
    return net


class Slice(nn.Module):
    """No parameters: the first ``num_classes`` inputs as logits."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, x):
        return x[:, : self.num_classes]


def parameter_free(num_classes: int):
    return Slice(num_classes)


class IntegerLogits(nn.Module):
    def __init__(self, num_classes: int, input_shape):
        super().__init__()
        self.linear = nn.Linear(input_shape[0], num_classes)

    def forward(self, x):
        return self.linear(x).long()


def batchnorm_net(num_classes: int, input_shape):
    """Batch norm on features: one value per channel and example."""
    return nn.Sequential(nn.Linear(input_shape[0], 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, num_classes))


def conv_batchnorm_net(num_classes: int, input_shape):
    """Batch norm on 2x2 feature maps (4 features as a 1x2x2 image): 4 values per channel and example."""
    return nn.Sequential(nn.Unflatten(1, (1, 2, 2)), nn.Conv2d(1, 4, 1), nn.BatchNorm2d(4), nn.Flatten(),
                         nn.Linear(16, num_classes))
