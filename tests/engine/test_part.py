"""Sampling part of a network (csg/engine/part.py): weights to start from, the part chosen by patterns, the rest
frozen (no gradient, its BatchNorm statistics kept) or optimised by SGD, samples stored at the cost of the part
with the rest once, a resume bit for bit, and a sampled last layer evaluated with the trunk once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from csg.engine.checkpoint import Preempted
from csg.engine.part import check_trainable, freeze_rest, head_of, select_part
from csg.engine.samples import REST, SampleStore
from csg.errors import ConfigError
from tests.conftest import ROOT, assert_same_samples, train

HERE = __name__
OWN = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30",
       "model=custom", f"model._target_={HERE}.bn_net", "trainer.epochs=4", "sampler.cycles=2",
       "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false", "trainer.device=cpu"]


class Stop(nn.Module):
    """Passes its input on; sends SIGTERM to this process at the ``stop_at``-th forward with gradients (a preemption)."""

    stop_at: int | None = None
    seen = 0

    def forward(self, x):
        if torch.is_grad_enabled() and Stop.stop_at is not None:  # a training step (the frozen trunk is in eval mode)
            Stop.seen += 1
            if Stop.seen == Stop.stop_at:
                os.kill(os.getpid(), signal.SIGTERM)
        return x


def bn_net(num_classes: int, input_shape, hidden: int = 8):
    """A trunk with BatchNorm (``1`` Linear, ``2`` BatchNorm1d, ``3`` ReLU) and a last layer ``4``."""
    return nn.Sequential(Stop(), nn.Linear(input_shape[0], hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def run(*overrides: str, run_dir: Path):
    """A run in this process, with Hydra's record of its config as train.py leaves it."""
    from omegaconf import OmegaConf

    from csg.launch.run import run as run_once

    cfg = compose(*OWN, *overrides)
    metrics = run_once(cfg, run_dir)
    (run_dir / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    return metrics


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """The state dict of a whole network trained by the run (its checkpoint): what a part starts from."""
    run_dir = tmp_path_factory.mktemp("pretrained") / "run"
    run("sampler=sgd", "sampler.samples_per_cycle=1", run_dir=run_dir)
    return run_dir / "checkpoint.pt"


def _net() -> nn.Module:
    torch.manual_seed(0)
    return bn_net(3, (4,))


# -- choosing the part -----------------------------------------------------------------------------------------------
def test_patterns_choose_parameters_by_glob_or_module_and_the_rest_is_named():
    net = _net()
    assert select_part(net, ["4"]).sampled == ("4.weight", "4.bias")
    assert select_part(net, ["*.bias"]).sampled == ("1.bias", "2.bias", "4.bias")
    whole = select_part(net, None)
    assert whole.whole and whole.sample_keys == tuple(net.state_dict())
    head = select_part(net, ["4"])
    assert head.rest == ("1.weight", "1.bias", "2.weight", "2.bias") and head.stores_part
    # the frozen BatchNorm's statistics are the rest's: a sample holds the head alone
    assert head.sample_keys == ("4.weight", "4.bias")
    assert select_part(net, ["4"], "sgd").sample_keys == tuple(net.state_dict())  # an optimised rest: whole samples
    with pytest.raises(ConfigError, match=r"^sampler.params=\['4', 'fc'\] is not allowed: .*'fc' matches none "):
        select_part(net, ["4", "fc"])
    with pytest.raises(ConfigError, match="^sampler.rest='adam' is not allowed: frozen | sgd"):
        select_part(net, ["4"], "adam")
    net[1].weight.requires_grad_(False)  # frozen by the model itself (an embedding a user keeps fixed)
    with pytest.raises(ConfigError) as refused:
        check_trainable(net, select_part(net, ["1", "4"]), ["1", "4"])
    assert str(refused.value) == ("sampler.params=['1', '4'] is not allowed: patterns that match parameters that "
                                  "train; 1.weight is frozen by the model itself (requires_grad=False)")
    check_trainable(net, select_part(net, ["4"]), ["4"])


def test_a_frozen_rest_takes_no_gradient_and_keeps_its_batchnorm_statistics():
    net = _net()
    part = select_part(net, ["4"])
    freeze_rest(net, part)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net.train()
    net(torch.randn(16, 4) * 5 + 3).sum().backward()
    assert net[4].training and not net[2].training  # the head trains; the frozen BatchNorm stays in eval mode
    assert all(p.grad is None for name, p in net.named_parameters() if name in part.rest)
    assert net[4].weight.grad is not None
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # running stats untouched
    assert head_of(net, part) == "4" and head_of(net, select_part(net, ["1", "4"])) is None


# -- runs ------------------------------------------------------------------------------------------------------------
def test_a_last_layer_run_starts_from_the_weights_keeps_the_rest_and_stores_the_head_alone(pretrained, tmp_path):
    import csg

    metrics = run(f"model.weights={pretrained}", "sampler=csghmc", "sampler.params=[4]", run_dir=tmp_path / "run")
    start = torch.load(pretrained, weights_only=True)["model"]
    end = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["model"]
    for key in ("1.weight", "1.bias", "2.weight", "2.bias", "2.running_mean", "2.running_var"):
        assert torch.equal(start[key], end[key]), key  # the frozen trunk is the pretrained one, statistics included
    assert not torch.equal(start["4.weight"], end["4.weight"])
    samples = tmp_path / "run" / "samples"
    store = SampleStore(samples)
    recorded = store.recorded()
    assert len(recorded) == 2 and (samples / REST).is_file() and store.manifest()["rest"]["file"] == REST
    for path in recorded:
        assert set(SampleStore.load(path)["state_dict"]) == {"4.weight", "4.bias"}
        assert set(store.state_of(path)) == set(end)  # a member is the rest and its head
    posterior = csg.Posterior.load(tmp_path / "run", trust_code=True)
    assert posterior.evaluate() == pytest.approx({k: metrics["ensemble"][k] for k in posterior.evaluate()})


def test_a_damaged_rest_is_refused_in_one_line(pretrained, tmp_path):
    import csg
    from csg.errors import DamagedFileError

    run(f"model.weights={pretrained}", "sampler=csgld", "sampler.params=[4]", run_dir=tmp_path / "run")
    rest = tmp_path / "run" / "samples" / REST
    rest.write_bytes(rest.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(DamagedFileError, match=r"rest.pt.* is not allowed: the sample file train.py wrote: its SHA"):
        csg.Posterior.load(tmp_path / "run", trust_code=True)


def test_a_frozen_rest_resumes_bit_for_bit(pretrained, tmp_path):
    part = [f"model.weights={pretrained}", "sampler=csghmc", "sampler.params=[4]"]
    run(*part, run_dir=tmp_path / "full")
    Stop.stop_at, Stop.seen = 15, 0  # in epoch 3 (6 steps an epoch), after the checkpoint of epoch 2
    try:
        with pytest.raises(Preempted) as stopped:
            run(*part, run_dir=tmp_path / "cut")
    finally:
        Stop.stop_at = None
    assert stopped.value.checkpointed and len(SampleStore(tmp_path / "cut" / "samples").recorded()) == 1
    run(*part, run_dir=tmp_path / "cut")
    same = assert_same_samples(tmp_path / "full", tmp_path / "cut")  # every .pt of samples/, rest.pt included
    assert sorted(same) == [REST, "sample_0000_cycle00_epoch0001.pt", "sample_0001_cycle01_epoch0003.pt"]


def test_an_optimised_rest_moves_by_sgd_and_each_sample_is_whole(pretrained, tmp_path):
    run(f"model.weights={pretrained}", "sampler=csgld", "sampler.params=[4]", "sampler.rest=sgd",
        run_dir=tmp_path / "run")
    start = torch.load(pretrained, weights_only=True)["model"]
    end = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert not torch.equal(start["1.weight"], end["model"]["1.weight"])
    assert set(end["sampler"]) == {"sampler", "rest"}
    samples = tmp_path / "run" / "samples"
    assert not (samples / REST).exists()
    assert all(set(SampleStore.load(p)["state_dict"]) == set(end["model"]) for p in SampleStore(samples).recorded())


def test_a_users_sampler_gets_the_sampled_parameters_only(pretrained, tmp_path):
    from tests.own_components import RecordingSGD

    RecordingSGD.seen_shapes = None
    run(f"model.weights={pretrained}", "sampler=custom", "sampler.optimizer._target_=tests.own_components.RecordingSGD",
        "sampler.params=[4.weight]", run_dir=tmp_path / "run")
    end = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert [len(group["params"]) for group in end["sampler"]["param_groups"]] == [1]


@pytest.mark.parametrize("overrides, fragment", [
    (["sampler.params=[fc]"], "sampler.params=['fc'] is not allowed: patterns that each match a parameter; 'fc'"),
    (["model.weights=/no/such.pt"], "model.weights='/no/such.pt' is not allowed: a file of weights"),
    (["sampler.params=[4]", "sampler.chains=2", "trainer.stack_chains=vmap"],
     "trainer.stack_chains='vmap' is not allowed: false when sampler.params samples part"),
])
def test_a_part_that_cannot_be_sampled_is_refused_before_training(overrides, fragment, tmp_path):
    with pytest.raises(ConfigError) as refused:
        run(*overrides, run_dir=tmp_path / "run")
    assert str(refused.value).startswith(fragment) and not (tmp_path / "run" / "samples").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_part_sampled_by_two_processes_equals_one(pretrained, tmp_path):
    """DistributedDataParallel over a model with a frozen trunk (no gradient, BatchNorm in eval mode): the two
    processes' chain is the one process's, within round-off."""
    from tests.engine.test_distributed import _torchrun

    args = [a.replace(f"{HERE}.", "tests.engine.test_part.") for a in OWN] + [
        f"model.weights={pretrained}", "sampler=csghmc", "sampler.params=[4]", "data.recipe.temperature=1.0"]
    one = train(args, tmp_path / "one", tmp_path)
    assert one.returncode == 0, one.stderr
    two = _torchrun(tmp_path, tmp_path / "two", *args)
    assert two.returncode == 0, two.stderr
    same = assert_same_samples(tmp_path / "one", tmp_path / "two", atol=1e-5)
    assert sorted(same) == [REST, "sample_0000_cycle00_epoch0001.pt", "sample_0001_cycle01_epoch0003.pt"]


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_a_last_layer_posterior_saved_as_one_file_holds_the_rest_once(pretrained, tmp_path, suffix):
    import csg

    run(f"model.weights={pretrained}", "sampler=csghmc", "sampler.params=[4]", run_dir=tmp_path / "run")
    posterior = csg.Posterior.load(tmp_path / "run", trust_code=True)
    path = posterior.save(tmp_path / f"posterior{suffix}")
    if suffix == ".pt":
        record = torch.load(path, weights_only=True)
        stored = {"shared": set(record["shared"]), "members": [set(state) for state in record["states"]]}
    else:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            names = list(handle.keys())
        stored = {"shared": {n.split("/", 1)[1] for n in names if n.startswith("shared/")},
                  "members": [{n.split("/", 1)[1] for n in names if n.startswith(f"member{i:05d}/")} for i in (0, 1)]}
    rest = set(torch.load(tmp_path / "run" / "samples" / REST, weights_only=True)["state_dict"])
    assert stored["shared"] == rest  # the frozen rest once; each member its head
    assert stored["members"] == [{"4.weight", "4.bias"}] * 2
    again = csg.Posterior.load(path, trust_code=True)
    x = torch.randn(7, 4)
    assert torch.equal(again.predict(x), posterior.predict(x))
    assert again.evaluate() == pytest.approx(posterior.evaluate())


def test_parallel_chains_each_store_their_rest_once_and_pool_their_heads(pretrained, tmp_path):
    metrics = run(f"model.weights={pretrained}", "sampler=csgld", "sampler.params=[4]", "sampler.chains=2",
                  run_dir=tmp_path / "run")
    for chain in ("chain00", "chain01"):
        store = SampleStore(tmp_path / "run" / "samples" / chain)
        assert (store.directory / REST).is_file() and store.manifest()["rest"]["file"] == REST
        assert all(set(SampleStore.load(p)["state_dict"]) == {"4.weight", "4.bias"} for p in store.recorded())
    assert metrics["ensemble"]["num_samples"] == 4 and len(metrics["per_chain"]) == 2
