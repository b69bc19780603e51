r"""An ensemble that differs only in its last layer, evaluated at the cost of that layer.

When the samples :math:`\theta^{(k)} = (\theta_r, h^{(k)})` share a frozen trunk :math:`\theta_r` and differ in a
head :math:`h` whose output is the model's, :math:`p(y \mid x, \theta^{(k)}) = \mathrm{softmax}(h^{(k)}(\phi(x)))`
with the same features :math:`\phi(x)` for every member. :class:`TrunkFeatures` runs the whole model once per
loader, keeps :math:`\phi(x)` (the head's inputs, caught by a forward pre-hook) and gives each further member's
probabilities from its head alone: K members cost one trunk pass and K head passes instead of K whole passes.
The features of a loader are held in memory where they were computed (N x the head's input size).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["TrunkFeatures"]


class TrunkFeatures:
    """The features of ``model``'s trunk (the inputs of its submodule ``head``) on each loader, computed once.

    :meth:`probs` of a loader: the first call runs the whole model (with the member loaded then) and keeps the
    features; it checks on the first batch that ``head`` applied to them gives the model's output (else
    :attr:`failed`: the head is not the model's last layer, and the caller runs whole models). Later calls apply
    the head, loaded by :meth:`load_head`, to the kept features."""

    def __init__(self, model: nn.Module, head: str, device: torch.device,
                 autocast: Callable[[], contextlib.AbstractContextManager] | None = None):
        self.model, self.name, self.device = model, head, device
        self.head = model.get_submodule(head)
        self.autocast = autocast or contextlib.nullcontext
        self.failed = False
        self._features: dict[int, tuple[list[Tensor], Tensor]] = {}

    @property
    def ready(self) -> bool:
        """Features are kept (for at least one loader) and the head was found to be the model's last layer."""
        return bool(self._features) and not self.failed

    def load_head(self, state_dict: dict[str, Tensor]) -> None:
        """Load the head's entries of a member's whole ``state_dict`` into the head."""
        prefix = f"{self.name}."
        self.head.load_state_dict({key[len(prefix):]: value for key, value in state_dict.items()
                                   if key.startswith(prefix)})

    @torch.no_grad()
    def probs(self, loader) -> tuple[Tensor, Tensor]:
        """(probabilities, targets) on ``loader``, both on the CPU, as :func:`csg.evaluation.predict_probs` gives."""
        self.model.eval()
        if id(loader) not in self._features:
            return self._first_pass(loader)
        features, targets = self._features[id(loader)]
        return torch.cat([self._head_probs(f).cpu() for f in features]), targets

    def _head_probs(self, features: Tensor) -> Tensor:
        with self.autocast():
            logits = self.head(features)
        if not bool(torch.isfinite(logits).all()):
            logits = self.head(features.float())
        return torch.softmax(logits.float(), dim=1)

    def _first_pass(self, loader) -> tuple[Tensor, Tensor]:
        caught: list[Tensor] = []
        hook = self.head.register_forward_pre_hook(lambda module, inputs: caught.append(inputs[0].detach()))
        probs, targets, features = [], [], []
        try:
            for x, y in loader:
                x = x.to(self.device, non_blocking=True)
                with self.autocast():
                    logits = self.model(x)
                if not bool(torch.isfinite(logits).all()):  # float16 overflowed: the batch again in float32
                    caught.clear()
                    logits = self.model(x)
                if not features and not self._head_is_last(caught, logits):
                    self.failed = True
                features.append(caught[-1] if caught else None)
                caught.clear()
                probs.append(torch.softmax(logits.float(), dim=1).cpu())
                targets.append(y.cpu())
        finally:
            hook.remove()
        targets = torch.cat(targets)
        if not self.failed:
            self._features[id(loader)] = (features, targets)
        return torch.cat(probs), targets

    def _head_is_last(self, caught: list[Tensor], logits: Tensor) -> bool:
        """The head ran once on the batch and, applied to what it received, gives the model's logits."""
        if len(caught) != 1:
            return False
        with self.autocast():
            again = self.head(caught[0])
        return again.shape == logits.shape and torch.allclose(again.float(), logits.float(), rtol=1e-4, atol=1e-5)
