"""The network reference's importance sampler on a case with a known answer: a 7-D two-mode Gaussian mixture."""

import numpy as np
import torch
from scipy.stats import chi2, kstest, multivariate_t

from studies.accuracy.multimodal.importance import StudentMixture, adapt, estimate, proposal, sample_weighted
from studies.accuracy.multimodal.landscapes import CORE_CHI2_7, NetworkRows

WEIGHTS = np.array([0.7, 0.3])
MEANS = np.zeros((2, 7))
MEANS[:, 0] = [-6.0, 6.0]


class Mixture:
    """0.7 N(-6 e1, I) + 0.3 N(6 e1, I): its regions (nearest mean) hold 0.7 and 0.3 (to 1e-9), each core the
    99 % ellipsoid of its component, and the rest 1 %."""

    dim = 7

    def energy(self, theta):
        square = ((theta[:, None, :] - torch.from_numpy(MEANS)) ** 2).sum(-1)
        return -torch.logsumexp(torch.from_numpy(np.log(WEIGHTS)) - 0.5 * square, -1)


def _rows():
    return NetworkRows(None, torch.from_numpy(MEANS), torch.eye(7, dtype=torch.float64).expand(2, 7, 7), 0, torch.float64)


def test_importance_sampling_recovers_the_mixtures_weights_and_core_shares():
    inside = chi2.cdf(CORE_CHI2_7, 7)
    exact = np.r_[WEIGHTS, WEIGHTS * inside, 1 - inside]
    # a deliberately poor start: wrong weights, covariances 0.5 I; the defensive component covers the rest
    q = proposal(MEANS, 0.5 * np.eye(7)[None].repeat(2, 0), np.log([0.5, 0.5]), np.full(7, 8.0), inflate=1.5, df=5)
    log_w, marks = sample_weighted(Mixture(), q, _rows(), 100_000, torch.Generator().manual_seed(0))
    found = estimate(log_w, marks, 2)
    values = np.r_[found["weights"], found["core_exact"]]
    errors = np.r_[found["weights_se"], found["core_exact_se"]]
    assert np.all(np.abs(values - exact) < 4 * errors + 1e-4), (values, exact, errors)
    assert errors.max() < 0.005 and found["khat"] < 0.7 and found["ess"] > 10_000
    assert abs(found["log_evidence"] - 0.5 * 7 * np.log(2 * np.pi)) < 0.02   # U is -log p up to (2 pi)^(7/2)


def test_a_missed_mode_passes_khat_unseen_and_annealed_adaptation_finds_it():
    """k-hat sees heavy tails, not a mode that no draw reaches: why the reference needs a second proposal."""
    rows, target = _rows(), Mixture()
    blind = proposal(MEANS[:1], np.eye(7)[None], np.zeros(1), np.full(7, 8.0), inflate=1.0, df=5, defensive=1e-9)
    log_w, marks = sample_weighted(target, blind, rows, 50_000, torch.Generator().manual_seed(1))
    missed = estimate(log_w, marks, 2)
    assert missed["khat"] < 0.7 and missed["weights"][1] < 0.05
    repaired = adapt(target, blind, (0.1, 0.3, 1.0, 1.0), 20_000, 4, 1.3, 0.1, seed=2)
    log_w, marks = sample_weighted(target, repaired, rows, 50_000, torch.Generator().manual_seed(3))
    found = estimate(log_w, marks, 2)
    assert found["khat"] < 0.7 and abs(found["weights"][1] - 0.3) < 4 * found["weights_se"][1] + 1e-3


def test_the_student_mixtures_density_is_scipys_and_its_draws_follow_it():
    rng = np.random.default_rng(0)
    shape = np.cov(rng.normal(size=(7, 20)))
    one = StudentMixture(torch.ones(1, 7, dtype=torch.float64), torch.linalg.cholesky(torch.from_numpy(shape))[None],
                         torch.ones(1, dtype=torch.float64), 3)
    x = one.sample(20_000, torch.Generator().manual_seed(0))
    expected = multivariate_t(np.ones(7), shape, df=3).logpdf(x[:5].numpy())
    assert np.allclose(one.log_density(x[:5]).numpy(), expected)
    d = x.numpy() - 1
    f_ratio = np.einsum("ni,ij,nj->n", d, np.linalg.inv(shape), d) / 7                  # ~ F(7, df)
    assert kstest(f_ratio, "f", args=(7, 3)).pvalue > 0.01
