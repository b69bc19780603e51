"""Starting runs and ending them: what ``train.py``, :func:`csg.train` and SLURM jobs call.

- :mod:`csg.launch.run`: the life of one run (build, train every chain, collect, evaluate, write);
- :mod:`csg.launch.cli`: how a command ends (exit codes, the one-line message and the way on);
- :mod:`csg.launch.api`: :func:`csg.train`, ``train.py`` from Python;
- :mod:`csg.launch.slurm`: Hydra's submitit launcher whose jobs always end in a result.
"""
