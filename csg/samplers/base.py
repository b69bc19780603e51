"""Shared plumbing of the SG-MCMC optimizers: hyper-parameter checks, gradients, noise generator."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class SGMCMCOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that injects Gaussian noise into its update.

    Param-group keys common to every sampler: ``lr``, ``weight_decay``,
    ``num_data`` (N, the training-set size) and ``temperature`` (T; 0 turns
    the noise off). Change them between steps as an LR scheduler would.

    ``generator`` (optional) is the :class:`torch.Generator` that draws the
    noise, for reproducible chains; it must live on the parameters' device.
    Its state travels in :meth:`state_dict` under ``"generator_state"``.
    """

    def __init__(self, params, defaults: dict[str, Any], generator: torch.Generator | None = None):
        _check_hyperparameters(defaults)
        super().__init__(params, defaults)
        for group in self.param_groups:
            _check_hyperparameters(group)
        self.generator = generator

    @torch.no_grad()
    def step(self, closure=None):
        """Take one step on every param group; ``closure`` (optional) re-evaluates and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads = self._params_with_grad(group)
            if params:
                self._update(group, params, grads)
        return loss

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor]) -> None:
        """Apply the update rule to the parameters of ``group`` that have gradients."""
        raise NotImplementedError

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
        state = super().state_dict()
        if self.generator is not None:
            state["generator_state"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator_state", None)
        super().load_state_dict(state_dict)
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
