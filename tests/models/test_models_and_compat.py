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


def test_mlp_pool_averages_the_image_first():
    model = create_model("mlp", num_classes=10, input_shape=(1, 28, 28), hidden=[8], pool=4)
    assert sum(p.numel() for p in model.parameters()) == 49 * 8 + 8 + 8 * 10 + 10
    x = torch.randn(2, 1, 28, 28)
    pooled = x.reshape(2, 1, 7, 4, 7, 4).mean((3, 5)).flatten(1)
    layers = list(model)[2:]  # after AvgPool2d and Flatten
    assert torch.allclose(model(x), torch.nn.Sequential(*layers)(pooled), atol=1e-6)
    for bad in (0, 3, 2.0):
        with pytest.raises(ConfigError, match="model.pool"):
            create_model("mlp", num_classes=10, input_shape=(1, 28, 28), pool=bad)
    with pytest.raises(ConfigError, match="model.pool"):
        create_model("mlp", num_classes=2, input_shape=(5,), pool=2)


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


# -- models users already have, named by _target_ (docs/own-components.md, "Models you already have") ---------------
IMAGES = ["data=custom", "data._target_=tests.own_components.images", "+data.size=16", "data.batch_size=8", "data.eval_batch_size=32",
          "trainer.epochs=1", "sampler.cycles=1", "sampler.samples_per_cycle=1", "logger=none",
          "trainer.progress=false", "trainer.device=cpu", "data.recipe.lr0=0.01"]


def _run_images(tmp_path, *overrides: str):
    from hydra import compose, initialize_config_dir

    from csg.checks import check_command
    from csg.launch.run import run
    from csg.paths import CONFIGS

    argv = [*IMAGES, *overrides]
    assert check_command(argv, CONFIGS) is None  # what train.py checks before Hydra starts
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("config", overrides=argv)
    return run(cfg, tmp_path / "run"), tmp_path / "run"


@pytest.mark.parametrize("overrides, first_weight, shape", [
    (["+data.channels=1", "model._target_=timm.create_model", "+model.model_name=resnet10t", "+model.num_classes=4",
      "+model.in_chans=1"], "conv1.0.weight", (24, 1, 3, 3)),
    (["model._target_=torchvision.models.resnet18", "+model.num_classes=4"], "conv1.weight", (64, 3, 7, 7)),
], ids=["timm.create_model", "torchvision.models.resnet18"])
def test_a_timm_and_a_torchvision_model_by_target_train_an_epoch_on_images(tmp_path, overrides, first_weight, shape):
    metrics, run_dir = _run_images(tmp_path, "model=custom", *overrides)
    assert metrics["num_data"] == 64 and metrics["ensemble"]["num_samples"] == 1
    assert 0 <= metrics["ensemble"]["test_error_pct"] <= 100 and metrics["ensemble"]["nll"] > 0
    (sample,) = sorted((run_dir / "samples").glob("*.pt"))
    state = torch.load(sample, weights_only=True)["state_dict"]
    assert tuple(state[first_weight].shape) == shape  # the user's keys reached the factory (in_chans=1 for timm)
    assert state["fc.weight"].shape[0] == 4  # +model.num_classes: csg passes none to a callable that does not name it


def test_a_factory_without_num_classes_is_refused_naming_the_key_to_add(tmp_path):
    with pytest.raises(ConfigError) as refused:
        _run_images(tmp_path, "model=custom", "model._target_=torchvision.models.resnet18")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("model._target_='torchvision.models.resnet18' is not allowed: "
                                                      "a model with 4 outputs"), message
    assert message.endswith("torchvision.models.resnet18 takes it through **kwargs: add +model.num_classes=4"), message


def test_a_key_that_csg_also_passes_is_refused_naming_both():
    from csg.models.custom import create_custom_model

    path = "tests.own_components.tiny_net"  # names num_classes and input_shape
    with pytest.raises(ConfigError) as refused:
        create_custom_model(path, {"num_classes": 5}, num_classes=3, input_shape=(4,))
    assert str(refused.value) == ("model.num_classes=5 is not allowed: the data's num_classes=3, which csg passes to "
                                  "tests.own_components.tiny_net (it names num_classes); leave model.num_classes out")
    with pytest.raises(ConfigError, match=r"^model.input_shape=\[5\] is not allowed: the data's input_shape=\[4\]"):
        create_custom_model(path, {"input_shape": [5]}, num_classes=3, input_shape=(4,))
    same = create_custom_model(path, {"num_classes": 3, "input_shape": [4]}, num_classes=3, input_shape=(4,))
    assert same(torch.zeros(2, 4)).shape == (2, 3)  # the same values: no clash


def test_model_timm_chooses_a_timm_architecture_by_name():
    from hydra import compose, initialize_config_dir

    from csg.engine.build import build_likelihood, build_model
    from csg.engine.settings import run_settings
    from csg.paths import CONFIGS

    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("config", overrides=["model=timm", "model.name=resnet10t"])
    data = type("Data", (), {"num_classes": 5, "input_shape": (1, 28, 28)})()
    assert build_model(run_settings(cfg), data, build_likelihood(run_settings(cfg).likelihood))(torch.zeros(2, 1, 28, 28)).shape == (2, 5)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        clash = compose("config", overrides=["model=timm", "+model.num_classes=3"])
        same = compose("config", overrides=["model=timm", "+model.num_classes=5"])
    with pytest.raises(ConfigError) as refused:  # csg passes num_classes to every built-in model: a clash, one line
        build_model(run_settings(clash), data, build_likelihood(run_settings(clash).likelihood))
    assert str(refused.value) == ("model.num_classes=3 is not allowed: the data's num_classes=5, which csg passes to "
                                  "model.name=resnet10t; leave model.num_classes out")
    assert build_model(run_settings(same), data, build_likelihood(run_settings(same).likelihood))(torch.zeros(2, 1, 28, 28)).shape == (2, 5)


def test_importing_torchvision_before_csg_fails_only_where_the_guard_patches():
    """What docs/getting-started.md says in one line: with the CPU torch beside a CUDA torchvision wheel, a script
    of yours imports csg before torchvision (or timm); csg's guard then defines the missing operators."""
    code = "import csg._torchvision_compat as c, torchvision; print('patched' if c.patched else 'native')"
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    before = subprocess.run([sys.executable, "-c", "import torchvision, csg"], capture_output=True, text=True,
                            timeout=300)
    assert after.returncode == 0, after.stderr
    if after.stdout.strip() == "patched":  # this environment: the extension does not load
        assert before.returncode != 0 and "torchvision::nms does not exist" in before.stderr, before.stderr
    else:
        assert before.returncode == 0, before.stderr
