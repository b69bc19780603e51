"""trainer.stack_chains: K chains stepped together over stacked parameters are each the chain run alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from csg.engine.checkpoint import LoopState, read_checkpoint, restore_checkpoint, save_checkpoint
from csg.schedules import collection_points
from csg.engine.samples import SampleStore
from csg.data.bundle import EpochBatches, InMemoryDataset, InMemoryLoader
from csg.errors import ConfigError
from csg.samplers import SGHMC, SGLD
from csg.schedules import Cyclical
from csg.engine.step.stacked import CompiledStackedStep, StackedStep, why_not_stackable
from csg.engine.devices import Precision
from csg.engine.loop import Hooks, Lane, train_chain, train_chains

CPU = torch.device("cpu")
N, BATCH, EPOCHS, CHAINS = 72, 16, 10, 3  # 5 batches an epoch, the last of 8: 50 steps
SAMPLERS = {"sgld": SGLD, "sghmc": SGHMC}


class ConvBN(nn.Module):
    """A small convolutional net with batch norm, so that stacked buffers are exercised too."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))

    def forward(self, x):
        return self.body(x)


def data(n: int = N):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 8, 8, generator=g)
    return x, (x[:, 0, :4].sum(dim=(1, 2)) > 0).long() + (x[:, 0, 4:].sum(dim=(1, 2)) > 1).long()


def chain(k: int, sampler: str = "sghmc", n: int = N):
    """Chain k: its own initialisation, data order and noise generator."""
    x, y = data(n)
    torch.manual_seed(100 + k)
    model = ConvBN()
    rule = SAMPLERS[sampler](model.parameters(), lr=0.05, num_data=n, temperature=1.0, weight_decay=1e-3,
                             generator=torch.Generator().manual_seed(200 + k))
    loader = InMemoryLoader(InMemoryDataset(x, y), EpochBatches(n, BATCH, shuffle=True, seed=300 + k))  # resumable order
    return model, rule, loader


def schedule():
    return Cyclical(lr0=0.05, total_steps=EPOCHS * 5, cycles=2, explore=0.5)


def options(**extra):
    plan = collection_points(schedule(), epochs=EPOCHS, batches_per_epoch=5, samples_per_cycle=2)
    return {"epochs": EPOCHS, "temperature": 1.0, "plan": plan, "device": CPU, "progress": False, **extra}


def run_stacked(tmp_path, sampler="sghmc", step_class=StackedStep, hooks=None, states=None, built=None):
    built = built or [chain(k, sampler) for k in range(CHAINS)]
    lanes = [Lane(model, rule, loader, store=SampleStore(tmp_path / f"chain{k}"), chain=k,
                  state=states[k] if states else None, checkpoint=(lambda s, k=k: hooks.saved.__setitem__(k, s)) if hooks else None)
             for k, (model, rule, loader) in enumerate(built)]
    step = step_class([b[0] for b in built], [b[1] for b in built], Precision("32", CPU))
    results = train_chains(lanes, schedule(), step=step, hooks=hooks, **options())
    return built, results


def assert_same_chain(a, b, rtol=1e-4, atol=1e-5):
    (model_a, rule_a, _), (model_b, rule_b, _) = a, b
    for (name, ta), tb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.allclose(ta.float(), tb.float(), rtol=rtol, atol=atol), name
    assert torch.equal(rule_a.generator.get_state(), rule_b.generator.get_state())  # the same noise draws


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_stacked_chains_are_each_the_chain_run_alone(tmp_path, sampler):
    alone = []
    for k in range(CHAINS):
        model, rule, loader = chain(k, sampler)
        result = train_chain(model, rule, schedule(), loader, store=SampleStore(tmp_path / "alone" / f"chain{k}"), **options())
        alone.append(((model, rule, loader), result))
    stacked, results = run_stacked(tmp_path / "stacked", sampler)
    for k in range(CHAINS):
        assert_same_chain(alone[k][0], stacked[k])
        assert results[k].iterations == alone[k][1].iterations == EPOCHS * 5
        assert [s["epoch"] for s in results[k].samples] == [s["epoch"] for s in alone[k][1].samples]
        assert results[k].samples[-1]["train_loss"] == pytest.approx(alone[k][1].samples[-1]["train_loss"], rel=1e-4)
        paths = sorted((tmp_path / "stacked" / f"chain{k}").glob("*.pt"))
        assert len(paths) == 4
        for path, twin in zip(paths, sorted((tmp_path / "alone" / f"chain{k}").glob("*.pt"))):
            saved, reference = SampleStore.load(path)["state_dict"], SampleStore.load(twin)["state_dict"]
            for name, tensor in saved.items():
                assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()  # one chain's numbers
                assert torch.allclose(tensor.float(), reference[name].float(), rtol=1e-4, atol=1e-5), name
    # the chains differ from one another: each has its own seeds
    assert not torch.allclose(stacked[0][0].body[0].weight, stacked[1][0].body[0].weight)


def test_compiled_stacked_step_takes_the_eager_path():
    # 64 examples, full batches only, so that inductor compiles one batch shape (a cold compile is most of the
    # test's time; the partial last batch is the single-chain compile tests' and the eager tests' concern)
    runs = []
    for step_class in (StackedStep, CompiledStackedStep):
        built = [chain(k, n=64) for k in range(2)]
        lanes = [Lane(model, rule, loader, chain=k) for k, (model, rule, loader) in enumerate(built)]
        step = step_class([b[0] for b in built], [b[1] for b in built], Precision("32", CPU))
        results = train_chains(lanes, schedule(), step=step, **options(plan=[]))
        assert [r.iterations for r in results] == [EPOCHS * 4] * 2
        runs.append(built)
    for a, b in zip(*runs):
        assert_same_chain(a, b)


class StopAt(Hooks):
    def __init__(self, at: int):
        super().__init__(checkpoint_every=0, should_stop=self.poll, stop_error=lambda: KeyboardInterrupt("stop"))
        self.at, self.polls, self.saved = at, 0, {}

    def poll(self) -> bool:
        self.polls += 1
        return self.polls == self.at


def test_a_stopped_stack_resumes_where_every_chain_was(tmp_path):
    uninterrupted, _ = run_stacked(tmp_path / "whole")
    hooks, stopped = StopAt(23), [chain(k) for k in range(CHAINS)]
    with pytest.raises(KeyboardInterrupt):
        run_stacked(tmp_path / "parts", hooks=hooks, built=stopped)
    assert sorted(hooks.saved) == list(range(CHAINS)) and {s.iteration for s in hooks.saved.values()} == {23}
    resumed, states = [chain(k) for k in range(CHAINS)], []
    for k, (model, rule, _) in enumerate(stopped):
        path = tmp_path / f"checkpoint{k}.pt"
        save_checkpoint(path, model=model, sampler=rule, state=hooks.saved[k], extra={"config": {}})
        saved = read_checkpoint(path)
        for name, tensor in saved["model"].items():  # a stacked chain's checkpoint holds its own numbers only
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), name
        states.append(restore_checkpoint(saved, model=resumed[k][0], sampler=resumed[k][1], device=CPU))
    _, results = run_stacked(tmp_path / "parts", states=states, built=resumed)
    for a, b in zip(uninterrupted, resumed):
        assert_same_chain(a, b, rtol=1e-6, atol=1e-7)
    assert [len(r.samples) for r in results] == [4] * CHAINS
    assert [len(list((tmp_path / "parts" / f"chain{k}").glob("*.pt"))) for k in range(CHAINS)] == [4] * CHAINS


def test_what_cannot_be_stacked_says_why():
    models = [ConvBN(), ConvBN()]
    assert why_not_stackable(models, interacting=False, precision="32", processes_per_chain=1) is None
    assert "one chain" in why_not_stackable(models[:1], interacting=False, precision="32", processes_per_chain=1)
    assert "interact" in why_not_stackable(models, interacting=True, precision="32", processes_per_chain=1)
    assert "DDP" in why_not_stackable(models, interacting=False, precision="32", processes_per_chain=2)
    for precision in ("16-mixed", "bf16-mixed"):
        assert precision in why_not_stackable(models, interacting=False, precision=precision, processes_per_chain=1)
    dropout = [nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)) for _ in range(2)]
    assert "dropout" in why_not_stackable(dropout, interacting=False, precision="32", processes_per_chain=1)


def test_chains_at_different_points_do_not_step_together(tmp_path):
    built = [chain(k) for k in range(2)]
    lanes = [Lane(m, r, loader, state=LoopState(epoch=k)) for k, (m, r, loader) in enumerate(built)]
    with pytest.raises(ValueError, match="same epoch and batch"):
        train_chains(lanes, schedule(), step=StackedStep([b[0] for b in built], [b[1] for b in built],
                                                         Precision("32", CPU)), **options())


def compose(*overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from tests.conftest import ROOT

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


SMALL = ("sampler=csghmc", "data=mnist5k", "model=mlp", "model.hidden=[32]", "sampler.chains=2", "trainer.epochs=2",
         "sampler.cycles=1", "sampler.samples_per_cycle=1", "trainer.progress=false", "trainer.device=cpu")


def test_train_py_stacks_the_chains_of_one_process(tmp_path):
    from csg.launch.run import run

    apart = run(compose(*SMALL, "trainer.stack_chains=false", "logger=none"), tmp_path / "apart")
    together = run(compose(*SMALL, "trainer.stack_chains=true", "logger=csv"), tmp_path / "together")
    assert together["chains"] == 2 and len(together["samples"]) == 2
    for k in range(2):
        [mine], [twin] = (sorted((tmp_path / d / "samples" / f"chain{k:02d}").glob("*.pt")) for d in ("together", "apart"))
        a, b = SampleStore.load(mine)["state_dict"], SampleStore.load(twin)["state_dict"]
        assert all(torch.allclose(a[n], b[n], rtol=1e-4, atol=1e-5) for n in a)
    assert together["ensemble"]["nll"] == pytest.approx(apart["ensemble"]["nll"], rel=1e-3)
    header = (tmp_path / "together" / "steps.csv").read_text().splitlines()[0]
    assert header.startswith("step,chain,loss")  # each logged row names its chain


def test_stack_chains_where_impossible_is_a_config_error(tmp_path):
    from csg.launch.run import run

    with pytest.raises(ConfigError, match="trainer.stack_chains.*16-mixed"):
        run(compose(*SMALL, "trainer.stack_chains=true", "trainer.precision=16-mixed", "logger=none"), tmp_path / "run")
    assert not list((tmp_path / "run").glob("samples/**/*.pt"))  # stopped before any training


def test_frozen_parameters_stay_frozen_when_stacked(tmp_path):
    built = [chain(k) for k in range(2)]
    for model, _, _ in built:
        model.body[0].weight.requires_grad_(False)
    before = [(model.body[0].weight.detach().clone(), model.body[4].weight.detach().clone()) for model, _, _ in built]
    run_stacked(tmp_path, built=built)
    for (model, _, _), (frozen, trained) in zip(built, before):
        assert torch.equal(model.body[0].weight, frozen) and model.body[0].weight.grad is None
        assert not torch.allclose(model.body[4].weight, trained)  # the rest of the chain moved
