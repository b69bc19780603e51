"""A run folder is csg's or it is refused (issue 57): the folder the command runs in, another program's folder,
a user's files or lock, and a run that could never be loaded are refused in one line before anything is written,
and nothing in the folder changes."""

from __future__ import annotations

import json

import pytest

from csg.checks import check_train_command
from csg.engine.rundir import foreign_entries
from csg.paths import CONFIGS


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("argv, key", [
    (["hydra.run.dir="], "hydra.run.dir=''"),
    (["hydra.run.dir=."], "hydra.run.dir='.'"),
    (["-m", "hydra.sweep.dir=", "seed=0,1"], "hydra.sweep.dir=''"),
])
def test_the_folder_the_command_runs_in_is_refused(tmp_path, monkeypatch, argv, key):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("a user's file")
    message = check_train_command(argv, CONFIGS)
    assert message is not None and key in message and "a folder of the run's own" in message and "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


@pytest.mark.parametrize("plant, named", [
    ({".hydra/config.yaml": "db:\n  host: example\n", ".hydra/overrides.yaml": "- db.host=x\n"}, ".hydra/"),
    ({"samples/manifest.json": json.dumps({"samples": ["mine.pt"]})}, "samples/"),
    ({".lock": "held by my own tool"}, ".lock"),
    ({"notes.md": "# my notes", "train.log": "my log"}, "notes.md"),
])
def test_a_folder_with_files_csg_did_not_write_is_refused_and_left_as_it_was(tmp_path, monkeypatch, plant, named):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "theirs"
    for name, text in plant.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = _snapshot(folder)
    message = check_train_command([f"hydra.run.dir={folder}"], CONFIGS)
    assert message is not None and "hydra.run.dir=" in message and named in message and "\n" not in message
    assert "csg did not write" in message and _snapshot(folder) == before


def test_csgs_own_run_folder_and_its_lock_are_csgs(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("sampler: {}\ndata: {}\nmodel: {}\ntrainer: {}\n")
    (run / "metrics.json").write_text("{}")
    assert foreign_entries(run) == [] and foreign_entries(tmp_path / "new") == []
    crashed = tmp_path / "crashed"   # a lock a killed csg command left behind, and its pending record
    (crashed / ".hydra.pending-123").mkdir(parents=True)
    (crashed / ".lock").write_text(json.dumps({"pid": 123, "host": "h", "program": "train.py"}))
    assert foreign_entries(crashed) == []
    (crashed / ".lock").write_text("[1, 2]")
    assert foreign_entries(crashed) == [".lock"]


def test_a_run_that_could_not_be_loaded_is_not_started(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = check_train_command(["hydra.output_subdir=null"], CONFIGS)
    assert message is not None and message.startswith("hydra.output_subdir=null is not allowed") and "posterior" in message
    assert list(tmp_path.iterdir()) == []
