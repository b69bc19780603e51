"""K independent chains in one process, stepped together over stacked parameters (``trainer.stack_chains``).

The K chains of ``sampler.chains=K`` share one architecture. :func:`stack_models` stacks each parameter and
buffer of the K models into one tensor of shape (K, ...) and makes every model's own tensors views of its
slice, so the samplers, the sample store and the checkpoints still see K ordinary models. A
:class:`StackedStep` then computes the K mini-batch losses and gradients in one vectorised pass::

    (g_1..g_K, L_1..L_K) = vmap(grad_and_value(L))(theta_1..theta_K, buffers_1..buffers_K, x_1..x_K, y_1..y_K)

with ``torch.func`` (``vmap`` over ``grad_and_value`` of ``functional_call``): one forward and one backward
for the K chains, each on its own mini-batch, batch-norm statistics kept per chain. Each chain's sampler
then takes its own step with its own generator, so a chain draws exactly the noise it draws when run alone,
and its parameters match that chain run alone to float tolerance (vectorised kernels sum in another
order).

It is off by default because it has not paid where measured: on one H100 (CIFAR ResNet-18, batch 64, fp32,
2026-11-23) 4 stacked chains took 20.2 ms an iteration, compiled (19.2 ms captured as a CUDA graph), against
12.3 ms for the 4 chains' captured steps one after another and 3.1 ms for one chain: the vectorised
convolutions of K chains become grouped convolutions, slower than K ordinary ones. On the CPU, 4 MLP
chains took 3.2 s stepped together against 2.7 s one after another.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from csg.engine.step.single import compile_enabled, has_capturable_rule
from csg.likelihoods import PREFIX, Categorical, Likelihood, parameter_names


def has_random_layers(model: nn.Module) -> bool:
    """Whether ``model`` draws random numbers in training (dropout): such chains are not stacked."""
    dropouts = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
    return any(isinstance(m, dropouts) and m.p > 0 for m in model.modules())


def why_not_stackable(models: Sequence[nn.Module], *, interacting: bool, precision: str,
                      processes_per_chain: int) -> str | None:
    """None when the chains can be stacked; else the reason, for a one-line error or a log line."""
    if len(models) < 2:
        return "there is one chain in this process"
    if interacting:
        return "the chains interact (a shared theta or replica exchange): one process per chain"
    if processes_per_chain > 1:
        return "each chain spans several processes (DDP)"
    if precision != "32":  # batch norm under vmap and autocast fails (CPU, torch 2.13); not yet tried on CUDA
        return f"trainer.precision={precision}: mixed precision is not stacked yet (use 32)"
    if any(has_random_layers(m) for m in models):
        return "the model has dropout, whose draws would differ from the chains run alone"
    return None


def _stack(tensors: Sequence[Tensor]) -> Tensor:
    """The tensors stacked into fresh storage in the default (row-major) layout.

    Not ``torch.stack``: it keeps a channels-last layout, and a 1x1 convolution weight is ambiguously both,
    so cuDNN then returns channels-last activations, which batch norm under ``vmap`` cannot handle (torch
    2.11, CUDA: "clone(memory_format) inside vmap"). The chains' models leave channels-last here.
    """
    out = torch.empty((len(tensors), *tensors[0].shape), dtype=tensors[0].dtype, device=tensors[0].device)
    for k, tensor in enumerate(tensors):
        out[k].copy_(tensor)
    return out


@torch.no_grad()
def stack_models(models: Sequence[nn.Module]) -> tuple[nn.Module, dict[str, Tensor], dict[str, Tensor]]:
    """Stack the K models' parameters and buffers; each model's tensors become views of its slice.

    Returns a parameter-free copy of the architecture (on the meta device, for ``functional_call``) and the
    stacked parameters and buffers by name. The parameters keep their identity, so samplers built on them
    update the stacked tensors in place.
    """
    first = models[0]
    names = [name for name, _ in first.named_parameters()]
    buffer_names = [name for name, _ in first.named_buffers()]
    shapes = [(n, tuple(p.shape)) for n, p in first.named_parameters()]
    if any([(n, tuple(p.shape)) for n, p in model.named_parameters()] != shapes for model in models[1:]):
        raise ValueError("stacked chains need one architecture")
    template = copy.deepcopy(first).to("meta")  # before the views: a copy of a view would copy all K chains
    params = {n: _stack([m.get_parameter(n) for m in models]) for n in names}
    buffers = {n: _stack([m.get_buffer(n) for m in models]) for n in buffer_names}
    for k, model in enumerate(models):
        for n in names:
            model.get_parameter(n).data = params[n][k]
        for n in buffer_names:
            model.get_buffer(n).data = buffers[n][k]
    return template, params, buffers


class StackedStep:
    """One iteration of K chains: a vectorised forward and backward, then each chain's sampler step.

    ``step(xs, ys)`` takes the K mini-batches (sequences of tensors of equal shapes) and returns the K mean
    losses and the K counts of correct predictions as device tensors of shape (K,), which the loop sums
    like a single chain's scalars. Gradients go into one stacked buffer per parameter, whose slices are the
    models' ``.grad``.
    """

    def __init__(self, models: Sequence[nn.Module], samplers: Sequence[torch.optim.Optimizer], precision, *,
                 likelihood: Likelihood | None = None, num_data: int = 1):
        self.models, self.samplers, self.precision = list(models), list(samplers), precision
        self.likelihood, self.num_data = likelihood or Categorical(), num_data
        self.phi_names = {name[len(PREFIX):]: name for name in parameter_names(self.likelihood)}
        self.template, stacked, self.buffers = stack_models(self.models)
        trainable = {name for name, p in self.models[0].named_parameters() if p.requires_grad}
        self.params = {name: t for name, t in stacked.items() if name in trainable}
        self.buffers.update({name: t for name, t in stacked.items() if name not in trainable})  # frozen: no gradient
        self.grads = {name: torch.zeros_like(p) for name, p in self.params.items()}
        for k, model in enumerate(self.models):
            for name, p in model.named_parameters():
                if name in trainable:
                    p.grad = self.grads[name][k]
        self._grad_list = list(self.grads.values())
        self.vectorised = vmap(grad_and_value(self._loss, has_aux=True))

    def _loss(self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor, y: Tensor):
        logits = functional_call(self.template, (params, buffers), (x,))
        phi = {name: params[key] for name, key in self.phi_names.items()}
        loss = self.likelihood.loss(logits, y, phi, self.num_data)
        return loss, self.likelihood.score(logits.detach(), y, {k: v.detach() for k, v in phi.items()})

    def __call__(self, xs: Sequence[Tensor], ys: Sequence[Tensor], scale: float | None = None):
        if scale is not None:
            raise ValueError("stacked chains run one process per chain (no DDP loss scale)")
        self.template.train(self.models[0].training)
        x, y = torch.stack(list(xs)), torch.stack(list(ys))
        with self.precision.autocast():
            grads, (losses, hits) = self.vectorised(self.params, self.buffers, x, y)
        torch._foreach_copy_(self._grad_list, [grads[name] for name in self.grads])
        for sampler in self.samplers:
            sampler.step()
        return losses.detach(), hits


class CompiledStackedStep(StackedStep):
    """The vectorised pass through ``torch.compile`` (static shapes) and SGLD / SGHMC's update rule fused."""

    def __init__(self, models, samplers, precision, *, likelihood=None, num_data: int = 1):
        super().__init__(models, samplers, precision, likelihood=likelihood, num_data=num_data)
        self.vectorised = torch.compile(self.vectorised, dynamic=False)
        self.accelerated = all(has_capturable_rule(s) for s in self.samplers)
        if self.accelerated:
            for sampler in self.samplers:
                sampler.accelerate(compile_rule=True)

    def __call__(self, xs, ys, scale=None):
        if self.accelerated:
            for sampler in self.samplers:
                sampler.stage_hyperparameters()
        return super().__call__(xs, ys, scale)


def make_stacked_step(setting, models: Sequence[nn.Module], samplers: Sequence[torch.optim.Optimizer], precision,
                      device: torch.device, *, likelihood: Likelihood | None = None, num_data: int = 1) -> StackedStep:
    """The stacked step of ``trainer.compile=setting``: compiled (:func:`csg.engine.step.single.compile_enabled`) or
    eager; its loss is ``likelihood``'s (default: categorical) on a set of ``num_data`` examples."""
    kind = CompiledStackedStep if compile_enabled(setting, device) else StackedStep
    return kind(models, samplers, precision, likelihood=likelihood, num_data=num_data)
