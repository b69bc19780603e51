"""Which epochs yield samples, and how sample files are written."""

from __future__ import annotations

import os

import pytest
import torch

from csg.schedules import collection_points
from csg.engine.samples import SampleStore
from csg.schedules import Cyclical, Decreasing


def test_authors_setting_takes_the_last_three_epochs_of_each_cycle():
    # 200 epochs, 782 batches per epoch, M = 4, sampling in the last 10% of each cycle
    schedule = Cyclical(lr0=0.5, total_steps=200 * 782, cycles=4, explore=0.9)
    points = collection_points(schedule, epochs=200, batches_per_epoch=782, samples_per_cycle=3)
    assert [p.epoch for p in points] == [47, 48, 49, 97, 98, 99, 147, 148, 149, 197, 198, 199]
    assert [p.cycle for p in points] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert points[0].iteration == 48 * 782 - 1


def test_sgld_baseline_takes_the_last_twenty_epochs():
    schedule = Decreasing.from_endpoints(0.5, 0.01, total_steps=200 * 782, gamma=0.55, explore=0.75)
    points = collection_points(schedule, epochs=200, batches_per_epoch=782, samples_per_cycle=20)
    assert [p.epoch for p in points] == list(range(180, 200))


def test_too_many_samples_per_cycle_is_an_error():
    schedule = Cyclical(lr0=0.5, total_steps=20 * 10, cycles=4, explore=0.8)  # 5 epochs per cycle, 1 to sample
    assert len(collection_points(schedule, 20, 10, 1)) == 4
    with pytest.raises(ValueError, match="exceeds"):
        collection_points(schedule, 20, 10, 2)


def test_sample_files_are_atomic_sorted_and_complete(tmp_path):
    store = SampleStore(tmp_path / "samples")
    model = torch.nn.Linear(3, 2)
    for index, (cycle, epoch) in enumerate([(0, 8), (0, 9), (1, 18), (1, 19), (2, 100)]):
        with torch.no_grad():
            model.weight.fill_(index)
        store.save(model, index=index, cycle=cycle, epoch=epoch, iteration=epoch * 10 + 9, lr=0.01, train_loss=0.5)
    names = [p.name for p in store.paths()]
    assert names == sorted(names) and len(names) == 5
    assert names[-1] == "sample_0004_cycle02_epoch0100.pt"
    assert not [f for f in os.listdir(store.directory) if f.endswith(".tmp")]
    record = SampleStore.load(store.paths()[2])
    assert (record["cycle"], record["epoch"], record["iteration"], record["index"]) == (1, 18, 189, 2)
    assert record["lr"] == 0.01 and record["train_loss"] == 0.5
    assert torch.all(record["state_dict"]["weight"] == 2)


def test_atomic_writes_give_the_mode_a_plain_write_would(tmp_path):
    """mkstemp's temporary file is 0600; the written file is 0666 less the umask, or keeps an existing file's mode."""
    from csg.io.atomic import atomic_write_text

    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.md", "a")
        assert os.stat(tmp_path / "new.md").st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.md"
        kept.write_text("old")
        os.chmod(kept, 0o640)
        atomic_write_text(kept, "new")
        assert os.stat(kept).st_mode & 0o777 == 0o640 and kept.read_text() == "new"
    finally:
        os.umask(previous)
