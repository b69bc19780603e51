"""The documentation: the site builds with every warning an error, its strictness catches what it should, every
command that the README and the getting-started page show exists, and every path and make target they name."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, doc_blocks, make_dry_run

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TEXT = {page: page.read_text() for page in PAGES}
PYTHON = ".venv/bin/python"


def test_every_path_the_pages_name_exists():
    for page, text in TEXT.items():
        named = {m[1] for m in re.finditer(r"(?<![\w/.])((?:csg|scripts|configs|docs|results|tests)/[\w/.-]*[\w/])", text)
                 if not text[m.end():].startswith((".{", "{"))}  # results/x/table1.{csv,md}
        written = {"results/table1.md"} if page.name == "own-components.md" else set()  # by the example project's run
        missing = sorted(p for p in named - written if not (ROOT / p).exists() and "<" not in p)
        assert not missing, (page.name, missing)
    assert len(re.findall(r"csg/\w", TEXT[ROOT / "docs" / "architecture.md"])) > 30  # the layout names dozens


def test_every_relative_link_of_the_pages_resolves_in_the_repository():
    """As GitHub shows the Markdown: README.md links docs/ and results/, the pages link ../results/ (the site's
    build maps those to its own result pages, and checks its links itself)."""
    checked = 0
    for page, text in TEXT.items():
        links = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+:|#", t)]
        broken = [t for t in links if not (page.parent / t).exists()]
        assert not broken, (page.name, broken)
        checked += len(links)
    assert checked > 60  # the README's and the results page's links to result files, the pages' links to each other


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    names = {word for line in re.findall(r"^([\w$() -]+):", makefile, flags=re.M) for word in line.split()}
    for _, targets in re.findall(r"^(\w+_TARGETS) := (.*)$", makefile, flags=re.M):
        names |= set(targets.split())
    return names


def test_every_make_target_the_pages_show_exists():
    shown = {target for text in TEXT.values() for target in re.findall(r"`make ([a-z][\w-]*)", text)}
    assert {"demo", "test", "docs", "table1"} <= shown
    assert not sorted(shown - _make_targets()), sorted(shown - _make_targets())


# ---------------------------------------------------------------------------------------------------- commands
def bash_lines(text: str) -> list[list[str]]:
    """Every command line of the page's bash blocks, as words (comments left out, continuations joined)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(words)
    return lines


def _reproduce_flags() -> set[str]:
    return set(re.findall(r'add_argument\("(--[\w-]+)"', (ROOT / "studies" / "reproduce.py").read_text()))


def problem(words: list[str]) -> str | None:
    """Why the command ``words`` (as a user types it in the repository) would not run; None when every part of it
    exists: the make target (and what make runs for it), the script and its target and flags, the train.py
    overrides (checked as train.py checks them, before any training)."""
    from csg.checks import check_group_choices
    from studies.experiments.registry import TARGETS
    from csg.checks.saved import OVERRIDABLE
    from csg.checks import check_command

    if words[0] == "make":
        target = next((w for w in words[1:] if "=" not in w and not w.startswith("-")), "")
        if target not in _make_targets():
            return f"no make target {target!r}"
        dry = make_dry_run(*words[1:])
        if dry.returncode:
            return f"make -n {' '.join(words[1:])}: {dry.stderr.strip()}"
        for line in dry.stdout.splitlines():
            expanded = shlex.split(line)
            if expanded and expanded[0] == PYTHON and expanded[1] != "-m":
                found = problem(expanded)
                if found:
                    return f"{' '.join(words)} runs {line}: {found}"
        return None
    installed = {"csg-train": "train.py", "csg-evaluate": "scripts/evaluate_run.py",
                 "csg-compare": "scripts/compare_runs.py", "csg-reproduce": "scripts/reproduce.py", "csg-tune": "scripts/tune.py"}
    if words[0] in installed:  # the commands pip puts on PATH: what the clone's scripts are
        return problem([PYTHON, installed[words[0]], *words[1:]])
    if words[0] == "torchrun" and "-m" in words and words[words.index("-m") + 1:][:1] == ["csg"]:
        return problem([PYTHON, "train.py", *words[words.index("-m") + 2:]])
    if "train.py" in words:
        args = words[words.index("train.py") + 1:]
        return check_group_choices(args, ROOT / "configs") or check_command(args, ROOT / "configs")
    script = next((w for w in words if w.startswith("scripts/")), None)
    if script is None:
        return None if words[:3] == [PYTHON, "-m", "pytest"] else f"not a command this test knows: {words}"
    if not (ROOT / script).exists():
        return f"no {script}"
    args = words[words.index(script) + 1:]
    if script == "scripts/reproduce.py":
        positional, rest = [], iter(args)
        for arg in rest:
            if arg.startswith("--"):
                if "=" not in arg and arg != "--report-only":
                    next(rest, None)  # the flag's value
            else:
                positional.append(arg)
        if not positional or positional[0].replace("_", "-") not in TARGETS:
            return f"no paper target {positional[:1]}"
        flags = {a.split("=")[0] for a in args if a.startswith("--")}
        if flags - _reproduce_flags():
            return f"reproduce.py has no {sorted(flags - _reproduce_flags())}"
        if "--preset" in args and not (ROOT / "configs" / "experiment" / f"{args[args.index('--preset') + 1]}.yaml").exists():
            return f"no experiment preset {args[args.index('--preset') + 1]}"
    if script == "scripts/evaluate_run.py":
        keys = [a.split("=")[0].removeprefix("+") for a in args[1:]]
        bad = [k for k in keys if not any(fnmatch.fnmatch(k, pattern) for pattern in OVERRIDABLE) and k != "ood"]
        if bad:
            return f"evaluate_run.py does not take {bad}"
    return None


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_every_command_of_the_first_pages_exists(page, tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)  # train.py's checks of the run directory look here, and write nothing
    clients = tmp_path_factory.mktemp("slurm_clients")  # the pages' SLURM commands checked as on a login node
    for client in ("sbatch", "srun"):
        (clients / client).write_text("#!/bin/sh\nexit 1\n")
        (clients / client).chmod(0o755)
    (clients / "scontrol").write_text("#!/bin/sh\necho 'Slurmctld(primary) at login is UP'\n")  # a controller
    (clients / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{clients}{os.pathsep}{os.environ.get('PATH', '')}")
    lines = bash_lines((ROOT / page).read_text())
    if page == "docs/getting-started.md":  # a user's project outside the repository: tests/launch/test_install.py
        installing = doc_blocks("getting-started.md", "Install into your own project")[0]
        assert installing and all(words in lines for words in installing)
        lines = [words for words in lines if words not in installing]
    assert len(lines) >= 5
    problems = [f"{' '.join(words)}\n    -> {found}" for words in lines if (found := problem(words))]
    assert not problems, "\n".join(problems)
    assert not any(tmp_path.iterdir())


def test_a_command_that_does_not_exist_is_found():
    assert "no make target" in problem(["make", "tabel1"])
    assert "sampler=nuts" in problem([PYTHON, "train.py", "sampler=nuts"])
    assert "sampler.lrr" in problem([PYTHON, "train.py", "sampler.lrr=0.1"])
    assert "no paper target" in problem([PYTHON, "scripts/reproduce.py", "table9"])
    assert "--scales" in problem([PYTHON, "scripts/reproduce.py", "table1", "--scales", "smoke"])
    assert "does not take" in problem([PYTHON, "scripts/evaluate_run.py", "runs/x", "sampler.lr0=1"])
    assert "no scripts/train_all.py" in problem([PYTHON, "scripts/train_all.py"])


# -------------------------------------------------------------------------------------------------------- site
pytest.importorskip("sphinx", reason="the docs extra is not installed (make install installs it)")


def test_the_site_builds_with_every_warning_an_error(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run([sys.executable, "scripts/build_docs.py", "--strict", "--jobs", "1", "--out", str(site)],
                           cwd=ROOT, capture_output=True, text=True)  # one process: the suite's workers hold the cores
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    assert "WARNING" not in build.stderr and not build.stderr.strip(), build.stderr[-3000:]
    assert build.stdout.strip() == f"docs: wrote {site / 'index.html'}"
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ["index", "getting-started", "configuration", "samplers", "api/samplers", "api/schedules",
                 "api/posterior", "api/train", "api/evaluation", "results/csgmcmc/table4"]:
        assert f"{page}.html" in pages, page
    api = (site / "api" / "samplers.html").read_text()
    assert 'id="csg.samplers.SGHMC"' in api and '<span class="math"><math ' in api  # the docstrings' LaTeX, as MathML
    for page in site.rglob("*.html"):  # read offline: no formula left to a script, no script from the network
        html = page.read_text()
        assert "math notranslate nohighlight" not in html and not re.search(r"<script[^>]*mathjax", html, re.I), page
        assert not re.search(r'<script[^>]+src="(https?:)?//', html), page
    configuration = re.sub(r"<[^>]+>", " ", (site / "configuration.html").read_text())
    for option in (ROOT / "configs").rglob("*.yaml"):  # every option of every group is in the generated reference
        assert f" {option.stem} " in configuration, option
    assert " swag.draws_per_cycle " in configuration and " lr_milestones " in configuration


BLOCKER = """
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):  # as if not installed: the training stack of a docs-only install
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""


def test_the_site_builds_without_the_training_stack(tmp_path):
    # a docs-only install (docs/requirements.txt): torch and the rest mocked by autodoc where they are absent
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("csg_docs_conf", ROOT / "docs" / "conf.py")
    conf = module_from_spec(spec)
    spec.loader.exec_module(conf)
    required = {line.split(">")[0].split("=")[0].split("<")[0].strip().replace("-", "_").lower()
                for line in (ROOT / "docs" / "requirements.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert "torch" not in required and {"sphinx", "latex2mathml", "omegaconf"} <= required
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(conf.TRAINING_STACK)))
    site = tmp_path / "site"
    build = subprocess.run([sys.executable, "scripts/build_docs.py", "--strict", "--jobs", "1", "--out", str(site)],
                           cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(tmp_path / "blocker")})
    assert build.returncode == 0 and not build.stderr.strip(), build.stderr[-3000:]
    api = (site / "api" / "samplers.html").read_text()
    assert 'id="csg.samplers.SGHMC"' in api and '<span class="math"><math ' in api


def _mini_build(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    """A strict Sphinx build of one page with the site's extension and settings (docs/conf.py)."""
    source = tmp_path / "src"
    source.mkdir(parents=True)
    (source / "conf.py").write_text((ROOT / "docs" / "conf.py").read_text().replace(
        'sys.path[:0] = [str(REPOSITORY), str(DOCS / "_ext")]', f'sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT / "docs" / "_ext")!r}]'))
    (source / "index.md").write_text(textwrap.dedent(page))
    (tmp_path / "mini_api.py").write_text('"""A module."""\n\n\ndef documented():\n    """Yes."""\n\n\ndef bare():\n    pass\n')
    return subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-q",
                           str(source), str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "CSG_REPOSITORY": str(ROOT)})


def test_formulas_are_written_as_mathml_when_the_site_is_built(tmp_path):
    built = _mini_build(tmp_path / "m", r"""
        # Title

        Inline $\alpha_k = \frac{\alpha_0}{2}$ and a display:

        $$
        \theta_{k+1} = \theta_k - \alpha_k \nabla \tilde U(\theta_k) + \sqrt{2 \alpha_k T}\,\xi_k
        $$

        \begin{align}
        a &= b + c \\
        d &= e
        \end{align}
        """)
    assert built.returncode == 0, built.stderr
    html = (tmp_path / "m" / "out" / "index.html").read_text()
    assert html.count("<math ") == 3 and 'display="block"' in html and "<mfrac>" in html
    assert "\\(" not in html and "\\[" not in html and "$$" not in html  # nothing left as LaTeX for a script
    broken = _mini_build(tmp_path / "n", r"""
        # Title

        $\frac{1}{$
        """)
    assert broken.returncode != 0 and "latex2mathml cannot convert" in broken.stderr


def test_strict_mode_refuses_an_undocumented_name_a_broken_reference_and_a_broken_link(tmp_path):
    fine = _mini_build(tmp_path / "a", """\
        # Title

        {py:mod}`csg.engine.step.single` exists in the code, unlinked; [a page](index.md)
        """)
    assert fine.returncode == 0, fine.stderr
    undocumented = _mini_build(tmp_path / "b", """\
        # Title

        ```{eval-rst}
        .. automodule:: mini_api
        ```
        """)
    assert undocumented.returncode != 0 and "undocumented public name on an API page: mini_api.bare" in undocumented.stderr
    assert "mini_api.documented" not in undocumented.stderr
    broken = _mini_build(tmp_path / "c", """\
        # Title

        {py:mod}`csg.no_such_module` and [a page that is not there](missing.md)
        """)
    assert broken.returncode != 0
    assert "csg.no_such_module" in broken.stderr and "missing" in broken.stderr


def table_cells(text: str) -> list[str]:
    """The cells of every Markdown table row of ``text`` (its rules left out)."""
    rows = [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    return [cell.strip() for row in rows for cell in row.strip().strip("|").split("|")]


def test_the_readme_is_a_door():
    """Issue 75: a newcomer sees at a glance what works, what it measured and what to type: no line over 600
    characters, no table cell over 40 words (the detail is in docs/results.md)."""
    text = (ROOT / "README.md").read_text()
    long_lines = [number for number, line in enumerate(text.splitlines(), 1) if len(line) > 600]
    wordy = [cell[:60] for cell in table_cells(text) if len(cell.split()) > 40]
    assert not long_lines and not wordy, (long_lines, wordy)
    assert len(table_cells(text)) >= 4 * 20  # the paper tables' rows are there
    assert table_cells("| a b | c |\n|---|---:|\n| d | e f g |") == ["a b", "c", "d", "e f g"]
