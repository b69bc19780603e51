"""One training iteration: forward, loss, backward and the sampler's update; eager, compiled or captured.

:func:`make_step` picks the form from ``trainer.compile`` (``auto``: compiled on CUDA, eager elsewhere):

- :class:`Step` (eager): the reference, every operation launched from Python.
- :class:`CompiledStep`: the model through ``torch.compile`` (inductor; one static-shape graph per batch
  shape, so the last, smaller batch of an epoch is compiled once, not every epoch) and the sampler's update
  rule compiled into a few fused kernels that read the step size and noise scale from device scalars
  (:meth:`csg.samplers.SGMCMCOptimizer.accelerate`). The parameters and the noise stay float32 under
  ``bf16-mixed``.
- :class:`CapturedStep` (CUDA): the compiled step, all of it (forward, backward, the update with its noise
  drawn from the chain's own generator) captured as one CUDA graph per (batch shape, noise on or off) and
  replayed every iteration. Python then launches a handful of kernels per iteration instead of hundreds,
  which is what a batch-64 CIFAR step needs (launch-bound in eager mode).

A step returns the detached mean loss and the number of correct predictions of the batch, as device
tensors: the loop sums them on the device and reads them only at its periodic NaN check, so an epoch has
no other host synchronisation. Samples stay exactly what the sampler defines: the captured graph draws
the same noise from the same generator as the eager step (one draw per param group and step), and a
sampling stage (noise) and an exploration stage (none) have separate graphs, so the generator advances as
in eager mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from csg.likelihoods import Categorical, Likelihood, own_parameters
from csg.samplers.base import SGMCMCOptimizer

def compile_enabled(setting: Any, device: torch.device) -> bool:
    """``trainer.compile`` for ``device``: ``auto`` compiles on CUDA only (on the CPU it costs more than it saves)."""
    return device.type == "cuda" if setting == "auto" else bool(setting)


def channels_last_on(model: nn.Module, device: torch.device) -> bool:
    """Whether ``model`` runs in channels-last memory format: a convolutional model on CUDA (cuDNN's native layout)."""
    return device.type == "cuda" and any(isinstance(m, (nn.Conv2d, nn.Conv3d)) for m in model.modules())


def has_capturable_rule(sampler: torch.optim.Optimizer) -> bool:
    """SGLD and SGHMC: an update rule on device scalars, which compiles and captures."""
    return isinstance(sampler, SGMCMCOptimizer) and sampler.capturable_rule


class Step:
    """The eager step: ``loss = likelihood.loss(model(x), y)``, ``loss.backward()``, ``sampler.step()``.

    The loss is the mini-batch's estimate of U/N (:meth:`csg.likelihoods.Likelihood.loss`: the mean
    cross-entropy for the default ``likelihood``, a Gaussian's mean negative log-likelihood plus its noise prior
    over ``num_data`` for regression). ``scale`` (DDP): the loss sums the shard's terms times scale, with scale
    = world size / global batch size, so that averaging the processes' gradients gives the gradient of the
    global mean. ``interaction``: its ``before_update`` gives the keyword arguments of ``sampler.step``.
    ``channels_last``: 4-D inputs are given to the model in channels-last memory format (the model's own format
    on CUDA, see :func:`prepare_model`).
    """

    def __init__(self, model: nn.Module, sampler: torch.optim.Optimizer, precision, *, interaction=None,
                 channels_last: bool = False, likelihood: Likelihood | None = None, num_data: int = 1):
        self.model, self.sampler, self.precision, self.interaction = model, sampler, precision, interaction
        self.channels_last = channels_last
        self.forward = model
        self.likelihood = likelihood or Categorical()
        self.num_data = num_data
        self.phi = own_parameters(self.likelihood, model)

    def _format(self, x: Tensor) -> Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def __call__(self, x: Tensor, y: Tensor, scale: float | None = None) -> tuple[Tensor, Tensor]:
        return self._body(self._format(x), y, scale)

    def _body(self, x: Tensor, y: Tensor, scale: float | None = None, autocast_cache: bool = True):
        precision = self.precision
        with precision.autocast(cache=autocast_cache):
            logits = self.forward(x)
            loss = self.likelihood.loss(logits, y, self.phi, self.num_data, scale)
        self.sampler.zero_grad(set_to_none=True)
        mean = loss.detach() if scale is None else loss.detach() / (scale * y.shape[0])
        interaction = self.interaction
        step_kwargs = interaction.before_update(mean, x, y, precision.autocast) if interaction is not None else {}
        if precision.scaler is not None:
            precision.scaler.scale(loss).backward()
            precision.scaler.step(self.sampler, **step_kwargs)
            precision.scaler.update()
        else:
            loss.backward()
            self.sampler.step(**step_kwargs)
        return mean, self.likelihood.score(logits.detach(), y, self.phi)


class CompiledStep(Step):
    """The model under ``torch.compile`` and, for SGLD / SGHMC, a compiled update rule on device scalars."""

    def __init__(self, model, sampler, precision, *, interaction=None, channels_last: bool = False, likelihood=None,
                 num_data: int = 1):
        super().__init__(model, sampler, precision, interaction=interaction, channels_last=channels_last,
                         likelihood=likelihood, num_data=num_data)
        self.forward = torch.compile(model, dynamic=False)
        self.accelerated = has_capturable_rule(sampler)
        if self.accelerated:
            sampler.accelerate(compile_rule=True)

    def __call__(self, x, y, scale=None):
        if self.accelerated:
            self.sampler.stage_hyperparameters()
        return super().__call__(x, y, scale)


class CapturedStep(CompiledStep):
    """The compiled step captured whole as CUDA graphs, one per (batch shape, noise on/off), replayed.

    Capturing a graph first runs the step a few times (``warmup``) to compile it and let CUDA libraries
    allocate their workspaces; the model, its buffers, the sampler's state and the generators are saved
    before and put back after, so that the chain is exactly where it was (state the sampler created during
    the warm-up, such as SGHMC's velocity, is zeroed, as the samplers create it). Needs a sampler with a
    capturable rule (SGLD, SGHMC), no interaction, no loss scaler and one process per chain.
    """

    warmup = 3

    def __init__(self, model, sampler, precision, *, channels_last: bool = False, likelihood=None, num_data: int = 1):
        super().__init__(model, sampler, precision, channels_last=channels_last, likelihood=likelihood,
                         num_data=num_data)
        if not self.accelerated:
            raise ValueError("a captured step needs SGLD or SGHMC (a capturable update rule)")
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, Tensor, Tensor, tuple[Tensor, Tensor]]] = {}

    def __call__(self, x, y, scale=None):
        if scale is not None:
            raise ValueError("a captured step runs one process per chain (no DDP loss scale)")
        self.sampler.stage_hyperparameters()
        key = (tuple(x.shape), x.dtype, tuple(y.shape), self.sampler.noise_on())
        if key not in self.graphs:
            self.sampler._csg_capturing = True  # a SamplingMonitor's hook skips the warm-up and the capture
            try:
                self.graphs[key] = self._capture(x, y)
            finally:
                self.sampler._csg_capturing = False
        graph, static_x, static_y, outputs = self.graphs[key]
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return outputs

    def _capture(self, x: Tensor, y: Tensor):
        device = x.device
        static_x = self._format(x).clone(memory_format=torch.preserve_format)
        static_y = y.clone()
        saved = self._snapshot()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self._body(static_x, static_y, autocast_cache=False)
        torch.cuda.current_stream(device).wait_stream(side)
        self._restore(saved)
        self.sampler.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        if self.sampler.generator is not None:
            graph.register_generator_state(self.sampler.generator)
        with torch.cuda.graph(graph):
            outputs = self._body(static_x, static_y, autocast_cache=False)
        return graph, static_x, static_y, outputs

    def _snapshot(self) -> dict[str, Any]:
        tensors = [*self.model.parameters(), *self.model.buffers()]
        tensors += [t for state in self.sampler.state.values() for t in state.values() if isinstance(t, Tensor)]
        device = tensors[0].device
        return {
            "tensors": [(t, t.detach().clone()) for t in tensors],
            "state_keys": {(id(p), key) for p, state in self.sampler.state.items() for key in state},
            "generator": self.sampler.generator.get_state() if self.sampler.generator is not None else None,
            "cuda_rng": torch.cuda.get_rng_state(device),
            "device": device,
        }

    @torch.no_grad()
    def _restore(self, saved: dict[str, Any]) -> None:
        for tensor, value in saved["tensors"]:
            tensor.copy_(value)
        for p, state in self.sampler.state.items():
            for key, value in state.items():
                if (id(p), key) not in saved["state_keys"] and isinstance(value, Tensor):
                    value.zero_()
        if saved["generator"] is not None:
            self.sampler.generator.set_state(saved["generator"])
        torch.cuda.set_rng_state(saved["cuda_rng"], saved["device"])


def prepare_model(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in channels-last memory format where :func:`channels_last_on` says so; else as is."""
    if channels_last_on(model, device):
        return model.to(memory_format=torch.channels_last)
    return model


def make_step(setting: Any, model: nn.Module, sampler: torch.optim.Optimizer, precision, device: torch.device, *,
              interaction=None, world_size: int = 1, likelihood: Likelihood | None = None, num_data: int = 1) -> Step:
    """The step of ``trainer.compile=setting``: eager, compiled, or (CUDA, one process, SGLD / SGHMC) captured;
    its loss is ``likelihood``'s (default: categorical) on a set of ``num_data`` examples."""
    channels_last = channels_last_on(model, device)
    objective = dict(likelihood=likelihood, num_data=num_data)
    if not compile_enabled(setting, device):
        return Step(model, sampler, precision, interaction=interaction, channels_last=channels_last, **objective)
    if device.type == "cuda" and has_capturable_rule(sampler) and interaction is None and precision.scaler is None and world_size == 1:
        return CapturedStep(model, sampler, precision, channels_last=channels_last, **objective)
    return CompiledStep(model, sampler, precision, interaction=interaction, channels_last=channels_last, **objective)
