"""The UCI regression sets (csg/data/uci_regression.py): the real copies pip ships, the benchmark's own file format
and published splits, our seeded splits and the standardisation (issue 60)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from csg.data import build_data
from csg.data.uci_regression import TABLES, random_split, uci_regression
from csg.errors import ConfigError, DataNotFoundError


@pytest.mark.parametrize("name", ["boston", "concrete", "wine_red", "yacht", "power", "protein", "diabetes"])
def test_the_real_sets_ship_offline_whole(name):
    """Every row of the UCI original (make install's uci extra, and mlxtend for Boston)."""
    splits = uci_regression(name, split=0)
    x_train, y_train = splits.train.tensors
    x_test, _ = splits.test.tensors
    assert len(x_train) + len(x_test) == TABLES[name].rows and len(x_test) == round(0.1 * TABLES[name].rows)
    assert splits.task == "regression" and splits.num_classes == 1 and y_train.shape == (len(x_train), 1)
    assert torch.allclose(x_train.mean(0), torch.zeros(x_train.shape[1]), atol=1e-4)  # standardised on train
    assert abs(float(y_train.mean())) < 1e-4 and abs(float(y_train.std()) - 1) < 1e-3
    if name == "boston":  # the median value of owner-occupied homes, k$: the classic table's mean is 22.53
        assert abs(splits.target_scale.shift[0] - 22.53) < 1.0 and splits.input_shape == (13,)


def test_splits_are_fixed_by_their_number_and_differ_between_numbers():
    first, again, other = random_split(506, 3), random_split(506, 3), random_split(506, 4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other[1])
    assert set(first[0]).isdisjoint(first[1]) and len(first[0]) + len(first[1]) == 506


def _benchmark_folder(root, rows=30, split=None):
    """A set in the benchmark's format: data.txt (whitespace), index_features.txt, index_target.txt."""
    folder = root / "yacht" / "data"
    folder.mkdir(parents=True)
    table = np.random.default_rng(0).normal(size=(rows, 7))
    np.savetxt(folder / "data.txt", table)
    np.savetxt(folder / "index_features.txt", np.arange(6), fmt="%d")
    np.savetxt(folder / "index_target.txt", [6], fmt="%d")
    if split is not None:
        np.savetxt(folder / f"index_train_{split}.txt", np.arange(3, rows), fmt="%d")
        np.savetxt(folder / f"index_test_{split}.txt", np.arange(3), fmt="%d")
    return table


def test_the_benchmarks_own_files_and_published_splits_are_read(tmp_path):
    table = _benchmark_folder(tmp_path, split=0)
    splits = uci_regression("yacht", split=0, root=str(tmp_path))
    assert "benchmark files" in splits.source and "published split" in splits.source
    raw_test = splits.target_scale.targets(splits.test.tensors[1].double())[:, 0]
    assert torch.allclose(raw_test, torch.from_numpy(table[:3, 6]), atol=1e-5)  # rows 0-2 are the test split
    ours = uci_regression("yacht", split=1, root=str(tmp_path))  # no index files for split 1: our split
    assert "our split 1" in ours.source


def test_a_set_with_no_copy_and_bad_options_are_one_line(tmp_path):
    with pytest.raises(DataNotFoundError, match="data.name='energy': no copy of it here; data.root="):
        uci_regression("energy")
    for source in ("benchmark", "auto"):  # issue 74: a data.root without the files was never named (auto)
        with pytest.raises(DataNotFoundError, match=r"data.root='.*': a folder holding yacht/data/data.txt"):
            uci_regression("yacht", root=str(tmp_path), source=source)
    with pytest.raises(DataNotFoundError, match="data.root='/nonexistent'"):
        uci_regression("boston", root="/nonexistent")
    with pytest.raises(ConfigError, match="data.split=-1 is not allowed"):
        uci_regression("boston", split=-1)


def test_build_data_serves_a_uci_set_as_the_run_does():
    bundle = build_data("boston", batch_size=32, split=2)
    assert bundle.task == "regression" and bundle.num_train == 455 and bundle.target_scale is not None
    x, y = next(iter(bundle.train))
    assert x.shape == (32, 13) and y.shape == (32, 1) and y.dtype == torch.float32


@pytest.mark.parametrize(("damage", "file", "fragment"), [
    ("empty index", "index_features.txt", "a file of numbers (it is empty)"),
    ("empty data", "data.txt", "a file of numbers (it is empty)"),
    ("words in data", "data.txt", "a whitespace-separated table of float64 numbers"),
    ("feature out of range", "index_features.txt", "column (data.txt has 7 columns) numbers in 0..6: it names 9"),
    ("target out of range", "index_target.txt", "numbers in 0..6: it names -1"),
    ("nan in data", "data.txt", "finite numbers: row 3, column 2 is nan"),
    ("split out of range", "index_test_0.txt", "row (data.txt has 30 rows) numbers in 0..29: it names 40"),
])
def test_damaged_benchmark_files_under_data_root_are_one_line_naming_the_file(tmp_path, damage, file, fragment):
    """issue 74: tracebacks (an empty index, words in data.txt, a column out of range) or a NaN found only when
    training diverged."""
    _benchmark_folder(tmp_path, split=0)
    folder = tmp_path / "yacht" / "data"
    if damage.startswith("empty"):
        (folder / file).write_text("")
    elif damage == "words in data":
        (folder / file).write_text("1 2 3 4 5 6 7\nseven eight nine ten a b c\n")
    elif damage == "feature out of range":
        np.savetxt(folder / file, [0, 1, 9], fmt="%d")
    elif damage == "target out of range":
        np.savetxt(folder / file, [-1], fmt="%d")
    elif damage == "nan in data":
        table = np.loadtxt(folder / file)
        table[2, 2] = np.nan
        np.savetxt(folder / file, table)
    else:
        np.savetxt(folder / file, [0, 1, 40], fmt="%d")
    with pytest.raises(ConfigError) as refused:
        uci_regression("yacht", split=0, root=str(tmp_path))
    assert refused.value.key == "data.root" and str(folder / file) in str(refused.value)
    assert fragment in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
