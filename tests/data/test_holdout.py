"""``data.holdout``: a share of the training split held out and served as the test split (what csg-tune scores on)."""

from __future__ import annotations

import pytest
import torch

from csg.data import build_data
from csg.data.splits import InMemoryDataset, Splits, hold_out
from csg.errors import ConfigError


def _splits(n: int = 50) -> Splits:
    x = torch.arange(n, dtype=torch.float32).reshape(n, 1)
    test = InMemoryDataset(torch.full((7, 1), -1.0), torch.zeros(7, dtype=torch.long))
    return Splits(train=InMemoryDataset(x, torch.arange(n) % 3), test=test, num_classes=3, input_shape=(1,))


def test_the_held_out_examples_leave_the_training_split_and_become_the_test_split():
    held = hold_out(_splits(), 0.2)
    train = set(held.train.tensors[0].flatten().tolist())
    test = set(held.test.tensors[0].flatten().tolist())
    assert len(train) == 40 and len(test) == 10 and not train & test and train | test == set(map(float, range(50)))
    assert -1.0 not in test  # the original test split is not read
    assert torch.equal(held.train.tensors[1], (held.train.tensors[0].flatten().long() % 3))  # labels stay with inputs


def test_every_run_holds_out_the_same_examples_and_another_seed_others():
    first, again = hold_out(_splits(), 0.2), hold_out(_splits(), 0.2)
    other = hold_out(_splits(), 0.2, seed=1)
    assert torch.equal(first.test.tensors[0], again.test.tensors[0])
    assert not torch.equal(first.test.tensors[0], other.test.tensors[0])


@pytest.mark.parametrize("share", [0.001, 1.0, 0.999])
def test_a_share_that_holds_out_nothing_or_everything_is_refused_naming_the_key(share):
    with pytest.raises(ConfigError, match="data.holdout"):
        hold_out(_splits(), share)


def test_a_real_loader_serves_the_held_out_digits_as_its_test_set():
    full = build_data("mnist5k", batch_size=100, train_per_class=20)
    held = build_data("mnist5k", batch_size=100, train_per_class=20, holdout=0.25)
    assert (full.num_train, held.num_train, held.num_test) == (200, 150, 50)
    train_x = torch.cat([x for x, _ in full.train_eval])
    test_x = torch.cat([x for x, _ in held.test])
    assert all((train_x == row).all(dim=(1, 2, 3)).any() for row in test_x)  # held-out rows are training digits
