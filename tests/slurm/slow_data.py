"""A data set whose epochs take wall-clock time but almost no CPU: the SLURM tests' runs that must still be training
when a time-limit signal or ``scancel`` comes, on a 2-core machine that runs other tests meanwhile.

    data=custom data._target_=tests.slurm.slow_data.slow_blobs data.num_classes=3 +data.delay_s=0.01

Each training item is served after ``delay_s`` of sleep (the framework serves a Dataset that is not a
TensorDataset item by item, every epoch); the items themselves are the Gaussian blobs of
``tests/own_components.py``, so batches, their order and every result are as reproducible as any other run's.
"""

from __future__ import annotations

import time

from torch.utils.data import Dataset, TensorDataset

from tests.own_components import blobs


class Slow(Dataset):
    """``data``'s items, each after ``delay_s`` seconds."""

    def __init__(self, data: TensorDataset, delay_s: float):
        self.data, self.delay_s = data, delay_s

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)
        inputs, label = self.data[index]
        return inputs, int(label)


def slow_blobs(n: int = 64, classes: int = 3, dim: int = 4, seed: int = 0, delay_s: float = 0.01):
    """(train, test): blobs whose training items each take ``delay_s`` to read; the test items come at once."""
    train, test = blobs(n=n, classes=classes, dim=dim, seed=seed)
    return Slow(train, delay_s), Slow(test, 0.0)
