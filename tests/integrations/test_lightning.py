"""csg.integrations.lightning.CyclicalSGMCMC on a toy LightningModule (tests/integrations/lightning_toy.py): the
stage switch it sets; a run stopped and resumed from Lightning's checkpoint takes the uninterrupted run's samples, and
so do two processes under DDP; one line for each setting it refuses. (The docs page's run against csg-train:
tests/engine/test_own_loop.py.)"""

from __future__ import annotations

import pytest
import torch

import csg
from csg.errors import ConfigError
from csg.schedules import Cyclical

pl = pytest.importorskip("lightning.pytorch")
from csg.integrations.lightning import CyclicalSGMCMC  # noqa: E402
from tests.conftest import ROOT  # noqa: E402
from tests.integrations.lightning_toy import SCHEDULE, Batches, Toy  # noqa: E402

def _batches():
    return Batches()


class StopAfter(pl.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


def _trainer(tmp_path, *callbacks, checkpoints=False, epochs=6):
    more = [pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, every_n_epochs=1)] if checkpoints else []
    return pl.Trainer(max_epochs=epochs, callbacks=[*callbacks, *more], accelerator="cpu", devices=1, logger=False,
                      enable_checkpointing=checkpoints, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)


def test_the_callback_sets_the_schedules_step_and_temperature_and_collects_by_the_plan(tmp_path):
    torch.set_num_threads(1)
    sgmcmc = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net")
    module = Toy()
    _trainer(tmp_path, sgmcmc).fit(module, train_dataloaders=_batches())
    assert module.seen == [(SCHEDULE.lr(k), 0.5 if SCHEDULE.sampling(k) else 0.0) for k in range(18)]
    assert [(r["cycle"], r["epoch"]) for r in sgmcmc.samples] == [(0, 1), (0, 2), (1, 4), (1, 5)]
    assert sgmcmc.sample_states()[-1].keys() == module.net.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(sgmcmc.sample_states()[-1].values(),
                                                  module.net.state_dict().values()))
    posterior = sgmcmc.posterior(module.net, input_shape=(5,))
    assert isinstance(posterior, csg.Posterior) and len(posterior) == 4 and posterior.num_classes == 3
    # the sampler's temperatures, read in its sampling steps only: after Lightning's closure, before the update
    reading = sgmcmc.diagnostics()
    sampling_steps = sum(SCHEDULE.sampling(k) for k in range(18))
    assert reading.steps == sampling_steps and reading.target == pytest.approx(0.5)
    assert [stage.steps for stage in reading.stages] == [sampling_steps // 2] * 2
    assert reading.configurational is not None and str(reading).startswith("configurational temperature")


def test_a_run_resumed_from_lightnings_checkpoint_takes_the_uninterrupted_runs_samples(tmp_path):
    torch.set_num_threads(1)
    whole = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net")
    _trainer(tmp_path / "whole", whole).fit(Toy(), train_dataloaders=_batches())

    first = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net",
                           store=tmp_path / "samples")
    _trainer(tmp_path / "ckpt", first, StopAfter(2), checkpoints=True).fit(Toy(), train_dataloaders=_batches())
    assert len(first.samples) == 2  # stopped after epoch 2, as a preempted job
    resumed = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net",
                             store=tmp_path / "samples")
    module = Toy()
    torch.manual_seed(123)  # nothing of the resumed run may come from the global random state
    _trainer(tmp_path / "ckpt2", resumed).fit(module, train_dataloaders=_batches(),
                                              ckpt_path=str(tmp_path / "ckpt" / "epoch=2-step=9.ckpt"))
    assert [r["epoch"] for r in resumed.samples] == [1, 2, 4, 5]
    assert all(torch.equal(a[key], b[key]) for a, b in zip(whole.sample_states(), resumed.sample_states())
               for key in a)
    assert sorted(p.name for p in (tmp_path / "samples").glob("sample_*.pt")) == resumed.chain.sample_names()
    # the same checkpoint resumed as a longer run: its schedule and samples were another run's
    longer = CyclicalSGMCMC(lambda steps: Cyclical(lr0=0.05, total_steps=steps, cycles=2, explore=0.5),
                            temperature=0.5, samples_per_cycle=1, module="net")
    with pytest.raises(ConfigError, match=r"^max_epochs='7 x 3 batches' is not allowed: the checkpoint's run: 6 x 3"):
        _trainer(tmp_path / "ckpt3", longer, epochs=7).fit(Toy(), train_dataloaders=_batches(),
                                                           ckpt_path=str(tmp_path / "ckpt" / "epoch=2-step=9.ckpt"))


def test_a_schedule_of_another_length_is_one_line_before_the_first_step(tmp_path):
    sgmcmc = CyclicalSGMCMC(Cyclical(lr0=0.05, total_steps=20, cycles=2, explore=0.5), temperature=0.5)
    module = Toy()
    with pytest.raises(ConfigError, match="schedule='20 iterations'.*max_epochs x batches per epoch = 18"):
        _trainer(tmp_path, sgmcmc).fit(module, train_dataloaders=_batches())
    assert module.seen == []


@pytest.mark.parametrize("sampler", [False, "sgd with a temperature key"])
def test_a_module_without_a_csg_sampler_is_one_line_before_the_first_step(tmp_path, sampler):
    sgmcmc = CyclicalSGMCMC(SCHEDULE, temperature=0.5)
    module = Toy(sampler=sampler)
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(ConfigError, match="configure_optimizers='SGD' is not allowed: one csg sampler"):
        _trainer(tmp_path, sgmcmc).fit(module, train_dataloaders=_batches())
    assert module.seen == [] and all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_a_module_attribute_that_is_not_there_is_one_line_before_the_first_step(tmp_path):
    """issue 74: module='nope' was refused only at the first epoch's end."""
    module = Toy()
    with pytest.raises(ConfigError, match="module='nope' is not allowed: an attribute of Toy that is a module"):
        _trainer(tmp_path, CyclicalSGMCMC(SCHEDULE, temperature=0.5, module="nope")).fit(
            module, train_dataloaders=_batches())
    assert module.seen == []


def test_a_run_cut_short_says_how_many_of_its_samples_it_took(tmp_path, caplog):
    """issue 74: max_time cut a run to 1 of its 2 planned samples without a word."""
    sgmcmc = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=1, module="net")
    with caplog.at_level("WARNING", logger="csg.integrations.lightning"):
        _trainer(tmp_path, sgmcmc, StopAfter(2)).fit(Toy(), train_dataloaders=_batches())
    said = [r.getMessage() for r in caplog.records if r.name == "csg.integrations.lightning"]
    assert said == ["the run stopped at epoch 3 of 6 (max_time, max_steps, early stopping or should_stop): 1 of the 2 "
                    "planned samples taken; resume from its last checkpoint (ckpt_path=) for the rest"]


def test_two_processes_under_lightnings_ddp_take_the_one_process_samples_written_once(tmp_path):
    """Every process iterates the same batches (an iterable, not a DataLoader: Lightning shards none) and draws the
    same noise: DDP's average of equal gradients is each one, so the replicas and their samples are one process's."""
    import os
    import subprocess
    import sys

    from csg.engine.samples import SampleStore

    torch.set_num_threads(1)
    one = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net", store=tmp_path / "one")
    _trainer(tmp_path / "single", one).fit(Toy(), train_dataloaders=_batches())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "integrations" / "lightning_toy.py"),
                           str(tmp_path / "two"), "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    two = SampleStore(tmp_path / "two")
    two.verify()  # one writer: the manifest names each sample once, each file intact
    names = [p.name for p in two.paths()]
    assert names == one.chain.sample_names() and len(names) == 4
    for state, path in zip(one.sample_states(), two.paths()):
        assert all(torch.equal(state[key], value) for key, value in two.state_of(path).items())
