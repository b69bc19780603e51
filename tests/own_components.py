"""Components named by ``_target_`` in the tests: good ones and each kind of mistake a user makes."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from csg.likelihoods import Likelihood


def blobs(n: int = 120, classes: int = 3, dim: int = 4, seed: int = 0, offset: int = 0):
    """(train, test) TensorDatasets of Gaussian blobs: float inputs, int64 labels 0..classes-1."""

    def draw(count: int, stream: int):
        generator = torch.Generator().manual_seed(seed * 1000 + stream)
        labels = torch.arange(count) % classes
        centres = torch.eye(classes, dim) * 3.0
        return TensorDataset(centres[labels] + torch.randn(count, dim, generator=generator), labels + offset)

    return draw(n, 0), draw(n // 2, 1)


def images(n: int = 64, classes: int = 4, channels: int = 3, size: int = 32, seed: int = 0):
    """(train, test) TensorDatasets of small images, ``channels x size x size``: each class a brighter quadrant
    over noise (a network learns it in an epoch or two)."""

    def draw(count: int, stream: int):
        generator = torch.Generator().manual_seed(seed * 1000 + stream)
        labels = torch.arange(count) % classes
        pictures = 0.3 * torch.randn(count, channels, size, size, generator=generator)
        half = size // 2
        for label in range(classes):
            row, column = divmod(label % 4, 2)
            pictures[labels == label, :, row * half:(row + 1) * half, column * half:(column + 1) * half] += 1.0
        return TensorDataset(pictures, labels)

    return draw(n, 0), draw(n // 2, 1)


class _Items(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def float_labels():
    """Items whose label is a float: not (tensor, int)."""
    items = [(torch.zeros(4), 0.5)] * 8
    return _Items(items), _Items(items)


def flawed(flaw: str):
    """:func:`blobs` with one flaw: ``int64`` inputs, a NaN in a training input (``nan``), an inf in a test item
    served item by item (``inf_items``), or a test label no training item has (``unseen``: 7 where train has 0-2)."""
    train, test = blobs()
    x, y = train.tensors
    if flaw == "int64":
        return TensorDataset(x.round().long(), y), test
    if flaw == "nan":
        x = x.clone()
        x[5, 2] = float("nan")
        return TensorDataset(x, y), test
    if flaw == "inf_items":
        items = [(a.clone(), int(b)) for a, b in test]
        items[3][0][1] = float("inf")
        return _Items([(a, int(b)) for a, b in train]), _Items(items)
    if flaw == "unseen":
        tx, ty = test.tensors
        ty = ty.clone()
        ty[4] = 7
        return train, TensorDataset(tx, ty)
    raise ValueError(flaw)


def one_dataset():
    """Returns one Dataset, not (train, test)."""
    return blobs()[0]


def tiny_net(num_classes: int, input_shape, hidden: int = 8):
    return nn.Sequential(nn.Linear(input_shape[0], hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def not_a_module(num_classes: int):
    return {"classes": num_classes}


class NoTemperature(torch.optim.SGD):
    """An optimizer that takes csg's keywords but keeps no temperature in its param groups."""

    def __init__(self, params, lr, num_data, temperature, weight_decay):
        super().__init__(params, lr=lr, weight_decay=weight_decay)


class RecordingSGD(torch.optim.Optimizer):
    """Plain SGD that records the (lr, temperature) its groups held at every step: what the loop set."""

    seen: list[tuple[float, float]] = []

    def __init__(self, params, lr, num_data, temperature, weight_decay, scale: float = 1.0):
        super().__init__(params, dict(lr=lr, num_data=num_data, temperature=temperature, weight_decay=weight_decay))
        self.scale = scale

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            RecordingSGD.seen.append((group["lr"], group["temperature"]))
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * self.scale)


def sine(n: int = 160, noise: float = 0.2, dim: int = 2, seed: int = 0, shift: float = 10.0, scale: float = 5.0):
    """(train, test) TensorDatasets of a regression: y = shift + scale (sin(x_0) + 0.5 x_1 + noise e), float targets
    ``(n,)``; ``shift`` and ``scale`` put the targets in units far from standardised ones."""

    def draw(count: int, stream: int):
        generator = torch.Generator().manual_seed(seed * 1000 + stream)
        x = torch.randn(count, dim, generator=generator)
        y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + noise * torch.randn(count, generator=generator)
        return TensorDataset(x, shift + scale * y)

    return draw(n, 0), draw(n // 2, 1)


def sine_items(**options):
    """:func:`sine` as Datasets read item by item, each target a Python float."""
    train, test = sine(**options)
    return (_Items([(x, float(y)) for x, y in zip(*train.tensors)]),
            _Items([(x, float(y)) for x, y in zip(*test.tensors)]))


def flawed_regression(flaw: str):
    """:func:`sine` with one mistake of a user's regression data."""
    train, test = sine()
    x, y = train.tensors
    if flaw == "nan_target":
        y = y.clone()
        y[5] = float("nan")
    elif flaw == "int_target":
        y = y.long()
    elif flaw == "huge_target":  # finite in float64, infinite in the float32 csg trains in
        y = y.double().clone()
        y[3] = 1e300
    elif flaw == "widths":
        return TensorDataset(x, y), TensorDataset(test.tensors[0], test.tensors[1].reshape(-1, 1).repeat(1, 2))
    elif flaw == "ragged_items":
        items = [(x[i], torch.ones(1 if i else 2)) for i in range(len(x))]
        return _Items(items), test
    return TensorDataset(x, y), test


class StudentT(Likelihood):
    """A user's own likelihood (as docs/likelihoods.md writes one): Student-t noise of ``dof`` degrees of freedom and
    a fixed ``scale``; members predict the moment-matched Gaussian (dof > 2)."""

    task = "regression"

    def __init__(self, dof: float = 4.0, scale: float = 0.5):
        self.dof, self.scale = dof, scale

    def nll(self, output, y, params):
        distribution = torch.distributions.StudentT(self.dof, output.float(), self.scale)
        return -distribution.log_prob(y.reshape(output.shape).float()).flatten(1).sum(1)

    def predictive(self, output, params):
        mean = output.float()
        return mean, torch.full_like(mean, self.scale**2 * self.dof / (self.dof - 2))


class SigtermAfterEpoch:
    """A loop callback that sends this process SIGTERM at the end of epoch ``epoch``: a preemption, in-process."""

    def __init__(self, epoch: int = 2):
        self.epoch = epoch

    def on_epoch_end(self, event):
        import os
        import signal

        if event.epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


class SummingNll(StudentT):
    """A flawed likelihood: its nll sums over the batch instead of one value per example."""

    def nll(self, output, y, params):
        return super().nll(output, y, params).sum()


class NanNll(StudentT):
    """A flawed likelihood: its nll is NaN (a log of a negative number, say)."""

    def nll(self, output, y, params):
        return super().nll(output, y, params) * float("nan")


class InfinitePrior(StudentT):
    """A flawed likelihood: a prior on its parameters that gives them no density."""

    def prior_energy(self, params):
        return float("inf")


class NoPredictive(Likelihood):
    """A flawed likelihood: an nll, and no predictive (csg evaluates members with it)."""

    task = "regression"

    def nll(self, output, y, params):
        return (output.float().reshape(-1) - y.float().reshape(-1)).square()
