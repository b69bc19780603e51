"""A user's YAML folder (``--config-dir``, ``hydra.searchpath``): searched in the order the entry point searches it,
by the checks as by the run, so a user's file that replaces a built-in option is the one checked and run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from csg.checks import check_command, check_group_choices
from csg.checks.groups import split_config_dir
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"


@pytest.fixture
def user(tmp_path, monkeypatch) -> Path:
    """A user's project folder: ``my_configs/model/mlp.yaml`` (a built-in option's name: one hidden layer of 7) and
    ``my_configs/model/wide.yaml`` (a new name), and the current folder."""
    (tmp_path / "my_configs" / "model").mkdir(parents=True)
    (tmp_path / "my_configs" / "model" / "mlp.yaml").write_text("name: mlp\nhidden: [7]\n")
    (tmp_path / "my_configs" / "model" / "wide.yaml").write_text("defaults:\n  - mlp\n  - _self_\n\nname: wide\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_flag_is_read_in_every_spelling():
    for argv in (["--config-dir", "c", "seed=1"], ["-cd", "c", "seed=1"], ["--config-dir=c", "seed=1"]):
        assert split_config_dir(argv) == (Path("c").resolve(), ["seed=1"])
    assert split_config_dir(["seed=1"]) == (None, ["seed=1"])


def test_the_users_folder_comes_first_and_its_options_are_choices(user):
    from csg.checks.preflight import _compose_once  # the composition every check reads

    first = _compose_once((user / "my_configs", CONFIGS), "config", ["model=wide"])
    assert (first.model.name, list(first.model.hidden)) == ("wide", [7])  # wide extends the user's mlp, not csg's
    assert list(_compose_once((user / "my_configs", CONFIGS), "config", []).model.hidden) == [7]
    after = _compose_once((CONFIGS,), "config", ["hydra.searchpath=[file://my_configs]"])
    assert list(after.model.hidden) == [200, 200, 200]  # a searchpath folder comes after csg's: new names only
    assert check_group_choices(["--config-dir", "my_configs", "model=wide"], CONFIGS) is None
    assert check_group_choices(["model=wide"], CONFIGS) == "model=wide is not allowed: one of custom, logreg, mlp, " \
        "resnet18, resnet20, resnet20_frn, resnet32, resnet50, resnet56, small_cnn, timm, wrn16_8"
    # the user's file is the one checked: its keys exist, csg's mlp's values are not what the checks see
    assert check_command(["--config-dir", "my_configs", "model=wide", "model.hidden=[0]"], CONFIGS) is not None
    assert check_command(["--config-dir", "my_configs", "model=wide", "model.width=3"], CONFIGS).startswith(
        "model.width=3 is not allowed: model.width is not a key of the config")


def test_a_folder_that_does_not_exist_is_one_line(user):
    assert check_command(["--config-dir", "nowhere"], CONFIGS) == (
        f"--config-dir={user / 'nowhere'} is not allowed: a folder of your YAML files, one subfolder per config group "
        "(model/, data/, sampler/); it does not exist")


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcdef", "bcdefg"))


@pytest.mark.timeout(60)
def test_the_users_yaml_has_the_limits_of_a_run_directorys(user):
    # a 1 KB alias bomb, a 2 MB file, a FIFO: each refused in one line before Hydra reads it (it would hang)
    folder = user / "my_configs"
    (folder / "model" / "bomb.yaml").write_text(BOMB)
    assert len(BOMB) < 1024
    for argv in (["--config-dir", "my_configs"], ["--config-dir", "my_configs", "--cfg", "job"]):
        assert check_command(argv, CONFIGS) == (
            f"--config-dir={folder} is not allowed: a folder of config files within csg's limits (1 MiB, no alias "
            "bombs); model/bomb.yaml: it expands to more than 100000 YAML nodes through its aliases (*name): a "
            "config has a few hundred")
    (folder / "model" / "bomb.yaml").unlink()
    (user / "more" / "data").mkdir(parents=True)
    (user / "more" / "data" / "big.yaml").write_text("x: " + "a" * (2 << 20) + "\n")
    message = check_command(["hydra.searchpath=[file://more]"], CONFIGS)
    assert message.startswith("hydra.searchpath=more is not allowed: a folder of config files within csg's limits")
    assert message.endswith("data/big.yaml: it is larger than the 1 MiB csg reads of such a file")
    (user / "more" / "data" / "big.yaml").unlink()
    os.mkfifo(folder / "model" / "pipe.yaml")
    assert check_command(["--config-dir", "my_configs"], CONFIGS).endswith(
        "model/pipe.yaml: it is a FIFO (named pipe), not a regular file (it was not opened)")


def test_a_group_file_that_is_not_a_mapping_or_lacks_a_key_is_one_line(user):
    folder = user / "my_configs"
    (folder / "data").mkdir()
    (folder / "data" / "listed.yaml").write_text("- 1\n- 2\n")
    for argv in (["data=listed"], ["data=listed", "data.batch_size=3"]):
        assert check_command(["--config-dir", "my_configs", *argv], CONFIGS) == (
            "data=listed is not allowed: a data option is a mapping of keys (name: ..., as csg's configs/data/*.yaml); "
            "it is a list")
    mnist = (CONFIGS / "data" / "mnist5k.yaml").read_text()
    without = mnist[:mnist.index("\nrecipe:")] + "\n"  # the built-in option, without its sampler recipe
    (folder / "data" / "mnist5k.yaml").write_text(without)
    message = check_command(["--config-dir", "my_configs"], CONFIGS)
    assert message.startswith("sampler.lr0='${data.recipe.lr0}' is not allowed: a value csg can resolve before "
                              "training"), message
    assert message.endswith("; data=mnist5k has no data.recipe, which csg's data options have (copy it from one of "
                            "them into your file)")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_python_m_csg_runs_the_users_option_in_place_of_the_built_in_one(user):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "WANDB_"))}
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    process = subprocess.run([sys.executable, "-m", "csg", "--config-dir", "my_configs", "--cfg", "job"], cwd=user,
                             env=env, capture_output=True, text=True, timeout=110)
    assert process.returncode == 0, process.stderr[-2000:]
    assert "model:\n  name: mlp\n  hidden:\n  - 7\n" in process.stdout
