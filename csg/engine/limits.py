"""The limits a run must fit, checked before training: the labels, memory, the model against the data, the step.

Each check takes the run's :class:`~csg.engine.settings.RunSettings` (or the section it reads) and raises a
one-line :class:`~csg.errors.ConfigError` naming the key to change: labels outside the model's classes
(:func:`check_labels`), chains that cannot fit in memory (:func:`check_memory`), a model that does not take the data
or cannot train on its batches (:func:`check_model_fits`), numbers of the sampler's step that overflow its dtype
(:func:`check_step_values`). :mod:`csg.engine.build` makes them as it builds a run's objects, and :func:`csg.engine.job_checks.check_job` for a
sweep's jobs before the first trains.
"""

from __future__ import annotations

import math

import torch

from csg.engine.prior import weight_decay
from csg.engine.settings import Component, RunSettings, ScheduleSettings
from csg.errors import ConfigError, describe
from csg.schedules import STEP_FACTOR, STEP_MILESTONES

__all__ = ["check_labels", "check_memory", "check_model_fits", "check_step_values", "smallest_batch"]


def check_task(settings: RunSettings, likelihood_task: str, data_task: str) -> None:
    """The likelihood's task is the data's: a regression likelihood on labelled classes (or the other way round)
    is refused in one line."""
    if likelihood_task != data_task:
        likelihood = settings.likelihood
        key, value = (likelihood.key, likelihood.label) if likelihood is not None else ("likelihood.name", "categorical")
        raise ConfigError(key, value, f"a {data_task} likelihood for data.name={settings.data.name}, whose targets are "
                          f"{'real numbers' if data_task == 'regression' else 'class labels'}")


def check_labels(data_settings: Component, data) -> None:
    """The labels of data held as tensors lie in [0, num_classes): read from the tensors, no pass over items (a
    user's data set has every item checked in :mod:`csg.data.custom`; a built-in one is checked here, cheaply)."""
    from torch.utils.data import TensorDataset

    if getattr(data, "task", "classification") != "classification":
        return
    for split in ("train", "test"):
        dataset = getattr(getattr(data, split, None), "dataset", None)
        if not isinstance(dataset, TensorDataset) or len(dataset.tensors) != 2 or not len(dataset):
            continue
        labels = dataset.tensors[1]
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= data.num_classes:
            raise ConfigError("data.name", str(data_settings.name), f"a data set whose labels are 0..{data.num_classes - 1}:"
                              f" its {split} set has labels in [{low}, {high}]")


def check_memory(settings: RunSettings, model: torch.nn.Module | None, device: torch.device, chains: int,
                 available=None) -> None:
    """Refuse ``chains`` chains of the run's model that cannot fit in ``device``'s free memory
    (:mod:`csg.engine.memory`): ``sampler.chains`` when one chain would fit, else the model's key. ``model``: the
    run's model built on the meta device (:func:`csg.engine.memory.meta_model`); None (it cannot be built there)
    refuses nothing, nor does an unknown free memory."""
    from csg.engine.memory import available_bytes, chain_bytes, memory_problem

    if model is None:
        return
    available = available or available_bytes
    # SGHMC's momentum, pSGLD's running mean of squared gradients: one copy of the parameters
    sampler = settings.sampler
    copies = 1 if sampler.update_rule in ("sghmc", "psgld") and sampler.optimizer is None else 0
    draws = int(settings.trace.samples) if settings.trace.enabled else 0
    problem = memory_problem(model, device, chains=chains, sampler_copies=copies, trace_draws=draws,
                             available=available)
    if problem is None:
        return
    if chains > 1 and memory_problem(model, device, chains=1, sampler_copies=copies, trace_draws=draws,
                                     available=available) is None:
        on_device, on_host = chain_bytes(model, sampler_copies=copies, trace_draws=draws)
        fits = [(available(device) or 0) // on_device if on_device else chains]
        if on_host:
            fits.append((available(torch.device("cpu")) or 0) // on_host)
        raise ConfigError("sampler.chains", chains, f"at most {max(1, min(fits))} on this machine: {problem}")
    raise ConfigError(settings.model.key, settings.model.label, f"a model that fits in memory: {problem}")


def _num_classes_hint(model: Component, classes: int) -> str:
    """What to add when a user's callable that takes ``**kwargs`` without naming ``num_classes``
    (``timm.create_model``, ``torchvision.models.resnet18``) was given no ``model.num_classes``."""
    from csg.components import accepts, locate

    if not model.custom or model.values.get("num_classes") is not None:
        return ""
    path = model.label
    try:
        factory = locate(path, "model._target_")
    except ConfigError:
        return ""
    if accepts(factory, "num_classes", by_name=True) or not accepts(factory, "num_classes"):
        return ""
    return (f"; csg passes num_classes only to a callable that names it, and {path} takes it through **kwargs: "
            f"add +model.num_classes={classes}")


def check_model_fits(model: torch.nn.Module, data, settings: RunSettings, *, processes: int = 1,
                     sync_batchnorm: bool = False, likelihood=None) -> None:
    """One forward pass of one example of the data set's input shape (zeros, no gradient, eval mode, no random
    number drawn): the model has trainable parameters and none empty, takes the data and gives ``num_classes``
    floating-point outputs; a model with batch norm meets no training batch it cannot take.

    Batch norm cannot train on one value per channel: where a batch-norm layer sees one value per channel and
    example (``BatchNorm1d`` on features), a training batch of one example (per process, over ``processes``
    processes without ``sync_batchnorm``) raises in torch. Such a batch (the last one, ``num_train`` =
    k x ``batch_size`` + 1) is refused with a batch size that avoids it, rather than dropped: dropping would
    change the iterations per epoch the schedule and the collection plan are built on, silently. Checked where
    ``data`` tells ``num_train`` and ``batch_size`` (a built data bundle). ``likelihood`` (the run's; None:
    categorical) says how many outputs the data's classes or target columns need."""
    shape = tuple(data.input_shape)
    key, name = settings.model.key, settings.model.label
    data_name = settings.data.name
    empty = [label for label, parameter in model.named_parameters() if parameter.numel() == 0]
    if empty:
        raise ConfigError(key, name, f"a model without empty parameters: {empty[0]} has shape "
                          f"{tuple(model.get_parameter(empty[0]).shape)} (a layer of width 0)")
    if not any(parameter.requires_grad for parameter in model.parameters()):
        count = sum(parameter.numel() for parameter in model.parameters())
        raise ConfigError(key, name, "a model with trainable parameters (the sampler moves them): " + (
            f"all its {count:,} parameters are frozen (requires_grad=False)" if count else "it has none"))
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    training = model.training
    per_channel: list[tuple[str, int]] = []  # (batch-norm layer, values per channel and example)
    hooks = [module.register_forward_pre_hook(
        lambda module, args, label=label: per_channel.append((label, math.prod(args[0].shape[2:]))))
        for label, module in model.named_modules() if isinstance(module, torch.nn.modules.batchnorm._BatchNorm)]
    model.eval()
    try:
        with torch.no_grad():
            output = model(torch.zeros((1, *shape), device=device))
    except Exception as error:  # noqa: BLE001 - whatever the architecture raises, the answer is the same
        raise ConfigError(key, name, f"a model that takes data={data_name}'s inputs of shape {shape}: "
                          f"{describe(error)}") from None
    finally:
        model.train(training)
        for hook in hooks:
            hook.remove()
    from csg.likelihoods import Categorical

    likelihood = likelihood or Categorical()
    outputs = likelihood.num_outputs(data.num_classes)
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (1, outputs):
        got = tuple(output.shape[1:]) if isinstance(output, torch.Tensor) else type(output).__name__
        what = (f"the classes of data={data_name}" if likelihood.task == "classification" else
                f"likelihood {likelihood!r}'s for the {data.num_classes} target column(s) of data={data_name}")
        raise ConfigError(key, name, f"a model with {outputs} outputs ({what}) per example: it gives "
                          f"{got}{_num_classes_hint(settings.model, data.num_classes)}")
    if not output.is_floating_point():
        raise ConfigError(key, name, f"a model whose outputs are floating-point logits: it gives {output.dtype}")
    check_likelihood(settings.likelihood, likelihood, outputs, data.num_classes)
    single = [label for label, values in per_channel if values == 1]
    if single and getattr(data, "num_train", None) and getattr(data, "batch_size", None):
        _check_batchnorm_batches(single[0], int(data.num_train), int(data.batch_size),
                                 1 if sync_batchnorm else processes)


def check_likelihood(likelihood_settings: Component | None, likelihood, outputs: int, targets: int) -> None:
    """The likelihood's :meth:`nll` gives one finite value per example and its :meth:`predictive` answers, on a
    probe batch of 3 zero outputs and targets, before any training (a one-line ConfigError naming the likelihood's
    key: a sum over the batch would train on a wrong scale, a missing predictive would fail only at evaluation)."""
    key = "likelihood._target_" if likelihood_settings is not None and likelihood_settings.custom else "likelihood.name"
    value = repr(likelihood)
    output = torch.zeros(3, outputs)
    y = (torch.zeros(3, dtype=torch.long) if likelihood.task == "classification"
         else torch.zeros(3) if targets == 1 else torch.zeros(3, targets))
    params = {name: torch.as_tensor(v, dtype=torch.float32) for name, v in likelihood.initial_parameters().items()}
    try:
        per_example = likelihood.nll(output, y, params)
    except Exception as error:  # noqa: BLE001 - the user's likelihood's own complaint, in one line
        raise ConfigError(key, value, f"a likelihood whose nll takes (outputs, targets, params): {describe(error)}") \
            from None
    if not isinstance(per_example, torch.Tensor) or tuple(per_example.shape) != (3,):
        got = tuple(per_example.shape) if isinstance(per_example, torch.Tensor) else type(per_example).__name__
        raise ConfigError(key, value, f"a likelihood whose nll gives one value per example, shape (batch,): on a "
                          f"batch of 3 it gave {got} (a sum or mean over the batch would train on another scale)")
    if not bool(torch.isfinite(per_example).all()):
        raise ConfigError(key, value, f"a likelihood whose nll is finite at zero outputs and targets and its initial "
                          f"parameters: it gave {per_example.tolist()} (training would stop at its first step)")
    try:
        energy = float(likelihood.prior_energy(params))
    except Exception as error:  # noqa: BLE001
        raise ConfigError(key, value, f"a likelihood whose prior_energy(params) answers: {describe(error)}") from None
    if not math.isfinite(energy):
        raise ConfigError(key, value, f"a likelihood whose prior_energy is finite at its initial parameters: it gave "
                          f"{energy} (the prior would give them no density)")
    try:
        likelihood.predictive(output, params)
    except NotImplementedError:
        raise ConfigError(key, value, "a likelihood with a predictive(output, params): csg evaluates every member "
                          "with it after training") from None
    except Exception as error:  # noqa: BLE001
        raise ConfigError(key, value, f"a likelihood whose predictive(output, params) answers: {describe(error)}") \
            from None


def smallest_batch(num_train: int, batch_size: int, processes: int = 1) -> int:
    """The fewest examples a process gets in a training batch: the last global batch may be partial, and a
    global batch is split over ``processes`` into parts of floor or ceil of its share (``tensor_split``)."""
    last = num_train - (-(-num_train // batch_size) - 1) * batch_size  # the smallest global batch
    return last // processes


def _check_batchnorm_batches(layer: str, num_train: int, batch_size: int, processes: int) -> None:
    if smallest_batch(num_train, batch_size, processes) >= 2:
        return
    last = num_train - (-(-num_train // batch_size) - 1) * batch_size
    near = sorted(range(max(2, batch_size - 1000), min(num_train, batch_size + 1000) + 1),
                  key=lambda size: (abs(size - batch_size), -size))
    better = next((size for size in near if smallest_batch(num_train, size, processes) >= 2), None)
    shards = f", {processes} processes each taking a part of every batch" if processes > 1 else ""
    raise ConfigError("data.batch_size", batch_size,
                      f"a batch size whose training batches give every process at least 2 examples: the model's "
                      f"batch norm ({layer}) sees one value per channel and example, and torch cannot train it "
                      f"on one example; {num_train} training examples in batches of {batch_size} leave a last "
                      f"batch of {last}{shards}" + (f"; e.g. data.batch_size={better}" if better else ""))


def _largest_lr(schedule: ScheduleSettings) -> float:
    """The largest step size of the schedule: lr0, or lr0 x lr_factor^milestones for a rising step schedule."""
    lr0 = float(schedule.lr0)
    if schedule.schedule != "step":
        return lr0
    factor = float(schedule.options.get("lr_factor", STEP_FACTOR))
    milestones = len(schedule.options.get("lr_milestones", STEP_MILESTONES) or ())
    try:
        return lr0 * max(1.0, factor) ** milestones
    except OverflowError:
        return math.inf


def check_step_values(settings: RunSettings, model: torch.nn.Module, num_data: int) -> None:
    """Refuse settings whose numbers in the sampler's step overflow the step's dtype, before any training.

    A finite ``sampler.lr0=1e308`` is a float64, but the step multiplies float32 parameters (bf16 numbers under
    ``bf16-mixed``) by it: torch then raises "value cannot be converted to type float without overflow"
    mid-run. Checked, as the samplers compute them: the largest step size, the temperature, the weight decay,
    the product lr x weight decay, the noise scale sqrt(2 lr T / N) (SGLD) or sqrt(2 lr (1 - momentum) T / N)
    (SGHMC), and replica exchange's step sizes and temperatures; for a user's sampler, the values it is given."""
    from csg.samplers import functional

    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} or {torch.float32}
    if settings.trainer.precision == "bf16-mixed":
        dtypes.add(torch.bfloat16)
    dtype = min(dtypes, key=lambda d: torch.finfo(d).max)
    limit = torch.finfo(dtype).max
    sampler, prior = settings.sampler, settings.prior
    lr, temperature = _largest_lr(settings.schedule), float(sampler.temperature)
    decay = weight_decay(num_data, **prior.arguments())
    decay_key = "sampler.weight_decay" if prior.variance is None else "prior.variance"
    given = {"sampler.lr0": sampler.lr0, "sampler.temperature": sampler.temperature,
             "sampler.weight_decay": prior.decay, "prior.variance": prior.variance}
    rows = [("sampler.lr0", "the largest step size" + (" (lr0 x lr_factor^milestones)" if lr != sampler.lr0
                                                        else ""), lr),
            ("sampler.temperature", "the temperature", temperature),
            (decay_key, "the weight decay", decay)]
    if sampler.optimizer is None:
        momentum = float(sampler.momentum)
        rows.append((decay_key, "lr0 x weight_decay", lr * decay))
        if sampler.update_rule == "sghmc":
            rows.append(("sampler.temperature",
                         f"the SGHMC noise scale sqrt(2 lr0 (1 - momentum) T / N), N={num_data},",
                         functional.sghmc_noise_std(lr, momentum, temperature, num_data)))
        else:
            rows.append(("sampler.temperature", f"the SGLD noise scale sqrt(2 lr0 T / N), N={num_data},",
                         functional.sgld_noise_std(lr, temperature, num_data)))
    replica = sampler.replica
    if replica is not None:
        given.update({"sampler.replica.step_sizes": list(replica.step_sizes),
                      "sampler.replica.temperatures": list(replica.temperatures)})
        rows.append(("sampler.replica.step_sizes", "lr0 x the largest step-size factor",
                     lr * max(float(v) for v in replica.step_sizes)))
        rows.append(("sampler.replica.temperatures", "temperature x the largest temperature factor",
                     temperature * max(float(v) for v in replica.temperatures)))
    for key, what, amount in rows:
        if not math.isfinite(amount) or abs(amount) > limit:
            raise ConfigError(key, given[key], f"a value for which {what} fits the step's "
                              f"{str(dtype).removeprefix('torch.')} (at most {limit:.3g}); it is {amount:.3g}")

