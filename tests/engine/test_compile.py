"""trainer.compile: the compiled step (inductor on the CPU) takes the eager step's path, to float tolerance."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from csg.models import create_model
from csg.samplers import SGHMC, SGLD
from csg.samplers.contour import ContourSGLD, EnergyPartition
from csg.engine.step.single import CompiledStep, Step, compile_enabled, make_step
from csg.engine.devices import Precision

NUM_DATA, STEPS = 80, 50
CPU = torch.device("cpu")


class EnergyFromLoss:
    """What csg.engine.interaction gives a contour sampler: the energy estimate N * mean loss of the batch."""

    def before_update(self, mean, x, y, autocast):
        return {"energy": NUM_DATA * mean}


def make_sampler(kind: str, model):
    generator = torch.Generator().manual_seed(7)
    options = dict(lr=0.05, num_data=NUM_DATA, temperature=1.0, weight_decay=5e-4, generator=generator)
    if kind == "sgld":
        return SGLD(model.parameters(), **options)
    if kind == "sghmc":
        return SGHMC(model.parameters(), momentum=0.1, **options)
    partition = EnergyPartition(0.0, 5.0, 20, zeta=0.75, sa_step=lambda k: 0.05)
    return ContourSGLD(model.parameters(), partition=partition, **options)


def batches():
    """50 iterations over 80 examples in batches of 32: every third batch is the epoch's last, of 16."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(NUM_DATA, 1, 6, 6, generator=g), torch.randint(0, 3, (NUM_DATA,), generator=g)
    k = 0
    while True:
        for start in range(0, NUM_DATA, 32):
            if k == STEPS:
                return
            yield k, x[start:start + 32], y[start:start + 32]
            k += 1


def run(step_type, kind: str, model):
    sampler = make_sampler(kind, model)
    interaction = EnergyFromLoss() if kind == "contour" else None
    step = step_type(model, sampler, Precision("32", CPU), interaction=interaction)
    losses = []
    for k, x, y in batches():
        lr = 0.025 * (1 + math.cos(math.pi * (k % 25) / 25))  # two cosine cycles
        for group in sampler.param_groups:
            group["lr"], group["temperature"] = lr, (1.0 if k % 25 >= 10 else 0.0)  # exploration, then sampling
        loss, hits = step(x, y)
        losses.append(float(loss))
        assert 0 <= int(hits) <= y.shape[0]
    return sampler, losses


@pytest.mark.parametrize("kind", ["sgld", "sghmc", "contour"])
def test_compiled_step_follows_the_eager_step_for_50_steps(kind):
    torch.manual_seed(0)
    model = create_model("mlp", num_classes=3, input_shape=(1, 6, 6), hidden=(16, 16))
    twin, start = copy.deepcopy(model), [p.detach().clone() for p in model.parameters()]
    eager, eager_losses = run(Step, kind, model)
    compiled, compiled_losses = run(CompiledStep, kind, twin)
    assert compiled.compiled == (kind != "contour")  # the contour step reads its partition on the host: eager update
    assert torch.equal(compiled.generator.get_state(), eager.generator.get_state())  # the same draws were taken
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(compiled_losses), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    moved = max(float((p.detach() - p0).abs().max()) for p, p0 in zip(model.parameters(), start))
    assert moved > 1e-2 and len(eager_losses) == STEPS  # the chain went somewhere: the comparison is not vacuous
    if kind == "contour":
        torch.testing.assert_close(compiled.partition.theta, eager.partition.theta, rtol=1e-4, atol=1e-6)


def test_the_last_smaller_batch_is_compiled_once_not_every_epoch():
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = create_model("mlp", num_classes=3, input_shape=(1, 6, 6), hidden=(16,))
    step = CompiledStep(model, make_sampler("sghmc", model), Precision("32", CPU))
    x, y = torch.randn(40, 1, 6, 6), torch.randint(0, 3, (40,))

    def epoch():
        for start in (0, 32):  # a batch of 32, then the last one of 8
            step(x[start:start + 32], y[start:start + 32])

    epoch()
    compiled = dict(counters["stats"])
    assert compiled.get("unique_graphs", 0) >= 2  # the model for both batch sizes (and the update rule)
    for _ in range(3):
        epoch()
    assert dict(counters["stats"]) == compiled


def test_compile_setting_and_the_step_it_picks():
    model = create_model("mlp", num_classes=3, input_shape=(1, 6, 6), hidden=(8,))
    sampler = make_sampler("sgld", model)
    assert compile_enabled("auto", CPU) is False and compile_enabled("auto", torch.device("cuda")) is True
    assert compile_enabled(True, CPU) is True and compile_enabled(False, torch.device("cuda")) is False
    assert type(make_step("auto", model, sampler, Precision("32", CPU), CPU)) is Step
    assert type(make_step(True, model, sampler, Precision("32", CPU), CPU)) is CompiledStep
    with pytest.raises(ValueError, match="capturable"):
        make_sampler("contour", model).accelerate()
