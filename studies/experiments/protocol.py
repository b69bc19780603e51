"""Whether runs are a paper table's protocol: its preset and budget, its methods and its seeds.

A committed table (``results/<paper>[/smoke]/``) says "preset ``experiment=table1_smoke``, seeds 0, 1, 2"; a
report may replace it only with runs made that way. The protocol of a table at a scale is every run of its sweeps
(:func:`studies.experiments.sweeps.expand` with the preset's own budget and the table's seeds), each composed as
``train.py`` composes it (the preset, then the run's sweep overrides). A run matches when its saved config
(``.hydra/config.yaml``, read as data: :func:`csg.reporting.read_yaml`) has the composed config's value at every key
but those of :data:`NOT_PROTOCOL` (where and how a run is computed and logged, not what) and ``seed``, and its
seed is one of the table's. A run of a method the table does not have is no row of it, and an added method
(``--add``) is compared with its own recorded overrides under the protocol.

Runs that are missing (an incomplete sweep) are not a difference: the report lists them. A command differs too
when it asks for another preset (``--preset``), other seeds (``--seeds``) or overrides of protocol keys
(``KEY=VALUE``). :func:`check_runs` and :func:`check_command` say what differs, in words, one item per
difference; :func:`mark` says so in the header of a table written elsewhere (``--out``)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from csg.reporting import write_text

# Keys that say where and how a run is computed, read, checkpointed and logged, not what it computes: a run may
# differ from the preset in them and still be the table's (the committed smoke tables ran on a CPU, the full ones
# on GPUs). Everything else is the protocol, including keys a run has and the preset lacks.
NOT_PROTOCOL = ("logger", "logger.*", "trainer.device", "trainer.compile", "trainer.stack_chains",
                "trainer.deterministic", "trainer.log_every_n_steps", "trainer.log_every_n_epochs", "trainer.progress",
                "trainer.checkpoint.*", "data.root", "data.download", "data.eval_batch_size", "data.num_workers",
                "data.device_resident", "ood.root", "ood.download", "seed")
SHOWN = 6  # differing keys named in full; the rest counted
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.-]*)\s*:")


def is_protocol_key(key: str) -> bool:
    """Whether a difference at ``key`` makes a run another protocol's (see :data:`NOT_PROTOCOL`)."""
    return not any(fnmatch.fnmatchcase(key, pattern) for pattern in NOT_PROTOCOL)


@dataclass
class Check:
    """What differs between runs (or a command) and a table's protocol."""

    preset: str | None                                   # the table's preset at this scale (None: its sweeps pick)
    items: list[str] = field(default_factory=list)       # one per difference, in words
    coverage: list[str] = field(default_factory=list)    # "methods 2 of 8", "seeds 0 of 0, 1, 2" when partial
    flag: tuple[str, str] | None = None                  # the command's first flag or override that differs

    def __bool__(self) -> bool:
        return bool(self.items)

    def text(self) -> str:
        """The differences, then (when the runs are not all of the table's) how much of it they cover."""
        return "; ".join([*self.items, *self.coverage])

    def against(self) -> str:
        return f"experiment={self.preset}" if self.preset else "the presets of its sweeps"


def point_overrides(point: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in point.items()]


_COMPOSED: dict[tuple[str, ...], dict[str, Any] | str] = {}  # (configs folder, *overrides) -> leaves: one process


class Composer:
    """``train.py``'s config of a sweep point (the preset, then its overrides), composed once per distinct call in
    a process (Hydra takes about 0.1 s a composition)."""

    def __init__(self, configs: Path):
        self.configs = configs
        self.cache = _COMPOSED

    def leaves(self, overrides: list[str]) -> dict[str, Any] | str:
        """The composed config's leaves (:func:`leaves`), or why it cannot be composed (one line)."""
        key = (str(self.configs), *overrides)
        if key not in self.cache:
            from hydra import compose, initialize_config_dir

            import csg  # noqa: F401  (registers the config resolvers)
            from csg.errors import first_line

            try:
                with initialize_config_dir(config_dir=str(self.configs), version_base="1.3"):
                    self.cache[key] = leaves(compose("config", overrides=overrides))
            except Exception as error:  # noqa: BLE001 - Hydra's and OmegaConf's errors, in one line
                self.cache[key] = first_line(error)
        return self.cache[key]


def leaves(cfg: DictConfig) -> dict[str, Any]:
    """``{dotted key: value}`` of every leaf of ``cfg`` (a list is one leaf), interpolations resolved where every
    resolver the config names is one :data:`csg.reporting.SAFE_RESOLVERS` allows, else left as written."""
    from csg.reporting import SAFE_RESOLVERS, flat_keys

    flat = flat_keys(OmegaConf.to_container(cfg, resolve=False))
    if not all(name in SAFE_RESOLVERS for value in flat.values() for name in _RESOLVER.findall(str(value))):
        return flat
    for key, value in flat.items():
        if "${" in str(value):
            try:
                node = OmegaConf.select(cfg, key)
                flat[key] = OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) \
                    else node
            except Exception:  # noqa: BLE001 - an interpolation to nothing, a resolver that needs a running Hydra app
                pass
    return flat


def _text(value: Any) -> str:
    if value is _ABSENT:
        return "absent"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, ListConfig)):
        return "[" + ", ".join(_text(item) for item in value) + "]"
    return str(value)


_ABSENT = object()


def compare(run: dict[str, Any], preset: dict[str, Any], tuned: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """``{key: (the run's value, the preset's)}`` at every protocol key where they differ (absent: ``_ABSENT``), but
    the keys a tuning stage sets (``tuned``: the report checks them against the stage's picks)."""
    out = {}
    for key in sorted(set(run) | set(preset)):
        mine, theirs = run.get(key, _ABSENT), preset.get(key, _ABSENT)
        if is_protocol_key(key) and key not in tuned and not _same(mine, theirs):
            out[key] = (mine, theirs)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


class Differences:
    """Differences gathered over many runs: per key, the values runs have, the preset's, and how many runs."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[dict[str, None], dict[str, None], set[str]]] = {}
        self.other: list[str] = []

    def add(self, differences: dict[str, tuple[Any, Any]], who: str) -> None:
        for key, (mine, theirs) in differences.items():
            values, presets, runs = self.keys.setdefault(key, ({}, {}, set()))
            values[_text(mine)] = None
            presets[_text(theirs)] = None
            runs.add(who)

    def items(self, compared: int) -> list[str]:
        out = []
        for key, (values, presets, runs) in list(self.keys.items())[:SHOWN]:
            where = f" in {len(runs)} of {compared} runs" if 0 < len(runs) < compared else ""
            shown = f"{key} absent" if list(values) == ["absent"] else f"{key}={', '.join(values)}"
            out.append(f"{shown}{where} (the preset: {', '.join(presets)})")
        if len(self.keys) > SHOWN:
            out.append(f"{len(self.keys) - SHOWN} more keys")
        return out + self.other


def tuned_keys(plan) -> tuple[str, ...]:
    """The keys ``plan``'s tuning stage sets per method (none without one)."""
    tuning = getattr(plan, "tuning", None)
    return (tuning.key,) if tuning else ()


def _candidates(plan, scale: str, epochs: int, preset: str | None, composer: Composer,
                added: dict[str, list[str]]) -> tuple[list[tuple[tuple, dict, Any]], list[str]]:
    """(method key, sweep point, composed leaves or why not) of every run of the protocol, less its seed; and the
    table's seeds. An added method's points are its recorded overrides under the protocol."""
    from studies.experiments.added import added_runs
    from studies.experiments.sweeps import expand, expected_runs

    seeds = plan.seeds[scale]
    base = [f"experiment={preset}"] if preset else []
    out, seen = [], set()
    points = expected_runs(expand(plan, scale, epochs, seeds))
    for point in points:
        rest = {k: v for k, v in point.items() if k != "seed"}
        key = tuple(rest.items())
        if key in seen:
            continue
        seen.add(key)
        method = tuple((k, v) for k, v in rest.items() if k != "data")
        composed = composer.leaves([*base, *point_overrides(point)])
        if isinstance(composed, str):  # the table's own sweeps: they compose, or the table is broken
            from csg.errors import ConfigError

            words = " ".join(point_overrides(point))
            raise ConfigError("experiment", preset, f"a preset whose sweeps compose: {words} does not ({composed})")
        out.append((method, point, composed))
    if added and getattr(plan, "add_sweep", None) is not None:
        for name, overrides in added.items():
            for point in added_runs(plan, scale, epochs, seeds.split(",")[0], [name]):
                rest = [f"{k}={v}" for k, v in point.items() if k != "sampler.name"]
                out.append(((("added", name),), point, composer.leaves([*base, *overrides, *rest])))
    return out, seeds.split(",")


def check_runs(plan, scale: str, epochs: int, preset: str | None, runs, configs: Path,
               added: dict[str, list[str]] | None = None) -> Check:
    """How the finished runs (``runs``: :func:`studies.experiments.aggregate.load_runs`'s frame) differ from the
    protocol of ``plan`` at ``scale`` (``preset``: the table's, ``epochs``: its budget): per protocol key, the values
    of the runs that differ (and in how many), and seeds the table does not have. A run whose ``sampler.name`` no
    run of the protocol has is no row of the table and is not compared. The runs' methods and seeds, when they are
    not all the table's, go in :attr:`Check.coverage`."""
    from csg.reporting import read_yaml

    composer = Composer(configs)
    candidates, seeds = _candidates(plan, scale, epochs, preset, composer, added or {})
    check = Check(preset)
    found = Differences()
    methods: set[tuple] = set()
    seen_seeds: set[str] = set()
    outside: dict[str, None] = {}
    compared = 0
    done = runs[runs.status == "done"] if len(runs) else runs
    for run_dir in (done.run_dir if len(done) else []):
        run = leaves(read_yaml(Path(run_dir) / ".hydra" / "config.yaml"))
        name = run.get("sampler.name")
        mine = [c for c in candidates if isinstance(c[2], dict) and c[2].get("sampler.name") == name]
        broken = [c for c in candidates if isinstance(c[2], str) and c[1].get("sampler.name") == name]
        if broken:  # an added method whose recorded overrides do not compose here
            why = f"the added method {name}'s overrides do not compose ({broken[0][2]})"
            found.other += [why] if why not in found.other else []
            continue
        if not mine:
            continue  # not a method of the table: the report lists it as left out
        compared += 1
        method, _, _, differences = min(((m, p, c, compare(run, c, tuned_keys(plan))) for m, p, c in mine),
                                              key=lambda t: len(t[3]))
        methods.add(method)
        found.add(differences, str(run_dir))
        seed = _text(run.get("seed", _ABSENT))
        if seed in seeds:
            seen_seeds.add(seed)
        else:
            outside[seed] = None
    check.items = found.items(compared)
    if outside:
        check.items.append(f"seed {', '.join(outside)} (the table's: {', '.join(seeds)})")
    total = {c[0] for c in candidates if c[0][:1] != ("added",)}
    table_methods = {m for m in methods if m[:1] != ("added",)}
    if len(table_methods) < len(total) or len(seen_seeds) < len(seeds):
        check.coverage = [f"methods {len(table_methods)} of {len(total)}",
                          f"seeds {', '.join(sorted(seen_seeds, key=int)) or 'none'} of {', '.join(seeds)}"]
    return check


def check_command(plan, scale: str, epochs: int, table_preset: str | None, *, preset: str | None,
                  seeds: str | None, overrides: list[str], configs: Path, compose: bool = True) -> Check:
    """How a command differs from the protocol: another preset (``--preset``), other seeds (``--seeds``), and, with
    ``compose`` (before it runs), the protocol keys that the preset and its ``overrides`` change in any run of the
    sweeps (each point composed with and without them)."""
    from studies.experiments.launch import without_launcher

    check = Check(table_preset)
    if preset is not None and preset != table_preset:
        check.items.append(f"--preset {preset} (the table's: {table_preset})")
        check.flag = ("--preset", preset)
    if seeds is not None:
        table_seeds = plan.seeds[scale].split(",")
        if sorted(set(seeds.split(",")), key=int) != sorted(set(table_seeds), key=int):
            check.items.append(f"--seeds {seeds} (the table's: {', '.join(table_seeds)})")
            check.flag = check.flag or ("--seeds", seeds)
    overrides = without_launcher(overrides)
    if not compose or (not overrides and (preset is None or preset == table_preset)):
        return check
    composer = Composer(configs)
    candidates, _ = _candidates(plan, scale, epochs, table_preset, composer, {})
    found = Differences()
    base = [f"experiment={preset or table_preset}"] if (preset or table_preset) else []
    for _, point, expected in candidates:
        made = composer.leaves([*base, *point_overrides(point), *overrides])
        if isinstance(made, str):  # train.py refuses it too; said here as a difference, not skipped
            found.other = [f"{' '.join(point_overrides(point))} does not compose with the command's ({made})"]
        else:
            found.add(compare(made, expected, tuned_keys(plan)), str(point))
    check.items += found.items(len(candidates))
    if (found.keys or found.other) and check.flag is None:
        keys = [(o, o.lstrip("+~").split("=", 1)[0]) for o in overrides]
        changed = ([o for o, k in keys if k in found.keys] or [o for o, k in keys if is_protocol_key(k)]
                   or overrides)
        key, _, value = changed[0].partition("=")
        check.flag = (key, value)
    return check


def mark(path: Path, check: Check, out: Path) -> None:
    """Say in the header of the report ``path`` (its first line, the title, kept first) that its runs are not the
    table's protocol, and how they differ."""
    lines = path.read_text().splitlines()
    note = (f"> **Not this table's protocol**: the runs differ from {check.against()} and the table's methods and "
            f"seeds: {check.text()}. Written to `{out}` (`--out`), not in place of the committed table; where the text "
            "below names the preset, it is the one the runs started from, not the budget they ran.")
    write_text(path, "\n".join([*lines[:1], "", note, *lines[1:]]) + "\n")
