"""The sampling study (csg/studies/sampling): its arms run through csg.train on the posterior benchmark's task and are
scored by what the runs write; a chain starts at a reference draw's weights; the report sets each arm beside its
noise-off control with the shared statistics. Stand-in draws (small random weights, not NUTS's: `make
reference-network` makes those in 20 minutes) and 4-epoch runs; the study's full scale is its make target."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from csg.studies.sampling import study
from csg.studies.sampling.report import write_report

TINY = ("trainer.epochs=20", "sampler.cycles=2", "sampler.samples_per_cycle=2", "data.test_per_class=100")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_study_runs_its_arms_from_a_draw_and_reports_each_beside_its_control(tmp_path):
    torch.set_num_threads(1)
    draws = tmp_path / "draws"
    draws.mkdir()
    generator = np.random.default_rng(0)
    np.save(draws / "draws_T1.npy", (0.1 * generator.standard_normal((4, 300, 1930))).astype(np.float32))
    reference = study.reference_spread(1.0, per_chain=5, draws_dir=draws)
    assert reference["draws"] == 20 and reference["mutual_information"] > 0
    stationary = study.ARMS[0]
    stationary_tiny = study.Arm(stationary.name, stationary.part,
                                (*stationary.overrides[:-2], "sampler.cycles=4", "sampler.samples_per_cycle=1"), True)
    dose = study.ARMS[2]
    rows = [study.run_arm(arm, 1.0, seed, noise, tmp_path / "runs", draws, extra)
            for arm, extra in ((stationary_tiny, ("trainer.epochs=8", "data.test_per_class=100")), (dose, TINY))
            for noise in (True, False) for seed in (0, 1)]
    start = torch.load(tmp_path / "runs" / "T1" / "SGHMC_from_NUTS" / "start_seed1.pt", weights_only=True)
    flat = torch.cat([value.reshape(-1) for value in start.values()]).numpy()
    assert np.array_equal(flat, np.load(draws / "draws_T1.npy")[1, 250])  # seed 1: chain 1's draw 250
    assert [row.get("members") for row in rows] == [4] * 8, [row.get("check") for row in rows]
    assert {row["part"] for row in rows} == {"from a NUTS draw", "dose"}
    noisy = [row for row in rows if row["noise"]]
    assert all(row["kinetic"] is not None and row["configurational"] is not None for row in noisy)
    assert all(0 < row["tv"] < 1 for row in rows)
    pd.DataFrame(rows).to_csv(tmp_path / "sampling_study_runs.csv", index=False)
    pd.DataFrame([reference]).to_csv(tmp_path / "sampling_study_reference.csv", index=False)
    text = write_report(tmp_path).read_text()
    assert "| from a NUTS draw | SGHMC from NUTS | T | 4 | " in text and "| dose | cSGHMC beta 0.8, step 0.095 lr0 | off |" in text
    assert "One family of 4 comparisons" in text and "Holm" in text
    assert text.count("(n = 2)") == 4  # every comparison paired over the 2 seeds
