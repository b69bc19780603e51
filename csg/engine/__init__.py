"""The machinery of a run, below any command: from a config to trained chains and their samples.

- :mod:`csg.engine.build`: a config -> data, model, sampler, schedule; :mod:`csg.engine.limits`: the checks of
  memory, the model against the data and the step's values; :mod:`csg.components`: a user's own component
  named by ``_target_``;
- :mod:`csg.engine.chain`: one chain prepared for the loop (:class:`~csg.engine.chain.PreparedChain`);
- :mod:`csg.engine.loop`: the training loop around a sampler; :mod:`csg.engine.step`: one iteration, for one
  chain (``single``), K chains stacked (``stacked``) or on CUDA streams (``streamed``);
- :mod:`csg.engine.samples`: the sample files and their manifest;
- :mod:`csg.engine.checkpoint` (+ :mod:`csg.engine.portable`): checkpoints, preemption signals, resume;
- :mod:`csg.engine.rundir`: the run directory (its lock, Hydra's record, earlier results);
- :mod:`csg.engine.devices`, :mod:`csg.engine.distributed`, :mod:`csg.engine.interaction`,
  :mod:`csg.engine.loggers`, :mod:`csg.engine.memory`: devices and precision, DDP, interacting chains, loggers,
  the memory a run needs.
"""
