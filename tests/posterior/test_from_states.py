"""csg.Posterior of one's own model and state dicts (Posterior.from_states): the weighted model average, a saved
file read back only with the model given, and a one-line refusal for each wrong argument."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import csg
from csg.errors import ConfigError


def _factory():
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 4))


def _states(count=4):
    torch.manual_seed(0)
    return [_factory().state_dict() for _ in range(count)]


def test_the_model_average_is_the_weighted_mean_of_the_members_softmax():
    states, calls = _states(), []

    def factory():
        calls.append(1)
        return _factory()

    posterior = csg.Posterior.from_states(factory, states, input_shape=(2, 3), weights=[1, 1, 2, 4])
    assert calls == [1] and posterior.num_classes == 4 and posterior.weights == [0.125, 0.125, 0.25, 0.5]
    x = torch.randn(5, 2, 3, generator=torch.Generator().manual_seed(1))
    model = _factory()
    expected = torch.zeros(5, 4, dtype=torch.float64)
    for state, weight in zip(states, posterior.weights):
        model.load_state_dict(state)
        expected += weight * torch.softmax(model(x), -1).double()
    assert torch.allclose(posterior.predict(x).double(), expected, atol=1e-6)
    assert posterior.predict_members(x).shape == (4, 5, 4) and posterior.weighting == "given"
    y = torch.randint(0, 4, (5,), generator=torch.Generator().manual_seed(2))
    metrics = posterior.evaluate([(x, y)])
    nll = -expected[torch.arange(5), y].log().mean().item()
    assert metrics["num_samples"] == 4 and metrics["nll"] == pytest.approx(nll, rel=1e-5)
    two = csg.Posterior.from_states(_factory(), states, input_shape=(2, 3), chains=[0, 0, 1, 1])
    diagnostics = two.diagnostics([(x, y)])
    assert diagnostics.chains == 2 and diagnostics.draws_per_chain == [2, 2] and diagnostics.examples == 5


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_a_saved_posterior_of_state_dicts_loads_back_only_with_its_model(tmp_path, suffix):
    posterior = csg.Posterior.from_states(_factory, _states(), input_shape=(2, 3), names=list("abcd"),
                                          ece_bins=7)
    path = posterior.save(tmp_path / f"posterior{suffix}")
    with pytest.raises(ConfigError, match="^model='None' is not allowed: the module .* saved from "
                                          "Posterior.from_states, without a config$"):
        csg.Posterior.load(path)
    loaded = csg.Posterior.load(path, model=_factory)
    x = torch.randn(3, 2, 3)
    assert loaded.names == list("abcd") and loaded.ece_bins == 7 and loaded.cfg is None
    assert torch.equal(loaded.predict(x), posterior.predict(x))
    assert loaded.cycles == [None] * 4  # the names record no cycle
    assert all(torch.equal(mine[k], theirs[k]) for mine, theirs in zip(loaded.states(), _states(), strict=True)
               for k in theirs)
    with pytest.raises(ConfigError, match="^data_root=.* None for a posterior without a run's config"):
        csg.Posterior.load(path, model=_factory, data_root=tmp_path)
    with pytest.raises(ConfigError, match="^data_root='3' is not allowed: None, or the path"):
        csg.Posterior.load(path, model=_factory, data_root=3)
    with pytest.raises(ConfigError, match="^data_root=.* not an interpolation$"):
        csg.Posterior.load(path, model=_factory, data_root="${oc.env:DATA}")
    with pytest.raises(ConfigError, match=r"^path=.*posterior.* member 0 \(a\) has 1\.(weight|bias) of shape"):
        csg.Posterior.load(path, model=lambda: nn.Sequential(nn.Flatten(), nn.Linear(6, 3)))


@pytest.mark.parametrize("change, message", [
    ({"states": []}, r"^states='\[\]' is not allowed: at least one state dict"),
    ({"states": [{"1.weight": torch.zeros(4, 6)}]}, r"^states\[0\]=.* a state dict of the model, with its keys"),
    ({"states": [{"1.weight": torch.zeros(4, 5), "1.bias": torch.zeros(4)}]}, r"^states\[0\]='1.weight of shape"),
    ({"weights": [1, -1, 1, 1]}, r"^weights=.* 4 finite non-negative numbers"),
    ({"chains": [0, 1]}, r"^chains='2 values' is not allowed: one per state dict \(4\)$"),
    ({"precision": "64"}, r"^precision='64' is not allowed: 32, bf16-mixed or 16-mixed$"),
    ({"model": 3}, r"^model='int' is not allowed: a torch.nn.Module or a callable"),
    ({"model": lambda: 3}, r"^model='a factory that returned int'"),
    ({"input_shape": (5,)}, r"^input_shape='\[5\]' is not allowed: the shape of one input the model takes"),
    ({"input_shape": ("a",)}, r"^input_shape=.* positive whole numbers"),
    ({"weights": [1e308] * 4}, r"^weights=.* a finite positive sum$"),
    ({"ece_bins": 0}, r"^ece_bins='0' is not allowed: a positive whole number$"),
    # issue 74: NaN weights, integer weights, the meta device, a class count the model does not output
    ({"states": [{**_states(1)[0], "1.bias": torch.full((4,), float("nan"))}]},
     r"^states\[0\]='1.bias with non-finite values' is not allowed: finite weights"),
    ({"states": [{k: v.long() for k, v in _states(1)[0].items()}]},
     r"^states\[0\]='1.(weight|bias) of dtype torch.int64 on cpu' is not allowed: a tensor holding values of the "
     r"model's kind \(torch.float32\)"),
    ({"device": "meta"}, r"^device='meta' is not allowed: a device that holds values"),
    ({"num_classes": 2}, r"^num_classes='2' is not allowed: None or the model's 4 outputs"),
])
def test_a_wrong_argument_is_one_line(change, message):
    arguments = {"model": _factory, "states": _states(), "input_shape": (2, 3), **change}
    with pytest.raises(ConfigError, match=message):
        csg.Posterior.from_states(arguments.pop("model"), arguments.pop("states"), **arguments)


def test_a_posterior_of_state_dicts_has_no_run_data_to_evaluate_on():
    posterior = csg.Posterior.from_states(_factory, _states(2), input_shape=(2, 3))
    with pytest.raises(ConfigError, match="^loader='None' is not allowed: a loader of"):
        posterior.evaluate()
    assert repr(posterior).startswith("Posterior('state dicts': 2 members, equal weights, from state dicts")


def test_a_model_given_for_a_run_directory_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ConfigError, match="^model='function' is not allowed: None for a run directory"):
        csg.Posterior.load(tmp_path, model=_factory)


def test_the_callers_module_is_left_as_it_was():
    module = _factory().train()
    before = {key: value.clone() for key, value in module.state_dict().items()}
    posterior = csg.Posterior.from_states(module, _states(), input_shape=(2, 3))
    posterior.predict(torch.randn(2, 2, 3))
    assert module.training and all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert posterior.model is not module


def test_the_posterior_keeps_its_own_copy_of_the_callers_tensors():
    """The caller's training after the call moves the caller's tensors, not the posterior's members (issue 74)."""
    states = _states(2)
    posterior = csg.Posterior.from_states(_factory, states, input_shape=(2, 3))
    x = torch.randn(3, 2, 3, generator=torch.Generator().manual_seed(0))
    before = posterior.predict(x).clone()
    with torch.no_grad():
        for state in states:
            for tensor in state.values():
                tensor.add_(1.0)  # in place, as an optimizer's step would
    assert torch.equal(posterior.predict(x), before)
