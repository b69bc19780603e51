"""The model registry, and torchvision importing next to a CPU-only torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from csg.errors import ConfigError
from csg.models import create_model, list_models


def test_mlp_shape_and_parameter_count():
    model = create_model("mlp", num_classes=10, input_shape=(1, 28, 28))
    # 784-200-200-200-10
    assert sum(p.numel() for p in model.parameters()) == 784 * 200 + 200 + 2 * (200 * 200 + 200) + 200 * 10 + 10
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    narrow = create_model("mlp", num_classes=4, input_shape=(5,), hidden=[7])
    assert narrow(torch.zeros(2, 5)).shape == (2, 4)


def test_unknown_model():
    with pytest.raises(ConfigError, match="mlp"):
        create_model("vit_giant", num_classes=10)
    assert "mlp" in list_models()


def test_torchvision_and_timm_import_after_csg():
    code = (
        "import csg, csg._torchvision_compat as c, torchvision, timm, torchmetrics\n"
        "from torchvision import transforms\n"
        "m = timm.create_model('resnet18', num_classes=3).eval()\n"
        "assert m(__import__('torch').zeros(1, 3, 32, 32)).shape == (1, 3)\n"
        "print('patched' if c.patched else 'native')\n"
    )
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() in {"patched", "native"}


def test_cifar_resnet18_is_the_authors_architecture():
    model = create_model("resnet18", num_classes=10, input_shape=(3, 32, 32))
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    assert (model.conv1.kernel_size, model.conv1.stride, model.conv1.out_channels) == ((3, 3), (1, 1), 64)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
    strides = [layer[0].conv1.stride[0] for layer in (model.layer1, model.layer2, model.layer3, model.layer4)]
    widths = [layer[-1].conv2.out_channels for layer in (model.layer1, model.layer2, model.layer3, model.layer4)]
    assert strides == [1, 2, 2, 2] and widths == [64, 128, 256, 512]
    assert [len(layer) for layer in (model.layer1, model.layer2, model.layer3, model.layer4)] == [2, 2, 2, 2]
    # the authors' state_dict names (a checkpoint of theirs loads), 1x1 + BN shortcuts where shapes change
    keys = set(model.state_dict())
    assert {"conv1.weight", "layer2.0.shortcut.0.weight", "layer2.0.shortcut.1.running_mean", "linear.weight"} <= keys
    assert not any(k.startswith("layer1.0.shortcut") for k in keys)
    # 32x32 in, 4x4 before the average pool
    features = {}
    model.layer4.register_forward_hook(lambda m, i, o: features.update(layer4=o.shape))
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10) and features["layer4"] == (2, 512, 4, 4)
    assert sum(p.numel() for p in create_model("resnet18", num_classes=100).parameters()) == 11_173_962 + 90 * 513


@pytest.mark.parametrize("name, depth, params", [("resnet20", 20, 269_722), ("resnet32", 32, 464_154),
                                                 ("resnet56", 56, 853_018)])
def test_he_cifar_resnets_have_option_a_shortcuts_and_the_published_sizes(name, depth, params):
    model = create_model(name, num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == params  # 0.27M / 0.46M / 0.85M in He et al. Table 6
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == depth and all(m.kernel_size == (3, 3) for m in convs)  # no 1x1 shortcut convolutions
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_wrn16_8_widths_and_size():
    model = create_model("wrn16_8", num_classes=100)
    widths = sorted({m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)})
    assert widths == [16, 128, 256, 512]
    assert sum(p.numel() for p in model.parameters()) == 10_961_370 + 90 * 513
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 100)


def test_resnet50_is_torchvisions():
    from csg._torchvision_compat import ensure_torchvision

    ours = create_model("resnet50", num_classes=1000)
    reference = ensure_torchvision().models.resnet50(weights=None)
    assert sum(p.numel() for p in ours.parameters()) == 25_557_032
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in reference.state_dict().items()}


def test_timm_names_are_accepted():
    model = create_model("resnet10t", num_classes=7, input_shape=(1, 32, 32))
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 7)
