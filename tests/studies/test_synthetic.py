"""Synthetic studies: mode coverage, the tempering schedule, Metropolis, vectorised chains, the studies end to end."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from csg.schedules import Cyclical, Decreasing
from studies.synthetic.chains import ChainGroup, run_chains
from studies.synthetic.coverage import component_weights, mode_counts, mode_coverage
from studies.synthetic.cyclical_mcmc import cyclical_rwm, rwm_step, tempering_beta
from studies.targets import GaussianMixture, create_target, grid_means


def test_mode_coverage_counts_modes_with_more_than_the_threshold():
    centres = grid_means()
    # 101 samples at (0, 0) within 0.25, exactly 100 at (2, 2), 150 just outside the radius of (-4, -4),
    # 300 between modes
    samples = torch.cat([
        torch.tensor([[0.1, -0.1]]).expand(101, 2),
        torch.tensor([[2.0, 2.2]]).expand(100, 2),
        torch.tensor([[-4.0, -3.74]]).expand(150, 2),
        torch.tensor([[1.0, 1.0]]).expand(300, 2),
    ]).double()
    counts = mode_counts(samples, centres, 0.25)
    assert counts.sum().item() == 201
    assert mode_coverage(samples, centres, radius=0.25, min_samples=100) == 1
    assert mode_coverage(samples, centres, radius=0.25, min_samples=99) == 2
    assert mode_coverage(samples, centres, radius=0.3, min_samples=100) == 2


def test_component_weights():
    assert component_weights(torch.tensor([0, 0, 1, 3]), 4).tolist() == [0.5, 0.25, 0.0, 0.25]


def test_tempering_schedule_is_equation_5_with_a_floor():
    assert tempering_beta(0.0) == 1.0
    assert tempering_beta(0.25) == pytest.approx(0.5)
    assert tempering_beta(0.5) == 1e-3  # (1 + cos pi) / 2 = 0, floored
    assert tempering_beta(0.75) == pytest.approx(0.5)
    assert tempering_beta(0.1, r=2) == pytest.approx((1 + math.cos(2 * math.pi * 0.01)) / 2)
    t = torch.tensor([0.0, 0.5, 1.0])
    assert torch.allclose(tempering_beta(t), torch.tensor([1.0, 1e-3, 1.0]))


def test_random_walk_metropolis_recovers_a_gaussian():
    target = GaussianMixture(torch.tensor([1.5]), torch.tensor(0.7**2))
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(4000, 1, dtype=torch.float64)
    energy = target.energy(x)
    accepted = []
    for _ in range(200):
        x, energy, accept = rwm_step(x, energy, target, beta=1.0, proposal_std=1.0, generator=g)
        accepted.append(accept.double().mean().item())
    assert x.mean().item() == pytest.approx(1.5, abs=4 * 0.7 / math.sqrt(4000))
    assert x.var().item() == pytest.approx(0.49, rel=4 * math.sqrt(2 / 4000))
    assert 0.3 < sum(accepted) / len(accepted) < 0.9


def test_tempered_metropolis_targets_the_powered_density():
    # exp(-beta E) for a N(0, 1) energy with beta = 0.25 is N(0, 4)
    target = GaussianMixture(torch.tensor([0.0]), torch.tensor(1.0))
    g = torch.Generator().manual_seed(1)
    x = torch.zeros(4000, 1, dtype=torch.float64)
    energy = target.energy(x)
    for _ in range(200):
        x, energy, _ = rwm_step(x, energy, target, beta=0.25, proposal_std=2.0, generator=g)
    assert x.var().item() == pytest.approx(4.0, rel=0.1)


def test_cyclical_rwm_keeps_one_sample_per_cycle_and_finds_both_equal_modes():
    target = create_target("mixture1d", c=1.0)
    g = torch.Generator().manual_seed(2)
    kept = cyclical_rwm(target, cycle_length=300, cycles=3, chains=500, proposal_variance=lambda b: 0.25 / b,
                        start=torch.randn(500, 1, generator=g, dtype=torch.float64), generator=g)
    assert kept.shape == (3, 500, 1)
    share = (target.component(kept) == 0).double().mean().item()
    assert share == pytest.approx(0.5, abs=0.06)


def test_vectorised_chains_sample_a_gaussian_with_the_shared_samplers():
    target = GaussianMixture(torch.tensor([[1.0, -1.0]]), torch.tensor(0.5))
    groups = [
        ChainGroup("sgld", Decreasing(0.01, 1, 0.0), chains=200),  # constant 0.01
        ChainGroup("cyc", Cyclical(0.05, 3000, 3, 0.5), chains=200),
    ]
    out = run_chains(target, groups, steps=3000, repeats=2, start_low=-3, start_high=3,
                     generator=torch.Generator().manual_seed(3))
    sgld = out["sgld"]
    assert sgld.samples.shape == (3000, 2, 200, 2)
    last = sgld.samples[-1].reshape(-1, 2)
    assert torch.allclose(last.mean(0), torch.tensor([1.0, -1.0], dtype=torch.float64), atol=0.1)
    assert torch.allclose(last.var(0), torch.full((2,), 0.5, dtype=torch.float64), rtol=0.2)
    cyc = out["cyc"]
    # sampling stage: the second half of each 1000-step cycle
    assert cyc.kept_steps.tolist() == [k for k in range(3000) if k % 1000 >= 500]
    assert cyc.pooled(1).shape == (1500 * 200, 2)


def test_exploration_without_noise_descends_deterministically():
    target = GaussianMixture(torch.tensor([[0.0, 0.0]]), torch.tensor(1.0))  # grad U(x) = x
    start = torch.full((3, 2), 2.0, dtype=torch.float64)
    schedule = Cyclical(0.1, 100, 1, 0.99)  # 99 noise-free exploration steps, then one noisy (kept) step
    group = ChainGroup("c", schedule, chains=3)
    runs = [run_chains(target, [group], steps=100, repeats=1, start=start, generator=torch.Generator().manual_seed(s))["c"]
            for s in (4, 5)]
    assert runs[0].kept_steps.tolist() == [99]
    expected = 2.0
    for k in range(100):
        expected -= schedule.lr(k) * expected
    noise_sd = math.sqrt(2 * schedule.lr(99))
    for result in runs:
        assert (result.samples - expected).abs().max() < 5 * noise_sd
    assert not torch.equal(runs[0].samples, runs[1].samples)  # the last step's noise


STUDY_OVERRIDES = {
    "table4": ["steps=3000", "repeats=2"],
    "wang_mixture1d": ["cycle_length=200", "cycles=20", "chains=10", "repeats=2"],
    "wang_mog25": ["rwm.cycle_length=200", "rwm.cycles=40", "rwm.chains=40", "csgld.cycles=2",
                   "csgld.cycle_length=100", "csgld.chains=50"],
    "icsgld_variance": ["steps=1000", "repeats=3"],
    "icsgld_mnist": ["iterations=3", "max_images=64"],
}


@pytest.mark.parametrize("study", STUDY_OVERRIDES)
def test_studies_write_their_tables_and_figures(tmp_path, study):
    from hydra import compose, initialize_config_dir

    from studies.synthetic import run_study
    from tests.conftest import ROOT

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[f"synthetic={study}", *[f"synthetic.{o}" for o in STUDY_OVERRIDES[study]]])
    result = run_study(cfg, run_dir=tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    expected = {
        "table4": {"table4.csv", "table4.md", "figure2_paper.png", "figure5_official_code.png"},
        "wang_mixture1d": {"mixture1d.csv", "mixture1d.md", "figure1.png"},
        "wang_mog25": {"mog25_weights.csv", "mog25_summary.csv", "mog25_component25.csv", "mog25.md", "figure2.png", "figure2_csgld.png"},
        "icsgld_variance": {"variance.csv", "variance_summary.csv", "variance.md", "variance.png"},
        "icsgld_mnist": {"mnist_losses.csv", "mnist.md", "mnist.png"},
    }[study]
    assert expected <= files and "metrics.json" in files
    if study == "table4":
        import pandas as pd

        table = pd.read_csv(tmp_path / "table4.csv")
        assert set(table.method) == {"SGLD", "cSGLD", "Parallel SGLD", "Parallel cSGLD"}
        assert set(table.preset) == {"paper", "official_code"}
        assert {"mean", "stderr", "paper_value", "note"} <= set(table.columns)
        assert "smoke" in (tmp_path / "table4.md").read_text()
    if study == "wang_mixture1d":
        import pandas as pd

        table = pd.read_csv(tmp_path / "mixture1d.csv")
        assert list(table.columns[:4]) == ["c", "weight_estimate", "true_weight", "paper_value"]
        assert table.paper_value.tolist() == [0.497, 0.87]
    assert result["seconds"] > 0


def test_table4_claims_at_the_papers_chain_length():
    """50k steps per chain (official settings), 2 repeats: cSGLD covers far more modes than SGLD,
    and 4 parallel cSGLD chains cover at least 24 of 25."""
    from hydra import compose, initialize_config_dir

    from studies.synthetic.mode_coverage import groups_for
    from tests.conftest import ROOT

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["synthetic=table4", "synthetic.repeats=2", "~synthetic.presets.paper"]).synthetic
    target = create_target("mog25", grad_noise=1.0)
    groups = [g for g in groups_for(cfg) if g.name.split("/")[1] in ("SGLD", "cSGLD", "Parallel cSGLD")]
    out = run_chains(target, groups, steps=50_000, repeats=2, generator=torch.Generator().manual_seed(0))
    coverage = {name.split("/")[1]: [mode_coverage(r.pooled(i), target.means) for i in range(2)] for name, r in out.items()}
    assert min(coverage["cSGLD"]) > max(coverage["SGLD"]) + 10
    assert sum(coverage["Parallel cSGLD"]) / 2 >= 24


@pytest.mark.parametrize("c, low, high", [(1.0, 0.47, 0.53), (0.1, 0.82, 0.92)])
def test_cyclical_mcmc_weight_of_the_1d_mixture(c, low, high):
    """Wang et al.'s L = 5000; 2000 cycles as 2000 one-cycle chains: right for c = 1, biased (about 0.87) for c = 0.1."""
    target = create_target("mixture1d", c=c)
    g = torch.Generator().manual_seed(7)
    kept = cyclical_rwm(target, cycle_length=5000, cycles=1, chains=2000, proposal_variance=lambda b: 0.25 / b,
                        start=torch.randn(2000, 1, generator=g, dtype=torch.float64), generator=g)
    weight = (target.component(kept) == 0).double().mean().item()
    assert low < weight < high


def test_the_variance_studys_loop_takes_the_contour_samplers_rules():
    """studies/synthetic/icsgld_variance.py re-implements the contour rules in NumPy for speed: its multipliers
    (backward, and forward unclipped as the authors' script) and its theta update are EnergyPartition's."""
    import numpy as np

    from csg.samplers.contour import EnergyPartition
    from studies.synthetic import icsgld_variance as study

    rng = np.random.default_rng(0)
    groups, chains, m = 3, 4, study.PARTITIONS
    theta = rng.dirichlet(np.ones(m), size=groups)
    j = rng.integers(0, m - 1, size=(groups, chains))
    partition = EnergyPartition(study.LOW, study.WIDTH, m, zeta=study.ZETA, groups=groups, sa_step=lambda k: 0.01)
    partition.theta.copy_(torch.from_numpy(theta))
    ours = partition.multiplier(torch.from_numpy(j).reshape(-1), study.TEMPERATURE).numpy().reshape(groups, chains)
    np.testing.assert_allclose(study.multiplier(theta, j, "backward"), ours, rtol=1e-12)
    unclipped = EnergyPartition(study.LOW, study.WIDTH, m, zeta=study.ZETA, groups=groups, difference="forward",
                                multiplier_clip=(-math.inf, math.inf))
    unclipped.theta.copy_(torch.from_numpy(theta))
    forward = unclipped.multiplier(torch.from_numpy(j).reshape(-1), study.TEMPERATURE).numpy().reshape(groups, chains)
    np.testing.assert_allclose(study.multiplier(theta, j, "forward"), forward, rtol=1e-12)  # the script: unclipped
    partition.update(torch.from_numpy(j).reshape(-1))
    study.update_theta(theta, j, 0.01)
    np.testing.assert_allclose(theta, partition.theta.numpy(), rtol=1e-12)
    assert np.allclose(theta.sum(1), 1.0)


def test_the_exact_density_of_states_of_the_d5_mixture():
    import numpy as np

    from studies.synthetic import icsgld_variance as study

    masses = study.exact_density_of_states()
    assert masses.sum() == pytest.approx(1.0, abs=1e-6)
    lowest = float(study.energy(np.array([4.0]))[0])  # the deeper mode: -log(0.6 / sqrt(2 pi)) = 1.43
    assert lowest == pytest.approx(-math.log(0.6 / math.sqrt(2 * math.pi)), abs=1e-6)
    assert masses[0] == 0 and study.partition_index(np.array([lowest]))[0] == 1
    # partition 1 holds the x with U(x) < 2.15 around both modes: 0.6 P(|z| < a) + 0.4 P(|z| < b)
    a = math.sqrt(2 * (2.15 - lowest))
    b = math.sqrt(2 * (2.15 + math.log(0.4 / math.sqrt(2 * math.pi))))
    expected = 0.6 * math.erf(a / math.sqrt(2)) + 0.4 * math.erf(b / math.sqrt(2))
    assert masses[1] == pytest.approx(expected, abs=1e-3)  # the other mode's tail changes it by less
    assert np.allclose(study.grad(np.array([-6.0, 4.0, 0.3])),
                       (study.energy(np.array([-6.0, 4.0, 0.3]) + 1e-6) - study.energy(np.array([-6.0, 4.0, 0.3]) - 1e-6)) / 2e-6,
                       atol=1e-5)


@pytest.mark.parametrize("study, override, key", [
    ("icsgld_sim", "synthetic.pilot_steps=5000", "synthetic.pilot_steps"),
    ("icsgld_sim", "synthetic.steps=1000", "synthetic.steps"),
    ("icsgld_variance", "synthetic.difference=sideways", "synthetic.difference"),
    ("icsgld_variance", "synthetic.repeats=1", "synthetic.repeats"),
    ("icsgld_mnist", "synthetic.classes=11", "synthetic.classes"),
    ("icsgld_mnist", "synthetic.zeta=0", "synthetic.zeta"),
    ("icsgld_mnist", "synthetic.iterations=0", "synthetic.iterations"),
    ("icsgld_mnist", "synthetic.batch_size=0", "synthetic.batch_size"),
    ("icsgld_mnist", "synthetic.methods=[SGD,Adam]", "synthetic.methods"),
])
def test_bad_icsgld_study_input_names_the_key(study, override, key):
    from hydra import compose, initialize_config_dir

    from csg.errors import ConfigError
    from studies.synthetic import validate
    from tests.conftest import ROOT

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[f"synthetic={study}", override])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert error.value.key == key


def test_backward_multiplier_collapses_theta_when_the_lowest_partition_is_empty():
    """The D.5 target has no energy below 1.43, so partition 0 (0.15 .. 1.15) is never visited. The paper's
    backward difference log theta(J) - log theta(J - 1) then divides by a vanishing theta(0) at J = 1 and theta
    collapses onto partition 1; the authors' script's forward difference approaches the density of states."""

    from studies.synthetic import icsgld_variance as study

    exact = study.exact_density_of_states()[1:11]
    exact = exact / exact.sum()
    forward = study.density_of_states(study.run_method(10, 10_000, 2, seed=0, difference="forward"))
    backward = study.density_of_states(study.run_method(10, 10_000, 2, seed=0, difference="backward"))
    assert (backward[:, 0] > 0.999).all()  # collapsed: exact 0.69
    assert (forward[:, 0] < 0.9).all() and (forward[:, 1] > 0.5 * exact[1]).all()  # on its way (10^6 steps: 0.66)


def test_the_mnist_studys_step_is_the_authors_sgld_on_the_summed_energy():
    """Section 5.1: our SGLD (lr and weight decay on the mean loss, noise sqrt(2 lr T / N)) with the study's
    settings takes the authors' step x - eta (grad U + lambda x) + sqrt(2 eta T) xi, U = S x mean loss."""
    from csg.samplers import SGLD
    from studies.synthetic.icsgld_mnist import sampler_settings

    eta, precision, scale, temperature = 2e-6, 12.5, 30_000.0, 0.1
    torch.manual_seed(0)
    x, target = torch.randn(4, 3), torch.randn(4)
    weight = torch.randn(3, requires_grad=True)
    start = weight.detach().clone()
    generator = torch.Generator().manual_seed(7)
    noise = torch.randn(3, generator=torch.Generator().manual_seed(7))  # the draw the sampler will make
    sampler = SGLD([weight], temperature=temperature, generator=generator, **sampler_settings(eta, precision, scale))
    ((x @ weight - target) ** 2).mean().backward()
    grad_energy = scale * weight.grad.clone()
    sampler.step()
    theirs = start - eta * (grad_energy + precision * start) + math.sqrt(2 * eta * temperature) * noise
    torch.testing.assert_close(weight.detach(), theirs)


def test_the_mnist_study_runs_its_three_methods_from_one_network(tmp_path):
    """The three methods start from the same network (same first loss); SGD (T = 0) and SGLD then part; the
    contour run records the partition of each energy and a multiplier of 1 on partitions it never revisited."""
    import pandas as pd

    from studies.synthetic import icsgld_mnist

    study = OmegaConf.create({"iterations": 3, "classes": 5, "max_images": 64, "filters": 4, "hidden": 8,
                              "eta": 2e-6, "prior_precision": 12.5, "temperature": 0.1, "zeta": 3e4,
                              "partitions": 100_000, "width": 10.0, "sa_step": 0.01})
    result = icsgld_mnist.run(study, tmp_path, seed=3)
    table = pd.read_csv(tmp_path / "mnist_losses.csv")
    first = table[table.iteration == 0].set_index("method").loss
    assert first.nunique() == 1 and set(first.index) == {"SGD", "SGLD", "ICSGLD"}
    last = table[table.iteration == 2].set_index("method").loss
    assert last["SGD"] != last["SGLD"]
    contour = table[table.method == "ICSGLD"]
    assert (contour.partition == (contour.energy // 10).astype(int)).all()
    assert contour.partition.is_unique and (contour.multiplier == 1.0).all()
    assert set(result["test_acc_pct"]) == {"SGD", "SGLD", "ICSGLD"}


def test_the_papers_mnist_cnn_has_its_layer_sizes():
    """ICSGLD Appendix D.1: conv 32 and 64 maps (5x5, padded as the authors' script), FC 50, 5 outputs."""
    from csg.models import create_model

    model = create_model("small_cnn", num_classes=5, input_shape=(1, 28, 28))
    sizes = [tuple(p.shape) for p in model.parameters()]
    assert sizes == [(32, 1, 5, 5), (32,), (64, 32, 5, 5), (64,), (50, 64 * 7 * 7), (50,), (5, 50), (5,)]
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 5)
    with pytest.raises(ValueError, match="side divides by 4"):
        create_model("small_cnn", num_classes=5, input_shape=(1, 30, 30))


def test_the_mnist_studys_mini_batches_cover_every_image_each_epoch():
    from studies.synthetic.icsgld_mnist import batches

    full = batches(10, None, 3, seed=0)
    assert full == [slice(None)] * 3
    minis = batches(10, 4, 5, seed=0)  # 2 batches an epoch (the last 2 images of each permutation dropped)
    assert [len(b) for b in minis] == [4] * 5
    for first, second in ((minis[0], minis[1]), (minis[2], minis[3])):
        assert len(set(first.tolist()) | set(second.tolist())) == 8
    assert not torch.equal(minis[0], minis[2])  # a fresh permutation each epoch
    assert all(torch.equal(a, b) for a, b in zip(minis, batches(10, 4, 5, seed=0)))  # seeded


def _simulation_folder(path, repeats):
    """The CSVs of a previous `make icsgld-sim` in ``path``, from per-repeat metrics (a constructed run)."""
    import pandas as pd

    final = repeats.groupby("method", sort=False).agg(
        kl=("kl", "mean"), kl_stderr=("kl", "sem"), hist_kl=("hist_kl", "mean"), hist_kl_stderr=("hist_kl", "sem"),
        mode_tv=("mode_tv", "mean"), mode_tv_stderr=("mode_tv", "sem")).reset_index()
    final = final.assign(modes_visited=25.0, samples=19745, gradient_evaluations=400_000, repeats=20, seed=3,
                         seconds=12.0, pilot_steps=100_000)
    path.mkdir()
    final.to_csv(path / "simulation.csv", index=False)
    repeats.to_csv(path / "simulation_repeats.csv", index=False)
    pd.DataFrame({"method": [], "gradient_evaluations": [], "kl": []}).to_csv(path / "simulation_curve.csv", index=False)
    pd.DataFrame({"method": [], "mass": []}).to_csv(path / "simulation_modes.csv", index=False)
    return final


def test_the_simulation_report_rebuilds_from_its_csvs_with_unpaired_verdicts(tmp_path):
    """ICSGLD x P5 clearly below one method 'helps', against a noisy one 'inconclusive', level within 10 %
    'equivalent'; the ranking is said through those verdicts, the means' order as no verdict."""
    import numpy as np
    import pandas as pd

    from csg.errors import ConfigError
    from studies.synthetic.icsgld_simulation_report import rewrite

    rng = np.random.default_rng(0)
    rows = []
    for method, kl, spread in (("SGLD x P5", 0.30, 0.01), ("reSGLD x P5", 0.12, 0.2), ("ICSGLD x P5", 0.10, 0.01)):
        for r in range(20):
            rows.append({"method": method, "repeat": r, "kl": kl + spread * rng.standard_normal(),
                         "hist_kl": 0.2 + 0.001 * rng.standard_normal(), "mode_tv": 0.1 + 0.001 * rng.standard_normal(),
                         "weight_ess": 1.0 if "ICSGLD" not in method else 0.6 + 0.001 * r,
                         "theta_tv": 0.1 + 0.01 * r if "ICSGLD" in method else float("nan")})
    _simulation_folder(tmp_path / "run", pd.DataFrame(rows))
    text = rewrite(tmp_path / "run").read_text()
    assert "seed 3; 12 s on CPU" in text and "100,000-iteration SGLD pilot" in text
    rows = {tuple(line.split(" | ")[:2]): line for line in text.splitlines() if line.startswith("| ") and " [" in line}
    assert rows[("| SGLD x P5", "final KL (k-NN)")].endswith("| helps |")
    assert rows[("| reSGLD x P5", "final KL (k-NN)")].endswith("| inconclusive |")
    assert rows[("| SGLD x P5", "mode TV")].endswith("| equivalent |")
    assert "ICSGLD x P5's final KL against each other method's (verdicts below) (ICSGLD x P5 and CSGLD x T5 at " \
           "500,000 gradient evaluations per repeat, the others at 400,000: not an equal budget): below SGLD x P5; " \
           "not resolved against reSGLD x P5." in text
    # the longer pilot's gradients are counted beside each method, and the run says it is no headline
    assert "**Not an equal budget, not a headline**" in text
    assert "| 500,000 (400,000 + 100,000 pilot) |" in text and text.count("| 400,000 |") == 2
    assert "Family: 6 comparisons, one Holm family" in text and "Strassburger" in text and "Ranked by" not in text
    # the notebooks' pilot: the same budget words, no warning, the pilot's 20,000 still counted in the column
    pd.read_csv(tmp_path / "run" / "simulation.csv").assign(pilot_steps=20_000).to_csv(
        tmp_path / "run" / "simulation.csv", index=False)
    text = rewrite(tmp_path / "run").read_text()
    assert "Not an equal budget" not in text and "| 420,000 (400,000 + 20,000 pilot) |" in text
    assert "(verdicts below): below SGLD x P5" in text
    # a simulation.csv without the run's record cannot be rebuilt
    pd.read_csv(tmp_path / "run" / "simulation.csv").drop(columns="seconds").to_csv(tmp_path / "run" / "simulation.csv")
    with pytest.raises(ConfigError, match="seconds"):
        rewrite(tmp_path / "run")


def test_the_variance_report_gives_an_f_test_verdict_per_partition(tmp_path):
    """A partition where ICSGLD's spread is far smaller 'helps', one where it is far larger 'hurts', equal
    spreads are 'inconclusive'; a collapsed theta gets no verdicts. Rebuilt from the CSVs, as --report-only."""
    import pandas as pd

    from studies.synthetic import icsgld_variance as study

    def folder(name, means, icsgld_sd, csgld_sd):
        partitions = pd.DataFrame({"partition": [1, 2, 3], "energy_low": [1.15, 2.15, 3.15],
                                   "energy_high": [2.15, 3.15, 4.15], "exact": [0.7, 0.2, 0.1],
                                   "ICSGLD x P10 mean": means, "ICSGLD x P10 sd": icsgld_sd,
                                   "CSGLD x T10 mean": means, "CSGLD x T10 sd": csgld_sd})
        summary = pd.DataFrame({"method": ["ICSGLD x P10", "CSGLD x T10"], "chains": [10, 1],
                                "iterations": [1000, 10000], "gradient_evaluations": [10000, 10000], "repeats": [10, 10],
                                "total_variance": [sum(s**2 for s in icsgld_sd), sum(s**2 for s in csgld_sd)],
                                "mean_abs_error": [0.01, 0.01], "seed": [0, 0], "seconds": [5.0, 5.0],
                                "difference": ["forward", "forward"]})
        (tmp_path / name).mkdir()
        partitions.to_csv(tmp_path / name / "variance.csv", index=False)
        summary.to_csv(tmp_path / name / "variance_summary.csv", index=False)
        return study.rewrite(tmp_path / name).read_text()

    text = folder("forward", [0.69, 0.21, 0.1], [0.001, 0.01, 0.05], [0.01, 0.01, 0.005])
    verdicts = [line.rsplit(" | ", 2)[-1].rstrip(" |") for line in text.splitlines() if line[:4] in ("| 1 ", "| 2 ", "| 3 ")]
    assert verdicts == ["helps", "inconclusive", "hurts"]
    assert "ICSGLD x P10's variance is the smaller in 1 of 3 partitions (1)" in text
    assert "CSGLD x T10's variance is the smaller in 1 of 3 partitions (3)" in text and "smaller in 10 of 10" not in text
    collapsed = folder("backward", [1.0, 1e-45, 1e-46], [0.0, 1e-45, 1e-46], [0.0, 1e-85, 1e-86])
    assert "No verdicts: theta collapsed" in collapsed and "| verdict |" not in collapsed
