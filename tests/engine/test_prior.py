"""A prior set as a variance and a budget over all chains (issue 73): ``prior.variance`` gives every sampled weight N(0, variance) whatever the
number of training examples N, where ``sampler.weight_decay`` is per example (precision N wd: a split changes it);
metrics.json records the prior a run sampled with, and a bad value is one line before any training."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from csg.engine.settings import PriorSettings, prior_settings
from csg.engine.prior import prior_record, weight_decay
from tests.conftest import assert_one_line

TINY = ["trainer.epochs=2", "sampler.cycles=1", "sampler.explore=0.5", "sampler.samples_per_cycle=1",
        "logger=none", "trainer.checkpoint.every_n_epochs=0", "data.test_per_class=10"]


def test_the_variance_fixes_the_prior_whatever_n_and_the_weight_decay_stays_per_example():
    cfg = OmegaConf.create({"sampler": {"weight_decay": 5e-4}, "prior": {"variance": None}})
    assert [weight_decay(n, **prior_settings(cfg).arguments()) for n in (1000, 4000)] == [5e-4, 5e-4]  # precision N wd: 0.5, 2
    assert prior_record(4000, **prior_settings(cfg).arguments()) == {"variance": 0.5, "precision": 2.0, "weight_decay": 5e-4,
                                                        "set_by": "sampler.weight_decay"}
    cfg.prior.variance = 0.5
    for n in (1000, 4000):
        record = prior_record(n, **prior_settings(cfg).arguments())
        assert record["variance"] == pytest.approx(0.5) and record["precision"] == pytest.approx(2.0)
        assert weight_decay(n, **prior_settings(cfg).arguments()) == pytest.approx(1 / (n * 0.5))
        assert record["set_by"] == "prior.variance"
    saved_before_the_key = OmegaConf.create({"sampler": {"weight_decay": 1e-3}})
    assert weight_decay(10, **prior_settings(saved_before_the_key).arguments()) == 1e-3
    assert prior_settings(saved_before_the_key) == PriorSettings(variance=None, decay=1e-3)


@pytest.mark.slow
def test_two_training_sets_of_other_sizes_sample_one_prior(run_train, tmp_path):
    records = []
    for per_class in (20, 40):
        process, run_dir = run_train(*TINY, f"data.train_per_class={per_class}", "prior.variance=0.25",
                                     run_dir=tmp_path / f"n{per_class}")
        assert process.returncode == 0, process.stderr[-2000:]
        metrics = json.loads((run_dir / "metrics.json").read_text())
        records.append((metrics["num_data"], metrics["prior"]))
    assert [n for n, _ in records] == [200, 400]
    for n, prior in records:
        assert prior["variance"] == pytest.approx(0.25) and prior["weight_decay"] == pytest.approx(1 / (n * 0.25))
    refused, run_dir = run_train("prior.variance=0", run_dir=tmp_path / "refused")
    assert_one_line(refused, 2, "prior.variance=0 is not allowed: null or a finite number > 0")
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_budget_over_all_chains_is_one_key_split_over_the_chains(run_train, tmp_path):
    process, run_dir = run_train(*[a for a in TINY if not a.startswith("trainer.epochs")], "sampler.chains=2",
                                 "trainer.epochs_all_chains=4", run_dir=tmp_path / "budget")
    assert process.returncode == 0, process.stderr[-2000:]
    cost = json.loads((run_dir / "metrics.json").read_text())["cost"]
    assert cost == {"epochs_per_chain": 2, "epochs_all_chains": 4}
    for arguments, line in ((["trainer.epochs_all_chains=5", "sampler.chains=2"],
                             "trainer.epochs_all_chains=5 is not allowed: a multiple of sampler.chains=2"),
                            (["trainer.epochs_all_chains=4", "trainer.epochs=3"],
                             "trainer.epochs=3 is not allowed: unset with trainer.epochs_all_chains=4")):
        refused, where = run_train(*arguments, run_dir=tmp_path / "refused")
        assert_one_line(refused, 2, line)
        assert not where.exists()
