"""An ensemble that differs in its last layer, evaluated with the trunk once (csg/evaluation/heads.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from csg.evaluation import evaluate_samples


class Counted(nn.Module):
    """The trunk, counting the batches it sees."""

    def __init__(self):
        super().__init__()
        self.body, self.calls = nn.Sequential(nn.Linear(4, 16), nn.ReLU()), 0

    def forward(self, x):
        self.calls += 1
        return self.body(x)


class Scaled(nn.Module):
    """A model whose head is not its last operation: its output is the head's, doubled."""

    def __init__(self):
        super().__init__()
        self.trunk, self.head = Counted(), nn.Linear(16, 3)

    def forward(self, x):
        return 2 * self.head(self.trunk(x))


def _members(model, count: int):
    torch.manual_seed(1)
    states = []
    for _ in range(count):
        nn.init.normal_(model.head.weight)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    return states


@pytest.fixture
def loader():
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(50, 4), torch.randint(0, 3, (50,))), batch_size=16)


def test_the_trunk_runs_once_and_the_metrics_are_those_of_whole_passes(loader):
    model = nn.Sequential()
    model.trunk, model.head = Counted(), nn.Linear(16, 3)
    states, weights = _members(model, 5), [1.0] * 5
    whole = evaluate_samples(model, states, weights, loader, torch.device("cpu"))
    assert model.trunk.calls == 5 * len(loader)
    model.trunk.calls = 0
    ood = DataLoader(loader.dataset, batch_size=16)
    heads = evaluate_samples(model, states, weights, loader, torch.device("cpu"), head="head", ood_loader=ood)
    assert model.trunk.calls == 2 * len(loader)  # once on the test loader, once on the OOD one
    assert heads.ensemble == pytest.approx(whole.ensemble) and torch.allclose(heads.probs, whole.probs)
    assert [m == pytest.approx(w) for m, w in zip(heads.per_sample, whole.per_sample)] == [True] * 5


def test_a_head_that_is_not_the_last_operation_falls_back_to_whole_passes(loader):
    model = Scaled()
    states = _members(model, 3)
    heads = evaluate_samples(model, states, [1.0] * 3, loader, torch.device("cpu"), head="head")
    assert model.trunk.calls == 3 * len(loader)
    model.trunk.calls = 0
    whole = evaluate_samples(model, states, [1.0] * 3, loader, torch.device("cpu"))
    assert heads.ensemble == pytest.approx(whole.ensemble)
