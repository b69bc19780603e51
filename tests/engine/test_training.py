"""The loop around a sampler: noise only in sampling stages, samples exactly where the rule says, NaN handling."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from csg.schedules import collection_points
from csg.engine.samples import SampleStore
from csg.errors import DivergenceError
from csg.samplers import SGHMC
from csg.schedules import Cyclical
from csg.engine.loop import train_chain


def toy_problem(seed=0, n=30, batch_size=10):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 2), loader


def test_exploration_draws_no_noise_and_sampling_does(tmp_path):
    model, loader = toy_problem()
    generator = torch.Generator().manual_seed(0)
    sampler = SGHMC(model.parameters(), lr=0.1, num_data=30, temperature=1.0, generator=generator)
    schedule = Cyclical(lr0=0.1, total_steps=10 * 3, cycles=2, explore=0.5)
    drew = {}
    state = [generator.get_state()]

    def on_step(k):
        drew[k] = not torch.equal(generator.get_state(), state[0])
        state[0] = generator.get_state()

    train_chain(model, sampler, schedule, loader, epochs=10, temperature=1.0, plan=[], store=SampleStore(tmp_path),
                device=torch.device("cpu"), progress=False, on_step=on_step)
    assert len(drew) == 30
    assert drew == {k: schedule.sampling(k) for k in range(30)}
    assert any(drew.values()) and not all(drew.values())


def test_samples_fall_exactly_where_the_rule_says(tmp_path):
    model, loader = toy_problem()
    sampler = SGHMC(model.parameters(), lr=0.1, num_data=30, temperature=1.0, generator=torch.Generator().manual_seed(1))
    # 10 epochs x 3 batches, 2 cycles of 15 iterations; sampling once mod(k, 15) >= 7.5, i.e. k in 8..14 and 23..29.
    # Epoch e ends at k = 3e + 2, so epochs 2, 3, 4 end in cycle 0's sampling stage and 7, 8, 9 in cycle 1's;
    # two samples per cycle keep the last two of each: epochs 3, 4, 8, 9.
    schedule = Cyclical(lr0=0.1, total_steps=30, cycles=2, explore=0.5)
    plan = collection_points(schedule, epochs=10, batches_per_epoch=3, samples_per_cycle=2)
    snapshots = {}

    def on_step(k):
        snapshots[k] = {name: t.detach().clone() for name, t in model.state_dict().items()}

    store = SampleStore(tmp_path / "samples")
    result = train_chain(model, sampler, schedule, loader, epochs=10, temperature=1.0, plan=plan, store=store,
                         device=torch.device("cpu"), progress=False, on_step=on_step)
    records = [SampleStore.load(p) for p in store.paths()]
    assert [r["epoch"] for r in records] == [3, 4, 8, 9]
    assert [r["cycle"] for r in records] == [0, 0, 1, 1]
    assert [r["iteration"] for r in records] == [11, 14, 26, 29]
    for record in records:
        for name, tensor in record["state_dict"].items():
            assert torch.equal(tensor, snapshots[record["iteration"]][name])
    assert result.iterations == 30 and len(result.samples) == 4


class NaNAfter(torch.nn.Module):
    """A linear model whose output turns NaN once it has been called `after` times in training."""

    def __init__(self, after):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.calls, self.after = 0, after

    def forward(self, x):
        out = self.linear(x)
        if self.training:
            self.calls += 1
            if self.calls > self.after:
                out = out * float("nan")
        return out


def test_nan_loss_stops_with_clear_error_and_keeps_samples(tmp_path):
    _, loader = toy_problem()
    model = NaNAfter(after=20)
    sampler = SGHMC(model.parameters(), lr=0.1, num_data=30, temperature=1.0)
    schedule = Cyclical(lr0=0.1, total_steps=30, cycles=2, explore=0.5)
    plan = collection_points(schedule, epochs=10, batches_per_epoch=3, samples_per_cycle=2)
    store = SampleStore(tmp_path / "samples")
    with pytest.raises(DivergenceError, match=r"loss became nan in epoch 7/10.*2 samples already written"):
        train_chain(model, sampler, schedule, loader, epochs=10, temperature=1.0, plan=plan, store=store,
                    device=torch.device("cpu"), progress=False, log_every_n_steps=1000)
    assert [SampleStore.load(p)["epoch"] for p in store.paths()] == [3, 4]


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_runs_and_keeps_fp32_parameters(tmp_path, precision):
    from csg.engine.devices import Precision

    model, loader = toy_problem()
    sampler = SGHMC(model.parameters(), lr=0.1, num_data=30, temperature=1.0, generator=torch.Generator().manual_seed(1))
    schedule = Cyclical(lr0=0.1, total_steps=12, cycles=1, explore=0.5)
    plan = collection_points(schedule, epochs=4, batches_per_epoch=3, samples_per_cycle=1)
    before = model.weight.detach().clone()
    train_chain(model, sampler, schedule, loader, epochs=4, temperature=1.0, plan=plan,
                store=SampleStore(tmp_path), device=torch.device("cpu"),
                precision=Precision(precision, torch.device("cpu")), progress=False)
    assert model.weight.dtype == torch.float32 and not torch.equal(model.weight, before)
    assert torch.isfinite(model.weight).all() and len(SampleStore(tmp_path)) == 1
