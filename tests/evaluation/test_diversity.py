"""The sampling-ensemble checks (members' differences, the ensemble's gain) and the restart's curvature."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from csg.evaluation.curvature import top_eigenvalue
from csg.evaluation.diversity import EnsembleGain, ensemble_gain, pairwise_total_variation


def test_pairwise_total_variation_by_hand():
    probs = torch.tensor([[[1.0, 0.0], [0.5, 0.5]],      # member 0 on two inputs
                          [[0.0, 1.0], [0.5, 0.5]],      # member 1: opposite on input 0, the same on input 1
                          [[1.0, 0.0], [0.4, 0.6]]])     # member 2: as member 0 but 0.1 apart on input 1
    tv = pairwise_total_variation(probs)
    assert tv[0, 1].item() == pytest.approx((1.0 + 0.0) / 2)
    assert tv[0, 2].item() == pytest.approx((0.0 + 0.1) / 2)
    assert tv[1, 2].item() == pytest.approx((1.0 + 0.1) / 2)
    assert torch.equal(tv, tv.T) and torch.all(tv.diagonal() == 0)


def _metrics(ensemble_nll, ensemble_error, member_nlls, member_errors):
    return {"ensemble": {"nll": ensemble_nll, "test_error_pct": ensemble_error},
            "per_sample": [{"nll": n, "test_error_pct": e} for n, e in zip(member_nlls, member_errors)]}


def test_ensemble_gain_passes_a_sampling_ensemble_and_fails_continued_training():
    rng = torch.Generator().manual_seed(0)
    distinct = torch.softmax(torch.randn(3, 50, 4, generator=rng), dim=2)
    gain = ensemble_gain(_metrics(0.18, 4.4, [0.20, 0.21, 0.22], [4.6, 4.8, 5.0]), distinct, ["a", "b", "c"])
    assert gain.nll_ratio == pytest.approx(0.9) and gain.mean_member_error_pct == pytest.approx(4.8)
    assert all(gain.checks().values())
    # three copies of one model (the old default's samples of a cycle): no gain, and two members 0 apart
    copies = distinct[:1].repeat(3, 1, 1)
    copies[2] += 1e-5
    same = ensemble_gain(_metrics(0.1975, 5.1, [0.1954, 0.1960, 0.1970], [5.1, 5.1, 5.1]), copies, ["a", "b", "c"])
    checks = same.checks()
    assert list(checks.values()) == [False, True, False]
    assert same.closest_pair[0] != same.closest_pair[1] and same.min_pairwise_tv < 1e-3


def test_ensemble_gain_refuses_mismatched_members():
    with pytest.raises(ValueError, match="2 members"):
        ensemble_gain(_metrics(0.1, 1.0, [0.1, 0.1, 0.1], [1, 1, 1]), torch.ones(2, 5, 3) / 3, ["a", "b"])


def test_gain_thresholds_are_parameters():
    gain = EnsembleGain(members=2, ensemble_nll=0.96, best_member_nll=1.0, ensemble_error_pct=5.0,
                        mean_member_error_pct=5.0, min_pairwise_tv=0.002, closest_pair=("a", "b"))
    assert list(gain.checks().values()) == [False, True, True]
    assert list(gain.checks(nll_ratio=0.97, min_tv=0.003).values()) == [True, True, False]


def test_top_eigenvalue_matches_the_explicit_hessian():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3))
    x, y = torch.randn(20, 3), torch.randint(0, 3, (20,))
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().flatten() for p in params])

    def loss_of(vector):
        pieces, start = [], 0
        for shape in shapes:
            size = int(torch.tensor(shape).prod())
            pieces.append(vector[start:start + size].view(shape))
            start += size
        hidden = torch.tanh(x @ pieces[0].T + pieces[1])
        return nn.functional.cross_entropy(hidden @ pieces[2].T + pieces[3], y)

    exact = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, flat)).max().item()
    batches = [(x[:8], y[:8]), (x[8:], y[8:])]   # the mean over uneven batches is the mean over all examples
    assert top_eigenvalue(model, batches, iterations=200) == pytest.approx(exact, rel=1e-3)
