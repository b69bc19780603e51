"""The package's layout is its architecture (docs/architecture.md): layers, no import circles, short modules.

Layers, low to high: the shared rooms (errors, paths, io, components, schedules, samplers, data, models,
evaluation) < engine < checks < posterior < launch, integrations < ``csg/__main__.py`` (the entry point:
``csg-train``, ``python -m csg``, what ``train.py`` runs). A module imports only from its own layer or lower
ones, at module level or inside a function alike; ``csg/__init__.py`` (the facade: ``csg.train``,
``csg.Posterior``) is the one exemption. Checked on the source's syntax trees, so that the rules cover every
import, not only those a test happens to run (import-linter would check the layers only; the sizes, the
private names and the loose modules are ours).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"engine": 1, "checks": 2, "posterior": 3, "launch": 4, "integrations": 4, "__main__": 6}  # others: 0
MAX_FRAMEWORK_LINES = 22_000  # csg/, what pip installs; the research studies live beside it in studies/
MAX_LINES = 400
MAX_LOOSE_MODULES = 7  # 7: csg.values, the value checks csg's config checks and the studies' share


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


def _imports(module: str, path: Path, modules: set[str], package: str) -> list[tuple[str, str | None]]:
    """(imported module, name imported from it or None) for every import of ``package`` in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == package]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != package:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule, None) if submodule in modules else (source, alias.name))
    return found


def layout_problems(root: Path, package: str = "csg") -> list[str]:
    """Every breach of the layout rules in ``root/package``, one line each (empty: the layout holds)."""
    files = {_module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = defaultdict(set)
    problems = []
    for module, path in files.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            problems.append(f"{module}: {lines} lines (at most {MAX_LINES})")
        for imported, name in _imports(module, path, set(files), package):
            if imported == module or imported not in files:
                continue
            graph[module].add(imported)
            if module != package and _layer(imported) > _layer(module):
                problems.append(f"{module} imports {imported}: a lower layer imports a higher one")
            if name and name.startswith("_"):
                problems.append(f"{module} imports the private name {name} from {imported}")
    # the facade (__init__.py) and the entry point (__main__.py) are the package's own, not loose rooms
    loose = [module for module, path in files.items()
             if module.count(".") == 1 and path.name not in ("__init__.py", "__main__.py")]
    if len(loose) > MAX_LOOSE_MODULES:
        problems.append(f"{package}/ has {len(loose)} loose modules (at most {MAX_LOOSE_MODULES}): {', '.join(loose)}")
    problems += [f"an import circle: {' -> '.join(circle)}" for circle in _circles(graph)]
    return problems


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_the_package_keeps_its_layers_and_sizes():
    assert layout_problems(ROOT) == []


def test_each_rule_is_caught_on_a_constructed_package(tmp_path):
    package = tmp_path / "pkg"
    for folder in ("engine", "launch", "data"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from pkg.launch import run\n")  # the facade may import any layer
    (package / "engine" / "loop.py").write_text("def f():\n    from pkg.launch.api import go\n")  # upward, lazy
    (package / "launch" / "api.py").write_text("def go():\n    pass\n")
    (package / "launch" / "up.py").write_text("from pkg.__main__ import main\n")  # the entry point: above launch
    (package / "__main__.py").write_text("from pkg.launch import api\nmain = 1\n")  # the top: may import any layer
    (package / "launch" / "run.py").write_text("from pkg.engine import loop\nfrom .cli import _private\n"
                                               "def go():\n    pass\n")
    (package / "launch" / "cli.py").write_text("import pkg.launch.run\n_private = 1\n")  # run <-> cli
    (package / "data" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    for number in range(MAX_LOOSE_MODULES + 1):
        (package / f"loose{number}.py").write_text("")

    problems = layout_problems(tmp_path, "pkg")

    assert "pkg.engine.loop imports pkg.launch.api: a lower layer imports a higher one" in problems
    assert "pkg.launch.run imports the private name _private from pkg.launch.cli" in problems
    assert f"pkg.data.big: {MAX_LINES + 1} lines (at most {MAX_LINES})" in problems
    assert any(problem.startswith(f"pkg/ has {MAX_LOOSE_MODULES + 1} loose modules") for problem in problems)
    assert "an import circle: pkg.launch.cli -> pkg.launch.run" in problems
    assert "pkg.launch.up imports pkg.__main__: a lower layer imports a higher one" in problems
    assert len(problems) == 6  # the facade's and the entry point's imports of launch, launch's of engine: allowed


# The engine's boundary: the modules that turn a composed config into a run's objects (and read Hydra's run
# directory). Every other engine module takes typed objects: no omegaconf or hydra import, no `cfg` argument.
ENGINE_BOUNDARY = {"settings", "rundir"}  # settings: the typed tree; rundir: Hydra's output folder
HYDRA_INTERNALS = "csg/checks/hydra_internals.py"  # the one module that may use Hydra's or OmegaConf's internals
PRIVATE_NODE_METHODS = {"_get_node", "_is_none", "_value"}
CONFIG_TYPES = re.compile(r"\b(DictConfig|Config)\b")  # a composed config: omegaconf's type, or csg.components.Config


def config_problems(engine: Path) -> list[str]:
    """Every engine module below the boundary that imports omegaconf or hydra, or takes a config."""
    problems = []
    for path in sorted(engine.rglob("*.py")):
        if path.parent == engine and path.stem in ENGINE_BOUNDARY:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            problems += [f"{path.name} imports {name}" for name in names
                         if name.split(".")[0] in ("omegaconf", "hydra")]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                problems += [f"{path.name}: {node.name}({a.arg}) takes a config" for a in arguments if a.arg == "cfg"
                             or (a.annotation is not None and CONFIG_TYPES.search(ast.unparse(a.annotation)))]
    return problems


def internals_problems(root: Path) -> list[str]:
    """Every use of Hydra's internals (``hydra._internal``) or OmegaConf's private node methods outside the adapter."""
    problems = []
    for path in sorted((root / "csg").rglob("*.py")):
        if path.relative_to(root).as_posix() == HYDRA_INTERNALS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom)
                     else [])  # `from hydra import _internal` and `from omegaconf._utils import x` alike
            problems += [f"{path.name} imports {name}" for name in names
                         if name.startswith(("hydra._internal", "omegaconf._"))]
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_NODE_METHODS:
                problems.append(f"{path.name}:{node.lineno} calls {node.attr}")
    return problems


# omegaconf, the composed config's type, is imported only where a config is composed, checked or read back: checks/,
# launch/, the entry point, and at most three modules more (the boundary). Below it, every room takes built objects,
# plain values or a config read by key (csg.components.select), and imports no omegaconf (issue 75).
OMEGACONF_ROOMS = ("checks", "launch", "__main__.py")
OMEGACONF_BOUNDARY = {
    "csg/__init__.py": "registers the configs' csg_* resolvers, before any config is composed",
    "csg/engine/settings.py": "reads a composed config once into the typed settings (run_settings)",
    "csg/reporting/__init__.py": "reads a run's YAML as OmegaConf reads it (read_yaml, parse_yaml)",
}


def omegaconf_problems(root: Path) -> list[str]:
    """Every import of omegaconf (at module level or in a function) outside :data:`OMEGACONF_ROOMS` and
    :data:`OMEGACONF_BOUNDARY`."""
    problems = []
    for path in sorted((root / "csg").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if path.relative_to(root / "csg").parts[0] in OMEGACONF_ROOMS or relative in OMEGACONF_BOUNDARY:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            problems += [f"{relative} imports {name}" for name in names if name.split(".")[0] == "omegaconf"]
    return problems


def test_omegaconf_is_imported_only_at_the_boundary():
    assert len(OMEGACONF_BOUNDARY) <= 3
    assert all((ROOT / path).is_file() for path in OMEGACONF_BOUNDARY)
    assert omegaconf_problems(ROOT) == []


def test_the_omegaconf_rule_catches_a_constructed_breach(tmp_path):
    files = {"csg/checks/config.py": "from omegaconf import DictConfig\n",  # a room that composes configs: allowed
             "csg/engine/settings.py": "from omegaconf import OmegaConf\n",  # the boundary: allowed
             "csg/engine/build.py": "from omegaconf import OmegaConf\n",  # below the boundary now: refused
             "csg/__main__.py": "import omegaconf\n",
             "csg/engine/chain.py": "from omegaconf import OmegaConf\n",
             "csg/posterior/store.py": "def load():\n    from omegaconf.errors import OmegaConfBaseException\n",
             "csg/io/trust.py": "import os, omegaconf\n",
             "csg/components.py": "from csg.engine import omegaconf\n"}  # a name, not the package
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert omegaconf_problems(tmp_path) == ["csg/engine/build.py imports omegaconf", "csg/engine/chain.py imports omegaconf",
                                            "csg/io/trust.py imports omegaconf", "csg/posterior/store.py imports omegaconf.errors"]


def test_the_engine_takes_no_config_below_its_boundary():
    assert config_problems(ROOT / "csg" / "engine") == []


def test_hydras_internals_are_used_in_one_adapter_module():
    assert internals_problems(ROOT) == []
    assert (ROOT / HYDRA_INTERNALS).is_file()


def test_the_boundary_and_adapter_rules_catch_a_constructed_breach(tmp_path):
    engine = tmp_path / "csg" / "engine"
    (engine / "step").mkdir(parents=True)
    (engine / "settings.py").write_text("from omegaconf import DictConfig\ndef f(cfg): ...\n")  # the boundary: allowed
    (engine / "build.py").write_text("def build_model(settings, data): ...\ndef build_data(cfg): ...\n")
    (engine / "loop.py").write_text("def run(settings, cfg=None):\n    from hydra.utils import instantiate\n")
    (engine / "step" / "single.py").write_text("def make(node: 'DictConfig'): ...\ndef run(settings: Config): ...\n")
    (tmp_path / "csg" / "checks").mkdir()
    (tmp_path / "csg" / "checks" / "groups.py").write_text("from hydra._internal.utils import get_args_parser\n"
                                                           "def f(cfg):\n    return cfg._get_node('data')\n")
    (tmp_path / "csg" / "checks" / "preflight.py").write_text("from hydra import _internal\n"
                                                               "from omegaconf._utils import get_value_kind\n")
    (tmp_path / "csg" / "checks" / "hydra_internals.py").write_text("import hydra._internal.utils\n")
    assert config_problems(engine) == ["build.py: build_data(cfg) takes a config", "loop.py: run(cfg) takes a config", "loop.py imports hydra.utils",
                                       "single.py: make(node) takes a config", "single.py: run(settings) takes a config"]
    assert internals_problems(tmp_path) == ["groups.py imports hydra._internal.utils.get_args_parser",
                                            "groups.py:3 calls _get_node", "preflight.py imports hydra._internal",
                                            "preflight.py imports omegaconf._utils.get_value_kind"]


# Research studies use csg as its users do, through the public API (csg.train, csg.build, csg.check_command,
# csg.Chain, csg.Posterior, samplers, schedules, data, models, evaluation, csg.reporting), never the machinery
# below it. What still reaches below, each until its study is rewritten on the public API (issue 75): none now
# (fig3 reads its runs through csg.Posterior.load); an entry is (study module, internal module it imports).
INTERNAL = ("engine", "checks", "launch", "io")
NOT_YET_PUBLIC: set[tuple[str, str]] = set()


def internal_imports(root: Path, package: str = "csg", studies: str = "studies") -> set[tuple[str, str]]:
    """(module, internal module it imports) for every import of :data:`INTERNAL`'s rooms of ``package`` in the
    package ``root/studies``."""
    framework = {_module_name(path, root) for path in sorted((root / package).rglob("*.py"))}
    found = set()
    for path in sorted((root / studies).rglob("*.py")):
        module = _module_name(path, root)
        for imported, _ in _imports(module, path, framework, package):
            if any(imported == f"{package}.{room}" or imported.startswith(f"{package}.{room}.") for room in INTERNAL):
                found.add((module, imported))
    return found


def test_the_framework_is_what_you_install_and_the_studies_keep_the_layout_rules():
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in (ROOT / "csg").rglob("*.py"))
    assert lines <= MAX_FRAMEWORK_LINES, f"csg/ has {lines} lines of Python (at most {MAX_FRAMEWORK_LINES})"
    assert not (ROOT / "csg" / "studies").exists()
    assert layout_problems(ROOT, "studies") == []


def test_the_studies_use_csg_through_its_public_api():
    found = internal_imports(ROOT)
    assert found - NOT_YET_PUBLIC == set(), "a study imports csg's machinery: use the public API (csg.reporting, ...)"
    assert NOT_YET_PUBLIC - found == set(), "rewritten on the public API: take it off NOT_YET_PUBLIC"


def test_an_internal_import_of_a_study_is_caught(tmp_path):
    package = tmp_path / "pkg"
    for folder in ("io", "engine"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "io" / "atomic.py").write_text("def write():\n    pass\n")
    (package / "engine" / "build.py").write_text("def build():\n    pass\n")
    (package / "reporting.py").write_text("from pkg.io.atomic import write\n")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "__init__.py").write_text("")
    (tmp_path / "studies" / "ok.py").write_text("from pkg.reporting import write\nimport pkg\n")
    (tmp_path / "studies" / "bad.py").write_text("def f():\n    from pkg.engine.build import build\n")
    (tmp_path / "studies" / "worse.py").write_text("from pkg.io import atomic\n")
    assert internal_imports(tmp_path, "pkg") == {("studies.bad", "pkg.engine.build"), ("studies.worse", "pkg.io.atomic")}
