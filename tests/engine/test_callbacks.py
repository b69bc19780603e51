"""Your callbacks in csg's loop (csg/engine/callbacks.py; ``+callbacks.<name>._target_=...``): the events at the
phases of the schedule, one line for each wrong callback before any training, and a run with callbacks loads as a
posterior without importing them."""

from __future__ import annotations

import json
import sys

import pytest
import torch

import csg
from csg.engine.callbacks import LoopCallbacks
from csg.schedules import collection_points
from csg.engine.loop import train_chain
from csg.engine.sampling import Chain
from csg.errors import ConfigError
from csg.samplers import SGLD
from csg.schedules import Cyclical

RECORDER = '''
import json


class Recorder:
    """Every event, as a line of events.jsonl in the folder the run starts in."""

    def __init__(self, tag="r"):
        self.tag = tag

    def _write(self, phase, event, **more):
        row = {"tag": self.tag, "phase": phase, "epoch": event.epoch, "k": event.iteration, "stage": event.stage,
               "temperature": event.temperature, **more}
        with open("events.jsonl", "a") as handle:
            handle.write(json.dumps(row) + "\\n")

    def on_epoch_start(self, event):
        self._write("start", event)

    def on_stage_change(self, event):
        self._write("stage", event, previous=event.previous)

    def on_sample(self, event):
        self._write("sample", event, index=event.record["index"], file=event.record["path"].rsplit("/", 1)[-1])

    def on_epoch_end(self, event):
        self._write("end", event, loss=event.values["train_loss"])


class Silent:
    pass


def silent_factory():
    return object()
'''


class _Events:
    def __init__(self):
        self.seen = []

    def on_stage_change(self, event):
        self.seen.append(("stage", event.epoch, event.iteration, event.previous, event.stage, event.temperature))

    def on_sample(self, event):
        self.seen.append(("sample", event.epoch, event.iteration, event.record["index"]))

    def on_epoch_start(self, event):
        self.seen.append(("start", event.epoch, event.iteration))


def test_the_loop_calls_each_phase_where_the_schedule_says():
    torch.manual_seed(0)
    x, y = torch.randn(48, 4), torch.randint(0, 2, (48,))
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 48, 16)]
    model = torch.nn.Linear(4, 2)
    sampler = SGLD(model.parameters(), lr=0.01, num_data=48, temperature=0.3,
                   generator=torch.Generator().manual_seed(1))
    schedule = Cyclical(lr0=0.01, total_steps=12, cycles=2, explore=0.5)  # cycles of 6 steps: sampling from 3 on
    events = _Events()
    plan = collection_points(schedule, 4, 3, 1)
    train_chain(model, sampler, schedule, batches, store=None, epochs=4, temperature=0.3, plan=plan,
                device=torch.device("cpu"), callbacks=[events, object()])  # an object without phases: ignored
    assert events.seen == [("start", 0, 0), ("start", 1, 3), ("stage", 1, 3, "exploration", "sampling", 0.3),
                           ("sample", 1, 5, 0), ("start", 2, 6), ("stage", 2, 6, "sampling", "exploration", 0.0),
                           ("start", 3, 9), ("stage", 3, 9, "exploration", "sampling", 0.3), ("sample", 3, 11, 1)]
    assert [(p.epoch, p.iteration) for p in plan] == [(1, 5), (3, 11)]


class _Meddler:
    """A callback that changes what csg sets (issue 74: the change took effect for an iteration, without a word)."""

    def __init__(self, key):
        self.key = key

    def on_stage_change(self, event):
        for group in event.sampler.param_groups:
            group[self.key] = group[self.key] * 10 + 1


@pytest.mark.parametrize("key", ["lr", "temperature"])
def test_a_callback_that_changes_the_step_or_temperature_stops_the_run_naming_it(key):
    torch.manual_seed(0)
    x, y = torch.randn(48, 4), torch.randint(0, 2, (48,))
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 48, 16)]
    model = torch.nn.Linear(4, 2)
    sampler = SGLD(model.parameters(), lr=0.01, num_data=48, temperature=0.3)
    schedule = Cyclical(lr0=0.01, total_steps=12, cycles=2, explore=0.5)
    with pytest.raises(ConfigError, match=f"callbacks='_Meddler' is not allowed: a callback that observes: its "
                                          f"on_stage_change changed the sampler's {key}") as refused:
        train_chain(model, sampler, schedule, batches, store=None, epochs=4, temperature=0.3,
                    plan=collection_points(schedule, 4, 3, 1), device=torch.device("cpu"), callbacks=[_Meddler(key)])
    assert "\n" not in str(refused.value)


def test_a_chain_resumed_inside_a_stage_starts_in_that_stage():
    model = torch.nn.Linear(2, 2)
    sampler = SGLD(model.parameters(), lr=0.1, num_data=4, temperature=1.0)
    schedule = Cyclical(lr0=0.1, total_steps=12, cycles=2, explore=0.5)
    fresh = Chain(sampler, schedule, epochs=4, batches_per_epoch=3, temperature=1.0)
    resumed = Chain(sampler, schedule, epochs=4, batches_per_epoch=3, temperature=1.0)
    resumed.load_state_dict({"loop": {**fresh.state_dict()["loop"], "iteration": 4, "epoch": 1, "batch": 1},
                             "kept": []})
    assert fresh.stage == "exploration" and Chain(sampler, schedule, epochs=4, batches_per_epoch=3, temperature=1.0,
                                                  state=resumed.state).stage == "sampling"
    at_boundary = Chain(sampler, schedule, epochs=4, batches_per_epoch=3, temperature=1.0,
                        state=type(resumed.state)(epoch=1, batch=0, iteration=3))  # sampling starts at k = 3
    assert (at_boundary.stage, at_boundary.chain_temperature) == ("exploration", 0.0)  # what k = 2 set
    at_boundary.begin_step()
    assert (at_boundary.stage, at_boundary.chain_temperature) == ("sampling", 1.0)  # the change a loop reports
    assert LoopCallbacks([]).callbacks == [] and not LoopCallbacks([])


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "my_callbacks.py").write_text(RECORDER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_callbacks", None)


BASE = ["trainer.epochs=4", "sampler.cycles=2", "sampler.samples_per_cycle=1", "data.test_per_class=5",
        "logger=none", "trainer.progress=false", "trainer.threads=1"]


def test_a_users_callbacks_by_target_see_the_run_and_its_posterior_does_not_need_them(project):
    posterior = csg.train([*BASE, "+callbacks.first._target_=my_callbacks.Recorder", "+callbacks.first.tag=a",
                           "+callbacks.second._target_=my_callbacks.Recorder", "+callbacks.second.tag=b",
                           "hydra.run.dir=run"])
    rows = [json.loads(line) for line in (project / "events.jsonl").read_text().splitlines()]
    assert [r["tag"] for r in rows] == ["a", "b"] * (len(rows) // 2)  # in the config's order, each event
    mine = [r for r in rows if r["tag"] == "a"]
    assert [r["phase"] for r in mine if r["phase"] != "stage"] == ["start", "end"] * 1 + ["start", "sample", "end",
                                                                                          "start", "end",
                                                                                          "start", "sample", "end"]
    stages = [(r["previous"], r["stage"], r["temperature"]) for r in mine if r["phase"] == "stage"]
    assert stages == [("exploration", "sampling", 0.2), ("sampling", "exploration", 0.0),
                      ("exploration", "sampling", 0.2)]
    assert [r["file"] for r in mine if r["phase"] == "sample"] == posterior.names
    del sys.modules["my_callbacks"]
    (project / "my_callbacks.py").unlink()  # the run is data: loading it imports no callback
    loaded = csg.Posterior.load(project / "run")
    assert loaded.names == posterior.names and "callbacks" not in loaded.cfg


@pytest.mark.parametrize("override, message", [
    ("+callbacks.c._target_=my_callbacks.Silent",
     "^callbacks.c._target_='my_callbacks.Silent' is not allowed: a class with one of the methods on_epoch_start"),
    ("+callbacks.c._target_=my_callbacks.silent_factory",
     "^callbacks.c='my_callbacks.silent_factory' is not allowed: an object with one of the methods .* built a object"),
    ("+callbacks.c._target_=my_callbacks.Missing", "^callbacks.c._target_='my_callbacks.Missing' is not allowed: a "
                                                   "dotted path that imports"),
    ("+callbacks.c=3", "^callbacks.c='3' is not allowed: a mapping with _target_"),
])
def test_a_wrong_callback_is_one_line_before_any_training(project, override, message):
    with pytest.raises(ConfigError, match=message):
        csg.train([*BASE, override, "hydra.run.dir=run"])
    assert not (project / "run").exists() and not (project / "events.jsonl").exists()


def test_an_exception_in_a_callback_stops_the_run_and_keeps_its_samples(project):
    (project / "my_callbacks.py").write_text(RECORDER + '''

class Failing(Recorder):
    def on_epoch_end(self, event):
        if event.epoch == 2:
            raise RuntimeError("my callback failed")
''')
    with pytest.raises(RuntimeError, match="my callback failed"):
        csg.train([*BASE, "+callbacks.c._target_=my_callbacks.Failing", "hydra.run.dir=run"])
    assert sorted(p.name for p in (project / "run" / "samples").glob("sample_*.pt")) == \
        ["sample_0000_cycle00_epoch0001.pt"]


def test_callbacks_are_not_part_of_what_a_checkpoint_must_share():
    from omegaconf import OmegaConf

    from csg.engine.settings import config_fingerprint

    mine = OmegaConf.create({"seed": 0, "callbacks": {"a": {"_target_": "my_callbacks.Recorder"}}})
    assert config_fingerprint(mine) == config_fingerprint(OmegaConf.create({"seed": 0, "callbacks": {}})) == \
        {"seed": 0}
