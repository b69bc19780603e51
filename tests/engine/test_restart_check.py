"""A warm restart that throws a chain out of the region its earlier cycles found is stopped where it happens, before
that cycle's samples (csg.engine.accounting.check_restart; issue 74)."""

from __future__ import annotations

import pytest

from csg.engine.accounting import RESTART_NATS, check_restart
from csg.errors import DivergenceError


def _rows(ends, sampling=0.1, explore_epochs=3):
    rows = []
    for cycle, end in enumerate(ends):
        rows += [{"cycle": cycle, "stage": "exploration", "train_loss": end + 1.0}] * (explore_epochs - 1)
        rows += [{"cycle": cycle, "stage": "exploration", "train_loss": end},
                 {"cycle": cycle, "stage": "sampling", "train_loss": sampling}]
    return rows


def test_a_restart_that_ends_its_exploration_far_above_the_earlier_cycles_is_stopped():
    rows = _rows([0.3, 0.09, 16.09])
    for upto in range(1, len(rows)):  # every epoch before the third cycle's first sampling epoch passes
        check_restart(rows[:upto], 0.05, 6)
    with pytest.raises(DivergenceError, match="the warm restart of cycle 3 diverged") as stopped:
        check_restart(rows, 0.05, 6)
    message = str(stopped.value)
    assert "16.09" in message and "cycle 2's 0.09" in message and "6 samples" in message and "lr0 (now 0.05)" in message
    assert stopped.value.loss == 16.09 and stopped.value.epoch == len(rows) - 1


@pytest.mark.parametrize("ends", [
    [0.3, 0.3 + RESTART_NATS - 0.01],   # worse, but within the bound
    [-1.2, -0.9, -1.4],                 # a regression likelihood's losses may be negative: differences, not ratios
    [2.3],                              # one cycle: nothing to compare
])
def test_restarts_within_the_bound_and_a_first_cycle_pass(ends):
    check_restart(_rows(ends), 0.05, 3)


def test_the_readmes_boston_command_at_the_former_step_stops_at_the_restart_that_diverges(tmp_path):
    import csg

    with pytest.raises(DivergenceError, match="the warm restart of cycle 3 diverged"):
        csg.train(["data=boston", "likelihood=gaussian_precision", "sampler.lr0=0.05", "seed=0", "logger=none",
                   "trainer.progress=false", "trainer.threads=1", f"hydra.run.dir={tmp_path / 'run'}"])
    samples = sorted((tmp_path / "run" / "samples").glob("*.pt"))
    assert len(samples) == 6 and all("cycle02" not in p.name for p in samples)  # cycles 1-2 kept, none of cycle 3
    assert not (tmp_path / "run" / "metrics.json").exists()  # never evaluated as an ensemble
