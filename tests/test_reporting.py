"""csg.reporting: the public helpers of research code (Markdown tables, the one flattener, atomic writes)."""

from __future__ import annotations

import pytest

from csg.reporting import flat_keys, markdown_table, write_json, write_text


def test_a_markdown_table_has_its_header_rule_and_rows():
    lines = markdown_table(["method", "error %", "seeds"], [["cSGHMC", "4.27", 3], ["SGD", 5.1, 3]], align="lrr")
    assert lines == ["| method | error % | seeds |", "|---|---:|---:|", "| cSGHMC | 4.27 | 3 |", "| SGD | 5.1 | 3 |"]
    assert markdown_table(["a"], [], align="c") == ["| a |", "|:---:|"]
    assert markdown_table(["a", "b"], [])[1] == "|---|---|"


@pytest.mark.parametrize("header, rows, align, words", [
    (["a", "b"], [["x"]], None, "1 cells, the header has 2"),
    (["a", "b"], [], "r", "align='r'"),
    (["a", "b"], [], "lx", "one of l, r, c"),
])
def test_a_table_of_the_wrong_shape_is_refused_naming_it(header, rows, align, words):
    with pytest.raises(ValueError, match=words):
        markdown_table(header, rows, align)


def test_flat_keys_walks_mappings_and_keeps_or_drops_lists():
    nested = {"sampler": {"name": "csghmc", "lr0": 0.5, "milestones": [1, 2]}, "seed": 0, "empty": {}}
    assert flat_keys(nested) == {"sampler.name": "csghmc", "sampler.lr0": 0.5, "sampler.milestones": [1, 2],
                                 "seed": 0}
    assert flat_keys(nested, lists=False) == {"sampler.name": "csghmc", "sampler.lr0": 0.5, "seed": 0}
    assert flat_keys({"ensemble": {"nll": 0.2}}, prefix="metrics") == {"metrics.ensemble.nll": 0.2}


def test_writes_replace_a_file_whole(tmp_path):
    path = tmp_path / "deep" / "report.md"
    write_text(path, "old\n")
    write_text(path, "new\n")
    write_json(tmp_path / "m.json", {"a": 1})
    assert path.read_text() == "new\n" and (tmp_path / "m.json").read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.md"]  # no temporary file left
