"""The ICSGLD paper's samplers in the multimodal study: reSGLD, CSGLD and ICSGLD x4 (studies/accuracy/multimodal/
contour.py), their budgets, weights and swaps, and adding them to a finished study (merge.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from csg.errors import ConfigError
from studies.accuracy.multimodal import chains, contour, contour_report, merge, study, tuning
from studies.accuracy.multimodal.chains import BY_NAME, Block, Setting
from studies.accuracy.multimodal.landscapes import MixtureRows


def _barrier(name: str = "barrier4"):
    prepared = {name: study.prepare(name)}
    return prepared, _landscape(prepared)


def _landscape(prepared):
    names = list(prepared)

    def landscape_of(row_targets):
        return MixtureRows([prepared[n].target for n in names], torch.tensor([names.index(t) for t in row_targets]))

    return landscape_of


def _range(name: str) -> contour.EnergyRange:
    from studies.accuracy.multimodal import barriers

    p = study.prepare(name)
    return contour.energy_range(barriers.barrier_table(name, p.target, p.target.means.numpy(), p.scale))


def test_budgets_count_every_chain_of_a_method():
    assert chains.chain_length(BY_NAME["reSGLD"], 8000) == 4000
    assert chains.chain_length(BY_NAME["ICSGLD x4"], 8000) == 2000
    assert chains.chain_length(BY_NAME["CSGLD"], 8000) == 8000
    prepared, landscape_of = _barrier()
    counted = []

    def counting(row_targets):
        rows = landscape_of(row_targets)
        step = rows.step

        def counted_step(x):
            counted.append(len(x))
            return step(x)

        rows.step = counted_step
        return rows

    for name in ("reSGLD", "CSGLD", "ICSGLD x4"):
        counted.clear()
        method = BY_NAME[name]
        block = Block("barrier4", method, Setting(0.25, 4.0), (0,), chains.chain_length(method, 2000))
        starts = study.starts_of(prepared, (0,))
        chains.run([block], counting, starts, {"barrier4": 1.0}, (2000,), seed=0, draws=False,
                   ranges={"barrier4": _range("barrier4")})
        assert sum(counted) == 2000, name          # B gradient evaluations across all its chains


def test_the_contour_theta_learns_the_partition_masses_of_a_gaussian():
    """U = |x|^2 / 2 in 2-D: U is exponential(1) above 0, so the partition [i, i + 1) holds e^-i (1 - e^-1); with
    ICSGLD's field theta^zeta converges to these masses (8 groups of 4 interacting chains; zeta = 1)."""
    width, zeta, groups, steps, shown = 1.0, 1.0, 8, 3000, 6
    blocks = [Block("g", BY_NAME["ICSGLD x4"], Setting(0.1, zeta), tuple(range(groups)), steps)]
    layout = [(0, s, c) for s in range(groups) for c in range(4)]
    streams = {("g", s, c): 4 * s + c for s in range(groups) for c in range(4)}
    extra = contour.Interactions(blocks, layout, {"g": contour.EnergyRange(0.0, width)}, streams, seed=0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(len(layout), 2, generator=generator)
    for _ in range(steps):
        multiplier, _ = extra.contour_step(0.5 * (x * x).sum(-1))
        x = x - 0.1 * multiplier[:, None] * x + math.sqrt(0.2) * torch.randn(x.shape, generator=generator)
    partition = extra.contour[0].partition
    estimate = partition.theta.pow(partition.zeta).mean(0).numpy()[:shown]   # the partitions U reaches
    estimate = estimate / estimate.sum()
    edges = np.arange(shown + 1) * width
    exact = np.exp(-edges[:-1]) - np.exp(-edges[1:])
    exact = exact / exact.sum()
    assert 0.5 * np.abs(estimate - exact).sum() < 0.06                 # from 0.47 at the uniform start
    assert np.all(np.diff(estimate[:4]) < 0)


def _pooled_weights(outcome, b, budget):
    """The share of a block's draws in the heavy (left) mode, weighted and unweighted, over its seeds."""
    draws, weights = outcome.draws[(b, budget)], outcome.weights[(b, budget)]
    left = draws[..., 0] < 0
    return float((left * weights).sum() / weights.sum()), float(left.mean())


def test_csglds_weighted_mode_weights_are_near_the_exact_ones_and_nearer_than_its_unweighted():
    """At a small step (the contour drift jumps at every partition's edge, so a large step is biased) CSGLD's
    importance-weighted share of the heavy mode is near 0.75, nearer than the flattened chain's own share."""
    prepared, landscape_of = _barrier("barrier2")
    seeds, budget = tuple(range(16)), 20000
    block = Block("barrier2", BY_NAME["CSGLD"], Setting(0.05, 0.75), seeds, budget)
    outcome = chains.run([block], landscape_of, study.starts_of(prepared, seeds), {"barrier2": 1.0}, (budget,),
                         seed=3, ranges={"barrier2": _range("barrier2")})
    weighted, unweighted = _pooled_weights(outcome, 0, budget)
    assert abs(weighted - 0.75) < 0.05 and abs(weighted - 0.75) < abs(unweighted - 0.75)
    rows = study.scores(outcome, 0, budget, prepared["barrier2"])
    assert np.mean([r["mode_error"] for r in rows]) < 0.1 and all(r["finite"] for r in rows)
    draws, weights = outcome.draws[(0, budget)][0, 0], outcome.weights[(0, budget)][0, 0]
    assert draws.shape == (chains.CANDIDATES, 2)
    resampled = contour.resample(draws, weights, chains.DRAWS, seed=0)
    heavy = weights / weights.sum() > 2.0 / chains.DRAWS             # a weight worth two draws or more
    assert len(resampled) == chains.DRAWS and all((resampled == d).all(-1).sum() >= 1 for d in draws[heavy])


def test_resgld_at_equal_temperatures_keeps_sglds_stationary_weights_and_scores_only_its_cold_chain():
    """At T_high = 1 every swap is accepted (log S = 0): the kept chain still samples the target, as SGLD does."""
    prepared, landscape_of = _barrier("barrier2")
    seeds, budget = tuple(range(16)), 16000
    blocks = [Block("barrier2", BY_NAME["reSGLD"], Setting(0.25, 1.0), seeds, budget // 2),
              Block("barrier2", BY_NAME["SGLD"], Setting(0.25), seeds, budget),
              Block("barrier2", BY_NAME["reSGLD"], Setting(0.25, 5.0), seeds, budget // 2)]
    outcome = chains.run(blocks, landscape_of, study.starts_of(prepared, seeds), {"barrier2": 1.0}, (budget,),
                         seed=4, ranges={"barrier2": _range("barrier2")})
    replica, plain = (_pooled_weights(outcome, b, budget)[1] for b in (0, 1))
    assert abs(replica - 0.75) < 0.05 and abs(plain - 0.75) < 0.05
    end = outcome.marks[(2, budget // 2)]
    assert (end["kept"][:, 1] == 0).all() and (end["kept"][:, 0] > 0).all()    # the hot chain is never kept
    hot = [r["crossings"] for r in study.scores(outcome, 2, budget, prepared["barrier2"])]
    assert np.mean(hot) > 0


def test_the_new_methods_tune_their_own_value_and_name_it():
    grids = tuning.Grids()
    settings = grids.settings(BY_NAME["reSGLD"])
    assert len(settings) == len(grids.resgld) * len(grids.temperatures)
    assert {s.explore for s in settings} == set(grids.temperatures) and {s.cycle for s in settings} == {1}
    low, high = tuning.axes(grids, BY_NAME["CSGLD"], Setting(1.0, grids.zetas[0]), 5000)["explore"]
    assert low == tuning.BOUND and high == grids.zetas[1]
    assert tuning.axis_name(BY_NAME["CSGLD"], "explore") == "zeta"
    assert chains.draws_per_chain(BY_NAME["CSGLD"]) == chains.CANDIDATES
    assert chains.draws_per_chain(BY_NAME["reSGLD"]) == chains.DRAWS


def test_a_merge_replaces_only_the_named_methods_rows_and_keeps_the_others_in_place():
    previous = pd.DataFrame({"method": ["SGLD", "CSGLD", "cSGLD", "CSGLD"], "seed": [0, 0, 0, 1],
                             "value": [1.0, 2.0, 3.0, 4.0]})
    new = pd.DataFrame({"method": ["CSGLD", "SGLD", "reSGLD"], "seed": [0, 0, 0], "value": [9.0, 8.0, 7.0]})
    merged = merge.replaced(previous, new, ("CSGLD", "reSGLD"))
    assert merged.to_dict("list") == {"method": ["SGLD", "cSGLD", "CSGLD", "reSGLD"], "seed": [0, 0, 0, 0],
                                      "value": [1.0, 3.0, 9.0, 7.0]}


@pytest.mark.parametrize("override, key", [("methods=SGLD,foo", "methods"), ("merge=maybe", "merge"),
                                           ("merge=true", "merge")])
def test_bad_options_of_the_study_are_one_line_naming_the_key(tmp_path, override, key):
    from studies.experiments.in_process import run_accuracy_multimodal
    from studies.experiments.job import Job

    job = Job(target="accuracy-multimodal", out=tmp_path, out_given=True, scale="smoke", overrides=[override])
    with pytest.raises(ConfigError) as error:
        run_accuracy_multimodal(job)
    assert key in str(error.value) and "\n" not in str(error.value)


def test_a_partition_with_one_zeta_and_temperature_per_group_acts_as_separate_partitions():
    from csg.samplers.contour import EnergyPartition

    shared = EnergyPartition(0.0, 1.0, 10, zeta=torch.tensor([0.75, 4.0]), groups=2, difference="forward")
    alone = [EnergyPartition(0.0, 1.0, 10, zeta=z, difference="forward") for z in (0.75, 4.0)]
    theta = torch.softmax(torch.randn(2, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    shared.theta.copy_(theta)
    for g, partition in enumerate(alone):
        partition.theta.copy_(theta[g:g + 1])
    j = torch.tensor([3, 5])
    together = shared.multiplier(j, torch.tensor([1.0, 2.0]))
    apart = torch.cat([alone[0].multiplier(j[:1], 1.0), alone[1].multiplier(j[1:], 2.0)])
    assert torch.allclose(together, apart) and not torch.allclose(together[0], together[1])
    assert torch.allclose(shared.importance_weights(j), torch.cat([alone[0].importance_weights(j[:1]),
                                                                  alone[1].importance_weights(j[1:])]))
    energy = torch.tensor([3.4, 5.7], dtype=torch.float64)
    assert torch.allclose(shared.dynamics_log_weights(energy, torch.tensor([1.0, 2.0])),
                          torch.cat([alone[0].dynamics_log_weights(energy[:1], 1.0),
                                     alone[1].dynamics_log_weights(energy[1:], 2.0)]))
    shared.update(j)
    for g, partition in enumerate(alone):
        partition.update(j[g:g + 1])
        assert torch.allclose(shared.theta[g], partition.theta[0])


def test_a_step_of_0_leaves_every_chain_at_its_start_and_scores_its_start_distribution():
    """The limit h -> 0 that brackets the step grid's low end (tuning.LIMIT): the chains stay where they start, and
    the contour rows' weights still come from a theta adapted on the start points' fixed energies."""
    prepared, landscape_of = _barrier()
    starts = study.starts_of(prepared, (0,))
    block = Block("barrier4", BY_NAME["ICSGLD x4"], Setting(tuning.LIMIT, 0.75), (0,), 400)
    outcome = chains.run([block], landscape_of, starts, {"barrier4": prepared["barrier4"].scale}, (400,), seed=3,
                         ranges={"barrier4": _range("barrier4")})
    draws, weights = outcome.draws[(0, 400)], outcome.weights[(0, 400)]
    start = starts[("barrier4", 0)].float().numpy()
    assert np.allclose(draws[0], start[:, None, :], atol=1e-6)
    assert outcome.marks[(0, 400)]["crossings"].sum() == 0
    # the weights moved off the uniform start's 1: theta learnt the partitions of the four start energies
    assert np.isfinite(weights).all() and not np.allclose(weights, 1.0)


def test_a_verdict_whose_side_did_not_move_is_marked_in_its_table_its_csv_and_the_reading():
    summary = pd.DataFrame([{"target": "barrier16", "budget": 80_000, "method": m, "rank": 1, "step": h}
                            for m, h in (("ICSGLD x4", 0.0), ("SGLD x4", 0.5), ("cSGLD x4", 1.0))])
    found = pd.DataFrame([{"target": "barrier16", "budget": 80_000, "method": "ICSGLD x4", "baseline": b,
                           "metric": "mode_error"} for b in ("SGLD x4", "cSGLD x4")])
    marked = contour_report.mark_still(found, summary)
    assert marked.method_still.tolist() == [True, True] and not marked.baseline_still.any()
    assert contour_report.pair(next(marked.itertuples())) == "ICSGLD x4 (h = 0) - SGLD x4"
    text = "\n".join(contour_report.still_lines(summary, marked))
    assert "1 of the 3 tuned cells: barrier16 ICSGLD x4 at 80,000" in text and "2 verdicts compare" in text
    # nothing at h = 0: no section, and the pair reads as before
    moving = summary.assign(step=[0.25, 0.5, 1.0])
    assert contour_report.still_lines(moving, contour_report.mark_still(found, moving)) == []
    assert contour_report.pair(next(found.itertuples())) == "ICSGLD x4 - SGLD x4"


def test_the_report_says_where_the_limit_h_0_ran():
    tried = pd.DataFrame([{"target": "barrier16", "method": "ICSGLD x4", "budget": b, "step": h}
                          for b in (5_000, 80_000) for h in (0.0, 2.0**-12)]
                         + [{"target": "barrier2", "method": "SGLD", "budget": 5_000, "step": 0.5}])
    text = contour_report.limit_text(tried)
    assert "barrier16 ICSGLD x4 (scored at 5,000, 80,000)" in text and "barrier2" not in text
    assert "was not run" in contour_report.limit_text(tried[tried.step > 0])


def test_a_side_whose_chains_never_cross_is_marked_and_counted():
    summary = pd.DataFrame([{"target": "barrier16", "budget": 80_000, "method": m, "rank": 1, "step": 0.25}
                            for m in ("ICSGLD x4", "SGLD x4", "CSGLD")])
    runs = pd.DataFrame([{"target": "barrier16", "budget": 80_000, "method": m, "rank": 1, "seed": s,
                          "crossings": crossings(s)}
                         for m, crossings in (("ICSGLD x4", lambda s: 0), ("SGLD x4", lambda s: s % 2),
                                              ("CSGLD", lambda s: 0 if s < 19 else 3)) for s in range(20)])
    found = pd.DataFrame([{"target": "barrier16", "budget": 80_000, "method": "ICSGLD x4", "baseline": b,
                           "metric": "core_tv", "verdict": v} for b, v in (("SGLD x4", "hurts"), ("CSGLD", "helps"))])
    marked = contour_report.mark_still(found, summary, runs)
    # ICSGLD x4 never crosses; CSGLD crosses on 1 seed of 20 (95 % never: marked); SGLD x4 on half of them
    assert marked.method_frozen.all() and marked.baseline_frozen.tolist() == [False, True]
    rows = list(marked.itertuples())
    assert contour_report.pair(rows[0]) == "ICSGLD x4 (never crosses) - SGLD x4"
    assert contour_report.pair(rows[1]) == "ICSGLD x4 (never crosses) - CSGLD (never crosses)"
    text = "\n".join(contour_report.still_lines(summary, marked))
    assert "the ICSGLD family: 2 of its 2 (1 with both sides so; 2 of them helps or hurts)" in text


def test_a_figure_cells_difference_never_reads_zero_where_it_is_not():
    from studies.accuracy.multimodal.figures import _signed

    assert [_signed(v, 2) for v in (0.004, -0.0004, 0.123, 0.0)] == ["+0.004", "-0.0004", "+0.12", "+0.00"]
    assert _signed(0.04, 1) == "+0.04" and _signed(1.26, 1) == "+1.3"
