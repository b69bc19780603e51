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
