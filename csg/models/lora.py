r"""Low-rank adapters (LoRA, Hu et al. 2022) on a model's linear and convolutional layers, for sampling them alone.

:func:`add_lora` gives each chosen ``nn.Linear`` / ``nn.Conv2d`` two new parameters, ``lora_A`` and ``lora_B``,
and a forward hook that adds their low-rank update to the layer's output:

.. math::
    y = W x + b + \frac{\alpha}{r}\, B\,(A\,x), \qquad A \in \mathbb{R}^{r \times d_{in}},\;
    B \in \mathbb{R}^{d_{out} \times r},\; B = 0 \text{ at the start}

(for a convolution, :math:`A` is a convolution of the layer's kernel, stride, padding and dilation into :math:`r`
channels and :math:`B` a 1x1 convolution back: the update of Hu et al.'s conv form). With :math:`B = 0` the adapted
model computes what the base model computes, so a pretrained state dict means the same before and after.

The base layer's parameters keep their names (``layer4.0.conv1.weight``); the adapters are
``<layer>.lora_A`` and ``<layer>.lora_B``, so ``sampler.params=['*.lora_*']`` samples them alone and a
base model's state dict loads into the adapted model (:func:`csg.models.weights.load_weights` lets the adapter
keys be missing). Why ours and not ``peft``: peft's adapters wrap layers under new names (``base_layer``) and
pull in transformers-oriented dependencies; a hook keeps every name and every torchvision/timm/user module as it
is, in 100 lines.
"""

from __future__ import annotations

import fnmatch
import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ADAPTER_KEYS", "add_lora", "is_adapter_key"]

ADAPTER_KEYS = ("lora_A", "lora_B")  # the parameter names add_lora gives each adapted layer


def is_adapter_key(name: str) -> bool:
    """Whether a state-dict or parameter name is one of :func:`add_lora`'s adapters."""
    return name.rsplit(".", 1)[-1] in ADAPTER_KEYS


def add_lora(model: nn.Module, *, rank: int, alpha: float, modules: list[str] | tuple[str, ...] = ("*",)) -> list[str]:
    """Add an adapter of ``rank`` and scale ``alpha / rank`` to every ``nn.Linear`` and ``nn.Conv2d`` of ``model``
    whose module name matches one of ``modules`` (``fnmatch`` patterns: ``"*"`` every one, ``"layer4.*"``,
    ``"fc"``). Returns the adapted modules' names (in ``model.named_modules()`` order); raises ``ValueError`` when
    none matches. :math:`A` is initialised as ``nn.Linear`` initialises its weight (Kaiming-uniform), :math:`B` at 0.
    The adapters are created on the layer's device and dtype; the layer's own parameters are not touched."""
    if rank < 1:
        raise ValueError(f"rank must be a positive integer, not {rank}")
    adapted = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)) or is_adapter_key(name):
            continue
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in modules):
            continue
        _adapt(module, rank, alpha / rank)
        adapted.append(name)
    if not adapted:
        layers = [name for name, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Conv2d))]
        raise ValueError(f"no linear or conv layer matches {list(modules)} (the model's: "
                         f"{', '.join(layers[:8])}{' ...' if len(layers) > 8 else ''})")
    return adapted


def _adapt(module: nn.Linear | nn.Conv2d, rank: int, scale: float) -> None:
    weight = module.weight
    factory = {"device": weight.device, "dtype": weight.dtype}
    if isinstance(module, nn.Linear):
        a = torch.empty(rank, module.in_features, **factory)
        b = torch.zeros(module.out_features, rank, **factory)
    else:
        if module.groups != 1 or module.padding_mode != "zeros":
            raise ValueError(f"a convolution with groups=1 and zero padding takes an adapter (this one: groups="
                             f"{module.groups}, padding_mode={module.padding_mode!r})")
        a = torch.empty(rank, module.in_channels, *module.kernel_size, **factory)
        b = torch.zeros(module.out_channels, rank, 1, 1, **factory)
    nn.init.kaiming_uniform_(a, a=math.sqrt(5))
    module.register_parameter("lora_A", nn.Parameter(a))
    module.register_parameter("lora_B", nn.Parameter(b))
    module.lora_scale = scale
    module.register_forward_hook(_add_update)


def _add_update(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    x = inputs[0]
    if isinstance(module, nn.Linear):
        update = F.linear(F.linear(x, module.lora_A), module.lora_B)
    else:
        down = F.conv2d(x, module.lora_A, None, module.stride, module.padding, module.dilation)
        update = F.conv2d(down, module.lora_B)
    return output + module.lora_scale * update
