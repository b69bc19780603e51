"""Low-rank adapters (csg/models/lora.py) and weights to start from (csg/models/weights.py)."""

from __future__ import annotations

import math
import os
import pickle

import pytest
import torch
from torch import nn

from csg.errors import ConfigError
from csg.models.lora import add_lora, is_adapter_key
from csg.models.weights import load_weights, read_state_dict


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def test_adapters_start_as_the_base_model_keep_its_names_and_learn_alone():
    net, x = _net(), torch.randn(5, 1, 6, 6)
    base_out, base_keys = net(x), list(net.state_dict())
    assert add_lora(net, rank=2, alpha=4.0) == ["0", "3"]
    assert torch.equal(net(x), base_out)  # B = 0: the adapted model is the base model
    keys = list(net.state_dict())
    assert [k for k in keys if not is_adapter_key(k)] == base_keys
    assert [k for k in keys if is_adapter_key(k)] == ["0.lora_A", "0.lora_B", "3.lora_A", "3.lora_B"]
    assert net[0].lora_A.shape == (2, 1, 3, 3) and net[0].lora_B.shape == (4, 2, 1, 1)
    with torch.no_grad():
        net[3].lora_B.fill_(0.1)
    x_flat = net[2](net[1](net[0](x)))
    update = (4.0 / 2) * x_flat @ net[3].lora_A.T @ net[3].lora_B.T
    assert torch.allclose(net(x), nn.functional.linear(x_flat, net[3].weight, net[3].bias) + update, atol=1e-6)


def test_adapters_on_chosen_layers_only_and_none_matching_is_an_error():
    net = _net()
    assert add_lora(net, rank=1, alpha=1.0, modules=["3"]) == ["3"]
    assert not hasattr(net[0], "lora_A")
    with pytest.raises(ValueError, match=r"no linear or conv layer matches \['layer4\.\*'\] \(the model's: 0, 3\)"):
        add_lora(_net(), rank=1, alpha=1.0, modules=["layer4.*"])


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: {"state_dict": s, "epoch": 3}, lambda s: {"model": s},
                                  lambda s: {f"module.{k}": v for k, v in s.items()}])
def test_weights_load_from_a_plain_state_dict_a_sample_a_checkpoint_or_a_ddp_model(wrap, tmp_path):
    source, target = _net(), nn.Sequential(*_net())
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    torch.save(wrap(source.state_dict()), tmp_path / "w.pt")
    add_lora(target, rank=2, alpha=2.0)  # the adapters may be missing from the file: they keep their start
    load_weights(target, tmp_path / "w.pt")
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in source.state_dict().items())


def test_weights_that_do_not_fit_are_one_line_naming_the_keys(tmp_path):
    state = _net().state_dict()
    state["extra.weight"] = torch.zeros(1)
    state["3.weight"] = torch.zeros(2, 2)
    del state["0.bias"]
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(ConfigError) as refused:
        load_weights(_net(), tmp_path / "w.pt")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("model.weights=")
    assert "missing keys 0.bias" in message and "unexpected keys extra.weight" in message
    assert "3.weight [2, 2] (the model's [3, 144])" in message


def test_integer_or_non_finite_weights_are_refused_naming_the_keys(tmp_path):
    # int64 weights would be cast silently (and train at chance); NaN would surface only as a NaN loss
    state = _net().state_dict()
    state["0.weight"] = state["0.weight"].round().long()
    state["3.bias"] = torch.full_like(state["3.bias"], math.nan)
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(ConfigError) as refused:
        load_weights(_net(), tmp_path / "w.pt")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("model.weights=")
    assert message.endswith("integer values where the model's are floating point: 0.weight int64 (the model's "
                            "float32); NaN or inf in 3.bias"), message


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_weights_file_that_would_run_code_is_refused_without_running_it(tmp_path):
    _Payload.marker = tmp_path / "ran"
    with open(tmp_path / "w.pt", "wb") as handle:
        pickle.dump({"state_dict": _Payload()}, handle)
    with pytest.raises(ConfigError, match=r"^model.weights=.* is not allowed: a state dict saved by torch.save, read "):
        read_state_dict(tmp_path / "w.pt")
    assert not (tmp_path / "ran").exists()
    torch.save({"not": "weights"}, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="a dict holding one under state_dict, model, model_state_dict"):
        read_state_dict(tmp_path / "other.pt")
