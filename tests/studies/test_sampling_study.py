"""The sampling study (studies/sampling): its arms run through csg.train on the posterior benchmark's task and are
scored by what the runs write; a chain starts at a reference draw's weights; the report sets each arm beside its
noise-off control with the shared statistics. Stand-in draws (small random weights, not NUTS's: `make
reference-network` makes those in 20 minutes) and 4-epoch runs; the study's full scale is its make target."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from studies.sampling import study
from studies.sampling.report import write_report

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


def test_a_grid_point_is_scored_on_both_halves_and_the_held_out_digits(tmp_path):
    from studies.sampling import measure, oracle

    torch.set_num_threads(1)
    overrides = [*oracle.grid_overrides(0.4, 0.8, 2, 0, 0.2), "trainer.epochs=20", "sampler.samples_per_cycle=2"]
    row = measure.measure(overrides, tmp_path / "run", 0.2)
    half_a, half_b = measure.halves()
    assert len(half_a) == len(half_b) == 500 and not set(half_a) & set(half_b)
    assert row["tv"] == pytest.approx((row["tv_a"] + row["tv_b"]) / 2)  # two halves of equal size
    assert 0 < row["validation_nll"] < 3 and row["members"] == 4 and row["epochs"] == 20
    again = measure.measure(overrides, tmp_path / "run", 0.2)  # read back from the run's folder, not trained again
    assert again == row


def _synthetic(tmp_path):
    generator = np.random.default_rng(0)
    grid = [{"temperature": t, "lr0": lr0, "beta": beta, "cycles": 4, "seed": seed,
             "tv_a": 0.05 + 0.1 * abs(lr0 - 0.4) + 0.01 * generator.random(), "tv_b": 0.06 + 0.01 * generator.random(),
             "tv": 0.06, "validation_nll": 0.45 + lr0 / 10 + 0.001 * seed, "effective_members": 3 + beta,
             "check": "fires", "epochs": 200}
            for t in (1.0, 0.2) for lr0 in (0.2, 0.4, 0.8) for beta in (0.8, 0.5) for seed in (0, 1, 2)]
    methods = {"cSGHMC": (12, 0.06, 0.02), "Snapshot-SGDM": (12, 0.058, 0.01), "cSGHMC x4": (48, 0.045, 0.08),
               "cSGHMC x4 noise off": (48, 0.044, 0.03), "deep ensemble x5": (5, 0.04, 0.05),
               "deep ensemble x5, momentum 0.1": (5, 0.05, 0.04), "csg-tune's pick": (12, 0.055, 0.03),
               "SGHMC": (20, 0.07, 0.02)}
    runs = [{"temperature": t, "method": m, "budget_epochs": b, "seed": s, "members": k,
             "tv": tv + 0.001 * generator.random(), "mutual_information": mi, "tv_to_average": 0.1 if m == "cSGHMC x4" else 0.03,
             "effective_members": 3.0, "configurational": 0.5 * t}
            for t in (1.0, 0.2) for m, (k, tv, mi) in methods.items() for b in (200, 800) for s in range(5)]
    nuts = [{"temperature": t, "method": "NUTS (one chain)", "members": k, "tv": 0.1 / k ** 0.5,
             "mutual_information": 0.15, "tv_to_average": 0.1, "epochs": 300_000 + 500 * k}
            for t in (1.0, 0.2) for k in (3, 12)]
    reference = [{"temperature": t, "mutual_information": 0.16, "tv_to_average": 0.1, "mutual_information_S12": 0.1,
                  "tv_to_average_S12": 0.09} for t in (1.0, 0.2)]
    return pd.DataFrame(grid), pd.DataFrame(runs), pd.DataFrame(nuts), pd.DataFrame(reference)


def test_the_second_slice_reports_the_oracle_the_rule_the_decomposition_and_the_cost(tmp_path):
    from studies.sampling import cost_report, oracle

    grid, runs, nuts, reference = _synthetic(tmp_path)
    picks = pd.DataFrame(oracle.picks(grid))
    by = {(r.temperature, r.who): (r.lr0, r.beta, r.cycles) for r in picks.itertuples()}
    assert by[(1.0, "oracle")][0] == 0.4 and by[(1.0, "recipe")] == (0.4, 0.8, 4)
    assert by[(1.0, "rule")] == (0.2, 0.8, 4)  # the least held-out NLL; within its bound the most effective members
    jobs = oracle.fresh_jobs(picks, tmp_path)  # each chosen point once a temperature, at seeds no choice saw
    distinct = {(t, point) for (t, who), point in by.items()}
    assert len(jobs) == len(distinct) * len(oracle.FRESH_SEEDS) and not {j[1] for j in jobs} & set(oracle.SEEDS)
    grid.to_csv(tmp_path / "sampling_oracle_grid.csv", index=False)
    picks.to_csv(tmp_path / "sampling_oracle_picks.csv", index=False)
    runs.to_csv(tmp_path / "sampling_cost_runs.csv", index=False)
    nuts.to_csv(tmp_path / "sampling_cost_nuts.csv", index=False)
    reference.to_csv(tmp_path / "sampling_cost_reference.csv", index=False)
    text = "\n".join(cost_report.cost_lines(tmp_path))
    assert "## The oracle bound and csg-tune's rule" in text and "| 1 | rule - oracle |" in text
    assert "One family of 12 comparisons of TV to NUTS" in text  # 6 decompositions x 2 temperatures
    # cSGHMC x4: MI 0.08 / 0.16 (48 members: the 400 draws' value) = 0.5 and member TV 0.1 / 0.1 = 1: it meets both
    assert "**T = 1**: at every seed the spread bar is met by cSGHMC x4 at 200 epochs" in text
    assert "configurational temperature 0.50 T" in text and "| 48 | 0.0" in text
    assert "its grid cost 3,600 epochs a temperature" in text  # 3 x 2 points x 3 seeds x 200 epochs
    assert "NUTS meets it from 3 draws" in text  # 0.15 / 0.16 and 0.1 / 0.1
    assert (tmp_path / cost_report.FIGURE).stat().st_size > 0
    assert cost_report.cost_lines(tmp_path / "nothing") == []
