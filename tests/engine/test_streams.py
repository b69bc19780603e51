"""trainer.stack_chains=streams: K chains in lock-step, each its own step (on its own CUDA stream on a GPU),
are each the chain run alone, bit for bit."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from csg.engine.samples import SampleStore
from csg.checks.config import stack_method
from csg.errors import ConfigError
from csg.engine.step.single import Step
from csg.engine.step.streamed import StreamedStep, make_streamed_step, why_not_streamed
from csg.engine.devices import Precision
from csg.engine.loop import Lane, train_chain, train_chains
from tests.engine.test_stacking import CHAINS, CPU, EPOCHS, SMALL, SAMPLERS, StopAt, chain, compose, options, schedule


def assert_equal_chain(a, b):
    (model_a, rule_a, _), (model_b, rule_b, _) = a, b
    for (name, ta), tb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(ta, tb), name
    for state_a, state_b in zip(rule_a.state.values(), rule_b.state.values()):  # SGHMC's velocities
        assert all(torch.equal(state_a[key], state_b[key]) for key in state_a if isinstance(state_a[key], torch.Tensor))
    assert torch.equal(rule_a.generator.get_state(), rule_b.generator.get_state())  # the same noise draws


def run_streamed(tmp_path, sampler="sghmc", precision="32", built=None, hooks=None, states=None):
    built = built or [chain(k, sampler) for k in range(CHAINS)]
    lanes = [Lane(model, rule, loader, store=SampleStore(tmp_path / f"chain{k}"), chain=k,
                  state=states[k] if states else None,
                  checkpoint=(lambda s, k=k: hooks.saved.__setitem__(k, s)) if hooks else None)
             for k, (model, rule, loader) in enumerate(built)]
    mixed = Precision(precision, CPU)
    step = make_streamed_step(False, [b[0] for b in built], [b[1] for b in built], mixed, CPU)
    results = train_chains(lanes, schedule(), step=step, precision=mixed, hooks=hooks, **options())
    return built, results


@pytest.mark.parametrize("sampler, precision", [("sgld", "32"), ("sghmc", "32"), ("sghmc", "bf16-mixed")])
def test_streamed_chains_are_each_the_chain_run_alone_bit_for_bit(tmp_path, sampler, precision):
    alone = []
    for k in range(CHAINS):
        model, rule, loader = chain(k, sampler)
        result = train_chain(model, rule, schedule(), loader, store=SampleStore(tmp_path / "alone" / f"chain{k}"),
                             precision=Precision(precision, CPU), **options())
        alone.append(((model, rule, loader), result))
    streamed, results = run_streamed(tmp_path / "streamed", sampler, precision)
    for k in range(CHAINS):
        assert_equal_chain(alone[k][0], streamed[k])
        assert results[k].iterations == alone[k][1].iterations == EPOCHS * 5
        assert [s["train_loss"] for s in results[k].samples] == [s["train_loss"] for s in alone[k][1].samples]
        paths = sorted((tmp_path / "streamed" / f"chain{k}").glob("*.pt"))
        twins = sorted((tmp_path / "alone" / f"chain{k}").glob("*.pt"))
        assert len(paths) == len(twins) == 4
        for path, twin in zip(paths, twins):
            saved, reference = SampleStore.load(path)["state_dict"], SampleStore.load(twin)["state_dict"]
            assert all(torch.equal(saved[name], reference[name]) for name in reference)
    assert not torch.equal(streamed[0][0].body[0].weight, streamed[1][0].body[0].weight)  # each chain its own seeds


def test_the_step_returns_k_losses_and_hits_and_falls_back_on_the_cpu():
    built = [chain(k) for k in range(2)]
    step = make_streamed_step("auto", [b[0] for b in built], [b[1] for b in built], Precision("32", CPU), CPU)
    assert step.streams is None and all(type(s) is Step for s in step.steps)  # auto: eager on the CPU, no streams
    x, y = next(iter(built[0][2]))
    losses, hits = step([x, x], [y, y])
    assert losses.shape == hits.shape == (2,) and hits.dtype == torch.int64
    with pytest.raises(ValueError, match="2 chains, 1 mini-batches"):
        step([x], [y])
    with pytest.raises(ValueError, match="no DDP"):
        step([x, x], [y, y], 0.5)


def test_a_stopped_streamed_run_resumes_where_every_chain_was(tmp_path):
    from csg.engine.checkpoint import read_checkpoint, restore_checkpoint, save_checkpoint

    whole, _ = run_streamed(tmp_path / "whole")
    hooks, stopped = StopAt(23), [chain(k) for k in range(CHAINS)]
    with pytest.raises(KeyboardInterrupt):
        run_streamed(tmp_path / "parts", built=stopped, hooks=hooks)
    assert sorted(hooks.saved) == list(range(CHAINS)) and {s.iteration for s in hooks.saved.values()} == {23}
    resumed, states = [chain(k) for k in range(CHAINS)], []
    for k, (model, rule, _) in enumerate(stopped):
        path = tmp_path / f"checkpoint{k}.pt"
        save_checkpoint(path, model=model, sampler=rule, state=hooks.saved[k], extra={"config": {}})
        states.append(restore_checkpoint(read_checkpoint(path), model=resumed[k][0], sampler=resumed[k][1], device=CPU))
    _, results = run_streamed(tmp_path / "parts", built=resumed, states=states)
    for a, b in zip(whole, resumed):
        assert_equal_chain(a, b)
    assert [len(r.samples) for r in results] == [4] * CHAINS


def test_what_cannot_be_streamed_says_why_and_the_rest_is_allowed():
    assert why_not_streamed(2, interacting=False, precision="32", processes_per_chain=1) is None
    assert why_not_streamed(2, interacting=False, precision="bf16-mixed", processes_per_chain=1) is None
    assert "one chain" in why_not_streamed(1, interacting=False, precision="32", processes_per_chain=1)
    assert "interact" in why_not_streamed(2, interacting=True, precision="32", processes_per_chain=1)
    assert "DDP" in why_not_streamed(2, interacting=False, precision="32", processes_per_chain=2)
    assert "16-mixed" in why_not_streamed(2, interacting=False, precision="16-mixed", processes_per_chain=1)
    assert [stack_method(v) for v in (None, False, True, "vmap", "streams")] == [None, None, "vmap", "vmap", "streams"]


def test_dropout_chains_step_in_lock_step(tmp_path):
    # vmap refuses dropout; the streamed chains take their ordinary steps, dropout's draws from the process's generator
    def dropout_chain(k):
        torch.manual_seed(100 + k)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
        _, _, loader = chain(k)
        return model, SAMPLERS["sghmc"](model.parameters(), lr=0.05, num_data=72, temperature=1.0,
                                        generator=torch.Generator().manual_seed(200 + k)), loader

    built = [dropout_chain(k) for k in range(2)]
    before = [m[1].weight.detach().clone() for m, _, _ in built]
    _, results = run_streamed(tmp_path, built=built)
    assert [len(r.samples) for r in results] == [4, 4]
    assert all(not torch.equal(m[1].weight, w) for (m, _, _), w in zip(built, before))


def test_train_py_streams_equals_one_after_another_bit_for_bit(tmp_path, caplog):
    from csg.launch.run import run

    apart = run(compose(*SMALL, "trainer.stack_chains=false", "logger=none"), tmp_path / "apart")
    with caplog.at_level(logging.INFO, logger="csg.launch.run"):
        streamed = run(compose(*SMALL, "trainer.stack_chains=streams", "logger=csv"), tmp_path / "streamed")
    assert streamed["chains"] == 2 and len(streamed["samples"]) == 2
    for k in range(2):
        [mine], [twin] = (sorted((tmp_path / d / "samples" / f"chain{k:02d}").glob("*.pt")) for d in ("streamed", "apart"))
        a, b = SampleStore.load(mine)["state_dict"], SampleStore.load(twin)["state_dict"]
        assert all(torch.equal(a[n], b[n]) for n in b)
    assert streamed["ensemble"] == apart["ensemble"]
    assert "in lock-step (no CUDA streams: one after another)" in caplog.text


@pytest.mark.parametrize("value", ["sometimes", "stream", "4"])
def test_a_bad_stack_chains_is_one_line_naming_the_key(tmp_path, value):
    from csg.launch.run import run

    with pytest.raises(ConfigError) as error:
        run(compose(*SMALL, f"trainer.stack_chains={value}", "logger=none"), tmp_path / "run")
    message = str(error.value)
    assert error.value.key == "trainer.stack_chains" and "\n" not in message
    assert all(word in message for word in ("false", "true", "vmap", "streams"))
    assert not (tmp_path / "run" / "samples").exists()


def test_streams_where_impossible_is_a_config_error(tmp_path):
    from csg.launch.run import run

    with pytest.raises(ConfigError, match="trainer.stack_chains='streams'.*16-mixed") as error:
        run(compose(*SMALL, "trainer.stack_chains=streams", "trainer.precision=16-mixed", "logger=none"), tmp_path / "run")
    assert "\n" not in str(error.value)
    assert not list((tmp_path / "run").glob("samples/**/*.pt"))  # stopped before any training


@pytest.mark.gpu
@pytest.mark.parametrize("compile_setting", [False, "auto"])
def test_streamed_chains_on_the_gpu_are_each_the_chain_run_alone(tmp_path, compile_setting):
    # on CUDA: each chain's step (captured as a CUDA graph with "auto") on its own stream, deterministic kernels,
    # against the same chain's step alone on the default stream: the same kernels, so the same numbers
    from csg.engine.devices import set_deterministic
    from csg.samplers import SGHMC
    from csg.engine.step.single import CapturedStep, make_step, prepare_model

    device = torch.device("cuda")
    precision = Precision("32", device)

    def chains():
        built = []
        for k in range(3):
            torch.manual_seed(k)
            net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                nn.Flatten(), nn.Linear(8, 3))
            model = prepare_model(net.to(device), device)
            built.append((model, SGHMC(model.parameters(), lr=0.05, num_data=80, temperature=1.0, weight_decay=5e-4,
                                       generator=torch.Generator(device=device).manual_seed(10 + k))))
        return built

    set_deterministic(True)
    try:
        alone, streamed = chains(), chains()
        steps = [make_step(compile_setting, m, s, precision, device) for m, s in alone]
        together = make_streamed_step(compile_setting, [m for m, _ in streamed], [s for _, s in streamed], precision, device)
        assert isinstance(together, StreamedStep) and len(together.streams) == 3
        assert all(isinstance(s, CapturedStep) for s in together.steps) == (compile_setting == "auto")
        x, y = torch.randn(3, 80, 3, 8, 8, device=device), torch.randint(0, 3, (3, 80), device=device)
        for k in range(30):
            start = 32 * (k % 3)  # batches of 32, 32 and 16
            for _, sampler in alone + streamed:
                for group in sampler.param_groups:
                    group["lr"], group["temperature"] = 0.05 / (1 + k), float(k % 10 >= 4)
            losses = torch.stack([step(x[c, start:start + 32], y[c, start:start + 32])[0] for c, step in enumerate(steps)])
            streamed_losses, _ = together([x[c, start:start + 32] for c in range(3)], [y[c, start:start + 32] for c in range(3)])
            assert torch.equal(streamed_losses, losses), k
        torch.cuda.synchronize()
        for (a, sa), (b, sb) in zip(alone, streamed):
            assert torch.equal(sa.generator.get_state(), sb.generator.get_state())
            for name, p in a.state_dict().items():
                assert torch.equal(b.state_dict()[name], p), name
    finally:
        set_deterministic(False)
