"""Checks of a composed run config, before anything is built or trained.

Every failed check raises :class:`csg.errors.ConfigError` naming the dotted
key, the value given and what is allowed. Checks that need the data (does
``samples_per_cycle`` fit the sampling stage?) happen in :mod:`csg.engine.build` once
the data set's size is known, still before training.
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from csg import values as value_checks
from csg.values import is_int, is_number
from csg.checks.sampling_settings import check_budget, check_holdout, check_prior, check_sampling_step
from csg.errors import ConfigError
from csg.components import has_target, locate, target_of
from csg.checks.likelihood import check_likelihood

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
CYCLE_WEIGHTS = ("equal", "harmonic")
STACK_CHAINS = (None, False, True, "vmap", "streams")  # trainer.stack_chains; None: a run saved before the key
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def stack_method(value) -> str | None:
    """The method of ``trainer.stack_chains``: None (chains one after another), "vmap" (``true`` too) or "streams"."""
    return "vmap" if value is True or value == "vmap" else "streams" if value == "streams" else None


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def raw_value(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` (dotted, list items as ``[i]`` or ``.i``) as typed, its interpolation unresolved; None
    where the path cannot be followed (for a message)."""
    node = OmegaConf.to_container(cfg, resolve=False)
    for part in key.replace("[", ".").replace("]", "").split("."):
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return None
    return node


# The value checks read the key, then check its value with csg.values (the one copy of each check's logic).
def positive_int(cfg: DictConfig, key: str) -> int:
    """An integer >= 1 (``a positive integer``)."""
    return value_checks.integer(key, _get(cfg, key), minimum=1)


def non_negative_int(cfg: DictConfig, key: str) -> int:
    """An integer >= 0 (``an integer >= 0``)."""
    return value_checks.integer(key, _get(cfg, key), minimum=0)


def number(cfg: DictConfig, key: str, *, minimum: float, strict: bool = False, below: float | None = None) -> float:
    """A finite real number >= ``minimum`` (> if ``strict``), and < ``below`` if given (``a number in [0, 1)``)."""
    if below is None:
        return value_checks.number(key, _get(cfg, key), minimum=minimum, strict=strict)
    return value_checks.number(key, _get(cfg, key), minimum=minimum, strict=strict, maximum=below, below=True,
                               noun="a number")


def one_of(cfg: DictConfig, key: str, choices: tuple[str, ...] | list[str]) -> str:
    """One of ``choices``, compared as text (``trainer.precision=32`` is ``"32"``)."""
    return value_checks.one_of(key, _get(cfg, key), choices)


def validate(cfg: DictConfig) -> None:
    """Check every key a run reads, group by group (:data:`CHECKS`); raise :class:`ConfigError` at the first bad one."""
    for check in CHECKS:
        check(cfg)


# The built-in names, read by the checks before torch is imported (a refusal takes a fraction of a second, not the
# two of torch's import); a name not among them is looked up where it is registered (importing torch): a data set
# or model a user registers, a timm architecture. tests/checks/test_configs.py holds them equal to the registries.
DATASETS = ("australian", "boston", "cifar10", "cifar100", "concrete", "diabetes", "energy", "fashion_mnist", "german",
            "heart", "imagenet", "kin8nm", "mnist", "mnist5k", "naval", "power", "protein", "wine_red", "yacht")
MODELS = ("logreg", "mlp", "resnet18", "resnet20", "resnet20_frn", "resnet32", "resnet50", "resnet56", "small_cnn",
          "wrn16_8")
OOD_SETS = ("none", "notmnist", "fashion_mnist", "svhn")
UPDATE_RULES = ("sgld", "sghmc", "psgld")


def check_data(cfg: DictConfig) -> None:
    """``data``: a data set csg knows (or ``data=custom``'s callable), where it lives, its batch sizes and workers."""
    if has_target(cfg.data):
        _validate_custom_data(cfg)
    elif str(_get(cfg, "data.name")) not in DATASETS:
        from csg.data import list_datasets

        one_of(cfg, "data.name", list_datasets())
    resident = _get(cfg, "data.device_resident")
    if resident is not None and resident not in (True, False, "auto"):
        raise ConfigError("data.device_resident", resident, "auto, true or false")
    augment = _get(cfg, "data.augment")
    if augment is not None and augment not in (True, False):
        raise ConfigError("data.augment", augment, "true or false")
    positive_int(cfg, "data.batch_size")
    positive_int(cfg, "data.eval_batch_size")
    non_negative_int(cfg, "data.num_workers")
    check_holdout(cfg)


def check_model(cfg: DictConfig) -> None:
    """``model``: a model csg knows, a timm model, or ``model=custom``'s callable."""
    if has_target(cfg.model):
        locate(target_of(cfg, "model._target_"), "model._target_")
        return
    if str(_get(cfg, "model.name")) in MODELS:
        return
    from csg.models import is_known_model, list_models

    if not is_known_model(str(_get(cfg, "model.name"))):
        raise ConfigError("model.name", _get(cfg, "model.name"), f"one of {', '.join(list_models())}, or a timm model "
                          "name, or model=custom with model._target_=<your module.Callable>")


def check_ood(cfg: DictConfig) -> None:
    """``ood``: an out-of-distribution set csg knows."""
    one_of(cfg, "ood.name", OOD_SETS)


def check_sampler(cfg: DictConfig) -> None:
    """``sampler``: its update rule (or ``sampler=custom``'s optimizer), learning-rate schedule, cycles, chains,
    and the sections of contour, replica-exchange, energy and SWAG samplers."""
    from csg.schedules import SCHEDULES

    custom_sampler = cfg.sampler.get("optimizer") is not None
    if custom_sampler:
        _validate_custom_sampler(cfg)
    else:
        update = one_of(cfg, "sampler.update_rule", UPDATE_RULES)
    schedule = one_of(cfg, "sampler.schedule", SCHEDULES)
    lr0 = number(cfg, "sampler.lr0", minimum=0, strict=True)
    positive_int(cfg, "sampler.cycles")
    number(cfg, "sampler.explore", minimum=0, below=1)
    number(cfg, "sampler.temperature", minimum=0)
    positive_int(cfg, "sampler.samples_per_cycle")
    number(cfg, "sampler.weight_decay", minimum=0)
    check_sampling_step(cfg)
    check_prior(cfg)
    if not custom_sampler:
        momentum = number(cfg, "sampler.momentum", minimum=0, below=1)
        if update in ("sgld", "psgld") and momentum != 0:
            raise ConfigError("sampler.momentum", momentum, f"0 with sampler.update_rule={update} (SGLD has no momentum)")
        if update == "psgld":
            number(cfg, "sampler.alpha", minimum=0, below=1)
            number(cfg, "sampler.eps", minimum=0, strict=True)
            for section in ("contour", "replica", "swag"):
                if cfg.sampler.get(section) is not None:
                    raise ConfigError(f"sampler.{section}", _get(cfg, f"sampler.{section}"), "not set with "
                                      "sampler.update_rule=psgld (contour, replica and SWAG samplers are SGLD's or SGHMC's)")
    if schedule == "decreasing":
        number(cfg, "sampler.lr_final", minimum=0, strict=True, below=lr0)
        number(cfg, "sampler.gamma", minimum=0, strict=True)
    if schedule == "step":
        milestones = _get(cfg, "sampler.lr_milestones")
        if milestones is None or any(not is_number(m) or not 0 < m < 1 for m in milestones):
            raise ConfigError("sampler.lr_milestones", milestones, "a list of fractions of the run in (0, 1)")
        number(cfg, "sampler.lr_factor", minimum=0, strict=True)
    if cfg.sampler.get("contour") is not None:
        _validate_contour(cfg)
    if cfg.sampler.get("replica") is not None:
        _validate_replica(cfg)
    if cfg.sampler.get("energy") is not None and _get(cfg, "sampler.energy.variance_reduction"):
        positive_int(cfg, "sampler.energy.refresh_every_epochs")
    if cfg.sampler.get("swag") is not None:
        _validate_swag(cfg)
    positive_int(cfg, "sampler.chains")


SEED_MAX = 2**63 - 1   # the largest seed torch's and numpy's generators and every int64 record of it hold


def check_seed(cfg: DictConfig) -> None:
    """``seed``: numpy's SeedSequence, which derives every stream, takes no negative entropy; a seed is at most
    :data:`SEED_MAX` (it is written as an int64 in checkpoints and tables)."""
    if non_negative_int(cfg, "seed") > SEED_MAX:
        raise ConfigError("seed", _get(cfg, "seed"), f"an integer from 0 to 2^63 - 1 ({SEED_MAX})")


RESUME_MODES = (True, False, "auto", "always", "never")  # trainer.checkpoint.resume (true is auto)


def check_trainer(cfg: DictConfig) -> None:
    """``trainer``: epochs, device, precision, logging intervals, checkpoints, determinism, stacking, compiling."""
    check_budget(cfg)
    positive_int(cfg, "trainer.epochs")
    device = str(_get(cfg, "trainer.device"))
    if not _DEVICE.match(device):
        raise ConfigError("trainer.device", device, "auto, cpu, cuda, cuda:N or mps")
    one_of(cfg, "trainer.precision", PRECISIONS)
    positive_int(cfg, "trainer.log_every_n_steps")
    positive_int(cfg, "trainer.log_every_n_epochs")
    non_negative_int(cfg, "trainer.checkpoint.every_n_epochs")
    if _get(cfg, "trainer.monitor_every") is not None:  # None: a run saved before the key existed
        non_negative_int(cfg, "trainer.monitor_every")
    value_checks.boolean("trainer.sync_batchnorm", _get(cfg, "trainer.sync_batchnorm"))
    if _get(cfg, "trainer.checkpoint.resume") not in RESUME_MODES:
        raise ConfigError("trainer.checkpoint.resume", _get(cfg, "trainer.checkpoint.resume"),
                          "true or auto (resume an earlier run when there is one), false (move it aside and start "
                          "over), always (only resume) or never (refuse a folder holding one)")
    threads = _get(cfg, "trainer.threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ConfigError("trainer.threads", threads, "null (torch's default: OMP_NUM_THREADS, else the cores) or a "
                          "positive integer")
    if _get(cfg, "trainer.deterministic") not in (None, True, False):  # None: a run saved before the key existed
        raise ConfigError("trainer.deterministic", _get(cfg, "trainer.deterministic"), "true or false")
    if _get(cfg, "trainer.stack_chains") not in STACK_CHAINS:
        raise ConfigError("trainer.stack_chains", _get(cfg, "trainer.stack_chains"),
                          "false (one after another), true or vmap (vectorised), or streams (a CUDA stream per chain)")
    if _get(cfg, "trainer.compile") not in (None, "auto", True, False):
        raise ConfigError("trainer.compile", _get(cfg, "trainer.compile"), "auto (compiled on CUDA), true or false")
    signals = _get(cfg, "trainer.checkpoint.signals")
    allowed_signals = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT")
    if signals is None or any(str(name) not in allowed_signals for name in signals):
        raise ConfigError("trainer.checkpoint.signals", signals, f"a list of {', '.join(allowed_signals)}")


def check_logger(cfg: DictConfig) -> None:
    """``logger``: a logger csg knows (and, for wandb, its mode)."""
    from csg.engine.loggers import LOGGERS, WANDB_MODES

    if one_of(cfg, "logger.name", LOGGERS) == "wandb":
        one_of(cfg, "logger.mode", WANDB_MODES)


def check_evaluation(cfg: DictConfig) -> None:
    """``evaluation``: the cycle weights, the calibration bins and a reference predictive's file (read and checked
    here, before any training: :func:`csg.evaluation.reference_predictive.load_reference`)."""
    one_of(cfg, "evaluation.cycle_weights", CYCLE_WEIGHTS)
    positive_int(cfg, "evaluation.ece_bins")
    reference = cfg.evaluation.get("reference")
    if reference is not None:
        if not isinstance(reference, str) or not reference:
            raise ConfigError("evaluation.reference", reference, "null or the path of a reference .npz file")
        from csg.evaluation.reference_predictive import load_reference

        load_reference(reference)


def check_callbacks(cfg: DictConfig) -> None:
    """``callbacks``: each a mapping with an importable ``_target_``; a class among them defines a phase method
    (:mod:`csg.engine.callbacks`). They are built, and a factory's result checked, before the first step."""
    specs = cfg.get("callbacks")
    if not specs:  # none (an empty mapping, or null)
        return
    from csg.engine.callbacks import PHASES, check_spec, has_a_phase

    if not isinstance(specs, DictConfig):
        raise ConfigError("callbacks", specs, "a mapping of names to callbacks ({_target_: ..., keyword arguments})")
    for name, spec in OmegaConf.to_container(specs, resolve=True).items():
        check_spec(f"callbacks.{name}", spec)
        target = locate(spec["_target_"], f"callbacks.{name}._target_")
        if isinstance(target, type) and not has_a_phase(target):
            raise ConfigError(f"callbacks.{name}._target_", spec["_target_"], f"a class with one of the methods "
                              f"{', '.join(PHASES)}")


def check_trace(cfg: DictConfig) -> None:
    """``trace``: whether to record a trace, its burn-in and its length."""
    if value_checks.boolean("trace.enabled", _get(cfg, "trace.enabled")):
        non_negative_int(cfg, "trace.burnin")
        positive_int(cfg, "trace.samples")


# the checks of a run's config, in the order they run: the components first, then how they are run and recorded
def check_part(cfg: DictConfig) -> None:
    """What is sampled (``sampler.params``, ``sampler.rest``), the weights it starts from (``model.weights``) and
    the adapters (``adapter``): their forms here; whether they fit the model, once it is built
    (:func:`csg.engine.job_checks.check_job`)."""
    params = _get(cfg, "sampler.params")
    if params is not None and (isinstance(params, (str, bytes)) or not OmegaConf.is_list(params)
                               or not all(isinstance(p, (str, int)) and str(p) for p in params)):
        raise ConfigError("sampler.params", params, "null (every parameter) or a list of parameter name globs or "
                          "module names, e.g. sampler.params=[fc.*] or '[*.lora_*]'")
    if _get(cfg, "sampler.rest") is not None:
        one_of(cfg, "sampler.rest", ("frozen", "sgd"))
    weights = _get(cfg, "model.weights")
    if weights is not None and not (isinstance(weights, str) and weights):
        raise ConfigError("model.weights", weights, "null or the path of a state dict file")
    if _get(cfg, "adapter.name") not in (None, "none"):
        one_of(cfg, "adapter.name", ("none", "lora"))
        positive_int(cfg, "adapter.rank")
        number(cfg, "adapter.alpha", minimum=0.0, strict=True)
        modules = _get(cfg, "adapter.modules")
        if not OmegaConf.is_list(modules) or not modules or not all(isinstance(m, str) and m for m in modules):
            raise ConfigError("adapter.modules", modules, "a list of patterns of the model's layer names, e.g. [\"*\"]")


CHECKS = (check_data, check_model, check_likelihood, check_ood, check_sampler, check_seed, check_trainer,
          check_logger, check_evaluation, check_trace, check_part, check_callbacks)


def _validate_custom_data(cfg: DictConfig) -> None:
    """``data=custom``: a label, an importable callable, and the framework's keys of the group."""
    name = _get(cfg, "data.name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("data.name", name, "a label of letters, digits, _ . - (it names run directories)")
    locate(target_of(cfg, "data._target_"), "data._target_")
    classes = _get(cfg, "data.num_classes")
    if classes is not None and (not is_int(classes) or classes < 2):
        raise ConfigError("data.num_classes", classes, "null (from the labels) or an integer >= 2")
    if _get(cfg, "data.in_memory") not in (None, "auto", True, False):
        raise ConfigError("data.in_memory", _get(cfg, "data.in_memory"), "auto, true or false")


def _validate_custom_sampler(cfg: DictConfig) -> None:
    """``sampler=custom``: an importable optimizer, and none of the built-in samplers' own sections."""
    from csg.samplers.custom import check_takes_sampler_keywords

    path = target_of(cfg, "sampler.optimizer._target_")
    check_takes_sampler_keywords(locate(path, "sampler.optimizer._target_"), path)
    name = _get(cfg, "sampler.name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("sampler.name", name, "a label of letters, digits, _ . - (it names run directories and "
                          "table rows)")
    for section in ("contour", "replica", "swag", "update_rule"):
        if cfg.sampler.get(section) is not None:
            raise ConfigError(f"sampler.{section}", _get(cfg, f"sampler.{section}"),
                              "not set with sampler.optimizer (a built-in sampler's key; your optimizer is the update rule)")


def _validate_contour(cfg: DictConfig) -> None:
    value_checks.boolean("sampler.contour.interacting", _get(cfg, "sampler.contour.interacting"))
    number(cfg, "sampler.contour.low", minimum=float("-inf"))
    number(cfg, "sampler.contour.width", minimum=0, strict=True)
    value_checks.integer("sampler.contour.partitions", _get(cfg, "sampler.contour.partitions"), minimum=2)
    number(cfg, "sampler.contour.zeta", minimum=0, strict=True)
    if _get(cfg, "sampler.contour.sa_step") is not None:
        number(cfg, "sampler.contour.sa_step", minimum=0, strict=True, below=1)
    clip = _get(cfg, "sampler.contour.multiplier_clip")
    if clip is None or len(clip) != 2 or not all(is_number(v) for v in clip) or not clip[0] < 1 < clip[1]:
        raise ConfigError("sampler.contour.multiplier_clip", clip, "[low, high] with low < 1 < high")
    if _get(cfg, "sampler.contour.weight_exponent") is not None:
        number(cfg, "sampler.contour.weight_exponent", minimum=0)
    one_of(cfg, "sampler.contour.ensemble_weights", ("importance", "equal"))
    if _get(cfg, "sampler.contour.difference") is not None:  # None: a run saved before the key existed
        one_of(cfg, "sampler.contour.difference", ("backward", "forward"))


def _validate_swag(cfg: DictConfig) -> None:
    draws = _get(cfg, "sampler.swag.draws_per_cycle")
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 0:
        raise ConfigError("sampler.swag.draws_per_cycle", draws, "an integer >= 0 (0: evaluate the snapshots)")
    value_checks.integer("sampler.swag.rank", _get(cfg, "sampler.swag.rank"), minimum=2)
    number(cfg, "sampler.swag.scale", minimum=0, strict=True)
    if draws and cfg.sampler.samples_per_cycle < 2:
        raise ConfigError("sampler.samples_per_cycle", cfg.sampler.samples_per_cycle,
                          ">= 2 with sampler.swag (a Gaussian needs 2 snapshots per cycle)")


def _validate_replica(cfg: DictConfig) -> None:
    chains = positive_int(cfg, "sampler.chains")
    for key in ("sampler.replica.temperatures", "sampler.replica.step_sizes"):
        values = _get(cfg, key)
        if values is None or len(values) != chains or not all(is_number(v) and v > 0 for v in values):
            raise ConfigError(key, values, f"a list of {chains} positive numbers, one per chain (sampler.chains)")
    temperatures = list(_get(cfg, "sampler.replica.temperatures"))
    if chains < 2 or any(b <= a for a, b in zip(temperatures, temperatures[1:])):
        raise ConfigError("sampler.replica.temperatures", temperatures,
                          "at least 2 strictly increasing factors (sampler.chains >= 2)")
    number(cfg, "sampler.replica.correction", minimum=0)
    positive_int(cfg, "sampler.replica.swap_every")
