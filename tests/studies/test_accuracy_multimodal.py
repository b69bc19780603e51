"""Where do cycles pay (issue 45): targets and their barriers, the chains, the ceiling, tuning's edge check, the
verdicts and the smoke pipeline."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from studies.accuracy.multimodal import barriers, ceiling, chains, report, study, targets, tuning, verdicts
from studies.accuracy.multimodal.chains import BY_NAME, Block, Setting
from studies.accuracy.multimodal.landscapes import MixtureRows

# --- the targets and their barriers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("barrier", [2, 16])
def test_a_two_mode_target_has_the_barrier_it_was_built_for(barrier):
    target = targets.create(f"barrier{barrier}")
    table = barriers.barrier_table(f"barrier{barrier}", target, target.means.numpy(), 1.0).set_index("from")
    light, heavy = table.barrier[1], table.barrier[0]  # the minimum-energy path, not the formula it was built by
    assert light == pytest.approx(barrier, abs=1e-3) and heavy == pytest.approx(barrier + math.log(3), abs=1e-3)
    assert target.weights.tolist() == pytest.approx([0.75, 0.25])


def test_the_paper_grid_has_16_nat_barriers_between_its_40_neighbour_pairs():
    target = targets.create("mog25")
    table = barriers.barrier_table("mog25", target, target.means.numpy(), 1 / 0.03)
    assert len(table) == 80 and table.barrier.min() == pytest.approx(table.barrier.max(), abs=1e-6)
    assert 15.5 < table.barrier.min() < 1 / (2 * 0.03) - math.log(2) + 0.01


def test_the_network_gradient_is_the_chain_rule_of_its_energy():
    network = targets.StepNetwork()
    theta = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    energy, grad = network.energy_and_grad(theta)
    leaf = theta.clone().requires_grad_(True)
    (numeric,) = torch.autograd.grad(network.energy(leaf).sum(), leaf)
    assert torch.allclose(energy, network.energy(theta)) and torch.allclose(grad, numeric)


# --- the ceiling ---------------------------------------------------------------------------------------------------


def test_the_ceiling_is_exact_and_matches_simulation():
    assert ceiling.ceiling([0.75, 0.25], 1) == pytest.approx(0.375)  # one pick: 0.25 w.p. 0.75, 0.75 w.p. 0.25
    rng = np.random.default_rng(0)
    for weights, picks in (([0.75, 0.25], 32), (np.full(25, 0.04), 64), ([0.5, 0.3, 0.2], 7)):
        mean, se = ceiling.simulated_ceiling(weights, picks, 200_000, rng)
        assert abs(ceiling.ceiling(weights, picks) - mean) < 4 * se
    assert ceiling.ceiling([0.75, 0.25], 256) < ceiling.ceiling([0.75, 0.25], 16) < ceiling.ceiling([0.75, 0.25], 4)


# --- the chains ------------------------------------------------------------------------------------------------------


def test_draws_come_from_kept_iterations_of_their_window():
    cyclical, constant = BY_NAME["cSGLD x4"], BY_NAME["SGLD"]
    setting = Setting(1.0, 0.25, 50)
    k = chains.draw_iterations(cyclical, setting, 20_000)
    assert len(k) == chains.DRAWS // 4 and k.max() < 5000 and ((k % 50) >= 13).all()  # sampling stages: r(k) >= 0.25
    k = chains.draw_iterations(constant, Setting(0.5), 20_000)
    assert len(k) == chains.DRAWS and k.min() >= 2000 and k.max() < 20_000  # after the 10 % burn-in
    assert chains.window(cyclical, Setting(1.0, 0.25, 1250), 4_000) is None  # no whole cycle in 1,000 iterations


def _run(iterations: int):
    prepared = {"barrier4": study.prepare("barrier4")}
    blocks = [Block("barrier4", BY_NAME[m], setting, (0, 1), iterations)
              for m, setting in (("SGLD", Setting(0.5)), ("cSGLD", Setting(2.0, 0.25, 50)))]
    return chains.run(blocks, study._landscape(prepared), study.starts_of(prepared, (0, 1)), {"barrier4": 1.0},
                      (400, 1600), seed=3)


def test_a_short_budget_is_the_start_of_a_long_run():
    long, short = _run(1600), _run(400)
    for b in range(2):
        for k in (0, 40, 400):
            if (b, k) in short.marks:
                for key in ("soft", "kept", "core", "crossings"):
                    assert np.allclose(long.marks[(b, k)][key], short.marks[(b, k)][key])
        assert np.array_equal(long.draws[(b, 400)], short.draws[(b, 400)])
    assert long.marks[(0, 1600)]["kept"].sum() > long.marks[(0, 400)]["kept"].sum()


def test_mixture_rows_give_the_mixture_gradient_and_responsibilities():
    mixture = targets.create("wang25")
    x = torch.randn(50, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    grad, soft, mode, inside, _ = MixtureRows([mixture], torch.zeros(50, dtype=torch.long), torch.float64).step(x)
    assert torch.allclose(grad, mixture.grad(x)) and torch.allclose(soft, torch.softmax(mixture._log_components(x), -1))
    at_centres = MixtureRows([mixture], torch.zeros(25, dtype=torch.long), torch.float64).step(mixture.means)
    assert at_centres[3].all() and torch.equal(at_centres[2], torch.arange(25))


# --- tuning and its edge check ---------------------------------------------------------------------------------------


_GRIDS = tuning.Grids(sgld=(0.25, 0.5, 1.0, 2.0), csgld=(0.5, 1.0, 2.0), explore=(0.25,), cycles=(50,),
                      explore_lattice=(0.0, 0.25, 0.5, 0.75), cycle_lattice=(2, 10, 50, 100, 400))


def _tuning(best_step: float) -> pd.DataFrame:
    rows = [{"target": "t", "method": "SGLD", "budget": 400, "step": h, "explore": 0.0, "cycle": 1, "seed": s,
             "cycles": 1, "finite": True, "core_tv": abs(math.log2(h / best_step)) + 0.01 * s,
             "mode_error": 0.1, "crossings": 0.0} for h in (0.25, 0.5, 1.0, 2.0) for s in range(3)]
    return tuning.summarise(pd.DataFrame(rows))


def test_the_lowest_core_tv_is_chosen_and_an_edge_is_refused_in_one_line():
    chosen = tuning.choose(_tuning(1.0), _GRIDS)
    assert chosen.step.tolist() == [1.0] and not chosen.edge.any() and chosen.missing.tolist() == [0]
    tuning.check_edges(chosen)
    edge = tuning.choose(_tuning(2.0), _GRIDS)
    assert edge.edge.all()
    with pytest.raises(tuning.GridEdge) as refused:
        tuning.check_edges(edge)
    message = str(refused.value)
    assert "\n" not in message and "t SGLD at 400: h = 2 / L, grid 0.25 .. 2" in message and "no report" in message


def _cyclical(settings: list[tuple[float, float, int]], best: tuple[float, float, int]) -> pd.DataFrame:
    rows = [{"target": "t", "method": "cSGLD", "budget": 400, "step": a, "explore": b, "cycle": c, "seed": 0,
             "cycles": 400 // c, "finite": True, "mode_error": 0.1, "crossings": 0.0,
             "core_tv": 0.1 + abs(math.log2(a / best[0])) + abs(b - best[1]) + abs(math.log(c / best[2]))}
            for a, b, c in settings]
    return tuning.summarise(pd.DataFrame(rows))


def test_a_choice_is_bracketed_only_when_every_neighbour_in_the_domain_ran():
    first = [(a, 0.25, 50) for a in (0.5, 1.0, 2.0)]
    chosen = tuning.choose(_cyclical(first, (1.0, 0.5, 100)), _GRIDS)
    # beta 0 and 0.5, C 10 and 100 not run: four neighbours missing, so the search goes on and the report is refused
    assert chosen.missing.tolist() == [4] and not chosen.edge.any()
    with pytest.raises(tuning.GridEdge, match="4 neighbour"):
        tuning.check_edges(chosen)
    more = tuning.wanted(chosen, _cyclical(first, (1.0, 0.5, 100)), _GRIDS)
    assert all(budget == 400 for budget in more.values()) and len(more) == 3 * 3 * 3 - 3
    assert (("t", "cSGLD", Setting(1.0, 0.5, 100)) in more) and ("t", "cSGLD", Setting(1.0, 0.25, 50)) not in more
    # the whole neighbourhood run: the optimum (1.0, 0.5, 100) is chosen, and its own neighbours are the next round
    table = _cyclical(first + [(s.step, s.explore, s.cycle) for _, _, s in more], (1.0, 0.5, 100))
    chosen = tuning.choose(table, _GRIDS)
    assert (chosen.step.item(), chosen.explore.item(), chosen.cycle.item()) == (1.0, 0.5, 100)
    assert chosen.missing.item() > 0 and len(tuning.wanted(chosen, table, _GRIDS)) > 0


def test_the_domain_bounds_bracket_beta_0_a_2_iteration_cycle_and_one_cycle_per_chain():
    everything = [(a, b, c) for a in (0.5, 1.0, 2.0) for b in (0.0, 0.25, 0.5, 0.75) for c in (2, 10, 50, 100, 400)]
    for best, bounds in (((1.0, 0.0, 2), "beta 0, C 2"), ((1.0, 0.25, 400), "C 400")):
        chosen = tuning.choose(_cyclical(everything, best), _GRIDS)
        assert chosen.bounds.item() == bounds and chosen.missing.item() == 0 and not chosen.edge.any()
        tuning.check_edges(chosen)
    # at budget 400 a chain of cSGLD runs 400 iterations: C = 400 is one cycle, so a longer cycle is not a neighbour
    assert tuning.axes(_GRIDS, BY_NAME["cSGLD"], Setting(1.0, 0.25, 400), 400)["cycle"] == (100, tuning.BOUND)
    assert tuning.axes(_GRIDS, BY_NAME["cSGLD x4"], Setting(1.0, 0.25, 100), 400)["cycle"] == (50, tuning.BOUND)
    # a 2-iteration cycle at beta 0.75 would have no sampling stage: beta 0.5 is then the domain's top
    assert tuning.axes(_GRIDS, BY_NAME["cSGLD"], Setting(1.0, 0.5, 2), 400)["explore"] == (0.25, tuning.BOUND)
    assert tuning.axes(_GRIDS, BY_NAME["cSGLD"], Setting(1.0, 0.5, 10), 400)["explore"] == (0.25, 0.75)
    # beta's lattice ends at 0.75 below the domain's end: a choice there is not bracketed
    chosen = tuning.choose(_cyclical(everything, (1.0, 0.75, 50)), _GRIDS)
    assert chosen.edge.item()


def test_a_later_round_scores_a_setting_as_the_first_round_would():
    prepared = {"barrier4": study.prepare("barrier4")}
    streams = [("barrier4", seed, c) for seed in (0, 1) for c in range(4)]
    block = Block("barrier4", BY_NAME["cSGLD"], Setting(2.0, 0.25, 50), (0, 1), 400)
    other = Block("barrier4", BY_NAME["SGLD x4"], Setting(0.5), (0, 1), 100)

    def marks(blocks):
        return chains.run(blocks, study._landscape(prepared), study.starts_of(prepared, (0, 1)), {"barrier4": 1.0},
                          (400,), seed=3, draws=False, streams=streams).marks

    alone, together = marks([block]), marks([other, block])
    for key in ("kept", "core", "crossings"):
        assert np.array_equal(alone[(0, 400)][key], together[(1, 400)][key])
    # float32 arithmetic on tensors of other lengths rounds differently in the last bits, nothing more
    assert np.allclose(alone[(0, 400)]["soft"], together[(1, 400)]["soft"], rtol=1e-5)
    with_own_streams = chains.run([block], study._landscape(prepared), study.starts_of(prepared, (0, 1)),
                                  {"barrier4": 1.0}, (400,), seed=3, draws=False).marks
    assert not np.allclose(alone[(0, 400)]["soft"], with_own_streams[(0, 400)]["soft"], rtol=1e-2)


def test_the_report_refuses_to_write_when_a_step_is_at_an_edge(tmp_path):
    chosen = tuning.choose(_tuning(2.0), _GRIDS).assign(cycles=1)
    result = study.Study(study.SMOKE, {"chosen": chosen}, math.nan)
    with pytest.raises(tuning.GridEdge):
        report.write(result, tmp_path / "out", tmp_path)
    assert not (tmp_path / "out").exists()


# --- verdicts on constructed data ------------------------------------------------------------------------------------


def _runs(values: dict[str, np.ndarray], metric: str = "mode_error") -> pd.DataFrame:
    rows = [{"target": "t", "budget": 400, "method": method, "seed": 1000 + s, "finite": True, "mode_error": math.nan,
             "w2": math.nan, metric: v} for method, per_seed in values.items() for s, v in enumerate(per_seed)]
    return pd.DataFrame(rows)


def test_verdicts_help_hurt_and_equivalent_in_one_holm_family():
    rng = np.random.default_rng(2)
    base = 0.08 + 0.01 * rng.standard_normal(50)   # meets the bar of 0.1
    values = {"SGLD": base, "cSGLD": base - 0.05 + 0.01 * rng.standard_normal(50),      # the cycles help
              "SGLD x4": base, "cSGLD x4": base + 0.002 * rng.standard_normal(50)}      # within +-0.02: equivalent
    found = verdicts.verdicts(_runs(values)).set_index("method")
    assert found.verdict.to_dict() == {"cSGLD": "helps", "cSGLD x4": "equivalent"}
    assert (found.margin == verdicts.MODE_MARGIN).all() and found.seeds.tolist() == [50, 50]
    assert (found.bar == verdicts.MODE_BAR).all()
    assert found.p_holm["cSGLD"] == pytest.approx(min(1.0, 2 * found.p_value["cSGLD"]))
    values["cSGLD"] = base + 0.05 + 0.01 * rng.standard_normal(50)
    assert verdicts.verdicts(_runs(values)).set_index("method").verdict["cSGLD"] == "hurts"
    # the same equivalence where both methods miss the bar (a third of the mass misplaced): both fail
    values["SGLD x4"] = base + 0.25
    values["cSGLD x4"] = values["SGLD x4"] + 0.002 * rng.standard_normal(50)
    far = verdicts.verdicts(_runs(values)).set_index("method")
    assert far.verdict["cSGLD x4"] == "both fail" and far.tested["cSGLD x4"] == "equivalent"
    # W2's margin and bar: fixed multiples of the exact floor, whatever the methods score
    w2 = _runs({"SGLD": np.full(50, 3.0) + rng.standard_normal(50) * 0.1, "cSGLD": np.full(50, 3.0),
                "exact": np.full(50, 1.0)}, "w2")
    found = verdicts.verdicts(w2).set_index("metric")
    assert found.margin["w2"] == pytest.approx(verdicts.W2_MARGIN * 1.0)
    assert found.bar["w2"] == pytest.approx(verdicts.W2_BAR * 1.0) and found.verdict["w2"] == "both fail"


def test_the_tuning_metric_is_judged_too_with_the_mode_errors_margin_and_bar():
    rng = np.random.default_rng(3)
    base = 0.05 + 0.01 * rng.standard_normal(20)
    runs = _runs({"SGLD": base, "cSGLD": base - 0.03 + 0.005 * rng.standard_normal(20)})
    runs["core_tv"] = runs.mode_error
    found = verdicts.verdicts(runs).set_index("metric")
    assert found.verdict.to_dict() == {"mode_error": "helps", "core_tv": "helps"}
    assert found.margin["core_tv"] == verdicts.MODE_MARGIN and found.bar["core_tv"] == verdicts.MODE_BAR


def test_the_networks_arrival_family_compares_only_seeds_where_both_arrived():
    rng = np.random.default_rng(4)
    seeds = 30
    rows = []
    for method, shift in (("SGLD", 0.0), ("cSGLD", -0.05)):
        for s in range(seeds):
            arrived = s % 3 != 0 if method == "cSGLD" else s % 5 != 0   # a third, a fifth not arrived
            rows.append({"target": "network", "budget": 5000, "method": method, "seed": 1000 + s,
                         "finite": arrived, "mode_error": 1.0 if not arrived else 0.08 + shift + 0.005 * rng.standard_normal()})
    runs = pd.DataFrame(rows + [{**r, "target": "barrier2"} for r in rows])  # another target: left out
    found = verdicts.arrived(runs)
    assert len(found) == 1
    (row,) = found.itertuples()
    both = [s for s in range(seeds) if s % 3 and s % 5]
    assert row.seeds == len(both)
    assert row.method_arrived == pytest.approx(20 / 30) and row.baseline_arrived == pytest.approx(24 / 30)
    assert row.method_mean < 0.04 < row.baseline_mean and row.verdict == "helps"  # the scored 1s are left out


# --- the smoke pipeline ----------------------------------------------------------------------------------------------


def test_the_smoke_study_writes_its_report_and_rewrites_it_from_its_csvs(tmp_path):
    result = study.run_study(study.SMOKE, log=lambda line: None)
    path = report.write(result, tmp_path, tmp_path)
    text = path.read_text()
    for name in ("accuracy_multimodal.csv", "accuracy_multimodal.png", "accuracy_multimodal_curves.png",
                 *report.FILES.values(), "accuracy_multimodal_verdicts.csv"):
        assert (tmp_path / name).exists(), name
    runs = result.tables["runs"]
    assert set(runs[runs.method != "exact"].seed) == set(study.SMOKE.seeds)
    assert set(runs.method) == {*study.SMOKE.methods, "exact"} and set(runs.budget) == set(study.SMOKE.budgets)
    found = pd.read_csv(tmp_path / "accuracy_multimodal_verdicts.csv")
    assert len(found) == 8 * 2 * 2 * 3 and "**Edge check: passed**" in text  # pairs x targets x budgets x metrics
    # the ICSGLD paper's samplers: their own family of verdicts, section and figure
    marked = r"( \((never crosses|h = 0)\))?"   # a side that does not move is marked so
    assert re.search(rf"\| barrier16 \| 1,600 \| ICSGLD x4{marked} - SGLD x4{marked} \|", text)
    assert re.search(rf"\| barrier4 \| 400 \| reSGLD{marked} - SGLD{marked} \|", text)
    assert "## The ICSGLD paper's samplers" in text and (tmp_path / "accuracy_multimodal_icsgld.png").exists()
    assert re.search(rf"\| barrier16 \| 1,600 \| cSGLD{marked} - SGLD{marked} \|", text) and "one Holm family" in text
    # the choice by the one-standard-error rule, and the verdicts under the settings of rank 2 beside it
    assert "one-standard-error rule" in text and "## How the verdicts move across the best settings" in text
    moved = pd.read_csv(tmp_path / "accuracy_multimodal_sensitivity.csv")
    assert len(moved) == len(found) and {"verdict_1", "verdict_2"} <= set(moved.columns)
    assert set(runs["rank"]) == {1, 2}
    summary = pd.read_csv(tmp_path / "accuracy_multimodal.csv")
    cyclical = summary[summary.method == "cSGLD"]
    assert (cyclical.cycles == cyclical.budget // cyclical.cycle).all()
    assert np.allclose(cyclical.ceiling, [ceiling.ceiling([0.75, 0.25], m) for m in cyclical.cycles])
    again = report.write(report.load(tmp_path, study.SMOKE), tmp_path / "again", tmp_path)
    assert again.read_text() == text


# --- tuning robust to noise: the one-standard-error rule and the verdicts' sensitivity ---------------------------------


def _noisy(scores: dict[float, tuple[float, float]], crossings: dict[float, float]) -> pd.DataFrame:
    """SGLD's tuning table: per step h, (mean core TV, its s.e.) and mean crossings."""
    rows = [{"target": "t", "method": "SGLD", "budget": 400, "step": h, "explore": 0.0, "cycle": 1, "core_tv": mean,
             "core_tv_se": se, "mode_error": mean, "crossings": crossings[h], "cycles": 1, "diverged": 0, "seeds": 5}
            for h, (mean, se) in scores.items()]
    return pd.DataFrame(rows)


def test_the_one_standard_error_rule_takes_the_setting_that_crosses_most_within_a_standard_error_of_the_best():
    crossings = {0.25: 0.0, 0.5: 2.0, 1.0: 26.0, 2.0: 40.0}
    # 0.5 is best (0.08 +- 0.03); 1.0 lies within one s.e. (0.10 <= 0.11) and crosses most; 2.0 crosses more but is
    # outside (0.2)
    table = _noisy({0.25: (0.09, 0.01), 0.5: (0.08, 0.03), 1.0: (0.10, 0.02), 2.0: (0.20, 0.01)}, crossings)
    chosen = tuning.choose(table, _GRIDS)
    assert (chosen.step.item(), chosen.best_step.item()) == (1.0, 0.5)
    assert chosen.window.item() == pytest.approx(0.03) and chosen.missing.item() == 0 and not chosen.edge.item()
    # the ranks: the choice, then the others by mean core TV
    assert tuning.ranked(table, 3).step.tolist() == [1.0, 0.5, 0.25]
    assert tuning.ranked(table, 3)["rank"].tolist() == [1, 2, 3]
    # a smaller s.e. leaves 1.0 outside the window: the best is chosen
    narrow = _noisy({0.25: (0.09, 0.01), 0.5: (0.08, 0.005), 1.0: (0.10, 0.02), 2.0: (0.20, 0.01)}, crossings)
    assert tuning.choose(narrow, _GRIDS).step.item() == 0.5
    # where nothing in the window crosses, the lowest core TV is chosen; the old rule (one_se=False) is the best
    still = _noisy({0.25: (0.09, 0.01), 0.5: (0.08, 0.03), 1.0: (0.10, 0.02), 2.0: (0.20, 0.01)},
                   dict.fromkeys(crossings, 0.0))
    assert tuning.choose(still, _GRIDS).step.item() == 0.5
    old = tuning.choose(table, _GRIDS, one_se=False)
    assert old.step.item() == 0.5 and old.window.isna().all()
    # the search brackets the best, not the choice: 0.5's neighbours all ran, 1.0's upper one (2.0) too
    assert tuning.wanted(chosen, table, _GRIDS) == {}


def test_the_sensitivity_table_gives_each_comparisons_verdict_under_every_rank():
    rng = np.random.default_rng(5)
    base = 0.08 + 0.01 * rng.standard_normal(50)
    frames = []
    for rank, shift in ((1, -0.05), (2, -0.05), (3, +0.05)):      # helps at ranks 1 and 2, hurts at rank 3
        values = {"SGLD": base, "cSGLD": base + shift + 0.01 * rng.standard_normal(50)}
        frames.append(_runs(values).assign(rank=rank))
    runs = pd.concat(frames, ignore_index=True)
    moved = verdicts.sensitivity(runs)
    assert len(moved) == 1 and not moved.stable.item()
    assert [moved[f"verdict_{r}"].item() for r in (1, 2, 3)] == ["helps", "helps", "hurts"]
    assert moved.difference_3.item() > 0 > moved.difference_1.item()
    # rank 1 alone is what the study's verdicts judge
    assert verdicts.verdicts(verdicts.at_rank(runs, 1)).verdict.item() == "helps"
    text = "\n".join(report._sensitivity_lines(moved))
    assert "**0 of 1 comparisons keep their verdict under all 3 ranks**, and 0 of the 1 helps and hurts" in text
    assert "| t | 400 | mode-weight error | cSGLD - SGLD | helps (" in text and "hurts (+0.05" in text
    # runs without ranks (a study before the rule) are all rank 1, and there is no sensitivity section
    assert verdicts.at_rank(runs.drop(columns="rank"), 2).empty
    assert report._sensitivity_lines(verdicts.sensitivity(runs.drop(columns="rank"))) == []


# --- the network's shared burn-in ----------------------------------------------------------------------------------


def test_every_method_of_a_seed_starts_where_its_shared_burn_in_ended():
    prepared = study.prepare_network()
    protocol = study.replace(study.SMOKE, network_burnin=30)
    starts = study.starts_of({"network": prepared}, (1000, 1001), protocol)
    ends, table = study.burn_in(prepared, (1001,), 30, protocol.burnin_step)
    # a seed's end points are its own: the same whichever other seeds burn in with it, and not the box starts
    assert torch.equal(starts[("network", 1001)], ends[1001]) and len(table) == 4 and table.seed.eq(1001).all()
    box = study.starts_of({"network": prepared}, (1001,))
    assert not torch.allclose(box[("network", 1001)], ends[1001])
    # every method's rows start there: a negligible step keeps each row at its start, so its draws are the start
    blocks = [Block("network", BY_NAME[name], setting, (1000, 1001), 40) for name, setting in
              (("SGLD", Setting(1e-12)), ("cSGLD", Setting(1e-12, 0.25, 20)), ("SGHMC", Setting(1e-12)),
               ("cSGLD x4", Setting(1e-12, 0.25, 10)))]
    outcome = chains.run(blocks, study._landscape({"network": prepared}), starts, {"network": prepared.scale}, (40,),
                         seed=1)
    for b, block in enumerate(blocks):
        draws = outcome.draws[(b, 40 // block.method.chains * block.method.chains)]
        for s, seed in enumerate(block.seeds):
            for c in range(block.method.chains):
                expected = starts[("network", seed)][c].float().numpy()
                assert np.allclose(draws[s, c], expected, atol=1e-5), (block.method.name, seed, c)


def test_a_best_step_at_the_grids_low_end_counts_as_bracketed_only_on_a_plateau():
    crossings = dict.fromkeys((0.25, 0.5, 1.0, 2.0), 0.0)
    # the network from its burn-in: the score falls slowly towards h -> 0 (a chain that barely moves keeps its start)
    flat = _noisy({0.25: (0.36, 0.04), 0.5: (0.38, 0.04), 1.0: (0.39, 0.04), 2.0: (0.45, 0.04)}, crossings)
    chosen = tuning.choose(flat, _GRIDS)
    assert chosen.step.item() == 0.25 and chosen.plateau.item() and not chosen.edge.item()
    tuning.check_edges(chosen)
    # a clear slope at the low end (the next step more than one s.e. worse): not a plateau, and the step below the
    # grid, the limit h = 0 (the chains' starts), is a neighbour to run before the choice counts as bracketed
    steep = _noisy({0.25: (0.20, 0.01), 0.5: (0.38, 0.04), 1.0: (0.39, 0.04), 2.0: (0.45, 0.04)}, crossings)
    chosen = tuning.choose(steep, _GRIDS)
    assert not chosen.plateau.item() and not chosen.edge.item() and chosen.missing.item() == 1
    with pytest.raises(tuning.GridEdge, match="1 neighbour"):
        tuning.check_edges(chosen)
    assert set(tuning.wanted(chosen, steep, _GRIDS)) == {("t", "SGLD", Setting(tuning.LIMIT))}
    # the rule before the one-standard-error rule knew no plateau: it too runs the limit
    assert tuning.choose(flat, _GRIDS, one_se=False).missing.item() == 1
    # the grid's top end is never a plateau: nothing is known of still larger steps
    top = _noisy({0.25: (0.45, 0.04), 0.5: (0.39, 0.04), 1.0: (0.38, 0.04), 2.0: (0.36, 0.04)}, crossings)
    assert tuning.choose(top, _GRIDS).edge.item()


def test_the_limit_h_0_brackets_the_low_end_and_a_best_that_does_not_move_is_reported_not_refused():
    crossings = dict.fromkeys((0.0, 0.25, 0.5, 1.0, 2.0), 0.0)
    # h = 0 ran and scores worse than the grid's smallest step: that step is bracketed, from below by the limit
    worse = _noisy({0.0: (0.30, 0.01), 0.25: (0.20, 0.01), 0.5: (0.38, 0.04), 1.0: (0.39, 0.04), 2.0: (0.45, 0.04)},
                   crossings)
    chosen = tuning.choose(worse, _GRIDS)
    assert chosen.step.item() == 0.25 and chosen.missing.item() == 0 and not chosen.still.item()
    tuning.check_edges(chosen)
    # the chains' starts score best: not moving is the method's best setting; h = 0 is the domain's bound (h >= 0),
    # so the choice is bracketed and reported as such (bounds "step 0", still), not refused
    best = _noisy({0.0: (0.10, 0.01), 0.25: (0.20, 0.01), 0.5: (0.38, 0.04), 1.0: (0.39, 0.04), 2.0: (0.45, 0.04)},
                  crossings)
    chosen = tuning.choose(best, _GRIDS)
    assert chosen.step.item() == 0.0 and chosen.still.item() and chosen.bounds.item() == "step 0"
    tuning.check_edges(chosen)
    assert tuning.axes(_GRIDS, BY_NAME["SGLD"], Setting(0.0), 400)["step"] == (tuning.BOUND, 0.25)
    assert tuning.power(0.0) == "0" and tuning.power(0.25) == "1/4"

