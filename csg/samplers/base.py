"""Shared plumbing of the SG-MCMC optimizers: hyper-parameter checks, gradients, noise, capture and compilation."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from csg.samplers import functional as rules


def _dynamo_free(name: str) -> Callable:
    """``torch.optim.Optimizer.<name>`` without its lazy ``import torch._dynamo`` (2-3 s of a small CPU run's start)
    while nothing has imported it: torch wraps these methods so that ``torch.compile`` does not trace them, and the
    wrapper imports dynamo at its first call; until something imports it (a compiled step does) nothing can trace,
    so the method itself is called. Once dynamo is loaded, torch's wrapped method is."""
    wrapped = getattr(torch.optim.Optimizer, name)
    plain = getattr(wrapped, "__wrapped__", wrapped)

    def method(self, *args, **kwargs):
        return (wrapped if "torch._dynamo" in sys.modules else plain)(self, *args, **kwargs)

    method.__name__, method.__qualname__ = name, f"SGMCMCOptimizer.{name}"
    method.__doc__ = wrapped.__doc__ if isinstance(wrapped.__doc__, str) and wrapped.__doc__.strip() else (
        f"``torch.optim.Optimizer.{name}``, as PyTorch documents it.")
    return method


_state_dict, _load_state_dict = _dynamo_free("state_dict"), _dynamo_free("load_state_dict")


class SGMCMCOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that injects Gaussian noise into its update.

    Param-group keys common to every sampler: ``lr``, ``weight_decay``,
    ``num_data`` (N, the training-set size) and ``temperature`` (T; 0 turns
    the noise off). Change them between steps as an LR scheduler would.

    ``generator`` (optional) is the :class:`torch.Generator` that draws the
    noise, for reproducible chains; it must live on the parameters' device.
    Its state travels in :meth:`state_dict` under ``"generator_state"``. A
    step draws the noise of a param group in one call
    (:func:`csg.samplers.functional.standard_normal`), and none at temperature 0.

    :meth:`accelerate` prepares the sampler for a compiled or captured step
    (:mod:`csg.engine.step.single`): :meth:`step` then reads its hyper-parameters from 0-d
    device tensors that :meth:`stage_hyperparameters` fills from the param
    groups before each step, outside a CUDA graph, so that one captured step
    serves every step size; with ``compile_rule`` the update rule runs through
    ``torch.compile`` (a few fused kernels, compiled once).
    """

    add_param_group = _dynamo_free("add_param_group")
    zero_grad = _dynamo_free("zero_grad")
    capturable_rule = False  # True where the update rule takes tensor hyper-parameters (SGLD, SGHMC)
    capturable: bool  # hyper-parameters read from device scalars (after accelerate())
    compiled: bool  # the update rule through torch.compile

    def __init__(self, params, defaults: dict[str, Any], generator: torch.Generator | None = None):
        _check_hyperparameters(defaults)
        super().__init__(params, defaults)
        for group in self.param_groups:
            _check_hyperparameters(group)
        self.generator = generator
        self.capturable, self.compiled = False, False
        self._scalars: list[dict[str, Tensor]] = []
        self._compiled_rules: dict[Callable, Callable] = {}
        self.observers: list[Callable[[torch.optim.Optimizer], None]] = []  # see observe()

    def observe(self, observer: Callable[[torch.optim.Optimizer], None]) -> Callable[[], None]:
        """Call ``observer(sampler)`` in every :meth:`step` once the gradients are known (after a ``closure``) and
        before the update (:class:`csg.evaluation.monitor.SamplingMonitor` reads the temperatures there). Returns a
        function that removes it."""
        self.observers.append(observer)
        return lambda: self.observers.remove(observer) if observer in self.observers else None

    def accelerate(self, *, compile_rule: bool = True) -> None:
        """Read the hyper-parameters from device scalars from now on, and compile the update rule if asked."""
        if not self.capturable_rule:
            raise ValueError(f"{type(self).__name__} has no capturable update rule (SGLD and SGHMC have)")
        self.capturable, self.compiled = True, compile_rule
        self._scalars, self._compiled_rules = [], {}

    def stage_hyperparameters(self) -> None:
        """Copy each group's hyper-parameters into its device scalars (capturable samplers; call outside a graph)."""
        if not self.capturable:
            return
        for index, group in enumerate(self.param_groups):
            values = self._hyperparameters(group)
            if len(self._scalars) <= index:
                device = group["params"][0].device
                self._scalars.append({key: torch.zeros((), device=device) for key in values})
            for key, value in values.items():
                self._scalars[index][key].fill_(value)

    def noise_on(self) -> tuple[bool, ...]:
        """Whether each param group draws noise at its current hyper-parameters (temperature > 0)."""
        return tuple(self._hyperparameters(group).get("noise_std", 0.0) > 0 for group in self.param_groups)

    @torch.no_grad()
    def step(self, closure=None):
        """Take one step on every param group; ``closure`` (optional) re-evaluates and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for observer in self.observers:
            observer(self)
        for index, group in enumerate(self.param_groups):
            params, grads = self._params_with_grad(group)
            if not params:
                continue
            values = self._hyperparameters(group)
            noise = self._draw_noise(params, values)
            hyper = self._scalars[index] if self.capturable else values
            self._update(group, params, grads, hyper, noise)
        return loss

    def _hyperparameters(self, group: dict[str, Any]) -> dict[str, float]:
        """The numbers the update rule takes for ``group`` (``noise_std`` among them)."""
        raise NotImplementedError

    def _draw_noise(self, params: list[Tensor], values: dict[str, float]) -> list[Tensor] | None:
        """This step's standard-normal draws for ``params`` (one generator call), none at temperature 0."""
        return rules.standard_normal(params, self.generator) if values["noise_std"] > 0 else None

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor], hyper: dict[str, Any],
                noise: list[Tensor] | None) -> None:
        """Apply the update rule to the parameters of ``group`` that have gradients."""
        raise NotImplementedError

    def _rule(self, rule: Callable) -> Callable:
        """``rule``, or its ``torch.compile`` form when the sampler is ``compiled``."""
        if not self.compiled:
            return rule
        if rule not in self._compiled_rules:
            self._compiled_rules[rule] = torch.compile(rule, dynamic=False)
        return self._compiled_rules[rule]

    @staticmethod
    def _params_with_grad(group: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
        params, grads = [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("SG-MCMC samplers do not support sparse gradients")
            params.append(p)
            grads.append(p.grad)
        return params, grads

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict`` with the state of the sampler's noise generator
        (``generator_state``), so that a resumed chain draws the noise an uninterrupted one draws."""
        state = _state_dict(self)
        if self.generator is not None:
            state["generator_state"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``torch.optim.Optimizer.load_state_dict``, and the noise generator's state :meth:`state_dict` saved."""
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator_state", None)
        _load_state_dict(self, state_dict)
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)


def _check_hyperparameters(group: dict[str, Any]) -> None:
    lr = group.get("lr")
    if not isinstance(lr, (int, float)) or lr < 0:
        raise ValueError(f"Invalid learning rate: {lr!r} (a number >= 0 is required)")
    if group.get("weight_decay", 0.0) < 0:
        raise ValueError(f"Invalid weight_decay: {group['weight_decay']} (must be >= 0)")
    num_data = group.get("num_data")
    if not isinstance(num_data, (int, float)) or num_data <= 0:
        raise ValueError(f"Invalid num_data: {num_data!r} (the training-set size N > 0 is required)")
    if group.get("temperature", 0.0) < 0:
        raise ValueError(f"Invalid temperature: {group['temperature']} (must be >= 0)")
    if "momentum" in group and not 0.0 <= group["momentum"] < 1.0:
        raise ValueError(f"Invalid momentum: {group['momentum']} (must be in [0, 1))")
