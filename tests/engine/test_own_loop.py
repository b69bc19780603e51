"""csg.Chain in a loop of one's own (docs/own-loop.md) and in Lightning's (docs/lightning.md): each page's loop gives
csg-train's samples and metrics; a chain stores, checkpoints and resumes as csg-train's does, in a loop of one's own
and through Lightning's checkpoints; csg.Posterior of one's own model and state dicts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import csg
from csg.engine.samples import SampleStore
from csg.errors import DamagedFileError
from csg.engine.sampling import Chain
from csg.samplers import SGLD
from csg.schedules import Cyclical
from tests.conftest import ROOT, read_samples

PAGE = ROOT / "docs" / "own-loop.md"
LIGHTNING_PAGE = ROOT / "docs" / "lightning.md"


def _page_block(page) -> str:
    (block,) = re.findall(r"<!-- (?:runnable|not-run: tests/engine/test_own_loop.py[^>]*) -->\n```python\n(.*?)^```",
                          page.read_text(), flags=re.S | re.M)
    return block


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """The run of ``csg-train`` that both pages name (its folder, its Posterior)."""
    folder = tmp_path_factory.mktemp("twin")
    command = re.search(r"It is `csg-train ([^`]*)`", PAGE.read_text())[1].split()
    assert command == re.search(r"It is `csg-train ([^`]*)`", LIGHTNING_PAGE.read_text())[1].split()
    torch.set_num_threads(1)
    posterior = csg.train([*command, "logger=none", "trainer.progress=false", "trainer.threads=1",
                           f"hydra.run.dir={folder / 'run'}"])
    return folder / "run", posterior


def _same_as_twin(twin, states, records, posterior, data) -> None:
    run, theirs_posterior = twin
    theirs = read_samples(run)
    assert len(states) == len(theirs) == 2
    for state, (name, sample) in zip(states, theirs.items()):
        assert state.keys() == sample["state_dict"].keys()
        assert all(torch.equal(state[key], sample["state_dict"][key]) for key in state), name  # bit for bit
    for record, sample in zip(records, theirs.values()):
        assert (record["cycle"], record["epoch"], record["iteration"]) == \
            (sample["cycle"], sample["epoch"], sample["iteration"])
        assert record["lr"] == sample["lr"] and record["temperature"] == sample["temperature"] == 0.2
    metrics = json.loads((run / "metrics.json").read_text())["ensemble"]
    mine = posterior.evaluate(data.test)
    for key in ("test_error_pct", "nll", "ece", "brier", "predictive_entropy", "mutual_information"):
        assert mine[key] == pytest.approx(metrics[key], rel=1e-9, abs=1e-12), key
    assert posterior.names == [Path(name).name for name in theirs] == theirs_posterior.names
    x = next(iter(data.test))[0]
    assert torch.allclose(posterior.predict(x), theirs_posterior.predict(x), rtol=0, atol=1e-6)


def test_the_pages_loop_gives_csg_trains_samples_and_ensemble_metrics(twin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    scope: dict = {}
    exec(compile(_page_block(PAGE), str(PAGE), "exec"), scope)
    assert len(scope["chain"].plan) == 2
    _same_as_twin(twin, scope["states"], scope["chain"].samples, scope["posterior"], scope["data"])


def test_the_lightning_pages_run_gives_csg_trains_samples_and_ensemble_metrics(twin, tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    scope: dict = {}
    exec(compile(_page_block(LIGHTNING_PAGE), str(LIGHTNING_PAGE), "exec"), scope)
    callback = scope["sgmcmc"]
    assert [r["train_loss"] > 0 for r in callback.samples] == [True, True]  # the epoch's mean loss, logged
    _same_as_twin(twin, callback.sample_states(), callback.samples, scope["posterior"], scope["data"])


def _toy(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x, y = torch.randn(96, 5, generator=generator), torch.randint(0, 3, (96,), generator=generator)
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 96, 32)]
    torch.manual_seed(seed)
    model = torch.nn.Linear(5, 3)
    sampler = SGLD(model.parameters(), lr=0.05, num_data=96, temperature=0.5,
                   generator=torch.Generator().manual_seed(seed + 1))
    return model, sampler, batches


def _run(chain: Chain, model, sampler, batches, epochs: range) -> None:
    for _ in epochs:
        for x, y in batches:
            chain.begin_step()
            sampler.zero_grad()
            F.cross_entropy(model(x), y).backward()
            sampler.step()
            chain.end_step()
        chain.end_epoch(model, train_loss=1.0)


def test_the_stage_switch_sets_the_schedules_step_and_zero_temperature_while_exploring():
    model, sampler, batches = _toy()
    schedule = Cyclical(lr0=0.05, total_steps=12, cycles=2, explore=0.5)
    chain = Chain(sampler, schedule, epochs=4, batches_per_epoch=3, temperature=0.5, samples_per_cycle=1)
    seen = []
    for k in range(12):
        lr, temperature = chain.begin_step()
        assert all(g["lr"] == lr and g["temperature"] == temperature for g in sampler.param_groups)
        seen.append((lr, temperature, chain.stage))
        chain.end_step()
    assert [t for _, t, _ in seen] == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5] * 2  # beta = 1/2 of each 6-step cycle
    assert [lr for lr, _, _ in seen] == [schedule.lr(k) for k in range(12)]
    assert [s for *_, s in seen][2:4] == ["exploration", "sampling"]
    assert [(p.epoch, p.cycle) for p in chain.plan] == [(1, 0), (3, 1)] and chain.k == 12


def test_a_stored_chain_checkpointed_and_resumed_gives_the_uninterrupted_samples(tmp_path):
    schedule = Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)
    model, sampler, batches = _toy()
    whole = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2)
    _run(whole, model, sampler, batches, range(6))
    expected = whole.sample_states()
    assert len(expected) == 4 and len(whole.samples) == 4

    model, sampler, batches = _toy()
    chain = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                  store=tmp_path / "samples")
    _run(chain, model, sampler, batches, range(3))  # then a checkpoint, as a preempted job would leave it
    saved = {"model": model.state_dict(), "sampler": sampler.state_dict(), "chain": chain.state_dict()}
    torch.save(saved, tmp_path / "checkpoint.pt")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)

    model, sampler, _ = _toy(seed=7)  # a fresh model and sampler (other weights, other noise): the checkpoint's
    model.load_state_dict(saved["model"])
    sampler.load_state_dict(saved["sampler"])
    resumed = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                    store=tmp_path / "samples")
    resumed.load_state_dict(saved["chain"])
    _run(resumed, model, sampler, batches, range(resumed.state.epoch, 6))
    got = resumed.sample_states()
    assert len(got) == 4 and all(torch.equal(a[k], b[k]) for a, b in zip(expected, got) for k in a)
    manifest = json.loads((tmp_path / "samples" / "manifest.json").read_text())
    assert manifest["planned"] == 4 and [e["file"] for e in manifest["samples"]] == \
        [f"sample_{i:04d}_cycle{p.cycle:02d}_epoch{p.epoch:04d}.pt" for i, p in enumerate(resumed.plan)]
    SampleStore(tmp_path / "samples").verify()


def test_a_restored_chain_refuses_a_samples_folder_that_lost_its_samples(tmp_path):
    schedule = Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)
    model, sampler, batches = _toy()
    chain = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                  store=tmp_path / "samples")
    _run(chain, model, sampler, batches, range(3))
    state = chain.state_dict()
    (tmp_path / "samples" / "sample_0001_cycle00_epoch0002.pt").unlink()
    resumed = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                    store=tmp_path / "samples")
    resumed.load_state_dict(state)
    with pytest.raises(DamagedFileError, match="sample_0001_cycle00_epoch0002.pt"):
        _run(resumed, model, sampler, batches, range(3, 6))


@pytest.mark.parametrize("change, fragment", [
    ({"epochs": 0}, "epochs=0 is not allowed: a whole number >= 1"),
    ({"samples_per_cycle": 0}, "samples_per_cycle=0 is not allowed: a whole number >= 1"),
    ({"temperature": -1.0}, "temperature=-1.0 is not allowed: a finite number >= 0"),
    ({"temperature": float("nan")}, "temperature=nan is not allowed: a finite number >= 0"),
    ({"sampler": "sgd"}, "sampler='torch.optim.SGD'"),
    ({"schedule": "short"}, "schedule='50 steps' is not allowed: a schedule over the chain's epochs x batches_per_epoch "
                            "= 100 iterations"),
])
def test_a_chain_of_bad_arguments_is_one_line_naming_the_argument(change, fragment):
    """csg.Chain took these without a word (issue 74): SGD called a chain at T > 0 adds no noise; a schedule of
    another length than the chain's iterations; a negative or NaN temperature; no samples."""
    import csg
    from csg.errors import ConfigError
    from csg.samplers import SGHMC
    from csg.schedules import Cyclical

    theta = torch.nn.Parameter(torch.zeros(3))
    arguments = {"sampler": SGHMC([theta], lr=0.1, num_data=100), "schedule": Cyclical(0.1, 100, 2, 0.5),
                 "epochs": 10, "batches_per_epoch": 10, "temperature": 1.0, "samples_per_cycle": 1}
    if change.get("sampler") == "sgd":
        change = {"sampler": torch.optim.SGD([theta], lr=0.1)}
        fragment = "sampler='SGD' is not allowed: a sampler whose param groups take a temperature"
    if change.get("schedule") == "short":
        change = {"schedule": Cyclical(0.1, 50, 2, 0.5)}
    arguments.update(change)
    with pytest.raises(ConfigError) as refused:
        csg.Chain(arguments.pop("sampler"), arguments.pop("schedule"), **arguments)
    assert fragment in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def _finished(folder: Path) -> Chain:
    schedule = Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)
    model, sampler, batches = _toy()
    chain = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                  store=folder)
    _run(chain, model, sampler, batches, range(6))
    return chain


def test_a_new_chain_never_writes_into_another_runs_samples(tmp_path):
    """issue 74, data lost: a new chain with store=<another finished run's samples> rewrote its manifest."""
    from csg.errors import ConfigError

    _finished(tmp_path / "theirs")
    before = {p.name: p.read_bytes() for p in (tmp_path / "theirs").iterdir()}
    schedule = Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)
    for store in (tmp_path / "theirs", SampleStore(tmp_path / "theirs")):
        model, sampler, batches = _toy(seed=3)
        mine = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                     store=store)
        with pytest.raises(ConfigError, match=r"store=.*theirs' is not allowed: an empty or new folder .* holds 4 "):
            _run(mine, model, sampler, batches, range(6))
    assert {p.name: p.read_bytes() for p in (tmp_path / "theirs").iterdir()} == before
    SampleStore(tmp_path / "theirs").verify()
    (tmp_path / "empty").mkdir()  # a folder the user made for it: taken
    model, sampler, batches = _toy()
    fresh = Chain(sampler, schedule, epochs=6, batches_per_epoch=3, temperature=0.5, samples_per_cycle=2,
                  store=tmp_path / "empty")
    _run(fresh, model, sampler, batches, range(6))
    assert len(fresh.sample_states()) == 4


def test_a_sample_changed_on_disk_is_not_given_back(tmp_path):
    chain = _finished(tmp_path / "samples")
    path = Path(chain.samples[1]["path"])
    saved = torch.load(path, weights_only=True)
    saved["state_dict"]["weight"] += 1.0
    torch.save(saved, path)
    with pytest.raises(DamagedFileError, match=path.name):
        chain.sample_states()


def _chain(**change):
    model, sampler, _ = _toy()
    arguments = {"epochs": 6, "batches_per_epoch": 3, "temperature": 0.5, "samples_per_cycle": 2, **change}
    return Chain(sampler, arguments.pop("schedule", Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)),
                 **arguments), model


@pytest.mark.parametrize(("change", "key", "fragment"), [
    ({"samples_per_cycle": 3}, "samples_per_cycle", "at most the epoch ends of each cycle's sampling stage"),
    ({"plan": [1, 3]}, "plan", "a list of csg.schedules.CollectionPoint"),
    ({"plan": "past"}, "plan", "distinct epochs in 0..5, in order"),
    ({"plan": "twice"}, "plan", "distinct epochs in 0..5, in order"),
    ({"store": "file"}, "store", r"a folder for the samples \(this is a file\)"),
])
def test_a_bad_plan_or_store_is_one_line_at_the_call(tmp_path, change, key, fragment):
    from csg.schedules import CollectionPoint
    from csg.errors import ConfigError

    if change.get("plan") == "past":
        change = {"plan": [CollectionPoint(2, 0, 8), CollectionPoint(9, 1, 29)]}
    elif change.get("plan") == "twice":
        change = {"plan": [CollectionPoint(2, 0, 8), CollectionPoint(2, 0, 8)]}
    elif change.get("store") == "file":
        (tmp_path / "notes.txt").write_text("mine")
        change = {"store": tmp_path / "notes.txt"}
    with pytest.raises(ConfigError, match=fragment) as refused:
        _chain(**change)
    assert refused.value.key == key and "\n" not in str(refused.value)
    assert not change.get("store") or (tmp_path / "notes.txt").read_text() == "mine"


def test_a_loop_past_the_plan_a_non_module_and_a_foreign_or_other_plans_state_are_refused():
    from csg.errors import ConfigError

    model, sampler, batches = _toy()
    chain, _ = _chain()
    chain.sampler = sampler
    with pytest.raises(ConfigError, match="model=.OrderedDict. is not allowed: the torch.nn.Module"):
        chain.end_epoch(model.state_dict())
    _run(chain, model, sampler, batches, range(6))
    with pytest.raises(ConfigError, match="epochs=6 is not allowed: .* the loop runs past the chain's plan"):
        chain.begin_step()
    other, _ = _chain(epochs=12, schedule=Cyclical(lr0=0.05, total_steps=36, cycles=2, explore=0.5))
    with pytest.raises(ConfigError, match=r"state_dict=.* is not allowed: a state of this chain's plan \(36 "):
        other.load_state_dict(chain.state_dict())
    assert other.k == 0 and other.samples == []  # left as it was
    for foreign in ({"weight": torch.zeros(3)}, [1, 2], {"loop": {"nope": 1}, "kept": []}):
        with pytest.raises(ConfigError, match="state_dict=") as refused:
            other.load_state_dict(foreign)
        assert "\n" not in str(refused.value)
    again, _ = _chain()
    again.load_state_dict(chain.state_dict())
    assert again.k == chain.k == 18 and len(again.samples) == 4


def test_a_warm_restart_that_diverges_stops_a_users_chain_before_that_cycles_samples():
    """issue 74: csg.Chain (and so the Lightning callback) had no restart check; csg's own loop had."""
    from csg.errors import DivergenceError

    model, sampler, _ = _toy()
    schedule = Cyclical(lr0=0.05, total_steps=6, cycles=3, explore=0.5)  # 2 epochs a cycle of 1 batch
    chain = Chain(sampler, schedule, epochs=6, batches_per_epoch=1, temperature=0.5, samples_per_cycle=1)
    losses = iter([1.0, 0.8, 0.7, 0.6, 9.0, 8.0])  # cycle 3's exploration ends 8.3 nats above cycle 2's
    with pytest.raises(DivergenceError, match="the warm restart of cycle 3 diverged: .* the 2 samples of the "
                                              "earlier cycles are kept; a smaller sampler.lr0 \\(now 0.05\\)"):
        for _ in range(6):
            chain.begin_step()
            chain.end_step()
            chain.end_epoch(model, train_loss=next(losses))
    assert len(chain.samples) == 2 and chain.k == 6  # none of cycle 3's
    steady, _ = _chain(epochs=6, batches_per_epoch=1, samples_per_cycle=1,
                       schedule=Cyclical(lr0=0.05, total_steps=6, cycles=3, explore=0.5))
    for loss in [1.0, 0.8, 0.7, 0.6, 1.5, 1.2]:  # a catapult within the bound: taken
        steady.begin_step()
        steady.end_step()
        steady.end_epoch(model, train_loss=loss)
    assert len(steady.samples) == 3
