r"""The posterior benchmark's task as arrays: what ``python train.py experiment=posterior_benchmark`` trains on.

The reference sampler (:mod:`studies.benchmark.reference`) must target exactly the posterior that csg's runs of
the preset target, so the task is read from the same config (configs/experiment/posterior_benchmark.yaml, composed
by Hydra as train.py composes it) and built by the same code (:func:`csg.build`):

.. math::
    p(\theta \mid \mathcal D) \propto \exp\big(-U(\theta)/T\big), \qquad
    U(\theta) = \sum_{i=1}^N -\log \mathrm{softmax}(f_\theta(x_i))_{y_i} + \tfrac{N\,\mathrm{wd}}{2}\lVert\theta\rVert^2

(:class:`csg.samplers.SGLD`'s target). The MLP's first layers (``AvgPool2d``, ``Flatten``) have no parameters, so
the inputs are taken after them once (``features``), and :func:`logits` is the rest of the network in NumPy /
JAX array code, its weights flattened in the order of the torch model's ``state_dict`` (each ``Linear``'s
weight, (out, in), then its bias).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from csg.paths import CONFIGS

__all__ = ["PRESET", "Task", "check_layout", "command", "compose", "flatten_state", "load_task", "logits", "split"]

PRESET = "posterior_benchmark"


@dataclass(frozen=True)
class Task:
    """The arrays of the task at one temperature: features after the parameter-free layers (float32), labels
    (int64), the layer shapes ((out, in) per Linear), N, wd and T (the torch model comes beside it: :func:`load_task`)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    ood_x: np.ndarray
    ood_name: str
    layers: tuple[tuple[int, int], ...]
    num_data: int
    weight_decay: float
    temperature: float
    classes: int

    @property
    def dimension(self) -> int:
        return sum(out * inp + out for out, inp in self.layers)

    @property
    def prior_precision(self) -> float:
        """N wd: the Gaussian prior's precision in U (divided by T in the target)."""
        return self.num_data * self.weight_decay


def command(temperature: float, overrides: tuple[str, ...] = ()) -> list[str]:
    """The preset's train.py command at ``temperature`` (``sampler.temperature``), with ``overrides``."""
    return [f"experiment={PRESET}", f"sampler.temperature={temperature}", *overrides]


def compose(temperature: float, overrides: tuple[str, ...] = ()):
    """The preset's train.py config at ``temperature`` (``sampler.temperature``), with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return hydra_compose("config", overrides=command(temperature, overrides))


def split(model):
    """The model as (its parameter-free layers before the first Linear, the rest): ``Sequential`` s."""
    import torch

    first = next(index for index, layer in enumerate(model) if isinstance(layer, torch.nn.Linear))
    return torch.nn.Sequential(*list(model)[:first]), torch.nn.Sequential(*list(model)[first:])


def _features(model, loader) -> tuple[np.ndarray, np.ndarray]:
    """The inputs of the model's first Linear layer, and the labels (or None), over ``loader``."""
    import torch

    head = split(model)[0]
    xs, ys = [], []
    with torch.no_grad():
        for batch in loader:
            x, y = batch if isinstance(batch, (list, tuple)) else (batch, None)
            xs.append(head(x).float().numpy())
            if y is not None:
                ys.append(y.numpy())
    return np.concatenate(xs), (np.concatenate(ys).astype(np.int64) if ys else None)


def load_task(temperature: float, overrides: tuple[str, ...] = ()) -> tuple[Task, object]:
    """The task at ``temperature`` and the torch model it was read from (on the CPU)."""
    import torch

    import csg

    built = csg.build(command(temperature, overrides))
    cfg, data, model, ood_loader = built.config, built.data, built.model, built.ood
    model.eval()
    train_x, train_y = _features(model, data.train_eval)
    test_x, test_y = _features(model, data.test)
    ood_x = _features(model, ood_loader)[0] if ood_loader is not None else np.zeros((0, train_x.shape[1]), np.float32)
    layers = tuple((int(m.out_features), int(m.in_features)) for m in model if isinstance(m, torch.nn.Linear))
    task = Task(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y, ood_x=ood_x,
                ood_name=str(cfg.ood.name), layers=layers, num_data=int(data.num_train),
                weight_decay=float(cfg.sampler.weight_decay), temperature=float(cfg.sampler.temperature),
                classes=int(data.num_classes))
    return task, model


def logits(theta, x, layers, xp=np):
    """The network's logits on features ``x`` (rows, in) for one flattened ``theta``: ReLU between Linear layers.
    ``xp``: the array module (NumPy, or ``jax.numpy`` inside a potential)."""
    h, offset = x, 0
    for index, (out, inp) in enumerate(layers):
        weight = theta[offset: offset + out * inp].reshape(out, inp)
        bias = theta[offset + out * inp: offset + out * inp + out]
        offset += out * inp + out
        h = h @ weight.T + bias
        if index < len(layers) - 1:
            h = xp.maximum(h, 0.0)
    return h


def flatten_state(model) -> np.ndarray:
    """The torch model's parameters flattened in :func:`logits`' order (its ``state_dict`` order)."""
    return np.concatenate([p.detach().double().numpy().ravel() for p in model.parameters()])


def check_layout(task: Task, model, rng: np.random.Generator) -> float:
    """The largest difference between the torch model's logits and :func:`logits` at a random point (they are the
    same function when the layout is right); the torch model's weights are left as they were."""
    import torch

    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.from_numpy(rng.standard_normal(p.shape)).to(p.dtype))
        theta, tail = flatten_state(model), split(model)[1]
        with torch.no_grad():
            ours = tail(torch.from_numpy(task.test_x[:64])).double().numpy()
        return float(np.max(np.abs(ours - logits(theta, task.test_x[:64].astype(np.float64), task.layers))))
    finally:
        model.load_state_dict(saved)
