"""Bad input to the synthetic studies (``train.py synthetic=<study>``) is refused before any work, in one line.

For every study and each class of fault (a non-positive count, a non-finite number, a wrong type, a budget too
short for the rest, a choice outside its set, an unknown key), ``run_study`` raises a ConfigError naming the key,
and writes nothing into ``synthetic.output_dir`` (nor the run directory); one run through ``train.py`` checks
the message a user sees.
"""

from __future__ import annotations

import copy
import functools

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from csg.errors import ConfigError
from tests.conftest import ROOT, train

CASES = [
    # study, overrides, the key the error names
    ("table4", ["synthetic.repeats=0"], "synthetic.repeats"),
    ("table4", ["synthetic.parallel_chains=-1"], "synthetic.parallel_chains"),
    ("table4", ["synthetic.coverage.radius=inf"], "synthetic.coverage.radius"),
    ("table4", ["synthetic.presets.paper.csgld.lr0=nan"], "synthetic.presets.paper.csgld.lr0"),
    ("table4", ["synthetic.target.variance=abc"], "synthetic.target.variance"),
    ("table4", ["synthetic.presets.paper.noise_in_exploration=1"], "synthetic.presets.paper.noise_in_exploration"),
    ("table4", ["synthetic.start=5"], "synthetic.start"),
    ("table4", ["synthetic.steps=10"], "synthetic.steps"),
    ("table4", ["synthetic.presets.official_code.csgld.burnin_steps=2000"], "synthetic.steps"),
    ("table4", ["synthetic.steps=1000000000000000"], "synthetic.steps"),  # the kept samples: beyond any memory
    ("table4", ["synthetic.presets.paper.temperature_correction=true", "synthetic.presets.paper.csgld.lr0=3"],
     "synthetic.presets.paper.csgld.lr0"),
    ("table4", ["synthetic.target.name=icsgld2d"], "synthetic.target.name"),
    ("table4", ["+synthetic.stepz=10"], "synthetic.stepz"),
    ("table4", ["+synthetic.presets.paper.sgld.hld=500"], "synthetic.presets.paper.sgld.hld"),
    ("table4", ["seed=-1"], "seed"),
    ("wang_mixture1d", ["synthetic.cycle_length=0"], "synthetic.cycle_length"),
    ("wang_mixture1d", ["synthetic.proposal_variance=inf"], "synthetic.proposal_variance"),
    ("wang_mixture1d", ["synthetic.cs=abc"], "synthetic.cs"),
    ("wang_mixture1d", ["synthetic.cs=[1.0,0.5]"], "synthetic.cs"),
    ("wang_mixture1d", ["synthetic.cycles=7"], "synthetic.cycles"),  # fewer cycles than chains
    ("wang_mixture1d", ["synthetic.floor=0"], "synthetic.floor"),
    ("wang_mixture1d", ["+synthetic.burnin=5"], "synthetic.burnin"),
    ("wang_mog25", ["synthetic.csgld.chains=0"], "synthetic.csgld.chains"),
    ("wang_mog25", ["synthetic.rwm.proposal_scale=nan"], "synthetic.rwm.proposal_scale"),
    ("wang_mog25", ["synthetic.csgld.lr0=0.1"], "synthetic.csgld.lr0"),
    ("wang_mog25", ["synthetic.csgld.lr0=[0.1,inf]"], "synthetic.csgld.lr0"),
    ("wang_mog25", ["synthetic.csgld.cycle_length=1"], "synthetic.csgld.cycle_length"),
    ("wang_mog25", ["synthetic.rwm.cycles=10"], "synthetic.rwm.cycles"),
    ("wang_mog25", ["synthetic.start.high=-10"], "synthetic.start.high"),
    ("wang_mog25", ["+synthetic.rwm.beta=1"], "synthetic.rwm.beta"),
    ("icsgld_sim", ["synthetic.repeats=0"], "synthetic.repeats"),
    ("icsgld_sim", ["synthetic.steps=inf"], "synthetic.steps"),
    ("icsgld_sim", ["synthetic.checkpoints=[10]"], "synthetic.checkpoints"),
    ("icsgld_sim", ["synthetic.steps=1020"], "synthetic.steps"),
    ("icsgld_sim", ["synthetic.checkpoints=100000"], "synthetic.checkpoints"),
    ("icsgld_sim", ["+synthetic.methods=[SGLD]"], "synthetic.methods"),
    ("icsgld_variance", ["synthetic.steps=0"], "synthetic.steps"),
    ("icsgld_variance", ["synthetic.steps=nan"], "synthetic.steps"),
    ("icsgld_variance", ["synthetic.steps=abc"], "synthetic.steps"),
    ("icsgld_variance", ["synthetic.repeats=1"], "synthetic.repeats"),
    ("icsgld_variance", ["synthetic.difference=null"], "synthetic.difference"),
    ("icsgld_variance", ["+synthetic.chains=10"], "synthetic.chains"),
    ("icsgld_mnist", ["synthetic.iterations=0"], "synthetic.iterations"),
    ("icsgld_mnist", ["synthetic.eta=inf"], "synthetic.eta"),
    ("icsgld_mnist", ["synthetic.temperature=nan"], "synthetic.temperature"),
    ("icsgld_mnist", ["synthetic.batch_size=abc"], "synthetic.batch_size"),
    ("icsgld_mnist", ["synthetic.methods=[SGD]"], "synthetic.methods"),
    ("icsgld_mnist", ["synthetic.partitions=1"], "synthetic.partitions"),
    ("icsgld_mnist", ["synthetic.sa_step=1"], "synthetic.sa_step"),
    ("icsgld_mnist", ["+synthetic.lr=1"], "synthetic.lr"),
    ("icsgld_mnist", ["synthetic.name=icsgld_sim"], "synthetic.iterations"),  # a key the named study does not read
]


@pytest.fixture(scope="module", autouse=True)
def _hydra():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        yield


@functools.cache
def _base(study: str):
    return compose("config", overrides=[f"synthetic={study}"])


def _compose(study: str, overrides: list[str]):
    """The study's config as Hydra composes it, with ``overrides`` parsed by Hydra's own command-line parser (a
    compose per case would take most of this file's time): ``+key=value`` adds a key, ``key=value`` sets one."""
    cfg = copy.deepcopy(_base(study))
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        assert override.is_add() or OmegaConf.select(cfg, key, default=KeyError) is not KeyError, key
        OmegaConf.update(cfg, key, override.value(), merge=False, force_add=override.is_add())
    return cfg


def _snapshot(directory):
    return {p.relative_to(directory): (p.stat().st_mtime_ns, p.read_bytes()) for p in directory.rglob("*") if p.is_file()}


@pytest.mark.parametrize("study, overrides, key", CASES, ids=[f"{s}-{' '.join(o)}" for s, o, _ in CASES])
def test_bad_study_input_is_refused_before_any_work(tmp_path, study, overrides, key):
    from studies.synthetic import run_study

    out = tmp_path / "out"
    out.mkdir()
    (out / "committed.csv").write_text("an earlier result\n")
    before = _snapshot(out)
    cfg = _compose(study, [*overrides, f"synthetic.output_dir={out}"])
    with pytest.raises(ConfigError) as error:
        run_study(cfg, run_dir=tmp_path / "run")
    assert error.value.key == key
    message = str(error.value)
    assert message.startswith(f"{key}=") and "\n" not in message
    assert _snapshot(out) == before  # nothing written, created or touched
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("path, why", [("file", "is a file"), ("file/below", "is a file")])
def test_an_output_dir_that_cannot_be_a_directory_is_refused(tmp_path, path, why):
    from studies.synthetic import validate

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=why) as error:
        validate(_compose("icsgld_variance", [f"synthetic.output_dir={tmp_path / path}"]))
    assert error.value.key == "synthetic.output_dir"


def test_every_study_config_as_committed_passes_its_checks():
    from studies.synthetic import validate

    for study in ("table4", "wang_mixture1d", "wang_mog25", "icsgld_sim", "icsgld_variance", "icsgld_mnist"):
        validate(compose("config", overrides=[f"synthetic={study}"]))


def test_train_py_refuses_a_too_short_study_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "table4.csv").write_text("the committed table\n")
    before = _snapshot(out)
    result = train(["synthetic=table4", "synthetic.steps=10", f"synthetic.output_dir={out}"], tmp_path / "run",
                   cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: synthetic.steps=10 is not allowed: an integer >= "), lines
    assert _snapshot(out) == before
